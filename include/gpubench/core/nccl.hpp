#pragma once
// NCCL checks and a move-only communicator handle (aborted, not just destroyed, when a
// collective may be stuck, so a hung run can end).
#include <nccl.h>

#include <exception>
#include <string>
#include <utility>

#include "gpubench/core/errors.hpp"

namespace gpubench {

[[noreturn]] void throw_nccl_error(ncclResult_t res, const char* call, const char* file, int line);

#define GPB_NCCL_CHECK(call)                                             \
  do {                                                                   \
    ncclResult_t gpb_res_ = (call);                                      \
    if (gpb_res_ != ncclSuccess && gpb_res_ != ncclInProgress)           \
      ::gpubench::throw_nccl_error(gpb_res_, #call, __FILE__, __LINE__); \
  } while (0)

// "2.28.3" from the loaded library (not the header).
std::string nccl_library_version();

// Destroyed while an exception unwinds that was thrown after it was made (this rank failed, or
// a peer did and the group ended this one), the communicator is aborted, not destroyed: a
// collective of its own may wait for a peer that is gone, ncclCommDestroy would wait with it,
// and only an abort ends it.
class NcclComm {
 public:
  NcclComm() = default;
  // Joins the communicator `id` as `rank` of `nranks` on the current device. max_ctas > 0 caps
  // the CTAs (channels) NCCL may run an operation on (ncclConfig_t::maxCTAs); 0: NCCL's choice.
  // cta_policy >= 0 sets ncclConfig_t::CTAPolicy (NCCL 2.27+; GpuError where the build's or the
  // library's NCCL lacks it); -1: NCCL's choice.
  NcclComm(const ncclUniqueId& id, int nranks, int rank, int max_ctas = 0, int cta_policy = -1);
  ~NcclComm();
  NcclComm(NcclComm&& o) noexcept : comm_(std::exchange(o.comm_, nullptr)) {}
  NcclComm& operator=(NcclComm&& o) noexcept {  // keeps this object's own unwinding count
    if (this != &o) {
      reset();
      comm_ = std::exchange(o.comm_, nullptr);
    }
    return *this;
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const noexcept { return comm_; }
  // Ends a communicator whose collectives may be stuck (ncclCommAbort).
  void abort() noexcept;

 private:
  void reset() noexcept;
  ncclComm_t comm_ = nullptr;
  int uncaught_ = std::uncaught_exceptions();
};

// Aborts `comm` when the scope it is declared in is left by an exception, before the objects
// declared ahead of it in that scope are destroyed: buffers that a failed or stuck collective
// may still use (their cudaFree would wait for it for ever).
class NcclAbortOnThrow {
 public:
  explicit NcclAbortOnThrow(NcclComm& comm) noexcept
      : comm_(comm), uncaught_(std::uncaught_exceptions()) {}
  ~NcclAbortOnThrow() {
    if (std::uncaught_exceptions() > uncaught_) comm_.abort();
  }
  NcclAbortOnThrow(const NcclAbortOnThrow&) = delete;
  NcclAbortOnThrow& operator=(const NcclAbortOnThrow&) = delete;

 private:
  NcclComm& comm_;
  int uncaught_;
};

// Device memory from ncclMemAlloc (the CUDA virtual memory NCCL can register, map to peers and
// use for symmetric windows) on the current device; freed with ncclMemFree.
class NcclMemory {
 public:
  NcclMemory() = default;
  explicit NcclMemory(std::size_t bytes);
  ~NcclMemory();
  NcclMemory(NcclMemory&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  NcclMemory& operator=(NcclMemory&&) = delete;
  NcclMemory(const NcclMemory&) = delete;
  NcclMemory& operator=(const NcclMemory&) = delete;
  void* get() const noexcept { return ptr_; }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// A buffer registered with a communicator for the communicator's life or until this ends:
// Local is ncclCommRegister (NCCL may then skip its staging copies), Symmetric is
// ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC (NCCL 2.27+; a collective call: every rank
// registers a buffer of the same size, in the same order; enables NCCL's symmetric kernels).
// Must end before the communicator does.
enum class NcclRegistration { None, Local, Symmetric };
class NcclRegistered {
 public:
  NcclRegistered(const NcclComm& comm, void* buffer, std::size_t bytes, NcclRegistration how);
  ~NcclRegistered();
  NcclRegistered(const NcclRegistered&) = delete;
  NcclRegistered& operator=(const NcclRegistered&) = delete;

 private:
  ncclComm_t comm_ = nullptr;
  NcclRegistration how_ = NcclRegistration::None;
  void* handle_ = nullptr;
};
// Whether this build and the loaded library have symmetric windows (NCCL 2.27+).
bool nccl_has_symmetric_windows();

}  // namespace gpubench
