// The engine's allocations, computed on the host: the same sizes the Transformer constructor
// allocates (a GPU test checks that memory() equals this), and the row pad of its weights.
#include <fmt/format.h>

#include <algorithm>

#include "gpubench/core/errors.hpp"
#include "gpubench/kernels/attention.cuh"
#include "gpubench/model/transformer.hpp"

namespace gpubench::model {

namespace {

// A row pad in elements: a non-negative multiple of 8.
int row_pad(long pad, const char* what) {
  if (pad < 0 || pad % 8 != 0)
    throw InputError(fmt::format(
        "engine: {} row pad {} must be a non-negative multiple of 8 elements", what, pad));
  return static_cast<int>(pad);
}

}  // namespace

int weight_row_pad(const EngineOptions& o) {
  return row_pad(o.weight_row_pad, "weight");
}

int kv_row_pad(const EngineOptions& o) {
  return row_pad(o.kv_row_pad, "KV cache");
}

int cache_sequences(const EngineOptions& o) {
  return o.cache_batch > 0 ? o.cache_batch : o.max_batch;
}

EngineMemory engine_memory(const ModelConfig& m, const EngineOptions& o,
                           std::size_t gemm_workspace_bytes) {
  const ShardShape sh = shard_shape(m, o.tp_size, o.tp_rank);
  const std::uint64_t e = act_bytes(o.dtype);
  const std::uint64_t H = m.hidden_size, V = m.vocab_size;
  const std::uint64_t Ql = sh.q_dim, KVl = sh.kv_dim, Il = sh.intermediate;
  const std::uint64_t up = m.gated_mlp ? 2 * Il : Il;
  const int rest = m.num_layers - std::max(o.first_layer, 0);
  const auto layers = static_cast<std::uint64_t>(o.layers > 0 ? std::min(o.layers, rest) : rest);
  const bool ln = m.norm == Norm::LayerNorm;
  const std::uint64_t norm = ln ? 2 * H : H;  // weight (and bias)

  // The embedding on the first stage (and on the last when the LM head is tied to it); the final
  // norm and an own LM head on the last.
  std::uint64_t w = 0;
  if (o.embed || (o.head && m.tie_word_embeddings)) w += V * H;
  if (o.embed && m.positions == Positions::Learned)
    w += static_cast<std::uint64_t>(std::max(m.max_positions, o.max_context)) * H;
  if (o.head) w += norm + (m.tie_word_embeddings ? 0 : V * H);
  // The four matrices' rows are padded (weight_row_pad).
  const std::uint64_t pad = static_cast<std::uint64_t>(weight_row_pad(o));
  std::uint64_t layer =
      2 * norm + (Ql + 2 * KVl) * (H + pad) + H * (Ql + pad) + up * (H + pad) + H * (Il + pad);
  if (m.qkv_bias) layer += Ql + 2 * KVl;
  if (m.qk_norm) layer += 2 * static_cast<std::uint64_t>(m.head_dim);
  if (m.out_bias) layer += H;
  if (m.mlp_bias) layer += up + H;
  w += layers * layer;

  EngineMemory mem;
  mem.weights = w * e;
  mem.kv_cache = 2 * layers * static_cast<std::uint64_t>(cache_sequences(o)) *
                 static_cast<std::uint64_t>(o.max_context) *
                 (KVl + static_cast<std::uint64_t>(kv_row_pad(o))) * e;
  const std::uint64_t rows =
      static_cast<std::uint64_t>(o.max_batch) * static_cast<std::uint64_t>(o.max_tokens);
  mem.activations = rows * (3 * H + Ql + 2 * KVl + Ql + up + Il) * e  // x h tmp qkv attn mlp act
                    + 2 * rows * sizeof(std::int32_t)                 // positions, token ids
                    + static_cast<std::uint64_t>(o.max_batch) * (H + V) * e;  // last rows, logits
  AttentionArgs probe;
  probe.batch = o.max_batch;
  probe.heads = sh.heads;
  probe.head_dim = m.head_dim;
  mem.workspace = decode_workspace_bytes(probe, 64) + gemm_workspace_bytes;
  return mem;
}

}  // namespace gpubench::model
