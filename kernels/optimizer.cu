// AdamW over fp32 master weights and the widening that starts them: grid-stride element-wise
// kernels (memory-bound: 28 bytes a parameter read and written).
#include <algorithm>
#include <string>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/kernels/optimizer.cuh"

namespace gpubench {

using namespace transformer_detail;

namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 1 << 16;

unsigned grid_for(std::int64_t n) {
  return static_cast<unsigned>(std::clamp<std::int64_t>((n + kThreads - 1) / kThreads, 1,
                                                        kMaxBlocks));
}

template <class T>
__global__ void adamw_kernel(float* __restrict__ master, float* __restrict__ m,
                             float* __restrict__ v, const T* __restrict__ grad,
                             T* __restrict__ weight, std::int64_t n, AdamW h, AdamWTerms t,
                             float grad_scale) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float w = master[i], mi = m[i], vi = v[i];
    adamw_update(w, mi, vi, to_float(grad[i]) * grad_scale, h, t);
    master[i] = w;
    m[i] = mi;
    v[i] = vi;
    weight[i] = from_float<T>(w);
  }
}

template <class T>
__global__ void widen_kernel(float* __restrict__ dst, const T* __restrict__ src, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    dst[i] = to_float(src[i]);
}

}  // namespace

void adamw_step(float* master, float* m, float* v, const void* grad, void* weight,
                std::int64_t n, const AdamW& h, int step, float grad_scale, ActDtype dtype,
                cudaStream_t stream) {
  if (n < 0 || step < 1)
    throw InputError("adamw_step: " + std::to_string(n) + " parameters at step " +
                     std::to_string(step) + " (needs n >= 0, step >= 1)");
  if (n == 0) return;
  const AdamWTerms t = adamw_terms(h, step);
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    adamw_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
        master, m, v, static_cast<const T*>(grad), static_cast<T*>(weight), n, h, t, grad_scale);
  });
  GPB_CHECK_LAUNCH();
}

void widen_to_fp32(float* dst, const void* src, std::int64_t n, ActDtype dtype,
                   cudaStream_t stream) {
  if (n < 0) throw InputError("widen_to_fp32: " + std::to_string(n) + " elements");
  if (n == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    widen_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(dst, static_cast<const T*>(src), n);
  });
  GPB_CHECK_LAUNCH();
}

}  // namespace gpubench
