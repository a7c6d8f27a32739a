// Spin kernel (holds a stream until released) and a busy kernel; launchers beside them.
#include "gpubench/kernels/spin.cuh"

#include "gpubench/core/cuda.hpp"

namespace gpubench {

namespace {

__device__ __forceinline__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_wait_kernel(const volatile int* flag, std::uint64_t timeout_ns) {
  const std::uint64_t start = global_ns();
  while (*flag == 0) {
    if (global_ns() - start > timeout_ns) break;  // never hang a stream on a lost release
    __nanosleep(1000);
  }
}

__global__ void busy_wait_kernel(std::uint64_t ns) {
  const std::uint64_t start = global_ns();
  while (global_ns() - start < ns) {
  }
}

}  // namespace

void launch_spin_wait(const volatile int* flag, std::uint64_t timeout_ns, cudaStream_t stream) {
  spin_wait_kernel<<<1, 1, 0, stream>>>(flag, timeout_ns);
  GPB_CHECK_LAUNCH();
}

void launch_busy_wait(std::uint64_t ns, int blocks, cudaStream_t stream) {
  busy_wait_kernel<<<blocks, 32, 0, stream>>>(ns);
  GPB_CHECK_LAUNCH();
}

}  // namespace gpubench
