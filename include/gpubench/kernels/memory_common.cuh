#pragma once
// Internals shared by the memory kernels' .cu files: block size, 16-byte lane access, grid sizing
// from the device's occupancy and SM count, and a block-wide sum. CUDA-only; not for modules.
#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "gpubench/kernels/memory.cuh"

namespace gpubench {
namespace {

constexpr int kBlock = 256;  // threads per block of every bandwidth kernel
constexpr int kUnroll = 4;   // 16-byte vectors per thread and loop step: loads issued before use

// ---------------------------------------------------------------------------------------------
// 16-byte (or element) accesses as arrays of lanes

template <class T, int L>
struct Access;
template <class T>
struct Access<T, 1> {
  static __device__ __forceinline__ void load(const T* p, T (&v)[1]) { v[0] = *p; }
  static __device__ __forceinline__ void store(T* p, const T (&v)[1]) { *p = v[0]; }
};
template <>
struct Access<float, 4> {
  static __device__ __forceinline__ void load(const float* p, float (&v)[4]) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    v[0] = x.x;
    v[1] = x.y;
    v[2] = x.z;
    v[3] = x.w;
  }
  static __device__ __forceinline__ void store(float* p, const float (&v)[4]) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  }
};
template <>
struct Access<double, 2> {
  static __device__ __forceinline__ void load(const double* p, double (&v)[2]) {
    const double2 x = *reinterpret_cast<const double2*>(p);
    v[0] = x.x;
    v[1] = x.y;
  }
  static __device__ __forceinline__ void store(double* p, const double (&v)[2]) {
    *reinterpret_cast<double2*>(p) = make_double2(v[0], v[1]);
  }
};

template <class T>
constexpr int kLanes = 16 / sizeof(T);

bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

// ---------------------------------------------------------------------------------------------
// Grid sizing: a persistent grid of as many blocks as fit on the device at once (occupancy x SM
// count, queried at run time), fewer when the data is small.

template <class Kernel>
unsigned grid_for(Kernel kernel, std::size_t work_items, int items_per_block) {
  int per_sm = 0;
  GPB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kBlock, 0));
  const std::size_t resident =
      static_cast<std::size_t>(std::max(per_sm, 1)) * current_device_sm_count();
  const std::size_t needed = (work_items + items_per_block - 1) / items_per_block;
  return static_cast<unsigned>(std::max<std::size_t>(1, std::min(resident, needed)));
}

// Sum of `v` over the block, valid in thread 0. `shared` holds one value per warp.
template <class V>
__device__ __forceinline__ V block_sum(V v, V* shared) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = V(0);
  if (warp == 0) {
    if (lane < static_cast<int>(blockDim.x >> 5)) v = shared[lane];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  }
  return v;
}

}  // namespace
}  // namespace gpubench
