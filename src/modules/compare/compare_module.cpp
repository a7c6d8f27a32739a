// `gpubench compare BASE NEW`: the module around compare.hpp. It reads two runs' reports and
// touches no GPU.
#include <CLI/CLI.hpp>

#include "gpubench/core/module.hpp"
#include "gpubench/core/progress.hpp"
#include "gpubench/modules/compare/compare.hpp"

namespace gpubench {

namespace {

class CompareModule final : public ResolvingModule<compare::Options, compare::Settings> {
 public:
  std::string name() const override { return "compare"; }
  std::string help() const override {
    return "Two runs' figures side by side: regressions beyond a threshold and the noise";
  }
  std::vector<std::string> examples() const override {
    return {"gpubench compare results/reference/h200/bandwidth results/reference/h200x4/bandwidth",
            "gpubench compare results/reference/h200/seqlen_decode/seqlen.json "
            "results/reference/h200/seqlen/seqlen.json --threshold 3 --json -"};
  }
  void add_options(CLI::App& app) override {
    opts_ = compare::Options{};
    effective_.reset();
    app.add_option("base", opts_.base, "The base run: a run folder or a report file")->required();
    app.add_option("new", opts_.now, "The new run: a run folder or a report file")->required();
    app.add_option("--threshold", opts_.threshold,
                   "Percent a figure must move (beyond the noise) to count")
        ->capture_default_str();
  }
  std::optional<std::string> unsupported(const System&, const std::vector<int>&) const override {
    return std::nullopt;
  }
  bool needs_gpu() const override { return false; }
  // Both runs read before anything else: a run it cannot read is bad input.
  void validate() const override {
    const compare::Settings s = compare::resolve_settings(opts_);
    (void)compare::load_run(s.base);
    (void)compare::load_run(s.now);
  }
  bool measures_here() const override { return false; }

  Report run(Context&) override {
    const compare::Settings s = compare::resolve_settings(opts_);
    effective_ = s;
    progress::expect(1);
    progress::next("reading the runs");
    const compare::Run base = compare::load_run(s.base), now = compare::load_run(s.now);
    return compare::comparison_report(compare::compare_runs(base, now, s.threshold), s);
  }

 private:
  compare::Settings resolve(const compare::Options& o, bool) const override {
    return compare::resolve_settings(o);
  }
};

}  // namespace

ModulePtr make_compare_module() {
  return std::make_unique<CompareModule>();
}

}  // namespace gpubench
