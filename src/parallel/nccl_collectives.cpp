// The engine's collectives over NCCL, and its host waits through the group's.
#include "gpubench/core/nccl.hpp"
#include "gpubench/parallel/collectives.hpp"

namespace gpubench::parallel {

namespace {

ncclDataType_t nccl_type(ActDtype dtype) {
  return dtype == ActDtype::BF16 ? ncclBfloat16 : ncclFloat16;
}

}  // namespace

void wait_with_group(model::Transformer& engine, RankGroup& group, double timeout_s) {
  engine.set_host_wait([&group, timeout_s](const Event& e) {
    group.wait(e, timeout_s, "the engine's GEMM algorithm timing");
  });
}

NcclCollectives::NcclCollectives(ncclComm_t comm) : comm_(comm) {
  GPB_NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
}

void NcclCollectives::all_reduce(void* data, std::int64_t elems, ActDtype dtype,
                                 cudaStream_t stream) {
  GPB_NCCL_CHECK(ncclAllReduce(data, data, static_cast<std::size_t>(elems), nccl_type(dtype),
                               ncclSum, comm_, stream));
}

void NcclCollectives::reduce_scatter(void* data, std::int64_t chunk, ActDtype dtype,
                                     cudaStream_t stream) {
  auto* mine = static_cast<unsigned char*>(data) + static_cast<std::size_t>(rank_ * chunk) * 2;
  GPB_NCCL_CHECK(ncclReduceScatter(data, mine, static_cast<std::size_t>(chunk), nccl_type(dtype),
                                   ncclSum, comm_, stream));
}

void NcclCollectives::all_gather(void* data, std::int64_t chunk, ActDtype dtype,
                                 cudaStream_t stream) {
  const auto* mine =
      static_cast<const unsigned char*>(data) + static_cast<std::size_t>(rank_ * chunk) * 2;
  GPB_NCCL_CHECK(
      ncclAllGather(mine, data, static_cast<std::size_t>(chunk), nccl_type(dtype), comm_, stream));
}

}  // namespace gpubench::parallel
