// System::discover: the CUDA runtime, NVML (loaded at run time), library versions and sysfs.
// The GPUs are probed in parallel (a context each, an optional PCIe warm-up copy) so that
// `gpubench env` stays fast on many GPUs.
#include "gpubench/core/system.hpp"
#include "gpubench/core/cudnn_attention.hpp"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>
#include <sys/statvfs.h>
#include <unistd.h>
#ifdef GPUBENCH_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API is enough; the C++ bindings do not build warning-free
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <exception>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <regex>
#include <sstream>
#include <thread>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/nvml.hpp"
#include "gpubench/core/system_detail.hpp"

namespace gpubench {

namespace {

// The warm-up copy: large enough to keep the link busy for a while at Gen1, small enough to be
// quick at Gen5 (64 MiB ~ 1 ms). Links train up on demand and idle down to Gen1 on purpose.
constexpr std::size_t kWarmBytes = std::size_t(64) << 20;
constexpr int kWarmRounds = 8;

// CUDA's version integers are 1000 x major + 10 x minor.
std::string cuda_version_string(int v) {
  if (v <= 0) return {};
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

std::string nccl_version_string() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess || v <= 0) return {};
  // NCCL codes are 1000 x major + 100 x minor + patch up to 2.8, then 10000 x major + ...
  if (v >= 10000) return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
  return fmt::format("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100);
}

std::string cublas_version_string() {
  const std::size_t v = cublasLtGetVersion();  // 10000 x major + 100 x minor + patch
  if (v == 0) return {};
  return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
}

std::string mpi_version_string() {
#ifdef GPUBENCH_HAVE_MPI
  // One of the few MPI calls allowed before MPI_Init: no MPI runtime is started here.
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return {};
  std::string version(text, static_cast<std::size_t>(std::max(0, length)));
  // "Open MPI v4.1.6, package: ..., repo rev: ..." -> "Open MPI v4.1.6": the first line, up to
  // the first comma, names the library and its version.
  version = version.substr(0, version.find_first_of("\n,"));
  while (!version.empty() &&
         (version.back() == '\0' || std::isspace(static_cast<unsigned char>(version.back()))))
    version.pop_back();
  return version;
#else
  return {};
#endif
}

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return {};
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

// Without NVML the kernel module still says its version:
// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  ...".
std::string driver_version_from_proc() {
  const std::string line = read_first_line("/proc/driver/nvidia/version");
  static const std::regex version(R"((^|\s)(\d+\.\d+(\.\d+)?)(\s|$))");
  std::smatch m;
  if (std::regex_search(line, m, version)) return m[2].str();
  return {};
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return {};
  return name;
}

std::uint64_t shm_size_bytes() {
  struct statvfs fs {};
  if (statvfs("/dev/shm", &fs) != 0) return 0;
  return static_cast<std::uint64_t>(fs.f_blocks) * fs.f_frsize;
}

// The far end of one active NVLink, as NVML names it.
struct LinkEnd {
  std::string bus_id;                  // "" when NVML could not say
  std::optional<nvml::LinkPeer> type;  // nothing on drivers without the query
};

// Static properties from the CUDA runtime (no context needed).
void fill_from_cuda(GpuInfo& g, int device) {
  cudaDeviceProp prop{};
  GPB_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  g.index = device;
  g.name = prop.name;
  g.uuid = format_gpu_uuid(prop.uuid.bytes);
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device) == cudaSuccess)
    g.pci_bus_id = canonical_pci_bus_id(bus_id);
  else
    (void)cudaGetLastError();
  g.cc_major = prop.major;
  g.cc_minor = prop.minor;
  g.sm_count = prop.multiProcessorCount;
  g.memory_bytes = prop.totalGlobalMem;
  g.l2_bytes = static_cast<std::uint64_t>(std::max(0, prop.l2CacheSize));
  // CUDA 13 dropped the clock and bus fields from cudaDeviceProp: attributes still have them.
  auto attribute = [device](cudaDeviceAttr a) {
    int v = 0;
    if (cudaDeviceGetAttribute(&v, a, device) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return v;
  };
  g.memory_bus_width_bits = attribute(cudaDevAttrGlobalMemoryBusWidth);
  g.memory_clock_max_MHz = attribute(cudaDevAttrMemoryClockRate) / 1000;  // kHz
  g.sm_clock_max_MHz = attribute(cudaDevAttrClockRate) / 1000;            // kHz
  g.ecc_enabled = attribute(cudaDevAttrEccEnabled) != 0;
}

// NUMA node and the CPUs close to the GPU, as the kernel sees its PCI device.
void fill_from_sysfs(GpuInfo& g) {
  if (g.pci_bus_id.empty()) return;
  const std::string dir = "/sys/bus/pci/devices/" + g.pci_bus_id + "/";
  const std::string node = read_first_line(dir + "numa_node");
  g.numa_node = (node.empty() || node[0] == '-') ? "" : node;  // -1: no NUMA information
  g.cpu_affinity = read_first_line(dir + "local_cpulist");
}

// Everything NVML knows about one GPU that does not change with load. `link_ends` gets the far
// end of every active NVLink.
void fill_from_nvml(GpuInfo& g, const Nvml& nvml, nvml::Device d, std::vector<LinkEnd>& link_ends) {
  using nvml::Clock;
  if (auto v = nvml.max_clock_MHz(d, Clock::Sm); v && *v > 0)
    g.sm_clock_max_MHz = static_cast<int>(*v);
  if (auto v = nvml.max_clock_MHz(d, Clock::Memory); v && *v > 0)
    g.memory_clock_max_MHz = static_cast<int>(*v);
  if (auto v = nvml.ecc_enabled(d)) g.ecc_enabled = *v;
  if (g.ecc_enabled) {
    g.ecc_errors_corrected = nvml.ecc_errors(d, false);
    g.ecc_errors_uncorrected = nvml.ecc_errors(d, true);
  }
  g.power_limit_W = nvml.power_limit_W(d).value_or(0);
  g.persistence_mode = nvml.persistence_mode(d);
  g.mig_enabled = nvml.mig_enabled(d);
  g.pcie.gen_max = nvml.pcie_gen_max(d).value_or(0);
  g.pcie.width_max = nvml.pcie_width_max(d).value_or(0);

  const unsigned links = std::min(nvml.nvlink_link_count(d).value_or(nvml::kDefaultMaxLinks), 64u);
  std::optional<unsigned> version;
  for (unsigned link = 0; link < links; ++link) {
    if (!nvml.nvlink_active(d, link).value_or(false)) continue;
    ++g.nvlink_links_up;
    if (!version) version = nvml.nvlink_version(d, link);
    link_ends.push_back(
        {nvml.nvlink_remote_pci_bus_id(d, link).value_or(""), nvml.nvlink_remote_type(d, link)});
  }
  if (g.nvlink_links_up > 0) {
    g.nvlink_version = detail::nvlink_generation(g.cc_major, g.cc_minor, version);
    g.nvlink_GBps_per_link =
        detail::nvlink_GBps_per_link(g.nvlink_version, nvml.nvlink_speed_GBps(d));
  }
}

// Reads the PCIe link while host->device copies keep it busy, keeping the highest generation
// and width seen; stops early once the link reports its maximum.
void read_pcie_under_load(GpuInfo& g, const Nvml& nvml, nvml::Device d, const PinnedBuffer& src) {
  auto sample = [&] {
    g.pcie.gen_current = std::max(g.pcie.gen_current, nvml.pcie_gen_current(d).value_or(0));
    g.pcie.width_current = std::max(g.pcie.width_current, nvml.pcie_width_current(d).value_or(0));
    return g.pcie.gen_current >= g.pcie.gen_max && g.pcie.width_current >= g.pcie.width_max;
  };
  DeviceBuffer dst(g.index, src.bytes());
  Stream stream(g.index);
  for (int round = 0; round < kWarmRounds; ++round) {
    GPB_CUDA_CHECK(
        cudaMemcpyAsync(dst.get(), src.get(), src.bytes(), cudaMemcpyHostToDevice, stream));
    bool at_max = false;
    cudaError_t state;
    while ((state = cudaStreamQuery(stream)) == cudaErrorNotReady) {
      at_max = sample() || at_max;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    GPB_CUDA_CHECK(state);
    if (sample() || at_max) break;
  }
  stream.synchronize();
}

// Per-GPU work that needs a context (free memory, the warm-up copy) or is slow (NVML), run on
// its own thread. Failures become `error` instead of escaping the thread.
void probe_gpu(GpuInfo& g, const PinnedBuffer* warm_src, std::vector<LinkEnd>& link_ends,
               std::string& error) noexcept {
  try {
    GPB_CUDA_CHECK(cudaSetDevice(g.index));
    std::size_t free_bytes = 0, total_bytes = 0;
    GPB_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    g.memory_free_bytes = free_bytes;

    const Nvml& nvml = Nvml::get();
    const std::optional<nvml::Device> d = nvml.device_for_cuda(g.index);
    if (!d) return;
    fill_from_nvml(g, nvml, *d, link_ends);
    if (warm_src) {
      try {
        read_pcie_under_load(g, nvml, *d, *warm_src);
      } catch (const std::exception& e) {  // e.g. a GPU full of another job's data
        error = std::string("PCIe warm-up failed, link read at idle: ") + e.what();
      }
    }
    g.pcie.gen_current = std::max(g.pcie.gen_current, nvml.pcie_gen_current(*d).value_or(0));
    g.pcie.width_current = std::max(g.pcie.width_current, nvml.pcie_width_current(*d).value_or(0));
    g.sm_clock_current_MHz = static_cast<int>(nvml.clock_MHz(*d, nvml::Clock::Sm).value_or(0));
    g.mem_clock_current_MHz = static_cast<int>(nvml.clock_MHz(*d, nvml::Clock::Memory).value_or(0));
    g.clocks_event_reasons = nvml.clocks_event_reasons(*d).value_or(0);
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "unknown error";
  }
}

// Where each GPU's NVLinks end: a visible GPU, an NVSwitch, or a GPU outside this process's
// view (CUDA_VISIBLE_DEVICES), which does not count. A link whose far end NVML cannot name is
// taken for a switch link; build_links credits switch links only to pairs with peer access.
std::vector<detail::NvlinkEnds> classify_nvlink_ends(
    const std::vector<GpuInfo>& gpus, const std::vector<std::vector<LinkEnd>>& link_ends) {
  const Nvml& nvml = Nvml::get();
  std::vector<detail::NvlinkEnds> ends(gpus.size());
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    for (const LinkEnd& end : link_ends[i]) {
      if (end.type == nvml::LinkPeer::Switch) {
        ++ends[i].to_switch;
        continue;
      }
      const auto peer = std::find_if(gpus.begin(), gpus.end(), [&](const GpuInfo& g) {
        return !end.bus_id.empty() && g.pci_bus_id == end.bus_id;
      });
      if (peer != gpus.end())
        ++ends[i].to_gpu[static_cast<int>(peer - gpus.begin())];
      else if (end.type == nvml::LinkPeer::Gpu ||
               (!end.bus_id.empty() && nvml.device_by_pci_bus_id(end.bus_id)))
        continue;  // a GPU this process does not see
      else
        ++ends[i].to_switch;
    }
  }
  return ends;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> System::relevant_environment(
    const char* const* envp) {
  static const char* const kPrefixes[] = {"CUDA_", "NCCL_", "CUBLAS", "CUDNN_", "OMP_"};
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* const* e = envp; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    const std::string name = entry.substr(0, eq);
    for (const char* prefix : kPrefixes)
      if (name.rfind(prefix, 0) == 0) {
        out.emplace_back(name, entry.substr(eq + 1));
        break;
      }
  }
  std::sort(out.begin(), out.end());
  return out;
}

System System::discover(bool warm_pcie) {
  System s;
  // NVML's start-up (slow without persistence mode) overlaps the CUDA driver's.
  std::future<const Nvml*> nvml_loading =
      std::async(std::launch::async, [] { return &Nvml::get(); });

  s.hostname = host_name();
  s.shm_bytes = shm_size_bytes();
  s.environment = relevant_environment(environ);
  s.nccl_version = nccl_version_string();
  s.cublas_version = cublas_version_string();
  if (CudnnAttention::library_available())
    s.cudnn_version = CudnnAttention::library_status().substr(std::string("cuDNN ").size());
  else
    s.cudnn_error = CudnnAttention::library_status();
  s.mpi_version = mpi_version_string();
  int v = 0;
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) s.cuda_runtime_version = cuda_version_string(v);
  v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess) s.cuda_driver_version = cuda_version_string(v);
  (void)cudaGetLastError();

  const int count = visible_device_count();
  if (count == 0) s.no_gpu_reason = gpubench::no_gpu_reason();

  const Nvml& nvml = *nvml_loading.get();
  s.nvml_available = nvml.available();
  s.nvml_error = nvml.error();
  s.driver_version = nvml.driver_version().value_or("");
  if (s.driver_version.empty()) s.driver_version = driver_version_from_proc();

  for (int i = 0; i < count; ++i) {
    GpuInfo g;
    try {
      fill_from_cuda(g, i);
    } catch (const std::exception& e) {
      s.warnings.push_back(fmt::format("GPU {}: cannot read its properties: {}", i, e.what()));
      continue;
    }
    fill_from_sysfs(g);
    s.gpus.push_back(std::move(g));
  }

  std::unique_ptr<PinnedBuffer> warm_src;
  if (warm_pcie && nvml.available() && !s.gpus.empty()) {
    try {
      warm_src = std::make_unique<PinnedBuffer>(kWarmBytes);
    } catch (const std::exception& e) {
      s.warnings.push_back(fmt::format("PCIe warm-up skipped: {}", e.what()));
    }
  }

  const std::size_t n = s.gpus.size();
  std::vector<std::vector<LinkEnd>> link_ends(n);
  std::vector<std::string> errors(n);
  {
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < n; ++i)
      threads.emplace_back(probe_gpu, std::ref(s.gpus[i]), warm_src.get(), std::ref(link_ends[i]),
                           std::ref(errors[i]));
    for (std::thread& t : threads) t.join();
  }
  for (std::size_t i = 0; i < n; ++i)
    if (!errors[i].empty())
      s.warnings.push_back(fmt::format("{}: could not be probed fully: {}",
                                       detail::describe_gpu(s.gpus[i]), errors[i]));

  std::vector<std::vector<bool>> peer_access(n, std::vector<bool>(n, false));
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      int can = 0;
      if (i != j && cudaDeviceCanAccessPeer(&can, s.gpus[i].index, s.gpus[j].index) == cudaSuccess)
        peer_access[i][j] = can != 0;
      (void)cudaGetLastError();
    }
  }
  s.links = detail::build_links(s.gpus, classify_nvlink_ends(s.gpus, link_ends), peer_access);

  std::vector<std::string> found = detail::system_warnings(s, warm_src != nullptr);
  s.warnings.insert(s.warnings.end(), found.begin(), found.end());
  return s;
}

}  // namespace gpubench
