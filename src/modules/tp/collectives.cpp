// The tensor-parallel engine's all-reduce over NCCL.
#include "gpubench/core/nccl.hpp"
#include "tp.hpp"

namespace gpubench::tp {

void NcclTpCollectives::all_reduce(void* data, std::int64_t elems, ActDtype dtype,
                                   cudaStream_t stream) {
  const ncclDataType_t type = dtype == ActDtype::BF16 ? ncclBfloat16 : ncclFloat16;
  GPB_NCCL_CHECK(ncclAllReduce(data, data, static_cast<std::size_t>(elems), type, ncclSum, comm_,
                               stream));
}

}  // namespace gpubench::tp
