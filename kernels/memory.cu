// STREAM kernels and their launchers: copy, scale, add, triad, write with 16-byte accesses, the
// dot/read reductions finished by the last block, seeded init and the on-device checks.
#include "gpubench/kernels/memory_common.cuh"

namespace gpubench {

namespace {

// ---------------------------------------------------------------------------------------------
// STREAM kernels

template <class T>
struct CopyOp {
  __device__ T operator()(T x, T) const { return x; }
};
template <class T>
struct ScaleOp {
  T s;
  __device__ T operator()(T x, T) const { return s * x; }
};
template <class T>
struct AddOp {
  __device__ T operator()(T x, T y) const { return x + y; }
};
template <class T>
struct TriadOp {
  T s;
  __device__ T operator()(T x, T y) const { return x + s * y; }
};
template <class T>
struct FillOp {
  T w;
  __device__ T operator()(T, T) const { return w; }
};

// out[i] = f(in0[i], in1[i]) with NIN inputs (0..2). One 16-byte vector per thread over an exact
// grid of 1024-thread blocks rather than a persistent grid-stride loop (measured faster on Hopper:
// docs/DECISIONS.md): every block issues its loads once and retires, keeping the memory system's
// queues full without loop overhead. The elements past the last whole vector go one per thread in
// the first threads.
constexpr int kElementwiseBlock = 1024;

template <class T, int L, int NIN, class F>
__global__ void __launch_bounds__(kElementwiseBlock)
    elementwise_kernel(T* __restrict__ out, const T* __restrict__ in0, const T* __restrict__ in1,
                       std::size_t n, F f) {
  const std::size_t nvec = n / L;
  const std::size_t j = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j < nvec) {
    T x[L] = {}, y[L] = {}, z[L];
    if constexpr (NIN >= 1) Access<T, L>::load(in0 + j * L, x);
    if constexpr (NIN >= 2) Access<T, L>::load(in1 + j * L, y);
#pragma unroll
    for (int l = 0; l < L; ++l) z[l] = f(x[l], y[l]);
    Access<T, L>::store(out + j * L, z);
  }
  const std::size_t i = nvec * L + j;
  if (i < n) {
    T xi = T(0), yi = T(0);
    if constexpr (NIN >= 1) xi = in0[i];
    if constexpr (NIN >= 2) yi = in1[i];
    out[i] = f(xi, yi);
  }
}

template <class T, int NIN, class F>
void launch_elementwise(T* out, const T* in0, const T* in1, std::size_t n, F f,
                        cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned16(out) && (NIN < 1 || aligned16(in0)) && (NIN < 2 || aligned16(in1));
  // Enough threads for every whole vector and for the leftover elements.
  const auto blocks_for = [](std::size_t items) {
    return static_cast<unsigned>(
        std::max<std::size_t>(1, (items + kElementwiseBlock - 1) / kElementwiseBlock));
  };
  if (vec) {
    constexpr int L = kLanes<T>;
    const std::size_t items = std::max(n / L, n % L);
    elementwise_kernel<T, L, NIN, F>
        <<<blocks_for(items), kElementwiseBlock, 0, stream>>>(out, in0, in1, n, f);
  } else {
    elementwise_kernel<T, 1, NIN, F>
        <<<blocks_for(n), kElementwiseBlock, 0, stream>>>(out, in0, in1, n, f);
  }
  GPB_CHECK_LAUNCH();
}

// sum of a[i]*b[i] (DOT) or a[i] in double. Each block writes its partial sum; the last block to
// finish (counted with an atomic after a fence) adds the partials in a fixed order, so the result
// is deterministic, then re-arms the counter for the next launch.
template <class T, int L, bool DOT>
__global__ void __launch_bounds__(kBlock)
    sum_kernel(const T* __restrict__ a, const T* __restrict__ b, std::size_t n, double* partials,
               unsigned int* counter, double* result) {
  __shared__ double warp_sums[kBlock / 32];
  __shared__ bool is_last;
  double acc[kUnroll] = {};
  const std::size_t nvec = n / L;
  const std::size_t tile = static_cast<std::size_t>(blockDim.x) * kUnroll;
  const std::size_t ntiles = nvec / tile;
  for (std::size_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
    const std::size_t base = t * tile + threadIdx.x;
    T x[kUnroll][L] = {}, y[kUnroll][L] = {};
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::size_t j = base + static_cast<std::size_t>(u) * blockDim.x;
      Access<T, L>::load(a + j * L, x[u]);
      if constexpr (DOT) Access<T, L>::load(b + j * L, y[u]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int l = 0; l < L; ++l) {
        if constexpr (DOT)
          acc[u] += static_cast<double>(x[u][l]) * static_cast<double>(y[u][l]);
        else
          acc[u] += static_cast<double>(x[u][l]);
      }
    }
  }
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t threads = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j = ntiles * tile + tid; j < nvec; j += threads) {
    T x[L] = {}, y[L] = {};
    Access<T, L>::load(a + j * L, x);
    if constexpr (DOT) Access<T, L>::load(b + j * L, y);
#pragma unroll
    for (int l = 0; l < L; ++l) {
      if constexpr (DOT)
        acc[1] += static_cast<double>(x[l]) * static_cast<double>(y[l]);
      else
        acc[1] += static_cast<double>(x[l]);
    }
  }
  const std::size_t i = nvec * L + tid;
  if (i < n) {
    if constexpr (DOT)
      acc[0] += static_cast<double>(a[i]) * static_cast<double>(b[i]);
    else
      acc[0] += static_cast<double>(a[i]);
  }
  double t = 0;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) t += acc[u];
  t = block_sum(t, warp_sums);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = t;
    __threadfence();  // the partial is visible device-wide before the counter says so
    is_last = atomicAdd(counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  double s = 0;
  for (unsigned k = threadIdx.x; k < gridDim.x; k += blockDim.x)
    s += __ldcg(partials + k);  // L2, not a stale L1
  __syncthreads();              // warp_sums is reused
  s = block_sum(s, warp_sums);
  if (threadIdx.x == 0) {
    *result = s;
    *counter = 0u;
  }
}

template <class T, bool DOT>
void launch_sum(const T* a, const T* b, std::size_t n, const ReduceWorkspace& ws,
                cudaStream_t stream) {
  const bool vec = aligned16(a) && (!DOT || aligned16(b));
  constexpr int L = kLanes<T>;
  unsigned grid = 0;
  if (vec) {
    auto kernel = sum_kernel<T, L, DOT>;
    grid = std::min<unsigned>(grid_for(kernel, n / L + 1, kBlock * kUnroll), ws.max_blocks());
    kernel<<<grid, kBlock, 0, stream>>>(a, b, n, ws.partials(), ws.counter(), ws.result());
  } else {
    auto kernel = sum_kernel<T, 1, DOT>;
    grid = std::min<unsigned>(grid_for(kernel, n + 1, kBlock * kUnroll), ws.max_blocks());
    kernel<<<grid, kBlock, 0, stream>>>(a, b, n, ws.partials(), ws.counter(), ws.result());
  }
  GPB_CHECK_LAUNCH();
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    init_kernel(T* a, T* b, T* c, std::size_t n, StreamSeeds seeds) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    a[i] = init_value<T>(seeds.a, i);
    b[i] = init_value<T>(seeds.b, i);
    c[i] = init_value<T>(seeds.c, i);
  }
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    stream_check_kernel(StreamOp op, const T* out, std::size_t n, StreamSeeds seeds,
                        unsigned long long* mismatches) {
  __shared__ unsigned long long warp_sums[kBlock / 32];
  unsigned long long bad = 0;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    if (!stream_value_ok<T>(out[i], stream_expected<T>(op, seeds, i))) ++bad;
  bad = block_sum(bad, warp_sums);
  if (threadIdx.x == 0 && bad != 0) atomicAdd(mismatches, bad);
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    reference_sum_kernel(const T* a, const T* b, std::size_t n, double* sum) {
  __shared__ double warp_sums[kBlock / 32];
  double acc = 0;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    acc += b ? static_cast<double>(a[i]) * static_cast<double>(b[i]) : static_cast<double>(a[i]);
  acc = block_sum(acc, warp_sums);
  if (threadIdx.x == 0) atomicAdd(sum, acc);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Launchers

int current_device_sm_count() {
  int device = 0, sms = 0;
  GPB_CUDA_CHECK(cudaGetDevice(&device));
  GPB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return std::max(sms, 1);
}

ReduceWorkspace::ReduceWorkspace(int device) {
  DeviceGuard guard(device);
  int sms = 0, threads_per_sm = 0;
  GPB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  GPB_CUDA_CHECK(
      cudaDeviceGetAttribute(&threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device));
  // Resident blocks can never exceed threads per SM / block size, so this bounds every grid.
  max_blocks_ = std::max(1, sms) * std::max(1, threads_per_sm / kBlock);
  buffer_ = DeviceBuffer(device, 16 + sizeof(double) * static_cast<std::size_t>(max_blocks_));
  // cudaMemset runs on the legacy stream, which the benchmark's non-blocking streams do not
  // wait for: finish it here so the counter is zero before any reduction reads it.
  GPB_CUDA_CHECK(cudaMemset(buffer_.get(), 0, buffer_.bytes()));
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
}

double ReduceWorkspace::read_result(cudaStream_t stream) const {
  double value = 0;
  GPB_CUDA_CHECK(cudaMemcpyAsync(&value, result(), sizeof(double), cudaMemcpyDeviceToHost, stream));
  GPB_CUDA_CHECK(cudaStreamSynchronize(stream));
  return value;
}

template <class T>
void launch_stream_init(T* a, T* b, T* c, std::size_t n, const StreamSeeds& seeds,
                        cudaStream_t stream) {
  if (n == 0) return;
  const unsigned grid = grid_for(init_kernel<T>, n, kBlock * 4);
  init_kernel<T><<<grid, kBlock, 0, stream>>>(a, b, c, n, seeds);
  GPB_CHECK_LAUNCH();
}

template <class T>
void launch_stream_copy(const T* a, T* c, std::size_t n, cudaStream_t stream) {
  launch_elementwise<T, 1>(c, a, static_cast<const T*>(nullptr), n, CopyOp<T>{}, stream);
}
template <class T>
void launch_stream_scale(const T* c, T* b, T scalar, std::size_t n, cudaStream_t stream) {
  launch_elementwise<T, 1>(b, c, static_cast<const T*>(nullptr), n, ScaleOp<T>{scalar}, stream);
}
template <class T>
void launch_stream_add(const T* a, const T* b, T* c, std::size_t n, cudaStream_t stream) {
  launch_elementwise<T, 2>(c, a, b, n, AddOp<T>{}, stream);
}
template <class T>
void launch_stream_triad(T* a, const T* b, const T* c, T scalar, std::size_t n,
                         cudaStream_t stream) {
  launch_elementwise<T, 2>(a, b, c, n, TriadOp<T>{scalar}, stream);
}
template <class T>
void launch_stream_write(T* c, T value, std::size_t n, cudaStream_t stream) {
  launch_elementwise<T, 0>(c, static_cast<const T*>(nullptr), static_cast<const T*>(nullptr), n,
                           FillOp<T>{value}, stream);
}
template <class T>
void launch_stream_dot(const T* a, const T* b, std::size_t n, const ReduceWorkspace& ws,
                       cudaStream_t stream) {
  launch_sum<T, true>(a, b, n, ws, stream);
}
template <class T>
void launch_stream_read(const T* a, std::size_t n, const ReduceWorkspace& ws, cudaStream_t stream) {
  launch_sum<T, false>(a, static_cast<const T*>(nullptr), n, ws, stream);
}

template <class T>
void launch_stream_check(StreamOp op, const T* out, std::size_t n, const StreamSeeds& seeds,
                         unsigned long long* mismatches, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned grid = grid_for(stream_check_kernel<T>, n, kBlock * 4);
  stream_check_kernel<T><<<grid, kBlock, 0, stream>>>(op, out, n, seeds, mismatches);
  GPB_CHECK_LAUNCH();
}

template <class T>
void launch_reference_sum(const T* a, const T* b, std::size_t n, double* sum, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned grid = grid_for(reference_sum_kernel<T>, n, kBlock * 4);
  reference_sum_kernel<T><<<grid, kBlock, 0, stream>>>(a, b, n, sum);
  GPB_CHECK_LAUNCH();
}

#define GPB_INSTANTIATE_STREAM(T)                                                                 \
  template void launch_stream_init<T>(T*, T*, T*, std::size_t, const StreamSeeds&, cudaStream_t); \
  template void launch_stream_copy<T>(const T*, T*, std::size_t, cudaStream_t);                   \
  template void launch_stream_scale<T>(const T*, T*, T, std::size_t, cudaStream_t);               \
  template void launch_stream_add<T>(const T*, const T*, T*, std::size_t, cudaStream_t);          \
  template void launch_stream_triad<T>(T*, const T*, const T*, T, std::size_t, cudaStream_t);     \
  template void launch_stream_write<T>(T*, T, std::size_t, cudaStream_t);                         \
  template void launch_stream_dot<T>(const T*, const T*, std::size_t, const ReduceWorkspace&,     \
                                     cudaStream_t);                                               \
  template void launch_stream_read<T>(const T*, std::size_t, const ReduceWorkspace&,              \
                                      cudaStream_t);                                              \
  template void launch_stream_check<T>(StreamOp, const T*, std::size_t, const StreamSeeds&,       \
                                       unsigned long long*, cudaStream_t);                        \
  template void launch_reference_sum<T>(const T*, const T*, std::size_t, double*, cudaStream_t);

GPB_INSTANTIATE_STREAM(float)
GPB_INSTANTIATE_STREAM(double)
#undef GPB_INSTANTIATE_STREAM

}  // namespace gpubench
