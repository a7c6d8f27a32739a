// Skinny GEMM: Y[rows, out] = X[rows, in] W^T (+ bias) for 1..8 rows, a stream of W.
//
// Two paths, both reading every W element once with 16-byte loads:
//
// Rows 1..2 (CUDA cores): the product is a pure stream of W and the arithmetic per W byte is
// small enough for FMAs. Each warp owns one W row at a time and walks it in steps of 8 16-byte
// loads per lane, all issued before the first FMA: 4 KiB of W in flight per warp, ~100 KiB per
// SM with 24 warps, well over what HBM needs to stay busy (latency x bandwidth ~ 40 KiB). W
// loads bypass L1 (ld.global.nc.L1::no_allocate); X is small and read by every warp, so it is
// read through L1 (ld.global.nc), where it stays. A lane's 8 elements of a load are the same k
// for W and X; the warp sums its lanes with shuffles. The grid is persistent (a fixed number of
// blocks per SM, each warp looping over its W rows), so every SM has work from the start and
// there is no partial last wave of blocks.
//
// Rows 3..8 (tensor cores; from 3 rows they stream W faster than the CUDA-core kernel, measured
// on Hopper: docs/DECISIONS.md): a block owns 16 outputs (W rows); its 4 warps take turns over `in`
// in steps of 64 elements. In a step, lane (g, t) of a warp (g = lane/4, t = lane%4) copies 16
// bytes of W rows g and g+8 at k = 32j + 8t (j = 0, 1) and the same 16 bytes of X row g into its
// own slots of a shared-memory ring (cp.async), kStages-1 steps ahead of the step it multiplies:
// the loads stay in flight without registers, and the 4 warps read 512 contiguous bytes of each row
// per turn. Two mma.m16n8k16 per piece take the pieces as they are: the A fragment of lane (g, t)
// holds rows g, g+8 at k-slots 2t, 2t+1, 2t+8, 2t+9 and the B fragment X row g at the same slots,
// so mapping those slots to 4 consecutive k of the lane (the same map in every lane) keeps A and B
// consistent; the sum over k does not care about the order. Rows past `rows` multiply zeros. The
// warps' partial sums meet in shared memory.
//
// One row with a SkinnyFusion: an RMSNorm prologue and a residual / activation / SwiGLU epilogue,
// the kernels of a batch-1 decode step. split_gemv_kernel (the default where x fits in its
// registers: `in` up to 12288, 8192 with the norm) splits `in` over a block's warps and keeps x in
// registers; fused_gemv_kernel (the rest) is the CUDA-core stream
// above with one warp a row (or gate/up pair) and x read through L1.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "device_common.cuh"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "pdl.cuh"
#include "skinny_gemm.cuh"

namespace gpubench {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 16;            // outputs per block: the mma's M
constexpr int kLoads = 2;            // 16-byte pieces of each W row a lane takes per step
constexpr int kStepK = 32 * kLoads;  // k per step: 4 lanes x 8 elements x kLoads
constexpr int kChunks = 3 * kLoads;  // per lane and step: W row g, W row g+8, X row g
// Shared-memory stages in each thread's cp.async ring: kStages-1 steps in flight while one is
// multiplied. 6 stages x 6 pieces x 16 bytes x 128 threads = 72 KiB a block, of which 5 steps x
// 8 KiB = 40 KiB of W are in flight: even a 4096-output layer (256 blocks, ~2 per SM) keeps
// ~80 KiB per SM in flight.
constexpr int kStages = 6;
// Blocks per SM: 3 x 72 KiB (+1 KiB reserved each) fit the 227 KiB an SM gives a block's
// dynamic shared memory at the largest carveout.
constexpr int kBlocksPerSm = 3;
constexpr std::size_t kRingBytes =
    static_cast<std::size_t>(kStages) * kChunks * kThreads * sizeof(uint4);

// CUDA-core path (rows <= kVecMaxRows): 8 warps a block, kVecBlocksPerSm blocks per SM (24
// warps; __launch_bounds__ caps the registers at 85 a thread), kVecPieces 16-byte W loads per
// lane in flight per step.
constexpr int kVecMaxRows = 2;
constexpr int kVecWarps = 8;
constexpr int kVecThreads = kVecWarps * 32;
constexpr int kVecBlocksPerSm = 3;
constexpr int kVecPieces = 8;

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
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// D += A B: A 16x16 (4 registers of 2 elements), B 16x8 (2 registers), D 16x8 fp32.
template <class T>
__device__ __forceinline__ void mma16816(float (&d)[4], unsigned a0, unsigned a1, unsigned a2,
                                         unsigned a3, unsigned b0, unsigned b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// Grid: one block per 16 outputs. Dynamic shared memory: kRingBytes, reused for the warps' sums.
template <class T>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    skinny_gemm_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                       T* __restrict__ y, int rows, std::int64_t out, std::int64_t in,
                       std::int64_t ldw) {
  pdl_start();
  extern __shared__ uint4 ring[];  // [kStages][kChunks][kThreads]: each thread its own slots
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const std::int64_t tile0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  // Pieces outside the matrices are zero-filled (source size 0) from a valid address: W rows
  // past `out`, X rows past `rows`, k past `in`.
  const unsigned has0 = tile0 + g < out ? 16 : 0, has8 = tile0 + g + 8 < out ? 16 : 0;
  const unsigned has_x = g < rows ? 16 : 0;
  const T* w0 = w + std::min(tile0 + g, out - 1) * ldw + t * 8;
  const T* w8 = w + std::min(tile0 + g + 8, out - 1) * ldw + t * 8;
  const T* xr = x + static_cast<std::int64_t>(has_x ? g : 0) * in + t * 8;

  // Warp `warp` takes steps warp, warp + kWarps, ...: together the warps read 4 x 128 contiguous
  // bytes of each W row at a time.
  const std::int64_t steps = (in + kStepK - 1) / kStepK;
  const std::int64_t mine = steps > warp ? (steps - warp + kWarps - 1) / kWarps : 0;
  auto issue = [&](std::int64_t i) {
    if (i < mine) {
      uint4* st = ring + (i % kStages) * kChunks * kThreads + tid;
      const std::int64_t k0 = (warp + i * kWarps) * kStepK;
#pragma unroll
      for (int j = 0; j < kLoads; ++j) {
        const std::int64_t k = k0 + 32 * j;  // this lane's 8 elements start at k + 8t
        const bool in_k = k + t * 8 < in;
        const std::int64_t kc = in_k ? k : 0;
        copy_weight(st + j * kThreads, w0 + kc, in_k ? has0 : 0);
        copy_weight(st + (kLoads + j) * kThreads, w8 + kc, in_k ? has8 : 0);
        copy_input(st + (2 * kLoads + j) * kThreads, xr + kc, in_k ? has_x : 0);
      }
    }
    cp_async_commit();  // empty past the end, so the wait below always counts kStages-1 back
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue(i);

  float d[4] = {0, 0, 0, 0};
  for (std::int64_t i = 0; i < mine; ++i) {
    issue(i + kStages - 1);
    cp_async_wait<kStages - 1>();  // this thread's pieces of step i have landed
    const uint4* st = ring + (i % kStages) * kChunks * kThreads + tid;
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      const uint4 a = st[j * kThreads], b = st[(kLoads + j) * kThreads];
      const uint4 xv = st[(2 * kLoads + j) * kThreads];
      // k-slots (2t, 2t+1) <- k+8t+{0,1}, (2t+8, 2t+9) <- k+8t+{2,3}; then +{4,5}, +{6,7}.
      mma16816<T>(d, a.x, b.x, a.y, b.y, xv.x, xv.y);
      mma16816<T>(d, a.z, b.z, a.w, b.w, xv.z, xv.w);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every thread is done with its ring slots

  // d[i] of lane (g, t): output tile0 + g + 8*(i/2), row 2t + i%2. Sum the warps' parts.
  float* partial = reinterpret_cast<float*>(ring);  // [kWarps][32 * 4]
#pragma unroll
  for (int i = 0; i < 4; ++i) partial[warp * 128 + lane * 4 + i] = d[i];
  __syncthreads();
  float sum = 0;
#pragma unroll
  for (int i = 0; i < kWarps; ++i) sum += partial[i * 128 + tid];
  const int vl = tid / 4, vi = tid % 4;  // the value's lane and index
  const std::int64_t o = tile0 + vl / 4 + 8 * (vi / 2);
  const int r = 2 * (vl % 4) + vi % 2;
  if (r < rows && o < out) {
    if (bias) sum += to_float(bias[o]);
    y[r * out + o] = from_float<T>(sum);
  }
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

// Blocks per SM of the fused kernel, which __launch_bounds__ gives up to 128 registers a thread:
// two (16 warps, 64 KiB of W in flight per SM at 4 KiB steps, more than HBM needs) leave the
// registers for the prologue, the epilogue and wider steps; measured faster on Hopper than three
// at 80 registers, the unfused kernel's shape (docs/DECISIONS.md).
constexpr int kFusedBlocksPerSm = 2;
// 16-byte pieces of W per lane and step of the fused kernel (8 KiB of W a warp per step, twice
// kVecPieces), with the balanced grid: measured faster on Hopper (docs/DECISIONS.md).
constexpr int kFusedWidePieces = 16;

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
constexpr int split_rows(int pieces) {
  return pieces == 1 ? 16 : pieces == 2 ? 8 : pieces <= 4 ? 4 : 2;
}
constexpr int kSplitMaxPieces = 6;       // x's pieces a thread holds (packed: 24 registers)
constexpr int kSplitMaxNormPieces = 4;   // with the norm, as floats x * nw (32 registers)
constexpr int kSplitMaxFloatPieces = 3;  // without: unpacked once up to here, else at every use

// One level of transpose_sum: the first n values of v, halved across lanes `off` apart.
template <int N, int n, int off>
__device__ __forceinline__ void transpose_level(float (&v)[N], int lane) {
  if constexpr (n > 1) {
    const bool hi = (lane & off) != 0;
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const float send = hi ? v[i] : v[i + n / 2];
      const float keep = hi ? v[i + n / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, off);
    }
    transpose_level<N, n / 2, off / 2>(v, lane);
  }
}

// The sum over the warp's lanes of v[i] for i = lane / (32 / N) (N a power of two, <= 32): one
// butterfly that halves the values at each of its first log2(N) levels.
template <int N>
__device__ __forceinline__ float transpose_sum(float (&v)[N], int lane) {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "a power of two up to 32");
  transpose_level<N, N, 16>(v, lane);
  float s = v[0];
#pragma unroll
  for (int off = 16 / N; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
  return s;
}

// SkinnyFusion::shared_tail (kTail): block b takes steps b * own .. (b + 1) * own - 1 of the
// GEMV's `steps` (a step: a warp's split_rows() rows), then steps from the pool of the rest
// (pool0..), one at a time through an atomic counter, up to `most`: SMs that stream faster take
// more of the tail. ctr[0] is the pool's counter, ctr[1] counts the blocks done; the last block
// sets both back to 0.
struct SplitTail {
  unsigned* ctr = nullptr;
  int own = 0, most = 0;
  std::int64_t pool0 = 0, steps = 0;
};
__device__ __forceinline__ unsigned grab(unsigned* ctr) {
  unsigned v;
  asm volatile("atom.global.add.u32 %0, [%1], 1;" : "=r"(v) : "l"(ctr) : "memory");
  return v;
}

// NT threads a block: 256 (two blocks an SM) or 512 (one, SkinnyFusion::wide_block); thread
// `tid` then holds x's pieces tid + NT j. Dynamic shared memory: with kStage first the staged
// step (uint4 [RS][KP][NT]), then float [NT/32][cap] (the warps' sums of the block's rows, cap
// rows each) and [NT/32] (their x^2); with kTail then int [most] (the pool steps taken).
template <class T, int KP, bool kNorm, bool kPair, int NT = kVecThreads, bool kTail = false,
          bool kStage = false>
__global__ void __launch_bounds__(NT, NT == kVecThreads ? kFusedBlocksPerSm : 1)
    split_gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                      T* __restrict__ y, std::int64_t out, std::int64_t in, std::int64_t ldw,
                      SkinnyFusion f, int cap, SplitTail d) {
  if (!f.late_dependents) pdl_trigger();
  static_assert(!kNorm || KP <= kSplitMaxNormPieces, "the norm keeps x * nw as floats");
  constexpr int RS = split_rows(KP);  // W rows a step
  constexpr int RW = kPair ? 2 : 1;   // W rows a group
  constexpr int RG = RS / RW;         // groups a step
  constexpr bool kFloatX = kNorm || KP <= kSplitMaxFloatPieces;
  constexpr unsigned kFull = 0xffffffffu;
  constexpr int kW = NT / 32;  // warps a block
  // kStage (SkinnyFusion::stage_next): the block's second step of W rows first ([RS][KP][NT]
  // pieces, filled by cp.async before the wait), then the warps' sums.
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr std::size_t kStageBytes =
      kStage ? static_cast<std::size_t>(RS) * KP * NT * sizeof(uint4) : 0;
  [[maybe_unused]] uint4* const staged = reinterpret_cast<uint4*>(smem);
  float* const part = reinterpret_cast<float*>(smem + kStageBytes);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const std::int64_t pieces = in / 8;
  const std::int64_t pair = out / 2;  // kPair: rows g and g + pair (SwiGlu: gate and up)
  const std::int64_t groups = kPair ? pair : out;
  std::int64_t g0 = blockIdx.x * groups / gridDim.x;
  std::int64_t g1 = (blockIdx.x + 1) * groups / gridDim.x;
  // kTail: the block's pool steps in the order taken, -1 while thread 0's grab is on its way
  // (the counter is this kernel's alone: taken before the wait).
  [[maybe_unused]] volatile int* tasks = nullptr;
  if constexpr (kTail) {
    g0 = static_cast<std::int64_t>(blockIdx.x) * d.own * RG;
    g1 = std::min<std::int64_t>(g0 + static_cast<std::int64_t>(d.own) * RG, groups);
    tasks = reinterpret_cast<volatile int*>(part + kW * (cap + 1));
    if (tid == 0) {
      tasks[0] = static_cast<int>(d.pool0 + grab(d.ctr));
      for (int k = 1; k < d.most; ++k) tasks[k] = -1;
    }
    __syncthreads();
  }
  // kTail: the block's own rows, whose warp sums come before its pool steps'.
  [[maybe_unused]] const int own_rows = static_cast<int>((g1 - g0) * RW);
  bool has[KP];  // whether this thread holds piece j
#pragma unroll
  for (int j = 0; j < KP; ++j) has[j] = tid + NT * j < pieces;
  const T* wt = w + tid * 8;

  // The step's W rows: groups s.., rows past the block's range zeros.
  // fn(i, j, ok, p) for piece j of each row i of the step at groups s..: p its address, ok
  // whether the row is below `bound` and the thread holds piece j. Through this one helper the
  // compiler steps each row's pointer by ldw's bytes; with the loops written out in load_step and
  // stage_step it re-reads W's base from the constant bank and shifts a row offset for each load,
  // a longer loop (measured slower on Hopper: docs/DECISIONS.md). The zero fill and the row tests
  // stay on full steps too: skipping them measured slower. Time the step after any change here.
  auto each_piece = [&](std::int64_t s, std::int64_t bound, auto&& fn) {
#pragma unroll
    for (int i = 0; i < RS; ++i) {
      const std::int64_t g = s + i / RW;
      const bool row = g < bound;
      const T* wr = wt + (g + (i % RW) * pair) * ldw;
#pragma unroll
      for (int j = 0; j < KP; ++j) fn(i, j, row && has[j], wr + NT * 8 * j);
    }
  };
  auto load_step = [&](std::int64_t s, uint4(&wv)[RS][KP], std::int64_t bound) {
    each_piece(s, bound, [&](int i, int j, bool ok, const T* p) {
      wv[i][j] = ok ? load_weight(p) : make_uint4(0, 0, 0, 0);
    });
  };
  // kStage: the step after the first into shared memory (16 bytes a thread and piece).
  auto stage_step = [&](std::int64_t s, std::int64_t bound) {
    each_piece(s, bound, [&](int i, int j, bool ok, const T* p) {
      copy_weight(staged + (i * KP + j) * NT + tid, ok ? p : w, ok ? 16u : 0u);
    });
    cp_async_commit();
  };
  uint4 wv[RS][KP];
  [[maybe_unused]] bool stage_pending = kStage && f.weights_ready && g0 + RG < g1;
  if (f.weights_ready) load_step(g0, wv, g1);
  if constexpr (kStage)
    if (stage_pending) stage_step(g0 + RG, g1);
  pdl_wait();
  if (!f.weights_ready) load_step(g0, wv, g1);

  // This thread's pieces of x (times the norm's weight), and of x^2.
  [[maybe_unused]] float xf[kFloatX ? KP : 1][8];
  [[maybe_unused]] uint4 xp[kFloatX ? 1 : KP];
  [[maybe_unused]] float squares = 0;
  const T* xt = x + tid * 8;
  const T* nwt = static_cast<const T*>(f.norm_weight) + tid * 8;
#pragma unroll
  for (int j = 0; j < KP; ++j) {
    const uint4 v =
        has[j] ? __ldg(reinterpret_cast<const uint4*>(xt + NT * 8 * j)) : make_uint4(0, 0, 0, 0);
    if constexpr (kFloatX) {
      unpack8<T>(v, xf[j]);
      if constexpr (kNorm)
        norm_piece<T, true>(has[j] ? __ldg(reinterpret_cast<const uint4*>(nwt + NT * 8 * j))
                                   : make_uint4(0, 0, 0, 0),
                            xf[j], squares);
    } else {
      xp[j] = v;
    }
  }
  // The residual stream's value of the thread's first group, read now rather than at the end.
  const bool early_res = f.epilogue == SkinnyEpilogue::Residual && g0 + tid < g1;
  const float res0 = early_res ? to_float(y[g0 + tid]) : 0.0f;
  if constexpr (kNorm) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) squares += __shfl_xor_sync(kFull, squares, off);
    if (lane == 0) part[kW * cap + warp] = squares;
  }

  // The products of a step (piece(i, j): row i's piece j, from wv or the staged step): the
  // warp's sum of each of its RS rows, lane i * (32 / RS) holding row i.
  auto from_regs = [&](int i, int j) { return wv[i][j]; };
  auto from_stage = [&](int i, int j) { return staged[(i * KP + j) * NT + tid]; };
  auto products = [&](auto&& piece) {
    float acc[RS];
#pragma unroll
    for (int i = 0; i < RS; ++i) acc[i] = 0;
#pragma unroll
    for (int j = 0; j < KP; ++j) {
      float xj[8];
      if constexpr (kFloatX) {
#pragma unroll
        for (int e = 0; e < 8; ++e) xj[e] = xf[j][e];
      } else {
        unpack8<T>(xp[j], xj);
      }
#pragma unroll
      for (int i = 0; i < RS; ++i) acc[i] = dot_piece<T>(piece(i, j), xj, acc[i]);
    }
    return transpose_sum<RS>(acc, lane);
  };
  auto keep = [&](std::int64_t s, float v) {
    const int i = lane / (32 / RS);  // the step's row this lane holds
    if (lane % (32 / RS) == 0 && s + i / RW < g1) part[warp * cap + (s - g0) * RW + i] = v;
  };
  for (std::int64_t s = g0; s < g1;) {
    keep(s, products(from_regs));
    s += RG;
    if (s >= g1) break;
    if constexpr (kStage) {
      if (stage_pending) {
        // Step s is staged: the one after it goes into registers before its products.
        stage_pending = false;
        if (s + RG < g1) load_step(s + RG, wv, g1);
        cp_async_wait<0>();
        keep(s, products(from_stage));
        s += RG;
        if (s >= g1) break;
        continue;
      }
    }
    load_step(s, wv, g1);
  }
  // kTail: pool steps, every warp the same ones (their rows' sums after the block's own). Thread
  // 0 asks for the next step as its warp starts one and publishes it after the products, so the
  // counter's round trip is not waited for.
  [[maybe_unused]] int taken = 0;
  if constexpr (kTail) {
    for (; taken < d.most; ++taken) {
      int t;
      while ((t = tasks[taken]) < 0) continue;  // thread 0 of this block writes it
      if (t >= d.steps) break;
      const bool grabber = tid == 0 && taken + 1 < d.most;
      const unsigned next = grabber ? grab(d.ctr) : 0u;
      load_step(static_cast<std::int64_t>(t) * RG, wv, groups);
      const float v = products(from_regs);
      const int i = lane / (32 / RS);
      if (lane % (32 / RS) == 0) part[warp * cap + own_rows + taken * RS + i] = v;
      if (grabber) tasks[taken + 1] = static_cast<int>(d.pool0 + next);
    }
  }
  __syncthreads();

  [[maybe_unused]] float rstd = 0;
  if constexpr (kNorm) {
    float sq = 0;
#pragma unroll
    for (int i = 0; i < kW; ++i) sq += part[kW * cap + i];
    rstd = rsqrtf(sq / static_cast<float>(in) + f.eps);
  }
  for (std::int64_t lg = tid; lg < g1 - g0; lg += NT) {
    float acc[RW];
#pragma unroll
    for (int r = 0; r < RW; ++r) {
      float sum = 0;
#pragma unroll
      for (int i = 0; i < kW; ++i) sum += part[i * cap + lg * RW + r];
      if constexpr (kNorm) sum *= rstd;
      acc[r] = sum;
    }
    const std::int64_t grp = g0 + lg;
    float res = 0;
    if (f.epilogue == SkinnyEpilogue::Residual) res = lg == tid ? res0 : to_float(y[grp]);
    finish_group<T, RW>(f, bias, y, grp, pair, acc, res);
  }
  if constexpr (kTail) {
    for (int lg = tid; lg < taken * RG; lg += NT) {
      const int k = lg / RG, q = lg % RG;
      const std::int64_t grp = static_cast<std::int64_t>(tasks[k]) * RG + q;
      if (grp >= groups) continue;
      float acc[RW];
#pragma unroll
      for (int r = 0; r < RW; ++r) {
        float sum = 0;
#pragma unroll
        for (int i = 0; i < kW; ++i) sum += part[i * cap + own_rows + k * RS + q * RW + r];
        if constexpr (kNorm) sum *= rstd;
        acc[r] = sum;
      }
      const float res = f.epilogue == SkinnyEpilogue::Residual ? to_float(y[grp]) : 0.0f;
      finish_group<T, RW>(f, bias, y, grp, pair, acc, res);
    }
    if (tid == 0 && atomicAdd(d.ctr + 1, 1u) == gridDim.x - 1) {
      d.ctr[0] = 0;
      d.ctr[1] = 0;
    }
  }
}

int sm_count() {
  int dev = 0, sms = 0;
  GPB_CUDA_CHECK(cudaGetDevice(&dev));
  GPB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return std::max(sms, 1);
}

template <class T, int ROWS>
void launch_vec(const void* x, const void* w, const void* bias, void* y, std::int64_t out,
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

// SkinnyFusion::shared_tail: the share of a block's steps it takes as its own (the rest from the
// pool), and the counter pairs, handed out in turn across every instance: each pair is left at
// zero by its kernel's last block, so only kernels kTailPairs launches apart share one.
constexpr int kTailOwnPercent = 80;
constexpr int kTailPairs = 4096;
__device__ unsigned g_tail_counters[2 * kTailPairs];
std::atomic<unsigned> g_tail_next{0};

// The pool's split of `groups` in steps of `step_groups` over `blocks`; own 0 where the pool
// would be empty.
SplitTail tail_split(std::int64_t groups, int step_groups, int blocks) {
  SplitTail d;
  d.steps = (groups + step_groups - 1) / step_groups;
  d.own = std::max(1, static_cast<int>(d.steps * kTailOwnPercent / 100 / blocks));
  d.pool0 = static_cast<std::int64_t>(d.own) * blocks;
  if (d.pool0 >= d.steps) return {};
  const std::int64_t share = (d.steps - d.pool0 + blocks - 1) / blocks;
  d.most = static_cast<int>(std::min<std::int64_t>(4 * share + 2, d.steps - d.pool0 + 1));
  return d;
}

// Shared memory of the kTail kernel for d: the block's own rows and its most pool steps' rows
// (their warps' sums), the warps' x^2, then the pool steps it took. 0 where d has no pool.
std::size_t tail_smem(const SplitTail& d, int step_rows, int threads) {
  if (d.own == 0) return 0;
  return threads / 32 * sizeof(float) * ((d.own + d.most) * step_rows + 1) +
         static_cast<std::size_t>(d.most) * sizeof(int);
}

// The shared tail of a block-split launch (x's pieces kp a thread, `blocks` of `threads`); own 0,
// the static split, where the pool would be empty or the kTail kernel's shared memory would pass
// its default 48 KiB. The launcher and skinny_shared_tail_applies both ask it.
SplitTail tail_plan(std::int64_t out, bool pair, int kp, int blocks, int threads) {
  const int step_rows = split_rows(kp);
  const SplitTail d = tail_split(pair ? out / 2 : out, step_rows / (pair ? 2 : 1), blocks);
  return tail_smem(d, step_rows, threads) <= 48 * 1024 ? d : SplitTail{};
}

template <class T, int KP, bool kNorm, bool kPair, int NT, bool kStage>
void launch_split_instance(const void* x, const void* w, const void* bias, void* y,
                           std::int64_t out, std::int64_t in, std::int64_t ldw,
                           const SkinnyFusion& f, int blocks, int cap, cudaStream_t stream) {
  constexpr int RS = split_rows(KP);
  constexpr std::size_t kWarpSums = NT / 32 * sizeof(float);
  // kStage: the staged step's pieces before the sums (past the default 48 KiB: opted in).
  constexpr std::size_t kStageBytes =
      kStage ? static_cast<std::size_t>(RS) * KP * NT * sizeof(uint4) : 0;
  auto opt_in = [&](auto kernel, std::size_t smem) {
    if (smem > 48 * 1024)
      GPB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
  };
  SplitTail d = f.shared_tail ? tail_plan(out, kPair, KP, blocks, NT) : SplitTail{};
  if (d.own > 0) {
    const std::size_t smem = kStageBytes + tail_smem(d, RS, NT);
    auto kernel = split_gemv_kernel<T, KP, kNorm, kPair, NT, true, kStage>;
    opt_in(kernel, smem);
    unsigned* pairs = nullptr;
    GPB_CUDA_CHECK(cudaGetSymbolAddress(reinterpret_cast<void**>(&pairs), g_tail_counters));
    d.ctr = pairs + 2 * (g_tail_next.fetch_add(1) % kTailPairs);
    const int rows = (d.own + d.most) * RS;  // the block's own and its most pool steps'
    launch_pdl(kernel, static_cast<unsigned>(blocks), NT, smem, stream, static_cast<const T*>(x),
               static_cast<const T*>(w), static_cast<const T*>(bias), static_cast<T*>(y), out, in,
               ldw, f, rows, d);
    GPB_CHECK_LAUNCH();
    return;
  }
  const std::size_t smem = kStageBytes + kWarpSums * (cap + 1);
  auto kernel = split_gemv_kernel<T, KP, kNorm, kPair, NT, false, kStage>;
  opt_in(kernel, smem);
  launch_pdl(kernel, static_cast<unsigned>(blocks), NT, smem, stream, static_cast<const T*>(x),
             static_cast<const T*>(w), static_cast<const T*>(bias), static_cast<T*>(y), out, in,
             ldw, f, cap, SplitTail{});
  GPB_CHECK_LAUNCH();
}

template <class T, int KP, bool kNorm, bool kPair, int NT = kVecThreads>
void launch_split_kernel(const void* x, const void* w, const void* bias, void* y, std::int64_t out,
                         std::int64_t in, std::int64_t ldw, const SkinnyFusion& f, int blocks,
                         int cap, cudaStream_t stream) {
  // Staged instances only where the engine asks for them (gate|up: the norm and row pairs; down:
  // neither; both on 256-thread blocks), to keep the file's compile time down.
  if constexpr (NT == kVecThreads && kNorm == kPair) {
    if (f.stage_next && f.weights_ready) {
      launch_split_instance<T, KP, kNorm, kPair, NT, true>(x, w, bias, y, out, in, ldw, f, blocks,
                                                           cap, stream);
      return;
    }
  }
  launch_split_instance<T, KP, kNorm, kPair, NT, false>(x, w, bias, y, out, in, ldw, f, blocks, cap,
                                                        stream);
}

// The block-split kernel's launch for one fused GEMV: x's pieces a thread (KP), blocks and rows a
// block (cap). blocks 0: the kernel does not take it (x's pieces past max_pieces, or the block's
// sums past its default shared memory).
struct SplitGrid {
  int kp = 0, blocks = 0, cap = 0;
};
SplitGrid split_grid(std::int64_t out, std::int64_t in, bool pair, int threads, int blocks_per_sm,
                     int max_pieces) {
  const std::int64_t pieces = (in / 8 + threads - 1) / threads;  // a thread's share of x
  const std::int64_t groups = pair ? out / 2 : out;
  if (pieces > max_pieces || groups < 1) return {};
  const int kp = pieces <= 4 ? static_cast<int>(pieces) : 6;
  const int group_rows = pair ? 2 : 1;
  const int step_groups = split_rows(kp) / group_rows;
  const std::int64_t steps = (groups + step_groups - 1) / step_groups;
  const std::int64_t blocks =
      std::min<std::int64_t>(steps, static_cast<std::int64_t>(sm_count()) * blocks_per_sm);
  const std::int64_t cap = (groups + blocks - 1) / blocks * group_rows;  // rows of a block
  if ((cap + 1) * (threads / 32) * static_cast<std::int64_t>(sizeof(float)) > 48 * 1024) return {};
  return {kp, static_cast<int>(blocks), static_cast<int>(cap)};
}

// SkinnyFusion::wide_block: one block of 512 threads an SM, x's pieces at most 3 a thread.
constexpr int kWideThreads = 512;
constexpr int kWideMaxPieces = 3;
SplitGrid wide_grid(std::int64_t out, std::int64_t in, bool pair) {
  return split_grid(out, in, pair, kWideThreads, 1, kWideMaxPieces);
}

// The block-split kernel for this fused GEMV (on 512-thread blocks with f.wide_block where they
// apply), when x's pieces fit its registers and the block's sums its default shared memory;
// false (nothing launched) otherwise.
template <class T, bool kNorm, bool kPair>
bool launch_split(const void* x, const void* w, const void* bias, void* y, std::int64_t out,
                  std::int64_t in, std::int64_t ldw, const SkinnyFusion& f, cudaStream_t stream) {
  if (f.wide_block) {
    const SplitGrid g = wide_grid(out, in, kPair);
    const int b = g.blocks, c = g.cap;
    switch (g.kp) {
      case 1:
        launch_split_kernel<T, 1, kNorm, kPair, kWideThreads>(x, w, bias, y, out, in, ldw, f, b, c,
                                                              stream);
        return true;
      case 2:
        launch_split_kernel<T, 2, kNorm, kPair, kWideThreads>(x, w, bias, y, out, in, ldw, f, b, c,
                                                              stream);
        return true;
      case 3:
        launch_split_kernel<T, 3, kNorm, kPair, kWideThreads>(x, w, bias, y, out, in, ldw, f, b, c,
                                                              stream);
        return true;
      default:
        break;  // not taken: the 256-thread blocks below
    }
  }
  const SplitGrid g = split_grid(out, in, kPair, kVecThreads, kFusedBlocksPerSm,
                                 kNorm ? kSplitMaxNormPieces : kSplitMaxPieces);
  if (g.blocks == 0) return false;
  const int b = g.blocks, c = g.cap;
  switch (g.kp) {
    case 1:
      launch_split_kernel<T, 1, kNorm, kPair>(x, w, bias, y, out, in, ldw, f, b, c, stream);
      break;
    case 2:
      launch_split_kernel<T, 2, kNorm, kPair>(x, w, bias, y, out, in, ldw, f, b, c, stream);
      break;
    case 3:
      launch_split_kernel<T, 3, kNorm, kPair>(x, w, bias, y, out, in, ldw, f, b, c, stream);
      break;
    case 4:
      launch_split_kernel<T, 4, kNorm, kPair>(x, w, bias, y, out, in, ldw, f, b, c, stream);
      break;
    default:
      if constexpr (!kNorm)
        launch_split_kernel<T, 6, kNorm, kPair>(x, w, bias, y, out, in, ldw, f, b, c, stream);
      break;
  }
  return true;
}

template <class T, int RW, bool kNorm>
void launch_fused_kernel(const void* x, const void* w, const void* bias, void* y, std::int64_t out,
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

template <class T>
void launch_fused(const void* x, const void* w, const void* bias, void* y, std::int64_t out,
                  std::int64_t in, std::int64_t ldw, const SkinnyFusion& f, cudaStream_t stream) {
  const bool norm = f.prologue == SkinnyPrologue::RmsNorm;
  const bool swiglu = f.epilogue == SkinnyEpilogue::SwiGlu;
  if (norm && swiglu && launch_split<T, true, true>(x, w, bias, y, out, in, ldw, f, stream)) return;
  if (norm && !swiglu && launch_split<T, true, false>(x, w, bias, y, out, in, ldw, f, stream))
    return;
  if (!norm && swiglu && launch_split<T, false, true>(x, w, bias, y, out, in, ldw, f, stream))
    return;
  if (!norm && !swiglu && launch_split<T, false, false>(x, w, bias, y, out, in, ldw, f, stream))
    return;
  if (swiglu) {
    if (norm) return launch_fused_kernel<T, 2, true>(x, w, bias, y, out, in, ldw, f, stream);
    return launch_fused_kernel<T, 2, false>(x, w, bias, y, out, in, ldw, f, stream);
  }
  // The RMSNorm prologue without an epilogue (qkv, the LM head): rows g and g + out/2 a warp,
  // the SwiGLU kernel's 16 pieces a step, where the one-row kernel has registers for 8.
  if (norm && f.epilogue == SkinnyEpilogue::None && out % 2 == 0)
    return launch_fused_kernel<T, 2, true>(x, w, bias, y, out, in, ldw, f, stream);
  if (norm) return launch_fused_kernel<T, 1, true>(x, w, bias, y, out, in, ldw, f, stream);
  launch_fused_kernel<T, 1, false>(x, w, bias, y, out, in, ldw, f, stream);
}

template <class T>
void launch(const void* x, const void* w, const void* bias, void* y, int rows, std::int64_t out,
            std::int64_t in, std::int64_t ldw, cudaStream_t stream) {
  switch (rows) {
    case 1:
      return launch_vec<T, 1>(x, w, bias, y, out, in, ldw, stream);
    case 2:
      return launch_vec<T, 2>(x, w, bias, y, out, in, ldw, stream);
    default:
      break;
  }
  static_assert(kVecMaxRows == 2, "the switch above covers the CUDA-core rows");
  const std::int64_t tiles = (out + kTile - 1) / kTile;
  if (tiles > 0x7fffffff) throw InputError("skinny_gemm: too many outputs");
  // Host-side attributes of the current device's function (no stream work: fine inside graph
  // capture): 72 KiB of dynamic shared memory needs the opt-in, and the largest carveout fits 3
  // blocks' rings.
  GPB_CUDA_CHECK(cudaFuncSetAttribute(skinny_gemm_kernel<T>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(kRingBytes)));
  GPB_CUDA_CHECK(cudaFuncSetAttribute(skinny_gemm_kernel<T>,
                                      cudaFuncAttributePreferredSharedMemoryCarveout,
                                      static_cast<int>(cudaSharedmemCarveoutMaxShared)));
  launch_pdl(skinny_gemm_kernel<T>, static_cast<unsigned>(tiles), kThreads, kRingBytes, stream,
             static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias),
             static_cast<T*>(y), rows, out, in, ldw);
  GPB_CHECK_LAUNCH();
}

bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

}  // namespace

bool skinny_gemm_supported(int rows, std::int64_t in) {
  return rows >= 1 && rows <= skinny_gemm_max_rows() && in > 0 && in % 8 == 0;
}

bool skinny_fusion_supported(int rows, std::int64_t out, std::int64_t in,
                             const SkinnyFusion& fusion) {
  if (!skinny_gemm_supported(rows, in) || rows > skinny_fusion_max_rows()) return false;
  if (fusion.epilogue == SkinnyEpilogue::SwiGlu && out % 2 != 0) return false;
  return fusion.prologue == SkinnyPrologue::None || fusion.norm_weight != nullptr;
}

void skinny_gemm(const void* x, const void* w, const void* bias, void* y, int rows,
                 std::int64_t out, std::int64_t in, SkinnyDtype dtype, cudaStream_t stream,
                 const SkinnyFusion& fusion, std::int64_t ldw) {
  if (!skinny_gemm_supported(rows, in) || out < 0)
    throw InputError("skinny_gemm: needs 1..8 rows and `in` a positive multiple of 8");
  if (ldw == 0) ldw = in;
  if (ldw < in || ldw % 8 != 0)
    throw InputError("skinny_gemm: W's row pitch must be at least `in` and a multiple of 8");
  const bool norm = fusion.prologue == SkinnyPrologue::RmsNorm;
  if ((norm || fusion.epilogue != SkinnyEpilogue::None) &&
      !skinny_fusion_supported(rows, out, in, fusion))
    throw InputError(
        "skinny_gemm: fusions need one row, an even `out` for SwiGLU and the norm's weight");
  if (!aligned16(x) || !aligned16(w) || !aligned16(y) || (norm && !aligned16(fusion.norm_weight)))
    throw InputError("skinny_gemm: x, w, y and the norm's weight must be 16-byte aligned");
  if (out == 0) return;
  const bool fused = rows <= skinny_fusion_max_rows() &&
                     (norm || fusion.epilogue != SkinnyEpilogue::None || fusion.weights_ready);
  if (dtype == SkinnyDtype::BF16) {
    if (fused) return launch_fused<__nv_bfloat16>(x, w, bias, y, out, in, ldw, fusion, stream);
    launch<__nv_bfloat16>(x, w, bias, y, rows, out, in, ldw, stream);
  } else {
    if (fused) return launch_fused<__half>(x, w, bias, y, out, in, ldw, fusion, stream);
    launch<__half>(x, w, bias, y, rows, out, in, ldw, stream);
  }
}

bool skinny_wide_block_applies(int rows, std::int64_t out, std::int64_t in, const SkinnyFusion& f) {
  return rows == 1 && skinny_gemm_supported(rows, in) &&
         wide_grid(out, in, f.epilogue == SkinnyEpilogue::SwiGlu).blocks > 0;
}

bool skinny_shared_tail_applies(int rows, std::int64_t out, std::int64_t in,
                                const SkinnyFusion& f) {
  if (rows != 1 || !skinny_gemm_supported(rows, in)) return false;
  const bool pair = f.epilogue == SkinnyEpilogue::SwiGlu;
  const bool norm = f.prologue == SkinnyPrologue::RmsNorm;
  SplitGrid g = f.wide_block ? wide_grid(out, in, pair) : SplitGrid{};
  int threads = kWideThreads;
  if (g.blocks == 0) {
    g = split_grid(out, in, pair, kVecThreads, kFusedBlocksPerSm,
                   norm ? kSplitMaxNormPieces : kSplitMaxPieces);
    threads = kVecThreads;
  }
  return f.shared_tail && g.blocks > 0 && tail_plan(out, pair, g.kp, g.blocks, threads).own > 0;
}

}  // namespace gpubench
