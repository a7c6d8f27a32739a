#pragma once
// Attention kernels' launchers: a plain reference (fp32 math, one key at a time; the yardstick
// the fast kernels are checked against) and decode attention over a KV cache, split along the
// context for long contexts. bf16 or fp16 storage, fp32 accumulation; grouped-query heads
// (query head h reads KV head h / (heads / kv_heads)).
//
// Layouts (row-major, strides in elements so Q, K, V may live inside a fused qkv buffer):
//   q:   [batch * q_tokens, q_stride], head h of token t at q + (b*q_tokens + t)*q_stride + h*d
//   k,v: [batch, max_context, kv_stride] caches, head g of position p at
//        k + (b*max_context + p)*kv_stride + g*d
//   out: [batch * q_tokens, heads * d]
// Query token t of batch b sits at position q_pos0 + t and attends (causally) to positions
// 0 .. q_pos0 + t of its cache.
#include <cuda_runtime.h>

#include <cstdint>

namespace gpubench {

enum class AttnDtype { BF16, F16 };

struct AttentionArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  AttnDtype dtype = AttnDtype::BF16;
  int batch = 1, q_tokens = 1, heads = 1, kv_heads = 1, head_dim = 128;
  int q_pos0 = 0;       // position of the first query token (prefill 0; decode = context)
  int max_context = 1;  // rows per batch of the K/V caches
  std::int64_t q_stride = 0, kv_stride = 0;  // 0: heads*head_dim / kv_heads*head_dim
  float scale = 0;                           // 0: 1/sqrt(head_dim)
  // Decode only: the step's new key and value (row b at k_new + b * q_stride and v_new + b *
  // q_stride: the k and v heads of the fused qkv buffer), which decode_attention writes into row
  // q_pos0 of each sequence's caches before it reads that row, so that no kernel before it has
  // to. With `rope` the new key and q (read from `q` as they are, not written back) are rotated
  // on the way: RoPE at position q_pos0 with rope_theta, bit for bit as qkv_to_cache does. Needs
  // decode_append_supported().
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  bool rope = false;
  float rope_theta = 10000.0f;
  // Decode only: the merge kernel lets the next kernel on the stream launch at the merge's start
  // (programmatic dependent launch), so that a next kernel whose weights do not depend on
  // attention (the fused decode step's output GEMV) loads them while attention runs. It still
  // reads attention's output only after the merge. The split kernel lets the merge kernel, and
  // through it the next kernel, launch only once each block has 8 steps of its chunk left (at its
  // start for chunks of at most 8 steps): long chunks then have the next kernel load its first
  // rows in attention's second half rather than beside all of it.
  bool merge_launches_next = false;
  // Decode only: the cache rows before q_pos0 are not written by any kernel that may still run on
  // the stream (in a captured decode step only earlier steps and the prefill wrote them, before
  // the graph's launch), so blocks whose chunk ends before q_pos0 load their first steps of the
  // cache before waiting for the previous kernel (programmatic dependent launch), while it drains.
  // The new row, q and everything else are read after the wait. Leave false right after writing
  // the caches' earlier rows on the stream.
  bool cache_ready = false;
};

// `a` with its defaults filled in: strides from the head counts, scale 1/sqrt(head_dim).
AttentionArgs resolved_attention_args(AttentionArgs a);

// Plain causal attention, fp32 math: one block per query token and head walks the keys one at a
// time with an online softmax. Slow; for checks only. Any head_dim up to 256.
void attention_reference(const AttentionArgs& a, cudaStream_t stream);

// Prefill: causal attention of q_tokens queries per sequence (positions q_pos0 ..) over keys
// 0 .. q_pos0 + q_tokens - 1, fused in the flash-attention way: tiles of 128 queries x 64 keys on
// tensor cores (mma.sync m16n8k16, fp32 accumulation), K/V tiles double-buffered with cp.async,
// an online softmax in registers, no L x L matrix in memory. head_dim 64 or 128; strides
// multiples of 8 elements and 16-byte aligned pointers; heads a multiple of kv_heads and
// q_pos0 + q_tokens <= max_context (else GpuError).
void prefill_attention(const AttentionArgs& a, cudaStream_t stream);

// Decode: one query token per sequence (q_tokens == 1) over positions 0..q_pos0. The context is
// cut into `splits` chunks (0: chosen from the context and the SM count) whose partial softmax
// results are merged by a second kernel. `workspace` holds decode_workspace_bytes(a, splits).
// head_dim 64 or 128.
int decode_attention_splits(const AttentionArgs& a, int sm_count);
// Whether decode_attention_splits' chunks fill a whole wave of the split kernel (the context is
// long enough for the wave's chunk count; false where a wave would need chunks shorter than the
// kernel's smallest).
bool decode_attention_fills_wave(const AttentionArgs& a, int sm_count);
std::size_t decode_workspace_bytes(const AttentionArgs& a, int splits);
void decode_attention(const AttentionArgs& a, int splits, void* workspace, cudaStream_t stream);
// Whether decode_attention can take the step's new key and value (k_new, v_new): query heads a
// multiple of KV heads, at most 8 per KV head (each KV head's cache row is then written by one
// block).
bool decode_append_supported(const AttentionArgs& a);

}  // namespace gpubench
