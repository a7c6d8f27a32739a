// The host side of programmatic dependent launch (pdl.cuh): which launches may use it.
#include <atomic>

#include "gpubench/kernels/pdl.cuh"

namespace gpubench {

bool pdl_allowed(cudaStream_t stream) {
  if (stream == nullptr) return false;
  static std::atomic<int> cache[64];  // per device: 0 not asked yet, 1 no, 2 yes
  int dev = 0;
  GPB_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 64) return false;
  int v = cache[dev].load(std::memory_order_relaxed);
  if (v == 0) {
    int major = 0;
    GPB_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    v = major >= 9 ? 2 : 1;
    cache[dev].store(v, std::memory_order_relaxed);
  }
  return v == 2;
}

}  // namespace gpubench
