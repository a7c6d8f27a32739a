#pragma once
// GEMM operands and their check: seeded random non-zero fills for every element type the
// cuBLASLt wrapper uses, and a reference that recomputes chosen entries of D = op(A) op(B) in
// fp64 from the stored inputs and counts the entries outside a tolerance fitting the data type.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpubench/core/gemm.hpp"

namespace gpubench {

// Fills `count` elements of type `e` with seeded non-zero values: floats standard normal with the
// magnitude kept in [1/64, 4] (then rounded to the type), integers uniform in +-[1, 7]. The same
// seed gives the same data on every GPU.
void fill_gemm_operand(void* data, GemmElement e, std::size_t count, std::uint64_t seed,
                       cudaStream_t stream);

// Entries the check covers by default: every entry of small outputs, else 16384 of them.
inline constexpr std::uint64_t kGemmCheckAllLimit = 1ull << 20;
inline constexpr std::uint64_t kGemmCheckSamples = 16384;

// What to check: the element types (gemm_type_info), the shape and layout, the tolerance
// (gemm_tolerance) and which entries.
struct GemmCheckArgs {
  GemmElement a_type = GemmElement::BF16, b_type = GemmElement::BF16, d_type = GemmElement::BF16;
  GemmShape shape;
  GemmTolerance tolerance;
  const void* a = nullptr;
  const void* b = nullptr;
  const void* d = nullptr;
  std::uint64_t entries = 0;  // how many entries to check
  bool all = false;           // every entry (entries == M*N), else seeded random ones + corners
  std::uint64_t seed = 1;
};

// Device-side tallies (zero them before the check).
struct GemmCheckTally {
  unsigned long long checked;
  unsigned long long wrong;
  unsigned int max_error_ratio_bits;  // float bits of max |d - ref| / tolerance
  unsigned int max_rel_error_bits;    // float bits of max |d - ref| / sum_k |a_ik b_kj|
  long long first_wrong;              // i + j*M of the first wrong entry seen, -1 if none
};

void check_gemm(const GemmCheckArgs& args, GemmCheckTally* tally, cudaStream_t stream);

// The check of a GEMM of type t and shape `shape` on A, B and D: its element types
// (gemm_type_info) and tolerance (gemm_tolerance); `entries` of them (0: every entry of outputs
// up to kGemmCheckAllLimit, else kGemmCheckSamples seeded ones), seed 7. Inline, for the
// modules: the kernels themselves take no host code of the core.
inline GemmCheckArgs gemm_check_args(GemmDtype t, const GemmShape& shape, const void* a,
                                     const void* b, const void* d, std::uint64_t entries = 0) {
  const GemmTypeInfo& info = gemm_type_info(t);
  GemmCheckArgs args;
  args.a_type = info.a;
  args.b_type = info.b;
  args.d_type = info.d;
  args.shape = shape;
  args.tolerance = gemm_tolerance(t);
  args.a = a;
  args.b = b;
  args.d = d;
  const auto all = static_cast<std::uint64_t>(shape.m) * static_cast<std::uint64_t>(shape.n);
  args.all = entries == 0 ? all <= kGemmCheckAllLimit : entries == all;
  args.entries = entries != 0 ? entries : args.all ? all : kGemmCheckSamples;
  args.seed = 7;
  return args;
}

// check_gemm on `tally` zeroed first, waited for: what it found (the host's copy).
GemmCheckTally check_gemm_now(const GemmCheckArgs& args, GemmCheckTally* tally,
                              cudaStream_t stream);


}  // namespace gpubench
