#pragma once
// Shared by the GPU tests: rounding to and from the kernels' 16-bit storage types on the host,
// with CUDA's own conversions, for any of the kernels' dtype enums (ActDtype, SkinnyDtype,
// AttnDtype: each has a BF16 enumerator, the other one is fp16).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace gpubench::testing {

// v rounded to the storage type `d`, as its 16 bits.
template <class Dtype>
std::uint16_t to_bits(Dtype d, float v) {
  std::uint16_t bits;
  if (d == Dtype::BF16) {
    const __nv_bfloat16 b = __float2bfloat16(v);
    std::memcpy(&bits, &b, 2);
  } else {
    const __half h = __float2half(v);
    std::memcpy(&bits, &h, 2);
  }
  return bits;
}

// The value of 16 stored bits of type `d`.
template <class Dtype>
float from_bits(Dtype d, std::uint16_t bits) {
  if (d == Dtype::BF16) {
    __nv_bfloat16 b;
    std::memcpy(&b, &bits, 2);
    return __bfloat162float(b);
  }
  __half h;
  std::memcpy(&h, &bits, 2);
  return __half2float(h);
}

}  // namespace gpubench::testing
