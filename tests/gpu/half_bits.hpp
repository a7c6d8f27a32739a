#pragma once
// Shared by the GPU tests: rounding to and from the kernels' 16-bit storage types on the host,
// with CUDA's own conversions, and seeded random arrays of them, for any of the kernels' dtype enums (ActDtype, SkinnyDtype,
// AttnDtype: each has a BF16 enumerator, the other one is fp16).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

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

using Bits = std::vector<std::uint16_t>;  // a host copy of a bf16 / fp16 array

// The values of stored bits of type `d`.
template <class Dtype>
std::vector<double> values(Dtype d, const Bits& bits) {
  std::vector<double> v(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) v[i] = from_bits(d, bits[i]);
  return v;
}

// Seeded uniform values in [lo, hi], rounded to the storage type.
template <class Dtype>
Bits random_bits(Dtype d, std::size_t n, std::uint64_t seed, float lo, float hi) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Bits out(n);
  for (auto& b : out) b = to_bits(d, dist(gen));
  return out;
}

}  // namespace gpubench::testing
