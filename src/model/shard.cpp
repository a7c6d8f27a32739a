// Tensor-parallel shards of the engine's model (Megatron style).
#include "gpubench/model/shard.hpp"

#include <fmt/format.h>

#include "gpubench/core/errors.hpp"

namespace gpubench::model {

std::string why_not_divisible(const ModelConfig& m, int t) {
  if (t < 1) return fmt::format("--tp: {} must be at least 1", t);
  if (m.num_heads % t != 0)
    return fmt::format("--tp: {} does not divide {}'s {} attention heads", t, m.name, m.num_heads);
  if (m.num_kv_heads % t != 0)
    return fmt::format(
        "--tp: {} does not divide {}'s {} KV heads (grouped-query attention: each rank holds "
        "whole KV heads, so {} KV heads cannot be split {} ways)",
        t, m.name, m.num_kv_heads, m.num_kv_heads, t);
  if (m.intermediate_size % t != 0)
    return fmt::format("--tp: {} does not divide {}'s intermediate size {}", t, m.name,
                       m.intermediate_size);
  return "";
}

ShardShape shard_shape(const ModelConfig& m, int t, int rank) {
  const std::string why = why_not_divisible(m, t);
  if (!why.empty()) throw InputError(why);
  if (rank < 0 || rank >= t)
    throw InputError(fmt::format("tp rank {} is outside 0..{}", rank, t - 1));
  ShardShape s;
  s.t = t;
  s.rank = rank;
  s.heads = m.num_heads / t;
  s.kv_heads = m.num_kv_heads / t;
  s.q_dim = s.heads * m.head_dim;
  s.kv_dim = s.kv_heads * m.head_dim;
  s.intermediate = m.intermediate_size / t;
  const std::int64_t q = m.q_dim(), kv = m.kv_dim(), I = m.intermediate_size, r = rank;
  s.qkv_rows = {
      {r * s.q_dim, s.q_dim}, {q + r * s.kv_dim, s.kv_dim}, {q + kv + r * s.kv_dim, s.kv_dim}};
  s.gate_up_rows = {{r * s.intermediate, s.intermediate}};
  if (m.gated_mlp) s.gate_up_rows.push_back({I + r * s.intermediate, s.intermediate});
  s.out_cols = {r * s.q_dim, s.q_dim};
  s.down_cols = {r * s.intermediate, s.intermediate};
  return s;
}

}  // namespace gpubench::model
