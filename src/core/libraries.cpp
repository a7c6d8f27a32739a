// NCCL and cuBLASLt: error reporting, versions, RAII handles.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cuda_runtime.h>

#include <exception>

#include "gpubench/core/cublaslt.hpp"
#include "gpubench/core/nccl.hpp"
#include "gpubench/core/nccl_compat.hpp"

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

namespace {
int loaded_nccl_version() {
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}
}  // namespace

bool nccl_has_symmetric_windows() {
#if GPB_NCCL_HAS_WINDOWS
  return loaded_nccl_version() >= GPB_NCCL_WINDOWS_MIN_VERSION;
#else
  return false;
#endif
}

NcclComm::NcclComm(const ncclUniqueId& id, int nranks, int rank, int max_ctas, int cta_policy) {
  if (max_ctas <= 0 && cta_policy < 0) {
    GPB_NCCL_CHECK(ncclCommInitRank(&comm_, nranks, id, rank));
    return;
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  if (max_ctas > 0) {
    config.minCTAs = 1;
    config.maxCTAs = max_ctas;
  }
  if (cta_policy >= 0) {
#if GPB_NCCL_HAS_WINDOWS
    if (!nccl_has_symmetric_windows())
      throw GpuError(fmt::format("NCCL's CTA policy needs NCCL 2.27 or later (running {})",
                                 nccl_library_version()));
    config.CTAPolicy = cta_policy;
#else
    throw GpuError("NCCL's CTA policy needs NCCL 2.27 or later headers at build time");
#endif
  }
  GPB_NCCL_CHECK(ncclCommInitRankConfig(&comm_, nranks, id, rank, &config));
}

NcclComm::~NcclComm() {
  if (std::uncaught_exceptions() > uncaught_)
    abort();
  else
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

NcclMemory::NcclMemory(std::size_t bytes) : bytes_(bytes) {
  GPB_NCCL_CHECK(ncclMemAlloc(&ptr_, bytes));
}

// Unwinding from a failed or hung collective, the memory and registrations are left to the
// communicator's abort and the process's end: NCCL may still be using them.
NcclMemory::~NcclMemory() {
  if (!ptr_ || std::uncaught_exceptions() > 0) return;
  if (ncclMemFree(ptr_) != ncclSuccess) spdlog::warn("ncclMemFree failed");
}

NcclRegistered::NcclRegistered(const NcclComm& comm, void* buffer, std::size_t bytes,
                               NcclRegistration how)
    : comm_(comm.get()), how_(how) {
  switch (how) {
    case NcclRegistration::None:
      return;
    case NcclRegistration::Local:
      GPB_NCCL_CHECK(ncclCommRegister(comm_, buffer, bytes, &handle_));
      return;
    case NcclRegistration::Symmetric:
#if GPB_NCCL_HAS_WINDOWS
      if (!nccl_has_symmetric_windows())
        throw GpuError(fmt::format("symmetric windows need NCCL 2.27 or later (running {})",
                                   nccl_library_version()));
      {
        ncclWindow_t win = nullptr;
        GPB_NCCL_CHECK(ncclCommWindowRegister(comm_, buffer, bytes, &win, NCCL_WIN_COLL_SYMMETRIC));
        handle_ = static_cast<void*>(win);
      }
      return;
#else
      throw GpuError("symmetric windows need NCCL 2.27 or later headers at build time");
#endif
  }
}

NcclRegistered::~NcclRegistered() {
  if (!handle_ || std::uncaught_exceptions() > 0) return;
  ncclResult_t res = ncclSuccess;
  if (how_ == NcclRegistration::Local) res = ncclCommDeregister(comm_, handle_);
#if GPB_NCCL_HAS_WINDOWS
  if (how_ == NcclRegistration::Symmetric)
    res = ncclCommWindowDeregister(comm_, static_cast<ncclWindow_t>(handle_));
#endif
  if (res != ncclSuccess) spdlog::warn("NCCL buffer deregistration failed");
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
