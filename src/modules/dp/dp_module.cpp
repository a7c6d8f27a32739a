// `gpubench dp`: what data-parallel training costs on this machine. Each strategy (ddp, zero1,
// zero2, fsdp) at each GPU count and batch: the step checked against one GPU's over the
// concatenated batch, then timed, beside the same step without communication and the
// collectives alone, with the memory each GPU holds planned and measured; then ddp's step at
// several bucket sizes.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <map>
#include <optional>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/module.hpp"
#include "gpubench/core/mpi.hpp"
#include "gpubench/core/peaks.hpp"
#include "gpubench/core/progress.hpp"
#include "gpubench/core/result.hpp"
#include "gpubench/core/system.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/modules/dp/dp.hpp"

namespace gpubench {

namespace {

using namespace dp;

double gib(std::uint64_t b) {
  return static_cast<double>(b) / static_cast<double>(1ull << 30);
}

class DpModule final : public ResolvingModule<Options, Settings> {
 public:
  std::string name() const override { return "dp"; }
  std::string help() const override {
    return "Data-parallel training (DDP, ZeRO-1/2, FSDP): scaling, communication, memory";
  }
  std::vector<std::string> examples() const override {
    return {"gpubench dp --strategy ddp,fsdp --gpu-counts 1,4",
            "gpubench dp --model llama-2-7b --layers 8 --batch-sizes 2,4 --seq-len 4096",
            "gpubench dp --strategy ddp --bucket-sweep 1MB,25MB,200MB"};
  }
  // Not part of `all`: a training step of every strategy at every GPU count takes minutes.
  bool runs_in_all() const override { return false; }
  bool supports_mpi() const override { return true; }

  void add_options(CLI::App& app) override {
    opts_ = Options{};
    effective_.reset();
    app.add_option("--model", opts_.model, "Model preset (default llama-2-7b)");
    app.add_option("--model-config", opts_.model_config,
                   "A HuggingFace config.json instead of a preset");
    app.add_option("--strategy", opts_.strategy, "ddp, zero1, zero2, fsdp or all (default)");
    app.add_option("--gpu-counts", opts_.gpu_counts,
                   "GPUs a run spans (default 1, 2, 4, ... and all of the selected)");
    app.add_option("--batch-sizes", opts_.batch_sizes, "Sequences a GPU (default 4; quick 1)");
    app.add_option("--seq-len", opts_.seq_len, "Tokens a sequence (default 4096; quick 1024)");
    app.add_option("--layers", opts_.layers, "Run only this many decoder layers (0: all; quick 4)")
        ->capture_default_str();
    app.add_option("--bucket-size", opts_.bucket_size,
                   "Gradients reduced a bucket at a time, ddp and zero (default 25MB)");
    app.add_option("--bucket-sweep", opts_.bucket_sweep,
                   "ddp's bucket sizes tried on all the GPUs (default 5MB,25MB,100MB; quick or "
                   "none: no sweep)");
    app.add_option("--dtype", opts_.dtype, "Weights, gradients and activations: bf16 or fp16")
        ->capture_default_str();
    app.add_option("--timeout", opts_.timeout,
                   "Seconds without progress before gpubench ends a stuck run with the report of "
                   "what finished (exit 1)")
        ->capture_default_str();
  }

  Report run(Context& ctx) override {
    // "": a thread per GPU (also where MPI is up but the run is in this process alone).
    const std::string launcher = ctx.over_processes() ? process_info().launcher : std::string();
    const Settings s = resolve_settings(opts_, ctx.quick(), rank_count(ctx));
    effective_ = s;
    peak_tflops_ = dense_peak(ctx, s);
    std::vector<Outcome> done, sweep;
    References refs;  // one reference a GPU count and batch, for every strategy
    Report report = assemble(s, done, sweep, launcher);
    ctx.publish(report);
    std::unique_ptr<RankGroup> world;
    if (!launcher.empty()) world = RankGroup::over_mpi(process_gpu(ctx.gpus(), false));
    auto stopping = [&] {
      if (!world) return Context::interrupted();
      const auto watchdog = ctx.watchdog("dp", s.timeout_s);
      return world->stop_requested();
    };
    // Each piece runs under a watchdog on its ranks (see pp): a stuck one ends the run with the
    // report of the pieces before.
    const auto watched = [&](int ranks, const auto& body) {
      auto watchdog = ctx.watchdog("dp", s.timeout_s);
      if (auto group = leading_ranks(ctx, ranks, "--gpu-counts"))
        body(*group);
      else
        watchdog.reset();
      if (world) world->barrier();
      ctx.publish(assemble(s, done, sweep, launcher));
    };
    const int most = s.gpu_counts.back();
    progress::expect(s.strategies.size() * s.gpu_counts.size() * s.batch_sizes.size() +
                     (most > 1 ? s.bucket_sweep.size() : 0));
    for (Strategy k : s.strategies)
      for (int n : s.gpu_counts)
        for (std::int64_t b : s.batch_sizes) {
          if (stopping()) return assemble(s, done, sweep, launcher);
          progress::next(fmt::format("{} on {} GPU{}, {} sequences a GPU", to_string(k), n,
                                     n == 1 ? "" : "s", b));
          watched(n, [&](RankGroup& g) {
            done.push_back(guarded(k, n, b, s.bucket_bytes, [&] {
              return run_strategy(ctx, s, k, b, s.bucket_bytes, g, {}, &refs);
            }));
          });
        }
    if (most > 1)
      for (std::uint64_t bucket : s.bucket_sweep) {
        if (stopping()) break;
        progress::next(fmt::format("ddp on {} GPUs, buckets of {}", most, format_bytes(bucket)));
        watched(most, [&](RankGroup& g) {
          const std::int64_t b = s.batch_sizes.front();
          sweep.push_back(guarded(Strategy::Ddp, most, b, bucket, [&] {
            return run_strategy(ctx, s, Strategy::Ddp, b, bucket, g, {}, &refs);
          }));
        });
      }
    return assemble(s, done, sweep, launcher);
  }

 protected:
  Settings resolve(const Options& o, bool quick) const override {
    return resolve_settings(o, quick, -1);
  }

 private:
  double peak_tflops_ = 0;

  static double dense_peak(Context& ctx, const Settings& s) {
    if (const GpuInfo* info = ctx.system().gpu(ctx.gpus().front()))
      if (auto spec = find_peak_spec(*info))
        return spec->peak(s.dtype == ActDtype::BF16 ? "bf16" : "fp16").value_or(0.0);
    return 0;
  }

  // One point, run: a point that breaks (out of memory despite the plan, a GPU error) is reported
  // as failed and the others still run; bad input ends the run.
  template <class F>
  static Outcome guarded(Strategy k, int gpus, std::int64_t batch, std::uint64_t bucket,
                         const F& run) {
    try {
      return run();
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      Outcome o;
      o.strategy = k;
      o.gpus = gpus;
      o.batch = batch;
      o.bucket_bytes = k == Strategy::Fsdp ? 0 : bucket;
      o.status = "failed";
      o.note = e.what();
      return o;
    }
  }

  // The same strategy and batch on one GPU, measured: what speed-ups are against.
  static const Outcome* single(const std::vector<Outcome>& done, const Outcome& o) {
    for (const Outcome& x : done)
      if (x.strategy == o.strategy && x.batch == o.batch && x.gpus == 1 && x.status == "ok")
        return &x;
    return nullptr;
  }

  Report assemble(const Settings& s, const std::vector<Outcome>& done,
                  const std::vector<Outcome>& sweep, const std::string& launcher) const {
    Report r;
    r.module = name();
    r.config = s.to_json();
    for (const auto& n : s.notes) r.warn(n);
    r.extra["process_model"] = !launcher.empty() ? fmt::format("{} (one process per GPU)", launcher)
                                                 : std::string("one process, a thread per GPU");
    r.extra["tolerances"] = {{"grad_relative_l2", kGradTolerance},
                             {"update_slack_of_lr", kUpdateSlack},
                             {"update_mismatch_share", kUpdateTolerance}};
    for (const Outcome& o : done) {
      const std::string shape = fmt::format("{} ({} layers), {} x {} tokens a GPU", s.model.name,
                                            s.layers, o.batch, s.seq_len);
      add_row(r, s, o, single(done, o), "Data-parallel training: " + shape);
      add_memory_row(r, o, "Memory per GPU: " + shape);
      if (!o.trace.empty())
        r.attachments.emplace_back(
            fmt::format("dp_traces/{}_g{}_b{}.json", to_string(o.strategy), o.gpus, o.batch),
            chrome_trace(o.trace,
                         fmt::format("{} on {} GPUs, {}", to_string(o.strategy), o.gpus, shape)));
    }
    for (const Outcome& o : sweep)
      add_row(r, s, o, nullptr,
              fmt::format("ddp's bucket size on {} GPUs, {} x {} tokens a GPU", o.gpus, o.batch,
                          s.seq_len));
    headline(r, done);
    findings(r, done);
    return r;
  }

  void add_row(Report& r, const Settings& s, const Outcome& o, const Outcome* one,
               const std::string& group) const {
    CaseResult c;
    c.group = group;
    c.name = fmt::format("{} x{}", to_string(o.strategy), o.gpus);
    if (o.bucket_bytes > 0)
      c.name += fmt::format(" ({} buckets)", format_bytes_short(o.bucket_bytes));
    c.params = {{"strategy", to_string(o.strategy)},
                {"gpus", o.gpus},
                {"batch", o.batch},
                {"bucket_bytes", o.bucket_bytes},
                {"buckets", o.buckets}};
    c.status = o.status;
    c.note = o.note;
    c.metric("planned_GiB", gib(o.planned.total()), "GiB");
    if (o.status != "ok" && o.status != "unchecked") {
      r.add(c);
      return;
    }
    const double step = o.step.median_s();
    const double tokens = static_cast<double>(o.gpus * o.batch * s.seq_len);
    const double tflops = o.flops / step / 1e12;
    c.metric("step_ms", step * 1e3, "ms");
    c.metric("tokens_per_s", tokens / step, "tokens/s");
    c.metric("tflops_per_gpu", tflops, "TFLOP/s");
    if (peak_tflops_ > 0) c.metric("mfu_pct", 100 * tflops / peak_tflops_, "%");
    if (one) {
      const double speedup = one->step.median_s() / step * o.gpus;
      c.metric("speedup", speedup, "x");
      c.metric("efficiency_pct", 100 * speedup / o.gpus, "%");
    }
    // On one GPU the collectives move nothing between GPUs: the step against the step without
    // them is two measurements' noise (about 2%), not communication.
    if (o.gpus > 1) {
      const double exposed = std::max(0.0, step - o.compute_only.median_s());
      c.metric("exposed_comm_ms", exposed * 1e3, "ms");
      c.metric("exposed_comm_pct", 100 * exposed / step, "%");
    }
    c.metric("comm_alone_ms", o.comm_alone.median_s() * 1e3, "ms");
    c.metric("memory_GiB", gib(o.measured_bytes), "GiB");
    c.metric("memory_vs_plan_pct",
             100.0 * (static_cast<double>(o.measured_bytes) / o.planned.total() - 1), "%");
    c.metric("grad_error", o.grad_error, "");
    c.metric("moment_error", o.moment_error, "");
    c.metric("update_mismatch_pct", 100 * o.update_mismatch, "%");
    r.add(c);
  }

  static void add_memory_row(Report& r, const Outcome& o, const std::string& group) {
    CaseResult c;
    c.group = group;
    c.name = fmt::format("{} x{}", to_string(o.strategy), o.gpus);
    c.params = {{"strategy", to_string(o.strategy)}, {"gpus", o.gpus}, {"batch", o.batch}};
    c.status = o.status == "unchecked" ? "ok" : o.status;
    c.note = o.status == "ok" || o.status == "unchecked" ? "" : "not run";
    c.metric("params_GiB", gib(o.planned.params), "GiB");
    c.metric("grads_GiB", gib(o.planned.grads), "GiB");
    c.metric("optimizer_GiB", gib(o.planned.optimizer), "GiB");
    c.metric("activations_GiB", gib(o.planned.activations), "GiB");
    c.metric("planned_GiB", gib(o.planned.total()), "GiB");
    if (o.measured_bytes > 0) {
      c.metric("measured_GiB", gib(o.measured_bytes), "GiB");
      // What the step took beyond the parameter, gradient and optimizer buffers (allocated
      // as planned): the activations, scratch and workspaces as they came.
      const std::uint64_t fixed = o.planned.params + o.planned.grads + o.planned.optimizer;
      if (o.measured_bytes > fixed)
        c.metric("activations_measured_GiB", gib(o.measured_bytes - fixed), "GiB");
    }
    r.add(c);
  }

  // What the run says, at the most GPUs measured and the first batch: each strategy's rate,
  // scaling and exposed communication, and what sharding saves against ddp and costs.
  void findings(Report& r, const std::vector<Outcome>& done) const {
    const Outcome* ddp = nullptr;
    std::vector<const Outcome*> top;
    for (const Outcome& o : done) {
      if (o.status != "ok" || o.batch != done.front().batch) continue;
      if (!top.empty() && o.gpus < top.front()->gpus) continue;
      if (!top.empty() && o.gpus > top.front()->gpus) top.clear();
      top.push_back(&o);
    }
    for (const Outcome* o : top)
      if (o->strategy == Strategy::Ddp) ddp = o;
    for (const Outcome* o : top) {
      const double step = o->step.median_s();
      std::string text = fmt::format(
          "{} on {} GPU{}: {:.0f} tokens/s, a step of {:.1f} ms", to_string(o->strategy), o->gpus,
          o->gpus == 1 ? "" : "s",
          static_cast<double>(o->gpus * o->batch * effective_->seq_len) / step, step * 1e3);
      text += o->gpus > 1
                  ? fmt::format(
                        " with {:.1f}% of it waiting for communication ({:.1f} ms of "
                        "collectives alone)",
                        100 * std::max(0.0, step - o->compute_only.median_s()) / step,
                        o->comm_alone.median_s() * 1e3)
                  : fmt::format(" (one GPU: its collectives are copies at most, {:.1f} ms alone)",
                                o->comm_alone.median_s() * 1e3);
      if (const Outcome* one = single(done, *o); one && o->gpus > 1)
        text += fmt::format(", {:.1f}% scaling efficiency", 100 * one->step.median_s() / step);
      if (ddp && o != ddp)
        text += fmt::format("; {:.1f} GiB a GPU against ddp's {:.1f} ({:+.0f}%), step {:+.1f}%",
                            gib(o->measured_bytes), gib(ddp->measured_bytes),
                            100.0 * (static_cast<double>(o->measured_bytes) /
                                         static_cast<double>(ddp->measured_bytes) -
                                     1),
                            100 * (step / ddp->step.median_s() - 1));
      r.findings.push_back(text + ".");
    }
  }

  // Per strategy, at the most GPUs and the first batch measured: its tokens/s, scaling
  // efficiency, exposed communication and memory.
  void headline(Report& r, const std::vector<Outcome>& done) const {
    for (const Outcome& o : done) {
      if (o.status != "ok") continue;
      bool best = true;
      for (const Outcome& x : done)
        if (x.strategy == o.strategy && x.status == "ok" &&
            (x.gpus > o.gpus || (x.gpus == o.gpus && x.batch < o.batch)))
          best = false;
      if (!best) continue;
      const std::string k = to_string(o.strategy);
      const double step = o.step.median_s();
      r.set_headline(k + "_tokens_per_s",
                     static_cast<double>(o.gpus * o.batch * effective_->seq_len) / step,
                     "tokens/s");
      if (const Outcome* one = single(done, o); one && o.gpus > 1)
        r.set_headline(k + "_scaling_efficiency_pct", 100 * one->step.median_s() / step, "%");
      if (o.gpus > 1)
        r.set_headline(k + "_exposed_comm_pct",
                       100 * std::max(0.0, step - o.compute_only.median_s()) / step, "%");
      r.set_headline(k + "_memory_GiB", gib(o.measured_bytes), "GiB");
    }
  }
};

}  // namespace

ModulePtr make_dp_module() {
  return std::make_unique<DpModule>();
}

}  // namespace gpubench
