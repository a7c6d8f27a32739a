#pragma once
// Internal pieces of system discovery shared by system*.cpp and their unit tests: the NVLink
// topology model, the per-generation tables and the warning rules.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gpubench/core/system.hpp"

namespace gpubench::detail {

// Where one GPU's active NVLinks end: at another visible GPU (direct links) or at an NVSwitch
// (every GPU on the same switches reaches every other one with peer access over all its switch
// links).
struct NvlinkEnds {
  std::map<int, int> to_gpu;  // position in System::gpus -> links to it
  int to_switch = 0;
};

// NVLink generation (1..6) of a GPU: its architecture when known, because some drivers report
// NVML's version enum wrongly (Hopper as NVLink 5.0); NVML's enum otherwise; 0 when unknown.
int nvlink_generation(int cc_major, int cc_minor, std::optional<unsigned> nvml_version_enum);
// Nominal per-link, per-direction bandwidth of an NVLink generation in GB/s; 0 when unknown.
double nvlink_GBps_per_link_nominal(int generation);
// Per-link speed to use: NVML's reported speed when it is plausible for the generation,
// otherwise the nominal figure.
double nvlink_GBps_per_link(int generation, std::optional<double> nvml_reported_GBps);

// One Link per unordered pair a<b of `gpus` (positions = CUDA indices). `peer_access[i][j]`:
// cudaDeviceCanAccessPeer(i -> j).
std::vector<Link> build_links(const std::vector<GpuInfo>& gpus, const std::vector<NvlinkEnds>& ends,
                              const std::vector<std::vector<bool>>& peer_access);

// What will cap performance on `system`, one clear sentence each. PCIe generation warnings
// only when the links were read under load (they idle down to Gen1 on purpose).
std::vector<std::string> system_warnings(const System& system, bool pcie_read_under_load);

// "GPU 0 (NVIDIA H200, 0000:18:00.0)"
std::string describe_gpu(const GpuInfo& gpu);

}  // namespace gpubench::detail
