#pragma once
// Device helpers the engine's kernels share: bf16 / fp16 storage to and from fp32, 16-byte packs
// of 8 values to and from floats, asynchronous copies to shared memory (cp.async), RoPE's
// rotation, and the MLP's activations (SiLU of the gated MLP, GELU).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "gpubench/core/errors.hpp"

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

// 8 floats to 8 packed bf16 / fp16 values (16 bytes), rounded to nearest, in order.
template <class T>
__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  unsigned v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const T lo = from_float<T>(f[2 * i]), hi = from_float<T>(f[2 * i + 1]);
    unsigned short a, b;
    memcpy(&a, &lo, sizeof(a));
    memcpy(&b, &hi, sizeof(b));
    v[i] = static_cast<unsigned>(a) | (static_cast<unsigned>(b) << 16);
  }
  return make_uint4(v[0], v[1], v[2], v[3]);
}

// A shared-memory pointer as the 32-bit address PTX operands take.
__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
// cp.async of 16 bytes from global to shared memory at `dst`, bypassing L1 (.cg: data read
// once). With `src_bytes` (16 or 0) only that many are read and the rest zero-filled.
__device__ __forceinline__ void cp_async_cg16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(dst)), "l"(src)
               : "memory");
}
__device__ __forceinline__ void cp_async_cg16(std::uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}
// Closes this thread's group of cp.async copies issued since the last one.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// RoPE (rotate_half), the same arithmetic in every kernel that rotates: pair i of a head pairs
// elements i and i + head_dim/2 and turns by pos * inv_freq[i], inv_freq[i] =
// theta^(-2i/head_dim) computed in double and rounded to fp32 like HuggingFace's fp32 table; the
// angle is an fp32 product, as there, and the rotation rounds each product (no contraction), so
// kernels agree bit for bit.
__device__ __forceinline__ float rope_inv_freq(int i, int head_dim, double log2_theta) {
  return static_cast<float>(exp2(-(2.0 * i / head_dim) * log2_theta));
}
// The host's side of rope_inv_freq: log2(theta), after checking that theta is a finite number
// above 1 (InputError naming `who` otherwise).
inline double rope_log2_theta(float theta, const char* who) {
  if (!(theta > 1.0f) || !std::isfinite(theta))
    throw InputError(std::string(who) + ": theta " + std::to_string(theta) +
                     " must be a finite number above 1");
  return std::log2(static_cast<double>(theta));
}
__device__ __forceinline__ void rope_angle(int pos, float inv_freq, float& cos_a, float& sin_a) {
  sincosf(static_cast<float>(pos) * inv_freq, &sin_a, &cos_a);
}
// (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin).
__device__ __forceinline__ void rope_rotate(float x1, float x2, float cos_a, float sin_a, float& y1,
                                            float& y2) {
  y1 = __fsub_rn(__fmul_rn(x1, cos_a), __fmul_rn(x2, sin_a));
  y2 = __fadd_rn(__fmul_rn(x2, cos_a), __fmul_rn(x1, sin_a));
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
