#pragma once
// NCCL checks and a move-only communicator handle (aborted, not just destroyed, when a
// collective may be stuck, so a hung run can end).
#include <nccl.h>

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

class NcclComm {
 public:
  NcclComm() = default;
  // Joins the communicator `id` as `rank` of `nranks` on the current device. max_ctas > 0 caps
  // the CTAs (channels) NCCL may run an operation on (ncclConfig_t::maxCTAs); 0: NCCL's choice.
  NcclComm(const ncclUniqueId& id, int nranks, int rank, int max_ctas = 0);
  ~NcclComm();
  NcclComm(NcclComm&& o) noexcept : comm_(std::exchange(o.comm_, nullptr)) {}
  NcclComm& operator=(NcclComm&& o) noexcept {
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
};

}  // namespace gpubench
