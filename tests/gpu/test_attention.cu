// Attention kernels on fresh seeded data: the reference kernel against a host fp64 computation
// (prefill, causal, grouped-query heads, both storage types); prefill attention against the
// reference for head_dim 64 and 128, bf16 and fp16, grouped-query heads, batch 2, lengths that
// are not tile multiples, queries appended after a cached prefix and fused-qkv strides, plus a
// check that it never writes rows past q_tokens and a long-sequence timing with spot checks; and
// decode attention over a KV cache against the reference for many contexts, head sizes and split
// counts.
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpubench/kernels/attention.cuh"
#include "attention_test_values.hpp"
#include "gpubench/kernels/gemm_check.cuh"
#include "gpubench/core/cuda.hpp"
#include "half_bits.hpp"

using namespace gpubench;

namespace {

constexpr int kGpu = 0;

using gpubench::testing::host_value;

std::vector<std::uint16_t> to_host(const DeviceBuffer& b, std::size_t n) {
  std::vector<std::uint16_t> h(n);
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
  GPB_CUDA_CHECK(cudaMemcpy(h.data(), b.get(), n * 2, cudaMemcpyDeviceToHost));
  return h;
}

struct Case {
  AttnDtype dtype;
  int batch, q_tokens, heads, kv_heads, head_dim, q_pos0;
};

// Buffers for one case, filled from a seed: q [batch*q_tokens, heads*d], caches
// [batch, max_context, kv_heads*d], out like q.
struct Buffers {
  AttentionArgs args;
  DeviceBuffer q, k, v, out;
  std::size_t q_elems = 0, kv_elems = 0;
  Buffers(const Case& c, std::uint64_t seed) {
    args.dtype = c.dtype;
    args.batch = c.batch;
    args.q_tokens = c.q_tokens;
    args.heads = c.heads;
    args.kv_heads = c.kv_heads;
    args.head_dim = c.head_dim;
    args.q_pos0 = c.q_pos0;
    args.max_context = c.q_pos0 + c.q_tokens + 3;  // room past the last position
    q_elems = static_cast<std::size_t>(c.batch) * c.q_tokens * c.heads * c.head_dim;
    kv_elems = static_cast<std::size_t>(c.batch) * args.max_context * c.kv_heads * c.head_dim;
    q = DeviceBuffer(kGpu, q_elems * 2);
    k = DeviceBuffer(kGpu, kv_elems * 2);
    v = DeviceBuffer(kGpu, kv_elems * 2);
    out = DeviceBuffer(kGpu, q_elems * 2);
    const GemmElement e = c.dtype == AttnDtype::BF16 ? GemmElement::BF16 : GemmElement::F16;
    fill_gemm_operand(q.get(), e, q_elems, seed, nullptr);
    fill_gemm_operand(k.get(), e, kv_elems, seed + 1, nullptr);
    fill_gemm_operand(v.get(), e, kv_elems, seed + 2, nullptr);
    args.q = q.get();
    args.k = k.get();
    args.v = v.get();
    args.out = out.get();
  }
};

// |got - want| <= 2^-7 |want| + 2e-3 (bf16; fp16 is tighter and passes the same bound).
bool close(float got, double want) {
  return std::fabs(got - want) <= 0x1.0p-7 * std::fabs(want) + 2e-3;
}

// Overwrites `count` elements at `dst` with seeded normal values of deviation `sigma`.
void fill_normal(void* dst, std::size_t count, AttnDtype t, float sigma, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<std::uint16_t> h(count);
  for (auto& x : h) x = gpubench::testing::to_bits(t, normal(rng));
  GPB_CUDA_CHECK(cudaMemcpy(dst, h.data(), count * 2, cudaMemcpyHostToDevice));
}

// Normal data with queries at deviation 2, so scores have deviation ~2 at the default scale and
// the softmax is far from flat (a few keys dominate each row, as in trained models).
void fill_prefill_data(Buffers& bufs, std::uint64_t seed) {
  fill_normal(bufs.q.get(), bufs.q_elems, bufs.args.dtype, 2.0f, seed);
  fill_normal(bufs.k.get(), bufs.kv_elems, bufs.args.dtype, 1.0f, seed + 1);
  fill_normal(bufs.v.get(), bufs.kv_elems, bufs.args.dtype, 1.0f, seed + 2);
}

// Prefill tolerance, relative to the largest |value| of the reference output: P is rounded to
// the storage type before P V, and both outputs are rounded once more.
double prefill_tolerance(AttnDtype t) {
  return t == AttnDtype::BF16 ? 2e-2 : 5e-3;
}

// max |got - want| / max |want| over n outputs (NaN or inf in `got` counts as infinite).
double prefill_error(const std::vector<std::uint16_t>& got, const std::vector<std::uint16_t>& want,
                     std::size_t n, AttnDtype t) {
  double max_err = 0, max_ref = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double w = host_value(want, i, t), d = std::fabs(host_value(got, i, t) - w);
    max_err = std::isfinite(d) ? std::max(max_err, d) : INFINITY;
    max_ref = std::max(max_ref, std::fabs(w));
  }
  return max_ref > 0 ? max_err / max_ref : max_err;
}

// Runs the reference and prefill on `bufs` (data already filled) and returns prefill_error.
double prefill_vs_reference(Buffers& bufs) {
  attention_reference(bufs.args, nullptr);
  const auto want = to_host(bufs.out, bufs.q_elems);
  GPB_CUDA_CHECK(cudaMemset(bufs.out.get(), 0xFF, bufs.q_elems * 2));  // NaN
  prefill_attention(bufs.args, nullptr);
  const auto got = to_host(bufs.out, bufs.q_elems);
  return prefill_error(got, want, bufs.q_elems, bufs.args.dtype);
}

const char* dtype_name(AttnDtype t) {
  return t == AttnDtype::BF16 ? "bf16" : "fp16";
}

}  // namespace

TEST(Attention, ReferenceMatchesHostCausalGqa) {
  DeviceGuard guard(kGpu);
  for (const Case& c :
       {Case{AttnDtype::BF16, 2, 7, 4, 2, 64, 0}, Case{AttnDtype::F16, 1, 5, 6, 3, 128, 9},
        Case{AttnDtype::BF16, 1, 1, 8, 8, 128, 300}}) {
    Buffers bufs(c, 41);
    attention_reference(bufs.args, nullptr);
    const auto q = to_host(bufs.q, bufs.q_elems), k = to_host(bufs.k, bufs.kv_elems),
               v = to_host(bufs.v, bufs.kv_elems), out = to_host(bufs.out, bufs.q_elems);
    const int d = c.head_dim, group = c.heads / c.kv_heads, mc = bufs.args.max_context;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    int wrong = 0;
    for (int b = 0; b < c.batch; ++b)
      for (int t = 0; t < c.q_tokens; ++t)
        for (int h = 0; h < c.heads; ++h) {
          const int g = h / group, keys = c.q_pos0 + t + 1;
          const std::size_t qrow = (static_cast<std::size_t>(b) * c.q_tokens + t) * c.heads * d;
          std::vector<double> s(keys);
          double mx = -1e300;
          for (int j = 0; j < keys; ++j) {
            const std::size_t krow = (static_cast<std::size_t>(b) * mc + j) * c.kv_heads * d;
            double dot = 0;
            for (int i = 0; i < d; ++i)
              dot += host_value(q, qrow + h * d + i, c.dtype) *
                     host_value(k, krow + g * d + i, c.dtype);
            s[j] = dot * scale;
            mx = std::max(mx, s[j]);
          }
          double den = 0;
          for (int j = 0; j < keys; ++j) den += std::exp(s[j] - mx);
          for (int i = 0; i < d; ++i) {
            double num = 0;
            for (int j = 0; j < keys; ++j) {
              const std::size_t krow = (static_cast<std::size_t>(b) * mc + j) * c.kv_heads * d;
              num += std::exp(s[j] - mx) * host_value(v, krow + g * d + i, c.dtype);
            }
            wrong += !close(host_value(out, qrow + h * d + i, c.dtype), num / den);
          }
        }
    EXPECT_EQ(wrong, 0) << "heads " << c.heads << " d " << c.head_dim << " pos0 " << c.q_pos0;
  }
}

TEST(Attention, PrefillMatchesReference) {
  DeviceGuard guard(kGpu);
  for (AttnDtype dt : {AttnDtype::BF16, AttnDtype::F16})
    for (int d : {64, 128})
      for (const Case& shape :
           {Case{dt, 1, 1, 4, 4, d, 0},       // a single query
            Case{dt, 2, 17, 8, 2, d, 0},      // batch 2, GQA 8/2, a partial tile
            Case{dt, 1, 64, 4, 1, d, 0},      // one key tile exactly, multi-query
            Case{dt, 1, 100, 4, 2, d, 37},    // after an unaligned cached prefix
            Case{dt, 1, 129, 4, 4, d, 64},    // one query past a block, aligned prefix
            Case{dt, 2, 300, 32, 8, d, 0},    // GQA 32/8, three query blocks
            Case{dt, 1, 1000, 8, 2, d, 0},    // many key tiles, heavy-first order
            Case{dt, 2, 200, 8, 2, d, 555}})  // batch 2 after a long prefix
      {
        Buffers bufs(shape, 91 + shape.q_tokens);
        fill_prefill_data(bufs, 1000 + shape.q_tokens + shape.q_pos0);
        // The caches hold the prefix (positions 0 .. q_pos0-1) and then the queries' own keys.
        const double err = prefill_vs_reference(bufs);
        EXPECT_LE(err, prefill_tolerance(dt))
            << dtype_name(dt) << " d " << d << " batch " << shape.batch << " tokens "
            << shape.q_tokens << " pos0 " << shape.q_pos0 << " heads " << shape.heads << "/"
            << shape.kv_heads;
      }
}

// Q, K and V read from one fused [tokens, (heads + 2 kv_heads) * d] buffer, as the engine's
// prefill does: strides larger than a head row, K/V "cache" of exactly q_tokens rows.
TEST(Attention, PrefillFusedQkvStrides) {
  DeviceGuard guard(kGpu);
  for (AttnDtype dt : {AttnDtype::BF16, AttnDtype::F16})
    for (int d : {64, 128}) {
      const int batch = 2, tokens = 150, heads = 8, kv_heads = 2;
      const std::int64_t row = static_cast<std::int64_t>(heads + 2 * kv_heads) * d;
      const std::size_t qkv_elems = static_cast<std::size_t>(batch) * tokens * row;
      const std::size_t out_elems = static_cast<std::size_t>(batch) * tokens * heads * d;
      DeviceBuffer qkv(kGpu, qkv_elems * 2), out(kGpu, out_elems * 2);
      fill_normal(qkv.get(), qkv_elems, dt, 1.5f, 7 + d);
      AttentionArgs a;
      a.dtype = dt;
      a.batch = batch;
      a.q_tokens = tokens;
      a.heads = heads;
      a.kv_heads = kv_heads;
      a.head_dim = d;
      a.max_context = tokens;
      a.q_stride = a.kv_stride = row;
      a.q = qkv.get();
      a.k = qkv.as<std::uint16_t>() + heads * d;
      a.v = qkv.as<std::uint16_t>() + (heads + kv_heads) * d;
      a.out = out.get();
      attention_reference(a, nullptr);
      const auto want = to_host(out, out_elems);
      GPB_CUDA_CHECK(cudaMemset(out.get(), 0xFF, out_elems * 2));
      prefill_attention(a, nullptr);
      const auto got = to_host(out, out_elems);
      EXPECT_LE(prefill_error(got, want, out_elems, dt), prefill_tolerance(dt))
          << dtype_name(dt) << " d " << d;
    }
}

// Rows past q_tokens belong to someone else (the next sequence, or nothing): the last query
// block, which computes padded rows, must leave them alone.
TEST(Attention, PrefillNeverWritesPastQTokens) {
  DeviceGuard guard(kGpu);
  constexpr std::uint16_t kSentinel = 0x7B7B;  // a huge finite value no softmax average reaches
  for (AttnDtype dt : {AttnDtype::BF16, AttnDtype::F16})
    for (int d : {64, 128})
      for (int tokens : {1, 17, 127, 130, 300}) {
        Buffers bufs(Case{dt, 1, tokens, 4, 2, d, 5}, 3 + tokens);
        const std::size_t row = 4 * static_cast<std::size_t>(d), extra = 160 * row;
        DeviceBuffer out(kGpu, (bufs.q_elems + extra) * 2);
        const std::vector<std::uint16_t> fill(bufs.q_elems + extra, kSentinel);
        GPB_CUDA_CHECK(cudaMemcpy(out.get(), fill.data(), fill.size() * 2, cudaMemcpyHostToDevice));
        bufs.args.out = out.get();
        prefill_attention(bufs.args, nullptr);
        const auto got = to_host(out, fill.size());
        std::size_t unwritten = 0, overwritten = 0;
        for (std::size_t i = 0; i < bufs.q_elems; ++i) unwritten += got[i] == kSentinel;
        for (std::size_t i = bufs.q_elems; i < got.size(); ++i) overwritten += got[i] != kSentinel;
        EXPECT_EQ(unwritten, 0u) << dtype_name(dt) << " d " << d << " tokens " << tokens;
        EXPECT_EQ(overwritten, 0u) << dtype_name(dt) << " d " << d << " tokens " << tokens;
      }
}

// One long causal prefill (batch 1, 32 heads, d 128, 8192 tokens): a few rows across the range
// checked against fp64 on the host (the reference kernel would take minutes), then timed. The
// throughput is printed and recorded, not asserted: it depends on the GPU and its clocks.
// FLOPs are counted as 4 L^2 d heads / 2 (causal half of Q K^T and P V).
TEST(Attention, PrefillLongSequenceSpotCheckAndThroughput) {
  DeviceGuard guard(kGpu);
  const int L = 8192, heads = 32, d = 128;
  for (AttnDtype dt : {AttnDtype::BF16, AttnDtype::F16}) {
    Buffers bufs(Case{dt, 1, L, heads, heads, d, 0}, 5);
    prefill_attention(bufs.args, nullptr);
    const auto q = to_host(bufs.q, bufs.q_elems), k = to_host(bufs.k, bufs.kv_elems),
               v = to_host(bufs.v, bufs.kv_elems), out = to_host(bufs.out, bufs.q_elems);
    const std::size_t row = static_cast<std::size_t>(heads) * d;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    double max_err = 0, max_ref = 0;
    for (int t : {0, 1, 63, 64, 127, 128, 4095, 5000, 8190, 8191})
      for (int h : {0, 13, 31}) {
        std::vector<double> s(t + 1);
        double mx = -1e300;
        for (int j = 0; j <= t; ++j) {
          double dot = 0;
          for (int i = 0; i < d; ++i)
            dot += static_cast<double>(host_value(q, t * row + h * d + i, dt)) *
                   host_value(k, j * row + h * d + i, dt);
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double den = 0;
        for (int j = 0; j <= t; ++j) den += s[j] = std::exp(s[j] - mx);
        for (int i = 0; i < d; ++i) {
          double num = 0;
          for (int j = 0; j <= t; ++j) num += s[j] * host_value(v, j * row + h * d + i, dt);
          const double want = num / den,
                       err = std::fabs(host_value(out, t * row + h * d + i, dt) - want);
          max_err = std::isfinite(err) ? std::max(max_err, err) : INFINITY;
          max_ref = std::max(max_ref, std::fabs(want));
        }
      }
    EXPECT_LE(max_err / max_ref, prefill_tolerance(dt)) << dtype_name(dt);

    Stream stream(kGpu);
    Event start(kGpu), stop(kGpu);
    for (int i = 0; i < 3; ++i) prefill_attention(bufs.args, stream);
    constexpr int kReps = 20;
    start.record(stream);
    for (int i = 0; i < kReps; ++i) prefill_attention(bufs.args, stream);
    stop.record(stream);
    stop.synchronize();
    const double seconds = stop.seconds_since(start) / kReps;
    const double tflops = 4.0 * L * L * d * heads / 2 / seconds / 1e12;
    std::printf("  prefill %s d %d L %d heads %d causal: %.3f ms, %.1f TFLOP/s\n", dtype_name(dt),
                d, L, heads, seconds * 1e3, tflops);
    ::testing::Test::RecordProperty(std::string("prefill_tflops_") + dtype_name(dt),
                                    std::to_string(tflops));
  }
}

TEST(Attention, DecodeMatchesReference) {
  DeviceGuard guard(kGpu);
  int sms = 0;
  GPB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, kGpu));
  for (AttnDtype dt : {AttnDtype::BF16, AttnDtype::F16})
    for (int d : {64, 128})
      for (int context : {0, 1, 63, 64, 1000, 4097}) {
        const Case c{dt, 2, 1, 8, 2, d, context};
        Buffers bufs(c, 77 + context);
        attention_reference(bufs.args, nullptr);
        const auto want = to_host(bufs.out, bufs.q_elems);
        for (int splits : {1, 3, decode_attention_splits(bufs.args, sms), 64}) {
          DeviceBuffer ws(kGpu, decode_workspace_bytes(bufs.args, splits));
          GPB_CUDA_CHECK(cudaMemset(bufs.out.get(), 0xFF, bufs.q_elems * 2));  // NaN
          decode_attention(bufs.args, splits, ws.get(), nullptr);
          const auto got = to_host(bufs.out, bufs.q_elems);
          int wrong = 0;
          for (std::size_t i = 0; i < bufs.q_elems; ++i)
            wrong += !close(host_value(got, i, dt), host_value(want, i, dt));
          EXPECT_EQ(wrong, 0) << "d " << d << " context " << context << " splits " << splits;
        }
      }
  AttentionArgs a;
  a.batch = 1;
  a.heads = 32;
  a.q_pos0 = 8191;
  EXPECT_GE(decode_attention_splits(a, 132), 8);  // 32 heads alone would leave SMs idle
  a.q_pos0 = 10;
  EXPECT_EQ(decode_attention_splits(a, 132), 1);  // a short context stays in one chunk
}
