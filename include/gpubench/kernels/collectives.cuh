#pragma once
// Collective data kernels' launchers: fill a rank's send buffer with deterministic values, poison
// a receive buffer, and count the output elements that differ from the exactly computed result
// of a collective. Host-includable (no NCCL types): the module maps its types onto these enums.
//
// The data are small integers (and, for float avg, powers of two) chosen per reduction so that
// every result is exact in its type whatever order NCCL reduces in (see collectives.cu); only
// float avg, whose 1/n scalar NCCL rounds to the type, is compared with a relative tolerance.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace gpubench {

// The element types NCCL reduces (fp8 only where the NCCL build has it).
enum class CollectiveElem {
  Int8,
  Uint8,
  Int32,
  Uint32,
  Int64,
  Uint64,
  Fp16,
  Bf16,
  Fp32,
  Fp64,
  Fp8E4M3,
  Fp8E5M2
};

// Which collective produced the output: decides the send/receive layouts.
// (hypercube's output is all_gather's).
enum class CollectiveLayout {
  AllReduce,
  AllGather,
  ReduceScatter,
  Broadcast,
  Reduce,
  AllToAll,
  SendRecv,
  Gather,
  Scatter,
  AllToAllV
};

// alltoallv's uneven split, nccl-tests' generated pattern: rank i sends rank j
// (1 - skew) x total/n + skew x d x total/(n(n-1)/2) bytes, d = (j - i) mod n, rounded down to
// 16 bytes, where total = n x count elements. skew 0 is alltoall's even split; 1 sends nothing to
// itself and most to the farthest rank. Every rank sends and receives the same total.
// Elements rank i sends rank (i + distance) mod n for a per-peer `count`.
std::size_t collective_alltoallv_elems(std::size_t count, int elem_bytes, int nranks, double skew,
                                       int distance);
// Most ranks alltoallv's check supports (its split travels with the kernel's parameters).
inline constexpr int kMaxAlltoallvRanks = 64;

// MulSum is NCCL's PreMulSum with nccl-tests' scalars: rank r's input times
// collective_mulsum_scalar(r) (1 on even ranks, 2 on odd ones), then summed.
enum class CollectiveReduction { Sum, Prod, Min, Max, Avg, MulSum };
__host__ __device__ inline double collective_mulsum_scalar(int rank) {
  return rank % 2 == 0 ? 1.0 : 2.0;
}

// One rank's view of one collective call. `count` is the count passed to NCCL (per-rank slice
// for all_gather, reduce_scatter, alltoall, gather and scatter; the mean per-peer count of
// alltoallv).
struct CollectiveData {
  CollectiveLayout layout = CollectiveLayout::AllReduce;
  CollectiveElem elem = CollectiveElem::Fp32;
  CollectiveReduction reduction = CollectiveReduction::Sum;  // ignored by non-reducing layouts
  int rank = 0;
  int nranks = 1;
  int root = 0;
  std::size_t count = 0;
  std::uint64_t seed = 0;
  double skew = 0;  // alltoallv only
};

// Bytes of one element.
int collective_elem_bytes(CollectiveElem elem);
// Elements this rank's send buffer holds (count; nranks x count for reduce_scatter, alltoall and
// scatter; the sum of its per-peer counts for alltoallv).
std::size_t collective_send_elems(const CollectiveData& d);
// Elements of this rank's output that the check reads (0 for a non-root rank of reduce and
// gather).
std::size_t collective_checked_elems(const CollectiveData& d);
// Relative tolerance of the check (0: exact comparison).
double collective_tolerance(const CollectiveData& d);

// Launchers: the current device must be the stream's device.
// Writes this rank's input over collective_send_elems(d) elements of `sendbuf` (d.root unused).
void launch_collective_init(const CollectiveData& d, void* sendbuf, cudaStream_t stream);
// Writes a value no check ever expects (NaN for floats, the type's maximum for integers).
void launch_collective_poison(void* buf, std::size_t elems, CollectiveElem elem,
                              cudaStream_t stream);
// Adds to *wrong the number of elements of `recvbuf` (collective_checked_elems(d) of them) that
// differ from the expected output.
void launch_collective_check(const CollectiveData& d, const void* recvbuf,
                             unsigned long long* wrong, cudaStream_t stream);

}  // namespace gpubench
