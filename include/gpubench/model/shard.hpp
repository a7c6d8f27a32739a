#pragma once
// Tensor-parallel shards of the engine's model, Megatron style: which degrees split a model
// evenly, and what rank r of t holds of every weight of a decoder layer. Shared by the engine
// (which fills only its rank's slices of the full seeded weights) and `gpubench tp`.
#include <cstdint>
#include <string>
#include <vector>

#include "gpubench/model/presets.hpp"

namespace gpubench::model {

// Empty when `t` splits `m` evenly (heads, KV heads, intermediate); else why not, as one
// "--tp: ..." line (the engine and `gpubench tp` throw it as an InputError).
std::string why_not_divisible(const ModelConfig& m, int t);

// A contiguous range of rows (or columns) of a full weight: [start, start + count).
struct Range {
  std::int64_t start = 0, count = 0;
  bool operator==(const Range& o) const { return start == o.start && count == o.count; }
};

// What rank `rank` of `t` holds of one decoder layer, Megatron style. Column-parallel weights
// (qkv, gate_up / up) are split along their output rows; row-parallel ones (attention out, down)
// along their input columns, so the only communication is the sum of the row-parallel outputs.
// Ranges index the FULL fused weights of the engine's layout:
//   qkv     [q_dim + 2 kv_dim, hidden], q rows then k rows then v rows: three blocks
//           (q: r*q/t, k: q + r*kv/t, v: q + kv + r*kv/t; q/t, kv/t, kv/t rows)
//   gate_up [2I, hidden] gate rows then up rows (gated): two blocks (r*I/t and I + r*I/t, I/t
//           rows each); up [I, hidden] (not gated): one block
//   out     [hidden, q_dim]: columns r*q/t, q/t of them
//   down    [hidden, I]: columns r*I/t, I/t of them
// Biases: the qkv and up (gate_up) biases follow their rows (same ranges); the out and down
// biases are not split: they are added once, after the all-reduce (adding them on every rank
// before it would count them t times).
struct ShardShape {
  int t = 1, rank = 0;
  int heads = 0, kv_heads = 0;  // local attention and KV heads
  int q_dim = 0, kv_dim = 0;    // local heads x head_dim
  int intermediate = 0;         // local intermediate size
  std::vector<Range> qkv_rows;
  std::vector<Range> gate_up_rows;
  Range out_cols, down_cols;
};
// InputError when t does not split the model (why_not_divisible) or rank is not in 0..t-1.
ShardShape shard_shape(const ModelConfig& m, int t, int rank);

}  // namespace gpubench::model
