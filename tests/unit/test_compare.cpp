// `gpubench compare` on synthetic runs: the same run twice, a real regression, a noisy but
// equal pair, an improvement, a case that failed only in the new run, differences of system
// and options, which way each unit is better, and the runs it refuses to read.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <string>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/report.hpp"
#include "gpubench/modules/compare/compare.hpp"

using namespace gpubench;
using namespace gpubench::compare;

namespace {

// A case with one figure and per-iteration times of relative spread `cv`.
CaseResult timed_case(const std::string& group, const std::string& name, const std::string& key,
                      double value, const std::string& unit, double cv) {
  CaseResult c;
  c.group = group;
  c.name = name;
  c.metric(key, value, unit);
  Stats st;
  st.n = 100;
  st.median = st.mean = 1e-3;
  st.cv = cv;
  st.stdev = cv * st.mean;
  c.stats = st;
  return c;
}

// A bandwidth report and an allreduce report, `scale` applied to the HBM figure and `latency`
// the all-reduce's time.
compare::Run make_run(double scale = 1.0, double latency = 20.0, double latency_cv = 0.01) {
  Report bw;
  bw.module = "bandwidth";
  bw.version = "0.1.0+abc";
  bw.system = {{"driver", "580.1"}, {"gpus", ojson::array({{{"name", "NVIDIA H200"}}})}};
  bw.config = {{"hbm_size", 2147483648.0}};
  bw.set_headline("hbm_triad_GBps", 4000 * scale, "GB/s");
  bw.add(timed_case("HBM fp64", "triad", "bandwidth", 4000 * scale, "GB/s", 0.002));
  bw.add(timed_case("HBM fp64", "copy", "bandwidth", 3900, "GB/s", 0.002));
  bw.add(timed_case("Memory", "gpu0", "memory", 141, "GiB", 0.0));
  Report ar;
  ar.module = "allreduce";
  ar.version = bw.version;
  ar.system = bw.system;
  ar.add(timed_case("all_reduce bf16", "8 B", "time", latency, "us", latency_cv));
  return compare::Run{"run", {bw, ar}};
}

const Figure* find(const Comparison& c, const std::string& where, const std::string& key) {
  for (const Figure& f : c.figures)
    if (f.where == where && f.key == key) return &f;
  return nullptr;
}

Settings settings() {
  return Settings{"base", "new", 0.05};
}

}  // namespace

TEST(Compare, WhichWayIsBetter) {
  EXPECT_EQ(better_of("bandwidth", "GB/s"), Better::Higher);
  EXPECT_EQ(better_of("tflops", "TFLOP/s"), Better::Higher);
  EXPECT_EQ(better_of("tokens_per_s", "tok/s"), Better::Higher);
  EXPECT_EQ(better_of("speedup", "x"), Better::Higher);
  EXPECT_EQ(better_of("time", "ms"), Better::Lower);
  EXPECT_EQ(better_of("latency", "us"), Better::Lower);
  EXPECT_EQ(better_of("decode", "ms/token"), Better::Lower);
  EXPECT_EQ(better_of("bubble_measured", "%"), Better::Lower);
  EXPECT_EQ(better_of("h2d_pinned_efficiency_pct", "%"), Better::Higher);
  EXPECT_EQ(better_of("attention_share_decode", "%"), Better::Neither);
  EXPECT_EQ(better_of("memory", "GiB"), Better::Neither);
  EXPECT_EQ(better_of("sm_clock", "MHz"), Better::Neither);
  EXPECT_EQ(better_of("check_error", "of tol"), Better::Neither);
}

TEST(Compare, TheSameRunTwicePasses) {
  const Comparison c = compare_runs(make_run(), make_run(), 0.05);
  EXPECT_EQ(c.figures.size(), 5u);  // the headline, three bandwidth cases, the all-reduce
  for (const Figure& f : c.figures) EXPECT_EQ(f.outcome, "same") << f.where << " " << f.key;
  EXPECT_TRUE(c.differences.empty());
  const Report r = comparison_report(c, settings());
  ASSERT_TRUE(r.verdict);
  EXPECT_EQ(r.verdict->level, "PASS");
  EXPECT_EQ(r.verdict->judged, 4);  // memory is neither way better
  EXPECT_NE(r.verdict->line.find("compare PASS: 4 figures, none regressed"), std::string::npos)
      << r.verdict->line;
  EXPECT_TRUE(r.results.empty());
}

TEST(Compare, ARealRegressionFailsAndComesFirst) {
  const Comparison c = compare_runs(make_run(), make_run(0.85, 30.0), 0.05);
  ASSERT_GE(c.figures.size(), 3u);
  // The all-reduce's +50% time first (worst), then the -15% bandwidths.
  EXPECT_EQ(c.figures[0].key, "time");
  EXPECT_EQ(c.figures[0].outcome, "regressed");
  EXPECT_NEAR(c.figures[0].change(), 0.5, 1e-12);
  EXPECT_EQ(c.figures[1].outcome, "regressed");
  EXPECT_EQ(find(c, "HBM fp64 / copy", "bandwidth")->outcome, "same");
  const Report r = comparison_report(c, settings());
  ASSERT_TRUE(r.verdict);
  EXPECT_EQ(r.verdict->level, "FAIL");
  EXPECT_NE(r.verdict->line.find("3 of 4 figures regressed beyond 5%"), std::string::npos)
      << r.verdict->line;
  EXPECT_NE(r.verdict->line.find("allreduce: all_reduce bf16 / 8 B time +50.0%"), std::string::npos)
      << r.verdict->line;
  EXPECT_EQ(r.find_headline("figures_regressed")->value, 3);
  // Rendered: the Markdown opens with the verdict, the console ends with its line, and the JSON
  // keeps it.
  const std::string md = render_markdown(r);
  EXPECT_NE(md.find("## Verdict: FAIL"), std::string::npos);
  EXPECT_LT(md.find("## Verdict"), md.find("## Headline"));
  const std::string console = render_console(r);
  EXPECT_EQ(console.substr(console.size() - r.verdict->line.size() - 1), r.verdict->line + "\n");
  const Report back = report_from_json(to_json(r));
  ASSERT_TRUE(back.verdict);
  EXPECT_EQ(back.verdict->level, "FAIL");
  EXPECT_EQ(back.verdict->findings.size(), r.verdict->findings.size());
  EXPECT_EQ(back.verdict->findings[0].expected, 20.0);
}

TEST(Compare, NoisyButEqualIsNoRegression) {
  // +8% on a figure whose runs spread by 12%: beyond the threshold, within the noise.
  const Comparison c = compare_runs(make_run(1.0, 20.0, 0.12), make_run(1.0, 21.6, 0.12), 0.05);
  EXPECT_EQ(find(c, "all_reduce bf16 / 8 B", "time")->outcome, "noisy");
  const Report r = comparison_report(c, settings());
  EXPECT_EQ(r.verdict->level, "WARN");
  EXPECT_NE(r.verdict->line.find("1 beyond 5% within the noise"), std::string::npos);
  // A smaller threshold does not make noise a regression; a larger one hides the change.
  EXPECT_EQ(find(compare_runs(make_run(1.0, 20.0, 0.12), make_run(1.0, 21.6, 0.12), 0.01),
                 "all_reduce bf16 / 8 B", "time")
                ->outcome,
            "noisy");
  EXPECT_EQ(find(compare_runs(make_run(1.0, 20.0, 0.12), make_run(1.0, 21.6, 0.12), 0.10),
                 "all_reduce bf16 / 8 B", "time")
                ->outcome,
            "same");
}

TEST(Compare, ImprovementsPass) {
  const Comparison c = compare_runs(make_run(), make_run(1.2, 15.0), 0.05);
  EXPECT_EQ(find(c, "all_reduce bf16 / 8 B", "time")->outcome, "improved");
  EXPECT_EQ(find(c, "headline", "hbm_triad_GBps")->outcome, "improved");
  EXPECT_TRUE(std::isnan(find(c, "headline", "hbm_triad_GBps")->noise));
  const Report r = comparison_report(c, settings());
  EXPECT_EQ(r.verdict->level, "PASS");
  EXPECT_NE(r.verdict->line.find("3 improved"), std::string::npos) << r.verdict->line;
}

TEST(Compare, ACaseFailedOnlyInTheNewRunFails) {
  compare::Run now = make_run();
  now.reports[1].results[0].status = "failed";
  now.reports[1].results[0].note = "3 elements wrong";
  const Comparison c = compare_runs(make_run(), now, 0.05);
  ASSERT_EQ(c.failed.size(), 1u);
  EXPECT_NE(c.failed[0].find("3 elements wrong"), std::string::npos);
  EXPECT_EQ(comparison_report(c, settings()).verdict->level, "FAIL");
}

TEST(Compare, DifferencesOfSystemOptionsAndModulesAreNamed) {
  compare::Run now = make_run();
  now.reports[0].system["driver"] = "590.2";
  now.reports[0].system["gpus"] = ojson::array({{{"name", "NVIDIA H100 80GB HBM3"}}});
  now.reports[0].config["hbm_size"] = 536870912.0;
  now.reports.pop_back();  // no allreduce
  const Comparison c = compare_runs(make_run(), now, 0.05);
  ASSERT_EQ(c.differences.size(), 3u);
  EXPECT_EQ(c.differences[0], "GPUs: NVIDIA H200 x1 -> NVIDIA H100 80GB HBM3 x1");
  EXPECT_EQ(c.differences[1], "driver: 580.1 -> 590.2");
  EXPECT_NE(c.differences[2].find("bandwidth hbm_size"), std::string::npos);
  ASSERT_EQ(c.only_base.size(), 1u);
  EXPECT_EQ(c.only_base[0], "allreduce");
  const Report r = comparison_report(c, settings());
  EXPECT_EQ(r.verdict->level, "WARN");
  EXPECT_NE(r.verdict->line.find("the runs differ (GPUs"), std::string::npos);
}

TEST(Compare, RunsItReadsAndRefuses) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("gpubench_compare_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "run");
  const compare::Run run = make_run();
  for (const Report& r : run.reports)
    std::ofstream(dir / "run" / (r.module + ".json")) << to_json(r).dump();
  std::ofstream(dir / "run" / "trace.json") << "{\"traceEvents\": []}";  // not a report: skipped
  ojson both = ojson::array(), twice = ojson::array();
  both.push_back(to_json(run.reports[0]));
  both.push_back(to_json(run.reports[1]));
  twice.push_back(to_json(run.reports[0]));
  twice.push_back(to_json(run.reports[0]));
  std::ofstream(dir / "all.json") << both.dump();
  const compare::Run folder = load_run((dir / "run").string());
  ASSERT_EQ(folder.reports.size(), 2u);
  EXPECT_EQ(folder.reports[0].module, "allreduce");  // file order
  EXPECT_EQ(load_run((dir / "all.json").string()).reports.size(), 2u);
  EXPECT_EQ(load_run((dir / "run" / "bandwidth.json").string()).reports.size(), 1u);

  std::ofstream(dir / "not.json") << "{ nope";
  std::ofstream(dir / "other.json") << "{\"a\": 1}";
  std::ofstream(dir / "twice.json") << twice.dump();
  std::filesystem::create_directories(dir / "empty");
  for (const char* bad : {"not.json", "other.json", "twice.json", "empty"})
    EXPECT_THROW(load_run((dir / bad).string()), InputError) << bad;
  EXPECT_THROW(resolve_settings(Options{(dir / "run").string(), (dir / "nothing").string(), 5}),
               InputError);
  EXPECT_THROW(resolve_settings(Options{"", (dir / "run").string(), 5}), InputError);
  for (double t : {0.0, -1.0, 100.0, std::nan("")})
    EXPECT_THROW(resolve_settings(Options{(dir / "run").string(), (dir / "run").string(), t}),
                 InputError)
        << t;
  EXPECT_EQ(resolve_settings(Options{(dir / "run").string(), (dir / "run").string(), 3}).threshold,
            0.03);
  std::filesystem::remove_all(dir);
}
