#pragma once
// The transformer cost model: FLOPs and HBM bytes of every operation of a decoder layer, the
// whole model's prefill or decode step, its memory plan, rooflines and the knees of a sweep. It is
// host-only arithmetic, so seqlen, tp and pp can compare what they measure with what the shapes
// allow, and skip points that cannot fit before touching the GPU.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpubench/model/presets.hpp"

namespace gpubench::model {

// Prefill: a prompt of `tokens` new tokens per sequence. Decode: one new token per sequence.
enum class Phase { Prefill, Decode };

enum class OpKind { Gemm, Attention, Norm, Rope, Activation, Residual, Embedding, LmHead };

// "prefill" / "decode"; "gemm", "attention", "norm", "rope", "activation", "residual",
// "embedding", "lm_head".
const char* to_string(Phase phase);
const char* to_string(OpKind kind);

// One operation of a forward step. `bytes` are the HBM bytes read plus written when the op
// streams its inputs, outputs and weights exactly once (no cache reuse across ops, no re-reads).
struct OpCost {
  std::string name;  // stable key for breakdowns: "input_norm", "qkv", "attention", ...
  OpKind kind = OpKind::Gemm;
  double flops = 0.0;
  double bytes = 0.0;
};

struct CostTotals {
  double flops = 0.0;
  double bytes = 0.0;
};

// The sums over `ops`.
CostTotals totals(const std::vector<OpCost>& ops);

// One decoder layer's operations, in order: "input_norm", "qkv" (with its bias if any),
// "qk_norm" (qwen3), "rope" (RoPE models), "attention", "attn_out", "attn_residual",
// "post_attn_norm", "mlp_gate_up" (gated) or "mlp_up", "mlp_act", "mlp_down", "mlp_residual".
//
// `context` is the number of tokens already in the KV cache of each sequence before this step.
//   Prefill: `tokens` new tokens per sequence attend causally to each other and to all `context`
//            cached ones (context 0 is a fresh prompt; > 0 is a chunk of a longer prompt).
//   Decode:  one new token per sequence attends to the `context` cached tokens and itself;
//            `tokens` is not used.
// GEMMs: FLOPs 2*M*N*K with M = batch x new tokens; bytes = weights + inputs + outputs (a bias
// is added in the GEMM's epilogue: M*N FLOPs and N weights more). Attention counts the FLOPs of
// QK^T and PV only (4 * batch * heads * head_dim * attended pairs, the causal half included), and
// its bytes are Q and O of the new tokens plus K and V of every attended token (the KV cache
// read). The new tokens' K and V are written once, by the op that produces them: that write is
// the cache append. Norms, RoPE, activations and residuals use small per-element FLOP counts
// (documented in cost.cpp); they matter for bytes, not FLOPs.
// InputError when batch <= 0, tokens <= 0 in prefill, context < 0 or elem_bytes not 1, 2 or 4.
std::vector<OpCost> layer_ops(const ModelConfig& model, Phase phase, long long batch,
                              long long tokens, long long context, int elem_bytes);

// A whole forward step: every layer, the embeddings, and the final norm and LM head for the last
// position of each sequence only (what generation needs).
struct ModelCost {
  int num_layers = 0;
  std::vector<OpCost> layer;           // one decoder layer: every layer costs the same
  std::vector<OpCost> outside_layers;  // "token_embedding", "position_embedding" (learned
                                       // positions), "final_norm", "lm_head"
  CostTotals total;                    // num_layers x layer + outside_layers
  CostTotals gemm;                     // Gemm and LmHead ops
  CostTotals attention;                // Attention ops
  CostTotals other;                    // norms, RoPE, activations, residuals, embeddings
};

// Same arguments and errors as layer_ops.
ModelCost model_cost(const ModelConfig& model, Phase phase, long long batch, long long tokens,
                     long long context, int elem_bytes);

// GPU memory one configuration needs, in bytes.
struct MemoryPlan {
  std::uint64_t weight_bytes = 0;      // params_total x elem_bytes
  std::uint64_t kv_cache_bytes = 0;    // 2 x layers x batch x max_context x kv_dim x elem_bytes
  std::uint64_t activation_bytes = 0;  // workspace of a prefill of max_context tokens
  std::uint64_t total_bytes = 0;
};

// Activations: the largest tensors live at once inside one layer during a prefill of
// max_context tokens: the residual stream, the norm output and the attention output
// (2 x hidden + max(hidden, q_dim)) plus the larger of the qkv output (q_dim + 2 kv_dim) and the
// MLP's intermediate tensors (2 x intermediate), all of batch x max_context rows. Attention is
// assumed flash-style (no L x L score matrix): its only scratch is one fp32 log-sum-exp per head
// and query row. The logits of the last position (batch x vocab) are added too.
// InputError when batch <= 0, max_context <= 0 or elem_bytes not 1, 2 or 4.
MemoryPlan memory_plan(const ModelConfig& model, long long batch, long long max_context,
                       int elem_bytes);

// Whether the plan fits in `headroom` (0..1] of `free_bytes`, leaving the rest to the CUDA
// context, library workspaces and fragmentation.
bool fits(const MemoryPlan& plan, std::uint64_t free_bytes, double headroom = 0.9);

// Empty when the plan fits; else one line for a skipped point: "needs 137.5 GiB (weights
// 128.5 GiB, KV cache 8 GiB, activations 1 GiB), GPU has 79 GiB free (90% usable)".
std::string why_not(const MemoryPlan& plan, std::uint64_t free_bytes, double headroom = 0.9);

// The roofline time of work: max(flops / peak, bytes / bandwidth), in seconds. peak in TFLOP/s
// (1e12), bandwidth in GB/s (1e9). InputError when peak or bandwidth is not positive.
double roofline_seconds(double flops, double bytes, double peak_tflops, double hbm_GBps);

// Achieved bandwidth (bytes / seconds) as a fraction of hbm_GBps: 1.0 is the HBM roofline,
// above 1 means the bytes were partly served from cache. InputError when seconds or hbm_GBps is
// not positive.
double decode_hbm_share(double bytes, double seconds, double hbm_GBps);

// Knees of a sweep over xs (ascending, positive; a and b or ys of the same length).
// The first x where a(x) >= b(x) ("attention time passes GEMM time"): xs[0] when it holds from
// the start, nothing when never, else the zero of a - b interpolated linearly in log2(x)
// between the last point below and the first point at or above.
std::optional<double> crossover(const std::vector<double>& xs, const std::vector<double>& a,
                                const std::vector<double>& b);

// Where y turns super-linear: the first xs[i] such that the log-log slope from xs[i] to
// xs[i+1] exceeds `slope`, i.e. the last point before growth gets steeper than x^slope. Nothing
// when no segment does. ys must be positive.
std::optional<double> superlinear_onset(const std::vector<double>& xs,
                                        const std::vector<double>& ys, double slope = 1.15);

}  // namespace gpubench::model
