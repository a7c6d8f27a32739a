// `gpubench tp`: what tensor parallelism buys on this machine and what its all-reduces cost: the
// engine split Megatron-style over 1, 2, 4 ... GPUs, prefill and decode, against TP=1 and
// against the prediction "TP=1 compute / t + the all-reduces measured alone".
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <map>
#include <optional>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/module.hpp"
#include "gpubench/core/mpi.hpp"
#include "gpubench/core/progress.hpp"
#include "gpubench/core/result.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/modules/tp/tp.hpp"

namespace gpubench {

namespace {

using namespace tp;

// nccl-tests' all-reduce bus factor: what each rank's links carry per byte reduced.
double allreduce_bus_factor(int t) {
  return t > 1 ? 2.0 * (t - 1) / t : 0.0;
}

class TpModule final : public ResolvingModule<Options, Settings> {
 public:
  std::string name() const override { return "tp"; }
  std::string help() const override {
    return "Tensor-parallel transformer: speed-up, efficiency, communication";
  }

  std::vector<std::string> examples() const override {
    return {"gpubench tp --tp 1,2,4", "gpubench tp --micro column,row --micro-tokens 1,128,4096",
            "mpirun -np 2 gpubench tp --seq-lens 4096"};
  }

  void add_options(CLI::App& app) override {
    opts_ = Options{};
    effective_.reset();
    app.add_option("--model", opts_.model, "Model preset (default llama-2-7b)");
    app.add_option("--model-config", opts_.model_config,
                   "A HuggingFace config.json instead of a preset");
    app.add_option("--tp", opts_.tp, "TP degrees (default 1,2,4: those the GPUs allow)");
    app.add_option("--seq-lens", opts_.seq_lens,
                   "Prefill prompt lengths (default 128,512,1024,2048,4096; quick 1024,4096)");
    app.add_option("--batch-sizes", opts_.batch_sizes, "Sequences per step (default 1)");
    app.add_option("--contexts", opts_.contexts, "Decode: tokens in the cache (default 2048)");
    app.add_option("--layers", opts_.layers, "Run only this many decoder layers (0: all)")
        ->capture_default_str();
    app.add_option("--dtype", opts_.dtype, "Weights and activations: bf16 or fp16")
        ->capture_default_str();
    app.add_flag("--sequence-parallel", opts_.sequence_parallel,
                 "Prefill: reduce-scatter and all-gather around the norms instead of all-reduces "
                 "(Megatron sequence parallelism)");
    app.add_option("--micro", opts_.micro,
                   "Only the micro-benchmark Y = X W^T: column, row or column,row");
    app.add_option("--micro-size", opts_.micro_size, "The micro-benchmark's W is this square")
        ->capture_default_str();
    app.add_option("--micro-tokens", opts_.micro_tokens,
                   "The micro-benchmark's token counts (default 1,16,128,1024,4096)");
    app.add_flag("--overlap", opts_.overlap,
                 "Also overlapped: prefill in chunks, each chunk's all-reduces behind the next "
                 "chunk's compute (micro, row-parallel: the GEMM in chunks)");
    app.add_option("--overlap-chunks", opts_.overlap_chunks, "Chunks of --overlap")
        ->capture_default_str();
    app.add_option("--collectives", opts_.collectives,
                   "The model run's collectives: nccl, or copy-engine (prefill's large "
                   "messages copied between peers by the copy engines, no SMs taken; the rest "
                   "over NCCL)")
        ->capture_default_str();
    app.add_option("--small-collectives", opts_.small_collectives,
                   "The model run's all-reduces of up to 256 KiB (decode's): one-shot (one "
                   "kernel pushing each rank's data to its peers over NVLink; GPUs of one host "
                   "with peer access, threads or processes), nccl, or auto (one-shot where it "
                   "can run, else nccl)")
        ->capture_default_str();
    app.add_option("--timeout", opts_.timeout,
                   "Seconds without progress (every rank of a degree past a barrier) before "
                   "gpubench ends a stuck run with the report of the degrees finished (exit 1)")
        ->capture_default_str();
  }

  // The default degrees on one GPU leave TP=1 alone, with nothing to compare: skipped (`all`
  // included) with the reason. An explicit --tp 1 still runs.
  std::optional<std::string> unsupported(const System& system,
                                         const std::vector<int>& gpus) const override {
    if (auto why = Module::unsupported(system, gpus)) return why;
    const int n = rank_count(gpus);
    if (n < 2 && trim(opts_.tp).empty())
      return fmt::format("tensor parallelism needs 2 or more GPUs (got {}; --tp 1 runs TP=1 alone)",
                         n);
    return std::nullopt;
  }

  // Under mpirun/srun: one rank per process (NCCL between them; the copy-engine collectives
  // need one process and fall back to NCCL).
  bool supports_mpi() const override { return true; }

  Report run(Context& ctx) override {
    const ProcessInfo& proc = process_info();
    const int visible = rank_count(ctx.gpus());
    const Settings s = resolve_settings(opts_, ctx.quick(), visible);
    effective_ = s;
    Report report;
    report.module = name();
    report.config = s.to_json();
    for (const auto& n : s.notes) report.warn(n);
    // TP=1 first: it is the reference every other degree is checked and compared against.
    std::vector<int> degrees = s.tp;
    if (std::find(degrees.begin(), degrees.end(), 1) == degrees.end()) {
      degrees.insert(degrees.begin(), 1);
      report.warn("TP=1 added: speed-ups and checks are against it");
    }
    // Under mpirun/srun every process takes part in every degree's group split; those outside
    // a degree wait for it at a barrier of all processes.
    std::unique_ptr<RankGroup> world;
    if (proc.mpi) world = RankGroup::over_mpi(process_gpu(ctx.gpus(), false));
    // Between degrees every process asks the same question and gets the same answer (under a
    // watchdog: every process is there, so the answer is quick unless one is stuck).
    auto stopping = [&] {
      if (!world) return Context::interrupted();
      const auto watchdog = ctx.watchdog("tp", s.timeout_s);
      return world->stop_requested();
    };
    // GPUs of this process without peer access: NCCL still runs (through host memory or
    // whatever transport it finds), but slower than the links suggest.
    const std::vector<int>& gpus = ctx.gpus();
    for (std::size_t i = 0; i < gpus.size(); ++i)
      for (std::size_t j = i + 1; j < gpus.size(); ++j)
        if (const Link* l = ctx.system().link(gpus[i], gpus[j]); l && !l->p2p_access)
          report.warn(
              fmt::format("GPUs {} and {} have no peer access: the run goes on over "
                          "whatever NCCL uses between them",
                          gpus[i], gpus[j]));
    report.extra["process_model"] = proc.mpi
                                        ? fmt::format("{} (one process per GPU)", proc.launcher)
                                        : std::string("one process, a thread per GPU");
    // Each degree runs under a watchdog on its ranks, from the split that makes their group to
    // the barrier where the processes outside it wait (without one: the degree may take long);
    // the report of the degrees before is published for a run that stalls.
    ctx.publish(report);
    const auto watched = [&](int t, const auto& body) {
      auto watchdog = ctx.watchdog(fmt::format("tp {}", t), s.timeout_s);
      if (auto group = leading_ranks(ctx, t, "--tp"))
        body(*group);
      else
        watchdog.reset();
      if (world) world->barrier();  // the processes outside this degree wait here
    };
    if (!s.micro.empty()) {
      std::vector<MicroOutcome> all;
      progress::expect(degrees.size() * s.micro.size() * s.micro_tokens.size());
      for (int t : degrees) {
        if (stopping()) break;
        watched(t, [&](RankGroup& group) {
          for (MicroOutcome& o : run_micro(ctx, s, t, group)) all.push_back(std::move(o));
        });
        ctx.publish(micro_report(report, s, all));
      }
      return micro_report(report, s, all);
    }
    ReferenceLogits reference;
    std::map<int, std::vector<Outcome>> by_t;
    progress::expect(degrees.size() * s.batch_sizes.size() *
                     (s.seq_lens.size() + s.contexts.size()));
    for (int t : degrees) {
      if (stopping()) break;
      watched(t, [&](RankGroup& group) { by_t[t] = run_degree(ctx, s, t, group, reference); });
      ctx.publish(model_report(report, s, by_t));
    }
    return model_report(report, s, by_t);
  }

 private:
  // The report of the model points so far (`base` holds the run's settings and warnings).
  Report model_report(Report report, const Settings& s, std::map<int, std::vector<Outcome>> by_t) {
    confirm_across_degrees(by_t);
    for (const auto& [t, outcomes] : by_t)
      for (const Outcome& o : outcomes) record(report, s, o, base(by_t, o));
    headline(report, by_t);
    sweeps(report, s, by_t);
    if (Context::interrupted()) report.warn("interrupted: only the points finished are reported");
    report.settle_status();
    return report;
  }

  // The report of the micro-benchmark points so far, TP=1's first (speed-ups are against it).
  Report micro_report(Report report, const Settings& s, const std::vector<MicroOutcome>& all) {
    std::map<std::pair<MicroKind, std::int64_t>, double> one;  // TP=1 GEMM time per point
    for (const MicroOutcome& o : all) {
      if (o.t == 1 && o.status == "ok") one[{o.kind, o.tokens}] = o.compute_s;
      const auto it = one.find({o.kind, o.tokens});
      record_micro(report, s, o, it == one.end() ? 0.0 : it->second);
    }
    if (Context::interrupted()) report.warn("interrupted: only the points finished are reported");
    report.settle_status();
    return report;
  }

  Settings resolve(const Options& o, bool quick) const override {
    return resolve_settings(o, quick, /*visible_gpus=*/0);
  }

  // The point's step time for speed-ups in the headline and the chart: with --overlap the
  // faster of the whole and the overlapped step (both are in the table).
  static double fastest_s(const Outcome& o) {
    const double step = o.step.median_s();
    return o.overlap_s > 0 ? std::min(step, o.overlap_s) : step;
  }

  // The TP=1 outcome of the same point, if it ran.
  static const Outcome* base(const std::map<int, std::vector<Outcome>>& by_t, const Outcome& o) {
    const auto it = by_t.find(1);
    if (it == by_t.end()) return nullptr;
    for (const Outcome& b : it->second)
      if (b.phase == o.phase && b.batch == o.batch && b.length == o.length && b.status == "ok")
        return &b;
    return nullptr;
  }

  void record(Report& report, const Settings& s, const Outcome& o, const Outcome* one) {
    const bool prefill = o.phase == model::Phase::Prefill;
    CaseResult r;
    r.group = fmt::format("{} {} {}, {} layers: batch {}", s.model.name, s.dtype,
                          prefill ? "prefill" : "decode", s.layers, o.batch);
    r.name = fmt::format("t{} {}{}", o.t, prefill ? "L" : "ctx", o.length);
    r.params = {{"tp", o.t},
                {"phase", model::to_string(o.phase)},
                {"batch", o.batch},
                {prefill ? "prompt" : "context", o.length}};
    if (o.t > 1 && s.collectives != "nccl") r.params["collectives"] = o.collectives;
    // The path the small all-reduces took, on the rows that have them (decode's).
    if (o.t > 1 && o.allreduce_bytes > 0 &&
        o.allreduce_bytes <= static_cast<double>(parallel::OneShotCollectives::kMaxBytes))
      r.params["small_collectives"] = o.small_collectives;
    if (!o.attention_path.empty()) r.params["attention_path"] = o.attention_path;
    if (o.attention_path == "own" && !o.attention_why.empty())
      r.params["attention_why"] = o.attention_why;
    r.status = o.status;
    r.note = o.note;
    if (o.status != "ok" && o.status != "unchecked") {  // unchecked: timed, shown, not headlined
      report.add(std::move(r));
      return;
    }
    const double step = o.step.median_s();
    r.metric(prefill ? "time" : "time_per_token", ms(step), "ms");
    if (one) {
      const double sp = speedup(one->step.median_s(), step);
      r.metric("speedup", sp, "x");
      r.metric("efficiency", 100 * efficiency(sp, o.t), "%");
    }
    const OpSplit& k = o.ops;
    r.metric("gemm", ms(k.gemm_s), "ms");
    r.metric("attention", ms(k.attention_s), "ms");
    r.metric("other", ms(k.other_s), "ms");
    r.metric("communication", ms(k.comm_s), "ms");
    if (k.total_s() > 0) r.metric("comm_share", 100 * comm_share(k.comm_s, k.total_s()), "%");
    if (o.t > 1 && o.allreduce_bytes > 0) {
      r.metric("allreduce_bytes_per_layer", 2 * o.allreduce_bytes / 1e6, "MB");
      const double bf = allreduce_bus_factor(o.t);
      // Two all-reduces (or reduce-scatter + all-gather pairs) of this size per layer.
      if (k.comm_s > 0 && s.layers > 0)
        r.metric("busbw_in_layer", bf * o.allreduce_bytes * 2 * s.layers / k.comm_s / 1e9, "GB/s");
      if (o.allreduce_alone_s > 0)
        r.metric("busbw_alone", bf * o.allreduce_bytes / o.allreduce_alone_s / 1e9, "GB/s");
    }
    if (one && o.allreduce_alone_s > 0 && s.layers > 0) {
      // TP=1's step per layer, split t ways, plus two all-reduces per layer at the measured time.
      const CommTable table{o.t, {{o.allreduce_bytes, o.allreduce_alone_s}}};
      const Prediction p =
          predict(one->step.median_s() / s.layers, o.t, s.layers, o.allreduce_bytes, table);
      r.metric("predicted", ms(p.total_s), "ms");
      r.metric("prediction_error", prediction_error_pct(step, p.total_s), "%");
      if (!prefill && o.no_comm_s > 0) {
        // What the all-reduces add to the graph-launched step, against 2 x layers of them alone.
        const double exposed = step - o.no_comm_s;
        const double expected = expected_decode_comm_s(s.layers, o.allreduce_bytes, table);
        r.metric("exposed_communication", ms(exposed), "ms");
        r.metric("expected_communication", ms(expected), "ms");
        r.metric("comm_vs_expected", 100 * (exposed / expected - 1), "%");
      }
    }
    if (o.overlap_s > 0) {
      r.metric("overlapped", ms(o.overlap_s), "ms");
      if (one) r.metric("overlapped_speedup", speedup(one->step.median_s(), o.overlap_s), "x");
      r.metric("overlap_saved", 100 * (1 - o.overlap_s / step), "%");
      r.params["overlap_chunks"] = o.overlap_chunks;
    }
    r.metric("memory_per_gpu", o.memory_per_gpu / kGiB, "GiB");
    if (o.t > 1 && o.checked_against > 0) {
      r.metric("check_error", o.check_error, "rel");
      if (o.checked_against != 1) r.params["checked_against_tp"] = o.checked_against;
    }
    if (o.overlap_s > 0) r.metric("overlapped_check_error", o.overlap_check_error, "rel");
    r.stats = o.step.stats;
    report.add(std::move(r));
  }

  void record_micro(Report& report, const Settings& s, const MicroOutcome& o, double tp1_s) {
    CaseResult r;
    r.group = fmt::format("Micro: Y = X W^T, W {} x {}, {}-parallel", s.micro_size, s.micro_size,
                          to_string(o.kind));
    r.name = fmt::format("t{} tokens {}", o.t, o.tokens);
    r.params = {{"tp", o.t},
                {"kind", to_string(o.kind)},
                {"tokens", o.tokens},
                {"collective", o.collective}};
    if (o.t > 1 && o.kind == MicroKind::Row && o.collectives != "nccl")
      r.params["collectives"] = o.collectives;
    r.status = o.status;
    r.note = o.note;
    if (o.status != "ok") {
      report.add(std::move(r));
      return;
    }
    r.metric("compute", ms(o.compute_s), "ms");
    r.metric("compute_tflops", o.flops_per_rank / o.compute_s / 1e12, "TFLOP/s");
    if (o.t > 1) {
      const double bf =
          o.kind == MicroKind::Row ? allreduce_bus_factor(o.t) : static_cast<double>(o.t - 1) / o.t;
      r.metric("communication", ms(o.comm_s), "ms");
      r.metric("total", ms(o.total_s), "ms");
      r.metric("comm_MB", o.comm_bytes / 1e6, "MB");
      if (o.comm_s > 0) r.metric("busbw", bf * o.comm_bytes / o.comm_s / 1e9, "GB/s");
      // The bus bandwidth that would hide the collective entirely behind the GEMM.
      r.metric("busbw_to_hide", bf * o.comm_bytes / o.compute_s / 1e9, "GB/s");
      if (o.overlap_s > 0) {
        r.metric("overlapped", ms(o.overlap_s), "ms");
        r.metric("overlap_saved", 100 * (1 - o.overlap_s / o.total_s), "%");
      }
    }
    if (tp1_s > 0) r.metric("speedup", tp1_s / o.total_s, "x");
    r.metric("check_error", o.check_error, "rel");
    if (o.overlap_s > 0) r.metric("overlapped_check_error", o.overlap_check_error, "rel");
    report.add(std::move(r));
  }

  void headline(Report& report, const std::map<int, std::vector<Outcome>>& by_t) {
    for (const auto& [t, outcomes] : by_t) {
      if (t == 1) continue;
      for (const Outcome& o : outcomes) {
        if (o.status != "ok" || o.batch != 1) continue;
        const Outcome* one = base(by_t, o);
        if (!one) continue;
        const double sp = speedup(one->step.median_s(), fastest_s(o));
        if (o.phase == model::Phase::Prefill && o.length == 4096) {
          report.set_headline(headline_key(HeadlineKind::PrefillSpeedup, t, 4096), sp, "x");
          if (o.ops.total_s() > 0)
            report.set_headline(headline_key(HeadlineKind::CommSharePrefill, t, 4096),
                                100 * comm_share(o.ops.comm_s, o.ops.total_s()), "%");
        }
        if (o.phase == model::Phase::Decode && o.length == 2048)
          report.set_headline(headline_key(HeadlineKind::DecodeSpeedup, t, 2048), sp, "x");
      }
    }
  }

  void sweeps(Report& report, const Settings& s, const std::map<int, std::vector<Outcome>>& by_t) {
    Sweep sp{"tp_prefill_speedup",
             "Prefill speed-up against TP=1 (the faster of whole and overlapped steps)",
             "prompt",
             "tokens",
             "speed-up",
             "x",
             true,
             {}};
    Sweep cs{"tp_prefill_comm_share",
             "Prefill time in all-reduces",
             "prompt",
             "tokens",
             "share",
             "%",
             true,
             {}};
    for (const auto& [t, outcomes] : by_t) {
      if (t == 1) continue;
      Series a{fmt::format("TP={}", t), {}, {}}, b = a;
      for (const Outcome& o : outcomes) {
        if (o.status != "ok" || o.phase != model::Phase::Prefill ||
            o.batch != s.batch_sizes.front())
          continue;
        if (const Outcome* one = base(by_t, o)) {
          a.x.push_back(static_cast<double>(o.length));
          a.y.push_back(speedup(one->step.median_s(), fastest_s(o)));
        }
        if (o.ops.total_s() > 0) {
          b.x.push_back(static_cast<double>(o.length));
          b.y.push_back(100 * comm_share(o.ops.comm_s, o.ops.total_s()));
        }
      }
      if (!a.x.empty()) sp.series.push_back(a);
      if (!b.x.empty()) cs.series.push_back(b);
    }
    for (Sweep* sw : {&sp, &cs})
      if (!sw->series.empty()) report.sweeps.push_back(*sw);
  }
};

}  // namespace

ModulePtr make_tp_module() {
  return std::make_unique<TpModule>();
}

}  // namespace gpubench
