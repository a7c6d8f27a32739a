// `gpubench stress`: the module around stress.hpp.
#include <CLI/CLI.hpp>

#include "gpubench/core/context.hpp"
#include "gpubench/core/module.hpp"
#include "gpubench/core/progress.hpp"
#include "gpubench/modules/stress/stress.hpp"

namespace gpubench {

namespace {

class StressModule final : public ResolvingModule<stress::Options, stress::Settings> {
 public:
  std::string name() const override { return "stress"; }
  std::string help() const override {
    return "Burn-in: GEMM, memory and links at full load, verified bit for bit; OK or FAULTY per "
           "GPU";
  }
  std::vector<std::string> examples() const override {
    return {"gpubench stress --quick", "gpubench stress --duration 15m",
            "gpubench stress --duration 2h --workload gemm --dtypes bf16,fp8_e4m3"};
  }
  void add_options(CLI::App& app) override {
    opts_ = stress::Options{};
    effective_.reset();
    app.add_option("--duration", opts_.duration,
                   "How long to hold the load: 90s, 15m, 1h30m or seconds [15m; --quick 60s]");
    app.add_option("--workload", opts_.workload, "gemm,memory,link or all")->capture_default_str();
    app.add_option("--dtypes", opts_.dtypes,
                   "GEMM data types: bf16, fp16, fp8_e4m3, fp8_e5m2, tf32, fp32, fp64, int8")
        ->capture_default_str();
    app.add_option("--memory", opts_.memory,
                   "Percent of each GPU's free memory the memory test covers (at most 95)")
        ->capture_default_str();
    app.add_option("--outlier", opts_.outlier,
                   "Percent below the other GPUs' median GEMM rate that makes a GPU FAULTY")
        ->capture_default_str();
  }
  // A burn-in holds the GPUs as long as it is asked to: never part of `gpubench all`.
  bool runs_in_all() const override { return false; }

  Report run(Context& ctx) override {
    const stress::Settings s = stress::resolve_settings(opts_, ctx.quick());
    effective_ = s;
    const stress::Outcome o = stress::run(ctx, s);
    Report r = stress::stress_report(o);
    if (o.interrupted)
      r.warn("stopped early by a signal: the run covers " + progress::clock_text(o.elapsed_s) +
             " of " + progress::clock_text(s.duration_s));
    return r;
  }

 private:
  stress::Settings resolve(const stress::Options& o, bool quick) const override {
    return stress::resolve_settings(o, quick);
  }
};

}  // namespace

ModulePtr make_stress_module() {
  return std::make_unique<StressModule>();
}

}  // namespace gpubench
