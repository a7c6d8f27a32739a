// `gpubench compare`'s report: the figures that moved, the counts, every figure in `extra`, and
// the verdict.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "gpubench/modules/compare/compare.hpp"

namespace gpubench::compare {

namespace {

// "1 figure", "3 figures".
std::string count_of(std::size_t n, const char* noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

const char* better_text(Better b) {
  return b == Better::Higher ? "higher" : b == Better::Lower ? "lower" : "neither";
}

std::string subject_of(const Figure& f) {
  return fmt::format("{}: {}", f.module, f.where);
}

// "-12.1% (noise 0.4%)" or "-12.1% (noise not known)".
std::string change_text(const Figure& f) {
  return fmt::format("{:+.1f}% ({})", 100 * f.change(),
                     std::isnan(f.noise) ? std::string("noise not known")
                                         : fmt::format("noise {:.1f}%", 100 * f.noise));
}

const char* group_of(const std::string& outcome) {
  if (outcome == "regressed") return "Regressions (worse beyond the threshold and the noise)";
  if (outcome == "improved") return "Improvements (better beyond the threshold and the noise)";
  if (outcome == "noisy") return "Beyond the threshold, within the noise";
  return "Changed beyond the threshold (neither way better)";
}

ojson figure_json(const Figure& f) {
  return {{"module", f.module},
          {"where", f.where},
          {"key", f.key},
          {"unit", f.unit},
          {"base", f.base},
          {"new", f.now},
          {"change_pct", 100 * f.change()},
          {"noise_pct", std::isnan(f.noise) ? ojson(nullptr) : ojson(100 * f.noise)},
          {"better", better_text(f.better)},
          {"outcome", f.outcome}};
}

// A row of the tables: base and new with their unit (figures of many units share a table), the
// change and the noise; the numbers themselves are in `extra`.
CaseResult figure_case(const Figure& f) {
  CaseResult c;
  c.group = group_of(f.outcome);
  c.name = fmt::format("{}: {} / {}", f.module, f.where, f.key);
  auto with_unit = [&](double v) {
    const std::string n = std::abs(v) >= 1000 ? fmt::format("{:.0f}", v) : fmt::format("{:.4g}", v);
    return f.unit.empty() ? n : n + " " + f.unit;
  };
  c.metrics.push_back({"base", Metric{f.base, "", with_unit(f.base)}});
  c.metrics.push_back({"new", Metric{f.now, "", with_unit(f.now)}});
  c.metric("change", 100 * f.change(), "%");
  if (!std::isnan(f.noise)) c.metric("noise", 100 * f.noise, "%");
  return c;
}

// The verdict's findings and line.
Verdict verdict_of(const Comparison& c, const Settings& s, int judged) {
  Verdict v;
  v.judged = judged;
  int regressed = 0, improved = 0, noisy = 0;
  for (const Figure& f : c.figures) {
    if (f.outcome == "improved") ++improved;
    if (f.outcome != "regressed" && f.outcome != "noisy") continue;
    (f.outcome == "regressed" ? regressed : noisy) += 1;
    v.add(Finding{f.outcome == "regressed" ? "FAIL" : "WARN", subject_of(f), f.key, f.now, f.base,
                  f.unit, change_text(f)});
  }
  for (const std::string& what : c.failed)
    v.add(Finding{"FAIL", what, "case status", std::nan(""), std::nan(""), "",
                  "ok in the base run, failed in the new one"});
  for (const std::string& m : c.only_base)
    v.add(Finding{"WARN", m, "module", std::nan(""), std::nan(""), "",
                  "in the base run only: its figures are not compared"});
  for (const std::string& d : c.differences)
    v.add(Finding{"WARN", "the runs", "differ", std::nan(""), std::nan(""), "", d});
  const std::string threshold = fmt::format("{:g}%", 100 * s.threshold);
  std::string line = fmt::format("compare {}: ", v.level);
  if (regressed > 0) {
    const Figure& worst = c.figures.front();
    line += fmt::format("{} of {} regressed beyond {} and the noise (worst: {} {} {:+.1f}%)",
                        regressed, count_of(static_cast<std::size_t>(judged), "figure"), threshold,
                        subject_of(worst), worst.key, 100 * worst.change());
  } else {
    line += fmt::format("{}, none regressed beyond {} and the noise",
                        count_of(static_cast<std::size_t>(judged), "figure"), threshold);
  }
  if (improved > 0) line += fmt::format("; {} improved", improved);
  if (!c.failed.empty())
    line += fmt::format("; {} failed in the new run", count_of(c.failed.size(), "case"));
  if (noisy > 0) line += fmt::format("; {} beyond {} within the noise", noisy, threshold);
  if (!c.differences.empty())
    line += fmt::format("; the runs differ ({})", c.differences.front()) +
            (c.differences.size() > 1 ? fmt::format(" and {} more", c.differences.size() - 1)
                                      : std::string());
  v.line = line;
  return v;
}

}  // namespace

Report comparison_report(const Comparison& c, const Settings& s) {
  Report r;
  r.module = "compare";
  r.config = s.to_json();
  int judged = 0;
  ojson all = ojson::array();
  std::map<std::string, int> count;
  for (const Figure& f : c.figures) {
    if (f.better != Better::Neither) ++judged;
    ++count[f.outcome];
    all.push_back(figure_json(f));
    if (f.outcome != "same") r.add(figure_case(f));
  }
  for (const std::string& what : c.failed) {
    CaseResult fc;
    fc.group = "Cases that failed in the new run only";
    fc.name = what;
    r.add(std::move(fc));
  }
  r.set_headline("figures_compared", static_cast<double>(c.figures.size()), "");
  r.set_headline("figures_judged", judged, "");
  for (const char* o : {"regressed", "improved", "noisy", "changed"})
    r.set_headline(std::string("figures_") + o, count[o], "");
  r.set_headline("cases_failed_new", static_cast<double>(c.failed.size()), "");
  r.extra = {{"base", s.base},
             {"new", s.now},
             {"threshold_pct", 100 * s.threshold},
             {"only_base", c.only_base},
             {"only_new", c.only_new},
             {"differences", c.differences},
             {"figures", all}};
  for (const std::string& d : c.differences) r.warn("the runs differ: " + d);
  if (!c.only_new.empty())
    r.warn(fmt::format("in the new run only (not compared): {}", fmt::join(c.only_new, ", ")));
  r.verdict = verdict_of(c, s, judged);
  return r;
}

}  // namespace gpubench::compare
