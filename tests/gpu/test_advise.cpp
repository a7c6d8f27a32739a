// advise on the GPUs: the building blocks measured (a tensor-parallel shard's parts on one GPU,
// its prefill overlapped in chunks too), a generation end to end checked against a prefill of its
// whole stream, a wrong reference caught, on 2 or more GPUs every layout of 2 GPUs (decode's sums
// over NCCL and the one-shot kernel) generating the same logits, and tp=2's prefill overlapped
// through the copy engines; training's blocks and a training layout run by `dp`, checked there.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include "gpubench/core/context.hpp"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/gemm.hpp"
#include "gpubench/core/peers.hpp"
#include "gpubench/core/ranks.hpp"
#include "gpubench/core/system.hpp"
#include "gpubench/model/transformer.hpp"
#include "gpubench/modules/advise/advise.hpp"
#include "rig.hpp"

using namespace gpubench;
using namespace gpubench::advise;

namespace {

using Rig = gpubench::testing::QuickRig;

// llama-2-7b's shapes cut to 4 layers, short prompts: seconds, not minutes.
Settings small() {
  Options o;
  o.layers = 4;
  o.prompt = 64;
  o.output_len = 6;
  o.batch_sizes = "4";
  return resolve_settings(o, true);
}

Plan plan_of(const Settings& s, const Layout& l, Workload w, std::int64_t batch) {
  return make_plan(s, l, w, batch, parts_by_bytes(s), compute_capability_major(0), 0);
}

}  // namespace

TEST(AdviseGpu, CalibratesAShardOnOneGpu) {
  Rig rig(1);
  const Settings s = small();
  Needs n;
  n.compute = {{1, 1}, {1, 2}, {2, 1}, {2, 4}};
  n.overlap_compute = {{2, 1}, {2, 4}};  // a prompt in slices; whole sequences
  const Blocks b = calibrate(rig.ctx, s, n);
  for (const auto& key : n.overlap_compute) {
    ASSERT_TRUE(b.prefill_overlap.count(key));
    EXPECT_GT(b.prefill_overlap.at(key).layer, 0);
  }
  EXPECT_EQ(b.prefill_overlap.size(), 2u);  // only where asked
  for (const auto& key : n.compute) {
    ASSERT_TRUE(b.prefill.count(key) && b.decode_first.count(key) && b.decode_last.count(key));
    EXPECT_GT(b.prefill.at(key).layer, 0);
    EXPECT_GT(b.decode_first.at(key).layer, 0);
    EXPECT_GT(b.decode_last.at(key).layer, 0);
  }
  // A tensor-parallel shard holds half of a layer's weights: its decode step reads less.
  EXPECT_LT(b.decode_first.at({2, 1}).layer, b.decode_first.at({1, 1}).layer);
  // The prediction of one GPU comes from these parts alone.
  const Plan p = plan_of(s, Layout{}, Workload::Latency, 1);
  const Prediction pred = predict(s, p, b);
  EXPECT_GT(pred.ttft_s, 0);
  EXPECT_GT(pred.tpot_s, 0);
  EXPECT_DOUBLE_EQ(pred.comm_s, 0);
}

TEST(AdviseGpu, OneGpuGenerationMatchesItsWholeStream) {
  Rig rig(1);
  const Settings s = small();
  RankGroup group(rig.gpus);
  References refs;
  for (std::int64_t batch : {1, 4}) {
    const Plan p =
        plan_of(s, Layout{}, batch == 1 ? Workload::Latency : Workload::Throughput, batch);
    const Measured m = run_generation(rig.ctx, s, p, group, refs);
    EXPECT_EQ(m.status, "ok") << m.note;
    EXPECT_LT(m.check_error, 0.1);
    EXPECT_EQ(m.checked_by, "a prefill of the whole stream on one GPU");
    EXPECT_GT(m.ttft_s, 0);
    EXPECT_GT(m.tpot_s, 0);
  }
}

TEST(AdviseGpu, AWrongReferenceFailsTheRun) {
  Rig rig(1);
  const Settings s = small();
  RankGroup group(rig.gpus);
  const Plan p = plan_of(s, Layout{}, Workload::Latency, 1);
  // The right reference with one logit moved far off: the generation no longer matches it.
  References refs;
  (void)run_generation(rig.ctx, s, p, group, refs);
  auto& ref = refs.begin()->second.logits;
  for (std::size_t i = 0; i < ref.size(); i += 7) ref[i] += 10.0;
  const Measured m = run_generation(rig.ctx, s, p, group, refs);
  EXPECT_EQ(m.status, "failed");
  EXPECT_GT(m.check_error, 0.1);
  EXPECT_NE(m.note.find("last logits differ"), std::string::npos) << m.note;
}

// Every microbatch is held against its own reference, whatever the split it was made in: one
// GPU's batch of 4 in one microbatch, then in two of 2 (as a pipeline runs it) against the same
// reference, then the second microbatch's reference moved off alone.
TEST(AdviseGpu, EveryMicrobatchIsChecked) {
  Rig rig(1);
  const Settings s = small();
  RankGroup group(rig.gpus);
  Plan p = plan_of(s, Layout{}, Workload::Throughput, 4);
  ASSERT_EQ(p.m, 1);
  References refs;
  const Measured whole = run_generation(rig.ctx, s, p, group, refs);
  EXPECT_EQ(whole.status, "ok") << whole.note;
  p.m = 2;
  p.micro = 2;
  const Measured m = run_generation(rig.ctx, s, p, group, refs);
  EXPECT_EQ(m.status, "ok") << m.note;
  EXPECT_LT(m.check_error, 0.1);
  ASSERT_EQ(refs.size(), 1u);
  auto& ref = refs.begin()->second.logits;
  ASSERT_EQ(ref.size(), 4u * static_cast<std::size_t>(s.model.vocab_size));
  for (std::size_t i = ref.size() / 2; i < ref.size(); i += 7) ref[i] += 10.0;
  const Measured off = run_generation(rig.ctx, s, p, group, refs);
  EXPECT_EQ(off.status, "failed");
  EXPECT_GT(off.check_error, 0.1);
}

// A model whose one-GPU reference does not fit (here: --memory below the 4-layer reference) is
// checked cut down to the most layers whose reference fits, then held against itself: the next
// layout of the same shapes is checked against the first one's full logits.
TEST(AdviseGpu, AModelTooLargeForOneGpuIsCheckedCutDown) {
  Rig rig(1);
  Settings s = small();
  const std::size_t ws = gemm_workspace_bytes(compute_capability_major(0));
  const auto reference_bytes = [&](int layers) {
    model::EngineOptions eo;
    eo.layers = layers;
    eo.max_batch = 1;
    eo.max_tokens = eo.max_context = static_cast<int>(s.prompt + s.output_len - 1);
    return model::engine_memory(s.model, eo, ws).total() + parallel::kMemoryReserve;
  };
  s.memory_bytes = reference_bytes(3);  // 3 layers fit, the model's 4 do not
  RankGroup group(rig.gpus);
  References refs;
  const Plan p = plan_of(s, Layout{}, Workload::Latency, 1);
  const Measured first = run_generation(rig.ctx, s, p, group, refs);
  EXPECT_EQ(first.status, "ok") << first.note;
  EXPECT_EQ(first.cut_layers, 3);
  EXPECT_LT(first.cut_error, 0.1);
  EXPECT_GT(first.cut_error, 0.0);  // the two paths round differently
  EXPECT_EQ(first.checked_by, "one GPU, cut to 3 layers");
  const Measured second = run_generation(rig.ctx, s, p, group, refs);
  EXPECT_EQ(second.status, "ok") << second.note;
  EXPECT_EQ(second.checked_by, "layout dp=1");
  EXPECT_LT(second.check_error, 0.1);
  // Two sequences in one microbatch, then in two: the second run is held against the first's
  // logits, split otherwise.
  Plan two = plan_of(s, Layout{}, Workload::Throughput, 2);
  ASSERT_EQ(two.m, 1);
  const Measured one_split = run_generation(rig.ctx, s, two, group, refs);
  EXPECT_EQ(one_split.status, "ok") << one_split.note;
  EXPECT_GT(one_split.cut_layers, 0);
  two.m = 2;
  two.micro = 1;
  const Measured other_split = run_generation(rig.ctx, s, two, group, refs);
  EXPECT_EQ(other_split.status, "ok") << other_split.note;
  EXPECT_EQ(other_split.checked_by, "layout dp=1");
  EXPECT_LT(other_split.check_error, 0.1);
}

// Decode's all-reduces over NCCL and, where the GPUs have peer access, through the one-shot
// kernel: the same logits either way.
TEST(AdviseGpu, EveryLayoutOfTwoGpusGeneratesTheSameLogits) {
  if (visible_device_count() < 2) GTEST_SKIP() << "needs 2 or more GPUs";
  Rig rig(2);
  Settings s = small();
  RankGroup group(rig.gpus);
  References refs;
  for (bool one_shot : {false, true}) {
    s.small_all_reduces = one_shot && PeerAccess(rig.gpus).all() ? "one-shot" : "nccl";
    if (one_shot != s.one_shot()) continue;
    for (const Layout& l : parallel::every_layout(2, s.model)) {
      const Plan p = plan_of(s, l, Workload::Throughput, 4);
      ASSERT_TRUE(p.why_not.empty()) << p.why_not;
      const Measured m = run_generation(rig.ctx, s, p, group, refs);
      EXPECT_EQ(m.status, "ok") << l.name() << " one-shot " << one_shot << ": " << m.note;
      EXPECT_LT(m.check_error, 0.1) << l.name() << " one-shot " << one_shot;
    }
  }
}

// tp=2 with its prefill overlapped, each chunk's all-reduce through the copy engines (2 MiB and
// up: a 1024-token prompt in 4 slices, 4 sequences in 4 chunks), checked against one GPU.
TEST(AdviseGpu, TwoGpuOverlappedPrefillThroughTheCopyEngines) {
  if (visible_device_count() < 2) GTEST_SKIP() << "needs 2 or more GPUs";
  Rig rig(2);
  Settings s = small();
  s.prompt = 1024;
  s.small_all_reduces = PeerAccess(rig.gpus).all() ? "one-shot" : "nccl";
  RankGroup group(rig.gpus);
  References refs;
  for (auto [w, batch] : {std::pair{Workload::Latency, 1}, {Workload::Throughput, 4}}) {
    const Plan p = make_plan(s, Layout{1, 2, 1}, w, batch, parts_by_bytes(s),
                             compute_capability_major(0), 0, true);
    ASSERT_TRUE(p.why_not.empty()) << p.why_not;
    ASSERT_EQ(p.name(), "tp=2 overlap");
    const Measured m = run_generation(rig.ctx, s, p, group, refs);
    EXPECT_EQ(m.status, "ok") << batch << ": " << m.note;
    EXPECT_EQ(m.checked_by, "a prefill of the whole stream on one GPU") << batch;
    EXPECT_LT(m.check_error, 0.1) << batch;
  }
}

TEST(AdviseGpu, CollectivesAndTransfersOnTwoGpus) {
  if (visible_device_count() < 2) GTEST_SKIP() << "needs 2 or more GPUs";
  Rig rig(2);
  Settings s = small();
  Needs n;
  n.all_reduces = {{2, 8192}, {2, 8u << 20}};
  n.copy_all_reduces = {{2, 8192}, {2, 8u << 20}};  // the small one through the fallback
  n.transfers = {4, 8192, 8u << 20};
  for (bool one_shot : {false, true}) {
    s.small_all_reduces = one_shot && PeerAccess(rig.gpus).all() ? "one-shot" : "nccl";
    if (one_shot != s.one_shot()) continue;
    const Blocks b = calibrate(rig.ctx, s, n);
    ASSERT_EQ(b.all_reduce_s.size(), 2u) << "one-shot " << one_shot;
    ASSERT_EQ(b.transfer_s.size(), 3u);
    ASSERT_EQ(b.copy_all_reduce_s.size(), 2u);
    // More bytes take longer, every way of moving them.
    EXPECT_LT(b.all_reduce_s.at({2, 8192}), b.all_reduce_s.at({2, 8u << 20}));
    EXPECT_LT(b.copy_all_reduce_s.at({2, 8192}), b.copy_all_reduce_s.at({2, 8u << 20}));
    EXPECT_LT(b.transfer_s.at(8192), b.transfer_s.at(8u << 20));
  }
}

namespace {

// Training: llama-2-7b's shapes cut to 2 layers, one sequence of 512 tokens a GPU.
Settings small_training() {
  Options o;
  o.workload = "train";
  o.layers = 2;
  o.train_batch = 1;
  o.seq_len = 512;
  return resolve_settings(o, true);
}

}  // namespace

// One GPU: the training blocks measured, the baseline predicted from them, then run by `dp`
// through the core and checked there; the prediction is of the same order as the step.
TEST(AdviseGpu, OneGpuTrainingStepIsPredictedAndRunByDp) {
  Rig rig(1);
  const Settings s = small_training();
  const TrainFootprint f = train_footprint(s, rig.gpus.front());
  ASSERT_EQ(f.params.size(), 2u * 2 * 2 + 1);  // two linears a half-layer, the head
  EXPECT_GT(f.rest, 0u);
  const Plan p = make_train_plan(s, 1, parallel::Strategy::Ddp, f, 0);
  const Blocks b = calibrate(rig.ctx, s, needs_of(s, p));
  ASSERT_TRUE(b.train_forward.count(1) && b.train_backward.count(1));
  EXPECT_GT(b.train_forward.at(1).layer, 0);
  // A layer's backward runs twice the forward's GEMMs and attention's stand-in.
  EXPECT_GT(b.train_backward.at(1).layer, b.train_forward.at(1).layer);
  EXPECT_GT(b.adamw_s, 0);
  const Prediction pred = predict(s, p, b);
  const Measured m = run_training(rig.ctx, s, p);
  EXPECT_EQ(m.status, "ok") << m.note;
  EXPECT_FALSE(m.checked_by.empty());
  EXPECT_LT(m.check_error, 0.02);
  ASSERT_GT(m.e2e_s, 0);
  EXPECT_NEAR(m.tokens_per_s, 512 / m.e2e_s, 1e-6 * m.tokens_per_s);
  EXPECT_GT(pred.e2e_s, 0.5 * m.e2e_s);
  EXPECT_LT(pred.e2e_s, 2.0 * m.e2e_s);
}

// Two GPUs: the buckets' all-reduces, reduce-scatters and all-gathers timed, and a ddp layout of
// both GPUs run by `dp` and checked against one GPU.
TEST(AdviseGpu, TwoGpuTrainingCollectivesAndRun) {
  if (visible_device_count() < 2) GTEST_SKIP() << "needs 2 or more GPUs";
  Rig rig(2);
  const Settings s = small_training();
  Needs n;
  n.bucket_all_reduces = n.reduce_scatters = n.all_gathers = {{2, 1u << 20}, {2, 64u << 20}};
  const Blocks b = calibrate(rig.ctx, s, n);
  ASSERT_EQ(b.bucket_all_reduce_s.size(), 2u);
  EXPECT_TRUE(b.all_reduce_s.empty());  // tensor parallelism's
  EXPECT_LT(b.bucket_all_reduce_s.at({2, 1u << 20}), b.bucket_all_reduce_s.at({2, 64u << 20}));
  ASSERT_EQ(b.reduce_scatter_s.size(), 2u);
  ASSERT_EQ(b.all_gather_s.size(), 2u);
  EXPECT_LT(b.reduce_scatter_s.at({2, 1u << 20}), b.reduce_scatter_s.at({2, 64u << 20}));
  EXPECT_LT(b.all_gather_s.at({2, 1u << 20}), b.all_gather_s.at({2, 64u << 20}));
  const TrainFootprint f = train_footprint(s, rig.gpus.front());
  for (parallel::Strategy k : {parallel::Strategy::Ddp, parallel::Strategy::Fsdp}) {
    const Measured m = run_training(rig.ctx, s, make_train_plan(s, 2, k, f, 0));
    EXPECT_EQ(m.status, "ok") << m.note;
    EXPECT_NEAR(m.tokens_per_s, 2 * 512 / m.e2e_s, 1e-6 * m.tokens_per_s);
  }
}
