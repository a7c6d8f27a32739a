#pragma once
// Programmatic dependent launch (PDL, sm_90+): a kernel launched with launch_pdl() may be
// scheduled while the kernel before it on the stream is still draining. It signals its own
// dependents at once (pdl_start: griddepcontrol.launch_dependents), then waits in
// griddepcontrol.wait until the previous grid has completed and its writes are visible, so
// results are exactly those of plain stream order; what is saved is the launch gap and the
// ramp-up between kernels (a decode step is ~10 short kernels per layer). Without the launch
// attribute (older GPUs, the legacy default stream) both instructions are no-ops. CUDA graphs keep
// the programmatic edges.
#include <cuda_runtime.h>

#include <utility>

#include "gpubench/core/cuda.hpp"

namespace gpubench {

#if defined(__CUDACC__)
// The two halves of pdl_start(), for a kernel that does work before waiting: what it reads
// between them must not be written by any kernel that may still run on the stream.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// First statement of every kernel launched with launch_pdl(): nothing of the previous kernel's
// output may be read before it.
__device__ __forceinline__ void pdl_start() {
  pdl_trigger();
  pdl_wait();
}
#endif

// Whether launches on `stream` use the attribute: the current device is sm_90 or newer, the
// stream is not the legacy default stream.
bool pdl_allowed(cudaStream_t stream);

// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent launch where
// pdl_allowed(stream). Checks the launch.
template <class... Params, class... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem,
                cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  if (pdl_allowed(stream)) {
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  GPB_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace gpubench
