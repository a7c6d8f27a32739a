// The transformer cost model: per-operation FLOPs and HBM bytes of prefill and decode, the memory
// plan, rooflines and sweep knees, from the shapes alone (see cost.hpp for the conventions).
#include "gpubench/model/cost.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"

namespace gpubench::model {

namespace {

// FLOPs per element of the element-wise ops. They are small next to the GEMMs and attention and
// only keep the totals honest; these ops are bounded by bytes.
constexpr double kRmsNormFlops = 4.0;    // square, accumulate, scale by 1/rms, scale by weight
constexpr double kLayerNormFlops = 7.0;  // sum, centre, square, accumulate, normalize, scale, shift
constexpr double kRopeFlops = 3.0;       // each output: two products and a sum (sin/cos in-kernel)
constexpr double kResidualFlops = 1.0;
constexpr double kGateFlops = 1.0;  // act(gate) * up

double activation_flops(Activation activation) {
  switch (activation) {
    case Activation::Relu:
      return 1.0;
    case Activation::Silu:
      return 4.0;  // x / (1 + exp(-x)): negate, exp, add, divide
    case Activation::Gelu:
    case Activation::GeluTanh:
      return 8.0;  // cube, polynomial, tanh or erf, scale
  }
  return 0.0;
}

void check_elem_bytes(const ModelConfig& model, int elem_bytes) {
  if (elem_bytes != 1 && elem_bytes != 2 && elem_bytes != 4) {
    throw InputError(fmt::format("model '{}': element size must be 1, 2 or 4 bytes, got {}",
                                 model.name, elem_bytes));
  }
}

void check_batch(const ModelConfig& model, long long batch) {
  if (batch <= 0) {
    throw InputError(
        fmt::format("model '{}': batch size must be positive, got {}", model.name, batch));
  }
}

void check_step(const ModelConfig& model, Phase phase, long long batch, long long tokens,
                long long context, int elem_bytes) {
  check_batch(model, batch);
  if (phase == Phase::Prefill && tokens <= 0) {
    throw InputError(fmt::format("model '{}': prefill token count must be positive, got {}",
                                 model.name, tokens));
  }
  if (context < 0) {
    throw InputError(
        fmt::format("model '{}': context length must be >= 0, got {}", model.name, context));
  }
  check_elem_bytes(model, elem_bytes);
}

// Builds the op list of one step: `rows` = batch x new tokens, every size in elements.
class OpBuilder {
 public:
  OpBuilder(const ModelConfig& model, double rows, double elem_bytes)
      : model_(model), rows_(rows), elem_(elem_bytes) {}

  // Y[rows x out] = X[rows x in] W^T (+ bias).
  void gemm(const std::string& name, double out, double in, bool bias, OpKind kind = OpKind::Gemm) {
    double flops = 2.0 * rows_ * out * in;
    double elements = out * in + rows_ * in + rows_ * out;
    if (bias) {
      flops += rows_ * out;
      elements += out;
    }
    add(name, kind, flops, elements);
  }

  // A norm over `rows` rows of `width`, with `weights` parameters.
  void norm(const std::string& name, double rows, double width, double weights) {
    const double per_element = model_.norm == Norm::LayerNorm ? kLayerNormFlops : kRmsNormFlops;
    add(name, OpKind::Norm, per_element * rows * width, 2.0 * rows * width + weights);
  }

  void residual(const std::string& name) {
    const double h = model_.hidden_size;
    add(name, OpKind::Residual, kResidualFlops * rows_ * h, 3.0 * rows_ * h);
  }

  void add(const std::string& name, OpKind kind, double flops, double elements) {
    ops_.push_back({name, kind, flops, elements * elem_});
  }

  std::vector<OpCost> take() { return std::move(ops_); }

 private:
  const ModelConfig& model_;
  double rows_;
  double elem_;
  std::vector<OpCost> ops_;
};

double norm_params(const ModelConfig& model) {
  return model.norm == Norm::LayerNorm ? 2.0 * model.hidden_size : model.hidden_size;
}

// A byte count as an integer; InputError past what 64 bits hold.
std::uint64_t to_bytes(double bytes, const ModelConfig& model) {
  if (!(bytes < 1.8e19)) {
    throw InputError(
        fmt::format("model '{}': memory plan of {:.3g} bytes is too large", model.name, bytes));
  }
  return static_cast<std::uint64_t>(bytes);
}

void check_curve(const char* what, const std::vector<double>& xs, const std::vector<double>& ys) {
  if (ys.size() != xs.size()) {
    throw InputError(fmt::format("{}: {} x values but {} y values", what, xs.size(), ys.size()));
  }
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (!(xs[i] > 0.0) || (i > 0 && !(xs[i] > xs[i - 1]))) {
      throw InputError(fmt::format("{}: x values must be positive and ascending", what));
    }
  }
}

}  // namespace

const char* to_string(Phase phase) {
  return phase == Phase::Prefill ? "prefill" : "decode";
}

const char* to_string(OpKind kind) {
  switch (kind) {
    case OpKind::Gemm:
      return "gemm";
    case OpKind::Attention:
      return "attention";
    case OpKind::Norm:
      return "norm";
    case OpKind::Rope:
      return "rope";
    case OpKind::Activation:
      return "activation";
    case OpKind::Residual:
      return "residual";
    case OpKind::Embedding:
      return "embedding";
    case OpKind::LmHead:
      return "lm_head";
  }
  return "unknown";
}

CostTotals totals(const std::vector<OpCost>& ops) {
  CostTotals sum;
  for (const OpCost& op : ops) {
    sum.flops += op.flops;
    sum.bytes += op.bytes;
  }
  return sum;
}

std::vector<OpCost> layer_ops(const ModelConfig& model, Phase phase, long long batch,
                              long long tokens, long long context, int elem_bytes) {
  check_step(model, phase, batch, tokens, context, elem_bytes);
  const double new_tokens = phase == Phase::Decode ? 1.0 : static_cast<double>(tokens);
  const double b = static_cast<double>(batch);
  const double rows = b * new_tokens;
  const double h = model.hidden_size, ff = model.intermediate_size;
  const double q = model.q_dim(), kv = model.kv_dim();

  OpBuilder ops(model, rows, elem_bytes);
  ops.norm("input_norm", rows, h, norm_params(model));
  ops.gemm("qkv", q + 2.0 * kv, h, model.qkv_bias);
  if (model.qk_norm) {
    // Per-head RMSNorm of q and k, one head_dim weight vector each.
    const double elements = rows * (q + kv);
    ops.add("qk_norm", OpKind::Norm, kRmsNormFlops * elements,
            2.0 * elements + 2.0 * model.head_dim);
  }
  if (model.positions == Positions::Rope) {
    const double elements = rows * (q + kv);
    ops.add("rope", OpKind::Rope, kRopeFlops * elements, 2.0 * elements);
  }

  // Query-key pairs per sequence and head: every cached token, plus the causal triangle of the
  // new tokens (each attends to itself and the ones before it).
  const double ctx = static_cast<double>(context);
  const double pairs = new_tokens * ctx + new_tokens * (new_tokens + 1.0) / 2.0;
  const double attention_flops = 2.0 * 2.0 * b * model.num_heads * model.head_dim * pairs;
  const double attention_elements = 2.0 * rows * q + 2.0 * b * (ctx + new_tokens) * kv;
  ops.add("attention", OpKind::Attention, attention_flops, attention_elements);

  ops.gemm("attn_out", h, q, model.out_bias);
  ops.residual("attn_residual");
  ops.norm("post_attn_norm", rows, h, norm_params(model));
  const double act = activation_flops(model.activation);
  if (model.gated_mlp) {
    ops.gemm("mlp_gate_up", 2.0 * ff, h, model.mlp_bias);
    ops.add("mlp_act", OpKind::Activation, (act + kGateFlops) * rows * ff, 3.0 * rows * ff);
  } else {
    ops.gemm("mlp_up", ff, h, model.mlp_bias);
    ops.add("mlp_act", OpKind::Activation, act * rows * ff, 2.0 * rows * ff);
  }
  ops.gemm("mlp_down", h, ff, model.mlp_bias);
  ops.residual("mlp_residual");
  return ops.take();
}

ModelCost model_cost(const ModelConfig& model, Phase phase, long long batch, long long tokens,
                     long long context, int elem_bytes) {
  ModelCost cost;
  cost.num_layers = model.num_layers;
  cost.layer = layer_ops(model, phase, batch, tokens, context, elem_bytes);

  const double new_tokens = phase == Phase::Decode ? 1.0 : static_cast<double>(tokens);
  const double b = static_cast<double>(batch);
  const double rows = b * new_tokens;
  const double h = model.hidden_size, vocab = model.vocab_size;
  OpBuilder outside(model, b, elem_bytes);  // GEMM rows: the last position of each sequence
  outside.add("token_embedding", OpKind::Embedding, 0.0, 2.0 * rows * h);  // gather rows, write
  if (model.positions == Positions::Learned) {
    // The table rows of the new positions (shared by the batch) added to the token embeddings.
    outside.add("position_embedding", OpKind::Embedding, rows * h, new_tokens * h + 2.0 * rows * h);
  }
  outside.norm("final_norm", b, h, norm_params(model));
  outside.gemm("lm_head", vocab, h, false, OpKind::LmHead);
  cost.outside_layers = outside.take();

  const auto accumulate = [&](const std::vector<OpCost>& ops, double times) {
    for (const OpCost& op : ops) {
      CostTotals& group = op.kind == OpKind::Gemm || op.kind == OpKind::LmHead ? cost.gemm
                          : op.kind == OpKind::Attention                       ? cost.attention
                                                                               : cost.other;
      group.flops += times * op.flops;
      group.bytes += times * op.bytes;
      cost.total.flops += times * op.flops;
      cost.total.bytes += times * op.bytes;
    }
  };
  accumulate(cost.layer, model.num_layers);
  accumulate(cost.outside_layers, 1.0);
  return cost;
}

MemoryPlan memory_plan(const ModelConfig& model, long long batch, long long max_context,
                       int elem_bytes) {
  check_batch(model, batch);
  if (max_context <= 0) {
    throw InputError(fmt::format("model '{}': context length must be positive, got {}", model.name,
                                 max_context));
  }
  check_elem_bytes(model, elem_bytes);
  const double e = elem_bytes;
  const double b = static_cast<double>(batch), ctx = static_cast<double>(max_context);
  const double h = model.hidden_size, ff = model.intermediate_size;
  const double q = model.q_dim(), kv = model.kv_dim();

  const double weights = static_cast<double>(model.params_total()) * e;
  const double kv_cache = 2.0 * model.num_layers * b * ctx * kv * e;
  const double rows = b * ctx;
  const double per_row = 2.0 * h + std::max(h, q) + std::max(q + 2.0 * kv, 2.0 * ff);
  const double log_sum_exp = b * model.num_heads * ctx * 4.0;  // fp32, one per head and row
  const double logits = b * model.vocab_size * e;
  const double activations = rows * per_row * e + log_sum_exp + logits;

  MemoryPlan plan;
  plan.weight_bytes = to_bytes(weights, model);
  plan.kv_cache_bytes = to_bytes(kv_cache, model);
  plan.activation_bytes = to_bytes(activations, model);
  plan.total_bytes = to_bytes(weights + kv_cache + activations, model);
  return plan;
}

bool fits(const MemoryPlan& plan, std::uint64_t free_bytes, double headroom) {
  if (!(headroom > 0.0 && headroom <= 1.0)) {
    throw InputError(fmt::format("memory headroom must be in (0, 1], got {}", headroom));
  }
  return static_cast<double>(plan.total_bytes) <= headroom * static_cast<double>(free_bytes);
}

std::string why_not(const MemoryPlan& plan, std::uint64_t free_bytes, double headroom) {
  if (fits(plan, free_bytes, headroom)) return "";
  return fmt::format(
      "needs {} (weights {}, KV cache {}, activations {}), GPU has {} free ({:.0f}% usable)",
      format_bytes(plan.total_bytes), format_bytes(plan.weight_bytes),
      format_bytes(plan.kv_cache_bytes), format_bytes(plan.activation_bytes),
      format_bytes(free_bytes), headroom * 100.0);
}

double roofline_seconds(double flops, double bytes, double peak_tflops, double hbm_GBps) {
  if (!(peak_tflops > 0.0) || !(hbm_GBps > 0.0)) {
    throw InputError(
        fmt::format("roofline needs a positive peak and bandwidth, got {} TFLOP/s "
                    "and {} GB/s",
                    peak_tflops, hbm_GBps));
  }
  return std::max(flops / (peak_tflops * 1e12), bytes / (hbm_GBps * 1e9));
}

double decode_hbm_share(double bytes, double seconds, double hbm_GBps) {
  if (!(seconds > 0.0) || !(hbm_GBps > 0.0)) {
    throw InputError(
        fmt::format("HBM share needs a positive time and bandwidth, got {} s and "
                    "{} GB/s",
                    seconds, hbm_GBps));
  }
  return GBps(bytes, seconds) / hbm_GBps;
}

std::optional<double> crossover(const std::vector<double>& xs, const std::vector<double>& a,
                                const std::vector<double>& b) {
  check_curve("crossover", xs, a);
  check_curve("crossover", xs, b);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (!(a[i] >= b[i])) continue;
    if (i == 0) return xs[0];
    const double below = a[i - 1] - b[i - 1];  // < 0
    const double above = a[i] - b[i];          // >= 0
    if (above == 0.0) return xs[i];
    const double t = below / (below - above);
    const double lo = std::log2(xs[i - 1]), hi = std::log2(xs[i]);
    return std::exp2(lo + t * (hi - lo));
  }
  return std::nullopt;
}

std::optional<double> superlinear_onset(const std::vector<double>& xs,
                                        const std::vector<double>& ys, double slope) {
  check_curve("superlinear_onset", xs, ys);
  for (double y : ys) {
    if (!(y > 0.0)) throw InputError("superlinear_onset: y values must be positive");
  }
  for (std::size_t i = 0; i + 1 < xs.size(); ++i) {
    const double segment = std::log(ys[i + 1] / ys[i]) / std::log(xs[i + 1] / xs[i]);
    if (segment > slope) return xs[i];
  }
  return std::nullopt;
}

}  // namespace gpubench::model
