#pragma once
// Burn-in kernels' launchers (stress): memory-test patterns written over a region and read back
// with the bit errors counted, outputs compared bit for bit with a golden copy, and an
// order-independent hash of a buffer to compare GPUs' outputs. The pattern formula is shared by
// the kernels and the host tests, so both compute the same words. Kernels in memtest.cu.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpubench/kernels/memory.cuh"

namespace gpubench {

// The memory-test patterns, each over 64-bit words. Moving inversions writes the seeded random
// words, then reads each and writes its complement in the same pass, then reads the complements:
// a cell that holds one value but not the other shows on one of the two reads.
enum class MemPattern : int { WalkingOnes, WalkingZeros, OwnAddress, Random, MovingInversions };
inline constexpr MemPattern kMemPatterns[] = {MemPattern::WalkingOnes, MemPattern::WalkingZeros,
                                              MemPattern::OwnAddress, MemPattern::Random,
                                              MemPattern::MovingInversions};
inline constexpr int kMemPatternCount = 5;

inline const char* to_string(MemPattern p) {
  switch (p) {
    case MemPattern::WalkingOnes:
      return "walking_ones";
    case MemPattern::WalkingZeros:
      return "walking_zeros";
    case MemPattern::OwnAddress:
      return "own_address";
    case MemPattern::Random:
      return "random";
    case MemPattern::MovingInversions:
      return "moving_inversions";
  }
  return "?";
}

// Word `i` of pattern `p` in pass `pass` of a region whose first word is at byte address `base`:
// walking ones sets bit (i + pass) % 64 alone, walking zeros clears it alone (so each pass moves
// the bit and every bit of every word is exercised over 64 passes), own address is the word's
// byte address, random (and moving inversions' first write) a hash of seed, pass and index.
GPB_HOST_DEVICE inline std::uint64_t mem_pattern_word(MemPattern p, std::uint64_t pass,
                                                      std::uint64_t seed, std::uint64_t base,
                                                      std::uint64_t i) {
  switch (p) {
    case MemPattern::WalkingOnes:
      return 1ull << ((i + pass) & 63u);
    case MemPattern::WalkingZeros:
      return ~(1ull << ((i + pass) & 63u));
    case MemPattern::OwnAddress:
      return base + 8 * i;
    case MemPattern::Random:
    case MemPattern::MovingInversions:
      return mix64(mix64(seed ^ (pass * 0x9E3779B97F4A7C15ull)) ^ (i * 0xD1B54A32D192ED03ull));
  }
  return 0;
}

// The wrong words a check records, first come first kept.
inline constexpr unsigned kMemtestRecorded = 8;
struct MemtestWrongWord {
  unsigned long long index, expected, got;
};

// Device-side tallies of memory checks (zero them before a check; checks add to them).
struct MemtestTally {
  unsigned long long words_wrong;
  unsigned long long bit_errors;
  unsigned int recorded;  // entries of `wrong` filled: min(this, kMemtestRecorded)
  MemtestWrongWord wrong[kMemtestRecorded];
};

// Writes pattern `p` (pass, seed) over `words` 64-bit words of `buf` (its own address is `buf`).
void launch_memtest_fill(std::uint64_t* buf, std::size_t words, MemPattern p, std::uint64_t pass,
                         std::uint64_t seed, cudaStream_t stream);
// Reads `words` words of `buf` against pattern `p` (its complement when `inverted`) and adds the
// words that differ, their bit errors and the first few of them to `tally`. With `write_inverse`
// each word's expected value's complement is written back after it is read (moving inversions).
void launch_memtest_check(std::uint64_t* buf, std::size_t words, MemPattern p, std::uint64_t pass,
                          std::uint64_t seed, bool inverted, bool write_inverse,
                          MemtestTally* tally, cudaStream_t stream);

// Bit-for-bit comparison of `count` elements of `element_bytes` (1, 2, 4 or 8) bytes.
inline constexpr unsigned kCompareRecorded = 8;
struct CompareTally {
  unsigned long long mismatched;  // elements that differ
  unsigned long long first;       // lowest index of one that differs (~0ull when none)
  unsigned int recorded;          // entries of `at` filled: min(this, kCompareRecorded)
  unsigned long long at[kCompareRecorded];  // indices of elements that differ, first come
};
// Zeroes `tally` and sets `first` to ~0ull, on `stream`.
void launch_compare_reset(CompareTally* tally, cudaStream_t stream);
// Adds to `tally` the elements of `out` that differ from `golden` in any bit.
void launch_compare_bits(const void* out, const void* golden, std::size_t count,
                         int element_bytes, CompareTally* tally, cudaStream_t stream);

// *hash (zero it first) += a hash of `bytes` of `buf` (a multiple of 8): the sum over its 64-bit
// words of a mix of each word with its index. Integer sums do not depend on order, so the same
// data gives the same hash on any GPU and any launch shape; one changed bit changes it.
void launch_buffer_hash(const void* buf, std::size_t bytes, unsigned long long* hash,
                        cudaStream_t stream);

}  // namespace gpubench
