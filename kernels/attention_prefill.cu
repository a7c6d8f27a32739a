// Prefill attention, flash-attention style: a block owns 64 queries of one (batch, head) and
// walks the causal key range in tiles of 64 keys. Each of its 4 warps owns 16 query rows:
// S = Q K^T on tensor cores (WMMA 16x16x16, fp32), an online softmax per row in shared memory,
// then O += P V on tensor cores, O kept in fp32 in shared memory so rows can be rescaled.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cmath>

#include "attention.cuh"
#include "gpubench/core/cuda.hpp"
#include "transformer.cuh"

namespace gpubench {

namespace {

using transformer_detail::from_float;
using transformer_detail::to_float;

using namespace nvcuda;

constexpr int kBlockM = 64, kBlockN = 64, kWarps = 4, kRowsPerWarp = 16;

template <int D>
struct Smem {
  static constexpr std::size_t q = kBlockM * D, k = kBlockN * D, v = kBlockN * D;  // elements
  static constexpr std::size_t s = kBlockM * kBlockN, p = kBlockM * kBlockN, o = kBlockM * D;
  static constexpr std::size_t bytes =
      (q + k + v + p) * 2 + (s + o) * sizeof(float) + 2 * kBlockM * sizeof(float);
};

// Copies `rows` rows of D elements (row r from src + r*stride) into dst [rows_max x D]; rows past
// `rows` are zero. 16-byte vectors.
template <class T, int D>
__device__ inline void load_tile(T* dst, const T* src, std::int64_t stride, int rows,
                                 int rows_max) {
  constexpr int kVec = 8;  // 8 x 2 bytes
  const int vecs = rows_max * D / kVec;
  for (int i = threadIdx.x; i < vecs; i += blockDim.x) {
    const int r = i / (D / kVec), c = (i % (D / kVec)) * kVec;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r < rows) val = *reinterpret_cast<const uint4*>(src + r * stride + c);
    *reinterpret_cast<uint4*>(dst + r * D + c) = val;
  }
}

template <class T, int D>
__global__ void __launch_bounds__(kWarps * 32) prefill_kernel(AttentionArgs a) {
  extern __shared__ __align__(128) unsigned char smem_raw[];  // WMMA needs 32-byte alignment
  T* sq = reinterpret_cast<T*>(smem_raw);
  T* sk = sq + Smem<D>::q;
  T* sv = sk + Smem<D>::k;
  T* sp = sv + Smem<D>::v;
  float* ss = reinterpret_cast<float*>(sp + Smem<D>::p);
  float* so = ss + Smem<D>::s;
  float* row_m = so + Smem<D>::o;
  float* row_l = row_m + kBlockM;

  const int q_block = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int g = h / (a.heads / a.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = q_block * kBlockM;                  // first query of the block (token index)
  const int q_rows = min(kBlockM, a.q_tokens - q0);  // valid queries in the block
  const int keys_total = a.q_pos0 + a.q_tokens;
  const int last_key = min(keys_total, a.q_pos0 + q0 + q_rows);  // exclusive, causal bound

  const T* qsrc = static_cast<const T*>(a.q) +
                  (static_cast<std::int64_t>(b) * a.q_tokens + q0) * a.q_stride +
                  static_cast<std::int64_t>(h) * D;
  load_tile<T, D>(sq, qsrc, a.q_stride, q_rows, kBlockM);
  for (int i = threadIdx.x; i < kBlockM * D; i += blockDim.x) so[i] = 0;
  for (int i = threadIdx.x; i < kBlockM; i += blockDim.x) {
    row_m[i] = -INFINITY;
    row_l[i] = 0;
  }
  __syncthreads();

  const int wr = warp * kRowsPerWarp;  // the warp's first row in the block
  for (int k0 = 0; k0 < last_key; k0 += kBlockN) {
    const int k_rows = min(kBlockN, last_key - k0);
    const std::int64_t kv_row0 = static_cast<std::int64_t>(b) * a.max_context + k0;
    const T* ksrc =
        static_cast<const T*>(a.k) + kv_row0 * a.kv_stride + static_cast<std::int64_t>(g) * D;
    const T* vsrc =
        static_cast<const T*>(a.v) + kv_row0 * a.kv_stride + static_cast<std::int64_t>(g) * D;
    load_tile<T, D>(sk, ksrc, a.kv_stride, k_rows, kBlockN);
    load_tile<T, D>(sv, vsrc, a.kv_stride, k_rows, kBlockN);
    __syncthreads();

    // S (16 x 64) = Q_w (16 x D) K^T (D x 64)
    for (int n = 0; n < kBlockN / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, sq + wr * D + kk * 16, D);
        wmma::load_matrix_sync(fb, sk + n * 16 * D + kk * 16, D);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(ss + wr * kBlockN + n * 16, acc, kBlockN, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax: two lanes per row, 32 columns each.
    {
      const int r = wr + lane / 2, c0 = (lane % 2) * 32;
      const int qpos = a.q_pos0 + q0 + r;  // this row's position: keys <= qpos are visible
      float* srow = ss + r * kBlockN;
      float mx = -INFINITY;
      for (int c = c0; c < c0 + 32; ++c) {
        const int key = k0 + c;
        const float sc = (key <= qpos && c < k_rows && r < q_rows) ? srow[c] * a.scale : -INFINITY;
        srow[c] = sc;
        mx = fmaxf(mx, sc);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      const float m_old = row_m[r];
      const float m_new = fmaxf(m_old, mx);
      // A row with nothing visible yet keeps m = -inf: its p are all 0 and it is not rescaled.
      const float correction = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
      float sum = 0;
      for (int c = c0; c < c0 + 32; ++c) {
        const float p = m_new == -INFINITY ? 0.0f : expf(srow[c] - m_new);
        sum += p;
        sp[r * kBlockN + c] = from_float<T>(p);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      for (int c = (lane % 2) * (D / 2); c < (lane % 2 + 1) * (D / 2); ++c)
        so[r * D + c] *= correction;
      __syncwarp();
      if (lane % 2 == 0) {
        row_l[r] = row_l[r] * correction + sum;
        row_m[r] = m_new;
      }
    }
    __syncwarp();

    // O_w (16 x D) += P_w (16 x 64) V (64 x D)
    for (int n = 0; n < D / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, so + wr * D + n * 16, D, wmma::mem_row_major);
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, sp + wr * kBlockN + kk * 16, kBlockN);
        wmma::load_matrix_sync(fb, sv + kk * 16 * D + n * 16, D);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(so + wr * D + n * 16, acc, D, wmma::mem_row_major);
    }
    __syncthreads();  // K and V tiles are reloaded next
  }

  // out = O / l
  T* out =
      static_cast<T*>(a.out) +
      (static_cast<std::int64_t>(b) * a.q_tokens + q0) * static_cast<std::int64_t>(a.heads) * D +
      static_cast<std::int64_t>(h) * D;
  for (int i = threadIdx.x; i < q_rows * D; i += blockDim.x) {
    const int r = i / D, c = i % D;
    out[static_cast<std::int64_t>(r) * a.heads * D + c] = from_float<T>(so[i] / row_l[r]);
  }
}

template <class T, int D>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  const std::size_t smem = Smem<D>::bytes;
  GPB_CUDA_CHECK(cudaFuncSetAttribute(
      prefill_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((a.q_tokens + kBlockM - 1) / kBlockM),
                  static_cast<unsigned>(a.heads), static_cast<unsigned>(a.batch));
  prefill_kernel<T, D><<<grid, kWarps * 32, smem, stream>>>(a);
  GPB_CHECK_LAUNCH();
}

}  // namespace

void prefill_attention(const AttentionArgs& args, cudaStream_t stream) {
  const AttentionArgs a = resolved_attention_args(args);
  if (a.q_stride % 8 || a.kv_stride % 8)
    throw GpuError("prefill_attention: strides must be multiples of 8 elements");
  const bool bf16 = a.dtype == AttnDtype::BF16;
  if (a.head_dim == 128) {
    bf16 ? launch<__nv_bfloat16, 128>(a, stream) : launch<__half, 128>(a, stream);
  } else if (a.head_dim == 64) {
    bf16 ? launch<__nv_bfloat16, 64>(a, stream) : launch<__half, 64>(a, stream);
  } else {
    throw GpuError("prefill_attention: head_dim must be 64 or 128");
  }
}

}  // namespace gpubench
