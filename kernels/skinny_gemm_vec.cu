// Skinny GEMM, rows 1..2 on CUDA cores (the first path of skinny_gemm.cu's comment).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/kernels/pdl.cuh"
#include "gpubench/kernels/skinny_gemm_common.cuh"

namespace gpubench::skinny {

namespace {

// CUDA-core path. ROWS: rows of X (1..2); RW: W rows a warp takes at once (1 or 2; the launcher
// takes 1). Grid: at most kVecBlocksPerSm blocks per SM; warp `gw` of the grid takes W row groups
// gw, gw + warps, ... Lane L reads elements k0 + 256j + 8L of its rows (j < KU), so each load
// instruction of the warp reads 512 contiguous bytes of a row.
template <class T, int ROWS, int RW>
__global__ void __launch_bounds__(kVecThreads, kVecBlocksPerSm)
    skinny_gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                       T* __restrict__ y, std::int64_t out, std::int64_t in, std::int64_t ldw) {
  pdl_start();
  constexpr int KU = kVecPieces / RW;  // 16-byte pieces of each W row per lane and step
  constexpr int kStep = 32 * 8 * KU;   // k per step
  constexpr unsigned kFull = 0xffffffffu;
  const int lane = threadIdx.x % 32;
  const std::int64_t groups = (out + RW - 1) / RW;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * kVecWarps;
  const T* xl = x + lane * 8;
  for (std::int64_t grp = static_cast<std::int64_t>(blockIdx.x) * kVecWarps + threadIdx.x / 32;
       grp < groups; grp += warps) {
    const std::int64_t o0 = grp * RW;
    const T* wr[RW];
#pragma unroll
    for (int r = 0; r < RW; ++r) wr[r] = w + std::min(o0 + r, out - 1) * ldw + lane * 8;
    float acc[RW][ROWS];
#pragma unroll
    for (int r = 0; r < RW; ++r)
#pragma unroll
      for (int i = 0; i < ROWS; ++i) acc[r][i] = 0;

    for (std::int64_t k0 = 0; k0 < in; k0 += kStep) {
      // Every W load of the step first (they are what HBM waits on), then X (an L1 hit) and the
      // FMAs piece by piece.
      uint4 wv[RW][KU];
      load_w_step<T, RW, KU>(wr, k0, in, lane, wv);
#pragma unroll
      for (int j = 0; j < KU; ++j) {
        const bool ok = k0 + 256 * j + lane * 8 < in;
        float wf[RW][8];
#pragma unroll
        for (int r = 0; r < RW; ++r) unpack8<T>(wv[r][j], wf[r]);
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
          const uint4 xv = ok ? __ldg(reinterpret_cast<const uint4*>(xl + i * in + k0 + 256 * j))
                              : make_uint4(0, 0, 0, 0);
          float xf[8];
          unpack8<T>(xv, xf);
#pragma unroll
          for (int r = 0; r < RW; ++r)
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[r][i] = fmaf(wf[r][e], xf[e], acc[r][i]);
        }
      }
    }
    // Sum over the lanes; lane 0 writes.
#pragma unroll
    for (int off = 16; off > 0; off /= 2)
#pragma unroll
      for (int r = 0; r < RW; ++r)
#pragma unroll
        for (int i = 0; i < ROWS; ++i) acc[r][i] += __shfl_xor_sync(kFull, acc[r][i], off);
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < RW; ++r) {
        const std::int64_t o = o0 + r;
        if (o < out) {
          const float b = bias ? to_float(bias[o]) : 0.f;
#pragma unroll
          for (int i = 0; i < ROWS; ++i) y[i * out + o] = from_float<T>(acc[r][i] + b);
        }
      }
    }
  }
}

// The end of a fused GEMV's row group (acc: the products, already scaled by the norm's rstd):
// bias and epilogue, written to y[grp]. res: y[grp] as read before (Residual).

template <class T, int ROWS>
void launch_vec_typed(const void* x, const void* w, const void* bias, void* y, std::int64_t out,
                      std::int64_t in, std::int64_t ldw, cudaStream_t stream) {
  constexpr int RW = 1;
  const std::int64_t groups = (out + RW - 1) / RW;
  const std::int64_t wanted = (groups + kVecWarps - 1) / kVecWarps;
  const std::int64_t blocks =
      std::min<std::int64_t>(wanted, static_cast<std::int64_t>(sm_count()) * kVecBlocksPerSm);
  launch_pdl(skinny_gemv_kernel<T, ROWS, RW>, static_cast<unsigned>(blocks), kVecThreads, 0, stream,
             static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias),
             static_cast<T*>(y), out, in, ldw);
  GPB_CHECK_LAUNCH();
}

}  // namespace

void launch_vec(SkinnyDtype dtype, int rows, const void* x, const void* w, const void* bias,
                void* y, std::int64_t out, std::int64_t in, std::int64_t ldw, cudaStream_t stream) {
  static_assert(kVecMaxRows == 2, "rows 1 and 2");
  with_type(dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (rows == 1)
      launch_vec_typed<T, 1>(x, w, bias, y, out, in, ldw, stream);
    else
      launch_vec_typed<T, 2>(x, w, bias, y, out, in, ldw, stream);
  });
}

}  // namespace gpubench::skinny
