#pragma once
// Small kernels the transformer engine needs besides the layer's math: the positions of a
// prefill or decode step, made on the GPU so a step can be captured in a CUDA graph.
#include <cuda_runtime.h>

#include <cstdint>

namespace gpubench {

// positions[b * tokens + t] = pos0 + t for b < batch, t < tokens.
void fill_positions(std::int32_t* positions, int batch, int tokens, int pos0, cudaStream_t stream);

}  // namespace gpubench
