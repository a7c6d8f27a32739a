// Decode attention: one query token per sequence over its KV cache. Each block takes one (batch,
// head) and one chunk of the context; its warps walk keys with an online softmax, lanes holding
// head_dim/32 elements each; a second kernel merges the chunks' partial results.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "attention.cuh"
#include "gpubench/core/cuda.hpp"
#include "transformer.cuh"

namespace gpubench {

namespace {

using transformer_detail::from_float;
using transformer_detail::to_float;

constexpr int kWarps = 4;

// Partial result of one chunk: running max m, sum l, and unnormalized acc[head_dim].
__device__ inline float* partial_at(float* ws, int bh, int split, int splits, int head_dim) {
  return ws + (static_cast<std::int64_t>(bh) * splits + split) * (2 + head_dim);
}

template <class T, int D>
__global__ void __launch_bounds__(kWarps * 32)
    decode_split_kernel(AttentionArgs a, int splits, float* ws) {
  constexpr int kPer = D / 32;  // elements per lane
  __shared__ float sm[kWarps], sl[kWarps], sacc[kWarps][D];
  const int bh = blockIdx.x, split = blockIdx.y;
  const int b = bh / a.heads, h = bh % a.heads;
  const int g = h / (a.heads / a.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int keys = a.q_pos0 + 1;
  const int chunk = (keys + splits - 1) / splits;
  const int begin = split * chunk, end = min(keys, begin + chunk);

  const T* q = static_cast<const T*>(a.q) + static_cast<std::int64_t>(b) * a.q_stride +
               static_cast<std::int64_t>(h) * D;
  float qv[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) qv[i] = to_float(q[lane * kPer + i]) * a.scale;

  float m = -INFINITY, l = 0, acc[kPer] = {};
  const T* kbase = static_cast<const T*>(a.k) + static_cast<std::int64_t>(g) * D + lane * kPer;
  const T* vbase = static_cast<const T*>(a.v) + static_cast<std::int64_t>(g) * D + lane * kPer;
  for (int j = begin + warp; j < end; j += kWarps) {
    const std::int64_t row = (static_cast<std::int64_t>(b) * a.max_context + j) * a.kv_stride;
    float s = 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i) s += qv[i] * to_float(kbase[row + i]);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new);
    const float p = expf(s - m_new);
#pragma unroll
    for (int i = 0; i < kPer; ++i) acc[i] = acc[i] * correction + p * to_float(vbase[row + i]);
    l = l * correction + p;
    m = m_new;
  }
  // Merge the warps, then write the block's partial.
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) sacc[warp][lane * kPer + i] = acc[i];
  __syncthreads();
  float mb = -INFINITY;
  for (int w = 0; w < kWarps; ++w) mb = fmaxf(mb, sm[w]);
  float* out = partial_at(ws, bh, split, splits, D);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float sum = 0;
    for (int w = 0; w < kWarps; ++w)
      if (sl[w] > 0) sum += sacc[w][d] * expf(sm[w] - mb);
    out[2 + d] = sum;
  }
  if (threadIdx.x == 0) {
    float lb = 0;
    for (int w = 0; w < kWarps; ++w)
      if (sl[w] > 0) lb += sl[w] * expf(sm[w] - mb);
    out[0] = mb;
    out[1] = lb;
  }
}

template <class T, int D>
__global__ void decode_combine_kernel(AttentionArgs a, int splits, const float* ws) {
  const int bh = blockIdx.x;
  const int b = bh / a.heads, h = bh % a.heads;
  float mx = -INFINITY;
  for (int s = 0; s < splits; ++s) {
    const float* p = partial_at(const_cast<float*>(ws), bh, s, splits, D);
    if (p[1] > 0) mx = fmaxf(mx, p[0]);
  }
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float num = 0, den = 0;
    for (int s = 0; s < splits; ++s) {
      const float* p = partial_at(const_cast<float*>(ws), bh, s, splits, D);
      if (p[1] <= 0) continue;  // an empty chunk
      const float w = expf(p[0] - mx);
      num += p[2 + d] * w;
      den += p[1] * w;
    }
    static_cast<T*>(
        a.out)[static_cast<std::int64_t>(b) * a.heads * D + static_cast<std::int64_t>(h) * D + d] =
        from_float<T>(num / den);
  }
}

template <class T, int D>
void launch(const AttentionArgs& a, int splits, float* ws, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.batch * a.heads), static_cast<unsigned>(splits));
  decode_split_kernel<T, D><<<grid, kWarps * 32, 0, stream>>>(a, splits, ws);
  GPB_CHECK_LAUNCH();
  decode_combine_kernel<T, D><<<a.batch * a.heads, D, 0, stream>>>(a, splits, ws);
  GPB_CHECK_LAUNCH();
}

}  // namespace

int decode_attention_splits(const AttentionArgs& a, int sm_count) {
  const int keys = a.q_pos0 + 1;
  const int blocks = std::max(1, a.batch * a.heads);
  // Enough blocks for two waves over the SMs, chunks of at least 64 keys, at most 64 chunks.
  const int want = (2 * std::max(sm_count, 1) + blocks - 1) / blocks;
  const int most = std::max(1, (keys + 63) / 64);
  return std::clamp(std::min(want, most), 1, 64);
}

std::size_t decode_workspace_bytes(const AttentionArgs& a, int splits) {
  return static_cast<std::size_t>(a.batch) * a.heads * splits * (2 + a.head_dim) * sizeof(float);
}

void decode_attention(const AttentionArgs& args, int splits, void* workspace, cudaStream_t stream) {
  const AttentionArgs a = resolved_attention_args(args);
  float* ws = static_cast<float*>(workspace);
  const bool bf16 = a.dtype == AttnDtype::BF16;
  if (a.head_dim == 128) {
    bf16 ? launch<__nv_bfloat16, 128>(a, splits, ws, stream)
         : launch<__half, 128>(a, splits, ws, stream);
  } else if (a.head_dim == 64) {
    bf16 ? launch<__nv_bfloat16, 64>(a, splits, ws, stream)
         : launch<__half, 64>(a, splits, ws, stream);
  } else {
    throw GpuError("decode_attention: head_dim must be 64 or 128");
  }
}

}  // namespace gpubench
