// `gpubench matmul`: cuBLASLt GEMM TFLOP/s and MFU per data type and shape (square sweep, shape
// list, one model layer), the MAMF search for the achievable peak, and a sustained run.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <map>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/peaks.hpp"
#include "gpubench/core/progress.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/modules/matmul/matmul.hpp"

namespace gpubench {

namespace {

using namespace matmul;

// Matmul keeps its inputs out of L2 by rotating operand sets (cold), never by a flush between
// GEMMs; --l2 hot keeps one set.
MeasureOptions matmul_measure_options(const Context& ctx) {
  MeasureOptions m = ctx.measure_options();
  m.l2 = m.l2 == L2Policy::Hot ? L2Policy::Hot : L2Policy::Rotate;
  return m;
}

// The final measurement of a case: the run's stopping rule, or the burst's fixed window.
MeasureOptions final_options(const Context& ctx, const Settings& s) {
  const MeasureOptions m = matmul_measure_options(ctx);
  return s.burst ? burst_options(m) : m;
}

// The MAMF search measures each shape briefly; the best is measured again in full.
MeasureOptions search_options(MeasureOptions m) {
  m.fixed_iters = 0;
  m.warmup = 1;
  m.min_iters = 5;
  m.min_time_s = 0.03;
  m.max_noise = 0.02;
  m.max_time_s = 0.5;
  return m;
}

// The slowest GPU's outcome of a case run on every GPU (the one a job waits for).
const CaseOutcome* slowest(const std::vector<CaseOutcome>& outs) {
  const CaseOutcome* worst = nullptr;
  for (const auto& o : outs) {
    if (!o.ok) continue;
    if (!worst || o.tflops < worst->tflops) worst = &o;
  }
  return worst;
}

// The steady rate of a held case: the median of the last half of its iterations.
double steady_tflops(const CaseOutcome& o) {
  const auto& samples = o.measurement.samples;
  std::vector<double> tail(samples.begin() + static_cast<long>(samples.size() / 2), samples.end());
  std::sort(tail.begin(), tail.end());
  return TFLOPs(gemm_flops(o.spec.shape) * o.repeats, tail[tail.size() / 2]);
}

class MatmulModule final : public ResolvingModule<Options, Settings> {
 public:
  std::string name() const override { return "matmul"; }
  std::string help() const override {
    return "cuBLASLt GEMM TFLOP/s and MFU per dtype and shape, verified; achievable-peak search";
  }

  std::vector<std::string> examples() const override {
    return {"gpubench matmul --dtypes bf16,fp8_e4m3",
            "gpubench matmul --sizes 1024:16384:x2 --layout tn",
            "gpubench matmul --model llama-3-8b --tokens 4096"};
  }

  void add_options(CLI::App& app) override {
    opts_ = Options{};
    effective_.reset();
    app.add_option("--dtypes", opts_.dtypes,
                   "Data types: bf16,fp16,fp8_e4m3,fp8_e5m2,tf32,fp32,fp64,int8 or all (default "
                   "all; bf16 with --mamf; bf16,fp8_e4m3,tf32 with --quick)");
    app.add_option("--sizes", opts_.sizes,
                   "Square sweep M=N=K: list, start:stop:xF or start:stop:+S (default "
                   "1024,2048,4096,8192,16384; 4096,8192 with --quick)");
    app.add_option("--shapes", opts_.shapes, "Explicit shapes MxNxK,... (replaces the sweep)");
    app.add_option("--layout", opts_.layout,
                   "Transposes of A and B: best (time tn, nn, nt, tt and keep the fastest), tn, "
                   "nn, nt or tt (fp8 and int8: tn only). Default: best; tn with --quick");
    app.add_option("--model", opts_.model,
                   "Model preset: the GEMMs of one layer for --tokens tokens");
    app.add_option("--model-config", opts_.model_config,
                   "A HuggingFace config.json instead of a preset");
    app.add_option("--tokens", opts_.tokens, "Tokens (GEMM rows) for --model")
        ->capture_default_str();
    app.add_option("--algos", opts_.algos, "cuBLASLt heuristic candidates timed per case (1-64)")
        ->capture_default_str();
    app.add_flag("--mamf", opts_.mamf,
                 "Search shapes for the maximum achievable matmul FLOP/s (bf16 unless --dtypes)");
    app.add_option("--mamf-sizes", opts_.mamf_sizes,
                   "The search grid for M, N and K (default 2048,4096,6144,8192,12288,16384)");
    app.add_option("--mamf-refine", opts_.mamf_refine,
                   "Refine around the best grid shape (true/false)")
        ->capture_default_str();
    app.add_flag("--burst", opts_.burst,
                 "Time each case like a framework microbenchmark: 1 s idle, 10 warm-up and 50 "
                 "timed GEMMs (the rate before the power limit throttles; see --sustained)");
    app.add_option("--sustained", opts_.sustained,
                   "Hold the best shape this many seconds: the throttled steady rate")
        ->capture_default_str();
  }

  Report run(Context& ctx) override {
    const Settings settings = resolve(opts_, ctx.quick());
    effective_ = settings;
    check_memory(ctx, settings);

    Report report;
    report.module = name();
    report.config = settings.to_json();
    const bool several = ctx.gpus().size() > 1;
    std::vector<std::unique_ptr<GpuBench>> benches;
    for (int g : ctx.gpus()) benches.push_back(std::make_unique<GpuBench>(ctx, g));
    peaks_ = peaks_of(ctx, report);
    const MeasureOptions opts = final_options(ctx, settings);
    for (auto& b : benches) b->set_idle_before(settings.burst ? kBurstIdleSeconds : 0);

    // (dtype) -> best outcome so far (slowest GPU of each case), for the headline.
    std::map<GemmDtype, CaseOutcome> best;
    std::map<GemmDtype, Series> curves;
    const std::vector<CaseSpec> cases = settings.cases();
    const std::size_t grid = settings.mamf_sizes.size();
    progress::expect(cases.size() +
                     (settings.mamf ? settings.dtypes.size() * grid * grid * grid : 0) +
                     (settings.sustained > 0 ? 1 : 0));
    for (const CaseSpec& spec : cases) {
      if (Context::interrupted()) break;
      progress::next(fmt::format("{} {} {} {}", to_string(spec.dtype), spec.label,
                                 spec.shape.to_string(),
                                 spec.any_layout ? "any layout" : spec.shape.layout()));
      const auto outs = run_on_all(ctx, benches, spec, settings.algos, opts);
      record(report, outs, settings, several);
      if (const CaseOutcome* w = slowest(outs)) {
        auto it = best.find(spec.dtype);
        if (it == best.end() || w->tflops > it->second.tflops) best[spec.dtype] = *w;
        if (spec.kind == CaseKind::Square) {
          Series& s = curves[spec.dtype];
          s.label = to_string(spec.dtype);
          s.x.push_back(static_cast<double>(spec.shape.m));
          s.y.push_back(w->tflops);
        }
        if (spec.kind == CaseKind::Square && spec.shape.m == 8192) {
          report.set_headline(std::string(to_string(spec.dtype)) + "_tflops_8192", w->tflops,
                              "TFLOP/s");
          if (auto p = peak(spec.dtype))
            report.set_headline(std::string("mfu_") + to_string(spec.dtype) + "_8192",
                                mfu_pct(w->tflops, *p), "%");
        }
      }
    }
    if (settings.mamf && !Context::interrupted()) run_mamf(ctx, benches, settings, report, best);
    for (const auto& [dtype, o] : best) {
      report.set_headline(std::string(to_string(dtype)) + "_best_tflops", o.tflops, "TFLOP/s");
      report.set_headline_text(std::string(to_string(dtype)) + "_best_shape",
                               o.spec.shape.to_string(), "MxNxK");
    }
    if (settings.sustained > 0 && !best.empty() && !Context::interrupted())
      run_sustained(ctx, benches, settings, report, best);
    if (!curves.empty()) {
      Sweep sw;
      sw.name = "matmul_square_tflops";
      sw.title = "GEMM throughput against size (M = N = K)";
      sw.x_label = "size";
      sw.x_unit = "M=N=K";
      sw.y_label = "throughput";
      sw.y_unit = "TFLOP/s";
      for (auto& [dtype, s] : curves) sw.series.push_back(s);
      report.sweeps.push_back(std::move(sw));
    }
    if (Context::interrupted()) report.warn("interrupted: only the cases finished are reported");
    report.settle_status();
    return report;
  }

 private:
  Settings resolve(const Options& o, bool quick) const override {
    return resolve_settings(o, quick);
  }
  std::optional<double> peak(GemmDtype t) const {
    if (!peaks_) return std::nullopt;
    return peaks_->peak(to_string(t));
  }

  // The dense peaks of the first selected GPU (a mixed machine is warned about).
  static std::optional<PeakSpec> peaks_of(Context& ctx, Report& report) {
    const GpuInfo* g = ctx.system().gpu(ctx.gpus().front());
    if (!g) return std::nullopt;
    auto spec = find_peak_spec(*g);
    for (int other : ctx.gpus()) {
      const GpuInfo* o = ctx.system().gpu(other);
      if (o && o->name != g->name)
        report.warn("the selected GPUs differ; MFU uses the peaks of " + g->name);
    }
    if (spec) {
      report.extra["peak"] = {
          {"model", spec->model}, {"source", spec->source}, {"tflops_dense", spec->tflops}};
    } else {
      report.warn(fmt::format("no dense peak known for {} (sm_{}{}): MFU is omitted", g->name,
                              g->cc_major, g->cc_minor));
    }
    return spec;
  }

  // Every case's one operand set must fit on every selected GPU: else bad input, up front.
  static void check_memory(Context& ctx, const Settings& s) {
    std::vector<CaseSpec> all = s.cases();
    if (s.mamf)
      for (GemmDtype t : s.dtypes) {
        const std::int64_t top = s.mamf_sizes.back() + (s.mamf_refine ? s.mamf_sizes.front() : 0);
        all.push_back({CaseKind::Mamf, t, {top, top, top, s.trans_a, s.trans_b}, ""});
      }
    for (int gpu : ctx.gpus()) {
      const GpuInfo* g = ctx.system().gpu(gpu);
      if (!g || g->memory_free_bytes == 0) continue;
      for (const auto& c : all) {
        const std::uint64_t need =
            gemm_operand_bytes(c.dtype, c.shape).total() + gemm_workspace_bytes(g->cc_major);
        if (need > g->memory_free_bytes * 9 / 10)
          throw InputError(fmt::format("{} {} needs {} of GPU memory; GPU {} has {} free",
                                       to_string(c.dtype), c.shape.to_string(), format_bytes(need),
                                       gpu, format_bytes(g->memory_free_bytes)));
      }
    }
  }

  void record(Report& report, const std::vector<CaseOutcome>& outs, const Settings& s,
              bool several) const {
    for (const auto& o : outs) {
      CaseResult r = to_case_result(o, peak(o.spec.dtype), several);
      r.group = group_of(o.spec, s.model, s.tokens) + (s.burst ? ", burst" : "");
      report.add(std::move(r));
    }
  }

  // Every shape of the grid briefly, then the neighbours of the best at finer steps; the best
  // is measured again with the run's full options.
  void run_mamf(Context& ctx, std::vector<std::unique_ptr<GpuBench>>& benches, const Settings& s,
                Report& report, std::map<GemmDtype, CaseOutcome>& best) {
    const MeasureOptions brief = search_options(matmul_measure_options(ctx));
    const double idle = s.burst ? kBurstIdleSeconds : 0;
    for (GemmDtype t : s.dtypes) {
      std::vector<GemmShape> tried;
      std::vector<double> rates;
      std::vector<std::pair<double, GemmShape>> scored;
      CaseOutcome top;
      auto try_shapes = [&](const std::vector<GemmShape>& shapes) {
        for (const auto& sh : shapes) {
          if (Context::interrupted()) return;
          CaseSpec spec{CaseKind::Mamf, t, sh, ""};
          progress::next(fmt::format("mamf {} {}", to_string(t), sh.to_string()));
          const auto outs = run_on_all(ctx, benches, spec, std::min(s.algos, 4), brief);
          tried.push_back(sh);
          const CaseOutcome* w = slowest(outs);
          if (!w) {
            for (const auto& o : outs)
              if (o.status == "failed")
                report.add(to_case_result(o, peak(t), true)).group =
                    fmt::format("{} MAMF search failures", to_string(t));
            continue;
          }
          rates.push_back(w->tflops);
          scored.emplace_back(w->tflops, sh);
          spdlog::debug("matmul: mamf {} {}: {:.1f} TFLOP/s", to_string(t), sh.to_string(),
                        w->tflops);
          if (w->tflops > top.tflops) top = *w;
        }
      };
      for (auto& b : benches) b->set_idle_before(0);  // the search runs back to back
      spdlog::info("matmul: mamf {}: {} grid shapes", to_string(t),
                   s.mamf_sizes.size() * s.mamf_sizes.size() * s.mamf_sizes.size());
      try_shapes(mamf_grid(s.mamf_sizes, s.trans_a, s.trans_b));
      if (s.mamf_refine && top.ok) {
        std::int64_t step = s.mamf_sizes.size() > 1 ? s.mamf_sizes[1] - s.mamf_sizes[0] : 1024;
        for (std::size_t i = 2; i < s.mamf_sizes.size(); ++i)
          step = std::min(step, s.mamf_sizes[i] - s.mamf_sizes[i - 1]);
        const int align = std::max(gemm_type_info(t).alignment, 64);
        for (std::int64_t st : {step / 2, step / 4}) {
          if (st < align) break;
          try_shapes(mamf_neighbours(top.spec.shape, st / align * align, tried, align));
        }
      }
      if (!top.ok) {
        report.warn(fmt::format("MAMF search for {} found no shape that ran", to_string(t)));
        continue;
      }
      // The search's best few again, in full (with --burst, each after the idle gap): a brief
      // search favours shapes that happened to run on a cooler moment, so one re-measure is not
      // enough to name the best.
      for (auto& b : benches) b->set_idle_before(idle);
      std::vector<CaseOutcome> finals;
      const auto finalists = mamf_finalists(scored, kMamfFinalists);
      for (const GemmShape& sh : finalists) {
        if (Context::interrupted()) break;
        CaseSpec spec{CaseKind::Mamf, t, sh, "finalist",
                      s.any_layout && !gemm_type_info(t).tn_only};
        const auto outs = run_on_all(ctx, benches, spec, s.algos, final_options(ctx, s));
        for (const auto& o : outs) {
          CaseResult r = to_case_result(o, peak(t), benches.size() > 1);
          r.group =
              fmt::format("{} MAMF: the best {} of {} shapes measured in full{}", to_string(t),
                          finalists.size(), tried.size(), s.burst ? ", burst" : "");
          report.add(std::move(r));
        }
        if (const CaseOutcome* w = slowest(outs)) finals.push_back(*w);
      }
      const CaseOutcome* w = nullptr;  // the fastest finalist (each the slowest of its GPUs)
      for (const auto& f : finals)
        if (!w || f.tflops > w->tflops) w = &f;
      if (!w) continue;
      std::vector<double> sorted = rates;
      std::sort(sorted.begin(), sorted.end());
      double mean = 0;
      for (double r : rates) mean += r;
      mean /= static_cast<double>(rates.size());
      const std::string key = std::string("mamf_") + to_string(t);
      report.set_headline(key + "_tflops", w->tflops, "TFLOP/s");
      // mamf-finder's newer boost-burst MAMF is the fastest single iteration of the winner: the
      // like-for-like figure beside gpubench's median.
      report.set_headline(key + "_tflops_fastest_iteration", w->max_tflops, "TFLOP/s");
      report.set_headline_text(key + "_shape", w->spec.shape.to_string(), "MxNxK");
      if (auto p = peak(t)) report.set_headline(key + "_mfu", mfu_pct(w->tflops, *p), "%");
      report.extra["mamf"][to_string(t)] = {{"best_shape", w->spec.shape.to_string()},
                                            {"best_tflops", w->tflops},
                                            {"best_tflops_mean_time", w->mean_tflops},
                                            {"best_tflops_fastest_iteration", w->max_tflops},
                                            {"shapes_tried", tried.size()},
                                            {"finalists", finals.size()},
                                            {"search_tflops_mean", mean},
                                            {"search_tflops_median", sorted[sorted.size() / 2]},
                                            {"search_tflops_max", sorted.back()}};
      auto it = best.find(t);
      if (it == best.end() || w->tflops > it->second.tflops) best[t] = *w;
    }
  }

  // The best shape of the first data type held for --sustained seconds: every iteration kept,
  // the steady rate from the last half, clocks and power from the monitor.
  void run_sustained(Context& ctx, std::vector<std::unique_ptr<GpuBench>>& benches,
                     const Settings& s, Report& report,
                     const std::map<GemmDtype, CaseOutcome>& best) {
    GemmDtype t = s.dtypes.front();
    if (!best.count(t)) t = best.begin()->first;
    MeasureOptions o = matmul_measure_options(ctx);
    o.fixed_iters = 0;
    o.min_time_s = s.sustained;
    o.max_time_s = s.sustained;
    o.max_noise = 0;  // never stop on noise: hold for the whole time
    o.min_iters = 10;
    o.max_iters = 10000000;
    o.interruptible = true;  // Ctrl-C or Slurm's SIGTERM ends the hold, not after it
    CaseSpec spec{CaseKind::Sustained, t, best.at(t).spec.shape, "sustained"};
    for (auto& b : benches) b->set_idle_before(0);
    progress::next(
        fmt::format("{} {} held for {} s", to_string(t), spec.shape.to_string(), s.sustained));
    const auto outs = run_on_all(ctx, benches, spec, s.algos, o);
    for (const auto& out : outs) {
      CaseResult r = to_case_result(out, peak(t), benches.size() > 1);
      r.group = fmt::format("{} sustained for {} s", to_string(t), s.sustained);
      if (out.ok) {
        const double first =
            TFLOPs(gemm_flops(spec.shape) * out.repeats, out.measurement.samples.front());
        r.metric("steady_tflops", steady_tflops(out), "TFLOP/s");
        r.metric("first_iteration_tflops", first, "TFLOP/s");
        double held = 0;
        for (double x : out.measurement.samples) held += x;
        r.params["held_s"] = held;
        if (out.measurement.stop_reason == "interrupted")
          r.note = fmt::format("stopped by a signal after {:.1f} s of {} s", held, s.sustained);
      }
      report.add(std::move(r));
    }
    if (const CaseOutcome* w = slowest(outs))
      report.set_headline(std::string("sustained_") + to_string(t) + "_tflops", steady_tflops(*w),
                          "TFLOP/s");
  }

  std::optional<PeakSpec> peaks_;
};

}  // namespace

ModulePtr make_matmul_module() {
  return std::make_unique<MatmulModule>();
}

}  // namespace gpubench
