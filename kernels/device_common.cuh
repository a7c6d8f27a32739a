#pragma once
// Device helpers the engine's kernels share: bf16 / fp16 storage to and from fp32, 16-byte packs
// of 8 values to floats, and the MLP's activations (SiLU of the gated MLP, GELU).
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

// GELU: 0.5 x (1 + erf(x / sqrt 2)), and GPT-2's tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x +
// 0.044715 x^3))).
__device__ __forceinline__ float gelu_erf(float x) {
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}
__device__ __forceinline__ float gelu_tanh(float x) {
  const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);  // sqrt(2/pi)
  return 0.5f * x * (1.0f + tanhf(inner));
}

}  // namespace gpubench
