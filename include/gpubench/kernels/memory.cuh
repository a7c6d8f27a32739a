#pragma once
// Memory kernels' launchers: STREAM (copy, scale, add, triad, dot, read, write) with 16-byte
// accesses, seeded init and on-device checks, pattern fill/check for verifying transfers, an SM
// copy that works on peer and mapped host pointers, and a one-thread pointer chase for latency.
// Host-includable: the kernels live in memory.cu (STREAM) and memory_copy.cu (transfers, chase);
// the value formulas below are shared by the kernels, the host checks and the tests, so every
// side computes the same expected data.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <limits>

#include "gpubench/core/cuda.hpp"

#if defined(__CUDACC__)
#define GPB_HOST_DEVICE __host__ __device__
#else
#define GPB_HOST_DEVICE
#endif

namespace gpubench {

// ---------------------------------------------------------------------------------------------
// Deterministic data

// splitmix64's finalizer: a cheap, well-mixed hash of a 64-bit value.
GPB_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Word `i` of the verification pattern with `seed`. Byte j of a pattern buffer is byte j % 4
// (little-endian) of pattern_word(seed, j / 4), so a buffer of any length has one pattern.
GPB_HOST_DEVICE inline std::uint32_t pattern_word(std::uint64_t seed, std::uint64_t i) {
  return static_cast<std::uint32_t>(mix64(mix64(seed) ^ (i * 0xD1B54A32D192ED03ull)) >> 16);
}

// Element `i` of a STREAM array initialised with `seed`: pseudo-random in [1, 2), exactly
// representable, never zero. Positive values keep the dot/read sums well conditioned.
template <class T>
GPB_HOST_DEVICE inline T init_value(std::uint64_t seed, std::uint64_t i);
template <>
GPB_HOST_DEVICE inline float init_value<float>(std::uint64_t seed, std::uint64_t i) {
  const std::uint64_t h = mix64(seed ^ mix64(i));
  return 1.0f + static_cast<float>(h >> 41) * (1.0f / 8388608.0f);  // 23 random mantissa bits
}
template <>
GPB_HOST_DEVICE inline double init_value<double>(std::uint64_t seed, std::uint64_t i) {
  const std::uint64_t h = mix64(seed ^ mix64(i));
  return 1.0 + static_cast<double>(h >> 12) * (1.0 / 4503599627370496.0);  // 52 bits
}

// ---------------------------------------------------------------------------------------------
// STREAM kernels: what each computes, which array it writes, and how many array-bytes it moves

enum class StreamOp { Copy, Scale, Add, Triad, Dot, Read, Write };

// c = a; b = s*c; c = a + b; a = b + s*c; sum a*b; sum a; c = w.
inline constexpr StreamOp kStreamOps[] = {StreamOp::Copy,  StreamOp::Scale, StreamOp::Add,
                                          StreamOp::Triad, StreamOp::Dot,   StreamOp::Read,
                                          StreamOp::Write};

inline const char* to_string(StreamOp op) {
  switch (op) {
    case StreamOp::Copy:
      return "copy";
    case StreamOp::Scale:
      return "scale";
    case StreamOp::Add:
      return "add";
    case StreamOp::Triad:
      return "triad";
    case StreamOp::Dot:
      return "dot";
    case StreamOp::Read:
      return "read";
    case StreamOp::Write:
      return "write";
  }
  return "?";
}

// Arrays read plus arrays written per element (bytes moved = this x n x sizeof(T)).
constexpr int stream_arrays_moved(StreamOp op) {
  switch (op) {
    case StreamOp::Copy:
      return 2;
    case StreamOp::Scale:
      return 2;
    case StreamOp::Add:
      return 3;
    case StreamOp::Triad:
      return 3;
    case StreamOp::Dot:
      return 2;
    case StreamOp::Read:
      return 1;
    case StreamOp::Write:
      return 1;
  }
  return 0;
}

// The array an element-wise op writes: 0 = a, 1 = b, 2 = c; -1 for the reductions (dot, read).
constexpr int stream_output_array(StreamOp op) {
  switch (op) {
    case StreamOp::Copy:
      return 2;
    case StreamOp::Scale:
      return 1;
    case StreamOp::Add:
      return 2;
    case StreamOp::Triad:
      return 0;
    case StreamOp::Write:
      return 2;
    case StreamOp::Dot:
    case StreamOp::Read:
      return -1;
  }
  return -1;
}

constexpr bool stream_is_reduction(StreamOp op) {
  return op == StreamOp::Dot || op == StreamOp::Read;
}

// BabelStream's scalar; the write kernel's value lies outside [1, 2) so a skipped store shows.
template <class T>
GPB_HOST_DEVICE constexpr T stream_scalar() {
  return T(0.4);
}
template <class T>
GPB_HOST_DEVICE constexpr T stream_fill_value() {
  return T(0.75);
}

// Relative tolerance of an element-wise result: triad may or may not be fused into one FMA.
template <class T>
constexpr double stream_tolerance() {
  return 4.0 * static_cast<double>(std::numeric_limits<T>::epsilon());
}
// Relative tolerance of dot/read against the double reference: both accumulate in double.
constexpr double kReductionTolerance = 1e-9;

struct StreamSeeds {
  std::uint64_t a = 0x5EED0A, b = 0x5EED0B, c = 0x5EED0C;
};

// The value an element-wise op leaves at index i when the arrays were initialised with `seeds`.
template <class T>
GPB_HOST_DEVICE inline T stream_expected(StreamOp op, const StreamSeeds& seeds, std::uint64_t i) {
  switch (op) {
    case StreamOp::Copy:
      return init_value<T>(seeds.a, i);
    case StreamOp::Scale:
      return stream_scalar<T>() * init_value<T>(seeds.c, i);
    case StreamOp::Add:
      return init_value<T>(seeds.a, i) + init_value<T>(seeds.b, i);
    case StreamOp::Triad:
      return init_value<T>(seeds.b, i) + stream_scalar<T>() * init_value<T>(seeds.c, i);
    case StreamOp::Write:
      return stream_fill_value<T>();
    default:
      return T(0);
  }
}

// True when `got` matches `expected` within the relative tolerance (false for NaN).
template <class T>
GPB_HOST_DEVICE inline bool stream_value_ok(T got, T expected) {
  const double diff = static_cast<double>(got) - static_cast<double>(expected);
  const double mag = static_cast<double>(expected) < 0 ? -static_cast<double>(expected)
                                                       : static_cast<double>(expected);
  const double adiff = diff < 0 ? -diff : diff;
  return adiff <= stream_tolerance<T>() * mag;
}

// Scratch for the single-pass reductions (dot, read) on one GPU: per-block partial sums, a
// completion counter (zero between launches) and the double result, in one allocation.
class ReduceWorkspace {
 public:
  explicit ReduceWorkspace(int device);
  double* result() const noexcept { return reinterpret_cast<double*>(buffer_.as<char>()); }
  unsigned int* counter() const noexcept {
    return reinterpret_cast<unsigned int*>(buffer_.as<char>() + 8);
  }
  double* partials() const noexcept { return reinterpret_cast<double*>(buffer_.as<char>() + 16); }
  int max_blocks() const noexcept { return max_blocks_; }
  int device() const noexcept { return buffer_.device(); }
  // Copies the last reduction's result to the host (synchronises `stream`).
  double read_result(cudaStream_t stream) const;

 private:
  DeviceBuffer buffer_;
  int max_blocks_ = 0;
};

// Launchers: the current device must be the stream's device; T is float or double. Pointers
// from cudaMalloc take the 16-byte path; other alignments fall back to element accesses.
template <class T>
void launch_stream_init(T* a, T* b, T* c, std::size_t n, const StreamSeeds& seeds,
                        cudaStream_t stream);
template <class T>
void launch_stream_copy(const T* a, T* c, std::size_t n, cudaStream_t stream);
template <class T>
void launch_stream_scale(const T* c, T* b, T scalar, std::size_t n, cudaStream_t stream);
template <class T>
void launch_stream_add(const T* a, const T* b, T* c, std::size_t n, cudaStream_t stream);
template <class T>
void launch_stream_triad(T* a, const T* b, const T* c, T scalar, std::size_t n,
                         cudaStream_t stream);
// sum a[i]*b[i] into ws.result() (double); one launch: the last block to finish adds the partials.
template <class T>
void launch_stream_dot(const T* a, const T* b, std::size_t n, const ReduceWorkspace& ws,
                       cudaStream_t stream);
// sum a[i] into ws.result() (double): the read-only kernel.
template <class T>
void launch_stream_read(const T* a, std::size_t n, const ReduceWorkspace& ws, cudaStream_t stream);
// c[i] = value: the write-only kernel.
template <class T>
void launch_stream_write(T* c, T value, std::size_t n, cudaStream_t stream);

// Counts elements of `out` that differ from stream_expected(op, seeds, i) into *mismatches
// (added to; zero it first). Element-wise ops only.
template <class T>
void launch_stream_check(StreamOp op, const T* out, std::size_t n, const StreamSeeds& seeds,
                         unsigned long long* mismatches, cudaStream_t stream);
// Reference for dot/read: *sum (zero it first) += sum of a[i]*b[i] (b == nullptr: a[i]) in
// double with per-block atomics, a different summation order from the timed kernels.
template <class T>
void launch_reference_sum(const T* a, const T* b, std::size_t n, double* sum, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Transfers

// Writes the pattern with `seed` over `bytes` of `dst` (device, peer or mapped host memory).
void launch_pattern_fill(void* dst, std::size_t bytes, std::uint64_t seed, cudaStream_t stream);
// Adds to *mismatches the number of 4-byte words of `buf` that differ from the pattern (a
// partial last word counts as one word).
void launch_pattern_check(const void* buf, std::size_t bytes, std::uint64_t seed,
                          unsigned long long* mismatches, cudaStream_t stream);

// Copies `bytes` from `src` to `dst` with a kernel on the current device (16-byte accesses when
// both are 16-byte aligned, any tail handled). Either side may be a peer GPU's memory or mapped
// host memory: this is the SM-driven copy, as opposed to the copy engines of cudaMemcpy.
void launch_sm_copy(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Latency

// One thread follows `hops` dependent 8-byte loads starting at `start` (each slot holds the
// address of the next slot; L1 is bypassed), then writes the final address to out[0] and the
// SM clock cycles the chase took to out[1]. Time it with events around the launch and divide by
// hops; `start` may be local, peer or mapped host memory.
void launch_pointer_chase(const void* start, std::uint64_t hops, std::uint64_t* out,
                          cudaStream_t stream);

// Multiprocessor count of the current device (launchers size their grids from it).
int current_device_sm_count();

}  // namespace gpubench
