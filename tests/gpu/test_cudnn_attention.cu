// cuDNN fused flash attention (CudnnAttention) against the reference kernel on seeded random
// data: bf16 and fp16, head_dim 64 and 128, 8/8 and 32/8 heads, batch 1 and 2, 17 to 1000
// tokens; Q read with a fused-qkv row stride, K/V from separate caches with room past the last
// position or from the fused qkv buffer itself, queries after a cached prefix (bottom-right
// causal mask), a CUDA-graph replay of run(), and the reasons given for what cuDNN cannot do.
// Skipped when no usable cuDNN 9 library is found.
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gpubench/kernels/attention.cuh"
#include "attention_test_values.hpp"
#include "gpubench/kernels/gemm_check.cuh"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/cudnn_attention.hpp"

using namespace gpubench;

namespace {

constexpr int kGpu = 0;

using gpubench::testing::host_value;

std::vector<std::uint16_t> to_host(const void* p, std::size_t n, cudaStream_t stream) {
  std::vector<std::uint16_t> h(n);
  GPB_CUDA_CHECK(cudaStreamSynchronize(stream));
  GPB_CUDA_CHECK(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
  return h;
}

// Why a test cannot run here, or "".
std::string skip_reason() {
  if (!CudnnAttention::library_available()) return CudnnAttention::library_status();
  int major = 0;
  GPB_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, kGpu));
  if (major < 8) return "cuDNN fused attention needs sm_80 or newer";
  return "";
}

struct Case {
  AttnDtype dtype;
  int batch, tokens, heads, kv_heads, head_dim, q_pos0;
  bool kv_in_qkv;  // K/V read from the fused qkv buffer (prefill without a cache)

  std::string label() const {
    return std::string(dtype == AttnDtype::BF16 ? "bf16" : "fp16") + " b=" + std::to_string(batch) +
           " t=" + std::to_string(tokens) + " h=" + std::to_string(heads) + "/" +
           std::to_string(kv_heads) + " d=" + std::to_string(head_dim) +
           " pos0=" + std::to_string(q_pos0) + (kv_in_qkv ? " kv=qkv" : " kv=cache");
  }
};

// One case's buffers filled from a seed: qkv [batch*tokens, (h + 2 h_kv) d] holding Q (and K/V
// when kv_in_qkv), else caches [batch, max_context, h_kv d] with max_context > q_pos0 + tokens;
// `out` for cuDNN, `ref` for the reference kernel.
struct Buffers {
  AttentionArgs args;
  DeviceBuffer qkv, k, v, out, ref;
  std::size_t out_elems = 0;

  Buffers(const Case& c, std::uint64_t seed) {
    const int d = c.head_dim;
    const std::int64_t qkv_stride = static_cast<std::int64_t>(c.heads + 2 * c.kv_heads) * d;
    const std::size_t rows = static_cast<std::size_t>(c.batch) * c.tokens;
    const std::size_t qkv_elems = rows * qkv_stride;
    out_elems = rows * c.heads * d;
    const GemmElement e = c.dtype == AttnDtype::BF16 ? GemmElement::BF16 : GemmElement::F16;
    qkv = DeviceBuffer(kGpu, qkv_elems * 2);
    fill_gemm_operand(qkv.get(), e, qkv_elems, seed, nullptr);
    out = DeviceBuffer(kGpu, out_elems * 2);
    ref = DeviceBuffer(kGpu, out_elems * 2);

    args.dtype = c.dtype;
    args.batch = c.batch;
    args.q_tokens = c.tokens;
    args.heads = c.heads;
    args.kv_heads = c.kv_heads;
    args.head_dim = d;
    args.q_pos0 = c.q_pos0;
    args.q_stride = qkv_stride;
    args.q = qkv.get();
    args.out = out.get();
    auto* base = static_cast<std::uint16_t*>(qkv.get());
    if (c.kv_in_qkv) {
      args.max_context = c.tokens;
      args.kv_stride = qkv_stride;
      args.k = base + static_cast<std::int64_t>(c.heads) * d;
      args.v = base + static_cast<std::int64_t>(c.heads + c.kv_heads) * d;
    } else {
      args.max_context = c.q_pos0 + c.tokens + 37;  // rows past the last position are not read
      args.kv_stride = static_cast<std::int64_t>(c.kv_heads) * d;
      const std::size_t kv_elems =
          static_cast<std::size_t>(c.batch) * args.max_context * args.kv_stride;
      k = DeviceBuffer(kGpu, kv_elems * 2);
      v = DeviceBuffer(kGpu, kv_elems * 2);
      fill_gemm_operand(k.get(), e, kv_elems, seed + 1, nullptr);
      fill_gemm_operand(v.get(), e, kv_elems, seed + 2, nullptr);
      args.k = k.get();
      args.v = v.get();
    }
    // The fills ran on the legacy default stream; the tests use a non-blocking one.
    GPB_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

// max |got - want| / max |want| over all outputs; NaN/inf in `got` count as infinite error.
double relative_error(const std::vector<std::uint16_t>& got, const std::vector<std::uint16_t>& want,
                      AttnDtype t) {
  double max_ref = 0, max_err = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double w = host_value(want, i, t), g = host_value(got, i, t);
    max_ref = std::max(max_ref, std::fabs(w));
    max_err = std::isfinite(g) ? std::max(max_err, std::fabs(g - w)) : INFINITY;
  }
  return max_ref > 0 ? max_err / max_ref : max_err;
}

// Prepares, runs and compares one case against the reference; prints the engine that ran.
void check_case(CudnnAttention& cudnn, const Case& c, const Stream& stream) {
  Buffers bufs(c, 1234 + c.tokens + c.q_pos0 + 7 * c.heads + c.head_dim);
  AttentionArgs ref_args = bufs.args;
  ref_args.out = bufs.ref.get();
  attention_reference(ref_args, stream);
  const auto want = to_host(bufs.ref.get(), bufs.out_elems, stream);

  const std::string why = cudnn.prepare(bufs.args);
  ASSERT_EQ(why, "") << c.label();
  GPB_CUDA_CHECK(cudaMemsetAsync(bufs.out.get(), 0xFF, bufs.out_elems * 2, stream));  // NaN
  cudnn.run(bufs.args, stream);
  const auto got = to_host(bufs.out.get(), bufs.out_elems, stream);
  const double err = relative_error(got, want, c.dtype);
  const double tolerance = c.dtype == AttnDtype::BF16 ? 2e-2 : 1e-2;
  std::printf("  %-44s error %.2e  %s\n", c.label().c_str(), err,
              cudnn.describe(bufs.args).c_str());
  EXPECT_LE(err, tolerance) << c.label();
}

}  // namespace

TEST(CudnnAttention, MatchesReference) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  DeviceGuard guard(kGpu);
  std::printf("%s\n", CudnnAttention::library_status().c_str());
  CudnnAttention cudnn(kGpu);
  Stream stream(kGpu);
  for (AttnDtype dt : {AttnDtype::BF16, AttnDtype::F16})
    for (int d : {64, 128})
      for (auto [h, hk] : {std::pair{8, 8}, std::pair{32, 8}})
        for (int batch : {1, 2})
          for (int tokens : {17, 256, 1000})
            check_case(cudnn, {dt, batch, tokens, h, hk, d, 0, false}, stream);
}

TEST(CudnnAttention, KvInsideFusedQkv) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  DeviceGuard guard(kGpu);
  CudnnAttention cudnn(kGpu);
  Stream stream(kGpu);
  for (const Case& c : {Case{AttnDtype::BF16, 2, 1000, 32, 8, 128, 0, true},
                        Case{AttnDtype::F16, 1, 256, 8, 8, 64, 0, true},
                        Case{AttnDtype::BF16, 2, 17, 8, 8, 128, 0, true}})
    check_case(cudnn, c, stream);
}

// Queries after a cached prefix: query t sees keys 0 .. q_pos0 + t (bottom-right diagonal).
TEST(CudnnAttention, QueriesAfterCachedPrefix) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  DeviceGuard guard(kGpu);
  CudnnAttention cudnn(kGpu);
  Stream stream(kGpu);
  for (const Case& c : {Case{AttnDtype::BF16, 1, 256, 32, 8, 128, 256, false},
                        Case{AttnDtype::BF16, 2, 100, 8, 8, 64, 37, false},
                        Case{AttnDtype::F16, 2, 17, 32, 8, 128, 1000, false},
                        Case{AttnDtype::F16, 1, 1000, 8, 8, 64, 300, false}})
    check_case(cudnn, c, stream);
}

// run() recorded into a CUDA graph and replayed gives the direct run's output, bit for bit.
TEST(CudnnAttention, ReplaysFromCudaGraph) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  DeviceGuard guard(kGpu);
  CudnnAttention cudnn(kGpu);
  Stream stream(kGpu);
  const Case c{AttnDtype::BF16, 2, 256, 32, 8, 128, 0, false};
  Buffers bufs(c, 99);
  ASSERT_EQ(cudnn.prepare(bufs.args), "");
  cudnn.run(bufs.args, stream);
  const auto direct = to_host(bufs.out.get(), bufs.out_elems, stream);
  CudaGraph graph;
  graph.capture(stream, [&](cudaStream_t s) { cudnn.run(bufs.args, s); });
  GPB_CUDA_CHECK(cudaMemsetAsync(bufs.out.get(), 0xFF, bufs.out_elems * 2, stream));
  graph.launch(stream);
  graph.launch(stream);
  const auto replayed = to_host(bufs.out.get(), bufs.out_elems, stream);
  EXPECT_EQ(std::memcmp(direct.data(), replayed.data(), direct.size() * 2), 0);
}

TEST(CudnnAttention, ReasonsForWhatItCannotDo) {
  CudnnAttention cudnn(kGpu);
  AttentionArgs a;
  a.batch = 1;
  a.q_tokens = 64;
  a.heads = 8;
  a.kv_heads = 8;
  a.head_dim = 64;
  a.max_context = 64;
  if (!CudnnAttention::library_available()) {
    // Without the library every shape gets the library's reason, and nothing runs.
    EXPECT_EQ(cudnn.prepare(a), CudnnAttention::library_status());
    EXPECT_THROW(cudnn.run(a, nullptr), GpuError);
    return;
  }
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  AttentionArgs bad = a;
  bad.head_dim = 100;  // not a multiple of 8
  EXPECT_NE(cudnn.prepare(bad), "");
  bad = a;
  bad.q_stride = a.heads * a.head_dim + 4;  // rows not 16-byte aligned
  EXPECT_NE(cudnn.prepare(bad), "");
  bad = a;
  bad.heads = 6;
  bad.kv_heads = 4;  // not a grouping
  EXPECT_NE(cudnn.prepare(bad), "");
  bad = a;
  bad.q_pos0 = 10;  // past max_context
  EXPECT_NE(cudnn.prepare(bad), "");
  EXPECT_THROW(cudnn.run(bad, nullptr), GpuError);  // never prepared successfully
  EXPECT_EQ(cudnn.describe(bad), "");
}
