// The positions of a step, written on the GPU (capturable in a CUDA graph).
#include "gpubench/core/cuda.hpp"
#include "gpubench/kernels/pdl.cuh"
#include "gpubench/kernels/transformer_engine.cuh"

namespace gpubench {

namespace {

__global__ void positions_kernel(std::int32_t* positions, int n, int tokens, int pos0) {
  pdl_start();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) positions[i] = pos0 + i % tokens;
}

}  // namespace

void fill_positions(std::int32_t* positions, int batch, int tokens, int pos0, cudaStream_t stream) {
  const int n = batch * tokens;
  if (n <= 0) return;
  launch_pdl(positions_kernel, (n + 255) / 256, 256, 0, stream, positions, n, tokens, pos0);
  GPB_CHECK_LAUNCH();
}

}  // namespace gpubench
