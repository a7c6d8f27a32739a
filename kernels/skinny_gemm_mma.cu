// Skinny GEMM, rows 3..8 on tensor cores (the second path of skinny_gemm.cu's comment).
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

template <class T>
void launch_mma_typed(const void* x, const void* w, const void* bias, void* y, int rows,
                      std::int64_t out, std::int64_t in, std::int64_t ldw, cudaStream_t stream) {
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

}  // namespace

void launch_mma(SkinnyDtype dtype, const void* x, const void* w, const void* bias, void* y,
                int rows, std::int64_t out, std::int64_t in, std::int64_t ldw,
                cudaStream_t stream) {
  with_type(dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    launch_mma_typed<T>(x, w, bias, y, rows, out, in, ldw, stream);
  });
}

}  // namespace gpubench::skinny
