// RoPE, activations, bias/residual adds, the embedding lookup and the seeded fills of the
// transformer engine: grid-stride kernels, fp32 math, one rounding per stored element.
#include <algorithm>
#include <cmath>
#include <string>

#include "gpubench/core/errors.hpp"
#include "gpubench/kernels/pdl.cuh"
#include "gpubench/kernels/transformer.cuh"

namespace gpubench {

using namespace transformer_detail;

namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 1 << 16;  // grid-stride loops cover the rest

unsigned grid_for(std::int64_t work_items, std::int64_t max_blocks = kMaxBlocks) {
  return static_cast<unsigned>(
      std::clamp<std::int64_t>((work_items + kThreads - 1) / kThreads, 1, max_blocks));
}

__device__ __forceinline__ std::int64_t thread_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t grid_threads() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

// ---------------------------------------------------------------------------------------------
// Element-wise maps: out[i] = op(a[i], b[i]) (b may be null: op sees 0), V elements per access
// for the bulk, then the n % V tail one by one.

struct GeluErf {
  __device__ float operator()(float x, float) const { return gelu_erf(x); }
};
struct GeluTanh {
  __device__ float operator()(float x, float) const { return gelu_tanh(x); }
};
struct Relu {
  __device__ float operator()(float x, float) const { return fmaxf(x, 0.0f); }
};
struct Add {
  __device__ float operator()(float x, float y) const { return x + y; }
};

template <class T, int V, class Op>
__global__ void map_kernel(T* out, const T* a, const T* b, std::int64_t n, Op op) {
  pdl_start();
  const std::int64_t vecs = n / V;
  for (std::int64_t i = thread_index(); i < vecs; i += grid_threads()) {
    float x[V], y[V] = {};
    load<V>(a + i * V, x);
    if (b != nullptr) load<V>(b + i * V, y);
#pragma unroll
    for (int k = 0; k < V; ++k) x[k] = op(x[k], y[k]);
    store<V>(out + i * V, x);
  }
  for (std::int64_t i = vecs * V + thread_index(); i < n; i += grid_threads()) {
    const float y = b != nullptr ? to_float(b[i]) : 0.0f;
    out[i] = from_float<T>(op(to_float(a[i]), y));
  }
}

template <class Op>
void launch_map(void* out, const void* a, const void* b, std::int64_t n, Op op, ActDtype dtype,
                cudaStream_t stream) {
  if (n <= 0) return;
  const bool vec = aligned16(out) && aligned16(a) && (!b || aligned16(b));
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto o = static_cast<T*>(out);
    auto x = static_cast<const T*>(a);
    auto y = static_cast<const T*>(b);
    if (vec) {
      launch_pdl(map_kernel<T, kVec, Op>, grid_for(n / kVec + 1), kThreads, 0, stream, o, x, y, n,
                 op);
    } else {
      launch_pdl(map_kernel<T, 1, Op>, grid_for(n), kThreads, 0, stream, o, x, y, n, op);
    }
  });
  GPB_CHECK_LAUNCH();
}

// inout[i] += slots[k * stride + i] for k < count, V elements per access for the bulk.
template <class T, int V>
__global__ void sum_slots_kernel(T* inout, const T* slots, int count, std::int64_t stride,
                                 std::int64_t n) {
  pdl_start();
  const std::int64_t vecs = n / V;
  for (std::int64_t i = thread_index(); i < vecs; i += grid_threads()) {
    float x[V], y[V];
    load<V>(inout + i * V, x);
    for (int k = 0; k < count; ++k) {
      load<V>(slots + k * stride + i * V, y);
#pragma unroll
      for (int e = 0; e < V; ++e) x[e] += y[e];
    }
    store<V>(inout + i * V, x);
  }
  for (std::int64_t i = vecs * V + thread_index(); i < n; i += grid_threads()) {
    float x = to_float(inout[i]);
    for (int k = 0; k < count; ++k) x += to_float(slots[k * stride + i]);
    inout[i] = from_float<T>(x);
  }
}

// ---------------------------------------------------------------------------------------------
// Row-structured element-wise kernels: V elements per access when rows are multiples of V.

template <class T, int V>
__global__ void add_bias_kernel(T* inout, const T* bias, std::int64_t rows, int cols) {
  pdl_start();
  const std::int64_t vecs = rows * cols / V;
  for (std::int64_t i = thread_index(); i < vecs; i += grid_threads()) {
    const int c = static_cast<int>((i * V) % cols);
    float x[V], b[V];
    load<V>(inout + i * V, x);
    load<V>(bias + c, b);
#pragma unroll
    for (int k = 0; k < V; ++k) x[k] += b[k];
    store<V>(inout + i * V, x);
  }
}

template <class T, int V>
__global__ void swiglu_kernel(T* out, const T* gate_up, std::int64_t tokens, int intermediate) {
  pdl_start();
  const std::int64_t per_row = intermediate / V;
  for (std::int64_t i = thread_index(); i < tokens * per_row; i += grid_threads()) {
    const std::int64_t t = i / per_row;
    const std::int64_t j = (i % per_row) * V;
    const T* row = gate_up + t * 2 * intermediate;
    float g[V], u[V];
    load<V>(row + j, g);
    load<V>(row + intermediate + j, u);
#pragma unroll
    for (int k = 0; k < V; ++k) g[k] = silu(g[k]) * u[k];
    store<V>(out + t * intermediate + j, g);
  }
}

// With positions_out: row t's position is pos0 + t % seq_tokens, written to positions_out[t]
// (the step's positions, for the kernels after it) instead of read from `positions`.
template <class T, int V>
__global__ void embedding_kernel(T* out, const T* table, const std::int32_t* token_ids,
                                 std::int64_t tokens, int hidden, const T* position_table,
                                 const std::int32_t* positions, std::int32_t* positions_out,
                                 int seq_tokens, int pos0) {
  pdl_start();
  if (positions_out != nullptr)
    for (std::int64_t i = thread_index(); i < tokens; i += grid_threads())
      positions_out[i] = pos0 + static_cast<int>(i % seq_tokens);
  const std::int64_t per_row = hidden / V;
  for (std::int64_t i = thread_index(); i < tokens * per_row; i += grid_threads()) {
    const std::int64_t t = i / per_row;
    const std::int64_t j = (i % per_row) * V;
    float x[V];
    load<V>(table + static_cast<std::int64_t>(token_ids[t]) * hidden + j, x);
    if (position_table != nullptr) {
      float p[V];
      const std::int64_t pos = positions_out != nullptr ? pos0 + t % seq_tokens
                                                        : static_cast<std::int64_t>(positions[t]);
      load<V>(position_table + pos * hidden + j, p);
#pragma unroll
      for (int k = 0; k < V; ++k) x[k] += p[k];
    }
    store<V>(out + t * hidden + j, x);
  }
}

// ---------------------------------------------------------------------------------------------
// RoPE: one thread per (token, head, pair i). Each block first computes inv_freq[i] for its
// head_dim into shared memory (rope_inv_freq, device_common.cuh: the arithmetic every rotating
// kernel shares, decode attention's included).

template <class T>
__global__ void rope_kernel(T* q, T* k, const std::int32_t* positions, std::int64_t tokens,
                            int num_heads, int num_kv_heads, int head_dim, std::int64_t q_stride,
                            std::int64_t k_stride, double log2_theta) {
  __shared__ float inv_freq[kMaxRopeHeadDim / 2];
  const int half = head_dim / 2;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    inv_freq[i] = rope_inv_freq(i, head_dim, log2_theta);
  }
  __syncthreads();

  const int heads = num_heads + num_kv_heads;
  const std::int64_t pairs = tokens * heads * half;
  for (std::int64_t idx = thread_index(); idx < pairs; idx += grid_threads()) {
    const int i = static_cast<int>(idx % half);
    const int head = static_cast<int>((idx / half) % heads);
    const std::int64_t t = idx / half / heads;
    T* x = head < num_heads ? q + t * q_stride + head * head_dim
                            : k + t * k_stride + (head - num_heads) * head_dim;
    float cos_a, sin_a, y1, y2;
    rope_angle(positions[t], inv_freq[i], cos_a, sin_a);
    rope_rotate(to_float(x[i]), to_float(x[i + half]), cos_a, sin_a, y1, y2);
    x[i] = from_float<T>(y1);
    x[i + half] = from_float<T>(y2);
  }
}

// One work item: 8 rotation pairs (elements c..c+7 and c+half..c+half+7) of one head of one
// token; q heads are rotated in place, k heads rotated into the cache, v heads copied (their
// items cover the same element ranges, unrotated). 16-byte accesses when head_dim/2 is a
// multiple of 8, else one pair at a time (kChunk 1).
template <class T, int kChunk>
__global__ void qkv_to_cache_kernel(T* qkv, std::int64_t tokens, int tokens_per_seq, int num_heads,
                                    int num_kv_heads, int head_dim, std::int64_t qkv_stride,
                                    const std::int32_t* positions, bool rope, double log2_theta,
                                    T* k_cache, T* v_cache, std::int64_t max_context,
                                    std::int64_t kv_stride) {
  pdl_start();
  __shared__ float inv_freq[kMaxRopeHeadDim / 2];
  const int half = head_dim / 2;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    inv_freq[i] = rope_inv_freq(i, head_dim, log2_theta);
  }
  __syncthreads();
  const int heads = num_heads + 2 * num_kv_heads;
  const int chunks = half / kChunk;
  const std::int64_t items = tokens * heads * chunks;
  for (std::int64_t idx = thread_index(); idx < items; idx += grid_threads()) {
    const int c = static_cast<int>(idx % chunks) * kChunk;
    const int head = static_cast<int>((idx / chunks) % heads);
    const std::int64_t t = idx / chunks / heads;
    const int pos = positions[t];
    T* src = qkv + t * qkv_stride + static_cast<std::int64_t>(head) * head_dim;
    T* dst = src;  // q: in place
    if (head >= num_heads) {
      const std::int64_t row = (t / tokens_per_seq) * max_context + pos;
      const bool is_k = head < num_heads + num_kv_heads;
      const int g = head - num_heads - (is_k ? 0 : num_kv_heads);
      dst = (is_k ? k_cache : v_cache) + row * kv_stride + static_cast<std::int64_t>(g) * head_dim;
      if (!is_k || !rope) {  // v (or k without RoPE): copied
        if constexpr (kChunk == 8) {
          *reinterpret_cast<uint4*>(dst + c) = *reinterpret_cast<const uint4*>(src + c);
          *reinterpret_cast<uint4*>(dst + c + half) =
              *reinterpret_cast<const uint4*>(src + c + half);
        } else {
          dst[c] = src[c];
          dst[c + half] = src[c + half];
        }
        continue;
      }
    } else if (!rope) {
      continue;  // q without RoPE stays as it is
    }
    float x1[kChunk], x2[kChunk];
    load<kChunk>(src + c, x1);
    load<kChunk>(src + c + half, x2);
    float y1[kChunk], y2[kChunk];
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      float cos_a, sin_a;
      rope_angle(pos, inv_freq[c + j], cos_a, sin_a);
      rope_rotate(x1[j], x2[j], cos_a, sin_a, y1[j], y2[j]);
    }
    store<kChunk>(dst + c, y1);
    store<kChunk>(dst + c + half, y2);
  }
}

// ---------------------------------------------------------------------------------------------
// Fills

template <class T>
__global__ void fill_weight_kernel(T* ptr, std::int64_t rows, int cols, std::int64_t pitch,
                                   std::int64_t row0, std::int64_t col0, std::int64_t full_cols,
                                   std::uint64_t seed, std::uint64_t weight_id, float scale) {
  for (std::int64_t i = thread_index(); i < rows * pitch; i += grid_threads()) {
    const std::int64_t r = i / pitch, c = i % pitch;
    ptr[i] =
        c < cols
            ? from_float<T>(weight_value(seed, weight_id, row0 + r, col0 + c, full_cols, scale))
            : from_float<T>(0.0f);
  }
}

template <class T>
__global__ void fill_ones_kernel(T* ptr, std::int64_t n) {
  for (std::int64_t i = thread_index(); i < n; i += grid_threads()) ptr[i] = from_float<T>(1.0f);
}

__global__ void fill_tokens_kernel(std::int32_t* ids, std::int64_t n, int vocab,
                                   std::uint64_t seed) {
  for (std::int64_t i = thread_index(); i < n; i += grid_threads()) {
    ids[i] = token_value(seed, i, vocab);
  }
}

// Smallest magnitude fill_weight writes, rounded to the storage type, is not zero.
bool min_weight_representable(float scale, ActDtype dtype) {
  const float smallest = scale / 64.0f;
  return dtype == ActDtype::BF16 ? __bfloat162float(__float2bfloat16(smallest)) > 0.0f
                                 : __half2float(__float2half(smallest)) > 0.0f;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Launchers

void rope(void* q, void* k, const std::int32_t* positions, std::int64_t tokens, int num_heads,
          int num_kv_heads, int head_dim, std::int64_t q_stride, std::int64_t k_stride, float theta,
          ActDtype dtype, cudaStream_t stream) {
  if (head_dim <= 0 || head_dim % 2 != 0 || head_dim > kMaxRopeHeadDim) {
    throw InputError("rope: head_dim " + std::to_string(head_dim) + " must be even and at most " +
                     std::to_string(kMaxRopeHeadDim));
  }
  const double log2_theta = rope_log2_theta(theta, "rope");
  if (k == nullptr) num_kv_heads = 0;
  if (q_stride < static_cast<std::int64_t>(num_heads) * head_dim ||
      k_stride < static_cast<std::int64_t>(num_kv_heads) * head_dim) {
    throw InputError("rope: a row stride is shorter than its heads");
  }
  const std::int64_t pairs = tokens * (num_heads + num_kv_heads) * (head_dim / 2);
  if (pairs <= 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    // At most ~a device's worth of resident blocks: each computes the inv_freq table once.
    rope_kernel<T><<<grid_for(pairs, 2048), kThreads, 0, stream>>>(
        static_cast<T*>(q), static_cast<T*>(k), positions, tokens, num_heads, num_kv_heads,
        head_dim, q_stride, k_stride, log2_theta);
  });
  GPB_CHECK_LAUNCH();
}

void qkv_to_cache(void* qkv, std::int64_t tokens, int tokens_per_seq, int num_heads,
                  int num_kv_heads, int head_dim, std::int64_t qkv_stride,
                  const std::int32_t* positions, bool rope, float theta, void* k_cache,
                  void* v_cache, std::int64_t max_context, std::int64_t kv_stride, ActDtype dtype,
                  cudaStream_t stream) {
  if (head_dim <= 0 || head_dim % 2 != 0 || head_dim > kMaxRopeHeadDim)
    throw InputError("qkv_to_cache: head_dim " + std::to_string(head_dim) +
                     " must be even and at most " + std::to_string(kMaxRopeHeadDim));
  const double log2_theta = rope ? rope_log2_theta(theta, "qkv_to_cache") : 0.0;
  if (tokens_per_seq < 1 ||
      qkv_stride < static_cast<std::int64_t>(num_heads + 2 * num_kv_heads) * head_dim)
    throw InputError("qkv_to_cache: tokens_per_seq below 1 or a row shorter than its heads");
  const std::int64_t kv_dim = static_cast<std::int64_t>(num_kv_heads) * head_dim;
  if (kv_stride == 0) kv_stride = kv_dim;
  if (kv_stride < kv_dim)
    throw InputError("qkv_to_cache: cache row pitch " + std::to_string(kv_stride) +
                     " below its KV heads' " + std::to_string(kv_dim) + " elements");
  if (tokens <= 0) return;
  const int half = head_dim / 2;
  const bool vec = half % 8 == 0 && qkv_stride % 8 == 0 && kv_stride % 8 == 0 && aligned16(qkv) &&
                   aligned16(k_cache) && aligned16(v_cache);
  const std::int64_t heads = num_heads + 2 * num_kv_heads;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto* x = static_cast<T*>(qkv);
    auto* kc = static_cast<T*>(k_cache);
    auto* vc = static_cast<T*>(v_cache);
    if (vec)
      launch_pdl(qkv_to_cache_kernel<T, 8>, grid_for(tokens * heads * (half / 8), 4096), kThreads,
                 0, stream, x, tokens, tokens_per_seq, num_heads, num_kv_heads, head_dim,
                 qkv_stride, positions, rope, log2_theta, kc, vc, max_context, kv_stride);
    else
      launch_pdl(qkv_to_cache_kernel<T, 1>, grid_for(tokens * heads * half, 4096), kThreads, 0,
                 stream, x, tokens, tokens_per_seq, num_heads, num_kv_heads, head_dim, qkv_stride,
                 positions, rope, log2_theta, kc, vc, max_context, kv_stride);
  });
  GPB_CHECK_LAUNCH();
}

void swiglu(void* out, const void* gate_up, std::int64_t tokens, int intermediate, ActDtype dtype,
            cudaStream_t stream) {
  if (tokens <= 0 || intermediate <= 0) return;
  const bool vec = intermediate % kVec == 0 && aligned16(out) && aligned16(gate_up);
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto o = static_cast<T*>(out);
    auto gu = static_cast<const T*>(gate_up);
    const std::int64_t n = tokens * intermediate;
    if (vec) {
      launch_pdl(swiglu_kernel<T, kVec>, grid_for(n / kVec), kThreads, 0, stream, o, gu, tokens,
                 intermediate);
    } else {
      launch_pdl(swiglu_kernel<T, 1>, grid_for(n), kThreads, 0, stream, o, gu, tokens,
                 intermediate);
    }
  });
  GPB_CHECK_LAUNCH();
}

void gelu(void* out, const void* in, std::int64_t n, bool tanh_approx, ActDtype dtype,
          cudaStream_t stream) {
  if (tanh_approx) {
    launch_map(out, in, nullptr, n, GeluTanh{}, dtype, stream);
  } else {
    launch_map(out, in, nullptr, n, GeluErf{}, dtype, stream);
  }
}

void relu(void* out, const void* in, std::int64_t n, ActDtype dtype, cudaStream_t stream) {
  launch_map(out, in, nullptr, n, Relu{}, dtype, stream);
}

void residual_add(void* inout, const void* in, std::int64_t n, ActDtype dtype,
                  cudaStream_t stream) {
  launch_map(inout, inout, in, n, Add{}, dtype, stream);
}

void sum_slots(void* inout, const void* slots, int count, std::int64_t slot_stride, std::int64_t n,
               ActDtype dtype, cudaStream_t stream) {
  if (n <= 0 || count <= 0) return;
  const bool vec = aligned16(inout) && aligned16(slots) && slot_stride % kVec == 0;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto x = static_cast<T*>(inout);
    auto s = static_cast<const T*>(slots);
    if (vec) {
      launch_pdl(sum_slots_kernel<T, kVec>, grid_for(n / kVec + 1), kThreads, 0, stream, x, s,
                 count, slot_stride, n);
    } else {
      launch_pdl(sum_slots_kernel<T, 1>, grid_for(n), kThreads, 0, stream, x, s, count, slot_stride,
                 n);
    }
  });
  GPB_CHECK_LAUNCH();
}

void add_bias(void* inout, const void* bias, std::int64_t rows, int cols, ActDtype dtype,
              cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const bool vec = cols % kVec == 0 && aligned16(inout) && aligned16(bias);
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto x = static_cast<T*>(inout);
    auto b = static_cast<const T*>(bias);
    const std::int64_t n = rows * cols;
    if (vec) {
      launch_pdl(add_bias_kernel<T, kVec>, grid_for(n / kVec), kThreads, 0, stream, x, b, rows,
                 cols);
    } else {
      launch_pdl(add_bias_kernel<T, 1>, grid_for(n), kThreads, 0, stream, x, b, rows, cols);
    }
  });
  GPB_CHECK_LAUNCH();
}

namespace {

void launch_embedding(void* out, const void* table, const std::int32_t* token_ids,
                      std::int64_t tokens, int hidden, const void* position_table,
                      const std::int32_t* positions, std::int32_t* positions_out, int seq_tokens,
                      int pos0, ActDtype dtype, cudaStream_t stream) {
  const bool vec = hidden % kVec == 0 && aligned16(out) && aligned16(table) &&
                   (!position_table || aligned16(position_table));
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto o = static_cast<T*>(out);
    auto tab = static_cast<const T*>(table);
    auto pos_tab = static_cast<const T*>(position_table);
    const std::int64_t n = tokens * hidden;
    if (vec) {
      launch_pdl(embedding_kernel<T, kVec>, grid_for(n / kVec), kThreads, 0, stream, o, tab,
                 token_ids, tokens, hidden, pos_tab, positions, positions_out, seq_tokens, pos0);
    } else {
      launch_pdl(embedding_kernel<T, 1>, grid_for(n), kThreads, 0, stream, o, tab, token_ids,
                 tokens, hidden, pos_tab, positions, positions_out, seq_tokens, pos0);
    }
  });
  GPB_CHECK_LAUNCH();
}

}  // namespace

void embedding_lookup(void* out, const void* table, const std::int32_t* token_ids,
                      std::int64_t tokens, int hidden, const void* position_table,
                      const std::int32_t* positions, ActDtype dtype, cudaStream_t stream) {
  if (tokens <= 0 || hidden <= 0) return;
  if (position_table != nullptr && positions == nullptr) {
    throw InputError("embedding_lookup: a position table needs positions");
  }
  launch_embedding(out, table, token_ids, tokens, hidden, position_table, positions, nullptr, 1, 0,
                   dtype, stream);
}

void embedding_step(void* out, const void* table, const std::int32_t* token_ids, int batch,
                    int tokens, int hidden, const void* position_table, int pos0,
                    std::int32_t* positions_out, ActDtype dtype, cudaStream_t stream) {
  if (batch <= 0 || tokens <= 0 || hidden <= 0) return;
  if (positions_out == nullptr) throw InputError("embedding_step: needs the positions' buffer");
  launch_embedding(out, table, token_ids, static_cast<std::int64_t>(batch) * tokens, hidden,
                   position_table, nullptr, positions_out, tokens, pos0, dtype, stream);
}

void fill_weight(void* ptr, std::int64_t rows, int cols, std::int64_t row0, std::int64_t col0,
                 std::int64_t full_cols, std::uint64_t seed, std::uint64_t weight_id, float scale,
                 ActDtype dtype, cudaStream_t stream, std::int64_t pitch) {
  if (pitch == 0) pitch = cols;
  if (pitch < cols)
    throw InputError("fill_weight: pitch " + std::to_string(pitch) + " is below the block's " +
                     std::to_string(cols) + " columns");
  if (!(scale > 0.0f) || !std::isfinite(scale) || !min_weight_representable(scale, dtype)) {
    throw InputError("fill_weight: scale " + std::to_string(scale) +
                     " must be positive and finite, with scale/64 above zero in " +
                     to_string(dtype));
  }
  if (row0 < 0 || col0 < 0 || col0 + cols > full_cols) {
    throw InputError("fill_weight: columns [" + std::to_string(col0) + ", " +
                     std::to_string(col0 + cols) + ") lie outside the weight's " +
                     std::to_string(full_cols) + " columns");
  }
  if (rows <= 0 || cols <= 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    fill_weight_kernel<T><<<grid_for(rows * pitch), kThreads, 0, stream>>>(
        static_cast<T*>(ptr), rows, cols, pitch, row0, col0, full_cols, seed, weight_id, scale);
  });
  GPB_CHECK_LAUNCH();
}

void fill_ones(void* ptr, std::int64_t n, ActDtype dtype, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    fill_ones_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(ptr), n);
  });
  GPB_CHECK_LAUNCH();
}

void fill_tokens(std::int32_t* ids, std::int64_t n, int vocab, std::uint64_t seed,
                 cudaStream_t stream) {
  if (vocab <= 0) throw InputError("fill_tokens: vocab " + std::to_string(vocab) + " is empty");
  if (n <= 0) return;
  fill_tokens_kernel<<<grid_for(n), kThreads, 0, stream>>>(ids, n, vocab, seed);
  GPB_CHECK_LAUNCH();
}

}  // namespace gpubench
