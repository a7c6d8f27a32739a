// `gpubench pp`: what pipeline parallelism costs on this machine. The engine's layers in p
// contiguous stages on p GPUs, stage to stage over NCCL send/recv: inference (a batch of prompts
// in m microbatches) and training steps under the GPipe, 1F1B and interleaved 1F1B schedules,
// each against one GPU, with its measured bubble beside the theory, its transfers, its peak
// activation memory and a Chrome trace of its timeline.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
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
#include "gpubench/modules/pp/pp.hpp"

namespace gpubench {

namespace {

using namespace pp;

class PpModule final : public ResolvingModule<Options, Settings> {
 public:
  std::string name() const override { return "pp"; }
  std::string help() const override {
    return "Pipeline-parallel transformer: bubbles, schedules, layouts";
  }

  std::vector<std::string> examples() const override {
    return {"gpubench pp --layouts all",
            "gpubench pp --schedule gpipe,1f1b,interleaved --microbatches 4:16:x2",
            "gpubench pp --workload inference --pp 2"};
  }

  void add_options(CLI::App& app) override {
    opts_ = Options{};
    effective_.reset();
    app.add_option("--model", opts_.model, "Model preset (default llama-2-7b)");
    app.add_option("--model-config", opts_.model_config,
                   "A HuggingFace config.json instead of a preset");
    app.add_option("--pp", opts_.pp, "Stage counts (default 2,4: those the GPUs allow)");
    app.add_option("--microbatches", opts_.microbatches,
                   "Microbatches a step (default 1,2,4,8,16; quick 4,16)");
    app.add_option("--schedule", opts_.schedule,
                   "Training schedules: gpipe, 1f1b, interleaved (default gpipe,1f1b)");
    app.add_option("--chunks", opts_.chunks, "Model chunks per stage of the interleaved schedule")
        ->capture_default_str();
    app.add_option("--batch,--batch-sizes", opts_.batch,
                   "Sequences a step (one batch size), split into the microbatches")
        ->capture_default_str();
    app.add_option("--seq-len", opts_.seq_len, "Tokens a sequence")->capture_default_str();
    app.add_option("--layers", opts_.layers, "Run only this many decoder layers (0: all; quick 8)")
        ->capture_default_str();
    app.add_option("--workload", opts_.workload, "inference, training or both (default both)");
    app.add_option(
           "--transfers", opts_.transfers,
           "Training's stage-to-stage transfers: nccl, or copy-engine (peer copies "
           "ordered by flags in GPU memory, no SMs; one process with peer access, 2 stages)")
        ->capture_default_str();
    app.add_option("--nccl-ctas", opts_.nccl_ctas,
                   "CTAs (channels) NCCL may run a stage-to-stage transfer on; its kernels take "
                   "these SMs from the stage's compute while they wait (0: NCCL's own choice, "
                   "up to 32 per peer over NVLink)")
        ->capture_default_str();
    app.add_option("--stage-split", opts_.stage_split,
                   "Where training stages may end: layer, or half-layer (also between a layer's "
                   "attention and its MLP, to even out the LM head's work)")
        ->capture_default_str();
    app.add_option("--timeout", opts_.timeout,
                   "Seconds without progress (every stage past a barrier) before gpubench ends "
                   "a stuck run with the report of the pieces finished (exit 1)")
        ->capture_default_str();
    app.add_option("--layouts", opts_.layouts,
                   "Parallel layouts of the inference workload over all the GPUs, e.g. "
                   "dp=4,tp=2xdp=2,pp=2xdp=2,tp=2xpp=2,tp=4, or all");
    app.add_option("--layout-batches", opts_.layout_batches,
                   "The layouts' batch sizes (default 1 and --batch)");
    app.add_option("--dtype", opts_.dtype, "Weights and activations: bf16 or fp16")
        ->capture_default_str();
  }

  std::optional<std::string> unsupported(const System& system,
                                         const std::vector<int>& gpus) const override {
    if (auto why = Module::unsupported(system, gpus)) return why;
    const int n = rank_count(gpus);
    if (n < 2 && trim(opts_.pp).empty())
      return fmt::format("pipeline parallelism needs 2 or more GPUs (got {})", n);
    return std::nullopt;
  }

  bool supports_mpi() const override { return true; }

  Report run(Context& ctx) override {
    const ProcessInfo& proc = process_info();
    const int visible = rank_count(ctx.gpus());
    const Settings s = resolve_settings(opts_, ctx.quick(), visible);
    effective_ = s;
    Outcomes done;
    done.report.module = name();
    done.report.config = s.to_json();
    for (const auto& n : s.notes) done.report.warn(n);
    std::vector<int> degrees = s.pp;
    if (std::find(degrees.begin(), degrees.end(), 1) == degrees.end())
      degrees.insert(degrees.begin(), 1);  // one GPU: what speed-ups are against
    std::unique_ptr<RankGroup> world;
    if (proc.mpi) world = RankGroup::over_mpi(process_gpu(ctx.gpus(), false));
    // Between pieces of work every process asks the same question and gets the same answer
    // (under a watchdog: every process is there, so the answer is quick unless one is stuck).
    auto stopping = [&] {
      if (!world) return Context::interrupted();
      const auto watchdog = ctx.watchdog("pp", s.timeout_s);
      return world->stop_requested();
    };
    done.report.extra["process_model"] =
        proc.mpi ? fmt::format("{} (one process per GPU)", proc.launcher)
                 : std::string("one process, a thread per GPU");
    // A stage blocked inside the driver, NCCL or MPI (a GPU waiting on another that never
    // comes) cannot be reached by an exception: each piece of work runs under a watchdog on its
    // ranks, from the split that makes their group to the barrier where the processes outside
    // it wait (without one: the piece may take long); it ends a stuck run with the report of
    // the pieces before, published after each.
    ctx.publish(done.report);
    const auto watched = [&](int ranks, const char* option, const auto& body) {
      auto watchdog = ctx.watchdog("pp", s.timeout_s);
      if (auto group = leading_ranks(ctx, ranks, option))
        body(*group);
      else
        watchdog.reset();
      if (world) world->barrier();  // the processes outside this piece wait here
      ctx.publish(assemble(s, done));
    };
    ReferenceLogits reference;
    std::size_t pieces = 0;
    for (int p : degrees)
      pieces += (s.inference ? 1 : 0) + (s.training ? (p == 1 ? 1 : s.schedules.size()) : 0);
    progress::expect(pieces);
    for (int p : degrees) {
      if (stopping()) break;
      watched(p, "--pp", [&](RankGroup& group) {
        if (s.inference) {
          // One GPU runs the whole batch at once: the speed-ups' base (microbatches matter
          // only to a pipeline).
          Settings one = s;
          if (p == 1) one.microbatches = {1};
          progress::next(fmt::format("inference, {} stage{}", p, p == 1 ? "" : "s"));
          done.inference[p] = run_inference(ctx, one, p, group, reference);
        }
        // One GPU runs 1F1B's order only, whatever the schedules (every schedule is the same
        // work there; 1F1B holds the fewest activations): the speed-ups' base.
        const std::vector<Schedule> schedules =
            p == 1 ? std::vector<Schedule>{Schedule::OneFOneB} : s.schedules;
        if (s.training)
          for (Schedule sch : schedules) {
            if (group.stop_requested()) break;
            progress::next(
                fmt::format("training, {}, {} stage{}", to_string(sch), p, p == 1 ? "" : "s"));
            done.training[{sch, p}] = run_training(ctx, s, p, sch, group);
            ctx.publish(assemble(s, done));
          }
      });
    }
    // Parallel layouts: one GPU first (the base), then each layout over all the GPUs.
    if (!s.layouts_text.empty()) {
      const std::vector<Layout> list = parse_layouts(s.layouts_text, visible, s.model);
      progress::expect(pieces + s.layout_batches.size() * (1 + list.size()));
      for (int batch : s.layout_batches) {
        if (stopping()) break;
        LayoutOutcome base;
        progress::next(fmt::format("layouts, batch {}: one GPU", batch));
        watched(1, "--layouts", [&](RankGroup& group) {
          base = run_layout(ctx, s, Layout{}, batch, group, reference);
        });
        for (const Layout& l : list) {
          if (stopping()) break;
          progress::next(fmt::format("layouts, batch {}: {}", batch, l.name()));
          LayoutOutcome o;
          watched(l.gpus(), "--layouts",
                  [&](RankGroup& group) { o = run_layout(ctx, s, l, batch, group, reference); });
          done.layouts.emplace_back(o, base);
        }
      }
    }
    return assemble(s, done);
  }

 private:
  // What the run finished so far, and the report it started with (settings, warnings).
  struct Outcomes {
    Report report;
    std::map<int, std::vector<InferenceOutcome>> inference;
    std::map<std::pair<Schedule, int>, std::vector<TrainingOutcome>> training;
    std::vector<std::pair<LayoutOutcome, LayoutOutcome>> layouts;  // (outcome, its base)
  };

  // The report of what finished: published after each piece of work, returned at the end.
  Report assemble(const Settings& s, const Outcomes& done) {
    Report report = done.report;
    // Each batch's one-GPU base as a row of its own, then its layouts.
    const auto& layouts = done.layouts;
    for (std::size_t i = 0; i < layouts.size(); ++i) {
      const auto& [o, base] = layouts[i];
      if (i == 0 || layouts[i - 1].first.batch != o.batch) record_layout(report, s, base, base);
      record_layout(report, s, o, base);
    }
    for (const auto& [p, outcomes] : done.inference)
      for (const InferenceOutcome& o : outcomes) record_inference(report, s, o, done.inference);
    for (const auto& [key, outcomes] : done.training)
      for (const TrainingOutcome& o : outcomes) record_training(report, s, o, done.training);
    headline(report, done.training);
    layout_headline(report, s, layouts);
    sweeps(report, s, done.training, layouts);
    if (Context::interrupted()) report.warn("interrupted: only the points finished are reported");
    report.settle_status();
    return report;
  }

  Settings resolve(const Options& o, bool quick) const override {
    return resolve_settings(o, quick, /*visible_gpus=*/0);
  }

  // A case's name, its parameters (stages, microbatches, layers per stage from half-layer
  // blocks per stage, as "16.5/15.5") and status; false when it did not run or failed (nothing
  // more to add).
  static bool begin_case(CaseResult& r, int p, int m, const std::vector<int>& stage_blocks,
                         const std::string& status, const std::string& note) {
    r.name = fmt::format("p{} m{}", p, m);
    r.params = {{"pp", p}, {"microbatches", m}, {"stage_layers", stage_layers_text(stage_blocks)}};
    r.status = status;
    r.note = note;
    return status == "ok";
  }

  // Speed-up against the one-GPU step and efficiency (speed-up per GPU).
  static void speedup_metrics(CaseResult& r, double one_gpu_s, double step_s, int gpus) {
    const double sp = one_gpu_s / step_s;
    r.metric("speedup", sp, "x");
    r.metric("efficiency", 100 * sp / gpus, "%");
  }

  // What the stages of a pipeline were balanced by, once per workload, stage count and
  // schedule, into the report's extra data.
  static void note_balance(Report& report, const std::string& workload, int p,
                           const std::string& schedule, const std::vector<int>& stage_blocks,
                           const StageCosts& c) {
    if (p < 2) return;
    nlohmann::ordered_json& all = report.extra["stage_balance"];
    if (!all.is_array()) all = nlohmann::ordered_json::array();
    for (const auto& e : all)
      if (e["workload"] == workload && e["pp"] == p && e["schedule"] == schedule) return;
    all.push_back({{"workload", workload},
                   {"pp", p},
                   {"schedule", schedule},
                   {"stage_layers", stage_layers_text(stage_blocks)},
                   {"measured", c.measured},
                   {"layer_s", c.layer},
                   {"embedding_s", c.embed},
                   {"head_s", c.head},
                   {"attention_half_s", c.attention},
                   {"by", c.describe()}});
  }

  static const InferenceOutcome* one_gpu(const std::map<int, std::vector<InferenceOutcome>>& all) {
    const auto it = all.find(1);
    if (it == all.end()) return nullptr;
    for (const InferenceOutcome& o : it->second)
      if (o.m == 1 && o.status == "ok") return &o;
    return nullptr;
  }

  void record_inference(Report& report, const Settings& s, const InferenceOutcome& o,
                        const std::map<int, std::vector<InferenceOutcome>>& all) {
    CaseResult r;
    r.group =
        fmt::format("Inference: {} {} prefill and one decode step, {} layers, batch {} x {} tokens",
                    s.model.name, s.dtype, s.layers, s.batch, s.seq_len);
    const std::vector<int> blocks = blocks_of_layers(o.stage_layers);
    note_balance(report, "inference", o.p, "", blocks, o.balance);
    if (!begin_case(r, o.p, o.m, blocks, o.status, o.note)) {
      report.add(std::move(r));
      return;
    }
    const double step = o.step.median_s();
    r.metric("time", ms(step), "ms");
    r.metric("tokens_per_s", s.batch * s.seq_len / step, "tok/s");
    if (const InferenceOutcome* one = one_gpu(all))
      speedup_metrics(r, one->step.median_s(), step, o.p);
    if (o.p > 1) {
      r.metric("bubble_measured", 100 * o.timeline.bubble, "%");
      r.metric("bubble_theory", 100 * o.bubble_theory, "%");
      r.metric("transfer", ms(o.transfer_s), "ms");
      r.metric("transfer_MB", o.transfer_bytes / 1e6, "MB");
    }
    if (o.decode.median_s() > 0) {
      // One decode step: a token for every sequence, every microbatch through every stage.
      r.metric("decode", ms(o.decode.median_s()), "ms");
      r.metric("decode_tokens_per_s", s.batch / o.decode.median_s(), "tok/s");
      if (const InferenceOutcome* one = one_gpu(all); one && one->decode.median_s() > 0)
        r.metric("decode_speedup", one->decode.median_s() / o.decode.median_s(), "x");
    }
    r.metric("memory_per_gpu", o.memory_per_gpu / kGiB, "GiB");
    if (o.p > 1) r.metric("check_error", o.check_error, "rel");
    if (o.p > 1) r.metric("decode_check_error", o.decode_check_error, "rel");
    r.stats = o.step.stats;
    report.add(std::move(r));
    if (o.p > 1)
      report.attachments.emplace_back(
          fmt::format("pp_traces/inference_p{}_m{}.json", o.p, o.m),
          chrome_trace(
              o.timeline, Schedule::GPipe, 0.0,
              fmt::format("{} inference, {} stages, {} microbatches", s.model.name, o.p, o.m)));
  }

  // The one-GPU training step of the same microbatch count.
  static const TrainingOutcome* one_gpu(
      const std::map<std::pair<Schedule, int>, std::vector<TrainingOutcome>>& all, int m) {
    const auto it = all.find({Schedule::OneFOneB, 1});
    if (it == all.end()) return nullptr;
    for (const TrainingOutcome& o : it->second)
      if (o.m == m && o.status == "ok") return &o;
    return nullptr;
  }
  static const TrainingOutcome* find(
      const std::map<std::pair<Schedule, int>, std::vector<TrainingOutcome>>& all, Schedule sch,
      int p, int m) {
    const auto it = all.find({sch, p});
    if (it == all.end()) return nullptr;
    for (const TrainingOutcome& o : it->second)
      if (o.m == m && o.status == "ok") return &o;
    return nullptr;
  }

  void record_training(
      Report& report, const Settings& s, const TrainingOutcome& o,
      const std::map<std::pair<Schedule, int>, std::vector<TrainingOutcome>>& all) {
    CaseResult r;
    r.group = fmt::format("Training ({}): {} {}, {} layers, batch {} x {} tokens",
                          o.p == 1 ? "one GPU" : to_string(o.schedule), s.model.name, s.dtype,
                          s.layers, s.batch, s.seq_len);
    note_balance(report, "training", o.p, to_string(o.schedule), o.stage_blocks, o.balance);
    const bool ok = begin_case(r, o.p, o.m, o.stage_blocks, o.status, o.note);
    r.params["schedule"] = to_string(o.schedule);
    if (o.p > 1) r.params["transfers"] = o.transport;
    if (o.p > 1 && o.transport == "nccl")
      r.params["nccl_ctas"] = o.nccl_ctas > 0 ? std::to_string(o.nccl_ctas) : "default";
    if (o.v > 1) r.params["chunks"] = o.v;
    if (!ok) {
      report.add(std::move(r));
      return;
    }
    const double step = o.step.median_s();
    r.metric("step", ms(step), "ms");
    r.metric("tokens_per_s", s.batch * s.seq_len / step, "tok/s");
    r.metric("tflops_per_gpu", o.flops / step / o.p / 1e12, "TFLOP/s");
    if (const TrainingOutcome* one = one_gpu(all, o.m); one && o.p > 1)
      speedup_metrics(r, one->step.median_s(), step, o.p);
    if (o.p > 1) {
      r.metric("bubble_measured", 100 * o.timeline.bubble, "%");
      r.metric("bubble_theory", 100 * o.bubble_theory, "%");
      r.metric("bubble_gap", 100 * (o.timeline.bubble - o.bubble_theory), "pp");
      // The share of it that the stages' own (unequal) times explain (left out, not fatal, for
      // a timeline that lacks a stage's spans).
      try {
        r.metric("bubble_stage_times",
                 100 * stage_time_bubble(o.timeline, o.schedule, o.p, o.m, o.v), "%");
        if (o.transfer_s > 0 && o.transfers > 0)
          r.metric("bubble_with_transfers",
                   100 * stage_time_bubble(o.timeline, o.schedule, o.p, o.m, o.v,
                                           o.transfer_s / o.transfers),
                   "%");
      } catch (const InputError& e) {
        spdlog::warn("pp: no bubble_stage_times for p {} m {}: {}", o.p, o.m, e.what());
      }
      r.metric("transfer", ms(o.transfer_s), "ms");
      r.metric("transfer_exposed", ms(o.transfer_exposed_s), "ms");
      r.metric("transfer_MB", o.transfer_bytes / 1e6, "MB");
      if (o.transfer_s > 0 && o.transfers > 0)
        r.metric("transfer_GBps", o.transfer_bytes * o.transfers / o.transfer_s / 1e9, "GB/s");
      if (o.transfer_alone_s > 0)
        r.metric("nccl_alone_GBps", o.transfer_bytes / o.transfer_alone_s / 1e9, "GB/s");
      if (o.p2p_copy_s > 0) {
        r.metric("p2p_copy_GBps", o.transfer_bytes / o.p2p_copy_s / 1e9, "GB/s");
        if (o.transfer_s > 0 && o.transfers > 0)
          r.metric(
              "transfer_vs_p2p",
              (o.transfer_bytes * o.transfers / o.transfer_s) / (o.transfer_bytes / o.p2p_copy_s),
              "x");
      }
    }
    // Stage 0 holds the most microbatches in flight.
    if (!o.peak_saved.empty()) {
      r.metric("saved_peak_stage0", o.peak_saved.front() / kGiB, "GiB");
      r.metric("saved_expected_stage0", o.expected_saved.front() / kGiB, "GiB");
      if (o.schedule == Schedule::OneFOneB && o.p > 1)
        if (const TrainingOutcome* g = find(all, Schedule::GPipe, o.p, o.m);
            g && !g->peak_saved.empty() && g->peak_saved.front() > 0) {
          r.metric("saved_vs_gpipe",
                   100.0 * static_cast<double>(o.peak_saved.front()) / g->peak_saved.front(), "%");
          r.metric("saved_bound", 100.0 * std::min(1.0, static_cast<double>(o.p) / o.m), "%");
        }
    }
    r.metric("memory_per_gpu", o.memory_per_gpu / kGiB, "GiB");
    r.metric("check_error", o.check_error, "of tol");
    r.stats = o.step.stats;
    report.add(std::move(r));
    if (o.p > 1)
      report.attachments.emplace_back(
          fmt::format("pp_traces/train_p{}_{}_m{}.json", o.p, to_string(o.schedule), o.m),
          chrome_trace(o.timeline, o.schedule, 0.0,
                       fmt::format("{} training, {}, {} stages, {} microbatches", s.model.name,
                                   to_string(o.schedule), o.p, o.m)));
  }

  void record_layout(Report& report, const Settings& s, const LayoutOutcome& o,
                     const LayoutOutcome& base) {
    if (o.batch == 0) return;  // not run by this process (another's rank under MPI)
    CaseResult r;
    r.group = fmt::format("Layouts: {} {} prefill, {} layers, {}-token prompts, batch {}",
                          s.model.name, s.dtype, s.layers, s.seq_len, o.batch);
    r.name = o.layout.gpus() == 1 ? std::string("1 GPU") : o.layout.name();
    r.params = {{"gpus", o.layout.gpus()}, {"dp", o.layout.dp},   {"tp", o.layout.tp},
                {"pp", o.layout.pp},       {"microbatches", o.m}, {"batch", o.batch}};
    r.status = o.status;
    r.note = o.note;
    if (o.status != "ok") {
      report.add(std::move(r));
      return;
    }
    const double step = o.step.median_s();
    const double tps = o.batch * s.seq_len / step;
    r.metric("tokens_per_s", tps, "tok/s");
    if (base.status == "ok" && base.step.median_s() > 0)
      speedup_metrics(r, base.step.median_s(), step, o.layout.gpus());
    r.metric("latency", ms(step), "ms");
    r.metric("memory_per_gpu", o.memory_per_gpu / kGiB, "GiB");
    r.metric("check_error", o.check_error, "rel");
    r.stats = o.step.stats;
    report.add(std::move(r));
  }

  // The layout with the most tokens/s at the largest batch measured.
  static void layout_headline(Report& report, const Settings& s,
                              const std::vector<std::pair<LayoutOutcome, LayoutOutcome>>& all) {
    int batch = 0;
    for (const auto& [o, base] : all)
      if (o.status == "ok") batch = std::max(batch, o.batch);
    const LayoutOutcome* best = nullptr;
    for (const auto& [o, base] : all)
      if (o.status == "ok" && o.batch == batch &&
          (!best || o.step.median_s() < best->step.median_s()))
        best = &o;
    if (!best) return;
    report.set_headline("best_layout_tokens_per_s", best->batch * s.seq_len / best->step.median_s(),
                        "tok/s");
    report.set_headline_text("best_layout", best->layout.name());
  }

  void headline(Report& report,
                const std::map<std::pair<Schedule, int>, std::vector<TrainingOutcome>>& all) {
    if (const TrainingOutcome* o = find(all, Schedule::OneFOneB, 2, 8)) {
      report.set_headline("pp2_bubble_measured_m8", 100 * o->timeline.bubble, "%");
      report.set_headline("pp2_bubble_theory_m8", 100 * o->bubble_theory, "%");
    }
    if (const TrainingOutcome* o = find(all, Schedule::OneFOneB, 4, 16))
      report.set_headline("pp4_1f1b_step_ms_m16", ms(o->step.median_s()), "ms");
    if (const TrainingOutcome* o = find(all, Schedule::GPipe, 4, 16))
      report.set_headline("pp4_gpipe_step_ms_m16", ms(o->step.median_s()), "ms");
  }

  void sweeps(Report& report, const Settings& s,
              const std::map<std::pair<Schedule, int>, std::vector<TrainingOutcome>>& all,
              const std::vector<std::pair<LayoutOutcome, LayoutOutcome>>& layouts) {
    Sweep b{"pp_bubble",    "Training bubble against microbatches, measured and theory",
            "microbatches", "",
            "bubble",       "%",
            true,           {}};
    for (const auto& [key, outcomes] : all) {
      if (key.second < 2) continue;
      Series meas{fmt::format("p={} {} measured", key.second, to_string(key.first)), {}, {}};
      Series theory{fmt::format("p={} {} theory", key.second, to_string(key.first)), {}, {}};
      for (const TrainingOutcome& o : outcomes) {
        if (o.status != "ok") continue;
        meas.x.push_back(o.m);
        meas.y.push_back(100 * o.timeline.bubble);
        theory.x.push_back(o.m);
        theory.y.push_back(100 * o.bubble_theory);
      }
      if (!meas.x.empty()) {
        b.series.push_back(meas);
        b.series.push_back(theory);
      }
    }
    if (!b.series.empty()) report.sweeps.push_back(b);
    // Layouts: tokens/s against the batch, one line per layout (one GPU included).
    Sweep t{"pp_layouts", "Layouts: prefill tokens/s against the batch",
            "batch",      "sequences",
            "throughput", "tok/s",
            true,         {}};
    std::map<std::string, Series> by_name;
    std::vector<std::string> order;
    auto add = [&](const LayoutOutcome& o, const std::string& name) {
      if (o.status != "ok" || o.step.median_s() <= 0) return;
      if (!by_name.count(name)) {
        by_name[name] = Series{name, {}, {}};
        order.push_back(name);
      }
      Series& series = by_name[name];
      if (!series.x.empty() && series.x.back() == o.batch) return;  // the base, once a batch
      series.x.push_back(o.batch);
      series.y.push_back(o.batch * s.seq_len / o.step.median_s());
    };
    for (const auto& [o, base] : layouts) {
      add(base, "1 GPU");
      add(o, o.layout.name());
    }
    for (const auto& name : order) t.series.push_back(by_name[name]);
    if (!t.series.empty()) report.sweeps.push_back(t);
  }
};

}  // namespace

ModulePtr make_pp_module() {
  return std::make_unique<PpModule>();
}

}  // namespace gpubench
