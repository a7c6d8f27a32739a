// The data of a collective run: each rank's input, the poisoned output, and the count of wrong
// output elements, on the GPU (kernels/collectives.cu) from the module's types.
#include <fmt/format.h>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/nccl_compat.hpp"
#include "gpubench/kernels/collectives.cuh"
#include "gpubench/modules/allreduce/allreduce.hpp"

namespace gpubench::allreduce {

namespace {

CollectiveElem elem_of(const DataType& t) {
  switch (static_cast<int>(t.nccl)) {
    case ncclInt8:
      return CollectiveElem::Int8;
    case ncclUint8:
      return CollectiveElem::Uint8;
    case ncclInt32:
      return CollectiveElem::Int32;
    case ncclUint32:
      return CollectiveElem::Uint32;
    case ncclInt64:
      return CollectiveElem::Int64;
    case ncclUint64:
      return CollectiveElem::Uint64;
    case ncclFloat16:
      return CollectiveElem::Fp16;
    case ncclBfloat16:
      return CollectiveElem::Bf16;
    case ncclFloat32:
      return CollectiveElem::Fp32;
    case ncclFloat64:
      return CollectiveElem::Fp64;
#if GPB_NCCL_HAS_FP8
    case ncclFloat8e4m3:
      return CollectiveElem::Fp8E4M3;
    case ncclFloat8e5m2:
      return CollectiveElem::Fp8E5M2;
#endif
  }
  throw InputError(fmt::format("type '{}' has no data kernels", t.name));
}

CollectiveReduction reduction_of(const ReduceOp& op) {
  if (op.nccl == ncclNumOps) return CollectiveReduction::MulSum;
  switch (static_cast<int>(op.nccl)) {
    case ncclSum:
      return CollectiveReduction::Sum;
    case ncclProd:
      return CollectiveReduction::Prod;
    case ncclMin:
      return CollectiveReduction::Min;
    case ncclMax:
      return CollectiveReduction::Max;
    case ncclAvg:
      return CollectiveReduction::Avg;
  }
  throw InputError(fmt::format("reduction '{}' has no data kernels", op.name));
}

CollectiveLayout layout_of(Kind k) {
  switch (k) {
    case Kind::AllReduce:
      return CollectiveLayout::AllReduce;
    case Kind::AllGather:
      return CollectiveLayout::AllGather;
    case Kind::ReduceScatter:
      return CollectiveLayout::ReduceScatter;
    case Kind::Broadcast:
      return CollectiveLayout::Broadcast;
    case Kind::Reduce:
      return CollectiveLayout::Reduce;
    case Kind::AllToAll:
      return CollectiveLayout::AllToAll;
    case Kind::SendRecv:
      return CollectiveLayout::SendRecv;
    case Kind::Gather:
      return CollectiveLayout::Gather;
    case Kind::Scatter:
      return CollectiveLayout::Scatter;
    case Kind::AllToAllV:
      return CollectiveLayout::AllToAllV;
    case Kind::HyperCube:  // every rank ends with every rank's slice, as in all_gather
      return CollectiveLayout::AllGather;
  }
  return CollectiveLayout::AllReduce;
}

CollectiveData data_of(const Collective& c, std::size_t count, const DataType& t,
                       const ReduceOp& op, int root, int rank, int nranks, std::uint64_t seed) {
  CollectiveData d;
  d.layout = layout_of(c.kind);
  d.elem = elem_of(t);
  d.reduction = c.reduces ? reduction_of(op) : CollectiveReduction::Sum;
  d.rank = rank;
  d.nranks = nranks;
  d.root = root;
  d.count = count;
  d.seed = seed;
  d.skew = c.skew;
  return d;
}

}  // namespace

std::size_t alltoallv_peer_elems(const Collective& c, std::size_t count, int type_bytes, int from,
                                 int to, int nranks) {
  if (nranks <= 0) return 0;
  return collective_alltoallv_elems(count, type_bytes, nranks, c.skew,
                                    ((to - from) % nranks + nranks) % nranks);
}

void init_send(const Collective& c, void* sendbuf, std::size_t count, const DataType& t,
               const ReduceOp& op, int rank, int nranks, std::uint64_t seed, cudaStream_t stream) {
  // Every rank writes its input, broadcast's non-roots too (NCCL does not read theirs; in
  // place, a broadcast that skipped them leaves their own values, which the check rejects).
  launch_collective_init(data_of(c, count, t, op, /*root=*/0, rank, nranks, seed), sendbuf, stream);
}

void poison_recv(void* recvbuf, std::size_t elems, const DataType& t, cudaStream_t stream) {
  launch_collective_poison(recvbuf, elems, elem_of(t), stream);
}

std::uint64_t count_wrong(const Collective& c, const void* recvbuf, std::size_t count,
                          const DataType& t, const ReduceOp& op, int root, int rank, int nranks,
                          std::uint64_t seed, cudaStream_t stream) {
  const CollectiveData d = data_of(c, count, t, op, root, rank, nranks, seed);
  if (collective_checked_elems(d) == 0) return 0;
  int device = 0;
  GPB_CUDA_CHECK(cudaGetDevice(&device));
  DeviceBuffer counter(device, sizeof(unsigned long long));
  GPB_CUDA_CHECK(cudaMemsetAsync(counter.get(), 0, sizeof(unsigned long long), stream));
  launch_collective_check(d, recvbuf, counter.as<unsigned long long>(), stream);
  unsigned long long wrong = 0;
  GPB_CUDA_CHECK(
      cudaMemcpyAsync(&wrong, counter.get(), sizeof(wrong), cudaMemcpyDeviceToHost, stream));
  GPB_CUDA_CHECK(cudaStreamSynchronize(stream));
  return wrong;
}

}  // namespace gpubench::allreduce
