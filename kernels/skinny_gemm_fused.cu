// Skinny GEMM, one fused row a warp: fused_gemv_kernel (skinny_gemm.cu's comment).
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

// The fused GEMV of a decode step with one row of X (SkinnyFusion): the CUDA-core kernel's
// stream of W (warps over W rows, PIECES 16-byte pieces of a row per lane and step), with
// RW = 2 for SwiGlu (the gate row g and the up row g + out/2 together), and for the RMSNorm
// prologue without an epilogue (rows g and g + out/2, two plain outputs: 16 pieces a step where
// the one-row kernel with the prologue has registers for 8), and
// - kNorm, the RMSNorm prologue: the product of a W row with rms_norm(x) * nw is
//   rstd * sum_k W[k] (x[k] nw[k]), rstd = 1 / sqrt(mean(x^2) + eps). Each warp reads all of x
//   for its rows anyway, so it sums x^2 on the way in its first group (the same bits as in every
//   group) and scales each group's sums by rstd at the end: no normalized copy of x and no wait
//   for one;
// - the epilogue (residual add, activation, SwiGLU) on lane 0's sums;
// - with weights_ready, each warp's first step of W loaded before the wait for the previous
//   kernel (pdl.cuh), so that W streams while that kernel drains.
template <class T, int RW, bool kNorm, int PIECES>
__global__ void __launch_bounds__(kVecThreads, kFusedBlocksPerSm)
    fused_gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                      T* __restrict__ y, std::int64_t out, std::int64_t in, std::int64_t ldw,
                      SkinnyFusion f) {
  if (!f.late_dependents) pdl_trigger();
  constexpr int KU = PIECES / RW;     // 16-byte pieces of each W row per lane and step
  constexpr int kStep = 32 * 8 * KU;  // k per step
  constexpr unsigned kFull = 0xffffffffu;
  const int lane = threadIdx.x % 32;
  const std::int64_t pair = out / 2;  // RW 2: rows g and g + pair (SwiGlu: gate and up)
  const std::int64_t groups = RW == 2 ? pair : out;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * kVecWarps;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * kVecWarps + threadIdx.x / 32;
  auto load_step = [&](const T* const(&wr)[RW], std::int64_t k0, uint4(&wv)[RW][KU]) {
    load_w_step<T, RW, KU>(wr, k0, in, lane, wv);
  };
  auto preload = [&](uint4(&wv)[RW][KU]) {
    const T* wr[RW];
    group_rows<T, RW>(w, first, pair, ldw, lane, wr);
    load_step(wr, 0, wv);
  };
  uint4 first_step[RW][KU];
  const bool any = first < groups;
  if (f.weights_ready && any) preload(first_step);
  pdl_wait();
  if (!f.weights_ready && any) preload(first_step);
  const T* xl = x + lane * 8;
  const T* nwl = static_cast<const T*>(f.norm_weight) + lane * 8;
  // kNorm: rstd, from the squares the warp sums in its first group (every lane holds it).
  [[maybe_unused]] float rstd = 0;

  // One group of rows; the first step given in `pre` when kPre. Inlined twice (the first group,
  // then the others) so that the loop's loads stay unconditional.
  auto group = [&](std::int64_t grp, const uint4(&pre)[RW][KU], auto pre_tag) {
    constexpr bool kPre = decltype(pre_tag)::value;
    constexpr bool kSquares = kNorm && kPre;  // the first group sums x^2
    // The residual stream's value, read now rather than after the product.
    const float res = f.epilogue == SkinnyEpilogue::Residual && lane == 0 ? to_float(y[grp]) : 0.0f;
    float acc[RW] = {};
    [[maybe_unused]] float squares = 0;  // kNorm
    auto multiply = [&](std::int64_t k0, const uint4(&wv)[RW][KU]) {
#pragma unroll
      for (int j = 0; j < KU; ++j) {
        const bool ok = k0 + 256 * j + lane * 8 < in;
        float xf[8];
        unpack8<T>(
            ok ? __ldg(reinterpret_cast<const uint4*>(xl + k0 + 256 * j)) : make_uint4(0, 0, 0, 0),
            xf);
        if constexpr (kNorm)
          norm_piece<T, kSquares>(ok ? __ldg(reinterpret_cast<const uint4*>(nwl + k0 + 256 * j))
                                     : make_uint4(0, 0, 0, 0),
                                  xf, squares);
#pragma unroll
        for (int r = 0; r < RW; ++r) acc[r] = dot_piece<T>(wv[r][j], xf, acc[r]);
      }
    };
    const T* wr[RW];
    group_rows<T, RW>(w, grp, pair, ldw, lane, wr);
    std::int64_t k0 = 0;
    if constexpr (kPre) {
      multiply(0, pre);
      k0 = kStep;
    }
    for (; k0 < in; k0 += kStep) {
      uint4 wv[RW][KU];
      load_step(wr, k0, wv);
      multiply(k0, wv);
    }
    // Sum over the lanes; lane 0 writes, through the epilogue.
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
#pragma unroll
      for (int r = 0; r < RW; ++r) acc[r] += __shfl_xor_sync(kFull, acc[r], off);
      if constexpr (kSquares) squares += __shfl_xor_sync(kFull, squares, off);
    }
    if constexpr (kSquares) rstd = rsqrtf(squares / static_cast<float>(in) + f.eps);
    if (lane != 0) return;
    if constexpr (kNorm) {
#pragma unroll
      for (int r = 0; r < RW; ++r) acc[r] *= rstd;
    }
    finish_group<T, RW>(f, bias, y, grp, pair, acc, res);
  };
  if (!any) return;
  group(first, first_step, std::true_type{});
  for (std::int64_t grp = first + warps; grp < groups; grp += warps)
    group(grp, first_step, std::false_type{});
}

// The block-split fused GEMV (one row of X), the default where x fits in registers: a block's 8
// warps split `in` instead of the rows, so that each thread loads its share of x once (after the
// wait for the previous kernel) and keeps it in registers for every W row of the block, where the
// warp-per-row kernel above reads all of x from L1 again for every row group (that re-reading costs
// measurable time, where the arithmetic costs next to nothing). Thread `tid` of the block holds x's
// 16-byte pieces tid + 256j (j < KP), and with each W row of the block it multiplies the same
// pieces of that row: each load instruction of a warp reads 512 contiguous bytes, the block 4 KiB.
// A step takes split_rows(KP) rows (8 KiB of W a warp in flight, as the warp-per-row kernel); the
// warp sums its lanes' products of the step's rows with one transposing butterfly (lane L ends with
// row L / (32 / rows)) and puts them in shared memory, and once the block's rows are done its
// threads add the 8 warps' sums in a fixed order (deterministic) and apply the norm's rstd (x^2
// summed the same way), bias and epilogue. Each block takes a contiguous range of row groups
// (kPair: gate row g with up row g + out/2), ranges differing by at most one group; its first
// step's W is loaded before the wait with weights_ready.

template <class T, int RW, bool kNorm>
void launch_fused_typed(const void* x, const void* w, const void* bias, void* y, std::int64_t out,
                        std::int64_t in, std::int64_t ldw, const SkinnyFusion& f,
                        cudaStream_t stream) {
  const std::int64_t groups = RW == 2 ? out / 2 : out;
  const std::int64_t wanted = (groups + kVecWarps - 1) / kVecWarps;
  std::int64_t blocks =
      std::min<std::int64_t>(wanted, static_cast<std::int64_t>(sm_count()) * kFusedBlocksPerSm);
  // Balanced: as few blocks as keep every warp's count of row groups what the full grid gives
  // the busiest warp (gate|up of a 7B model: 11008 pairs over 2112 warps leave 448 warps a 6th
  // pair while the rest are done; 230 blocks give 1808 of their 1840 warps 6 pairs).
  const std::int64_t per_warp = (groups + blocks * kVecWarps - 1) / (blocks * kVecWarps);
  blocks = (groups + per_warp * kVecWarps - 1) / (per_warp * kVecWarps);
  // kFusedWidePieces a step where the kernel has registers for them (not the RMSNorm one-row
  // kernel, which would spill).
  constexpr int kPieces = RW == 1 && kNorm ? kVecPieces : kFusedWidePieces;
  launch_pdl(fused_gemv_kernel<T, RW, kNorm, kPieces>, static_cast<unsigned>(blocks), kVecThreads,
             0, stream, static_cast<const T*>(x), static_cast<const T*>(w),
             static_cast<const T*>(bias), static_cast<T*>(y), out, in, ldw, f);
  GPB_CHECK_LAUNCH();
}

}  // namespace

void launch_fused_kernel(SkinnyDtype dtype, int rw, bool norm, const void* x, const void* w,
                         const void* bias, void* y, std::int64_t out, std::int64_t in,
                         std::int64_t ldw, const SkinnyFusion& f, cudaStream_t stream) {
  with_type(dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (rw == 2 && norm)
      return launch_fused_typed<T, 2, true>(x, w, bias, y, out, in, ldw, f, stream);
    if (rw == 2) return launch_fused_typed<T, 2, false>(x, w, bias, y, out, in, ldw, f, stream);
    if (norm) return launch_fused_typed<T, 1, true>(x, w, bias, y, out, in, ldw, f, stream);
    launch_fused_typed<T, 1, false>(x, w, bias, y, out, in, ldw, f, stream);
  });
}

}  // namespace gpubench::skinny
