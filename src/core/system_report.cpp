// The system as a report sees it: System::to_json (the "system" object of every report) and
// the warnings about what will cap performance on this machine.
#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "gpubench/core/monitor.hpp"
#include "gpubench/core/system_detail.hpp"
#include "gpubench/core/units.hpp"

namespace gpubench {

namespace {

using ojson = nlohmann::ordered_json;

// Unknown values become null here and are left out of the final object (drop_unknown), so a
// reader's value(key, default) applies; they are never written as 0 or "".
ojson text_or_null(const std::string& s) {
  return s.empty() ? ojson(nullptr) : ojson(s);
}
template <class T>
ojson positive_or_null(T v) {
  return v > 0 ? ojson(v) : ojson(nullptr);
}
template <class T>
ojson optional_or_null(const std::optional<T>& v) {
  return v ? ojson(*v) : ojson(nullptr);
}
// Two decimals are plenty for a theoretical GB/s and keep the JSON readable.
ojson rounded_or_null(double v) {
  return v > 0 ? ojson(std::round(v * 100.0) / 100.0) : ojson(nullptr);
}
ojson numa_node_json(const std::string& node) {
  if (node.empty()) return nullptr;
  try {
    const int n = std::stoi(node);
    return n >= 0 ? ojson(n) : ojson(nullptr);
  } catch (const std::exception&) {
    return nullptr;
  }
}

ojson gpu_json(const GpuInfo& g, bool nvml_available) {
  ojson j;
  j["index"] = g.index;
  j["name"] = g.name;
  j["uuid"] = text_or_null(g.uuid);
  j["pci_bus_id"] = text_or_null(g.pci_bus_id);
  j["cc"] = fmt::format("{}.{}", g.cc_major, g.cc_minor);
  j["sm_count"] = g.sm_count;
  j["memory_bytes"] = g.memory_bytes;
  j["memory_free_bytes"] = positive_or_null(g.memory_free_bytes);
  j["l2_bytes"] = g.l2_bytes;
  j["memory_bus_width_bits"] = positive_or_null(g.memory_bus_width_bits);
  j["memory_clock_max_MHz"] = positive_or_null(g.memory_clock_max_MHz);
  j["hbm_GBps_theoretical"] = rounded_or_null(g.hbm_GBps_theoretical());
  j["sm_clock_max_MHz"] = positive_or_null(g.sm_clock_max_MHz);
  j["sm_clock_current_MHz"] = positive_or_null(g.sm_clock_current_MHz);
  j["mem_clock_current_MHz"] = positive_or_null(g.mem_clock_current_MHz);
  j["power_limit_W"] = positive_or_null(g.power_limit_W);
  j["ecc"] = {{"enabled", g.ecc_enabled},
              {"errors_corrected", optional_or_null(g.ecc_errors_corrected)},
              {"errors_uncorrected", optional_or_null(g.ecc_errors_uncorrected)}};
  j["persistence_mode"] = optional_or_null(g.persistence_mode);
  j["mig_enabled"] = optional_or_null(g.mig_enabled);
  j["pcie"] = {{"gen_current", positive_or_null(g.pcie.gen_current)},
               {"gen_max", positive_or_null(g.pcie.gen_max)},
               {"width_current", positive_or_null(g.pcie.width_current)},
               {"width_max", positive_or_null(g.pcie.width_max)},
               {"GBps_theoretical", rounded_or_null(g.pcie.GBps_theoretical())},
               {"GBps_current", rounded_or_null(g.pcie.GBps_current())}};
  j["nvlink"] = {{"links_up", nvml_available ? ojson(g.nvlink_links_up) : ojson(nullptr)},
                 {"version", positive_or_null(g.nvlink_version)},
                 {"GBps_per_link", positive_or_null(g.nvlink_GBps_per_link)},
                 {"GBps", rounded_or_null(g.nvlink_links_up * g.nvlink_GBps_per_link)}};
  j["numa_node"] = numa_node_json(g.numa_node);
  j["cpu_affinity"] = text_or_null(g.cpu_affinity);
  if (nvml_available) {
    j["clocks_event_reasons"] = throttle_reason_names(g.clocks_event_reasons);
    j["throttled"] = throttling_reasons(g.clocks_event_reasons) != 0;
  } else {
    j["clocks_event_reasons"] = nullptr;
    j["throttled"] = nullptr;
  }
  return j;
}

void drop_unknown(ojson& j) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end();) {
      if (it->is_null()) {
        it = j.erase(it);
      } else {
        drop_unknown(*it);
        ++it;
      }
    }
  } else if (j.is_array()) {
    for (ojson& e : j) drop_unknown(e);
  }
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

}  // namespace

nlohmann::ordered_json System::to_json() const {
  ojson j;
  j["hostname"] = text_or_null(hostname);
  j["driver"] = text_or_null(driver_version);
  j["cuda_driver"] = text_or_null(cuda_driver_version);
  j["cuda_runtime"] = text_or_null(cuda_runtime_version);
  j["nccl"] = text_or_null(nccl_version);
  j["cublas"] = text_or_null(cublas_version);
  j["cudnn"] = text_or_null(cudnn_version);
  if (!cudnn_error.empty()) j["cudnn_error"] = cudnn_error;
  j["mpi"] = text_or_null(mpi_version);
  j["nvml"] = {{"available", nvml_available}, {"error", text_or_null(nvml_error)}};
  j["no_gpu_reason"] = text_or_null(no_gpu_reason);
  j["gpu_count"] = gpus.size();
  j["gpus"] = ojson::array();
  for (const GpuInfo& g : gpus) j["gpus"].push_back(gpu_json(g, nvml_available));
  j["links"] = ojson::array();
  for (const Link& l : links) {
    j["links"].push_back({{"a", l.a},
                          {"b", l.b},
                          {"type", l.type},
                          {"count", l.count},
                          {"GBps_theoretical", rounded_or_null(l.GBps_theoretical)},
                          {"p2p_access", l.p2p_access}});
  }
  j["shm_bytes"] = positive_or_null(shm_bytes);
  j["environment"] = ojson::object();
  for (const auto& [name, value] : environment) j["environment"][name] = value;
  drop_unknown(j);
  return j;
}

namespace detail {

std::string describe_gpu(const GpuInfo& gpu) {
  if (gpu.pci_bus_id.empty()) return fmt::format("GPU {} ({})", gpu.index, gpu.name);
  return fmt::format("GPU {} ({}, {})", gpu.index, gpu.name, gpu.pci_bus_id);
}

std::vector<std::string> system_warnings(const System& system, bool pcie_read_under_load) {
  std::vector<std::string> w;
  if (!system.gpus.empty() && !system.nvml_available)
    w.push_back(
        fmt::format("NVML is unavailable ({}): clocks, PCIe link state, NVLink, ECC and "
                    "throttling cannot be checked.",
                    system.nvml_error));

  for (const GpuInfo& g : system.gpus) {
    const PcieInfo& p = g.pcie;
    const bool gen_low = pcie_read_under_load && p.gen_current > 0 && p.gen_current < p.gen_max;
    const bool width_low = p.width_current > 0 && p.width_current < p.width_max;
    if (gen_low || width_low)
      w.push_back(
          fmt::format("{}: PCIe link runs at Gen{} x{}, below its maximum Gen{} x{}: host<->device "
                      "transfers are capped near {:.1f} GB/s instead of {:.1f} GB/s.",
                      describe_gpu(g), p.gen_current, p.width_current, p.gen_max, p.width_max,
                      p.GBps_current(), p.GBps_theoretical()));
    if (g.ecc_errors_uncorrected && *g.ecc_errors_uncorrected > 0)
      w.push_back(
          fmt::format("{}: {} uncorrected ECC errors since the driver loaded: its memory "
                      "is suspect; drain the node and reset the GPU.",
                      describe_gpu(g), *g.ecc_errors_uncorrected));
    if (g.ecc_errors_corrected && *g.ecc_errors_corrected > 0)
      w.push_back(
          fmt::format("{}: {} corrected ECC errors since the driver loaded; a rising count "
                      "often precedes uncorrectable ones.",
                      describe_gpu(g), *g.ecc_errors_corrected));
    if (const std::uint64_t reasons = throttling_reasons(g.clocks_event_reasons))
      w.push_back(
          fmt::format("{}: clocks are throttled now ({}): results will read low until "
                      "the cause is fixed.",
                      describe_gpu(g), join(throttle_reason_names(reasons), ", ")));
    if (g.mig_enabled.value_or(false))
      w.push_back(
          fmt::format("{}: MIG is enabled: CUDA sees MIG instances, not the whole GPU, so "
                      "figures are not those of the full GPU.",
                      describe_gpu(g)));
  }

  std::vector<std::string> no_p2p;
  for (const Link& l : system.links)
    if (!l.p2p_access) no_p2p.push_back(fmt::format("{}-{}", l.a, l.b));
  if (!no_p2p.empty())
    w.push_back(
        fmt::format("No peer-to-peer access between GPUs {}: copies between them go "
                    "through host memory and NCCL cannot use direct GPU paths.",
                    join(no_p2p, ", ")));

  std::vector<std::string> persistence_off;
  for (const GpuInfo& g : system.gpus)
    if (g.persistence_mode && !*g.persistence_mode)
      persistence_off.push_back(std::to_string(g.index));
  if (!persistence_off.empty())
    w.push_back(
        fmt::format("Persistence mode is off on GPU {}: every new process pays the "
                    "driver's start-up time (enable it with nvidia-smi -pm 1).",
                    join(persistence_off, ", ")));

  constexpr std::uint64_t kMinShm = 1ULL << 30;
  if (system.shm_bytes == 0)
    w.push_back(
        "/dev/shm is missing or unreadable: NCCL's shared-memory transport will fail "
        "(give containers --shm-size=1g or more).");
  else if (system.shm_bytes < kMinShm)
    w.push_back(
        fmt::format("/dev/shm is only {} (< 1 GiB): NCCL may fail or slow down with "
                    "several GPUs (give containers --shm-size=1g or more).",
                    format_bytes(system.shm_bytes)));
  return w;
}

}  // namespace detail
}  // namespace gpubench
