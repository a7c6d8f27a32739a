#pragma once
// Shared by the attention GPU tests: a bf16 / fp16 element of a host copy as a float.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "attention.cuh"

namespace gpubench::testing {

inline float host_value(const std::vector<std::uint16_t>& raw, std::size_t i, AttnDtype t) {
  if (t == AttnDtype::BF16) {
    __nv_bfloat16 x;
    std::memcpy(&x, &raw[i], 2);
    return __bfloat162float(x);
  }
  __half x;
  std::memcpy(&x, &raw[i], 2);
  return __half2float(x);
}

}  // namespace gpubench::testing
