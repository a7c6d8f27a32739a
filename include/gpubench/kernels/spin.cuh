#pragma once
// Spin kernel: holds a stream until the host writes a non-zero flag (or a timeout passes), so a
// batch of queued launches starts back to back and launch overhead stays out of the timings.
#include <cuda_runtime.h>

#include <cstdint>

namespace gpubench {

// `flag` is a device pointer to mapped, page-locked host memory. Returns immediately on the host.
void launch_spin_wait(const volatile int* flag, std::uint64_t timeout_ns, cudaStream_t stream);

// Busy kernel for tests and monitor checks: spins for about `ns` nanoseconds on every SM.
void launch_busy_wait(std::uint64_t ns, int blocks, cudaStream_t stream);

}  // namespace gpubench
