// Collective data kernels: deterministic per-rank inputs, poison, and the on-device check of a
// collective's output against values recomputed from the same formula for every rank.
//
// The value formula and why every checked result is exact: collectives_values.cuh.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "gpubench/kernels/collectives.cuh"
#include "gpubench/kernels/collectives_values.cuh"
#include "gpubench/kernels/memory.cuh"  // current_device_sm_count

namespace gpubench {

namespace {

constexpr int kBlock = 256;

// ---------------------------------------------------------------------------------------------
// Kernels

template <class T>
__global__ void __launch_bounds__(kBlock) init_kernel(T* out, std::size_t n, Plan p) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    out[i] = Elem<T>::from_double(input_value(p, p.rank, i, shared_hash(p.seed, i)));
}

template <class T>
__global__ void __launch_bounds__(kBlock) poison_kernel(T* out, std::size_t n) {
  const T poison = Elem<T>::poison();
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    out[i] = poison;
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    check_kernel(const T* in, std::size_t n, Plan p, unsigned long long* wrong) {
  unsigned long long bad = 0;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n;
       j += stride) {
    if (!output_ok(Elem<T>::to_double(in[j]), expected_value<T>(p, j), p)) ++bad;
  }
  for (int off = 16; off > 0; off >>= 1) bad += __shfl_down_sync(0xffffffffu, bad, off);
  if ((threadIdx.x & 31) == 0 && bad != 0) atomicAdd(wrong, bad);
}

// A grid-stride grid: enough blocks to fill the GPU, fewer for small buffers.
unsigned grid_for(std::size_t n) {
  const std::size_t wanted = (n + kBlock - 1) / kBlock;
  const std::size_t cap = static_cast<std::size_t>(current_device_sm_count()) * 16;
  return static_cast<unsigned>(std::max<std::size_t>(1, std::min(wanted, cap)));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Sizes and tolerance

int collective_elem_bytes(CollectiveElem elem) {
  int bytes = 0;
  with_elem_type(elem, [&](auto* tag) { bytes = static_cast<int>(sizeof(*tag)); });
  return bytes;
}

std::size_t collective_alltoallv_elems(std::size_t count, int elem_bytes, int nranks, double skew,
                                       int distance) {
  if (elem_bytes <= 0 || nranks <= 0) return 0;
  const auto bytes = static_cast<std::size_t>(elem_bytes);
  const double total = static_cast<double>(count) * nranks * elem_bytes;
  if (nranks == 1) return (static_cast<std::size_t>(total) & ~std::size_t{15}) / bytes;
  const double pairs = static_cast<double>(nranks) * (nranks - 1) / 2;
  const double share = (1.0 - skew) * (total / nranks) + skew * (distance * total / pairs);
  return (static_cast<std::size_t>(share) & ~std::size_t{15}) / bytes;
}

namespace {

// Sum of alltoallv's per-peer counts: what each rank sends, and receives.
std::size_t alltoallv_total(const CollectiveData& d) {
  std::size_t total = 0;
  for (int k = 0; k < d.nranks; ++k)
    total += collective_alltoallv_elems(d.count, collective_elem_bytes(d.elem), d.nranks, d.skew, k);
  return total;
}

}  // namespace

std::size_t collective_send_elems(const CollectiveData& d) {
  const auto n = static_cast<std::size_t>(std::max(d.nranks, 1));
  switch (d.layout) {
    case CollectiveLayout::ReduceScatter:
    case CollectiveLayout::AllToAll:
    case CollectiveLayout::Scatter:
      return n * d.count;
    case CollectiveLayout::AllToAllV:
      return alltoallv_total(d);
    default:
      return d.count;
  }
}

std::size_t collective_checked_elems(const CollectiveData& d) {
  const auto n = static_cast<std::size_t>(std::max(d.nranks, 1));
  switch (d.layout) {
    case CollectiveLayout::AllGather:
    case CollectiveLayout::AllToAll:
      return n * d.count;
    case CollectiveLayout::Reduce:
      return d.rank == d.root ? d.count : 0;
    case CollectiveLayout::Gather:
      return d.rank == d.root ? n * d.count : 0;
    case CollectiveLayout::AllToAllV:
      return alltoallv_total(d);
    default:
      return d.count;
  }
}

// Float avg: the 1/n scalar as NCCL rounds it to the type (fp64: from the double 1/n, the others
// from float(1/n); subnormal for fp8 at large n), plus two roundings of u: the addition of the
// two terms and NCCL's other path (the exact sum times 1/n). At least 3u.
double collective_tolerance(const CollectiveData& d) {
  if (!layout_reduces(d.layout) || d.reduction != CollectiveReduction::Avg) return 0;
  if (!is_floating(d.elem)) return 0;
  const int n = std::max(d.nranks, 1);
  const double exact = 1.0 / n;
  const double wanted = d.elem == CollectiveElem::Fp64 ? exact : static_cast<float>(exact);
  double scalar = 0;
  with_elem_type(d.elem, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    scalar = Elem<T>::to_double(Elem<T>::from_double(wanted));
  });
  const double u = unit_roundoff(d.elem);
  return std::max(3 * u, std::fabs(scalar * n - 1) + 2 * u);
}

// ---------------------------------------------------------------------------------------------
// Launchers

void launch_collective_init(const CollectiveData& d, void* sendbuf, cudaStream_t stream) {
  const std::size_t n = collective_send_elems(d);
  if (n == 0) return;
  const Plan p = make_plan(d);
  with_elem_type(d.elem, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    init_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(static_cast<T*>(sendbuf), n, p);
  });
  GPB_CHECK_LAUNCH();
}

void launch_collective_poison(void* buf, std::size_t elems, CollectiveElem elem,
                              cudaStream_t stream) {
  if (elems == 0) return;
  with_elem_type(elem, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    poison_kernel<T><<<grid_for(elems), kBlock, 0, stream>>>(static_cast<T*>(buf), elems);
  });
  GPB_CHECK_LAUNCH();
}

void launch_collective_check(const CollectiveData& d, const void* recvbuf,
                             unsigned long long* wrong, cudaStream_t stream) {
  const std::size_t n = collective_checked_elems(d);
  if (n == 0) return;
  const Plan p = make_plan(d);
  with_elem_type(d.elem, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    check_kernel<T>
        <<<grid_for(n), kBlock, 0, stream>>>(static_cast<const T*>(recvbuf), n, p, wrong);
  });
  GPB_CHECK_LAUNCH();
}

}  // namespace gpubench
