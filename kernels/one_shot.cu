// The one-shot all-reduce (one_shot.cuh): a few blocks per rank, each a slice, pushes over
// NVLink, flags with release/acquire at system scope.
#include <fmt/format.h>

#include "gpubench/core/errors.hpp"
#include "gpubench/kernels/one_shot.cuh"
#include "gpubench/kernels/pdl.cuh"

namespace gpubench {

using namespace transformer_detail;

namespace {

constexpr int kThreads = kOneShotThreads;

__device__ __forceinline__ void store_release_sys(unsigned int* p, unsigned int v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned int load_acquire_sys(const unsigned int* p) {
  unsigned int v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// V elements per access (8: 16 bytes; 1: any size or alignment).
template <class T, int V>
__global__ void __launch_bounds__(kThreads) one_shot_kernel(T* data, std::int64_t n,
                                                           OneShotPeers p) {
  pdl_start();  // data is the previous kernel's output
  const int b = static_cast<int>(blockIdx.x), B = static_cast<int>(gridDim.x);
  __shared__ unsigned int call;
  if (threadIdx.x == 0) call = p.counter[b] + 1;
  __syncthreads();
  const unsigned int epoch = call;
  const int parity = static_cast<int>(epoch & 1u);
  const int R = p.size;
  // This block's slice: units [lo, hi) of kVec elements, whatever V, so every rank cuts the data
  // alike (the same blocks, the same slices) even where only some ranks' buffers take the vector
  // path. With V = 1 the block moves elements [first, last).
  const std::int64_t units = (n + kVec - 1) / kVec;
  const std::int64_t per = (units + B - 1) / B;
  const std::int64_t lo = b * per < units ? b * per : units;
  const std::int64_t hi = lo + per < units ? lo + per : units;
  const std::int64_t first = lo * kVec, last = hi * kVec < n ? hi * kVec : n;
  auto slot = [&](int owner, int source) {
    return reinterpret_cast<T*>(static_cast<unsigned char*>(p.recv[owner]) +
                                static_cast<std::size_t>(parity * R + source) * p.slot_bytes);
  };
  auto flag = [&](int owner, int source) {
    return p.flags[owner] + (parity * kOneShotMaxBlocks + b) * R + source;
  };

  // 1. This block's slice of this rank's data into its slot of every peer.
  for (int j = 0; j < R; ++j) {
    if (j == p.rank) continue;
    T* dst = slot(j, p.rank);
    if constexpr (V == 8) {
      const uint4* src4 = reinterpret_cast<const uint4*>(data);
      uint4* dst4 = reinterpret_cast<uint4*>(dst);
      for (std::int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) dst4[i] = src4[i];
    } else {
      for (std::int64_t i = first + threadIdx.x; i < last; i += blockDim.x) dst[i] = data[i];
    }
  }
  __threadfence_system();  // this thread's pushes before any flag, at system scope
  __syncthreads();
  // 2. Once all of it is out: this call's flag for this block in every peer.
  if (threadIdx.x == 0) {
    for (int j = 0; j < R; ++j)
      if (j != p.rank) store_release_sys(flag(j, p.rank), epoch);
  }
  // 3. Every peer's flag for this call and block, in this rank's memory.
  if (static_cast<int>(threadIdx.x) < R && static_cast<int>(threadIdx.x) != p.rank) {
    const unsigned int* f = flag(p.rank, static_cast<int>(threadIdx.x));
    const std::uint64_t start = global_ns();
    while (static_cast<int>(load_acquire_sys(f) - epoch) < 0) {
      if (global_ns() - start > kOneShotTimeoutNs) {
        atomicExch(p.error, 1u);
        break;
      }
      __nanosleep(32);
    }
  }
  __syncthreads();
  // 4. The sum in rank order, rounded once.
  if constexpr (V == 8) {
    for (std::int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      float acc[V] = {};
      for (int j = 0; j < R; ++j) {
        float x[V];
        if (j == p.rank) {
          load<V>(data + i * V, x);
        } else {
          const uint4 raw = __ldcg(reinterpret_cast<const uint4*>(slot(p.rank, j)) + i);
          load<V>(reinterpret_cast<const T*>(&raw), x);
        }
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] += x[e];
      }
      store<V>(data + i * V, acc);
    }
  } else {
    for (std::int64_t i = first + threadIdx.x; i < last; i += blockDim.x) {
      float acc = 0;
      for (int j = 0; j < R; ++j) {
        const T* src = j == p.rank ? data : slot(p.rank, j);
        acc += to_float(src[i]);
      }
      data[i] = from_float<T>(acc);
    }
  }
  __syncthreads();
  // Every block slot's count to this call: this block's own, and those of the slots no block of
  // this call ran (b + B, b + 2B, ...), so that a later call with more blocks agrees on it.
  if (threadIdx.x == 0)
    for (int k = b; k < kOneShotMaxBlocks; k += B) p.counter[k] = epoch;
}

}  // namespace

std::size_t one_shot_recv_bytes(int size, std::size_t slot_bytes) {
  return static_cast<std::size_t>(2 * size) * slot_bytes;
}

std::size_t one_shot_word_bytes(int size) {
  return static_cast<std::size_t>(one_shot_error_index(size) + 1) * sizeof(unsigned int);
}

void one_shot_all_reduce(void* data, std::int64_t n, const OneShotPeers& peers, ActDtype dtype,
                         cudaStream_t stream) {
  if (n <= 0) return;
  if (peers.size < 1 || peers.size > kOneShotMaxRanks || peers.rank < 0 ||
      peers.rank >= peers.size)
    throw GpuError(fmt::format("one-shot all-reduce: rank {} of {} (at most {} ranks)",
                               peers.rank, peers.size, kOneShotMaxRanks));
  if (static_cast<std::size_t>(n) * 2 > peers.slot_bytes)
    throw GpuError(fmt::format("one-shot all-reduce: {} elements do not fit a slot of {} bytes",
                               n, peers.slot_bytes));
  // Only this rank's pointer decides the path; the blocks and slices depend on n alone.
  const bool vec = n % kVec == 0 && aligned16(data) && peers.slot_bytes % 16 == 0;
  const int blocks = one_shot_blocks((n + kVec - 1) / kVec);
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto x = static_cast<T*>(data);
    if (vec)
      launch_pdl(one_shot_kernel<T, kVec>, blocks, kThreads, 0, stream, x, n, peers);
    else
      launch_pdl(one_shot_kernel<T, 1>, blocks, kThreads, 0, stream, x, n, peers);
  });
  GPB_CHECK_LAUNCH();
}

}  // namespace gpubench
