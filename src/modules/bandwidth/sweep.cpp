// Bandwidth against transfer size over the copy engines: one representative GPU pair per kind
// of link found (NVLink xN, PCIe) plus host->device and device->host, each point verified.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <set>

#include "gpubench/core/units.hpp"
#include "gpubench/modules/bandwidth/bandwidth.hpp"

namespace gpubench::bandwidth {

namespace {

constexpr const char* kGroup = "Size sweep, copy engine";

enum class PathKind { Peer, HostToDevice, DeviceToHost };

struct Path {
  PathKind kind;
  int a = -1, b = -1;  // peer: source and destination GPU; host paths: the GPU in a
  std::string label;
  double peak = 0;
};

std::vector<Path> choose_paths(RunState& rs) {
  const std::vector<int>& gpus = rs.ctx.gpus();
  const System& sys = rs.ctx.system();
  std::vector<Path> paths;
  if (gpus.size() >= 2) {
    const PeerAccess peers(gpus);
    std::set<std::string> seen;
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      for (std::size_t j = i + 1; j < gpus.size(); ++j) {
        if (!peers.pair(gpus[i], gpus[j])) continue;
        const std::string link = link_name(sys, gpus[i], gpus[j]);
        if (!seen.insert(link).second) continue;
        paths.push_back({PathKind::Peer, gpus[i], gpus[j],
                         fmt::format("{}->{} ({})", gpu_label(gpus[i]), gpu_label(gpus[j]), link),
                         link_peak(sys, gpus[i], gpus[j])});
      }
    }
  }
  const int g = gpus.front();
  const GpuInfo* info = sys.gpu(g);
  const double pcie = info ? info->pcie.GBps_theoretical() : 0;
  paths.push_back(
      {PathKind::HostToDevice, g, -1, fmt::format("H2D {} (pinned)", gpu_label(g)), pcie});
  paths.push_back(
      {PathKind::DeviceToHost, g, -1, fmt::format("D2H {} (pinned)", gpu_label(g)), pcie});
  return paths;
}

void sweep_path(RunState& rs, const Path& path, Sweep& sweep) {
  const std::vector<std::uint64_t>& sizes = rs.settings.sweep_sizes;
  const std::size_t max_bytes = sizes.back();
  const std::uint64_t seed = seed_for("sweep." + path.label, 0);
  Lane& la = rs.lanes.of(path.a);
  Lane& dst_lane = rs.lanes.of(path.kind == PathKind::Peer ? path.b : path.a);

  // Source and destination at the largest size; smaller sizes use their prefixes, whose
  // pattern is the prefix of the whole pattern.
  DeviceBuffer dev_src, dev_dst;
  PinnedBuffer host;
  const void* src = nullptr;
  void* dst = nullptr;
  switch (path.kind) {
    case PathKind::Peer:
      dev_src = DeviceBuffer(path.a, max_bytes);
      dev_dst = DeviceBuffer(path.b, max_bytes);
      device_pattern_fill(la, dev_src.get(), max_bytes, seed);
      src = dev_src.get();
      dst = dev_dst.get();
      break;
    case PathKind::HostToDevice:
      host = PinnedBuffer(max_bytes);
      dev_dst = DeviceBuffer(path.a, max_bytes);
      host_pattern_fill(host.get(), max_bytes, seed);
      src = host.get();
      dst = dev_dst.get();
      break;
    case PathKind::DeviceToHost:
      dev_src = DeviceBuffer(path.a, max_bytes);
      host = PinnedBuffer(max_bytes);
      device_pattern_fill(la, dev_src.get(), max_bytes, seed);
      src = dev_src.get();
      dst = host.get();
      break;
  }

  Series series;
  series.label = path.label;
  for (std::uint64_t bytes : sizes) {
    if (Context::interrupted()) break;
    const int k = repeats_for(bytes, path.peak > 0 ? path.peak : kLinkGuessGBps);
    if (path.kind == PathKind::DeviceToHost)
      std::memset(dst, 0, bytes);
    else
      device_clear(dst_lane, dst, bytes);
    const Measurement m = rs.ctx.measure(path.a, la.main, [&](cudaStream_t s, int) {
      if (path.kind == PathKind::Peer) {
        peer_copies(dst, path.b, src, path.a, bytes, k, s);
      } else {
        const auto kind =
            path.kind == PathKind::HostToDevice ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
        for (int r = 0; r < k; ++r) GPB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
      }
    });
    const std::uint64_t bad = path.kind == PathKind::DeviceToHost
                                  ? host_pattern_mismatches(dst, bytes, seed)
                                  : device_pattern_mismatches(dst_lane, dst, bytes, seed);
    const std::string name = fmt::format("{} {}", path.label, format_bytes_short(bytes));
    nlohmann::ordered_json params = {{"path", path.label}, {"bytes", bytes}};
    if (bad) {
      const std::string note = mismatch_note(bad, bytes);
      spdlog::error("bandwidth: {} {}: {}", kGroup, name, note);
      rs.report.add(failed_case(kGroup, name, std::move(params), note));
      continue;
    }
    CaseResult& c = rs.report.add(
        bandwidth_case(kGroup, name, std::move(params), double(bytes) * k, k, m, path.peak));
    const double v = c.metrics.front().second.value;
    spdlog::debug("bandwidth: {} {}: {:.2f} GB/s", kGroup, name, v);
    series.x.push_back(static_cast<double>(bytes));
    series.y.push_back(v);
  }
  sweep.series.push_back(std::move(series));
}

}  // namespace

void run_sweep(RunState& rs) {
  Sweep sweep;
  sweep.name = "transfer_size_sweep";
  sweep.title = "Copy-engine bandwidth against transfer size";
  sweep.x_label = "size";
  sweep.x_unit = "bytes";
  sweep.y_label = "bandwidth";
  sweep.y_unit = "GB/s";
  sweep.log_x = true;
  for (const Path& path : choose_paths(rs)) {
    if (Context::interrupted()) break;
    spdlog::info("bandwidth: size sweep {}", path.label);
    sweep_path(rs, path, sweep);
  }
  rs.report.sweeps.push_back(std::move(sweep));
}

}  // namespace gpubench::bandwidth
