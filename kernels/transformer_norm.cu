// RMSNorm and LayerNorm, alone or fused with the residual add: one block per row, fp32 statistics.
#include <algorithm>
#include <limits>
#include <string>

#include "gpubench/core/errors.hpp"
#include "gpubench/kernels/pdl.cuh"
#include "gpubench/kernels/transformer.cuh"

namespace gpubench {

using namespace transformer_detail;

namespace {

enum class NormKind { Rms, Layer };

constexpr int kMaxNormThreads = 256;

// Where row r starts: a plain matrix has group = 1 and stride = cols; per-head norms see row
// r = token*group + head at token*stride + head*cols.
struct RowLayout {
  std::int64_t group;
  std::int64_t stride;
  int cols;
  __device__ std::int64_t offset(std::int64_t r) const {
    return (r / group) * stride + (r % group) * cols;
  }
};

// Sum of `v` over the block, returned to every thread (all add the warp sums in the same order,
// so every thread gets the same bits).
__device__ float block_sum(float v) {
  __shared__ float warp_sums[32];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x + 31) / 32; ++w) total += warp_sums[w];
  __syncthreads();  // warp_sums is reused by the next call
  return total;
}

// One block per row. Pass 1 reads the row (adding `in` into the residual first, and storing the
// rounded sum, when kAddResidual) and sums it; LayerNorm then sums the squared deviations from
// the mean (a second read, from L1/L2); the last pass normalizes and writes. Each thread reads
// back only elements it wrote itself, so `out` may alias `in`.
template <class T, int V, NormKind kKind, bool kAddResidual>
__global__ void norm_kernel(T* out, T* residual, const T* in, const T* weight, const T* bias,
                            RowLayout layout, float eps) {
  pdl_start();
  const std::int64_t base = layout.offset(blockIdx.x);
  const int vecs = layout.cols / V;
  const T* src = kAddResidual ? residual + base : in + base;

  float sum = 0.0f, sum_sq = 0.0f;
  for (int j = threadIdx.x; j < vecs; j += blockDim.x) {
    float x[V];
    load<V>(in + base + j * V, x);
    if constexpr (kAddResidual) {
      float r[V];
      load<V>(residual + base + j * V, r);
#pragma unroll
      for (int k = 0; k < V; ++k) x[k] = to_float(from_float<T>(x[k] + r[k]));
      store<V>(residual + base + j * V, x);
    }
#pragma unroll
    for (int k = 0; k < V; ++k) {
      sum += x[k];
      sum_sq += x[k] * x[k];
    }
  }

  const float inv_cols = 1.0f / static_cast<float>(layout.cols);
  float mean = 0.0f, rstd;
  if constexpr (kKind == NormKind::Rms) {
    rstd = rsqrtf(block_sum(sum_sq) * inv_cols + eps);
  } else {
    mean = block_sum(sum) * inv_cols;
    float dev_sq = 0.0f;
    for (int j = threadIdx.x; j < vecs; j += blockDim.x) {
      float x[V];
      load<V>(src + j * V, x);
#pragma unroll
      for (int k = 0; k < V; ++k) dev_sq += (x[k] - mean) * (x[k] - mean);
    }
    rstd = rsqrtf(block_sum(dev_sq) * inv_cols + eps);
  }

  for (int j = threadIdx.x; j < vecs; j += blockDim.x) {
    float x[V], w[V], b[V] = {};
    load<V>(src + j * V, x);
    load<V>(weight + j * V, w);
    if (bias != nullptr) load<V>(bias + j * V, b);
    float y[V];
#pragma unroll
    for (int k = 0; k < V; ++k) y[k] = (x[k] - mean) * rstd * w[k] + b[k];
    store<V>(out + base + j * V, y);
  }
}

// Picks the 16-byte path when the row layout and every pointer allow it, and a block of up to
// 256 threads (fewer for short rows: a head_dim of 128 gets one warp).
template <NormKind kKind, bool kAddResidual>
void launch_norm(void* out, void* residual, const void* in, const void* weight, const void* bias,
                 std::int64_t rows, RowLayout layout, float eps, ActDtype dtype,
                 cudaStream_t stream) {
  if (rows <= 0 || layout.cols <= 0) return;
  if (rows > std::numeric_limits<int>::max()) {
    throw InputError("norm: " + std::to_string(rows) + " rows exceed one launch's grid");
  }
  const bool vec = layout.cols % kVec == 0 && layout.stride % kVec == 0 && aligned16(out) &&
                   aligned16(in) && aligned16(weight) && (!bias || aligned16(bias)) &&
                   (!residual || aligned16(residual));
  const int vecs = vec ? layout.cols / kVec : layout.cols;
  const int threads = std::min(kMaxNormThreads, std::max(32, (vecs + 31) / 32 * 32));
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto args = [&](auto kernel) {
      launch_pdl(kernel, static_cast<unsigned>(rows), threads, 0, stream, static_cast<T*>(out),
                 static_cast<T*>(residual), static_cast<const T*>(in),
                 static_cast<const T*>(weight), static_cast<const T*>(bias), layout, eps);
    };
    if (vec) {
      args(norm_kernel<T, kVec, kKind, kAddResidual>);
    } else {
      args(norm_kernel<T, 1, kKind, kAddResidual>);
    }
  });
  GPB_CHECK_LAUNCH();
}

RowLayout plain_rows(int cols) {
  return RowLayout{1, cols, cols};
}

}  // namespace

void rms_norm(void* out, const void* in, const void* weight, std::int64_t rows, int cols, float eps,
              ActDtype dtype, cudaStream_t stream) {
  launch_norm<NormKind::Rms, false>(out, nullptr, in, weight, nullptr, rows, plain_rows(cols), eps,
                                    dtype, stream);
}

void rms_norm_heads(void* x, const void* weight, std::int64_t tokens, int num_heads, int head_dim,
                    std::int64_t row_stride, float eps, ActDtype dtype, cudaStream_t stream) {
  if (row_stride < static_cast<std::int64_t>(num_heads) * head_dim) {
    throw InputError("rms_norm_heads: row stride " + std::to_string(row_stride) +
                     " is shorter than " + std::to_string(num_heads) + " heads of " +
                     std::to_string(head_dim));
  }
  launch_norm<NormKind::Rms, false>(x, nullptr, x, weight, nullptr, tokens * num_heads,
                                    RowLayout{num_heads, row_stride, head_dim}, eps, dtype, stream);
}

void layer_norm(void* out, const void* in, const void* weight, const void* bias, std::int64_t rows,
                int cols, float eps, ActDtype dtype, cudaStream_t stream) {
  launch_norm<NormKind::Layer, false>(out, nullptr, in, weight, bias, rows, plain_rows(cols), eps,
                                      dtype, stream);
}

void add_rms_norm(void* residual_inout, void* out, const void* in, const void* weight,
                  std::int64_t rows, int cols, float eps, ActDtype dtype, cudaStream_t stream) {
  launch_norm<NormKind::Rms, true>(out, residual_inout, in, weight, nullptr, rows, plain_rows(cols),
                                   eps, dtype, stream);
}

void add_layer_norm(void* residual_inout, void* out, const void* in, const void* weight,
                    const void* bias, std::int64_t rows, int cols, float eps, ActDtype dtype,
                    cudaStream_t stream) {
  launch_norm<NormKind::Layer, true>(out, residual_inout, in, weight, bias, rows, plain_rows(cols),
                                     eps, dtype, stream);
}

}  // namespace gpubench
