// `gpubench advise`: which layout to run a model on with these GPUs, predicted from building
// blocks measured here, then the best layouts and the one-GPU baseline run end to end and
// checked, measured beside predicted.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <optional>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/module.hpp"
#include "gpubench/core/peaks.hpp"
#include "gpubench/core/peers.hpp"
#include "gpubench/core/progress.hpp"
#include "gpubench/core/result.hpp"
#include "gpubench/core/runs.hpp"
#include "gpubench/core/system.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/core/watchdog.hpp"
#include "gpubench/modules/advise/advise.hpp"

namespace gpubench {

namespace {

using namespace advise;

// One plan's prediction and, when it ran, its measurement.
struct Candidate {
  Plan plan;
  Prediction predicted;
  std::optional<Measured> measured;
  bool baseline = false;
};

// The candidates of one workload and batch, best predicted first (the baseline among them).
struct Question {
  Workload workload = Workload::Latency;
  std::int64_t batch = 1;
  std::vector<Candidate> candidates;
  std::vector<std::string> dropped;  // layouts that cannot run, with why
  // A plan that can run becomes a candidate (one GPU: the baseline); one that cannot, a reason.
  void consider(const Plan& p) {
    if (!p.why_not.empty()) {
      dropped.push_back(fmt::format("{}: {}", p.name(), p.why_not));
      return;
    }
    Candidate c;
    c.plan = p;
    c.baseline = p.layout.gpus() == 1;
    candidates.push_back(c);
  }
};

// Latency: the shorter generation; throughput and training: more tokens a second.
bool better(Workload w, const Prediction& a, const Prediction& b) {
  return w == Workload::Latency ? a.e2e_s < b.e2e_s : a.tokens_per_s > b.tokens_per_s;
}

// What the plans are made for: the first GPU's compute capability (its cuBLASLt workspace) and
// what a GPU may hold, read once before anything is measured.
struct GpuRoom {
  int cc_major = 0;
  std::uint64_t bytes = 0;
  bool copy_engines = false;  // peer access between every pair: overlapped prefill can run
  TrainFootprint train;  // a training replica's, when training is advised
};

// The smallest free memory of the selected GPUs, or --memory.
std::uint64_t gpu_bytes(const Settings& s, const std::vector<int>& gpus) {
  if (s.memory_bytes > 0) return s.memory_bytes;
  std::uint64_t least = ~0ull;
  for (int g : gpus) {
    DeviceGuard guard(g);
    std::size_t free_b = 0, total_b = 0;
    GPB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    least = std::min<std::uint64_t>(least, free_b);
  }
  return least;
}

// Balancing parts of a tp degree: its decode step's at the smallest microbatch measured (what
// generation's time follows), else bytes.
Parts balance_parts(const Settings& s, const Blocks& b, int tp) {
  for (const auto& [key, parts] : b.decode_first)
    if (key.first == tp && parts.layer > 0) return parts;
  return parts_by_bytes(s);
}

class AdviseModule final : public ResolvingModule<Options, Settings> {
 public:
  std::string name() const override { return "advise"; }
  std::string help() const override {
    return "Which parallel layout to run a model on here: predicted, then run and checked";
  }
  std::vector<std::string> examples() const override {
    return {"gpubench advise --model llama-2-7b",
            "gpubench advise --model llama-2-70b --workload throughput --batch-sizes 8,32",
            "gpubench advise --model llama-2-70b --layouts tp=4,tp=2xpp=2,pp=4",
            "gpubench advise --workload train --train-batch 4 --seq-len 4096",
            "gpubench advise --workload latency --prompt 2048 --output-len 256 --top 2",
            "gpubench advise --from results/reference/h100/advise --top 0"};
  }
  void add_options(CLI::App& app) override {
    opts_ = Options{};
    effective_.reset();
    app.add_option("--model", opts_.model, "Model preset (default llama-2-7b)");
    app.add_option("--model-config", opts_.model_config,
                   "A HuggingFace config.json instead of a preset");
    app.add_option("--workload", opts_.workload,
                   "latency (one sequence a replica: time to first token and per token), "
                   "throughput (tokens/s at --batch-sizes), train (data-parallel training "
                   "steps) or all (default)");
    app.add_option("--prompt", opts_.prompt, "Prompt tokens a sequence (default 1024; quick 512)");
    app.add_option("--output-len", opts_.output_len,
                   "Tokens generated a sequence (default 128; quick 32)");
    app.add_option("--batch-sizes", opts_.batch_sizes,
                   "throughput: sequences on the node (default 8,32; quick 16)");
    app.add_option("--train-batch", opts_.train_batch,
                   "train: sequences a GPU trains a step (default 4; quick 1)");
    app.add_option("--seq-len", opts_.seq_len,
                   "train: tokens a sequence (default 4096; quick 1024)");
    app.add_option("--memory", opts_.memory,
                   "GiB a GPU may hold (default: what each GPU has free)");
    app.add_option("--layers", opts_.layers, "Run only this many decoder layers (0: all)")
        ->capture_default_str();
    app.add_option("--dtype", opts_.dtype, "Weights and activations: bf16 or fp16")
        ->capture_default_str();
    app.add_option("--top", opts_.top,
                   "Layouts run besides the one-GPU baseline, per workload and batch (default "
                   "3; quick 1)");
    app.add_option("--layouts", opts_.layouts,
                   "Generation's layouts to rank and run over all the GPUs, e.g. "
                   "tp=4,tp=2xpp=2,pp=4 (default every one; one GPU stays the baseline)");
    app.add_option("--from", opts_.from,
                   "Take the building blocks from this earlier advise run (folder or report) "
                   "instead of measuring them");
    app.add_option("--timeout", opts_.timeout,
                   "Seconds without progress before gpubench ends a stuck run with the report of "
                   "what finished (exit 1)")
        ->capture_default_str();
    app.add_option("--small-collectives", opts_.small_collectives,
                   "Tensor-parallel all-reduces of up to 256 KiB (decode's), timed and run: "
                   "one-shot (one kernel pushing each rank's data to its peers over NVLink), "
                   "nccl, or auto (one-shot where the GPUs have peer access, else nccl)")
        ->capture_default_str();
  }

  // A run given to --from is read before anything runs: one that is not an advise run with
  // building blocks is bad input (whether it matches is known with the mode, in run()).
  void validate() const override {
    const Settings s = resolve_settings(opts_, false);
    if (s.from.empty()) return;
    for (const Report& r : read_run(s.from, "--from").reports)
      if (r.module == "advise" && r.extra.contains("blocks")) {
        (void)Blocks::from_json(r.extra["blocks"]);
        return;
      }
    throw InputError(
        fmt::format("--from: {} holds no advise report with building blocks", s.from));
  }

  Report run(Context& ctx) override {
    Settings s = resolve_settings(opts_, ctx.quick());
    const int gpus = static_cast<int>(ctx.gpus().size());
    const std::vector<Layout> layouts = s.layouts.empty()
                                            ? parallel::every_layout(gpus, s.model)
                                            : parallel::parse_layouts(s.layouts, gpus, s.model);
    // Peer access between every pair: the one-shot kernel and the copy engines can run. One GPU
    // runs no tensor-parallel all-reduce: its path is left unsaid.
    const bool peers = ctx.gpus().size() > 1 && PeerAccess(ctx.gpus()).all();
    if (ctx.gpus().size() > 1)
      s.small_all_reduces = peers && s.small_collectives != "nccl" ? "one-shot" : "nccl";
    rooflines(ctx, s);
    // A run that does not match is bad input: read before anything is measured.
    const std::optional<Blocks> earlier =
        s.from.empty() ? std::nullopt : std::optional<Blocks>(blocks_from_run(s.from, s));
    effective_ = s;
    Report report;
    report.module = name();
    report.config = s.to_json();
    for (const auto& n : s.notes) report.warn(n);
    if (s.small_collectives == "one-shot" && !s.one_shot() && ctx.gpus().size() > 1)
      report.warn(
          "--small-collectives one-shot: these GPUs lack peer access between some pair; the "
          "small all-reduces run over NCCL");
    GpuRoom room;
    room.cc_major = compute_capability_major(ctx.gpus().front());
    room.bytes = gpu_bytes(s, ctx.gpus());
    room.copy_engines = peers;
    if (std::find(s.workloads.begin(), s.workloads.end(), Workload::Train) != s.workloads.end())
      room.train = train_footprint(s, ctx.gpus().front());
    std::vector<Question> questions = plan_all(s, gpus, layouts, room);
    std::vector<Needs> needs;
    for (const Question& q : questions)
      for (const Candidate& c : q.candidates) needs.push_back(needs_of(s, c.plan));
    progress::next("calibration: compute, all-reduces, transfers");
    // Its collectives can hang as the runs' can (a rank that failed, a GPU that stopped): under
    // the same watchdog, which writes the report as it stands. Its limit is twice --timeout
    // (watchdog_limit_s): a layout whose generation outlives --timeout fails on its own (its
    // GPUs drained or skipped) and the others still run.
    ctx.publish(report);
    const Blocks blocks = earlier ? *earlier : [&] {
      auto watchdog = ctx.watchdog("advise", watchdog_limit_s(s.timeout_s));
      return calibrate(ctx, s, merge(needs));
    }();
    if (!s.from.empty()) report.warn(fmt::format("building blocks taken from {}", s.from));
    report.extra["blocks"] = blocks.to_json();
    predict_all(s, blocks, room, questions);
    verify(ctx, s, questions, report);
    assemble(s, questions, report);
    return report;
  }

 protected:
  Settings resolve(const Options& o, bool quick) const override {
    return resolve_settings(o, quick);
  }

 private:
  // The first GPU's HBM bandwidth and dense peak in the run's dtype, for the findings (0 when
  // unknown: the sentence leaves the rooflines out).
  double hbm_GBps = 0, peak_tflops = 0;
  void rooflines(Context& ctx, const Settings& s) {
    hbm_GBps = peak_tflops = 0;
    if (const GpuInfo* info = ctx.system().gpu(ctx.gpus().front())) {
      hbm_GBps = info->hbm_GBps_theoretical();
      if (auto spec = find_peak_spec(*info))
        peak_tflops = spec->peak(s.dtype == ActDtype::BF16 ? "bf16" : "fp16").value_or(0.0);
    }
  }

  // The layouts of the GPUs (and one GPU alone) for every workload and batch, planned with
  // balancing by bytes; those that cannot run are dropped with why.
  std::vector<Question> plan_all(const Settings& s, int gpus, std::vector<Layout> layouts,
                                 const GpuRoom& room) {
    if (gpus > 1) layouts.insert(layouts.begin(), Layout{});
    std::vector<Question> out;
    for (Workload w : s.workloads) {
      if (w == Workload::Train) {
        out.push_back(plan_training(s, gpus, room));
        continue;
      }
      for (std::int64_t batch :
           w == Workload::Latency ? std::vector<std::int64_t>{1} : s.batch_sizes) {
        Question q;
        q.workload = w;
        q.batch = batch;
        for (const Layout& l : layouts) {
          const Plan p = make_plan(s, l, w, batch, parts_by_bytes(s), room.cc_major, room.bytes);
          q.consider(p);
          // Its overlapped twin where it applies (no warning where it does not).
          if (room.copy_engines && p.why_not.empty() && overlap_applies(s, l, p.micro))
            q.consider(
                make_plan(s, l, w, batch, parts_by_bytes(s), room.cc_major, room.bytes, true));
        }
        out.push_back(q);
      }
    }
    return out;
  }

  // Training: one GPU alone (the baseline) and, on several, each data-parallel strategy over
  // them all.
  static Question plan_training(const Settings& s, int gpus, const GpuRoom& room) {
    Question q;
    q.workload = Workload::Train;
    q.batch = s.train_batch;
    q.consider(make_train_plan(s, 1, parallel::Strategy::Ddp, room.train, room.bytes));
    if (gpus > 1)
      for (parallel::Strategy k : parallel::every_strategy())
        q.consider(make_train_plan(s, gpus, k, room.train, room.bytes));
    return q;
  }

  // Plans again with the measured parts, predicted and ranked; candidates whose blocks could
  // not be measured are dropped.
  void predict_all(const Settings& s, const Blocks& blocks, const GpuRoom& room,
                   std::vector<Question>& questions) {
    for (Question& q : questions) {
      std::vector<Candidate> kept;
      for (Candidate& c : q.candidates) {
        // Training plans balance nothing: they are as planned.
        const Plan p = q.workload == Workload::Train
                           ? c.plan
                           : make_plan(s, c.plan.layout, q.workload, q.batch,
                                       balance_parts(s, blocks, c.plan.layout.tp), room.cc_major,
                                       room.bytes, c.plan.overlap);
        try {
          if (!p.why_not.empty()) throw InputError(p.why_not);
          c.plan = p;
          c.predicted = predict(s, c.plan, blocks);
          kept.push_back(c);
        } catch (const InputError& e) {
          q.dropped.push_back(fmt::format("{}: {}", c.plan.name(), e.what()));
        }
      }
      std::stable_sort(kept.begin(), kept.end(), [&](const Candidate& a, const Candidate& b) {
        return better(q.workload, a.predicted, b.predicted);
      });
      // A layout runs its prefill one way: the twin predicted slower is dropped, so the
      // layouts verified are distinct ones.
      std::vector<Plan> ranked;
      for (const Candidate& c : kept) ranked.push_back(c.plan);
      q.candidates.clear();
      for (std::size_t i = 0; i < kept.size(); ++i) {
        if (const int twin = better_twin(ranked, i); twin >= 0)
          q.dropped.push_back(fmt::format("{}: predicted slower than {}", ranked[i].name(),
                                          ranked[static_cast<std::size_t>(twin)].name()));
        else
          q.candidates.push_back(kept[i]);
      }
    }
  }

  // The best --top of each question and its baseline, run end to end on their GPUs.
  void verify(Context& ctx, const Settings& s, std::vector<Question>& questions, Report& report) {
    std::size_t runs = 0;
    for (const Question& q : questions)
      runs += std::min<std::size_t>(q.candidates.size(), s.top + 1);
    progress::expect(runs + 1);
    References refs;
    for (Question& q : questions) {
      int shown = 0;
      for (Candidate& c : q.candidates) {
        if (Context::interrupted()) return;
        if (!c.baseline && shown >= s.top) continue;
        if (!c.baseline) ++shown;
        progress::next(
            fmt::format("{}, batch {}: {}", to_string(q.workload), q.batch, c.plan.name()));
        if (const int gpu = stuck_gpu(ctx, c.plan); gpu >= 0) {
          c.measured = Measured{};
          c.measured->status = "skipped";
          c.measured->note =
              fmt::format("not run: GPU {} still has work of a failed layout, and its memory", gpu);
          continue;
        }
        auto watchdog = ctx.watchdog("advise", watchdog_limit_s(s.timeout_s));
        try {
          if (q.workload == Workload::Train)
            c.measured = run_training(ctx, s, c.plan);
          else if (auto group = leading_ranks(ctx, c.plan.layout.gpus(), "--workload"))
            c.measured = run_generation(ctx, s, c.plan, *group, refs);
        } catch (const std::exception& e) {
          // One layout that breaks (out of memory, a GPU error, a shape its engine refuses:
          // the user's input was checked before any GPU work) is reported as failed; a stuck
          // one is the watchdog's, which writes the report published here.
          c.measured = Measured{};
          c.measured->status = "failed";
          c.measured->note = e.what();
          // Its ranks have ended, their communicators aborted; a GPU whose work did not drain
          // stays marked (RankRun), and the layouts on it are skipped.
        }
        Report partial = report;
        assemble(s, questions, partial);
        ctx.publish(partial);
      }
      confirm_across_layouts(q);
    }
  }

  // The first GPU of the plan's (the run's leading ones) still marked stuck, or -1.
  static int stuck_gpu(Context& ctx, const Plan& p) {
    const auto n =
        std::min<std::size_t>(static_cast<std::size_t>(p.layout.gpus()), ctx.gpus().size());
    for (std::size_t i = 0; i < n; ++i)
      if (device_stuck(ctx.gpus()[i])) return ctx.gpus()[i];
    return -1;
  }

  // A layout that ran with no reference (the model does not fit one GPU) is confirmed by a
  // later layout checked against it.
  static void confirm_across_layouts(Question& q) {
    for (Candidate& c : q.candidates) {
      if (!c.measured || c.measured->status != "unchecked") continue;
      for (const Candidate& o : q.candidates)
        if (o.measured && o.measured->status == "ok" && o.plan.sequences == c.plan.sequences &&
            o.measured->checked_by == fmt::format("layout {}", c.plan.name())) {
          c.measured->status = "ok";
          c.measured->checked_by = fmt::format("layout {}", o.plan.name());
          c.measured->note = fmt::format("agrees with {} (relative error {:.3g})", o.plan.name(),
                                         o.measured->check_error);
          break;
        }
    }
  }

  void assemble(const Settings& s, const std::vector<Question>& questions, Report& report) {
    std::vector<double> errors;
    auto advice = nlohmann::ordered_json::array();
    for (const Question& q : questions) {
      const std::string group =
          q.workload == Workload::Latency
              ? fmt::format("Latency: {}, {}-token prompt, {} generated", s.model.name, s.prompt,
                            s.output_len)
          : q.workload == Workload::Throughput
              ? fmt::format("Throughput: {}, {}, {}-token prompts, {} generated", s.model.name,
                            sequences(q.batch), s.prompt, s.output_len)
              : fmt::format("Training: {} ({} layers), {} of {} tokens a GPU a step",
                            s.model.name, s.layers, sequences(q.batch), s.seq_len);
      const Candidate* best = nullptr;
      const Candidate* base = nullptr;
      for (const Candidate& c : q.candidates) {
        if (c.baseline) base = &c;
        if (c.measured && c.measured->status == "ok" &&
            (!best || better(q.workload, measured_as_prediction(*c.measured),
                             measured_as_prediction(*best->measured))))
          best = &c;
      }
      for (const Candidate& c : q.candidates) add_row(report, group, q, c, errors, best == &c);
      for (const std::string& d : q.dropped) report.warn(fmt::format("{}: {}", group, d));
      if (best) headline(report, q, *best, base, advice);
    }
    if (!errors.empty()) {
      double sum = 0, worst = 0;
      for (double e : errors) {
        sum += std::fabs(e);
        worst = std::max(worst, std::fabs(e));
      }
      report.set_headline("prediction_mean_abs_error_pct", sum / errors.size(), "%");
      report.set_headline("prediction_max_abs_error_pct", worst, "%");
    }
    report.extra["advice"] = advice;
  }

  static Prediction measured_as_prediction(const Measured& m) {
    Prediction p;
    p.ttft_s = m.ttft_s;
    p.tpot_s = m.tpot_s;
    p.e2e_s = m.e2e_s;
    p.tokens_per_s = m.tokens_per_s;
    return p;
  }

  static void add_row(Report& report, const std::string& group, const Question& q,
                      const Candidate& c, std::vector<double>& errors, bool best) {
    CaseResult r;
    r.group = group;
    r.name = c.plan.name() + (c.baseline ? " (one GPU)" : "");
    if (q.workload == Workload::Train) {
      add_train_row(report, r, c, errors, best);
      return;
    }
    r.params = {{"workload", to_string(q.workload)},
                {"batch", c.plan.batch},
                {"dp", c.plan.layout.dp},
                {"tp", c.plan.layout.tp},
                {"pp", c.plan.layout.pp},
                {"overlap_chunks", c.plan.overlap ? kOverlapChunks : 1},
                {"microbatches", c.plan.m},
                {"stage_layers", c.plan.stage_layers}};
    const Prediction& p = c.predicted;
    r.metric("pred_ttft_ms", p.ttft_s * 1e3, "ms");
    r.metric("pred_tpot_ms", p.tpot_s * 1e3, "ms");
    r.metric("pred_tokens_per_s", p.tokens_per_s, "tokens/s");
    if (predicted_only(report, r, c)) return;
    const Measured& m = *c.measured;
    r.status = m.status;
    r.note =
        m.note.empty() && !m.checked_by.empty()
            ? fmt::format("checked against {} (relative error {:.3g})", m.checked_by, m.check_error)
            : m.note;
    if (m.cut_layers > 0 && m.status != "failed")
      r.note += fmt::format("; cut to {} layers: {:.3g} from one GPU", m.cut_layers, m.cut_error);
    if (m.e2e_s > 0) {
      r.metric("ttft_ms", m.ttft_s * 1e3, "ms");
      r.metric("tpot_ms", m.tpot_s * 1e3, "ms");
      r.metric("tokens_per_s", m.tokens_per_s, "tokens/s");
      const double err = error_pct(p.e2e_s, m.e2e_s);
      r.metric("error_pct", err, "%");
      r.metric("ttft_error_pct", error_pct(p.ttft_s, m.ttft_s), "%");
      if (m.tpot_s > 0) r.metric("tpot_error_pct", error_pct(p.tpot_s, m.tpot_s), "%");
      if (m.status == "ok") errors.push_back(err);
    }
    if (best) r.note = "best measured; " + r.note;
    report.add(r);
  }

  // The plan's memory; a candidate that did not run is added as predicted only (true).
  static bool predicted_only(Report& report, CaseResult& r, const Candidate& c) {
    r.metric("memory_GiB", static_cast<double>(c.plan.memory_per_gpu) / (1ull << 30), "GiB");
    if (c.measured) return false;
    r.status = "unchecked";
    r.note = "predicted only: not among the layouts run";
    report.add(r);
    return true;
  }

  static void add_train_row(Report& report, CaseResult& r, const Candidate& c,
                            std::vector<double>& errors, bool best) {
    r.params = {{"workload", "train"},
                {"batch", c.plan.batch},
                {"dp", c.plan.layout.dp},
                {"strategy", parallel::to_string(c.plan.strategy)},
                {"sequences_per_gpu", c.plan.micro},
                {"buckets", c.plan.buckets.size()}};
    const Prediction& p = c.predicted;
    r.metric("pred_step_ms", p.e2e_s * 1e3, "ms");
    r.metric("pred_tokens_per_s", p.tokens_per_s, "tokens/s");
    r.metric("pred_exposed_comm_ms", p.comm_s * 1e3, "ms");
    if (predicted_only(report, r, c)) return;
    const Measured& m = *c.measured;
    r.status = m.status;
    r.note = m.checked_by.empty() ? m.note
                                  : fmt::format("checked against {} (gradient error {:.3g})",
                                                m.checked_by, m.check_error);
    if (m.e2e_s > 0) {
      r.metric("step_ms", m.e2e_s * 1e3, "ms");
      r.metric("tokens_per_s", m.tokens_per_s, "tokens/s");
      r.metric("measured_memory_GiB", static_cast<double>(m.memory_per_gpu) / (1ull << 30), "GiB");
      const double err = error_pct(p.e2e_s, m.e2e_s);
      r.metric("error_pct", err, "%");
      if (m.status == "ok") errors.push_back(err);
    }
    if (best) r.note = "best measured; " + r.note;
    report.add(r);
  }

  static std::string question_title(const Question& q) {
    return q.workload == Workload::Latency      ? std::string("Latency")
           : q.workload == Workload::Throughput ? "Throughput at " + sequences(q.batch)
                                                : std::string("Training");
  }

  void headline(Report& report, const Question& q, const Candidate& best, const Candidate* base,
                nlohmann::ordered_json& advice) const {
    const Measured& m = *best.measured;
    const std::string sentence = fmt::format(
        "{}: run {}. {} Measured: {} (prediction error {:+.1f}%).", question_title(q),
        best.plan.layout.gpus() == 1 ? "one GPU" : best.plan.name(),
        explain(best.plan, best.predicted, base ? base->predicted : Prediction{}, hbm_GBps,
                peak_tflops),
        q.workload == Workload::Latency ? fmt::format("{:.2f} ms a token, {:.1f} ms to the first",
                                                      m.tpot_s * 1e3, m.ttft_s * 1e3)
        : q.workload == Workload::Train
            ? fmt::format("{:.1f} ms a step, {:.0f} tokens/s", m.e2e_s * 1e3, m.tokens_per_s)
            : fmt::format("{:.0f} tokens/s", m.tokens_per_s),
        error_pct(best.predicted.e2e_s, m.e2e_s));
    report.findings.push_back(sentence);
    if (q.workload == Workload::Latency) {
      report.set_headline_text("latency_best_layout", best.plan.name());
      report.set_headline("latency_best_tpot_ms", m.tpot_s * 1e3, "ms");
      report.set_headline("latency_best_ttft_ms", m.ttft_s * 1e3, "ms");
    } else if (q.workload == Workload::Train) {
      report.set_headline_text("train_best_layout", best.plan.name());
      report.set_headline("train_best_step_ms", m.e2e_s * 1e3, "ms");
      report.set_headline("train_best_tokens_per_s", m.tokens_per_s, "tokens/s");
    } else {
      report.set_headline_text(fmt::format("throughput_best_layout_b{}", q.batch),
                               best.plan.name());
      report.set_headline(fmt::format("throughput_best_tokens_per_s_b{}", q.batch), m.tokens_per_s,
                          "tokens/s");
    }
    advice.push_back({{"workload", to_string(q.workload)},
                      {"batch", q.batch},
                      {"layout", best.plan.name()},
                      {"why", sentence}});
  }
};

}  // namespace

ModulePtr make_advise_module() {
  return std::make_unique<AdviseModule>();
}

}  // namespace gpubench
