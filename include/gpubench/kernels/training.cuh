#pragma once
// Backward-pass kernels for the training benchmark: the gradients of SwiGLU, of GPT-2's tanh GELU
// and of RMSNorm (its input only). Host-includable: the kernels live in training.cu. Math is
// fp32; tensors are stored as bf16 or fp16 (ActDtype, transformer.cuh) and rounded once per
// stored element.
#include <cuda_runtime.h>

#include <cstdint>

#include "gpubench/kernels/transformer.cuh"  // ActDtype

namespace gpubench {

// Launchers: pointers are device pointers of `dtype` elements, matrices row-major, all work on
// `stream`. A zero count launches nothing; a negative one is an InputError. Pointers aligned to
// 16 bytes, with rows whose length is a multiple of 8 elements, take the 16-byte path; anything
// else takes the element path, so any size works.

// The gradient of swiglu(): the forward was out[t, i] = silu(g) * u with g = gate_up[t, i] and
// u = gate_up[t, intermediate + i] (gate_up [tokens, 2*intermediate], d_out [tokens,
// intermediate]). Writes, with s = sigmoid(g), silu(g) = g*s and dsilu(g) = s*(1 + g*(1 - s)):
//   d_gate_up[t, i]                = d_out[t, i] * u * dsilu(g)
//   d_gate_up[t, intermediate + i] = d_out[t, i] * silu(g)
// d_gate_up [tokens, 2*intermediate] may be gate_up (in place); it must not overlap d_out.
void swiglu_backward(void* d_gate_up, const void* gate_up, const void* d_out, std::int64_t tokens,
                     int intermediate, ActDtype dtype, cudaStream_t stream);

// The gradient of gelu() with tanh_approx over n elements: d_in[i] = d_out[i] * gelu'(x), x =
// in[i], where for gelu(x) = 0.5 x (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3):
//   gelu'(x) = 0.5 (1 + tanh(z)) + 0.5 x (1 - tanh(z)^2) sqrt(2/pi) (1 + 3*0.044715 x^2),
// evaluated through sigmoid(+-2z) so that it stays accurate where tanh saturates; beyond |z| ~ 50
// it is exactly 1 or 0 (no NaN for huge bf16 inputs). d_in may be d_out or in.
void gelu_tanh_backward(void* d_in, const void* in, const void* d_out, std::int64_t n,
                        ActDtype dtype, cudaStream_t stream);

// The input gradient of rms_norm(), ACCUMULATED into d_in_accum [rows, cols] (which holds, say,
// the residual stream's gradient already). The forward was y = x * rstd * w with x = in[r, :],
// w = weight [cols], rstd = 1/sqrt(mean(x^2) + eps); with dy = d_out[r, :]:
//   d_in_accum[r, c] += rstd * w[c] * dy[c] - x[c] * rstd^3 / cols * sum_c' w[c'] dy[c'] x[c']
// rstd and the sum are fp32 over the stored inputs; the old value and the gradient are added in
// fp32 and rounded once. The weight's own gradient is not computed. One block per row (256
// threads, down to one warp for short rows), any cols. d_in_accum must not overlap the other
// arrays.
// InputError when eps is negative or not finite, or rows exceed one launch's grid (2^31 - 1).
void rms_norm_backward(void* d_in_accum, const void* in, const void* weight, const void* d_out,
                       std::int64_t rows, int cols, float eps, ActDtype dtype, cudaStream_t stream);

}  // namespace gpubench
