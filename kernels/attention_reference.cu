// The reference attention: one block per (query token, head), threads over head_dim, one key at
// a time with an online softmax in fp32. Slow and plain, so the fast kernels have a yardstick.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "gpubench/kernels/attention.cuh"
#include "gpubench/core/cuda.hpp"
#include "gpubench/kernels/transformer.cuh"

namespace gpubench {

namespace {

using transformer_detail::from_float;
using transformer_detail::to_float;

// Sum over the block (blockDim.x a multiple of 32, at most 256); every thread gets the result.
__device__ inline float block_sum(float v, float* scratch) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += scratch[w];
  __syncthreads();
  return total;
}

template <class T>
__global__ void reference_kernel(AttentionArgs a) {
  __shared__ float scratch[8];
  const int row = blockIdx.x;  // b * q_tokens + t
  const int h = blockIdx.y;
  const int b = row / a.q_tokens, t = row % a.q_tokens;
  const int g = h / (a.heads / a.kv_heads);
  const int d = threadIdx.x;
  const bool active = d < a.head_dim;
  const T* q = static_cast<const T*>(a.q) + static_cast<std::int64_t>(row) * a.q_stride +
               static_cast<std::int64_t>(h) * a.head_dim;
  const float qd = active ? to_float(q[d]) : 0.0f;
  const int keys = a.q_pos0 + t + 1;
  float m = -INFINITY, l = 0, acc = 0;
  for (int j = 0; j < keys; ++j) {
    const std::int64_t base = (static_cast<std::int64_t>(b) * a.max_context + j) * a.kv_stride +
                              static_cast<std::int64_t>(g) * a.head_dim;
    const float kd = active ? to_float(static_cast<const T*>(a.k)[base + d]) : 0.0f;
    const float s = block_sum(qd * kd, scratch) * a.scale;
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new);
    const float p = expf(s - m_new);
    const float vd = active ? to_float(static_cast<const T*>(a.v)[base + d]) : 0.0f;
    acc = acc * correction + p * vd;
    l = l * correction + p;
    m = m_new;
  }
  if (active)
    static_cast<T*>(a.out)[static_cast<std::int64_t>(row) * a.heads * a.head_dim +
                           static_cast<std::int64_t>(h) * a.head_dim + d] = from_float<T>(acc / l);
}

}  // namespace

AttentionArgs resolved_attention_args(AttentionArgs a) {
  if (a.q_stride == 0) a.q_stride = static_cast<std::int64_t>(a.heads) * a.head_dim;
  if (a.kv_stride == 0) a.kv_stride = static_cast<std::int64_t>(a.kv_heads) * a.head_dim;
  if (a.scale == 0) a.scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
  return a;
}

void attention_reference(const AttentionArgs& args, cudaStream_t stream) {
  const AttentionArgs a = resolved_attention_args(args);
  const dim3 grid(static_cast<unsigned>(a.batch * a.q_tokens), static_cast<unsigned>(a.heads));
  const int threads = (a.head_dim + 31) / 32 * 32;
  if (a.dtype == AttnDtype::BF16)
    reference_kernel<__nv_bfloat16><<<grid, threads, 0, stream>>>(a);
  else
    reference_kernel<__half><<<grid, threads, 0, stream>>>(a);
  GPB_CHECK_LAUNCH();
}

}  // namespace gpubench
