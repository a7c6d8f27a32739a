// check's judgement of the figures: floors per GPU model, outliers against the node's median,
// a known-good reference run, and the cases or modules that failed.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "gpubench/core/stats.hpp"
#include "gpubench/modules/check/check.hpp"

namespace gpubench::check {

namespace {

std::string show(double v, const std::string& unit) {
  return fmt::format("{:.4g} {}", v, unit);
}

// How much worse `value` is than `base`, as a fraction (> 0: worse).
double worse_by(const Figure& f, double value, double base) {
  const double rel = (value - base) / base;
  return f.higher_better ? -rel : rel;
}

void judge_floors(const std::vector<Figure>& figs, const Expectations& expect,
                  std::vector<Check>& out) {
  std::set<std::string> no_peak;
  for (const Figure& f : figs) {
    const auto floor = expect.floors.find(f.key);
    if (floor == expect.floors.end()) continue;
    if (!std::isfinite(f.pct_of_peak) || !(f.pct_of_peak > 0)) {
      if (no_peak.insert(f.key).second)
        out.push_back({"N/A", f.title, "node", "floor", std::nan(""), std::nan(""), f.unit,
                       "no theoretical peak known for this GPU: held only against the node's "
                       "median and --reference"});
      continue;
    }
    const double expected = f.value / f.pct_of_peak * floor->second;
    const bool ok = f.pct_of_peak >= floor->second;
    out.push_back({ok ? "PASS" : "FAIL", f.title, f.subject, "floor", f.value, expected, f.unit,
                   ok ? fmt::format("{:.1f}% of peak; floor {:g}%", f.pct_of_peak, floor->second)
                      : fmt::format("{} < {} ({:.1f}% of peak; floor {:g}%)", show(f.value, f.unit),
                                    show(expected, f.unit), f.pct_of_peak, floor->second)});
  }
}

void judge_outliers(const std::vector<Figure>& figs, double share, std::vector<Check>& out) {
  std::map<std::pair<std::string, std::string>, std::vector<const Figure*>> by_key;
  for (const Figure& f : figs) by_key[{f.key, f.cohort}].push_back(&f);
  for (const auto& [key, members] : by_key) {
    if (members.size() < 2) continue;
    for (const Figure* f : members) {
      // Against the others' median: with its own value in it, a GPU of two would be held
      // against the mean of itself and the other (9.5% slower passing a 5% limit).
      std::vector<double> others;
      for (const Figure* o : members)
        if (o != f) others.push_back(o->value);
      const double med = median_of(others);
      const double worse = worse_by(*f, f->value, med);
      const double expected = f->higher_better ? med * (1 - share) : med * (1 + share);
      const bool ok = !(worse > share);
      out.push_back(
          {ok ? "PASS" : "FAIL", f->title, f->subject, "outlier", f->value, expected, f->unit,
           ok ? fmt::format("{:+.1f}% against the others' median {}", 100 * (f->value - med) / med,
                            show(med, f->unit))
              : fmt::format("{} {} than the others' median {} ({:+.1f}%; allowed {:g}%)",
                            show(f->value, f->unit), f->higher_better ? "is below" : "is slower",
                            show(med, f->unit), 100 * (f->value - med) / med, 100 * share)});
    }
  }
}

void judge_reference(const std::vector<Figure>& figs, const std::vector<Report>& reference,
                     double share, std::vector<Check>& out) {
  std::map<std::pair<std::string, std::string>, Figure> ref;
  for (Figure& f : figures_of(reference)) ref.emplace(std::make_pair(f.key, f.subject), f);
  int matched = 0;
  for (const Figure& f : figs) {
    const auto it = ref.find({f.key, f.subject});
    if (it == ref.end()) continue;
    ++matched;
    const double base = it->second.value;
    const double worse = worse_by(f, f.value, base);
    const bool ok = !(worse > share);
    const double expected = f.higher_better ? base * (1 - share) : base * (1 + share);
    out.push_back(
        {ok ? "PASS" : "FAIL", f.title, f.subject, "reference", f.value, expected, f.unit,
         fmt::format("{:+.1f}% against the reference's {}{}", 100 * (f.value - base) / base,
                     show(base, f.unit), ok ? "" : fmt::format(" (allowed {:g}%)", 100 * share))});
  }
  if (matched == 0)
    out.push_back({"WARN", "Reference", "node", "reference", std::nan(""), std::nan(""), "",
                   "the reference run shares no figure with this one (another kind of run?)"});
}

// Modules that failed, were not run, or hold failed cases: a figure never reported is a FAIL,
// never a silent PASS.
void judge_runs(const std::vector<Report>& reports, std::vector<Check>& out) {
  for (const Report& r : reports) {
    if (r.module == "check") continue;
    if (r.status == "skipped") {
      out.push_back({"N/A", "Runs", r.module, "run", std::nan(""), std::nan(""), "",
                     "not run here: " + r.error});
      continue;
    }
    if (r.status == "failed" && r.results.empty()) {
      out.push_back(
          {"FAIL", "Runs", r.module, "run", std::nan(""), std::nan(""), "", "failed: " + r.error});
      continue;
    }
    int failed = 0, verified = 0;
    for (const CaseResult& c : r.results) {
      if (c.status == "ok") ++verified;
      if (c.status != "failed") continue;
      ++failed;
      out.push_back({"FAIL", "Runs", fmt::format("{}: {} / {}", r.module, c.group, c.name), "case",
                     std::nan(""), std::nan(""), "", c.note.empty() ? "the case failed" : c.note});
    }
    if (!r.error.empty() && r.status == "failed")
      out.push_back(
          {"FAIL", "Runs", r.module, "run", std::nan(""), std::nan(""), "", "failed: " + r.error});
    else if (failed == 0)
      // Cases that were not measured or had nothing to be checked against (advise's predicted
      // layouts) fail nothing, but are not called verified.
      out.push_back({"PASS", "Runs", r.module, "run", std::nan(""), std::nan(""), "",
                     verified == static_cast<int>(r.results.size())
                         ? fmt::format("{} cases, every one verified", r.results.size())
                         : fmt::format("{} cases: {} verified, the others not run or with "
                                       "nothing to check against",
                                       r.results.size(), verified)});
  }
}

// The clocks-event reasons the reports' monitors saw, per GPU.
std::map<int, std::set<std::string>> throttles_seen(const std::vector<Report>& reports) {
  std::map<int, std::set<std::string>> seen;
  for (const Report& r : reports)
    if (r.monitor.contains("gpus") && r.monitor["gpus"].is_array())
      for (const auto& g : r.monitor["gpus"])
        if (g.contains("gpu") && g.contains("throttle_reasons"))
          for (const auto& n : g["throttle_reasons"])
            seen[g["gpu"].get<int>()].insert(n.get<std::string>());
  return seen;
}

}  // namespace

HealthEvidence health_of(const Evidence& e) {
  return HealthEvidence::of(e.before, e.after, e.xids, e.xid_unavailable);
}

std::vector<Check> judge(const Evidence& evidence, const Expectations& expect,
                         const std::vector<Report>* reference, double outlier) {
  std::vector<Check> out;
  const std::vector<Figure> figs = figures_of(evidence.reports);
  judge_runs(evidence.reports, out);
  judge_floors(figs, expect, out);
  judge_outliers(figs, outlier, out);
  if (reference) judge_reference(figs, *reference, outlier, out);
  HealthEvidence health = health_of(evidence);
  health.throttles = throttles_seen(evidence.reports);
  for (Check& c : judge_health(health)) out.push_back(std::move(c));
  return out;
}

}  // namespace gpubench::check
