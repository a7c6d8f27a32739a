// Host<->device bandwidth: per GPU H2D, D2H and both at once, from pinned and pageable memory,
// then every GPU at once; every destination checked against the pattern of its source.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "gpubench/modules/bandwidth/bandwidth.hpp"

namespace gpubench::bandwidth {

namespace {

constexpr const char* kPinnedGroup = "Host<->device, pinned";
constexpr const char* kPageableGroup = "Host<->device, pageable";
constexpr const char* kAllGroup = "Host<->device, all GPUs at once (pinned)";
constexpr double kPcieGuessGBps = 25;  // for sizing repeats when the link is unknown

void copies(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, int repeats,
            cudaStream_t s) {
  for (int r = 0; r < repeats; ++r) GPB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
}

// PCIe links idle down to a low generation and train up under load, and a fresh process's first
// DMA to pinned pages is slow: untimed copies of up to kWakeBytes each way first, so that the
// first case times the link at speed (a quick run's few iterations would otherwise time its
// wake-up: 45 GB/s where the link gives 55).
constexpr std::size_t kWakeBytes = std::size_t(2) << 30;

void wake_link(void* dev, void* host_src, void* host_dst, const void* dev_src, std::size_t bytes,
               cudaStream_t s) {
  const int rounds = static_cast<int>(std::max<std::size_t>(1, kWakeBytes / 2 / bytes));
  for (int r = 0; r < rounds; ++r) {
    GPB_CUDA_CHECK(cudaMemcpyAsync(dev, host_src, bytes, cudaMemcpyHostToDevice, s));
    GPB_CUDA_CHECK(cudaMemcpyAsync(host_dst, dev_src, bytes, cudaMemcpyDeviceToHost, s));
  }
  GPB_CUDA_CHECK(cudaStreamSynchronize(s));
}

double pcie_peak(const RunState& rs, int gpu) {
  const GpuInfo* info = rs.ctx.system().gpu(gpu);
  return info ? info->pcie.GBps_theoretical() : 0;
}

// Adds the case (or its failure) and returns it when it passed.
const CaseResult* add_case(RunState& rs, const std::string& group, const std::string& name,
                           nlohmann::ordered_json params, const std::string& failure,
                           double bytes_per_launch, int repeats, const Measurement& m,
                           double peak) {
  if (!failure.empty()) {
    spdlog::error("bandwidth: {} {}: {}", group, name, failure);
    rs.report.add(failed_case(group, name, std::move(params), failure));
    return nullptr;
  }
  CaseResult& c = rs.report.add(
      bandwidth_case(group, name, std::move(params), bytes_per_launch, repeats, m, peak));
  spdlog::info("bandwidth: {} {}: {:.2f} GB/s", group, name, c.metrics.front().second.value);
  return &c;
}

Figure figure_of(const CaseResult& c, int gpu) {
  const Metric* eff = c.find_metric("efficiency");
  return {gpu_label(gpu), c.metrics.front().second.value, eff ? eff->value : std::nan("")};
}

std::string check_device(Lane& lane, const void* buf, std::size_t bytes, std::uint64_t seed) {
  const std::uint64_t bad = device_pattern_mismatches(lane, buf, bytes, seed);
  return bad ? mismatch_note(bad, bytes) : "";
}
std::string check_host(const void* buf, std::size_t bytes, std::uint64_t seed) {
  const std::uint64_t bad = host_pattern_mismatches(buf, bytes, seed);
  return bad ? mismatch_note(bad, bytes) : "";
}

struct HostMemory {
  std::vector<PinnedBuffer> pinned;  // [0]: H2D source, [1]: D2H destination; 2 per GPU with 2+
  std::unique_ptr<unsigned char[]> pageable_src, pageable_dst;
};

// H2D, D2H and bidirectional for one GPU, pinned then pageable.
void run_gpu(RunState& rs, HostMemory& host, int gpu) {
  const Settings& s = rs.settings;
  Lane& lane = rs.lanes.of(gpu);
  const std::size_t bytes = s.host_bytes, pg_bytes = s.pageable_bytes;
  const double peak = pcie_peak(rs, gpu);
  const std::uint64_t h2d_seed = seed_for("host.h2d", 0), pg_seed = seed_for("host.pageable", 0);
  const std::uint64_t d2h_seed = seed_for("host.d2h", gpu);
  DeviceBuffer d_in(gpu, bytes), d_out(gpu, bytes);
  device_pattern_fill(lane, d_out.get(), bytes, d2h_seed);
  void* pin_src = host.pinned[0].get();
  void* pin_dst = host.pinned[1].get();
  const int k = repeats_for(bytes, peak > 0 ? peak : kPcieGuessGBps);
  const int kp = repeats_for(pg_bytes, peak > 0 ? peak : kPcieGuessGBps);
  auto params = [&](const char* dir, const char* memory, std::size_t b) {
    return nlohmann::ordered_json{
        {"gpu", gpu}, {"direction", dir}, {"host_memory", memory}, {"bytes", b}};
  };
  const std::string g = gpu_label(gpu);

  // Pinned.
  if (Context::interrupted()) return;
  wake_link(d_in.get(), pin_src, pin_dst, d_out.get(), bytes, lane.main);
  device_clear(lane, d_in.get(), bytes);
  Measurement m = rs.ctx.measure(gpu, lane.main, [&](cudaStream_t st, int) {
    copies(d_in.get(), pin_src, bytes, cudaMemcpyHostToDevice, k, st);
  });
  if (auto* c =
          add_case(rs, kPinnedGroup, g + " H2D", params("h2d", "pinned", bytes),
                   check_device(lane, d_in.get(), bytes, h2d_seed), double(bytes) * k, k, m, peak))
    rs.figures.h2d_pinned.push_back(figure_of(*c, gpu));

  if (Context::interrupted()) return;
  std::memset(pin_dst, 0, bytes);
  m = rs.ctx.measure(gpu, lane.main, [&](cudaStream_t st, int) {
    copies(pin_dst, d_out.get(), bytes, cudaMemcpyDeviceToHost, k, st);
  });
  if (auto* c = add_case(rs, kPinnedGroup, g + " D2H", params("d2h", "pinned", bytes),
                         check_host(pin_dst, bytes, d2h_seed), double(bytes) * k, k, m, peak))
    rs.figures.d2h_pinned.push_back(figure_of(*c, gpu));

  if (Context::interrupted()) return;
  device_clear(lane, d_in.get(), bytes);
  std::memset(pin_dst, 0, bytes);
  m = rs.ctx.measure(gpu, lane.main, [&](cudaStream_t st, int) {
    run_legs(gpu, st, lane.main_signal,
             {{gpu, st, &lane.main_signal,
               [&](cudaStream_t x) {
                 copies(d_in.get(), pin_src, bytes, cudaMemcpyHostToDevice, k, x);
               }},
              {gpu, lane.side, &lane.side_signal, [&](cudaStream_t x) {
                 copies(pin_dst, d_out.get(), bytes, cudaMemcpyDeviceToHost, k, x);
               }}});
  });
  {
    std::string failure = check_device(lane, d_in.get(), bytes, h2d_seed);
    if (failure.empty()) failure = check_host(pin_dst, bytes, d2h_seed);
    add_case(rs, kPinnedGroup, g + " bidirectional", params("both", "pinned", bytes), failure,
             2.0 * double(bytes) * k, k, m, 2 * peak);
  }

  // Pageable: the copies block the host while the driver stages them, so no spin gate (it
  // would wait for a host that is itself waiting).
  MeasureOptions opts = rs.ctx.measure_options();
  opts.spin = false;
  unsigned char* pg_src = host.pageable_src.get();
  unsigned char* pg_dst = host.pageable_dst.get();

  if (Context::interrupted()) return;
  device_clear(lane, d_in.get(), pg_bytes);
  m = rs.ctx.measure(
      gpu, lane.main,
      [&](cudaStream_t st, int) {
        copies(d_in.get(), pg_src, pg_bytes, cudaMemcpyHostToDevice, kp, st);
      },
      opts);
  add_case(rs, kPageableGroup, g + " H2D", params("h2d", "pageable", pg_bytes),
           check_device(lane, d_in.get(), pg_bytes, pg_seed), double(pg_bytes) * kp, kp, m, peak);

  if (Context::interrupted()) return;
  std::memset(pg_dst, 0, pg_bytes);
  m = rs.ctx.measure(
      gpu, lane.main,
      [&](cudaStream_t st, int) {
        copies(pg_dst, d_out.get(), pg_bytes, cudaMemcpyDeviceToHost, kp, st);
      },
      opts);
  add_case(rs, kPageableGroup, g + " D2H", params("d2h", "pageable", pg_bytes),
           check_host(pg_dst, pg_bytes, d2h_seed), double(pg_bytes) * kp, kp, m, peak);

  if (Context::interrupted()) return;
  device_clear(lane, d_in.get(), pg_bytes);
  std::memset(pg_dst, 0, pg_bytes);
  m = rs.ctx.measure(
      gpu, lane.main,
      [&](cudaStream_t st, int) {
        run_legs(gpu, st, lane.main_signal,
                 {{gpu, st, &lane.main_signal,
                   [&](cudaStream_t x) {
                     copies(d_in.get(), pg_src, pg_bytes, cudaMemcpyHostToDevice, kp, x);
                   }},
                  {gpu, lane.side, &lane.side_signal,
                   [&](cudaStream_t x) {
                     copies(pg_dst, d_out.get(), pg_bytes, cudaMemcpyDeviceToHost, kp, x);
                   }}},
                 /*host_threads=*/true);
      },
      opts);
  {
    std::string failure = check_device(lane, d_in.get(), pg_bytes, pg_seed);
    if (failure.empty()) failure = check_host(pg_dst, pg_bytes, d2h_seed);
    add_case(rs, kPageableGroup, g + " bidirectional", params("both", "pageable", pg_bytes),
             failure, 2.0 * double(pg_bytes) * kp, kp, m, 2 * peak);
  }
}

// Every selected GPU copies its own pinned buffers at once: H2D, D2H, then both directions.
// host.pinned[i] is GPU i's H2D source (or D2H destination), host.pinned[n + i] its D2H
// destination when both directions run together.
void run_all_gpus(RunState& rs, HostMemory& host) {
  const std::vector<int>& gpus = rs.ctx.gpus();
  const std::size_t bytes = rs.settings.host_bytes;
  const std::size_t ngpu = gpus.size();
  std::vector<DeviceBuffer> dev, dev_out;
  double peak = 0, slowest_peak = 0;
  bool peaks_known = true;
  for (int g : gpus) {
    dev.emplace_back(g, bytes);
    dev_out.emplace_back(g, bytes);
    const double p = pcie_peak(rs, g);
    peaks_known = peaks_known && p > 0;
    peak += p;
    slowest_peak = slowest_peak == 0 ? p : std::min(slowest_peak, p);
  }
  if (!peaks_known) peak = 0;  // a partial sum would overstate the efficiency
  const int k = repeats_for(bytes, slowest_peak > 0 ? slowest_peak : kPcieGuessGBps);
  const int primary = gpus.front();
  Lane& plane = rs.lanes.of(primary);
  const auto n = static_cast<double>(ngpu);

  for (const std::string dir : {"h2d", "d2h", "both"}) {
    if (Context::interrupted()) return;
    const bool up = dir != "d2h", down = dir != "h2d";
    // Sources hold the pattern, destinations are cleared.
    for (std::size_t i = 0; i < ngpu; ++i) {
      Lane& lane = rs.lanes.of(gpus[i]);
      if (up) {
        host_pattern_fill(host.pinned[i].get(), bytes, seed_for("host.all", gpus[i]));
        device_clear(lane, dev[i].get(), bytes);
      }
      if (down) {
        device_pattern_fill(lane, dev_out[i].get(), bytes, seed_for("host.all.d2h", gpus[i]));
        std::memset(host.pinned[up ? ngpu + i : i].get(), 0, bytes);
      }
    }
    std::vector<Leg> legs;
    for (std::size_t i = 0; i < ngpu; ++i) {
      Lane& lane = rs.lanes.of(gpus[i]);
      if (up) {
        void* d = dev[i].get();
        const void* h = host.pinned[i].get();
        legs.push_back({gpus[i], lane.main, &lane.main_signal, [=](cudaStream_t x) {
                          copies(d, h, bytes, cudaMemcpyHostToDevice, k, x);
                        }});
      }
      if (down) {
        const void* d = dev_out[i].get();
        void* h = host.pinned[up ? ngpu + i : i].get();
        // With both directions, D2H runs on the side stream so it overlaps the H2D.
        legs.push_back({gpus[i], up ? lane.side.get() : lane.main.get(),
                        up ? &lane.side_signal : &lane.main_signal, [=](cudaStream_t x) {
                          copies(h, d, bytes, cudaMemcpyDeviceToHost, k, x);
                        }});
      }
    }
    const Measurement m = rs.ctx.measure(primary, plane.main, [&](cudaStream_t st, int) {
      run_legs(primary, st, plane.main_signal, legs);
    });
    std::string failure;
    for (std::size_t i = 0; i < ngpu && failure.empty(); ++i) {
      if (up)
        failure =
            check_device(rs.lanes.of(gpus[i]), dev[i].get(), bytes, seed_for("host.all", gpus[i]));
      if (failure.empty() && down)
        failure = check_host(host.pinned[up ? ngpu + i : i].get(), bytes,
                             seed_for("host.all.d2h", gpus[i]));
      if (!failure.empty()) failure = gpu_label(gpus[i]) + ": " + failure;
    }
    const double directions = up && down ? 2.0 : 1.0;
    nlohmann::ordered_json params = {
        {"gpus", gpus}, {"direction", dir}, {"host_memory", "pinned"}, {"bytes_per_gpu", bytes}};
    const std::string label = dir == "h2d" ? "H2D" : dir == "d2h" ? "D2H" : "bidirectional";
    const std::string name = fmt::format("{} GPUs {}", ngpu, label);
    if (const CaseResult* c = add_case(rs, kAllGroup, name, std::move(params), failure,
                                       directions * n * double(bytes) * k, k, m, directions * peak))
      rs.report.results.back().metric("per_gpu_bandwidth", c->metrics.front().second.value / n,
                                      "GB/s");
  }
}

}  // namespace

void run_host(RunState& rs) {
  const std::vector<int>& gpus = rs.ctx.gpus();
  const Settings& s = rs.settings;
  HostMemory host;
  // Two per GPU when several GPUs run at once (each direction its own buffer), else two.
  const std::size_t buffers = gpus.size() >= 2 ? 2 * gpus.size() : 2;
  for (std::size_t i = 0; i < buffers; ++i) host.pinned.emplace_back(s.host_bytes);
  host.pageable_src.reset(new unsigned char[s.pageable_bytes]);
  host.pageable_dst.reset(new unsigned char[s.pageable_bytes]);
  host_pattern_fill(host.pinned[0].get(), s.host_bytes, seed_for("host.h2d", 0));
  host_pattern_fill(host.pageable_src.get(), s.pageable_bytes, seed_for("host.pageable", 0));
  std::memset(host.pageable_dst.get(), 0, s.pageable_bytes);  // touch every page before timing

  for (int gpu : gpus) {
    if (Context::interrupted()) return;
    run_gpu(rs, host, gpu);
  }
  if (gpus.size() >= 2 && !Context::interrupted()) run_all_gpus(rs, host);
}

}  // namespace gpubench::bandwidth
