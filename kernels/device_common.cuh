#pragma once
// Device helpers the engine's kernels share: bf16 / fp16 storage to and from fp32, 16-byte packs
// of 8 values to floats, and the SiLU of the gated MLP.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>
#include <type_traits>

namespace gpubench {

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

// 8 packed bf16 / fp16 values (16 bytes) to floats, in order.
template <class T>
__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8]) {
  const unsigned v[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      f[2 * i] = __uint_as_float(v[i] << 16);
      f[2 * i + 1] = __uint_as_float(v[i] & 0xffff0000u);
    } else {
      __half2 h;
      static_assert(sizeof(h) == sizeof(v[i]));
      memcpy(&h, &v[i], sizeof(h));
      const float2 p = __half22float2(h);
      f[2 * i] = p.x;
      f[2 * i + 1] = p.y;
    }
  }
}

// SiLU(x) = x * sigmoid(x), the gate of SwiGLU.
__device__ __forceinline__ float silu(float x) {
  return x / (1.0f + expf(-x));
}

}  // namespace gpubench
