// GPU<->GPU bandwidth matrices: unidirectional and bidirectional, with the copy engines and with
// SM copy kernels (read: the kernel runs on the destination; write: on the source). Every
// destination is checked against its source's pattern before the figure is kept.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "gpubench/modules/bandwidth/bandwidth.hpp"

namespace gpubench::bandwidth {

double link_peak(const System& system, int a, int b) {
  const Link* l = system.link(a, b);
  return l ? l->GBps_theoretical : 0;
}

std::string link_name(const System& system, int a, int b) {
  const Link* l = system.link(a, b);
  if (!l || l->type.empty()) return "unknown";
  return l->type == "NVLink" ? fmt::format("NVLink x{}", l->count) : l->type;
}

void peer_copies(void* dst, int dst_dev, const void* src, int src_dev, std::size_t bytes,
                 int repeats, cudaStream_t stream) {
  for (int r = 0; r < repeats; ++r)
    GPB_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, stream));
}

void sm_copies(void* dst, const void* src, std::size_t bytes, int repeats, cudaStream_t stream) {
  for (int r = 0; r < repeats; ++r) launch_sm_copy(dst, src, bytes, stream);
}

namespace {

constexpr const char* kUniCe = "P2P unidirectional, copy engine";
constexpr const char* kBidirCe = "P2P bidirectional, copy engine (total of both directions)";
constexpr const char* kSmRead = "P2P unidirectional, SM copy read (kernel on the destination)";
constexpr const char* kSmWrite = "P2P unidirectional, SM copy write (kernel on the source)";
constexpr const char* kBidirSm = "P2P bidirectional, SM copy write (total of both directions)";

struct PairMatrices {
  Matrix uni_ce, bidir_ce, sm_read, sm_write, bidir_sm;
};

// Checks the listed destinations; empty when all hold their expected patterns.
std::string check_all(RunState& rs,
                      const std::vector<std::tuple<int, const void*, std::uint64_t>>& dsts,
                      std::size_t bytes) {
  for (const auto& [device, buf, seed] : dsts) {
    const std::uint64_t bad = device_pattern_mismatches(rs.lanes.of(device), buf, bytes, seed);
    if (bad) return fmt::format("{}: {}", gpu_label(device), mismatch_note(bad, bytes));
  }
  return "";
}

// Records a measured case; returns its bandwidth, or NaN when verification failed.
double record(RunState& rs, const char* group, const std::string& name,
              nlohmann::ordered_json params, const std::string& failure, double bytes_per_launch,
              int repeats, const Measurement& m, double peak, std::vector<Figure>* figures) {
  if (!failure.empty()) {
    spdlog::error("bandwidth: {} {}: {}", group, name, failure);
    rs.report.add(failed_case(group, name, std::move(params), failure));
    return std::nan("");
  }
  CaseResult& c = rs.report.add(
      bandwidth_case(group, name, std::move(params), bytes_per_launch, repeats, m, peak));
  const double v = c.metrics.front().second.value;
  spdlog::info("bandwidth: {} {}: {:.1f} GB/s", group, name, v);
  if (figures) {
    const Metric* eff = c.find_metric("efficiency");
    figures->push_back({name, v, eff ? eff->value : std::nan("")});
  }
  return v;
}

// What every measurement of the pair (gpus[i], gpus[j]) shares: the GPUs, the transfer size,
// the link's peak and the copies per launch derived from it, and each GPU's lane.
struct PairSetup {
  int a, b;
  std::size_t bytes;
  double peak;
  int k;
  Lane& la;
  Lane& lb;
};

PairSetup pair_setup(RunState& rs, std::size_t i, std::size_t j) {
  const int a = rs.ctx.gpus()[i], b = rs.ctx.gpus()[j];
  const std::size_t bytes = rs.settings.p2p_bytes;
  const double peak = link_peak(rs.ctx.system(), a, b);
  const int k = repeats_for(bytes, peak > 0 ? peak : kLinkGuessGBps);
  return PairSetup{a, b, bytes, peak, k, rs.lanes.of(a), rs.lanes.of(b)};
}

// src -> dst: copy engine (issued on the source), SM read, SM write.
void run_ordered_pair(RunState& rs, P2pBuffers& buf, PairMatrices& mx, std::size_t i,
                      std::size_t j) {
  const PairSetup p = pair_setup(rs, i, j);
  const int a = p.a, b = p.b, k = p.k;
  const std::size_t bytes = p.bytes;
  const double peak = p.peak;
  const System& sys = rs.ctx.system();
  Lane &la = p.la, &lb = p.lb;
  void* dst = buf.dst[j].get();
  const void* src = buf.src[i].get();
  const std::string name = fmt::format("{}->{}", gpu_label(a), gpu_label(b));
  const nlohmann::ordered_json params = {
      {"src", a}, {"dst", b}, {"link", link_name(sys, a, b)}, {"bytes", bytes}};
  const std::vector<std::tuple<int, const void*, std::uint64_t>> check = {{b, dst, buf.seed[i]}};

  if (Context::interrupted()) return;
  device_clear(lb, dst, bytes);
  Measurement m = rs.ctx.measure(
      a, la.main, [&](cudaStream_t s, int) { peer_copies(dst, b, src, a, bytes, k, s); });
  mx.uni_ce.values[i][j] = record(rs, kUniCe, name, params, check_all(rs, check, bytes),
                                  double(bytes) * k, k, m, peak, &rs.figures.p2p_unidir_ce);

  if (Context::interrupted()) return;
  device_clear(lb, dst, bytes);
  m = rs.ctx.measure(b, lb.main, [&](cudaStream_t s, int) { sm_copies(dst, src, bytes, k, s); });
  mx.sm_read.values[i][j] = record(rs, kSmRead, name, params, check_all(rs, check, bytes),
                                   double(bytes) * k, k, m, peak, &rs.figures.p2p_unidir_sm);

  if (Context::interrupted()) return;
  device_clear(lb, dst, bytes);
  m = rs.ctx.measure(a, la.main, [&](cudaStream_t s, int) { sm_copies(dst, src, bytes, k, s); });
  mx.sm_write.values[i][j] = record(rs, kSmWrite, name, params, check_all(rs, check, bytes),
                                    double(bytes) * k, k, m, peak, nullptr);
}

// a <-> b at once: copy engines (each direction issued by its source), then SM write kernels.
void run_pair_both_ways(RunState& rs, P2pBuffers& buf, PairMatrices& mx, std::size_t i,
                        std::size_t j) {
  const PairSetup p = pair_setup(rs, i, j);
  const int a = p.a, b = p.b, k = p.k;
  const std::size_t bytes = p.bytes;
  const double peak = p.peak;
  const System& sys = rs.ctx.system();
  Lane &la = p.la, &lb = p.lb;
  void* dst_a = buf.dst[i].get();
  void* dst_b = buf.dst[j].get();
  const void* src_a = buf.src[i].get();
  const void* src_b = buf.src[j].get();
  const std::string name = fmt::format("{}<->{}", gpu_label(a), gpu_label(b));
  const nlohmann::ordered_json params = {
      {"a", a}, {"b", b}, {"link", link_name(sys, a, b)}, {"bytes_each_way", bytes}};
  const std::vector<std::tuple<int, const void*, std::uint64_t>> check = {{b, dst_b, buf.seed[i]},
                                                                          {a, dst_a, buf.seed[j]}};
  const double total = 2.0 * double(bytes) * k;

  if (Context::interrupted()) return;
  device_clear(la, dst_a, bytes);
  device_clear(lb, dst_b, bytes);
  Measurement m = rs.ctx.measure(a, la.main, [&](cudaStream_t s, int) {
    run_legs(a, s, la.main_signal,
             {{a, s, &la.main_signal,
               [&](cudaStream_t x) { peer_copies(dst_b, b, src_a, a, bytes, k, x); }},
              {b, lb.main, &lb.main_signal,
               [&](cudaStream_t x) { peer_copies(dst_a, a, src_b, b, bytes, k, x); }}});
  });
  mx.bidir_ce.values[i][j] = mx.bidir_ce.values[j][i] =
      record(rs, kBidirCe, name, params, check_all(rs, check, bytes), total, k, m, 2 * peak,
             &rs.figures.p2p_bidir_ce);

  if (Context::interrupted()) return;
  device_clear(la, dst_a, bytes);
  device_clear(lb, dst_b, bytes);
  m = rs.ctx.measure(a, la.main, [&](cudaStream_t s, int) {
    run_legs(
        a, s, la.main_signal,
        {{a, s, &la.main_signal, [&](cudaStream_t x) { sm_copies(dst_b, src_a, bytes, k, x); }},
         {b, lb.main, &lb.main_signal,
          [&](cudaStream_t x) { sm_copies(dst_a, src_b, bytes, k, x); }}});
  });
  mx.bidir_sm.values[i][j] = mx.bidir_sm.values[j][i] = record(
      rs, kBidirSm, name, params, check_all(rs, check, bytes), total, k, m, 2 * peak, nullptr);
}

}  // namespace

void run_p2p(RunState& rs) {
  const std::vector<int>& gpus = rs.ctx.gpus();
  if (gpus.size() < 2) {
    rs.report.add(skipped_case("P2P", "GPU<->GPU", {}, "needs at least 2 selected GPUs"));
    return;
  }
  const PeerAccess peers(gpus);
  const std::size_t bytes = rs.settings.p2p_bytes;
  P2pBuffers buf;
  for (int g : gpus) {
    buf.src.emplace_back(g, bytes);
    buf.dst.emplace_back(g, bytes);
    buf.seed.push_back(seed_for("p2p.src", g));
    device_pattern_fill(rs.lanes.of(g), buf.src.back().get(), bytes, buf.seed.back());
  }
  PairMatrices mx{
      make_matrix("p2p_unidir_ce_GBps", "P2P unidirectional bandwidth, copy engine (GB/s)", "GB/s",
                  gpus),
      make_matrix("p2p_bidir_ce_GBps",
                  "P2P bidirectional bandwidth, copy engine, both directions (GB/s)", "GB/s", gpus),
      make_matrix("p2p_unidir_sm_read_GBps", "P2P unidirectional bandwidth, SM copy read (GB/s)",
                  "GB/s", gpus),
      make_matrix("p2p_unidir_sm_write_GBps", "P2P unidirectional bandwidth, SM copy write (GB/s)",
                  "GB/s", gpus),
      make_matrix("p2p_bidir_sm_GBps",
                  "P2P bidirectional bandwidth, SM copy write, both directions (GB/s)", "GB/s",
                  gpus)};

  for (std::size_t i = 0; i < gpus.size(); ++i) {
    for (std::size_t j = 0; j < gpus.size(); ++j) {
      if (i == j) continue;
      if (!peers.pair(gpus[i], gpus[j])) {
        if (i < j)
          rs.report.add(skipped_case("P2P peer access",
                                     fmt::format("{}<->{}", gpu_label(gpus[i]), gpu_label(gpus[j])),
                                     {{"a", gpus[i]},
                                      {"b", gpus[j]},
                                      {"link", link_name(rs.ctx.system(), gpus[i], gpus[j])}},
                                     "no peer access between these GPUs"));
        continue;
      }
      run_ordered_pair(rs, buf, mx, i, j);
      if (Context::interrupted()) break;
    }
  }
  for (std::size_t i = 0; i < gpus.size() && !Context::interrupted(); ++i)
    for (std::size_t j = i + 1; j < gpus.size() && !Context::interrupted(); ++j)
      if (peers.pair(gpus[i], gpus[j])) run_pair_both_ways(rs, buf, mx, i, j);

  for (Matrix* m : {&mx.uni_ce, &mx.bidir_ce, &mx.sm_read, &mx.sm_write, &mx.bidir_sm})
    rs.report.matrices.push_back(*m);
  if (!Context::interrupted()) run_p2p_fan(rs, peers, buf);
}

}  // namespace gpubench::bandwidth
