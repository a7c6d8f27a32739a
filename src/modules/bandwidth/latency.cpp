// Memory latency seen by a GPU: one thread chasing pointers through a random cycle of 128-byte
// lines in another GPU's memory (its own on the diagonal) or in pinned host memory. Successive
// iterations continue along the cycle, so no line is revisited while it could still be cached;
// the end of every chase is checked against the address the cycle predicts.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "gpubench/core/units.hpp"
#include "gpubench/modules/bandwidth/bandwidth.hpp"

namespace gpubench::bandwidth {

namespace {

constexpr std::size_t kChaseBytes = 64 * kMiB;  // above the L2 of current GPUs, within TLB reach
constexpr std::size_t kStride = 128;            // one node per cache line
constexpr const char* kPeerGroup = "Latency, GPU memory (pointer chase)";
constexpr const char* kHostGroup = "Latency, pinned host memory (pointer chase)";

// The order in which the chase visits the nodes: a random permutation read as one cycle.
std::vector<std::uint32_t> make_cycle(std::size_t nodes) {
  std::vector<std::uint32_t> order(nodes);
  std::iota(order.begin(), order.end(), 0u);
  std::mt19937_64 rng(0x1A7E5C7ull);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

std::uint64_t node_address(std::uint64_t base, const std::vector<std::uint32_t>& order,
                           std::uint64_t position) {
  return base + static_cast<std::uint64_t>(order[position % order.size()]) * kStride;
}

// Each node's first 8 bytes hold the address of the next node; `words` is the buffer as uint64.
void write_cycle(std::uint64_t* words, std::uint64_t base,
                 const std::vector<std::uint32_t>& order) {
  std::memset(words, 0, kChaseBytes);
  for (std::size_t p = 0; p < order.size(); ++p)
    words[order[p] * (kStride / 8)] = node_address(base, order, p + 1);
}

struct ChaseResult {
  Measurement m;
  std::string failure;
  double cycles_per_access = 0;
};

// `reader` chases through the cycle starting at device address `base`.
ChaseResult chase(RunState& rs, int reader, std::uint64_t base,
                  const std::vector<std::uint32_t>& order) {
  const std::uint64_t hops = rs.settings.latency_hops;
  Lane& lane = rs.lanes.of(reader);
  DeviceBuffer out(reader, 2 * sizeof(std::uint64_t));
  auto* out_words = out.as<std::uint64_t>();
  std::uint64_t last_iteration = 0;
  ChaseResult r;
  r.m = rs.ctx.measure(reader, lane.main, [&](cudaStream_t s, int iteration) {
    last_iteration = static_cast<std::uint64_t>(iteration);
    const std::uint64_t start = node_address(base, order, last_iteration * hops);
    launch_pointer_chase(reinterpret_cast<const void*>(start), hops, out_words, s);
  });
  std::uint64_t host_out[2] = {0, 0};
  {
    DeviceGuard guard(reader);
    GPB_CUDA_CHECK(
        cudaMemcpyAsync(host_out, out_words, sizeof(host_out), cudaMemcpyDeviceToHost, lane.main));
    lane.main.synchronize();
  }
  const std::uint64_t expected = node_address(base, order, (last_iteration + 1) * hops);
  if (host_out[0] != expected)
    r.failure = fmt::format("verification failed: the chase ended at {:#x}, expected {:#x}",
                            host_out[0], expected);
  r.cycles_per_access = static_cast<double>(host_out[1]) / static_cast<double>(hops);
  return r;
}

// Adds the case; returns the latency in microseconds, NaN when it failed.
double record(RunState& rs, const char* group, const std::string& name,
              nlohmann::ordered_json params, const ChaseResult& r) {
  if (!r.failure.empty()) {
    spdlog::error("bandwidth: {} {}: {}", group, name, r.failure);
    rs.report.add(failed_case(group, name, std::move(params), r.failure));
    return std::nan("");
  }
  const auto hops = static_cast<double>(rs.settings.latency_hops);
  CaseResult c;
  c.group = group;
  c.name = name;
  c.params = std::move(params);
  const double us = r.m.median_s() / hops * 1e6;
  c.metric("latency", us, "us");
  c.metric("cycles_per_access", r.cycles_per_access, "cycles");
  c.stats = scaled_stats(r.m, hops);
  if (!r.m.converged) c.note = fmt::format("noise target not met (stopped on {})", r.m.stop_reason);
  rs.report.add(std::move(c));
  spdlog::info("bandwidth: {} {}: {:.3f} us", group, name, us);
  return us;
}

}  // namespace

void run_latency(RunState& rs) {
  const std::vector<int>& gpus = rs.ctx.gpus();
  const std::vector<std::uint32_t> order = make_cycle(kChaseBytes / kStride);
  const std::uint64_t hops = rs.settings.latency_hops;
  auto params = [&](const std::string& memory, int reader) {
    return nlohmann::ordered_json{{"memory", memory},
                                  {"reader", reader},
                                  {"hops", hops},
                                  {"buffer_bytes", kChaseBytes},
                                  {"stride_bytes", kStride}};
  };

  // GPU memory: owners in rows, readers in columns; the diagonal is local HBM.
  Matrix gpu_matrix = make_matrix("p2p_latency_us",
                                  "GPU memory latency, pointer chase (us per access)", "us", gpus);
  gpu_matrix.row_label = "memory on";
  gpu_matrix.col_label = "read by";
  const PeerAccess peers(gpus);
  std::vector<std::uint64_t> image(kChaseBytes / 8);
  for (std::size_t i = 0; i < gpus.size() && !Context::interrupted(); ++i) {
    const int owner = gpus[i];
    DeviceBuffer buffer(owner, kChaseBytes);
    const auto base = reinterpret_cast<std::uint64_t>(buffer.get());
    write_cycle(image.data(), base, order);
    {
      DeviceGuard guard(owner);
      Lane& lane = rs.lanes.of(owner);
      GPB_CUDA_CHECK(cudaMemcpyAsync(buffer.get(), image.data(), kChaseBytes,
                                     cudaMemcpyHostToDevice, lane.main));
      lane.main.synchronize();  // every reader's stream sees the finished cycle
    }
    for (std::size_t j = 0; j < gpus.size() && !Context::interrupted(); ++j) {
      const int reader = gpus[j];
      const std::string name =
          fmt::format("{} memory, read by {}", gpu_label(owner), gpu_label(reader));
      if (owner != reader && !peers.pair(owner, reader)) {
        rs.report.add(skipped_case(kPeerGroup, name, params(gpu_label(owner), reader),
                                   "no peer access between these GPUs"));
        continue;
      }
      const double us = record(rs, kPeerGroup, name, params(gpu_label(owner), reader),
                               chase(rs, reader, base, order));
      gpu_matrix.values[i][j] = us;
      if (owner != reader)
        rs.figures.p2p_latency.push_back(
            {gpu_label(owner) + "->" + gpu_label(reader), us, std::nan("")});
    }
  }
  rs.report.matrices.push_back(std::move(gpu_matrix));
  if (Context::interrupted()) return;

  // Pinned host memory, mapped into every GPU.
  Matrix host_matrix = make_matrix(
      "host_latency_us", "Host memory latency, pointer chase (us per access)", "us", gpus);
  host_matrix.row_label = "memory on";
  host_matrix.col_label = "read by";
  host_matrix.rows = {"Host"};
  host_matrix.values.resize(1);
  PinnedBuffer host(kChaseBytes, /*mapped=*/true);
  const auto base = reinterpret_cast<std::uint64_t>(host.device_ptr());
  write_cycle(host.as<std::uint64_t>(), base, order);
  for (std::size_t j = 0; j < gpus.size() && !Context::interrupted(); ++j) {
    const int reader = gpus[j];
    host_matrix.values[0][j] =
        record(rs, kHostGroup, fmt::format("host memory, read by {}", gpu_label(reader)),
               params("host", reader), chase(rs, reader, base, order));
  }
  rs.report.matrices.push_back(std::move(host_matrix));
}

}  // namespace gpubench::bandwidth
