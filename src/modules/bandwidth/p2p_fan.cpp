// Fan-in and fan-out over the copy engines: all-to-one (every other GPU writes into one GPU at
// once, each with its own copy engine) and one-to-all (every other GPU reads from one GPU at
// once). The figure is the total into (or out of) the one GPU, against its link capacity.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "gpubench/modules/bandwidth/bandwidth.hpp"

namespace gpubench::bandwidth {

namespace {

constexpr const char* kAllToOne = "P2P all-to-one, copy engine write (total into the GPU)";
constexpr const char* kOneToAll = "P2P one-to-all, copy engine read (total out of the GPU)";

// What can flow into (or out of) `hub` from `peers` at once: the sum of the pair links, capped by
// the hub's own NVLink (all links to switches or peers) or PCIe capacity.
double hub_peak(const System& sys, int hub, const std::vector<int>& peers) {
  double sum = 0;
  bool over_pcie = false;
  for (int p : peers) {
    sum += link_peak(sys, hub, p);
    const Link* l = sys.link(hub, p);
    over_pcie = over_pcie || (l && l->type == "PCIe");
  }
  const GpuInfo* info = sys.gpu(hub);
  double cap = 0;
  if (info && info->nvlink_links_up > 0 && info->nvlink_GBps_per_link > 0)
    cap += info->nvlink_links_up * info->nvlink_GBps_per_link;
  if (info && over_pcie) cap += info->pcie.GBps_theoretical();
  return cap > 0 ? std::min(sum, cap) : sum;
}

// Runs and records one fan case; `transfers` lists (device issuing, dst, dst device, src, src
// device, seed of src) per peer.
struct Transfer {
  int issuer;
  void* dst;
  int dst_dev;
  const void* src;
  int src_dev;
  std::uint64_t seed;
};

void run_fan(RunState& rs, const char* group, const std::string& name, int hub,
             const std::vector<int>& peers, const std::vector<Transfer>& transfers) {
  const std::size_t bytes = rs.settings.p2p_bytes;
  const System& sys = rs.ctx.system();
  const double peak = hub_peak(sys, hub, peers);
  double slowest = 0;
  for (int p : peers) {
    const double l = link_peak(sys, hub, p);
    slowest = slowest == 0 ? l : std::min(slowest, l);
  }
  const int k = repeats_for(bytes, slowest > 0 ? slowest : kLinkGuessGBps);
  for (const Transfer& t : transfers) device_clear(rs.lanes.of(t.dst_dev), t.dst, bytes);

  std::vector<Leg> legs;
  for (const Transfer& t : transfers) {
    Lane& lane = rs.lanes.of(t.issuer);
    legs.push_back({t.issuer, lane.main, &lane.main_signal, [&t, bytes, k](cudaStream_t s) {
                      peer_copies(t.dst, t.dst_dev, t.src, t.src_dev, bytes, k, s);
                    }});
  }
  Lane& hub_lane = rs.lanes.of(hub);
  const Measurement m = rs.ctx.measure(hub, hub_lane.main, [&](cudaStream_t s, int) {
    run_legs(hub, s, hub_lane.main_signal, legs);
  });

  std::string failure;
  for (const Transfer& t : transfers) {
    const std::uint64_t bad =
        device_pattern_mismatches(rs.lanes.of(t.dst_dev), t.dst, bytes, t.seed);
    if (bad) {
      failure = fmt::format("{}->{}: {}", gpu_label(t.src_dev), gpu_label(t.dst_dev),
                            mismatch_note(bad, bytes));
      break;
    }
  }
  nlohmann::ordered_json params = {{"gpu", hub}, {"peers", peers}, {"bytes_per_peer", bytes}};
  if (!failure.empty()) {
    spdlog::error("bandwidth: {} {}: {}", group, name, failure);
    rs.report.add(failed_case(group, name, std::move(params), failure));
    return;
  }
  const double n = static_cast<double>(transfers.size());
  CaseResult& c = rs.report.add(
      bandwidth_case(group, name, std::move(params), n * double(bytes) * k, k, m, peak));
  const double total = c.metrics.front().second.value;
  c.metric("per_peer_bandwidth", total / n, "GB/s");
  spdlog::info("bandwidth: {} {}: {:.1f} GB/s", group, name, total);
}

}  // namespace

void run_p2p_fan(RunState& rs, const PeerAccess& peers, P2pBuffers& buf) {
  const std::vector<int>& gpus = rs.ctx.gpus();
  if (gpus.size() < 3) {
    const char* why = "needs at least 3 selected GPUs (with 2 it is the unidirectional case)";
    rs.report.add(skipped_case(kAllToOne, "all GPUs", {}, why));
    rs.report.add(skipped_case(kOneToAll, "all GPUs", {}, why));
    return;
  }
  const std::size_t bytes = rs.settings.p2p_bytes;
  for (std::size_t h = 0; h < gpus.size() && !Context::interrupted(); ++h) {
    const int hub = gpus[h];
    std::vector<int> others;
    std::vector<std::size_t> other_pos;
    for (std::size_t j = 0; j < gpus.size(); ++j) {
      if (j != h && peers.pair(hub, gpus[j])) {
        others.push_back(gpus[j]);
        other_pos.push_back(j);
      }
    }
    if (others.size() < 2) {
      const char* why = "fewer than 2 other GPUs have peer access to this one";
      rs.report.add(skipped_case(kAllToOne, "into " + gpu_label(hub), {{"gpu", hub}}, why));
      rs.report.add(skipped_case(kOneToAll, "from " + gpu_label(hub), {{"gpu", hub}}, why));
      continue;
    }

    // All-to-one: each other GPU pushes its source into its own inbox on the hub.
    std::vector<DeviceBuffer> inbox;
    std::vector<Transfer> in;
    for (std::size_t k = 0; k < others.size(); ++k) {
      inbox.emplace_back(hub, bytes);
      const std::size_t j = other_pos[k];
      in.push_back({others[k], inbox.back().get(), hub, buf.src[j].get(), others[k], buf.seed[j]});
    }
    run_fan(rs, kAllToOne, "into " + gpu_label(hub), hub, others, in);
    inbox.clear();
    if (Context::interrupted()) return;

    // One-to-all: each other GPU pulls the hub's source into its own destination buffer.
    std::vector<Transfer> out;
    for (std::size_t k = 0; k < others.size(); ++k) {
      const std::size_t j = other_pos[k];
      out.push_back({others[k], buf.dst[j].get(), others[k], buf.src[h].get(), hub, buf.seed[h]});
    }
    run_fan(rs, kOneToAll, "from " + gpu_label(hub), hub, others, out);
  }
}

}  // namespace gpubench::bandwidth
