// `gpubench seqlen`: LLM inference latency (prefill, decode, generation) against prompt length
// and batch on the synthetic transformer, with per-op breakdowns, rooflines and the knees.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/cudnn_attention.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/module.hpp"
#include "gpubench/core/peaks.hpp"
#include "gpubench/core/progress.hpp"
#include "gpubench/core/result.hpp"
#include "gpubench/core/system.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/modules/seqlen/seqlen.hpp"

namespace gpubench {

namespace {

using namespace seqlen;

class SeqlenModule final : public ResolvingModule<Options, Settings> {
 public:
  std::string name() const override { return "seqlen"; }
  std::string help() const override {
    return "LLM prefill/decode latency against sequence length and batch";
  }

  std::vector<std::string> examples() const override {
    return {"gpubench seqlen --model llama-3-8b",
            "gpubench seqlen --seq-lens 128:2048:x2 --batch-sizes 1,8 --output-lens 128",
            "gpubench seqlen --quick --attention cudnn"};
  }

  void add_options(CLI::App& app) override {
    opts_ = Options{};
    effective_.reset();
    app.add_option("--model", opts_.model,
                   "Model preset (gpubench matmul --help lists them; default llama-2-7b)");
    app.add_option("--model-config", opts_.model_config,
                   "A HuggingFace config.json instead of a preset");
    app.add_option("--seq-lens", opts_.seq_lens,
                   "Prompt lengths: list, start:stop:xF or :+S (default 128..8192 doubling; quick "
                   "512,2048)");
    app.add_option("--batch-sizes", opts_.batch_sizes,
                   "Sequences per step (default 1,2,4,8; quick 1)");
    app.add_option("--output-lens", opts_.output_lens,
                   "Generated tokens per sequence for the end-to-end latency (default 50,100,200; "
                   "quick 50)");
    app.add_option("--dtype", opts_.dtype, "Weights and activations: bf16 or fp16")
        ->capture_default_str();
    app.add_option("--layers", opts_.layers,
                   "Run only this many decoder layers (0: all of the model's)")
        ->capture_default_str();
    app.add_flag("--force-length", opts_.force_length,
                 "Allow prompt + output lengths past the model's positions (RoPE models)");
    app.add_flag("--profile-layer", opts_.profile_layer,
                 "Add every operation of one layer (the middle one) per point, prefill and decode");
    app.add_option("--attention", opts_.attention,
                   "Prefill attention: auto (cuDNN fused attention where it runs, else "
                   "gpubench's kernel), cudnn or own")
        ->capture_default_str();
    app.add_flag("--unfused", opts_.unfused,
                 "Batch-1 decode: run each norm, residual add and activation as a kernel of its "
                 "own instead of inside the GEMVs (for comparison)");
  }

  Report run(Context& ctx) override {
    const Settings s = resolve(opts_, ctx.quick());
    effective_ = s;
    Report report;
    report.module = name();
    report.config = s.to_json();
    for (const auto& n : s.notes) report.warn(n);
    const int gpu = ctx.gpus().front();
    if (ctx.gpus().size() > 1)
      report.warn(
          fmt::format("seqlen runs on one GPU: GPU {} (of {} selected)", gpu, ctx.gpus().size()));
    const GpuInfo* info = ctx.system().gpu(gpu);
    std::optional<double> peak;
    double hbm = 0;
    if (info) {
      hbm = info->hbm_GBps_theoretical();
      if (auto spec = find_peak_spec(*info)) {
        peak = spec->peak(to_string(s.dtype));
        report.extra["peak"] = {{"model", spec->model},
                                {"dtype", to_string(s.dtype)},
                                {"tflops_dense", peak ? *peak : 0.0}};
      }
    }
    if (!peak) report.warn("no dense peak known for this GPU: MFU is omitted");
    if (hbm <= 0) report.warn("HBM bandwidth unknown: decode's roofline share is omitted");
    report.extra["hbm_GBps_theoretical"] = hbm;
    report.extra["cudnn"] = CudnnAttention::library_status();
    const model::ModelConfig m = model_as_run(s);
    const int elem = static_cast<int>(act_bytes(s.dtype));

    run_attention(ctx, gpu, s, report);

    std::map<std::int64_t, std::vector<PointOutcome>> by_batch;
    progress::expect(s.batch_sizes.size() * s.seq_lens.size());
    for (std::int64_t batch : s.batch_sizes) {
      bool out_of_memory = false;
      for (std::int64_t len : s.seq_lens) {
        if (Context::interrupted()) break;
        PointOutcome o;
        progress::next(fmt::format("{} batch {} prompt {}", s.model.name, batch, len));
        if (out_of_memory) {  // longer prompts need more: skip without building the engine
          o.batch = batch;
          o.length = len;
          o.status = "skipped";
          o.note = "a shorter prompt of this batch did not fit in GPU memory";
          o.plan = point_memory_plan(s, batch, len, compute_capability_major(gpu));
        } else {
          try {
            o = run_point(ctx, gpu, s, batch, len);
          } catch (const OutOfMemoryError& e) {  // past the engine: a workspace, the graph
            o = PointOutcome{};
            o.batch = batch;
            o.length = len;
            o.status = "skipped";
            o.note = fmt::format("out of GPU memory: {}", e.what());
            o.plan = point_memory_plan(s, batch, len, compute_capability_major(gpu));
          }
          out_of_memory = o.status == "skipped";
        }
        record(report, s, m, o, peak, hbm, elem, gpu);
        by_batch[batch].push_back(std::move(o));
      }
    }
    knees(ctx, gpu, report, s, m, by_batch, elem);
    headline(report, s, by_batch, peak);
    sweeps(report, s, by_batch);
    if (Context::interrupted()) report.warn("interrupted: only the points finished are reported");
    report.settle_status();
    return report;
  }

 private:
  Settings resolve(const Options& o, bool quick) const override {
    return resolve_settings(o, quick);
  }
  // Prefill attention alone at each length >= 512 (batch 1): the chosen path, and gpubench's own
  // kernel beside cuDNN's when cuDNN ran.
  void run_attention(Context& ctx, int gpu, const Settings& s, Report& report) {
    std::vector<std::int64_t> lens;
    for (std::int64_t l : s.seq_lens)
      if (l >= 512 || l == s.seq_lens.back()) lens.push_back(l);
    for (std::int64_t len : lens) {
      if (Context::interrupted()) return;
      std::vector<model::AttentionPath> paths{s.attention};
      AttentionOutcome first = run_attention_alone(ctx, gpu, s, len, s.attention);
      add_attention_row(report, s, first);
      if (first.path == "cudnn" && s.attention == model::AttentionPath::Auto)
        add_attention_row(report, s,
                          run_attention_alone(ctx, gpu, s, len, model::AttentionPath::Own));
    }
  }

  void add_attention_row(Report& report, const Settings& s, const AttentionOutcome& o) {
    CaseResult r;
    r.group = fmt::format("Prefill attention alone: causal, batch 1, {} heads ({} KV), head dim {}",
                          s.model.num_heads, s.model.num_kv_heads, s.model.head_dim);
    r.name = fmt::format("L={} {}", o.length, o.path.empty() ? "-" : o.path);
    r.params = {{"length", o.length}, {"path", o.path}, {"dtype", to_string(s.dtype)}};
    r.status = o.status;
    r.note = o.note;
    if (o.status == "ok") {
      r.metric("time", ms(o.m.median_s()), "ms");
      r.metric("tflops", o.tflops, "TFLOP/s");
      r.metric("check_error", o.max_error, "of max");
      r.stats = o.m.stats;
      report.set_headline(fmt::format("attention_{}_tflops_{}", o.path, o.length), o.tflops,
                          "TFLOP/s");
    }
    report.add(std::move(r));
  }

  void record(Report& report, const Settings& s, const model::ModelConfig& m, const PointOutcome& o,
              const std::optional<double>& peak, double hbm, int elem, int gpu) {
    CaseResult r;
    r.group = fmt::format("{} {}, {} layers: batch {}", s.model.name, to_string(s.dtype), s.layers,
                          o.batch);
    r.name = fmt::format("b{} L{}", o.batch, o.length);
    r.params = {{"batch", o.batch}, {"prompt", o.length}};
    r.status = o.status;
    r.note = o.note;
    r.params["memory_plan_GiB"] = o.plan.total_bytes / kGiB;
    if (o.status != "ok") {
      report.add(std::move(r));
      return;
    }
    r.params["attention_path"] = o.attention_path;
    if (o.attention_path != "cudnn" && !o.attention_why.empty())
      r.params["attention_why"] = o.attention_why;
    const auto pc = model::model_cost(m, model::Phase::Prefill, o.batch, o.length, 0, elem);
    const auto dc = model::model_cost(m, model::Phase::Decode, o.batch, 1, o.length, elem);
    const double pre = o.prefill.median_s(), dec = o.decode.median_s();
    r.metric("prefill", ms(pre), "ms");
    r.metric("prefill_tflops", TFLOPs(pc.total.flops, pre), "TFLOP/s");
    if (peak) r.metric("prefill_mfu", mfu_pct(TFLOPs(pc.total.flops, pre), *peak), "%");
    r.metric("decode", ms(dec), "ms/token");
    r.metric("decode_tokens_per_s", o.batch / dec, "tok/s");
    if (hbm > 0)
      r.metric("decode_hbm_share", 100 * model::decode_hbm_share(dc.total.bytes, dec, hbm), "%");
    for (const auto& [g, sec] : o.e2e_s) {
      r.metric(fmt::format("e2e_{}", g), ms(sec), "ms");
      r.metric(fmt::format("tokens_per_s_{}", g), o.batch * g / sec, "tok/s");
    }
    r.metric("attention_share_prefill", 100 * o.prefill_ops.share("attention"), "%");
    r.metric("attention_share_decode", 100 * o.decode_ops.share("attention"), "%");
    r.metric("gemm_share_prefill", 100 * o.prefill_ops.share("gemm"), "%");
    r.metric("weights", o.engine.weights / kGiB, "GiB");
    r.metric("kv_cache", o.engine.kv_cache / kGiB, "GiB");
    r.metric("activations", (o.engine.activations + o.engine.workspace) / kGiB, "GiB");
    r.metric("memory_peak", o.measured_bytes / kGiB, "GiB");
    r.metric("check_error", o.check_error, "rel");
    const PhaseClocks clocks = phase_clocks(o.prefill.monitor, o.decode.monitor, gpu);
    if (clocks.prefill_sm_min_MHz)
      r.metric("prefill_sm_clock_min", *clocks.prefill_sm_min_MHz, "MHz");
    if (clocks.decode_sm_min_MHz) r.metric("decode_sm_clock_min", *clocks.decode_sm_min_MHz, "MHz");
    if (!clocks.note.empty()) r.note += (r.note.empty() ? "" : "; ") + clocks.note;
    auto ops_json = [](const OpTimes& t) {
      nlohmann::ordered_json j = nlohmann::ordered_json::object();
      for (const auto& [k, v] : t.by_kind_s) j["by_kind_ms"][k] = ms(v);
      for (const auto& [k, v] : t.by_op_s) j["by_op_ms"][k] = ms(v);
      j["total_ms"] = ms(t.total_s);
      return j;
    };
    r.params["prefill_breakdown"] = ops_json(o.prefill_ops);
    r.params["decode_breakdown"] = ops_json(o.decode_ops);
    r.params["engine_bytes"] = o.engine.total();
    r.params["memory_peak_vs_engine_pct"] =
        o.engine.total() ? 100.0 * (static_cast<double>(o.measured_bytes) / o.engine.total() - 1)
                         : 0.0;
    r.stats = o.prefill.stats;
    report.add(std::move(r));
    if (s.profile_layer) {
      for (const auto* phase : {"prefill", "decode"}) {
        const OpTimes& t = std::string(phase) == "prefill" ? o.prefill_ops : o.decode_ops;
        double layer_total = 0;
        for (const auto& [op, v] : t.layer_s) layer_total += v;
        for (const auto& [op, v] : t.layer_s) {
          CaseResult d;
          d.group = fmt::format("Layer {} ops, {}: batch {}, prompt {}", s.layers / 2, phase,
                                o.batch, o.length);
          d.name = op;
          d.params = {
              {"batch", o.batch}, {"prompt", o.length}, {"phase", phase}, {"kind", op_kind(op)}};
          d.metric("time", v * 1e6, "us");
          d.metric("share", layer_total > 0 ? 100 * v / layer_total : 0, "%");
          report.add(std::move(d));
        }
      }
    }
  }

  // Attention passing GEMMs, latency turning super-linear, memory running out: per batch.
  void knees(Context& ctx, int gpu, Report& report, const Settings& s, const model::ModelConfig& m,
             const std::map<std::int64_t, std::vector<PointOutcome>>& by_batch, int elem) {
    const GpuInfo* info = ctx.system().gpu(gpu);
    const std::uint64_t free = info ? info->memory_free_bytes : 0;
    for (const auto& [batch, points] : by_batch) {
      const Knees kn = find_knees(points);
      auto opt = [](const std::optional<double>& v) {
        return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
      };
      nlohmann::ordered_json k = {{"batch", batch}};
      if (kn.enough_points) {
        k["attention_passes_gemm_at"] = opt(kn.attention_passes_gemm);
        if (kn.attention_passes_gemm_extrapolated)
          k["attention_passes_gemm_extrapolated"] = *kn.attention_passes_gemm_extrapolated;
        k["superlinear_from"] = opt(kn.superlinear_from);
      }
      if (free)
        k["longest_prompt_fitting"] =
            longest_fitting(m, batch, s.output_lens.back(), elem, free, 1 << 20);
      k["first_skipped"] =
          kn.first_skipped ? nlohmann::ordered_json(kn.first_skipped) : nlohmann::ordered_json();
      report.extra["knees"].push_back(k);
      if (batch == s.batch_sizes.front()) {
        if (kn.attention_passes_gemm)
          report.set_headline(fmt::format("attention_passes_gemm_at_b{}", batch),
                              *kn.attention_passes_gemm, "tokens");
        else if (kn.attention_passes_gemm_extrapolated)
          report.set_headline(fmt::format("attention_passes_gemm_extrapolated_b{}", batch),
                              *kn.attention_passes_gemm_extrapolated, "tokens");
        if (kn.superlinear_from)
          report.set_headline(fmt::format("prefill_superlinear_from_b{}", batch),
                              *kn.superlinear_from, "tokens");
        if (k.contains("longest_prompt_fitting"))
          report.set_headline(fmt::format("longest_prompt_fitting_b{}", batch),
                              k["longest_prompt_fitting"].get<double>(), "tokens");
      }
    }
  }

  void headline(Report& report, const Settings& s,
                const std::map<std::int64_t, std::vector<PointOutcome>>& by_batch,
                const std::optional<double>& peak) {
    const auto it = by_batch.find(1);
    if (it == by_batch.end()) return;
    const model::ModelConfig m = model_as_run(s);
    for (const auto& p : it->second) {
      if (p.status != "ok") continue;
      if (p.length == 512 || p.length == 2048 || p.length == 8192) {
        report.set_headline(fmt::format("prefill_ms_{}", p.length), ms(p.prefill.median_s()), "ms");
        report.set_headline(fmt::format("decode_ms_ctx{}", p.length), ms(p.decode.median_s()),
                            "ms");
      }
      if (p.length == 2048 && peak) {
        const auto pc = model::model_cost(m, model::Phase::Prefill, 1, 2048, 0,
                                          static_cast<int>(act_bytes(s.dtype)));
        report.set_headline("prefill_mfu_2048",
                            mfu_pct(TFLOPs(pc.total.flops, p.prefill.median_s()), *peak), "%");
      }
    }
  }

  void sweeps(Report& report, const Settings& s,
              const std::map<std::int64_t, std::vector<PointOutcome>>& by_batch) {
    Sweep pre{"seqlen_prefill_ms",
              "Prefill latency (time to first token) against prompt length",
              "prompt",
              "tokens",
              "latency",
              "ms",
              true,
              {}};
    Sweep dec{"seqlen_decode_ms",
              "Decode latency per token against context",
              "context",
              "tokens",
              "latency",
              "ms/token",
              true,
              {}};
    const std::int64_t g = s.output_lens.back();
    Sweep e2e{"seqlen_e2e_ms",
              fmt::format("End-to-end latency for {} generated tokens", g),
              "prompt",
              "tokens",
              "latency",
              "ms",
              true,
              {}};
    Sweep brk{"seqlen_prefill_split_ms",
              fmt::format("Prefill time by kind, batch {}", s.batch_sizes.front()),
              "prompt",
              "tokens",
              "time",
              "ms",
              true,
              {}};
    std::map<std::string, Series> kinds;
    for (const auto& [batch, points] : by_batch) {
      Series a{fmt::format("batch {}", batch), {}, {}}, b = a, c = a;
      for (const auto& p : points) {
        if (p.status != "ok") continue;
        const double x = static_cast<double>(p.length);
        a.x.push_back(x);
        a.y.push_back(ms(p.prefill.median_s()));
        b.x.push_back(x);
        b.y.push_back(ms(p.decode.median_s()));
        if (p.e2e_s.count(g)) {
          c.x.push_back(x);
          c.y.push_back(ms(p.e2e_s.at(g)));
        }
        if (batch == s.batch_sizes.front())
          for (const auto& [kind, v] : p.prefill_ops.by_kind_s) {
            Series& k = kinds[kind];
            k.label = kind;
            k.x.push_back(x);
            k.y.push_back(ms(v));
          }
      }
      if (!a.x.empty()) {
        pre.series.push_back(a);
        dec.series.push_back(b);
        if (!c.x.empty()) e2e.series.push_back(c);
      }
    }
    for (auto& [k, v] : kinds) brk.series.push_back(v);
    for (Sweep* sw : {&pre, &dec, &e2e, &brk})
      if (!sw->series.empty()) report.sweeps.push_back(*sw);
  }
};

}  // namespace

ModulePtr make_seqlen_module() {
  return std::make_unique<SeqlenModule>();
}

}  // namespace gpubench
