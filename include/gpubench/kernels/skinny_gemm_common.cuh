#pragma once
// Internals of the skinny GEMM (skinny_gemm.cuh), shared by its kernel files: the CUDA-core
// kernels' constants, the device helpers of their streams of W (loads, dot products, the RMSNorm
// piece, the epilogue), and each path's launcher. Not for modules.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "gpubench/kernels/device_common.cuh"
#include "gpubench/kernels/skinny_gemm.cuh"

namespace gpubench::skinny {

// CUDA-core path (rows <= kVecMaxRows): 8 warps a block, kVecBlocksPerSm blocks per SM (24
// warps; __launch_bounds__ caps the registers at 85 a thread), kVecPieces 16-byte W loads per
// lane in flight per step.
constexpr int kVecMaxRows = 2;
constexpr int kVecWarps = 8;
constexpr int kVecThreads = kVecWarps * 32;
constexpr int kVecBlocksPerSm = 3;
constexpr int kVecPieces = 8;

// Blocks per SM of the fused kernel, which __launch_bounds__ gives up to 128 registers a thread:
// two (16 warps, 64 KiB of W in flight per SM at 4 KiB steps, more than HBM needs) leave the
// registers for the prologue, the epilogue and wider steps; measured faster on Hopper than three
// at 80 registers, the unfused kernel's shape (docs/DECISIONS.md).
constexpr int kFusedBlocksPerSm = 2;
// 16-byte pieces of W per lane and step of the fused kernel (8 KiB of W a warp per step, twice
// kVecPieces), with the balanced grid: measured faster on Hopper (docs/DECISIONS.md).
constexpr int kFusedWidePieces = 16;

// 16 bytes from global to shared memory, of which the first `bytes` (16 or 0) are read and the
// rest zero-filled. W: streamed once, kept out of L1 (.cg), L2 asked for the 256-byte segment.
// X: small and read by every block, cached in L1 (.ca).
__device__ __forceinline__ void copy_weight(void* smem, const void* gmem, unsigned bytes) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void copy_input(void* smem, const void* gmem, unsigned bytes) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem), "r"(bytes)
               : "memory");
}

// acc + the dot product of 8 packed W values with 8 floats of x, in order.
template <class T>
__device__ __forceinline__ float dot_piece(const uint4& w, const float (&x)[8], float acc) {
  float wf[8];
  unpack8<T>(w, wf);
#pragma unroll
  for (int e = 0; e < 8; ++e) acc = fmaf(wf[e], x[e], acc);
  return acc;
}

// The RMSNorm prologue on 8 values of x: x^2 added to `squares` (kSquares), then x times the
// norm's 8 packed weights `nw`.
template <class T, bool kSquares>
__device__ __forceinline__ void norm_piece(const uint4& nw, float (&x)[8], float& squares) {
  float nf[8];
  unpack8<T>(nw, nf);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    if constexpr (kSquares) squares = fmaf(x[e], x[e], squares);
    x[e] *= nf[e];
  }
}

// 16 bytes of W, read once: not kept in L1, and the L2 asked for the whole 256-byte segment.
__device__ __forceinline__ uint4 load_weight(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// One step of the CUDA-core kernels' stream of W: KU 16-byte pieces of each of RW rows (wr:
// the rows, already offset to the lane's first element), the lane's pieces at k0 + 256j + 8 lane,
// all issued at once. Pieces past `in` (whole pieces: `in` % 8 == 0) are zeros.
template <class T, int RW, int KU>
__device__ __forceinline__ void load_w_step(const T* const (&wr)[RW], std::int64_t k0,
                                            std::int64_t in, int lane, uint4 (&wv)[RW][KU]) {
#pragma unroll
  for (int j = 0; j < KU; ++j) {
    const bool ok = k0 + 256 * j + lane * 8 < in;
#pragma unroll
    for (int r = 0; r < RW; ++r)
      wv[r][j] = ok ? load_weight(wr[r] + k0 + 256 * j) : make_uint4(0, 0, 0, 0);
  }
}

template <class T, int RW>
__device__ __forceinline__ void finish_group(const SkinnyFusion& f, const T* __restrict__ bias,
                                             T* __restrict__ y, std::int64_t grp, std::int64_t pair,
                                             const float (&acc)[RW], float res) {
  if constexpr (RW == 2) {
    if (f.epilogue != SkinnyEpilogue::SwiGlu) {  // paired rows, each a group of its own
      // (launch_fused pairs rows only without an epilogue: `res`, the first row's, is unused)
      finish_group<T, 1>(f, bias, y, grp, pair, {acc[0]}, res);
      finish_group<T, 1>(f, bias, y, grp + pair, pair, {acc[1]}, res);
      return;
    }
    const float g = to_float(from_float<T>(acc[0] + (bias ? to_float(bias[grp]) : 0.f)));
    const float u = to_float(from_float<T>(acc[1] + (bias ? to_float(bias[grp + pair]) : 0.f)));
    y[grp] = from_float<T>(silu(g) * u);
    return;
  }
  float v = acc[0] + (bias ? to_float(bias[grp]) : 0.f);
  switch (f.epilogue) {
    case SkinnyEpilogue::Residual:
      v = res + to_float(from_float<T>(v));
      break;
    case SkinnyEpilogue::Relu:
      v = fmaxf(to_float(from_float<T>(v)), 0.0f);
      break;
    case SkinnyEpilogue::Gelu:
      v = gelu_erf(to_float(from_float<T>(v)));
      break;
    case SkinnyEpilogue::GeluTanh:
      v = gelu_tanh(to_float(from_float<T>(v)));
      break;
    default:
      break;
  }
  y[grp] = from_float<T>(v);
}

// The W rows of a fused GEMV's row group (rows ldw elements apart), offset to the lane's first
// element: row grp, and with RW 2 its partner row grp + pair.
template <class T, int RW>
__device__ __forceinline__ void group_rows(const T* w, std::int64_t grp, std::int64_t pair,
                                           std::int64_t ldw, int lane, const T* (&wr)[RW]) {
#pragma unroll
  for (int r = 0; r < RW; ++r) wr[r] = w + (grp + r * pair) * ldw + lane * 8;
}

// Calls f(static_cast<T*>(nullptr)) with the element type of `dtype`.
template <class F>
void with_type(SkinnyDtype dtype, F&& f) {
  if (dtype == SkinnyDtype::BF16)
    f(static_cast<__nv_bfloat16*>(nullptr));
  else
    f(static_cast<__half*>(nullptr));
}

// SMs of the current device.
int sm_count();

// The paths' launchers (each file's own): rows 1..2 on CUDA cores (skinny_gemm_vec.cu), rows
// 3..8 on tensor cores (skinny_gemm_mma.cu), one fused row a warp (skinny_gemm_fused.cu: rw 2
// for gate|up pairs), and one fused row split over a block's warps (skinny_gemm_split.cu: false,
// nothing launched, where x's pieces do not fit its registers).
void launch_vec(SkinnyDtype dtype, int rows, const void* x, const void* w, const void* bias,
                void* y, std::int64_t out, std::int64_t in, std::int64_t ldw, cudaStream_t stream);
void launch_mma(SkinnyDtype dtype, const void* x, const void* w, const void* bias, void* y,
                int rows, std::int64_t out, std::int64_t in, std::int64_t ldw, cudaStream_t stream);
void launch_fused_kernel(SkinnyDtype dtype, int rw, bool norm, const void* x, const void* w,
                         const void* bias, void* y, std::int64_t out, std::int64_t in,
                         std::int64_t ldw, const SkinnyFusion& f, cudaStream_t stream);
bool launch_split(SkinnyDtype dtype, bool norm, bool pair, const void* x, const void* w,
                  const void* bias, void* y, std::int64_t out, std::int64_t in, std::int64_t ldw,
                  const SkinnyFusion& f, cudaStream_t stream);

}  // namespace gpubench::skinny
