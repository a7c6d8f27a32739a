// Attention kernels on fresh seeded data: the reference kernel against a host fp64 computation
// (prefill, causal, grouped-query heads, both storage types), and decode attention over a KV
// cache against the reference kernel for many contexts, head sizes and split counts.
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "attention.cuh"
#include "gemm_check.cuh"
#include "gpubench/core/cuda.hpp"

using namespace gpubench;

namespace {

constexpr int kGpu = 0;

float host_value(const std::vector<std::uint16_t>& raw, std::size_t i, AttnDtype t) {
  if (t == AttnDtype::BF16) {
    __nv_bfloat16 x;
    std::memcpy(&x, &raw[i], 2);
    return __bfloat162float(x);
  }
  __half x;
  std::memcpy(&x, &raw[i], 2);
  return __half2float(x);
}

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
           {Case{dt, 1, 1, 4, 4, d, 0}, Case{dt, 2, 17, 8, 2, d, 0}, Case{dt, 1, 64, 4, 1, d, 0},
            Case{dt, 1, 100, 4, 2, d, 37}, Case{dt, 2, 300, 8, 8, d, 0}}) {
        Buffers bufs(shape, 91 + shape.q_tokens);
        // Prefill keys are the sequence's own tokens: the caches hold them from position 0.
        attention_reference(bufs.args, nullptr);
        const auto want = to_host(bufs.out, bufs.q_elems);
        GPB_CUDA_CHECK(cudaMemset(bufs.out.get(), 0xFF, bufs.q_elems * 2));
        prefill_attention(bufs.args, nullptr);
        const auto got = to_host(bufs.out, bufs.q_elems);
        int wrong = 0;
        for (std::size_t i = 0; i < bufs.q_elems; ++i)
          wrong += !close(host_value(got, i, dt), host_value(want, i, dt));
        EXPECT_EQ(wrong, 0) << "d " << d << " tokens " << shape.q_tokens << " pos0 " << shape.q_pos0
                            << " heads " << shape.heads << "/" << shape.kv_heads;
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
