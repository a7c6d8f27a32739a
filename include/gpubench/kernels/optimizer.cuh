#pragma once
// The optimizer step of data-parallel training: AdamW over fp32 master weights, with the
// weights the model computes with (bf16 or fp16) written from them, and the widening that starts
// the master weights. Host-includable: the kernels live in optimizer.cu; adamw_update is the
// same arithmetic on the host, what a step is checked against.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "gpubench/kernels/transformer.cuh"  // ActDtype

namespace gpubench {

// AdamW's hyperparameters (PyTorch's AdamW, decoupled weight decay).
struct AdamW {
  float lr = 1e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

// One parameter's step `step` (1 for the first) with gradient g (already scaled), fp32:
//   m = beta1 m + (1 - beta1) g,  v = beta2 v + (1 - beta2) g^2,
//   w = w (1 - lr weight_decay) - lr (m / (1 - beta1^step)) / (sqrt(v / (1 - beta2^step)) + eps).
// The kernel computes exactly this per element (the bias corrections once per launch, on the
// host).
struct AdamWTerms {
  float decay, step_size, bias2;  // 1 - lr wd; lr / (1 - beta1^step); 1 / (1 - beta2^step)
};
inline AdamWTerms adamw_terms(const AdamW& h, int step) {
  const double b1 = 1.0 - std::pow(static_cast<double>(h.beta1), step);
  const double b2 = 1.0 - std::pow(static_cast<double>(h.beta2), step);
  return {1.0f - h.lr * h.weight_decay, static_cast<float>(h.lr / b1),
          static_cast<float>(1.0 / b2)};
}
#if defined(__CUDACC__)
__host__ __device__
#endif
    inline void
    adamw_update(float& w, float& m, float& v, float g, const AdamW& h, const AdamWTerms& t) {
  m = h.beta1 * m + (1.0f - h.beta1) * g;
  v = h.beta2 * v + (1.0f - h.beta2) * g * g;
  w = w * t.decay - t.step_size * m / (sqrtf(v * t.bias2) + h.eps);
}

// adamw_update over n parameters: master, m, v fp32; grad (times grad_scale) and weight of
// `dtype` (weight written from the new master, rounded once). All device pointers, on `stream`;
// grad may not overlap the others. n = 0 launches nothing; n < 0 or step < 1 is an InputError.
void adamw_step(float* master, float* m, float* v, const void* grad, void* weight,
                std::int64_t n, const AdamW& h, int step, float grad_scale, ActDtype dtype,
                cudaStream_t stream);

// dst[i] = src[i] (of `dtype`) widened to fp32, over n elements.
void widen_to_fp32(float* dst, const void* src, std::int64_t n, ActDtype dtype,
                   cudaStream_t stream);

}  // namespace gpubench
