#pragma once
// The training cost model: what one microbatch's forward and backward through a run of decoder
// half-layers costs (FLOPs forward and backward, with real gradient GEMMs and attention's
// backward by a stand-in of 2.5x its forward FLOPs), the activations it keeps for its backward
// and the hidden states it hands on. Host-only arithmetic shared by pp's pipeline stages and
// dp's replicas; TrainStage (train_stage.hpp) lays its saved activations out by SavedRow.
#include <cstdint>
#include <string>
#include <vector>

#include "gpubench/kernels/transformer.cuh"  // ActDtype
#include "gpubench/model/presets.hpp"

namespace gpubench::model {

// A parameter of a training stage (TrainStage::params), in forward order: each block's input linear
// then its output linear, then the LM head. `unit`: the block's index in the stage (chunk after
// chunk), the head's is the number of blocks.
struct TrainParam {
  int unit = 0;
  std::int64_t out = 0, in = 0;
  std::int64_t elems() const { return out * in; }
};

// What a training step computes on: the model, the tokens of a sequence, the stored dtype.
struct TrainShape {
  ModelConfig model;
  std::int64_t seq_len = 1024;
  ActDtype dtype = ActDtype::BF16;
};

// A linear layer of a decoder layer: Y[rows, out] = X[rows, in] W^T.
struct Linear {
  std::string name;  // "qkv", "attn_out", "mlp_gate_up" (gated) or "mlp_up", "mlp_down"
  std::int64_t out = 0, in = 0;
};
// The decoder layer's linear layers in forward order (no tensor parallelism).
std::vector<Linear> layer_linears(const ModelConfig& m);

// One microbatch through `layers` decoder layers of a stage (plus, on the last stage, the final
// norm and the LM head of every position), rows = sequences x seq_len tokens in all
// (microbatch sequences x seq_len):
//   forward: 2 rows out in per linear, attention 4 x heads x head_dim x causal pairs;
//   backward: per linear the input gradient dX = dY W and the weight gradient dW = dY^T X, twice
//     the forward GEMM FLOPs; attention's backward stood in for by 2.5 x its forward FLOPs (a
//     flash-attention backward recomputes the scores and runs five GEMMs to the forward's two);
//   saved activations (what backward needs, kept from a microbatch's forward to its backward):
//     per layer the input of each linear (normed x, attention output, post-norm x, activation),
//     the inputs of the two norms (the layer input and the residual after attention), q, k, v
//     and the gate/up output; on the last stage the final norm's input and output;
//   transfer: the activations sent to the next stage (rows x hidden), or the gradient sent back.
// The LM head's forward and gradient FLOPs count on the last stage (2 rows vocab hidden, x3).
struct StageWork {
  double forward_flops = 0, backward_flops = 0;
  double forward_gemm_flops = 0, attention_flops = 0;  // parts of forward_flops
  double backward_attention_flops = 0;                 // the stand-in, part of backward_flops
  std::uint64_t saved_bytes = 0;                       // per microbatch in flight
  std::uint64_t transfer_bytes = 0;                    // per microbatch, each way
};
// (The first stage's embedding is a lookup: no FLOPs, and nothing saved.) InputError when
// layers < 1, sequences < 1, seq_len < 1 or elem_bytes not 1, 2 or 4.
StageWork stage_work(const ModelConfig& m, int layers, bool last, std::int64_t sequences,
                     std::int64_t seq_len, int elem_bytes);
// Offsets, in elements of one row, of what a half-layer saves for its backward, its input
// first: an attention half the layer input, its normed copy, q|k|v and the attention output; an
// MLP half the residual after attention, its normed copy, the gate|up (or up) output and the
// activation. A training stage's slabs are laid out by it, and stage_work_blocks counts by it.
struct SavedRow {
  std::int64_t attention, mlp;  // elements a row, each kind of half
  std::int64_t xn, qkv, attn;   // attention half (its input at 0)
  std::int64_t up, act;         // MLP half (its input at 0, its normed copy at xn)
  std::int64_t of(int block) const { return block % 2 == 0 ? attention : mlp; }
};
SavedRow saved_row(const ModelConfig& m);
// The same for `blocks` half-layers from block `first_block` on (see stage_blocks_from_costs):
// an attention half has qkv and the output projection, attention, and saves the layer input,
// the normed input, q k v and the attention output; an MLP half has the MLP's linears and saves
// the residual after attention, its normed copy, the gate/up output and the activation.
// stage_work(layers) is stage_work_blocks(0, 2 x layers). InputError also when first_block < 0
// or blocks < 1.
StageWork stage_work_blocks(const ModelConfig& m, int first_block, int blocks, bool last,
                            std::int64_t sequences, std::int64_t seq_len, int elem_bytes);

}  // namespace gpubench::model
