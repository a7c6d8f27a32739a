// Theoretical peaks of the paths gpubench measures (HBM, PCIe, NVLink) and the GPU-pair links.
#include <algorithm>
#include <iterator>

#include "gpubench/core/system_detail.hpp"

namespace gpubench {

// PCIe payload bandwidth per direction: lanes x transfer rate x encoding efficiency / 8 bits.
// Gen1/2 use 8b/10b, Gen3-5 128b/130b, Gen6 FLIT mode (242 payload bytes of 256).
static double pcie_GBps(int gen, int width) {
  if (gen <= 0 || width <= 0) return 0;
  static constexpr double kGTps[] = {2.5, 5.0, 8.0, 16.0, 32.0, 64.0};
  if (gen > static_cast<int>(std::size(kGTps))) return 0;
  const double efficiency = gen <= 2 ? 8.0 / 10.0 : gen <= 5 ? 128.0 / 130.0 : 242.0 / 256.0;
  return kGTps[gen - 1] * efficiency * width / 8.0;
}

double PcieInfo::GBps_theoretical() const {
  return pcie_GBps(gen_max, width_max);
}
double PcieInfo::GBps_current() const {
  return pcie_GBps(gen_current, width_current);
}

// DDR memory moves two words per clock: MHz x 1e6 x 2 x bus bits / 8 = bytes/s.
// H100 SXM: 2619 MHz x 5120 bits -> 3352 GB/s; H200: 3201 MHz x 6016 bits (as CUDA reports it) ->
// 4814 GB/s (its spec sheet says 4.8 TB/s).
double GpuInfo::hbm_GBps_theoretical() const {
  if (memory_clock_max_MHz <= 0 || memory_bus_width_bits <= 0) return 0;
  return memory_clock_max_MHz * 1e6 * 2.0 * memory_bus_width_bits / 8.0 / 1e9;
}

const Link* System::link(int a, int b) const {
  if (a == b) return nullptr;
  const int lo = std::min(a, b), hi = std::max(a, b);
  for (const Link& l : links)
    if (l.a == lo && l.b == hi) return &l;
  return nullptr;
}

const GpuInfo* System::gpu(int index) const {
  for (const GpuInfo& g : gpus)
    if (g.index == index) return &g;
  return nullptr;
}

namespace detail {

int nvlink_generation(int cc_major, int cc_minor, std::optional<unsigned> nvml_version_enum) {
  if (cc_major == 6 && cc_minor == 0) return 1;                     // P100
  if (cc_major == 7 && cc_minor == 0) return 2;                     // V100
  if (cc_major == 8 && (cc_minor == 0 || cc_minor == 6)) return 3;  // A100, GA102 bridges
  if (cc_major == 9 && cc_minor == 0) return 4;                     // H100, H200, GH200
  if (cc_major == 10) return 5;                                     // B200, GB200, B300
  if (!nvml_version_enum) return 0;
  switch (*nvml_version_enum) {  // nvmlNvlinkVersion_t
    case 1:
      return 1;
    case 2:
    case 3:
      return 2;  // 2.0, 2.2
    case 4:
    case 5:
      return 3;  // 3.0, 3.1
    case 6:
      return 4;
    case 7:
      return 5;
    case 8:
      return 6;
    default:
      return 0;
  }
}

double nvlink_GBps_per_link_nominal(int generation) {
  switch (generation) {
    case 1:
      return 20.0;
    case 2:
      return 25.0;
    case 3:
      return 25.0;
    case 4:
      return 26.5625;  // 53.125 Gbaud PAM4 x 2 lanes x 2 bits / 8
    case 5:
      return 50.0;
    default:
      return 0.0;
  }
}

double nvlink_GBps_per_link(int generation, std::optional<double> nvml_reported_GBps) {
  const double nominal = nvlink_GBps_per_link_nominal(generation);
  if (nvml_reported_GBps && *nvml_reported_GBps > 0) {
    const double r = *nvml_reported_GBps;
    // NVML's figure is the link's actual rate; trust it unless it is off by more than 2x from
    // the generation's (a different unit or a driver bug).
    if (nominal > 0 ? (r >= nominal / 2 && r <= nominal * 2) : (r >= 1 && r <= 1000)) return r;
  }
  return nominal;
}

std::vector<Link> build_links(const std::vector<GpuInfo>& gpus, const std::vector<NvlinkEnds>& ends,
                              const std::vector<std::vector<bool>>& peer_access) {
  const int n = static_cast<int>(gpus.size());
  auto ends_of = [&](int i) -> const NvlinkEnds* {
    return i < static_cast<int>(ends.size()) ? &ends[i] : nullptr;
  };
  auto direct = [&](int from, int to) {
    const NvlinkEnds* e = ends_of(from);
    if (!e) return 0;
    const auto it = e->to_gpu.find(to);
    return it == e->to_gpu.end() ? 0 : it->second;
  };
  auto access = [&](int from, int to) {
    return from < static_cast<int>(peer_access.size()) &&
           to < static_cast<int>(peer_access[from].size()) && peer_access[from][to];
  };

  std::vector<Link> links;
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      Link l;
      l.a = gpus[a].index;
      l.b = gpus[b].index;
      l.p2p_access = access(a, b) && access(b, a);
      // Both ends should count the same direct links; when one side could not be read, the
      // other side's count stands.
      const int ab = direct(a, b), ba = direct(b, a);
      int count = (ab > 0 && ba > 0) ? std::min(ab, ba) : std::max(ab, ba);
      const NvlinkEnds* ea = ends_of(a);
      const NvlinkEnds* eb = ends_of(b);
      // Through NVSwitches every GPU reaches every other one over all its switch links, as long
      // as the fabric is up (peer access says so).
      if (ea && eb && ea->to_switch > 0 && eb->to_switch > 0 && l.p2p_access)
        count += std::min(ea->to_switch, eb->to_switch);
      if (count > 0) {
        double per_link = std::min(gpus[a].nvlink_GBps_per_link, gpus[b].nvlink_GBps_per_link);
        if (per_link <= 0)
          per_link = std::max(gpus[a].nvlink_GBps_per_link, gpus[b].nvlink_GBps_per_link);
        l.type = "NVLink";
        l.count = count;
        l.GBps_theoretical = count * per_link;
      } else {
        // Same host: traffic crosses PCIe, peer-to-peer or staged through host memory.
        l.type = "PCIe";
        l.GBps_theoretical =
            std::min(gpus[a].pcie.GBps_theoretical(), gpus[b].pcie.GBps_theoretical());
      }
      links.push_back(l);
    }
  }
  return links;
}

}  // namespace detail
}  // namespace gpubench
