#pragma once
// Internals of the collective data kernels: element types (conversions, poison, exact ranges),
// the value formula of every rank's input and the expected output of each collective. Host- and
// device-compilable: collectives.cu runs it on the GPU, the unit tests replay NCCL's arithmetic
// against it on the host. Not for modules.
//
// Why the results are exact: every input is a small integer and the data of each reduction is
// chosen so that each partial result, in any order or grouping, is an integer within the range
// the type holds exactly (floats: 2^(mantissa+1); integers: below the type's maximum, so sums
// never wrap). sum and integer avg: values 1..m with m x nranks within that range (sparse 0/1
// values when nranks exceeds it; mulsum the same within half the range, its scalars being 1 or
// 2); prod: 1s with at most two 2s per element (product <= 4);
// min/max: 1..16. Float avg is the one case NCCL rounds: it multiplies each input by 1/n rounded
// to the type (ncclDevPreMulSum) or the exact sum by 1/n (symmetric kernels' SumPostDiv). Its
// data is "two-hot": per element at most two ranks hold a power of two (1, 2 or 4), the others 0,
// so the products are exact and only the 1/n scalar and the one addition of the two terms
// round: |got - exact| <= (e + 2u) |exact| with e the scalar's rounding error and u the type's
// unit roundoff (at least 3u), plus the smallest subnormal where fp8 results at large n leave
// the normal range. Integer avg is NCCL's exact (non-wrapping) sum divided by n, truncated
// (SumPostDiv), which the check reproduces exactly.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "gpubench/kernels/collectives.cuh"
#include "gpubench/kernels/memory.cuh"  // mix64, GPB_HOST_DEVICE

namespace gpubench {
namespace {

// ---------------------------------------------------------------------------------------------
// Element types: conversions of the (small, exact) values, and the poison

template <class T, class Bits>
GPB_HOST_DEVICE inline T from_bits(Bits bits) {
  static_assert(sizeof(T) == sizeof(Bits), "same size");
  T x;
  memcpy(&x, &bits, sizeof(T));
  return x;
}

template <class T>
struct IntElem {
  static GPB_HOST_DEVICE T from_double(double v) { return static_cast<T>(v); }
  static GPB_HOST_DEVICE double to_double(T x) { return static_cast<double>(x); }
};

template <class T>
struct Elem;
template <>
struct Elem<std::int8_t> : IntElem<std::int8_t> {
  static GPB_HOST_DEVICE std::int8_t poison() { return INT8_MAX; }
};
template <>
struct Elem<std::uint8_t> : IntElem<std::uint8_t> {
  static GPB_HOST_DEVICE std::uint8_t poison() { return UINT8_MAX; }
};
template <>
struct Elem<std::int32_t> : IntElem<std::int32_t> {
  static GPB_HOST_DEVICE std::int32_t poison() { return INT32_MAX; }
};
template <>
struct Elem<std::uint32_t> : IntElem<std::uint32_t> {
  static GPB_HOST_DEVICE std::uint32_t poison() { return UINT32_MAX; }
};
template <>
struct Elem<std::int64_t> : IntElem<std::int64_t> {
  static GPB_HOST_DEVICE std::int64_t poison() { return INT64_MAX; }
};
template <>
struct Elem<std::uint64_t> : IntElem<std::uint64_t> {
  static GPB_HOST_DEVICE std::uint64_t poison() { return UINT64_MAX; }
};
template <>
struct Elem<float> {
  static GPB_HOST_DEVICE float from_double(double v) { return static_cast<float>(v); }
  static GPB_HOST_DEVICE double to_double(float x) { return static_cast<double>(x); }
  static GPB_HOST_DEVICE float poison() { return from_bits<float>(0x7FC00000u); }
};
template <>
struct Elem<double> {
  static GPB_HOST_DEVICE double from_double(double v) { return v; }
  static GPB_HOST_DEVICE double to_double(double x) { return x; }
  static GPB_HOST_DEVICE double poison() { return from_bits<double>(0x7FF8000000000000ull); }
};
template <>
struct Elem<__half> {
  static GPB_HOST_DEVICE __half from_double(double v) {
    return __float2half_rn(static_cast<float>(v));
  }
  static GPB_HOST_DEVICE double to_double(__half x) { return __half2float(x); }
  static GPB_HOST_DEVICE __half poison() {
    __half_raw raw;
    raw.x = 0x7E00;
    return __half(raw);
  }
};
template <>
struct Elem<__nv_bfloat16> {
  static GPB_HOST_DEVICE __nv_bfloat16 from_double(double v) {
    return __float2bfloat16_rn(static_cast<float>(v));
  }
  static GPB_HOST_DEVICE double to_double(__nv_bfloat16 x) { return __bfloat162float(x); }
  static GPB_HOST_DEVICE __nv_bfloat16 poison() {
    __nv_bfloat16_raw raw;
    raw.x = 0x7FC0;
    return __nv_bfloat16(raw);
  }
};
template <>
struct Elem<__nv_fp8_e4m3> {
  static GPB_HOST_DEVICE __nv_fp8_e4m3 from_double(double v) {
    return __nv_fp8_e4m3(static_cast<float>(v));
  }
  static GPB_HOST_DEVICE double to_double(__nv_fp8_e4m3 x) { return static_cast<float>(x); }
  static GPB_HOST_DEVICE __nv_fp8_e4m3 poison() {
    __nv_fp8_e4m3 x;
    x.__x = 0x7F;  // S.1111.111: the only NaN encoding of e4m3
    return x;
  }
};
template <>
struct Elem<__nv_fp8_e5m2> {
  static GPB_HOST_DEVICE __nv_fp8_e5m2 from_double(double v) {
    return __nv_fp8_e5m2(static_cast<float>(v));
  }
  static GPB_HOST_DEVICE double to_double(__nv_fp8_e5m2 x) { return static_cast<float>(x); }
  static GPB_HOST_DEVICE __nv_fp8_e5m2 poison() {
    __nv_fp8_e5m2 x;
    x.__x = 0x7F;  // S.11111.11: a NaN
    return x;
  }
};

// Calls f(static_cast<T*>(nullptr)) with the C++ type of `elem`.
template <class F>
inline void with_elem_type(CollectiveElem elem, F&& f) {
  switch (elem) {
    case CollectiveElem::Int8:
      return f(static_cast<std::int8_t*>(nullptr));
    case CollectiveElem::Uint8:
      return f(static_cast<std::uint8_t*>(nullptr));
    case CollectiveElem::Int32:
      return f(static_cast<std::int32_t*>(nullptr));
    case CollectiveElem::Uint32:
      return f(static_cast<std::uint32_t*>(nullptr));
    case CollectiveElem::Int64:
      return f(static_cast<std::int64_t*>(nullptr));
    case CollectiveElem::Uint64:
      return f(static_cast<std::uint64_t*>(nullptr));
    case CollectiveElem::Fp16:
      return f(static_cast<__half*>(nullptr));
    case CollectiveElem::Bf16:
      return f(static_cast<__nv_bfloat16*>(nullptr));
    case CollectiveElem::Fp32:
      return f(static_cast<float*>(nullptr));
    case CollectiveElem::Fp64:
      return f(static_cast<double*>(nullptr));
    case CollectiveElem::Fp8E4M3:
      return f(static_cast<__nv_fp8_e4m3*>(nullptr));
    case CollectiveElem::Fp8E5M2:
      return f(static_cast<__nv_fp8_e5m2*>(nullptr));
  }
}

inline bool is_floating(CollectiveElem elem) {
  switch (elem) {
    case CollectiveElem::Fp16:
    case CollectiveElem::Bf16:
    case CollectiveElem::Fp32:
    case CollectiveElem::Fp64:
    case CollectiveElem::Fp8E4M3:
    case CollectiveElem::Fp8E5M2:
      return true;
    default:
      return false;
  }
}

// Largest integer up to which every integer is exact in the type and, for integer types, stays
// below the poison (the type's maximum). Sums are kept within it.
inline std::uint64_t exact_integer_limit(CollectiveElem elem) {
  switch (elem) {
    case CollectiveElem::Int8:
      return 126;
    case CollectiveElem::Uint8:
      return 254;
    case CollectiveElem::Fp8E5M2:
      return 8;  // 3 significant bits
    case CollectiveElem::Fp8E4M3:
      return 16;  // 4
    case CollectiveElem::Bf16:
      return 256;  // 8
    case CollectiveElem::Fp16:
      return 2048;  // 11
    case CollectiveElem::Fp32:
      return 1ull << 24;
    default:  // 32- and 64-bit integers, fp64: far beyond any sum of small values
      return 1ull << 30;
  }
}

// Unit roundoff 2^-(significant bits) of a float type.
inline double unit_roundoff(CollectiveElem elem) {
  switch (elem) {
    case CollectiveElem::Fp8E5M2:
      return 0.125;
    case CollectiveElem::Fp8E4M3:
      return 0.0625;
    case CollectiveElem::Bf16:
      return 1.0 / 256;
    case CollectiveElem::Fp16:
      return 1.0 / 2048;
    case CollectiveElem::Fp32:
      return 1.0 / 16777216.0;
    case CollectiveElem::Fp64:
      return 1.0 / 9007199254740992.0;
    default:
      return 0;
  }
}

// Smallest positive (subnormal) value of a float type.
inline double smallest_subnormal(CollectiveElem elem) {
  switch (elem) {
    case CollectiveElem::Fp8E5M2:
      return std::ldexp(1.0, -16);
    case CollectiveElem::Fp8E4M3:
      return std::ldexp(1.0, -9);
    case CollectiveElem::Bf16:
      return std::ldexp(1.0, -133);
    case CollectiveElem::Fp16:
      return std::ldexp(1.0, -24);
    case CollectiveElem::Fp32:
      return std::ldexp(1.0, -149);
    case CollectiveElem::Fp64:
      return std::ldexp(1.0, -1074);
    default:
      return 0;
  }
}

// ---------------------------------------------------------------------------------------------
// The value formula

// Which family of values a rank's input holds (see the file comment).
enum class Scheme { Copy, Dense, MinMax, Prod, TwoHot };

inline bool layout_reduces(CollectiveLayout l) {
  return l == CollectiveLayout::AllReduce || l == CollectiveLayout::ReduceScatter ||
         l == CollectiveLayout::Reduce;
}

// Everything a kernel needs, computed once on the host.
struct Plan {
  CollectiveLayout layout;
  CollectiveReduction reduction;
  Scheme scheme;
  bool floating;
  int rank, nranks, root;
  std::size_t count;
  std::uint64_t seed;
  std::uint64_t dense_max;    // dense values are 1..dense_max; 0: sparse 0/1 values
  std::uint64_t dense_limit;  // sparse: at most this many ranks hold a 1 per element
  double tolerance;           // relative; 0 = exact
  double abs_tolerance;       // added to it: rounding in the subnormal range (fp8, large n)
  // alltoallv: elements rank i sends rank (i + d) mod n, by distance d (the split depends on
  // the distance only, so every rank's sends and receives use the same table).
  std::uint64_t peer_elems[kMaxAlltoallvRanks];
};

inline Plan make_plan(const CollectiveData& d) {
  Plan p{};
  p.layout = d.layout;
  p.reduction = d.reduction;
  p.floating = is_floating(d.elem);
  p.rank = d.rank;
  p.nranks = std::max(d.nranks, 1);
  p.root = d.root;
  p.count = d.count;
  p.seed = d.seed;
  p.dense_limit = exact_integer_limit(d.elem);
  p.dense_max = std::min<std::uint64_t>(4, p.dense_limit / static_cast<std::uint64_t>(p.nranks));
  if (!layout_reduces(d.layout)) {
    p.scheme = Scheme::Copy;
  } else {
    switch (d.reduction) {
      case CollectiveReduction::Sum:
        p.scheme = Scheme::Dense;
        break;
      case CollectiveReduction::MulSum:  // sums of values up to twice as large
        p.scheme = Scheme::Dense;
        p.dense_limit /= 2;
        p.dense_max = std::min<std::uint64_t>(4, p.dense_limit / static_cast<std::uint64_t>(p.nranks));
        break;
      case CollectiveReduction::Avg:
        p.scheme = p.floating ? Scheme::TwoHot : Scheme::Dense;
        break;
      case CollectiveReduction::Prod:
        p.scheme = Scheme::Prod;
        break;
      case CollectiveReduction::Min:
      case CollectiveReduction::Max:
        p.scheme = Scheme::MinMax;
        break;
    }
  }
  p.tolerance = collective_tolerance(d);
  p.abs_tolerance = p.tolerance > 0 ? smallest_subnormal(d.elem) : 0;
  if (d.layout == CollectiveLayout::AllToAllV)
    for (int k = 0; k < p.nranks && k < kMaxAlltoallvRanks; ++k)
      p.peer_elems[k] = collective_alltoallv_elems(d.count, collective_elem_bytes(d.elem),
                                                   p.nranks, d.skew, k);
  return p;
}

// Per-rank key and per-(rank, element) hash; a rank-independent hash per element picks the
// ranks that hold the special values of the sparse, prod and two-hot schemes.
GPB_HOST_DEVICE inline std::uint64_t rank_key(std::uint64_t seed, int r) {
  return mix64(seed ^ ((static_cast<std::uint64_t>(r) + 1) * 0x9E3779B97F4A7C15ull));
}
GPB_HOST_DEVICE inline std::uint64_t element_hash(std::uint64_t key, std::uint64_t i) {
  return mix64(key ^ (i * 0xD1B54A32D192ED03ull));
}
GPB_HOST_DEVICE inline std::uint64_t shared_hash(std::uint64_t seed, std::uint64_t i) {
  return element_hash(mix64(~seed), i);
}

// Input of rank r at element i of its send buffer; `shared` = shared_hash(seed, i).
GPB_HOST_DEVICE inline double input_value(const Plan& p, int r, std::uint64_t i,
                                          std::uint64_t shared) {
  const auto n = static_cast<std::uint64_t>(p.nranks);
  const auto ur = static_cast<std::uint64_t>(r);
  const std::uint64_t a = shared % n, b = (shared >> 32) % n;
  switch (p.scheme) {
    case Scheme::Copy:
      return static_cast<double>(1 + element_hash(rank_key(p.seed, r), i) % 64);
    case Scheme::MinMax:
      return static_cast<double>(1 + element_hash(rank_key(p.seed, r), i) % 16);
    case Scheme::Dense:
      if (p.dense_max >= 1)
        return static_cast<double>(1 + element_hash(rank_key(p.seed, r), i) % p.dense_max);
      // More ranks than exact integers: a window of dense_limit ranks from a holds 1s.
      return ((ur + n - a) % n) < p.dense_limit ? 1.0 : 0.0;
    case Scheme::Prod:
      return (ur == a || ur == b) ? 2.0 : 1.0;
    case Scheme::TwoHot:
      if (ur == a) return static_cast<double>(1u << ((shared >> 8) % 3));
      if (ur == b) return static_cast<double>(1u << ((shared >> 16) % 3));
      return 0.0;
  }
  return 0.0;
}

// The value as stored in T, read back.
template <class T>
GPB_HOST_DEVICE inline double stored(double v) {
  return Elem<T>::to_double(Elem<T>::from_double(v));
}

// Expected output element j of this rank.
template <class T>
GPB_HOST_DEVICE double expected_value(const Plan& p, std::size_t j) {
  const int n = p.nranks;
  std::uint64_t idx = j;
  int src = 0;
  switch (p.layout) {
    case CollectiveLayout::AllReduce:
    case CollectiveLayout::Reduce:
      src = -1;
      break;
    case CollectiveLayout::ReduceScatter:
      src = -1;
      idx = static_cast<std::uint64_t>(p.rank) * p.count + j;
      break;
    case CollectiveLayout::AllGather:
      src = static_cast<int>(j / p.count);
      idx = j % p.count;
      break;
    case CollectiveLayout::Broadcast:
      src = p.root;
      break;
    case CollectiveLayout::AllToAll:
      src = static_cast<int>(j / p.count);
      idx = static_cast<std::uint64_t>(p.rank) * p.count + j % p.count;
      break;
    case CollectiveLayout::SendRecv:
      src = (p.rank - 1 + n) % n;
      break;
    case CollectiveLayout::Gather:  // at the root: slice r is rank r's input
      src = static_cast<int>(j / p.count);
      idx = j % p.count;
      break;
    case CollectiveLayout::Scatter:  // slice `rank` of the root's input
      src = p.root;
      idx = static_cast<std::uint64_t>(p.rank) * p.count + j;
      break;
    case CollectiveLayout::AllToAllV: {
      // The output holds each source's segment in rank order; a segment is the part of the
      // source's input it addressed to this rank, after its parts for lower ranks.
      std::uint64_t rest = j;
      for (src = 0; src < n; ++src) {
        const std::uint64_t seg = p.peer_elems[(p.rank - src + n) % n];
        if (rest < seg) break;
        rest -= seg;
      }
      idx = rest;
      for (int k = 0; k < p.rank; ++k) idx += p.peer_elems[(k - src + n) % n];
      break;
    }
  }
  const std::uint64_t shared = shared_hash(p.seed, idx);
  if (src >= 0) return stored<T>(input_value(p, src, idx, shared));

  // MulSum: each input times its rank's scalar (1 or 2: exact), then summed.
  const auto term = [&](int r) {
    const double x = stored<T>(input_value(p, r, idx, shared));
    return p.reduction == CollectiveReduction::MulSum ? x * collective_mulsum_scalar(r) : x;
  };
  double acc = term(0);
  for (int r = 1; r < n; ++r) {
    const double x = term(r);
    switch (p.reduction) {
      case CollectiveReduction::Sum:
      case CollectiveReduction::Avg:
      case CollectiveReduction::MulSum:
        acc += x;
        break;
      case CollectiveReduction::Prod:
        acc *= x;
        break;
      case CollectiveReduction::Min:
        acc = x < acc ? x : acc;
        break;
      case CollectiveReduction::Max:
        acc = x > acc ? x : acc;
        break;
    }
  }
  if (p.reduction == CollectiveReduction::Avg) {
    if (p.floating) return acc / n;
    // Integers: NCCL's sum divided by n, truncated; the sum is a non-negative exact integer.
    return static_cast<double>(static_cast<std::uint64_t>(acc) / static_cast<std::uint64_t>(n));
  }
  return acc;
}

// Whether an output element matches; written so that a NaN (the float poison) never does.
GPB_HOST_DEVICE inline bool output_ok(double got, double want, const Plan& p) {
  if (p.tolerance > 0) return fabs(got - want) <= p.tolerance * fabs(want) + p.abs_tolerance;
  return got == want;
}

}  // namespace
}  // namespace gpubench
