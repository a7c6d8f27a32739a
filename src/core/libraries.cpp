// NCCL and cuBLASLt: error reporting, versions, RAII handles.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cuda_runtime.h>

#include "gpubench/core/cublaslt.hpp"
#include "gpubench/core/nccl.hpp"

namespace gpubench {

namespace {
int current_device() noexcept {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) return -1;
  return d;
}
}  // namespace

void throw_nccl_error(ncclResult_t res, const char* call, const char* file, int line) {
  throw GpuError(fmt::format("{} failed: {} at {}:{} on GPU {}", call, ncclGetErrorString(res),
                             file, line, current_device()));
}

std::string nccl_library_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
}

NcclComm::NcclComm(const ncclUniqueId& id, int nranks, int rank, int max_ctas) {
  if (max_ctas <= 0) {
    GPB_NCCL_CHECK(ncclCommInitRank(&comm_, nranks, id, rank));
    return;
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.minCTAs = 1;
  config.maxCTAs = max_ctas;
  GPB_NCCL_CHECK(ncclCommInitRankConfig(&comm_, nranks, id, rank, &config));
}

NcclComm::~NcclComm() {
  reset();
}

void NcclComm::reset() noexcept {
  if (!comm_) return;
  if (ncclCommDestroy(comm_) != ncclSuccess) spdlog::warn("ncclCommDestroy failed");
  comm_ = nullptr;
}

void NcclComm::abort() noexcept {
  if (!comm_) return;
  (void)ncclCommAbort(comm_);
  comm_ = nullptr;
}

void throw_cublas_error(cublasStatus_t st, const char* call, const char* file, int line) {
  throw GpuError(fmt::format("{} failed: {} ({}) at {}:{} on GPU {}", call,
                             cublasLtGetStatusString(st), cublasLtGetStatusName(st), file, line,
                             current_device()));
}

std::string cublaslt_library_version() {
  const std::size_t v = cublasLtGetVersion();
  // cuBLAS 12+ encodes major*10000 + minor*100 + patch.
  return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
}

CublasLtHandle::CublasLtHandle() {
  GPB_CUBLAS_CHECK(cublasLtCreate(&h_));
}
CublasLtHandle::~CublasLtHandle() {
  reset();
}
void CublasLtHandle::reset() noexcept {
  if (h_) (void)cublasLtDestroy(h_);
  h_ = nullptr;
}

}  // namespace gpubench
