#pragma once
// Shared by the attention GPU tests: a bf16 / fp16 element of a host copy as a float.
#include <cstdint>
#include <vector>

#include "gpubench/kernels/attention.cuh"
#include "half_bits.hpp"

namespace gpubench::testing {

inline float host_value(const std::vector<std::uint16_t>& raw, std::size_t i, AttnDtype t) {
  return from_bits(t, raw[i]);
}

}  // namespace gpubench::testing
