#pragma once
// cuBLASLt checks and a move-only handle; the GEMM wrapper builds on these.
#include <cublasLt.h>

#include <string>
#include <utility>

#include "gpubench/core/errors.hpp"

namespace gpubench {

[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* call, const char* file,
                                     int line);

#define GPB_CUBLAS_CHECK(call)                                            \
  do {                                                                    \
    cublasStatus_t gpb_st_ = (call);                                      \
    if (gpb_st_ != CUBLAS_STATUS_SUCCESS)                                 \
      ::gpubench::throw_cublas_error(gpb_st_, #call, __FILE__, __LINE__); \
  } while (0)

// "13.0.0" from the loaded library.
std::string cublaslt_library_version();

class CublasLtHandle {
 public:
  CublasLtHandle();  // on the current device
  ~CublasLtHandle();
  CublasLtHandle(CublasLtHandle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  CublasLtHandle& operator=(CublasLtHandle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  CublasLtHandle(const CublasLtHandle&) = delete;
  CublasLtHandle& operator=(const CublasLtHandle&) = delete;
  cublasLtHandle_t get() const noexcept { return h_; }

 private:
  void reset() noexcept;
  cublasLtHandle_t h_ = nullptr;
};

}  // namespace gpubench
