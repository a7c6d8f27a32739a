// Backward-pass kernels of the training benchmark: SwiGLU's and tanh GELU's gradients
// (grid-stride element-wise kernels) and RMSNorm's input gradient (one block per row), fp32
// math, one rounding per stored element.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/kernels/training.cuh"
#include "gpubench/kernels/transformer.cuh"

namespace gpubench {

using namespace transformer_detail;

namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 1 << 16;  // grid-stride loops cover the rest
constexpr int kMaxNormThreads = 256;

unsigned grid_for(std::int64_t work_items) {
  return static_cast<unsigned>(
      std::clamp<std::int64_t>((work_items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

__device__ __forceinline__ std::int64_t thread_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t grid_threads() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// ---------------------------------------------------------------------------------------------
// SwiGLU backward: one work item is V consecutive columns j..j+V-1 of one token; it reads the
// gate and up values there and d_out, and writes both halves of d_gate_up at the same columns.
// Each item writes exactly the gate_up elements it read, so d_gate_up may be gate_up.

template <class T, int V>
__global__ void swiglu_backward_kernel(T* d_gate_up, const T* gate_up, const T* d_out,
                                       std::int64_t tokens, int intermediate) {
  const std::int64_t per_row = intermediate / V;
  for (std::int64_t i = thread_index(); i < tokens * per_row; i += grid_threads()) {
    const std::int64_t t = i / per_row;
    const std::int64_t j = (i % per_row) * V;
    const std::int64_t row = t * 2 * intermediate;
    float g[V], u[V], dy[V];
    load<V>(gate_up + row + j, g);
    load<V>(gate_up + row + intermediate + j, u);
    load<V>(d_out + t * intermediate + j, dy);
    float dg[V], du[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float s = sigmoid(g[k]);
      dg[k] = dy[k] * u[k] * (s * (1.0f + g[k] * (1.0f - s)));  // d_out * u * dsilu(g)
      du[k] = dy[k] * (g[k] * s);                               // d_out * silu(g)
    }
    store<V>(d_gate_up + row + j, dg);
    store<V>(d_gate_up + row + intermediate + j, du);
  }
}

// ---------------------------------------------------------------------------------------------
// tanh GELU backward: out[i] = dy * gelu'(x) over n elements, V per access for the bulk, then the
// n % V tail one by one.

// d_out * gelu'(x) for gelu(x) = 0.5 x (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3):
// with p = (1 + tanh z)/2 = sigmoid(2z) and q = (1 - tanh z)/2 = sigmoid(-2z),
//   gelu'(x) = p + 0.5 x (1 - tanh^2 z) dz/dx = p (1 + 2 x q dz/dx).
// p and q come from e = exp(-2|z|) <= 1, each accurate to a few units in its last place also
// where it is tiny (1 + tanh z would cancel for negative x). Once p or q is 0 (|z| above ~50,
// where x^3 may overflow in bf16's range) the gradient is p itself: 0 or d_out, never inf * 0.
__device__ __forceinline__ float gelu_tanh_grad(float x, float dy) {
  constexpr float kAlpha = 0.79788456080286536f;  // sqrt(2/pi)
  constexpr float kBeta = 0.044715f;
  const float x2 = x * x;
  const float z = kAlpha * (x + kBeta * x2 * x);
  const float e = expf(-2.0f * fabsf(z));
  const float big = 1.0f / (1.0f + e), small = e * big;
  const float p = z >= 0.0f ? big : small, q = z >= 0.0f ? small : big;
  float grad = p;
  if (p > 0.0f && q > 0.0f)
    grad = p * (1.0f + 2.0f * x * q * (kAlpha * (1.0f + 3.0f * kBeta * x2)));
  return dy * grad;
}

template <class T, int V>
__global__ void gelu_tanh_backward_kernel(T* d_in, const T* in, const T* d_out, std::int64_t n) {
  const std::int64_t vecs = n / V;
  for (std::int64_t i = thread_index(); i < vecs; i += grid_threads()) {
    float x[V], dy[V];
    load<V>(in + i * V, x);
    load<V>(d_out + i * V, dy);
#pragma unroll
    for (int k = 0; k < V; ++k) x[k] = gelu_tanh_grad(x[k], dy[k]);
    store<V>(d_in + i * V, x);
  }
  for (std::int64_t i = vecs * V + thread_index(); i < n; i += grid_threads()) {
    d_in[i] = from_float<T>(gelu_tanh_grad(to_float(in[i]), to_float(d_out[i])));
  }
}

// ---------------------------------------------------------------------------------------------
// RMSNorm backward

// Sums of `a` and `b` over the block, returned to every thread (all add the warp sums in the
// same order, so every thread gets the same bits).
__device__ void block_sum2(float& a, float& b) {
  __shared__ float warp_a[32], warp_b[32];
  for (int off = 16; off > 0; off >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, off);
    b += __shfl_xor_sync(0xffffffffu, b, off);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    warp_a[warp] = a;
    warp_b[warp] = b;
  }
  __syncthreads();
  a = 0.0f;
  b = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x + 31) / 32; ++w) {
    a += warp_a[w];
    b += warp_b[w];
  }
}

// One block per row. Pass 1 reads x, w and dy and sums x^2 and w*dy*x; pass 2 reads them again
// (from L1/L2) with the accumulator and adds rstd*w*dy - x*rstd^3/cols*sum(w*dy*x) into it.
// blockDim.x is a multiple of 32.
template <class T, int V>
__global__ void rms_norm_backward_kernel(T* d_in_accum, const T* in, const T* weight,
                                         const T* d_out, int cols, float eps) {
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * cols;
  const int vecs = cols / V;
  float sum_sq = 0.0f, sum_wdyx = 0.0f;
  for (int j = threadIdx.x; j < vecs; j += blockDim.x) {
    float x[V], w[V], dy[V];
    load<V>(in + base + j * V, x);
    load<V>(weight + j * V, w);
    load<V>(d_out + base + j * V, dy);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      sum_sq += x[k] * x[k];
      sum_wdyx += w[k] * dy[k] * x[k];
    }
  }
  block_sum2(sum_sq, sum_wdyx);

  const float inv_cols = 1.0f / static_cast<float>(cols);
  const float rstd = rsqrtf(sum_sq * inv_cols + eps);
  const float coef = rstd * rstd * rstd * inv_cols * sum_wdyx;  // rstd^3 / cols * sum(w dy x)
  for (int j = threadIdx.x; j < vecs; j += blockDim.x) {
    float x[V], w[V], dy[V], acc[V];
    load<V>(in + base + j * V, x);
    load<V>(weight + j * V, w);
    load<V>(d_out + base + j * V, dy);
    load<V>(d_in_accum + base + j * V, acc);
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] += rstd * w[k] * dy[k] - x[k] * coef;
    store<V>(d_in_accum + base + j * V, acc);
  }
}

void require_count(const char* fn, const char* what, std::int64_t value) {
  if (value < 0) {
    throw InputError(std::string(fn) + ": " + what + " " + std::to_string(value) + " is negative");
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Launchers

void swiglu_backward(void* d_gate_up, const void* gate_up, const void* d_out, std::int64_t tokens,
                     int intermediate, ActDtype dtype, cudaStream_t stream) {
  require_count("swiglu_backward", "tokens", tokens);
  require_count("swiglu_backward", "intermediate", intermediate);
  if (tokens == 0 || intermediate == 0) return;
  const bool vec =
      intermediate % kVec == 0 && aligned16(d_gate_up) && aligned16(gate_up) && aligned16(d_out);
  const std::int64_t n = tokens * intermediate;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto dgu = static_cast<T*>(d_gate_up);
    auto gu = static_cast<const T*>(gate_up);
    auto dy = static_cast<const T*>(d_out);
    if (vec) {
      swiglu_backward_kernel<T, kVec>
          <<<grid_for(n / kVec), kThreads, 0, stream>>>(dgu, gu, dy, tokens, intermediate);
    } else {
      swiglu_backward_kernel<T, 1>
          <<<grid_for(n), kThreads, 0, stream>>>(dgu, gu, dy, tokens, intermediate);
    }
  });
  GPB_CHECK_LAUNCH();
}

void gelu_tanh_backward(void* d_in, const void* in, const void* d_out, std::int64_t n,
                        ActDtype dtype, cudaStream_t stream) {
  require_count("gelu_tanh_backward", "n", n);
  if (n == 0) return;
  const bool vec = aligned16(d_in) && aligned16(in) && aligned16(d_out);
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto dx = static_cast<T*>(d_in);
    auto x = static_cast<const T*>(in);
    auto dy = static_cast<const T*>(d_out);
    if (vec) {
      gelu_tanh_backward_kernel<T, kVec>
          <<<grid_for(n / kVec + 1), kThreads, 0, stream>>>(dx, x, dy, n);
    } else {
      gelu_tanh_backward_kernel<T, 1><<<grid_for(n), kThreads, 0, stream>>>(dx, x, dy, n);
    }
  });
  GPB_CHECK_LAUNCH();
}

void rms_norm_backward(void* d_in_accum, const void* in, const void* weight, const void* d_out,
                       std::int64_t rows, int cols, float eps, ActDtype dtype,
                       cudaStream_t stream) {
  require_count("rms_norm_backward", "rows", rows);
  require_count("rms_norm_backward", "cols", cols);
  if (!(eps >= 0.0f) || !std::isfinite(eps)) {
    throw InputError("rms_norm_backward: eps " + std::to_string(eps) +
                     " must be finite and not negative");
  }
  if (rows > std::numeric_limits<int>::max()) {
    throw InputError("rms_norm_backward: " + std::to_string(rows) +
                     " rows exceed one launch's grid");
  }
  if (rows == 0 || cols == 0) return;
  const bool vec = cols % kVec == 0 && aligned16(d_in_accum) && aligned16(in) &&
                   aligned16(weight) && aligned16(d_out);
  const int vecs = vec ? cols / kVec : cols;
  const int threads = std::min(kMaxNormThreads, std::max(32, (vecs + 31) / 32 * 32));
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto acc = static_cast<T*>(d_in_accum);
    auto x = static_cast<const T*>(in);
    auto w = static_cast<const T*>(weight);
    auto dy = static_cast<const T*>(d_out);
    const auto grid = static_cast<unsigned>(rows);
    if (vec) {
      rms_norm_backward_kernel<T, kVec><<<grid, threads, 0, stream>>>(acc, x, w, dy, cols, eps);
    } else {
      rms_norm_backward_kernel<T, 1><<<grid, threads, 0, stream>>>(acc, x, w, dy, cols, eps);
    }
  });
  GPB_CHECK_LAUNCH();
}

}  // namespace gpubench
