// The pipeline-parallel runners. Inference on 2 (and 4) GPUs: llama-2-7b shapes cut to 4
// layers, every microbatch count's logits checked against the whole model inside run_inference
// (status "ok"), a measured timeline with one span per stage and microbatch, and a bubble that
// shrinks with more microbatches (skipped with fewer than 2 GPUs: NCCL takes one rank per GPU).
// Training on 1, 2 and 4 GPUs under every schedule.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <fmt/format.h>

#include <map>
#include <numeric>

#include "gpubench/core/context.hpp"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/ranks.hpp"
#include "gpubench/core/system.hpp"
#include "gpubench/modules/pp/pp.hpp"
#include "rig.hpp"

using namespace gpubench;
using namespace gpubench::pp;

namespace {

// What a runner needs on the first g GPUs: their context (quick timing) and a rank per GPU.
struct Rig : gpubench::testing::QuickRig {
  explicit Rig(int g) : QuickRig(g), group(gpus) {}
  RankGroup group;
};

}  // namespace

TEST(PpPipeline, InferenceEqualsTheWholeModel) {
  int n = 0;
  GPB_CUDA_CHECK(cudaGetDeviceCount(&n));
  if (n < 2) GTEST_SKIP() << "needs 2 or more GPUs";
  for (int p : {2, 4}) {
    if (p > n) continue;
    Options o;
    o.pp = std::to_string(p);
    o.layers = 4;
    o.batch = 4;
    o.seq_len = 128;
    o.microbatches = "1,4";
    const Settings s = resolve_settings(o, false, n);
    Rig rig(p);
    Context& ctx = rig.ctx;
    RankGroup& group = rig.group;
    ReferenceLogits reference;
    const auto outcomes = run_inference(ctx, s, p, group, reference);
    ASSERT_EQ(outcomes.size(), 2u) << "p " << p;
    for (const InferenceOutcome& r : outcomes) {
      const std::string what = "p " + std::to_string(p) + " m " + std::to_string(r.m);
      EXPECT_EQ(r.status, "ok") << what << ": " << r.note;
      EXPECT_LE(r.check_error, 0.05) << what;
      ASSERT_EQ(r.timeline.stages.size(), static_cast<std::size_t>(p)) << what;
      for (const auto& spans : r.timeline.stages) {
        ASSERT_EQ(spans.size(), static_cast<std::size_t>(r.m)) << what;
        for (const Span& sp : spans) EXPECT_LT(sp.start, sp.end) << what;
      }
      EXPECT_GT(r.timeline.bubble, 0.0) << what;
      EXPECT_LT(r.timeline.bubble, 1.0) << what;
      EXPECT_GT(r.step.median_s(), 0.0) << what;
      // Decode after the prefill, each microbatch over its own cache rows.
      EXPECT_LE(r.decode_check_error, 0.05) << what;
      EXPECT_GT(r.decode.median_s(), 0.0) << what;
      // Stages balanced by times measured on the GPU: a layer and the head cost something,
      // and every layer is placed.
      EXPECT_TRUE(r.balance.measured) << what;
      EXPECT_GT(r.balance.layer, 0.0) << what;
      EXPECT_GT(r.balance.head, 0.0) << what;
      EXPECT_EQ(r.stage_layers, stages_from_costs(r.balance, s.layers, p)) << what;
    }
    // More microbatches, a smaller bubble (theory: (p-1)/p at m 1, (p-1)/(p+3) at m 4).
    EXPECT_LT(outcomes[1].timeline.bubble, outcomes[0].timeline.bubble) << "p " << p;
  }
}

// The training runner on 2 (and 4) GPUs and on one: 4 layers of llama-2-7b's shapes, every
// schedule; each outcome checked inside run_training (gradient GEMMs against a reference,
// gradients finite, transfers equal on both sides), the timeline complete, the measured
// activation peak equal to the slabs the order holds, and 1F1B's peak within p/m of GPipe's.
TEST(PpPipeline, TrainingSchedulesRunAndHoldWhatTheyShould) {
  int n = 0;
  GPB_CUDA_CHECK(cudaGetDeviceCount(&n));
  for (int p : {1, 2, 4}) {
    if (p > n) continue;
    Options o;
    o.pp = std::to_string(p);
    o.layers = 8;
    o.batch = 8;
    o.seq_len = 128;
    o.microbatches = p == 1 ? "1,4" : (p == 2 ? "2,4,8" : "4,8");
    o.schedule = p == 1 ? "1f1b" : "gpipe,1f1b,interleaved";
    const Settings s = resolve_settings(o, false, n);
    Rig rig(p);
    Context& ctx = rig.ctx;
    RankGroup& group = rig.group;
    std::map<std::pair<Schedule, int>, std::uint64_t> stage0_peak;
    Settings ce = s;  // the same over the copy engines (one process, peer access), with stages
    ce.transfers = "copy-engine";  // that may end inside a layer, and NCCL held to 4 CTAs
    ce.half_layers = true;
    ce.nccl_ctas = 4;
    // The copy engines first: on a GPU where no kernel of these shapes has loaded yet.
    for (const Settings* run : std::initializer_list<const Settings*>{&ce, &s})
      for (Schedule sch : s.schedules) {
        if (run == &ce && p != 2) continue;  // the copy engines carry 2 stages only
        const auto outcomes = run_training(ctx, *run, p, sch, group);
        ASSERT_EQ(outcomes.size(), s.microbatches.size()) << "p " << p;
        for (const TrainingOutcome& r : outcomes) {
          const std::string what =
              fmt::format("p {} {} m {} over {}", p, to_string(sch), r.m, r.transport);
          if (run == &ce) EXPECT_EQ(r.transport, "copy-engine") << what;
          if (p > 1 && sch != Schedule::Interleaved) {
            EXPECT_TRUE(r.balance.measured) << what;
            EXPECT_GT(r.balance.layer, 0.0) << what;
            EXPECT_GT(r.balance.head, 0.0) << what;
            EXPECT_GT(r.balance.attention, 0.0) << what;
            EXPECT_EQ(r.stage_blocks, training_stage_blocks(*run, p, sch, r.balance)) << what;
          }
          EXPECT_EQ(r.status, "ok") << what << ": " << r.note;
          EXPECT_GT(r.step.median_s(), 0.0) << what;
          const int v = sch == Schedule::Interleaved ? s.chunks : 1;
          ASSERT_EQ(r.timeline.stages.size(), static_cast<std::size_t>(p)) << what;
          for (const auto& spans : r.timeline.stages) {
            ASSERT_EQ(spans.size(), static_cast<std::size_t>(2 * r.m * v)) << what;
            for (const Span& sp : spans) EXPECT_LT(sp.start, sp.end) << what;
          }
          ASSERT_EQ(r.peak_saved.size(), static_cast<std::size_t>(p)) << what;
          for (int j = 0; j < p; ++j) {
            const double got = static_cast<double>(r.peak_saved[static_cast<std::size_t>(j)]);
            const double want = static_cast<double>(r.expected_saved[static_cast<std::size_t>(j)]);
            EXPECT_NEAR(got, want, 0.01 * want) << what << " stage " << j;
          }
          if (p > 1) {
            EXPECT_GT(r.timeline.bubble, 0.0) << what;
            EXPECT_LT(r.timeline.bubble, 1.0) << what;
            EXPECT_GT(r.transfers, 0) << what;
            EXPECT_GT(r.transfer_s, 0.0) << what;
            EXPECT_GT(r.transfer_alone_s, 0.0) << what;
          }
          stage0_peak[{sch, r.m}] = r.peak_saved.front();
        }
      }
    if (p > 1)
      for (int m : s.microbatches) {
        const double g = static_cast<double>(stage0_peak[{Schedule::GPipe, m}]);
        const double f = static_cast<double>(stage0_peak[{Schedule::OneFOneB, m}]);
        EXPECT_LE(f, g * std::min(1.0, static_cast<double>(p) / m) * 1.1)
            << "p " << p << " m " << m;
      }
  }
}

// The layouts' runner: every layout the GPUs allow (2: dp=2, tp=2, pp=2; 4: also the mixed
// ones) at 4 layers, each checked against the whole model inside run_layout.
TEST(PpPipeline, LayoutsEqualTheWholeModel) {
  int n = 0;
  GPB_CUDA_CHECK(cudaGetDeviceCount(&n));
  if (n < 2) GTEST_SKIP() << "needs 2 or more GPUs";
  const int g = n >= 4 ? 4 : 2;
  Options o;
  o.pp = "2";
  o.layers = 4;
  o.batch = 4;
  o.seq_len = 128;
  o.microbatches = "1,2";
  o.layouts = g == 4 ? "dp=4,tp=4,pp=4,tp=2xdp=2,pp=2xdp=2,tp=2xpp=2" : "dp=2,tp=2,pp=2";
  const Settings s = resolve_settings(o, false, g);
  Rig rig(g);
  Context& ctx = rig.ctx;
  RankGroup& group = rig.group;
  ReferenceLogits reference;
  for (const Layout& l : parse_layouts(s.layouts_text, g, s.model)) {
    const LayoutOutcome r = run_layout(ctx, s, l, 4, group, reference);
    EXPECT_EQ(r.status, "ok") << l.name() << ": " << r.note;
    EXPECT_LE(r.check_error, 0.05) << l.name();
    EXPECT_GT(r.step.median_s(), 0.0) << l.name();
    EXPECT_EQ(r.m, l.pp > 1 ? 2 : 1) << l.name();
  }
  // A batch the replicas do not split is skipped, not run.
  Layout dp;
  dp.dp = g;
  EXPECT_EQ(run_layout(ctx, s, dp, g + 1, group, reference).status, "skipped");
}
