// Seeded GEMM operands and the fp64 reference check of D = op(A) op(B).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>

#include "gpubench/kernels/gemm_check.cuh"
#include "gpubench/kernels/memory.cuh"

namespace gpubench {

namespace {

__device__ inline double uniform01(std::uint64_t seed, std::uint64_t i) {
  return static_cast<double>(mix64(mix64(seed) ^ (i * 0xD1B54A32D192ED03ull)) >> 11) * 0x1.0p-53;
}

// A standard normal value (Box-Muller; like torch.randn, so power-limited GPUs see the data
// frameworks feed them) with its magnitude kept in [lo, hi]: never zero, never a subnormal of
// the narrow types.
__device__ inline float normal_value(std::uint64_t seed, std::uint64_t i, float lo, float hi) {
  const double u1 = uniform01(seed, 2 * i) + 0x1.0p-54;  // (0, 1]
  const double u2 = uniform01(seed, 2 * i + 1);
  const double g = sqrt(-2.0 * log(u1)) * cospi(2.0 * u2);
  const double mag = fmin(fmax(fabs(g), static_cast<double>(lo)), static_cast<double>(hi));
  return static_cast<float>(g < 0 ? -mag : mag);
}

// Integer uniform in +-[1, hi].
__device__ inline float integer_value(std::uint64_t seed, std::uint64_t i, float hi) {
  const int n = static_cast<int>(hi);
  const int r = static_cast<int>(uniform01(seed, i) * 2 * n);  // 0 .. 2n-1
  return static_cast<float>(r < n ? -(r + 1) : r - n + 1);
}

template <class T>
__device__ inline T from_float(float v) {
  return static_cast<T>(v);
}
template <>
__device__ inline __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ inline __nv_fp8_e4m3 from_float<__nv_fp8_e4m3>(float v) {
  return __nv_fp8_e4m3(v);
}
template <>
__device__ inline __nv_fp8_e5m2 from_float<__nv_fp8_e5m2>(float v) {
  return __nv_fp8_e5m2(v);
}

template <class T>
__global__ void fill_kernel(T* data, std::size_t count, std::uint64_t seed, float lo, float hi,
                            bool integer) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    data[i] = from_float<T>(integer ? integer_value(seed, i, hi) : normal_value(seed, i, lo, hi));
  }
}

template <class T>
void launch_fill(void* data, std::size_t count, std::uint64_t seed, float lo, float hi,
                 bool integer, cudaStream_t stream) {
  const int threads = 256;
  const std::size_t blocks = std::min<std::size_t>((count + threads - 1) / threads, 65536);
  fill_kernel<T><<<static_cast<unsigned>(std::max<std::size_t>(blocks, 1)), threads, 0, stream>>>(
      static_cast<T*>(data), count, seed, lo, hi, integer);
  GPB_CHECK_LAUNCH();
}

__device__ inline double load(const void* p, GemmElement e, std::int64_t i) {
  switch (e) {
    case GemmElement::F64:
      return static_cast<const double*>(p)[i];
    case GemmElement::F32:
      return static_cast<const float*>(p)[i];
    case GemmElement::F16:
      return __half2float(static_cast<const __half*>(p)[i]);
    case GemmElement::BF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case GemmElement::E4M3:
      return static_cast<float>(static_cast<const __nv_fp8_e4m3*>(p)[i]);
    case GemmElement::E5M2:
      return static_cast<float>(static_cast<const __nv_fp8_e5m2*>(p)[i]);
    case GemmElement::I8:
      return static_cast<const std::int8_t*>(p)[i];
    case GemmElement::I32:
      return static_cast<const std::int32_t*>(p)[i];
  }
  return 0;
}

struct CheckParams {
  const void* a;
  const void* b;
  const void* d;
  GemmElement a_type, b_type, d_type;
  std::int64_t m, n, k;
  std::int64_t a_si, a_sk, b_sk, b_sj;  // op(A)(i,k) = A[i*a_si + k*a_sk], op(B)(k,j) likewise
  double eps_out, eps_acc;
  std::uint64_t entries;
  bool all;
  std::uint64_t seed;
};

__device__ inline void atomic_max_float(unsigned int* bits, float v) {
  atomicMax(bits, __float_as_uint(v));  // v >= 0: the bit patterns order like the values
}

// One warp per checked entry: the lanes split the K products, then lane 0 compares.
__global__ void check_kernel(CheckParams p, GemmCheckTally* tally) {
  const std::uint64_t warp =
      (blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= p.entries) return;
  std::int64_t i, j;
  if (p.all) {
    i = static_cast<std::int64_t>(warp % p.m);
    j = static_cast<std::int64_t>(warp / p.m);
  } else if (warp < 4) {  // the corners first
    i = (warp & 1) ? p.m - 1 : 0;
    j = (warp & 2) ? p.n - 1 : 0;
  } else {
    const std::uint64_t h = mix64(mix64(p.seed) ^ (warp * 0x9E3779B97F4A7C15ull));
    i = static_cast<std::int64_t>(h % p.m);
    j = static_cast<std::int64_t>((h >> 32) % p.n);
  }
  double sum = 0, abs_sum = 0;
  for (std::int64_t kk = lane; kk < p.k; kk += 32) {
    const double prod = load(p.a, p.a_type, i * p.a_si + kk * p.a_sk) *
                        load(p.b, p.b_type, kk * p.b_sk + j * p.b_sj);
    sum += prod;
    abs_sum += fabs(prod);
  }
  for (int off = 16; off > 0; off /= 2) {
    sum += __shfl_down_sync(0xffffffffu, sum, off);
    abs_sum += __shfl_down_sync(0xffffffffu, abs_sum, off);
  }
  if (lane != 0) return;
  const double got = load(p.d, p.d_type, i + j * p.m);
  const double err = fabs(got - sum);
  const double tol = p.eps_out * fabs(sum) + p.eps_acc * abs_sum;
  atomicAdd(&tally->checked, 1ull);
  const bool bad = !(err <= tol);  // NaN counts as wrong
  if (bad) {
    if (atomicAdd(&tally->wrong, 1ull) == 0) tally->first_wrong = i + j * p.m;
  }
  const float ratio = tol > 0 ? static_cast<float>(err / tol) : (err > 0 ? 1e30f : 0.0f);
  atomic_max_float(&tally->max_error_ratio_bits, isnan(ratio) ? 1e30f : ratio);
  const float rel = abs_sum > 0 ? static_cast<float>(err / abs_sum) : 0.0f;
  atomic_max_float(&tally->max_rel_error_bits, isnan(rel) ? 1e30f : rel);
}

}  // namespace

void fill_gemm_operand(void* data, GemmElement e, std::size_t count, std::uint64_t seed,
                       cudaStream_t stream) {
  const float lo = 1.0f / 64, hi = 4.0f;
  switch (e) {
    case GemmElement::F64:
      return launch_fill<double>(data, count, seed, lo, hi, false, stream);
    case GemmElement::F32:
      return launch_fill<float>(data, count, seed, lo, hi, false, stream);
    case GemmElement::F16:
      return launch_fill<__half>(data, count, seed, lo, hi, false, stream);
    case GemmElement::BF16:
      return launch_fill<__nv_bfloat16>(data, count, seed, lo, hi, false, stream);
    case GemmElement::E4M3:
      return launch_fill<__nv_fp8_e4m3>(data, count, seed, lo, hi, false, stream);
    case GemmElement::E5M2:
      return launch_fill<__nv_fp8_e5m2>(data, count, seed, lo, hi, false, stream);
    case GemmElement::I8:
      return launch_fill<std::int8_t>(data, count, seed, 1.0f, 7.0f, true, stream);
    case GemmElement::I32:
      return launch_fill<std::int32_t>(data, count, seed, 1.0f, 7.0f, true, stream);
  }
}

void check_gemm(const GemmCheckArgs& args, GemmCheckTally* tally, cudaStream_t stream) {
  const GemmShape& s = args.shape;
  CheckParams p{};
  p.a = args.a;
  p.b = args.b;
  p.d = args.d;
  p.a_type = args.a_type;
  p.b_type = args.b_type;
  p.d_type = args.d_type;
  p.m = s.m;
  p.n = s.n;
  p.k = s.k;
  // Column-major storage: A is K x M when transposed (lda = K), else M x K (lda = M).
  p.a_si = s.trans_a ? s.k : 1;
  p.a_sk = s.trans_a ? 1 : s.m;
  p.b_sk = s.trans_b ? s.n : 1;
  p.b_sj = s.trans_b ? 1 : s.k;
  p.eps_out = args.tolerance.eps_out;
  p.eps_acc = args.tolerance.eps_acc;
  p.entries = args.entries;
  p.all = args.all;
  p.seed = args.seed;
  const int threads = 256;
  const std::uint64_t blocks = (args.entries * 32 + threads - 1) / threads;
  if (blocks == 0) return;
  check_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(p, tally);
  GPB_CHECK_LAUNCH();
}

GemmCheckTally check_gemm_now(const GemmCheckArgs& args, GemmCheckTally* tally,
                              cudaStream_t stream) {
  GemmCheckTally zero{};
  zero.first_wrong = -1;
  GPB_CUDA_CHECK(cudaMemcpyAsync(tally, &zero, sizeof zero, cudaMemcpyHostToDevice, stream));
  check_gemm(args, tally, stream);
  GemmCheckTally got{};
  GPB_CUDA_CHECK(cudaMemcpyAsync(&got, tally, sizeof got, cudaMemcpyDeviceToHost, stream));
  GPB_CUDA_CHECK(cudaStreamSynchronize(stream));
  return got;
}

}  // namespace gpubench
