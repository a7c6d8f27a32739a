// Host side of advise's overlapped-prefill candidates: where they apply, what they hold and need,
// the two streams of the engine's chunked layers played out, and the prediction against
// hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "advise_fixtures.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/modules/advise/advise.hpp"
#include "input_error.hpp"

using namespace gpubench;
using namespace gpubench::advise;
using gpubench::testing::contains;
using gpubench::testing::input_error_of;
using gpubench::testing::plan_of;
using gpubench::testing::small_settings;

namespace {

// llama-2-7b, prompt 1024, 5 tokens: an overlap chunk of one sequence is 256 rows, its all-reduce
// 256 x 4096 x 2 = 2 MiB, the least that goes through the copy engines.
Settings overlap_settings() {
  Settings s = small_settings();
  s.prompt = 1024;
  return s;
}
constexpr std::uint64_t kChunk = 2u << 20;

}  // namespace

// The engine's rule: whole sequences when the microbatch divides into 4 chunks, else one
// sequence's prompt in 4 slices; never at tp = 1; and chunks whose all-reduces go through the
// copy engines (smaller ones take the small all-reduces' path).
TEST(AdviseOverlap, WhereItApplies) {
  Settings s = overlap_settings();
  EXPECT_EQ(overlap_chunk_bytes(s, 1), kChunk);
  EXPECT_EQ(overlap_chunk_bytes(s, 8), 8 * kChunk);
  EXPECT_FALSE(overlap_applies(s, Layout{2, 1, 1}, 4));
  EXPECT_TRUE(overlap_applies(s, Layout{1, 2, 1}, 1));
  EXPECT_TRUE(overlap_applies(s, Layout{1, 2, 1}, 4));
  EXPECT_TRUE(overlap_applies(s, Layout{1, 4, 1}, 8));
  EXPECT_FALSE(overlap_applies(s, Layout{1, 2, 1}, 2));
  s.prompt = 1022;
  EXPECT_FALSE(overlap_applies(s, Layout{1, 2, 1}, 1));
  EXPECT_TRUE(overlap_applies(s, Layout{1, 2, 1}, 4));
  s.prompt = 512;  // one sequence's chunks of 1 MiB
  EXPECT_FALSE(overlap_applies(s, Layout{1, 2, 1}, 1));
  EXPECT_TRUE(overlap_applies(s, Layout{1, 2, 1}, 4));
}

// An overlapped plan is the plain one with its name, its engines' chunks and the copy engines'
// staging (a slot a peer); where it does not apply it says why.
TEST(AdviseOverlap, Plans) {
  const Settings s = overlap_settings();
  const Plan plain = plan_of(s, Layout{1, 2, 1}, Workload::Latency, 1, false);
  const Plan p = plan_of(s, Layout{1, 2, 1}, Workload::Latency, 1, true);
  ASSERT_TRUE(p.why_not.empty()) << p.why_not;
  EXPECT_TRUE(p.overlap);
  EXPECT_EQ(p.name(), "tp=2 overlap");
  EXPECT_EQ(plain.name(), "tp=2");
  EXPECT_EQ(p.memory_per_gpu - plain.memory_per_gpu, copy_slot_bytes(kChunk, 2));
  EXPECT_EQ(copy_slot_bytes(kChunk, 2), kChunk / 2 + 256);
  EXPECT_EQ(rank_engine_options(s, p, 0, 1).overlap_chunks, kOverlapChunks);
  EXPECT_EQ(rank_engine_options(s, plain, 0, 1).overlap_chunks, 1);
  const Plan four = plan_of(s, Layout{1, 4, 1}, Workload::Throughput, 8, true);
  EXPECT_TRUE(four.why_not.empty()) << four.why_not;
  EXPECT_EQ(four.memory_per_gpu -
                plan_of(s, Layout{1, 4, 1}, Workload::Throughput, 8, false).memory_per_gpu,
            3 * copy_slot_bytes(8 * kChunk, 4));
  // Two sequences a microbatch (tp=2 x dp=2, batch 4) do not split into 4 chunks.
  const Plan two = plan_of(s, Layout{2, 2, 1}, Workload::Throughput, 4, true);
  EXPECT_TRUE(contains(two.why_not, "overlapped prefill")) << two.why_not;
  EXPECT_TRUE(contains(plan_of(s, Layout{2, 1, 1}, Workload::Latency, 1, true).why_not,
                       "overlapped prefill"));
}

// A layout's plain and overlapped plans are one choice: the one ranked first keeps the layout's
// place; other layouts, another workload's plans and training strategies are not twins.
TEST(AdviseOverlap, TheTwinRankedLowerIsDropped) {
  const Settings s = overlap_settings();
  const Layout tp2{1, 2, 1}, tp4{1, 4, 1};
  const std::vector<Plan> ranked = {
      plan_of(s, tp4, Workload::Latency, 1, true), plan_of(s, tp2, Workload::Latency, 1, false),
      plan_of(s, tp4, Workload::Latency, 1, false), plan_of(s, tp2, Workload::Latency, 1, true),
      plan_of(s, tp2, Workload::Throughput, 1, false)};
  EXPECT_EQ(better_twin(ranked, 0), -1);
  EXPECT_EQ(better_twin(ranked, 1), -1);
  EXPECT_EQ(better_twin(ranked, 2), 0);
  EXPECT_EQ(better_twin(ranked, 3), 1);
  EXPECT_EQ(better_twin(ranked, 4), -1);
  Plan train = plan_of(s, Layout{2, 1, 1}, Workload::Latency, 2, false);
  train.workload = Workload::Train;
  EXPECT_EQ(better_twin({train, train}, 1), -1);
  EXPECT_THROW(better_twin(ranked, 5), std::out_of_range);
}

// Latency is one sequence: a layout's dp replicas each run it, so dp=4 twins the one-GPU
// baseline and tp=2 x dp=2 a tp=2 ranked before it; the baseline is never dropped, and for
// throughput the replicas split the batch: different layouts.
TEST(AdviseOverlap, LatencyReplicasTwinTheirReplica) {
  const Settings s = overlap_settings();
  const Layout one{}, dp4{4, 1, 1}, tp2{1, 2, 1}, tp2dp2{2, 2, 1}, pp2dp2{2, 1, 2};
  const auto lat = [&](const Layout& l) { return plan_of(s, l, Workload::Latency, 1, false); };
  const std::vector<Plan> ranked = {lat(tp2), lat(dp4), lat(one), lat(tp2dp2), lat(pp2dp2)};
  EXPECT_EQ(better_twin(ranked, 1), -1);  // dp=4 before the baseline: kept (nothing to twin)
  EXPECT_EQ(better_twin(ranked, 2), -1);  // the baseline, never a twin
  EXPECT_EQ(better_twin(ranked, 3), 0);
  EXPECT_EQ(better_twin(ranked, 4), -1);
  EXPECT_EQ(better_twin({lat(one), lat(dp4)}, 1), 0);
  const auto thr = [&](const Layout& l) { return plan_of(s, l, Workload::Throughput, 4, false); };
  EXPECT_EQ(better_twin({thr(one), thr(dp4)}, 1), -1);
}

// Its prefill's blocks are the chunked compute and a chunk's all-reduce through the copy
// engines; decode's all-reduces stay.
TEST(AdviseOverlap, Needs) {
  const Settings s = overlap_settings();
  const Needs n = needs_of(s, plan_of(s, Layout{1, 2, 1}, Workload::Latency, 1, true));
  EXPECT_EQ(n.compute, (std::vector<Blocks::Key>{{2, 1}}));
  EXPECT_EQ(n.overlap_compute, (std::vector<Blocks::Key>{{2, 1}}));
  EXPECT_EQ(n.copy_all_reduces, (std::vector<std::pair<int, std::uint64_t>>{{2, kChunk}}));
  EXPECT_EQ(n.all_reduces, (std::vector<std::pair<int, std::uint64_t>>{{2, 8192}}));
  const Needs plain = needs_of(s, plan_of(s, Layout{1, 2, 1}, Workload::Latency, 1, false));
  EXPECT_TRUE(plain.overlap_compute.empty());
  EXPECT_TRUE(plain.copy_all_reduces.empty());
  const Needs both = merge({n, plain, n});
  EXPECT_EQ(both.overlap_compute, n.overlap_compute);
  EXPECT_EQ(both.copy_all_reduces, n.copy_all_reduces);
  EXPECT_EQ(both.all_reduces.size(), 2u);  // decode's and the plain prefill's
}

// The two streams by hand. One layer of 4 s, halves of 1 s a chunk (2 chunks), all-reduces of
// 1 s: attention 0-1, 1-2 (sums 1-2, 2-3), MLP 2-3, 3-4 (sums 3-4, 4-5): 5 s, not the 4 + 2 x 2
// of the step whole. All-reduces of 10 s set the pace: 2 layers x 2 halves x 2 chunks of them
// after the first half's second, 81. Without communication, the layers' compute alone.
TEST(AdviseOverlap, TwoStreamsAsTheEngineIssuesThem) {
  EXPECT_DOUBLE_EQ(overlapped_prefill_s(1, 4, 0.5, 1, 2), 5);
  EXPECT_DOUBLE_EQ(overlapped_prefill_s(2, 4, 0.5, 10, 2), 81);
  EXPECT_NEAR(overlapped_prefill_s(3, 2, 0.3, 0, 4), 6, 1e-12);
  // One chunk: nothing overlaps, the layer and its two sums one after the other.
  EXPECT_DOUBLE_EQ(overlapped_prefill_s(3, 2, 0.5, 0.25, 1), 3 * (2 + 0.5));
}

// tp=2 overlapped, latency: chunk all-reduces (1e-5 s) shorter than any half-chunk's compute
// (attention's share of a layer is about a third: each at least 5e-5 s), so only the last shows:
// TTFT = 32 x 6e-4 + 1e-5
// + 7e-4 = 0.01991; decode as the plain layout's, TPOT 32 x 1e-5 + 7e-6 + 64 x 1.1e-5 = 1.031e-3.
TEST(AdviseOverlap, Prediction) {
  const Settings s = overlap_settings();
  const Plan p = plan_of(s, Layout{1, 2, 1}, Workload::Latency, 1, true);
  Blocks b;
  b.prefill[{2, 1}] = {9e-4, 2e-4, 5e-4};  // the step whole: not what an overlapped plan uses
  b.prefill_overlap[{2, 1}] = {6e-4, 2e-4, 5e-4};
  b.decode_first[{2, 1}] = {8e-6, 2e-6, 3e-6};
  b.decode_last[{2, 1}] = {1.2e-5, 4e-6, 5e-6};
  b.all_reduce_s[{2, 8192}] = 1.1e-5;
  b.copy_all_reduce_s[{2, kChunk}] = 1e-5;
  const Prediction r = predict(s, p, b);
  EXPECT_NEAR(r.ttft_s, 0.01991, 1e-12);
  EXPECT_NEAR(r.tpot_s, 1.031e-3, 1e-15);
  EXPECT_NEAR(r.e2e_s, 0.01991 + 4 * 1.031e-3, 1e-12);
  EXPECT_NEAR(r.comm_s, 1e-5 + 4 * 64 * 1.1e-5, 1e-12);  // the exposed sum and decode's
  EXPECT_NEAR(r.compute_s + r.comm_s + r.wait_s, r.e2e_s, 1e-12);
  // Without the chunked parts or the copy engines' all-reduce the plan cannot be predicted.
  Blocks less = b;
  less.prefill_overlap.clear();
  EXPECT_TRUE(contains(input_error_of([&] { (void)predict(s, p, less); }), "overlapped prefill"));
  less = b;
  less.copy_all_reduce_s.clear();
  EXPECT_TRUE(
      contains(input_error_of([&] { (void)predict(s, p, less); }), "copy-engine all-reduce"));
}

// The blocks come back through JSON; a run made before overlap was advised has none.
TEST(AdviseOverlap, BlocksRoundTrip) {
  Blocks b;
  b.prefill[{2, 1}] = {1e-3, 2e-5, 3e-4};
  b.decode_first[{2, 1}] = {1e-4, 1e-5, 8e-5};
  b.decode_last[{2, 1}] = {1.1e-4, 1e-5, 8e-5};
  b.all_reduce_s[{2, 8192}] = 9e-6;
  b.prefill_overlap[{2, 1}] = {8e-4, 2e-5, 3e-4};
  b.copy_all_reduce_s[{2, 32768}] = 2e-5;
  EXPECT_EQ(Blocks::from_json(b.to_json()).to_json(), b.to_json());
  auto older = b.to_json();
  older.erase("prefill_overlap");
  older.erase("copy_all_reduce");
  const Blocks back = Blocks::from_json(older);
  EXPECT_TRUE(back.prefill_overlap.empty());
  EXPECT_TRUE(back.copy_all_reduce_s.empty());
  EXPECT_EQ(back.prefill.size(), 1u);
  auto broken = b.to_json();
  broken["copy_all_reduce"][0]["seconds"] = 0;
  EXPECT_TRUE(contains(input_error_of([&] { (void)Blocks::from_json(broken); }), "seconds"));
}
