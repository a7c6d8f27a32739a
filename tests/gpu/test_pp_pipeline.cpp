// The pipeline-parallel inference runner on 2 (and 4) GPUs: llama-2-7b shapes cut to 4 layers,
// every microbatch count's logits checked against the whole model inside run_inference (status
// "ok"), a measured timeline with one span per stage and microbatch, and a bubble that shrinks
// with more microbatches. Skipped with fewer than 2 GPUs (NCCL takes one rank per GPU).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <numeric>

#include "../../src/modules/pp/pp.hpp"
#include "gpubench/core/context.hpp"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/ranks.hpp"
#include "gpubench/core/system.hpp"

using namespace gpubench;
using namespace gpubench::pp;

TEST(PpPipeline, InferenceEqualsTheWholeModel) {
  int n = 0;
  GPB_CUDA_CHECK(cudaGetDeviceCount(&n));
  if (n < 2) GTEST_SKIP() << "needs 2 or more GPUs";
  static const System system = System::discover(false);
  for (int p : {2, 4}) {
    if (p > n) continue;
    Options o;
    o.pp = std::to_string(p);
    o.layers = 4;
    o.batch = 4;
    o.seq_len = 128;
    o.microbatches = "1,4";
    const Settings s = resolve_settings(o, false, n);
    std::vector<int> gpus(static_cast<std::size_t>(p));
    std::iota(gpus.begin(), gpus.end(), 0);
    CommonOptions common;
    common.quick = true;
    common.min_time = 0.005;
    Context ctx(system, gpus, common);
    RankGroup group(gpus);
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
    }
    // More microbatches, a smaller bubble (theory: (p-1)/p at m 1, (p-1)/(p+3) at m 4).
    EXPECT_LT(outcomes[1].timeline.bubble, outcomes[0].timeline.bubble) << "p " << p;
  }
}
