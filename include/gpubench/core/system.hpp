#pragma once
// What this machine is: driver, libraries, GPUs, links. Discovered once per run (CUDA runtime
// + NVML loaded at run time + sysfs), recorded in every report and shown by `gpubench env`.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpubench {

struct PcieInfo {
  int gen_current = 0, gen_max = 0;
  int width_current = 0, width_max = 0;
  // Per-direction payload bandwidth of the link at its max generation and width (GB/s),
  // 0 when unknown. Gen3+ uses 128b/130b encoding, Gen1/2 8b/10b.
  double GBps_theoretical() const;
  double GBps_current() const;
};

struct GpuInfo {
  int index = -1;  // CUDA device index (after CUDA_VISIBLE_DEVICES)
  std::string name, uuid, pci_bus_id;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  std::uint64_t memory_bytes = 0, memory_free_bytes = 0;
  std::uint64_t l2_bytes = 0;
  int memory_bus_width_bits = 0;
  int memory_clock_max_MHz = 0;  // from NVML (max) or the CUDA attribute
  int sm_clock_current_MHz = 0, sm_clock_max_MHz = 0;
  int mem_clock_current_MHz = 0;
  bool ecc_enabled = false;
  std::optional<std::uint64_t> ecc_errors_corrected, ecc_errors_uncorrected;  // volatile counts
  double power_limit_W = 0;
  std::optional<bool> persistence_mode;
  std::optional<bool> mig_enabled;
  PcieInfo pcie;
  int nvlink_links_up = 0;
  double nvlink_GBps_per_link = 0;  // per direction
  int nvlink_version = 0;
  std::string numa_node;                   // from sysfs, "" when unknown
  std::string cpu_affinity;                // "0-31,64-95"
  std::uint64_t clocks_event_reasons = 0;  // throttle reasons at discovery time

  // HBM peak from the max memory clock x bus width x 2 (DDR), bytes/s / 1e9; 0 when unknown.
  double hbm_GBps_theoretical() const;
};

// How two GPUs are connected.
struct Link {
  int a = -1, b = -1;
  std::string type;             // "NVLink", "PCIe", "none"
  int count = 0;                // NVLink links between the pair
  double GBps_theoretical = 0;  // per direction
  bool p2p_access = false;      // cudaDeviceCanAccessPeer both ways
};

struct System {
  std::string hostname;
  std::string driver_version;       // "580.159.04" or "" when no driver
  std::string cuda_driver_version;  // "13.0"
  std::string cuda_runtime_version;
  std::string nccl_version;  // loaded library's version
  std::string cublas_version;
  std::string cudnn_version, cudnn_error;  // "9.19.0" (prefill attention), or why it is not usable
  std::string mpi_version;  // "" when built without MPI
  bool nvml_available = false;
  std::string nvml_error;     // why not, when unavailable
  std::string no_gpu_reason;  // "" when at least one GPU is usable
  std::vector<GpuInfo> gpus;
  std::vector<Link> links;      // every unordered pair a<b
  std::uint64_t shm_bytes = 0;  // /dev/shm size
  // The variables of the process's environment that change what CUDA, NCCL, cuBLAS or cuDNN do
  // (relevant_environment), sorted by name: a report made under NCCL_ALGO=Ring or
  // CUDA_DEVICE_MAX_CONNECTIONS=32 says so.
  std::vector<std::pair<std::string, std::string>> environment;
  std::vector<std::string> warnings;  // what will cap performance

  const Link* link(int a, int b) const;  // order-insensitive; nullptr when a==b or unknown
  const GpuInfo* gpu(int index) const;
  nlohmann::ordered_json to_json() const;

  // Full discovery. Never throws for a missing driver/GPU: sets no_gpu_reason instead.
  // `warm_pcie` runs a short host->device copy on each GPU first so the current PCIe
  // generation is read under load rather than at idle.
  static System discover(bool warm_pcie = false);

  // The NAME=VALUE entries of `envp` (null-terminated, as `environ`) whose names start with
  // CUDA_, NCCL_, CUBLAS, CUDNN_ or OMP_, sorted by name; entries without '=' are skipped.
  static std::vector<std::pair<std::string, std::string>> relevant_environment(
      const char* const* envp);
};

}  // namespace gpubench
