// The training cost model (training.hpp): a microbatch's FLOPs forward and backward through a
// run of half-layers, the activations it saves for its backward, the bytes it hands on.
#include "gpubench/model/training.hpp"

#include <fmt/format.h>

#include "gpubench/core/errors.hpp"

namespace gpubench::model {

std::vector<Linear> layer_linears(const ModelConfig& m) {
  const std::int64_t H = m.hidden_size, Q = m.q_dim(), KV = m.kv_dim(), I = m.intermediate_size;
  return {{"qkv", Q + 2 * KV, H},
          {"attn_out", H, Q},
          {m.gated_mlp ? "mlp_gate_up" : "mlp_up", m.gated_mlp ? 2 * I : I, H},
          {"mlp_down", H, I}};
}

SavedRow saved_row(const ModelConfig& m) {
  const std::int64_t H = m.hidden_size, Q = m.q_dim(), KV = m.kv_dim(), I = m.intermediate_size;
  SavedRow r{};
  r.xn = H;
  r.qkv = 2 * H;
  r.attn = r.qkv + Q + 2 * KV;
  r.attention = r.attn + Q;
  r.up = 2 * H;
  r.act = r.up + (m.gated_mlp ? 2 * I : I);
  r.mlp = r.act + I;
  return r;
}

StageWork stage_work(const ModelConfig& m, int layers, bool last, std::int64_t sequences,
                     std::int64_t seq_len, int elem_bytes) {
  if (layers < 1) throw InputError(fmt::format("stage work: layers {} must be >= 1", layers));
  return stage_work_blocks(m, 0, 2 * layers, last, sequences, seq_len, elem_bytes);
}

StageWork stage_work_blocks(const ModelConfig& m, int first_block, int blocks, bool last,
                            std::int64_t sequences, std::int64_t seq_len, int elem_bytes) {
  if (first_block < 0 || blocks < 1 || sequences < 1 || seq_len < 1)
    throw InputError(fmt::format(
        "stage work: first block {}, blocks {}, sequences {} and seq_len {} out of range",
        first_block, blocks, sequences, seq_len));
  if (elem_bytes != 1 && elem_bytes != 2 && elem_bytes != 4)
    throw InputError(fmt::format("stage work: element size {} is not 1, 2 or 4", elem_bytes));
  // Attention halves are the even blocks.
  const int attention_halves = (first_block + blocks + 1) / 2 - (first_block + 1) / 2;
  const int mlp_halves = blocks - attention_halves;
  const double rows = static_cast<double>(sequences) * static_cast<double>(seq_len);
  const std::int64_t H = m.hidden_size;
  const std::vector<Linear> linears = layer_linears(m);  // qkv, attn_out | mlp up, mlp down
  auto flops = [&](std::size_t a, std::size_t b) {
    double f = 0;
    for (std::size_t i = a; i < b; ++i) f += 2.0 * rows * linears[i].out * linears[i].in;
    return f;
  };
  // Causal pairs per sequence: each query attends to itself and every earlier token.
  const double pairs = static_cast<double>(seq_len) * static_cast<double>(seq_len + 1) / 2.0;
  const double attention = 4.0 * static_cast<double>(sequences) * m.num_heads * m.head_dim * pairs;
  StageWork w;
  w.forward_gemm_flops = attention_halves * flops(0, 2) + mlp_halves * flops(2, linears.size());
  w.attention_flops = attention_halves * attention;
  w.backward_attention_flops = 2.5 * w.attention_flops;
  w.forward_flops = w.forward_gemm_flops + w.attention_flops;
  w.backward_flops = 2.0 * w.forward_gemm_flops + w.backward_attention_flops;
  if (last) {  // the LM head over every position, forward and its two gradients
    const double head = 2.0 * rows * m.vocab_size * H;
    w.forward_flops += head;
    w.backward_flops += 2.0 * head;
  }

  // Saved per row: saved_row's, each kind of half.
  const SavedRow row = saved_row(m);
  double saved = rows *
                 static_cast<double>(attention_halves * row.attention + mlp_halves * row.mlp) *
                 elem_bytes;
  if (last) saved += 2.0 * rows * static_cast<double>(H) * elem_bytes;  // final norm in and out
  w.saved_bytes = static_cast<std::uint64_t>(saved);
  w.transfer_bytes = static_cast<std::uint64_t>(rows * static_cast<double>(H) * elem_bytes);
  return w;
}

}  // namespace gpubench::model
