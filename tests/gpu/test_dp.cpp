// dp on the GPUs: the AdamW kernel against its host arithmetic, every strategy's checked step on
// one GPU equal to the reference step, a zeroed gradient bucket caught, and on 2 or more GPUs
// every strategy matching one GPU's step over the concatenated batch.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <vector>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/ranks.hpp"
#include "gpubench/kernels/optimizer.cuh"
#include "gpubench/modules/dp/dp.hpp"
#include "rig.hpp"

using namespace gpubench;
using namespace gpubench::dp;

namespace {

using Rig = gpubench::testing::QuickRig;

// llama-2-7b's shapes cut to 2 layers, short sequences, buckets of 40 MB (several a run).
Settings small() {
  Options o;
  o.layers = 2;
  o.seq_len = 256;
  o.batch_sizes = "2";
  o.bucket_size = "40MB";
  return resolve_settings(o, true, visible_device_count());
}

const std::vector<Strategy> kAll{Strategy::Ddp, Strategy::Zero1, Strategy::Zero2, Strategy::Fsdp};

}  // namespace

TEST(DpGpu, AdamWKernelMatchesItsHostArithmetic) {
  const std::int64_t n = 10'000;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> w(n), m(n), v(n), g(n);
  for (std::int64_t i = 0; i < n; ++i) {
    w[i] = dist(rng);
    m[i] = 0.1f * dist(rng);
    v[i] = std::fabs(0.01f * dist(rng));
    g[i] = dist(rng);
  }
  std::vector<std::uint16_t> g16(n);
  DeviceBuffer dw(0, n * 4), dm(0, n * 4), dv(0, n * 4), dg(0, n * 2), dg32(0, n * 4),
      out(0, n * 2), wide(0, n * 4);
  GPB_CUDA_CHECK(cudaMemcpy(dw.get(), w.data(), n * 4, cudaMemcpyHostToDevice));
  GPB_CUDA_CHECK(cudaMemcpy(dm.get(), m.data(), n * 4, cudaMemcpyHostToDevice));
  GPB_CUDA_CHECK(cudaMemcpy(dv.get(), v.data(), n * 4, cudaMemcpyHostToDevice));
  // The gradient as bf16: its fp32 values' upper halves (truncated), read back widened.
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &g[i], 4);
    g16[i] = static_cast<std::uint16_t>(bits >> 16);
    bits = static_cast<std::uint32_t>(g16[i]) << 16;
    std::memcpy(&g[i], &bits, 4);
  }
  GPB_CUDA_CHECK(cudaMemcpy(dg.get(), g16.data(), n * 2, cudaMemcpyHostToDevice));
  widen_to_fp32(dg32.as<float>(), dg.get(), n, ActDtype::BF16, nullptr);
  const AdamW h;
  adamw_step(dw.as<float>(), dm.as<float>(), dv.as<float>(), dg.get(), out.get(), n, h, 3, 0.5f,
             ActDtype::BF16, nullptr);
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> rw(n), rm(n), rv(n), rg(n);
  GPB_CUDA_CHECK(cudaMemcpy(rw.data(), dw.get(), n * 4, cudaMemcpyDeviceToHost));
  GPB_CUDA_CHECK(cudaMemcpy(rm.data(), dm.get(), n * 4, cudaMemcpyDeviceToHost));
  GPB_CUDA_CHECK(cudaMemcpy(rv.data(), dv.get(), n * 4, cudaMemcpyDeviceToHost));
  GPB_CUDA_CHECK(cudaMemcpy(rg.data(), dg32.get(), n * 4, cudaMemcpyDeviceToHost));
  std::vector<std::uint16_t> rout(n);
  GPB_CUDA_CHECK(cudaMemcpy(rout.data(), out.get(), n * 2, cudaMemcpyDeviceToHost));
  const AdamWTerms t = adamw_terms(h, 3);
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(rg[i], g[i]) << i;
    float ew = w[i], em = m[i], ev = v[i];
    adamw_update(ew, em, ev, g[i] * 0.5f, h, t);
    ASSERT_NEAR(rm[i], em, 1e-6f * (1 + std::fabs(em))) << i;
    ASSERT_NEAR(rv[i], ev, 1e-6f * (1 + std::fabs(ev))) << i;
    ASSERT_NEAR(rw[i], ew, 1e-6f * (1 + std::fabs(ew))) << i;
    // The bf16 weight is the new master rounded: within half a bf16 step of it.
    std::uint32_t bits = static_cast<std::uint32_t>(rout[i]) << 16;
    float back = 0;
    std::memcpy(&back, &bits, 4);
    ASSERT_NEAR(back, rw[i], std::fabs(rw[i]) / 256 + 1e-30f) << i;
  }
}

TEST(DpGpu, EveryStrategyOnOneGpuEqualsTheReferenceStep) {
  Rig rig(1);
  const Settings s = small();
  RankGroup group(rig.gpus);
  References refs;  // made by the first strategy, used by the others
  for (Strategy k : kAll) {
    const Outcome o = run_strategy(rig.ctx, s, k, 2, s.bucket_bytes, group, {}, &refs);
    EXPECT_EQ(o.status, "ok") << to_string(k) << ": " << o.note;
    // One rank runs the reference's GEMMs on the same data: the same gradients.
    EXPECT_EQ(o.grad_error, 0.0) << to_string(k);
    EXPECT_EQ(o.update_mismatch, 0.0) << to_string(k);
    EXPECT_LT(o.moment_error, 1e-6) << to_string(k);
    EXPECT_TRUE(o.ranks_agree);
    EXPECT_GT(o.step.median_s(), 0) << to_string(k);
    EXPECT_GT(o.buckets, 1) << to_string(k);
    // What a rank took, against its plan (the pool's slabs and cuBLASLt's own workspaces).
    EXPECT_GT(o.measured_bytes, 0.8 * o.planned.total()) << to_string(k);
    EXPECT_LT(o.measured_bytes, 1.2 * o.planned.total()) << to_string(k);
    // The traced step: a forward and a backward span for each of the 5 units (4 half-layers,
    // the head) and the optimizer on the compute lane; a collective a bucket beside, and fsdp's
    // gathers: every bucket before the forward, all but the last two again before the backward.
    int compute = 0, comm = 0;
    for (const TraceSpan& t : o.trace) {
      (t.lane == 0 ? compute : comm) += 1;
      EXPECT_GE(t.end, t.start) << t.name;
    }
    EXPECT_EQ(compute, 11) << to_string(k);
    EXPECT_EQ(comm, k == Strategy::Fsdp ? 3 * o.buckets - 2 : o.buckets) << to_string(k);
  }
  ASSERT_EQ(refs.size(), 1u);
  EXPECT_FALSE(refs.begin()->second.empty());
}

TEST(DpGpu, AZeroedGradientBucketFailsTheCheck) {
  Rig rig(1);
  const Settings s = small();
  RankGroup group(rig.gpus);
  Faults f;
  f.zero_bucket = 1;
  for (Strategy k : {Strategy::Ddp, Strategy::Fsdp}) {
    const Outcome o = run_strategy(rig.ctx, s, k, 2, s.bucket_bytes, group, f);
    EXPECT_EQ(o.status, "failed") << to_string(k);
    EXPECT_GT(o.grad_error, kGradTolerance) << to_string(k) << ": " << o.note;
  }
}

TEST(DpGpu, EveryStrategyOnTwoGpusMatchesOneGpuOverTheWholeBatch) {
  if (visible_device_count() < 2) GTEST_SKIP() << "needs 2 or more GPUs";
  Rig rig(2);
  const Settings s = small();
  RankGroup group(rig.gpus);
  for (Strategy k : kAll) {
    const Outcome o = run_strategy(rig.ctx, s, k, 2, s.bucket_bytes, group);
    EXPECT_EQ(o.status, "ok") << to_string(k) << ": " << o.note;
    EXPECT_LE(o.grad_error, kGradTolerance) << to_string(k);
    EXPECT_LE(o.update_mismatch, kUpdateTolerance) << to_string(k);
    EXPECT_LE(o.moment_error, kGradTolerance) << to_string(k);
    EXPECT_TRUE(o.ranks_agree) << to_string(k);
    EXPECT_GT(o.comm_alone.median_s(), 0) << to_string(k);
  }
  // A bucket the ranks never reduce is caught on two GPUs as on one.
  Faults f;
  f.zero_bucket = 0;
  EXPECT_EQ(run_strategy(rig.ctx, s, Strategy::Zero1, 2, s.bucket_bytes, group, f).status,
            "failed");
  // One changed bit on one rank.
  Faults flip;
  flip.flip_rank = 1;
  const Outcome o = run_strategy(rig.ctx, s, Strategy::Ddp, 2, s.bucket_bytes, group, flip);
  EXPECT_EQ(o.status, "failed");
  EXPECT_FALSE(o.ranks_agree) << o.note;
  // AdamW given the summed gradient: step 1's update is the same (about lr x its sign); its
  // first moment is twice one GPU's.
  for (Strategy k : kAll) {
    Faults sum;
    sum.unscaled = true;
    const Outcome u = run_strategy(rig.ctx, s, k, 2, s.bucket_bytes, group, sum);
    EXPECT_EQ(u.status, "failed") << to_string(k);
    EXPECT_GT(u.moment_error, 0.5) << to_string(k) << ": " << u.note;
  }
}
