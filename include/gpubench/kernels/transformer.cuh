#pragma once
// The transformer engine's element-wise kernels: RMSNorm and LayerNorm (alone or fused with the
// residual add), RoPE, activations, bias and residual adds, the embedding lookup, and the seeded
// weight fill under which a tensor-parallel shard equals its slice of the full weight.
// Host-includable: the kernels live in transformer_norm.cu and transformer_pointwise.cu. Math is
// fp32; activations and weights are stored as bf16 or fp16 (ActDtype) and rounded once per output.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpubench/kernels/memory.cuh"  // mix64, GPB_HOST_DEVICE

namespace gpubench {

// Storage type of activations and weights: __nv_bfloat16 or __half.
enum class ActDtype { BF16, F16 };

inline const char* to_string(ActDtype dtype) {
  return dtype == ActDtype::BF16 ? "bf16" : "fp16";
}
constexpr std::size_t act_bytes(ActDtype) {
  return 2;
}

// Launchers: pointers are device pointers of `dtype` elements unless said otherwise; matrices are
// row-major. A zero count launches nothing. Pointers aligned to 16 bytes, with rows whose length
// (and stride) is a multiple of 8 elements, take the 16-byte path; anything else takes the
// element path, so any size works.

// ---------------------------------------------------------------------------------------------
// Normalization: one block per row, fp32 statistics, any `cols`.

// out[r, :] = in[r, :] / sqrt(mean(in[r, :]^2) + eps) * weight. `out` may be `in`.
void rms_norm(void* out, const void* in, const void* weight, std::int64_t rows, int cols, float eps,
              ActDtype dtype, cudaStream_t stream);

// Qwen3's per-head q/k norm, in place, on heads that sit inside a wider row (a fused qkv buffer):
// head h of token t is the `head_dim` elements at x + t*row_stride + h*head_dim; each is
// RMS-normalized with the shared `weight` [head_dim]. With row_stride = num_heads*head_dim it is
// rms_norm with rows = tokens*num_heads.
void rms_norm_heads(void* x, const void* weight, std::int64_t tokens, int num_heads, int head_dim,
                    std::int64_t row_stride, float eps, ActDtype dtype, cudaStream_t stream);

// out[r, :] = (in[r, :] - mean) / sqrt(var + eps) * weight + bias (biased variance, as
// torch.nn.LayerNorm). `bias` may be null (no bias). `out` may be `in`.
void layer_norm(void* out, const void* in, const void* weight, const void* bias, std::int64_t rows,
                int cols, float eps, ActDtype dtype, cudaStream_t stream);

// The fused residual + norm of a decoder layer: residual += in (rounded to `dtype`, as the
// residual stream is stored), then out = norm(residual). `out` may be `in`, not `residual`.
void add_rms_norm(void* residual_inout, void* out, const void* in, const void* weight,
                  std::int64_t rows, int cols, float eps, ActDtype dtype, cudaStream_t stream);
void add_layer_norm(void* residual_inout, void* out, const void* in, const void* weight,
                    const void* bias, std::int64_t rows, int cols, float eps, ActDtype dtype,
                    cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Rotary position embedding (HuggingFace Llama convention), in place.

// Largest head_dim rope() takes.
inline constexpr int kMaxRopeHeadDim = 512;

// For token t at position p = positions[t] (int32, device) and each head of q [tokens, num_heads
// * head_dim] and k [tokens, num_kv_heads * head_dim], with rows q_stride and k_stride elements
// apart (so q and k may live inside a fused qkv buffer): for i < head_dim/2, pairs (x[i],
// x[i + head_dim/2]) rotate by the angle p * inv_freq[i], inv_freq[i] = theta^(-2i/head_dim)
// (rotate_half). As in HuggingFace, inv_freq and the angle are fp32. `k` may be null with
// num_kv_heads = 0. InputError when head_dim is odd or above kMaxRopeHeadDim, theta is not above
// 1, or a stride is shorter than its heads.
void rope(void* q, void* k, const std::int32_t* positions, std::int64_t tokens, int num_heads,
          int num_kv_heads, int head_dim, std::int64_t q_stride, std::int64_t k_stride, float theta,
          ActDtype dtype, cudaStream_t stream);

// The attention inputs of a step into the KV caches, fused: for each token t of the fused qkv
// buffer [tokens, qkv_stride] (q heads, then k heads, then v heads, head_dim each), with
// `rope`, q is rotated in place and k rotated (as rope() does, bit for bit); then k and v are
// written to row b*max_context + positions[t] of k_cache and v_cache [batch, max_context,
// kv_stride] (kv_stride 0: num_kv_heads*head_dim, packed rows), b = t / tokens_per_seq. Without
// `rope` (learned positions) k and v are copied as they are. head_dim even and at most
// kMaxRopeHeadDim.
void qkv_to_cache(void* qkv, std::int64_t tokens, int tokens_per_seq, int num_heads,
                  int num_kv_heads, int head_dim, std::int64_t qkv_stride,
                  const std::int32_t* positions, bool rope, float theta, void* k_cache,
                  void* v_cache, std::int64_t max_context, std::int64_t kv_stride, ActDtype dtype,
                  cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Activations, bias and residual adds, embeddings

// The gated MLP's activation. gate_up is [tokens, 2*intermediate]: each row holds the gate
// projection's `intermediate` outputs first, then the up projection's (the fused gate_up GEMM's
// weight stacks gate_proj's rows above up_proj's). out [tokens, intermediate] = silu(gate) * up.
void swiglu(void* out, const void* gate_up, std::int64_t tokens, int intermediate, ActDtype dtype,
            cudaStream_t stream);

// out = gelu(in) over n elements: 0.5 x (1 + erf(x / sqrt 2)), or with `tanh_approx` GPT-2's
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). `out` may be `in`.
void gelu(void* out, const void* in, std::int64_t n, bool tanh_approx, ActDtype dtype,
          cudaStream_t stream);
// out = max(in, 0) over n elements. `out` may be `in`.
void relu(void* out, const void* in, std::int64_t n, ActDtype dtype, cudaStream_t stream);

// inout[r, c] += bias[c] for a [rows, cols] matrix.
void add_bias(void* inout, const void* bias, std::int64_t rows, int cols, ActDtype dtype,
              cudaStream_t stream);
// inout[i] += in[i] over n elements.
void residual_add(void* inout, const void* in, std::int64_t n, ActDtype dtype, cudaStream_t stream);
// inout[i] += sum over k < count of slots[k * slot_stride + i], i < n, added in fp32 in order of
// k and rounded once (the local step of a reduce-scatter whose peers' parts were copied into
// `slots`).
void sum_slots(void* inout, const void* slots, int count, std::int64_t slot_stride, std::int64_t n,
               ActDtype dtype, cudaStream_t stream);

// out[t, :] = table[token_ids[t], :] (+ position_table[positions[t], :] when position_table is
// not null: learned positions, OPT and GPT-2). token_ids and positions are int32 device arrays
// the caller keeps in range (OPT's offset of 2 is the caller's to add to positions).
void embedding_lookup(void* out, const void* table, const std::int32_t* token_ids,
                      std::int64_t tokens, int hidden, const void* position_table,
                      const std::int32_t* positions, ActDtype dtype, cudaStream_t stream);
// A step's embedding and its positions in one kernel: batch x tokens rows, row b * tokens + t at
// position pos0 + t, written to positions_out[b * tokens + t] (as fill_positions does) and, with
// a position table, added from it.
void embedding_step(void* out, const void* table, const std::int32_t* token_ids, int batch,
                    int tokens, int hidden, const void* position_table, int pos0,
                    std::int32_t* positions_out, ActDtype dtype, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Deterministic weights and inputs

// Element (row, col) of the FULL weight `weight_id` of a model seeded with `seed`, a matrix of
// `full_cols` columns, before rounding to the storage type: a random sign and a magnitude in
// [scale/64, scale), exact in fp32 (a 24-bit integer times 2^-24, times scale), so host and
// device compute the same float. It depends on nothing else, so shards match their slices.
GPB_HOST_DEVICE inline float weight_value(std::uint64_t seed, std::uint64_t weight_id,
                                          std::uint64_t row, std::uint64_t col,
                                          std::uint64_t full_cols, float scale) {
  const std::uint64_t key = mix64(mix64(seed) ^ (weight_id * 0x9E3779B97F4A7C15ull));
  const std::uint64_t h = mix64(key ^ mix64(row * full_cols + col));
  constexpr std::uint32_t kLow = 1u << 18, kSpan = (1u << 24) - kLow;  // [2^18, 2^24): [1/64, 1)
  const std::uint32_t mantissa = kLow + static_cast<std::uint32_t>(h >> 40) % kSpan;
  const float magnitude = scale * (static_cast<float>(mantissa) * (1.0f / 16777216.0f));
  return (h & 1u) ? -magnitude : magnitude;
}

// Token id `i` of the seeded random prompt: uniform in [0, vocab).
GPB_HOST_DEVICE inline std::int32_t token_value(std::uint64_t seed, std::uint64_t i, int vocab) {
  return static_cast<std::int32_t>(mix64(mix64(seed) ^ (i * 0xD1B54A32D192ED03ull)) %
                                   static_cast<std::uint64_t>(vocab));
}

// Fills the [rows, cols] block (row-major, `pitch` elements from one row to the next; 0: cols)
// of the full weight `weight_id` whose top-left corner is (row0, col0): ptr[r*pitch + c] =
// weight_value(seed, weight_id, row0 + r, col0 + c, full_cols, scale) rounded to `dtype`, and
// zeros in the pitch - cols elements after each row. Never zero inside the block: InputError
// when scale is not positive and finite or scale/64 rounds to zero in `dtype`, the block
// exceeds full_cols, or pitch is below cols.
void fill_weight(void* ptr, std::int64_t rows, int cols, std::int64_t row0, std::int64_t col0,
                 std::int64_t full_cols, std::uint64_t seed, std::uint64_t weight_id, float scale,
                 ActDtype dtype, cudaStream_t stream, std::int64_t pitch = 0);
// ptr[i] = 1 over n elements (norm weights).
void fill_ones(void* ptr, std::int64_t n, ActDtype dtype, cudaStream_t stream);
// ids[i] = token_value(seed, i, vocab) over n int32 elements. InputError when vocab <= 0.
void fill_tokens(std::int32_t* ids, std::int64_t n, int vocab, std::uint64_t seed,
                 cudaStream_t stream);

}  // namespace gpubench

// ---------------------------------------------------------------------------------------------
// CUDA-side helpers shared by transformer_norm.cu and transformer_pointwise.cu: conversions,
// 16-byte packs of V elements, and the dtype dispatch of the launchers.
#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gpubench/kernels/device_common.cuh"

namespace gpubench::transformer_detail {

// Conversions: one definition for every kernel (device_common.cuh).
using gpubench::from_float;
using gpubench::to_float;

// V consecutive elements moved as one access (V = 8: 16 bytes; V = 1: the element path).
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <int V, class T>
__device__ __forceinline__ void load(const T* p, float (&out)[V]) {
  const Pack<T, V> pack = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
  for (int k = 0; k < V; ++k) out[k] = to_float(pack.v[k]);
}

template <int V, class T>
__device__ __forceinline__ void store(T* p, const float (&in)[V]) {
  Pack<T, V> pack;
#pragma unroll
  for (int k = 0; k < V; ++k) pack.v[k] = from_float<T>(in[k]);
  *reinterpret_cast<Pack<T, V>*>(p) = pack;
}

// Elements per 16-byte access.
inline constexpr int kVec = 8;

inline bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

// Calls f(T{}) with T the storage type of `dtype`.
template <class F>
void dispatch(ActDtype dtype, F&& f) {
  if (dtype == ActDtype::BF16) {
    f(__nv_bfloat16{});
  } else {
    f(__half{});
  }
}

}  // namespace gpubench::transformer_detail
#endif
