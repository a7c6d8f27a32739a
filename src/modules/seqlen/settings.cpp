// `gpubench seqlen` settings: the model, the sweep's lengths, batches and output lengths, checked
// against the model (positions) before anything touches the GPU.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/gemm.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/modules/seqlen/seqlen.hpp"

namespace gpubench::seqlen {

namespace {

constexpr std::int64_t kMaxTokens = 1 << 20;
constexpr std::int64_t kMaxBatch = 4096;

std::vector<std::int64_t> or_default(const std::string& text, const std::string& option,
                                     std::int64_t max, std::vector<std::int64_t> fallback) {
  return trim(text).empty() ? fallback : parse_counts(text, option, max);
}

}  // namespace

Settings resolve_settings(const Options& o, bool quick) {
  Settings s;
  s.model = model::load_engine_model(o.model, o.model_config);
  s.dtype = model::engine_dtype(o.dtype) == "bf16" ? ActDtype::BF16 : ActDtype::F16;
  s.layers = model::engine_layers(s.model, o.layers);
  s.seq_lens = or_default(o.seq_lens, "--seq-lens", kMaxTokens,
                          quick ? std::vector<std::int64_t>{512, 2048}
                                : std::vector<std::int64_t>{128, 256, 512, 1024, 2048, 4096, 8192});
  s.batch_sizes =
      or_default(o.batch_sizes, "--batch-sizes", kMaxBatch,
                 quick ? std::vector<std::int64_t>{1} : std::vector<std::int64_t>{1, 2, 4, 8});
  s.output_lens =
      or_default(o.output_lens, "--output-lens", kMaxTokens,
                 quick ? std::vector<std::int64_t>{50} : std::vector<std::int64_t>{50, 100, 200});
  s.force_length = o.force_length;
  s.profile_layer = o.profile_layer;
  s.attention = model::parse_attention_path(trim(o.attention));
  s.fuse = !o.unfused;
  // The longest context a point reaches: its prompt plus the tokens it generates. A learned
  // position table has no rows past max_positions; RoPE computes any position, so only lengths
  // asked for explicitly past the model's context need --force-length, and the default sweep
  // (128..8192, the issue's) runs past it with a note.
  const bool learned = s.model.positions == model::Positions::Learned;
  const std::int64_t gen = s.output_lens.back();
  const std::int64_t limit = s.model.max_positions;
  if (s.seq_lens.back() + gen > limit) {
    if (learned) {
      if (!trim(o.seq_lens).empty() || !trim(o.output_lens).empty())
        throw InputError(fmt::format(
            "--seq-lens: {} prompt + {} generated tokens pass {}'s learned position table of {} "
            "rows",
            s.seq_lens.back(), gen, s.model.name, limit));
      const auto past = std::remove_if(s.seq_lens.begin(), s.seq_lens.end(),
                                       [&](std::int64_t l) { return l + gen > limit; });
      s.seq_lens.erase(past, s.seq_lens.end());
      if (s.seq_lens.empty())
        throw InputError(
            fmt::format("--output-lens: {} generated tokens leave no prompt length "
                        "within {}'s {} positions",
                        gen, s.model.name, limit));
      s.notes.push_back(
          fmt::format("lengths cut to {}'s {} learned positions", s.model.name, limit));
    } else if (!trim(o.seq_lens).empty() && !s.force_length) {
      throw InputError(fmt::format(
          "--seq-lens: {} prompt + {} generated tokens pass {}'s {} positions (--force-length "
          "runs them anyway)",
          s.seq_lens.back(), gen, s.model.name, limit));
    } else {
      s.notes.push_back(fmt::format(
          "contexts up to {} pass {}'s {} positions: RoPE runs them, the model was not trained "
          "that far",
          s.seq_lens.back() + gen, s.model.name, limit));
    }
  }
  return s;
}

nlohmann::ordered_json Settings::to_json() const {
  return {{"model", model.to_json()},     {"layers", layers},
          {"seq_lens", seq_lens},         {"batch_sizes", batch_sizes},
          {"output_lens", output_lens},   {"dtype", to_string(dtype)},
          {"force_length", force_length}, {"profile_layer", profile_layer},
          {"attention", model::to_string(attention)}, {"fused_decode", fuse}};
}

model::ModelConfig model_as_run(const Settings& s) {
  model::ModelConfig m = s.model;
  m.num_layers = s.layers;
  return m;
}

model::EngineOptions point_engine_options(const Settings& s, std::int64_t batch,
                                          std::int64_t length) {
  const std::int64_t generate = s.output_lens.empty() ? 1 : s.output_lens.back();
  model::EngineOptions eo;
  eo.dtype = s.dtype;
  eo.layers = s.layers;
  eo.max_batch = static_cast<int>(batch);
  eo.max_tokens = static_cast<int>(length);
  eo.max_context = static_cast<int>(length + std::max<std::int64_t>(generate - 1, 1));
  eo.attention = s.attention;
  eo.fuse_small_steps = s.fuse;
  return eo;
}

model::MemoryPlan point_memory_plan(const Settings& s, std::int64_t batch, std::int64_t length,
                                    int cc_major) {
  const model::EngineMemory planned = model::engine_memory(
      s.model, point_engine_options(s, batch, length), gemm_workspace_bytes(cc_major));
  model::MemoryPlan plan;
  plan.weight_bytes = planned.weights;
  plan.kv_cache_bytes = planned.kv_cache;
  plan.activation_bytes = planned.activations + planned.workspace;
  plan.total_bytes = planned.total();
  return plan;
}

std::string op_kind(const std::string& op) {
  static const std::map<std::string, std::string> kinds = {
      {"qkv", "gemm"},           {"attn_out", "gemm"},       {"mlp_gate_up", "gemm"},
      {"mlp_up", "gemm"},        {"mlp_down", "gemm"},       {"lm_head", "gemm"},
      {"attention", "attention"}, {"input_norm", "norm"},    {"residual_norm", "norm"},
      {"qk_norm", "norm"},       {"final_norm", "norm"},     {"rope", "rope"},
      {"mlp_act", "activation"}, {"residual", "residual"},   {"kv_write", "kv_cache"},
      {"rope_kv_cache", "rope"},  {"mlp_residual_norm", "norm"},
      {"embedding", "embedding"}};
  const auto it = kinds.find(op);
  return it == kinds.end() ? "other" : it->second;
}

double OpTimes::share(const std::string& kind) const {
  const auto it = by_kind_s.find(kind);
  return it == by_kind_s.end() || total_s <= 0 ? 0.0 : it->second / total_s;
}

Knees find_knees(const std::vector<PointOutcome>& points) {
  Knees k;
  std::vector<double> xs, attn, gemm, pre;
  auto kind = [](const OpTimes& t, const char* name) {
    const auto it = t.by_kind_s.find(name);
    return it == t.by_kind_s.end() ? 0.0 : it->second;
  };
  for (const auto& p : points) {
    if (p.status != "ok") {
      if (p.status == "skipped" && !k.first_skipped) k.first_skipped = p.length;
      continue;
    }
    xs.push_back(static_cast<double>(p.length));
    attn.push_back(kind(p.prefill_ops, "attention"));
    gemm.push_back(kind(p.prefill_ops, "gemm"));
    pre.push_back(p.prefill.median_s());
  }
  if (xs.size() < 2) return k;
  k.enough_points = true;
  k.attention_passes_gemm = model::crossover(xs, attn, gemm);
  if (!k.attention_passes_gemm && attn.back() > 0)
    k.attention_passes_gemm_extrapolated = xs.back() * gemm.back() / attn.back();
  k.superlinear_from = model::superlinear_onset(xs, pre);
  return k;
}

std::int64_t longest_fitting(const model::ModelConfig& m, std::int64_t batch,
                             std::int64_t generate, int elem_bytes, std::uint64_t free_bytes,
                             std::int64_t cap) {
  auto fits_at = [&](std::int64_t len) {
    return model::fits(model::memory_plan(m, batch, len + generate, elem_bytes), free_bytes);
  };
  std::int64_t lo = 0, hi = cap / 128;  // in units of 128 tokens
  while (lo < hi) {
    const std::int64_t mid = (lo + hi + 1) / 2;
    if (fits_at(mid * 128))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo * 128;
}

PhaseClocks phase_clocks(const MonitorSummary& prefill, const MonitorSummary& decode, int gpu) {
  PhaseClocks c;
  auto one = [&](const MonitorSummary& m, const char* phase, std::optional<unsigned>& sm_min) {
    const GpuMonitorSummary* g = m.sampled(gpu);
    if (!g) return;
    sm_min = g->sm_clock_min_MHz;
    if (g->throttled())
      c.note += fmt::format("{}{} throttled: {}", c.note.empty() ? "" : "; ", phase,
                            throttling_list(g->throttle_reasons));
  };
  one(prefill, "prefill", c.prefill_sm_min_MHz);
  one(decode, "decode", c.decode_sm_min_MHz);
  return c;
}

}  // namespace gpubench::seqlen
