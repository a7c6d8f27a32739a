// `gpubench check`: the module around check.hpp. It runs its battery through the core (each
// battery module a run of its own inside this one, its report attached to this run's folder),
// or judges an earlier run (--from) or, inside `gpubench all`, the run it is part of.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <algorithm>

#include "gpubench/core/cli.hpp"
#include "gpubench/core/context.hpp"
#include "gpubench/core/module.hpp"
#include "gpubench/core/runner.hpp"
#include "gpubench/core/runs.hpp"
#include "gpubench/core/system.hpp"
#include "gpubench/modules/check/check.hpp"

namespace gpubench {

namespace {

struct Step {
  std::string module;
  std::vector<std::string> args;
};

// The battery on `gpus`: HBM triad, pinned host<->device and GPU<->GPU copies, an all_reduce
// sweep, one GEMM per tensor-core dtype of the GPU, a decode step at TP=1 and over the GPUs.
// The common options (--quick above all) set how long each measurement runs.
std::vector<Step> battery(const System& sys, const std::vector<int>& gpus, bool quick) {
  std::vector<Step> steps;
  steps.push_back({"bandwidth", {"--tests", "hbm,host,p2p", "--hbm-dtypes", "fp64"}});
  if (gpus.size() > 1)
    steps.push_back({"allreduce",
                     {"--collectives", "all_reduce", "-b", "8", "-e", quick ? "1G" : "8G", "-f",
                      quick ? "8" : "4"}});
  const GpuInfo* g = gpus.empty() ? nullptr : sys.gpu(gpus.front());
  const int cc = g ? g->cc_major * 10 + g->cc_minor : 0;
  const std::string dtypes = cc >= 89   ? "bf16,fp16,fp8_e4m3,tf32,int8"
                             : cc >= 80 ? "bf16,fp16,tf32,int8"
                                        : "fp16";
  steps.push_back(
      {"matmul", {"--dtypes", dtypes, "--shapes", "8192x8192x8192", "--algos", quick ? "1" : "4"}});
  std::size_t tp = 1;
  while (tp * 2 <= gpus.size() && tp < 8) tp *= 2;
  steps.push_back({"tp",
                   {"--tp", tp > 1 ? fmt::format("1,{}", tp) : "1", "--seq-lens", "512",
                    "--contexts", "2048", "--layers", quick ? "4" : "8"}});
  return steps;
}

std::vector<Report> without_check(std::vector<Report> reports) {
  reports.erase(std::remove_if(reports.begin(), reports.end(),
                               [](const Report& r) { return r.module == "check"; }),
                reports.end());
  return reports;
}

// An earlier run's evidence: its reports, and the health a check run recorded.
check::Evidence evidence_of(const std::string& path) {
  check::Evidence e;
  for (Report& r : read_run(path, "check --from").reports) {
    if (r.module != "check") {
      e.reports.push_back(std::move(r));
      continue;
    }
    if (r.extra.contains("health_before"))
      e.before = HealthSnapshot::from_json(r.extra["health_before"]);
    if (r.extra.contains("health_after"))
      e.after = HealthSnapshot::from_json(r.extra["health_after"]);
    for (const auto& x : r.extra.value("xid_events", ojson::array()))
      e.xids.push_back({x.value("gpu", -1), x.value("xid", std::uint64_t{0}), x.value("at", "")});
    e.xid_unavailable = r.extra.value("xid_unavailable", "");
  }
  return e;
}

// The GPU model the reports ran on (their system), else this machine's first selected GPU.
std::string gpu_model(const std::vector<Report>& reports, const Context& ctx) {
  for (const Report& r : reports)
    if (r.system.contains("gpus") && !r.system["gpus"].empty())
      return r.system["gpus"][0].value("name", "");
  const GpuInfo* g = ctx.gpus().empty() ? nullptr : ctx.system().gpu(ctx.gpus().front());
  return g ? g->name : "";
}

class CheckModule final : public ResolvingModule<check::Options, check::Settings> {
 public:
  std::string name() const override { return "check"; }
  std::string help() const override {
    return "One verdict per node: a short battery against floors, the node's median and health "
           "counters";
  }
  std::vector<std::string> examples() const override {
    return {"gpubench check --quick",
            "gpubench check --from results/reference/h200x4/quick_start --expect "
            "config/expect/h200.ini",
            "gpubench check --reference results/reference/h200x4/quick_start --outlier 3"};
  }
  void add_options(CLI::App& app) override {
    opts_ = check::Options{};
    effective_.reset();
    judged_.reset();
    app.add_option("--from", opts_.from, "Judge this run (folder or report) instead of measuring");
    app.add_option("--expect", opts_.expect, "Floors over the built-in ones (config/expect/*.ini)");
    app.add_option("--reference", opts_.reference,
                   "A known-good run: a figure more than --outlier below it fails");
    app.add_option("--outlier", opts_.outlier,
                   "Percent below the node's median (or the reference) that fails a figure")
        ->capture_default_str();
  }
  std::optional<std::string> unsupported(const System& s,
                                         const std::vector<int>& g) const override {
    if (!opts_.from.empty()) return std::nullopt;
    return Module::unsupported(s, g);
  }
  bool needs_gpu() const override { return opts_.from.empty(); }
  bool judges() const override { return true; }
  void judge_these(std::vector<Report> reports) override { judged_ = std::move(reports); }
  // Every file it will read, read before anything runs: a run it cannot read is bad input.
  void validate() const override {
    const check::Settings s = check::resolve_settings(opts_, false);
    if (!s.from.empty()) (void)read_run(s.from, "check --from");
    if (!s.reference.empty()) (void)read_run(s.reference, "check --reference");
  }

  Report run(Context& ctx) override {
    const check::Settings s = check::resolve_settings(opts_, ctx.quick());
    effective_ = s;
    std::vector<Report> reference;
    if (!s.reference.empty())
      reference = without_check(read_run(s.reference, "check --reference").reports);
    std::vector<Step> steps;  // the battery run here: none when judging a run
    check::Evidence e;
    if (judged_) {
      e.reports = without_check(*judged_);
      e.after = read_health(ctx.system(), ctx.gpus());
      e.xid_unavailable = "XID events are watched during check's own battery only";
    } else if (!s.from.empty()) {
      e = evidence_of(s.from);
    } else {
      steps = battery(ctx.system(), ctx.gpus(), ctx.quick());
      e = run_battery(ctx, steps);
    }
    const check::Expectations expect = check::expectations_for(gpu_model(e.reports, ctx), s.expect);
    const auto checks =
        check::judge(e, expect, s.reference.empty() ? nullptr : &reference, s.outlier);
    Report r = check::check_report(checks, e, expect, s);
    if (!steps.empty()) {
      ojson listed = ojson::array();
      for (const Step& step : steps)
        listed.push_back({{"module", step.module}, {"args", step.args}});
      r.extra["battery"] = listed;
      for (const Report& b : e.reports) r.attachments.emplace_back(b.module + ".json", to_json(b));
    }
    return r;
  }

 private:
  check::Settings resolve(const check::Options& o, bool quick) const override {
    return check::resolve_settings(o, quick);
  }

  // Health before, the battery with XID events watched, health after.
  check::Evidence run_battery(Context& ctx, const std::vector<Step>& steps) {
    check::Evidence e;
    e.before = read_health(ctx.system(), ctx.gpus());
    XidWatcher xids(ctx.system(), ctx.gpus());
    for (const Step& step : steps) {
      if (Context::interrupted()) break;
      spdlog::info("check: running {}", step.module);
      e.reports.push_back(run_step(step, ctx));
    }
    e.after = read_health(ctx.system(), ctx.gpus());
    e.xids = xids.stop();
    e.xid_unavailable = xids.unavailable();
    return e;
  }
  // One battery module; one that cannot run here is a failed report, never the end of check.
  static Report run_step(const Step& step, Context& ctx) {
    ModulePtr m = make_module(step.module);
    configure_module(*m, step.args);
    try {
      return run_nested(*m, ctx);
    } catch (const std::exception& e) {  // InputError, NoGpuError found at run time
      Report r;
      r.module = step.module;
      r.status = "failed";
      r.error = e.what();
      return r;
    }
  }

  std::optional<std::vector<Report>> judged_;
};

}  // namespace

ModulePtr make_check_module() {
  return std::make_unique<CheckModule>();
}

}  // namespace gpubench
