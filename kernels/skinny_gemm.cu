// Skinny GEMM: Y[rows, out] = X[rows, in] W^T (+ bias) for 1..8 rows, a stream of W.
//
// A block owns 16 outputs (W rows); its 4 warps take turns over `in` in steps of 64 elements. In
// a step, lane (g, t) of a warp (g = lane/4, t = lane%4) copies 16 bytes of W rows g and g+8 at
// k = 32j + 8t (j = 0, 1) and the same 16 bytes of X row g into its own slots of a shared-memory
// ring (cp.async), kStages-1 steps ahead of the step it multiplies: the loads stay in flight
// without registers, and the 4 warps read 512 contiguous bytes of each row per turn. Two
// mma.m16n8k16 per piece take the pieces as they are: the A fragment of lane (g, t) holds rows
// g, g+8 at k-slots 2t, 2t+1, 2t+8, 2t+9 and the B fragment X row g at the same slots, so
// mapping those slots to 4 consecutive k of the lane (the same map in every lane) keeps A and B
// consistent; the sum over k does not care about the order. Rows past `rows` multiply zeros.
// The warps' partial sums meet in shared memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
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
// multiplied. 3 stages x 6 pieces x 16 bytes x 128 threads = 36 KiB a block.
constexpr int kStages = 3;
// Blocks per SM: 4 keep 64 KiB of W in flight on each SM, plenty for HBM; the shared-memory
// carveout asked for (a share of the largest) fits them and leaves the rest of the SM's 256 KiB
// to L1, where X (up to 64 KiB for 8 rows of 4096) stays for the next blocks.
constexpr int kBlocksPerSm = 4;
constexpr int kCarveoutPercent = 70;  // of 228 KiB: 160, nearest setting 164 KiB (4 x 37 KiB)
constexpr std::size_t kRingBytes =
    static_cast<std::size_t>(kStages) * kChunks * kThreads * sizeof(uint4);

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

__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float to_float(__half v) {
  return __half2float(v);
}
template <class T>
__device__ __forceinline__ T from_float(float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(v);
  else
    return __float2half_rn(v);
}

// Grid: one block per 16 outputs. Dynamic shared memory: kRingBytes, reused for the warps' sums.
template <class T>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    skinny_gemm_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                       T* __restrict__ y, int rows, std::int64_t out, std::int64_t in) {
  extern __shared__ uint4 ring[];  // [kStages][kChunks][kThreads]: each thread its own slots
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const std::int64_t tile0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  // Pieces outside the matrices are zero-filled (source size 0) from a valid address: W rows
  // past `out`, X rows past `rows`, k past `in`.
  const unsigned has0 = tile0 + g < out ? 16 : 0, has8 = tile0 + g + 8 < out ? 16 : 0;
  const unsigned has_x = g < rows ? 16 : 0;
  const T* w0 = w + std::min(tile0 + g, out - 1) * in + t * 8;
  const T* w8 = w + std::min(tile0 + g + 8, out - 1) * in + t * 8;
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

template <class T>
void launch(const void* x, const void* w, const void* bias, void* y, int rows, std::int64_t out,
            std::int64_t in, cudaStream_t stream) {
  const std::int64_t tiles = (out + kTile - 1) / kTile;
  if (tiles > 0x7fffffff) throw InputError("skinny_gemm: too many outputs");
  // A host-side attribute of the function, cheap to set on every call.
  GPB_CUDA_CHECK(cudaFuncSetAttribute(
      skinny_gemm_kernel<T>, cudaFuncAttributePreferredSharedMemoryCarveout, kCarveoutPercent));
  skinny_gemm_kernel<T><<<static_cast<unsigned>(tiles), kThreads, kRingBytes, stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias),
      static_cast<T*>(y), rows, out, in);
  GPB_CHECK_LAUNCH();
}

bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

}  // namespace

bool skinny_gemm_supported(int rows, std::int64_t in) {
  return rows >= 1 && rows <= skinny_gemm_max_rows() && in > 0 && in % 8 == 0;
}

void skinny_gemm(const void* x, const void* w, const void* bias, void* y, int rows,
                 std::int64_t out, std::int64_t in, SkinnyDtype dtype, cudaStream_t stream) {
  if (!skinny_gemm_supported(rows, in) || out < 0)
    throw InputError("skinny_gemm: needs 1..8 rows and `in` a positive multiple of 8");
  if (!aligned16(x) || !aligned16(w) || !aligned16(y))
    throw InputError("skinny_gemm: x, w and y must be 16-byte aligned");
  if (out == 0) return;
  if (dtype == SkinnyDtype::BF16)
    launch<__nv_bfloat16>(x, w, bias, y, rows, out, in, stream);
  else
    launch<__half>(x, w, bias, y, rows, out, in, stream);
}

}  // namespace gpubench
