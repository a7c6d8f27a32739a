// check's report: a row per check, the verdict and its one line, the evidence in `extra`.
#include <fmt/format.h>

#include <algorithm>

#include "gpubench/modules/check/check.hpp"

namespace gpubench::check {

namespace {

int level_rank(const std::string& level) {
  if (level == "FAIL") return 0;
  if (level == "WARN") return 1;
  if (level == "PASS") return 2;
  return 3;  // N/A
}

std::string short_text(const Check& c) {
  return fmt::format("{} {} {}: {}", c.subject, c.group, c.what, c.reason);
}

// "node FAIL: GPU 2 HBM triad (fp64) floor: ...; NVLink ...; and 3 more".
std::string verdict_line(const std::vector<Check>& checks, const std::string& level, int judged,
                         int na) {
  const std::string na_text = na > 0 ? fmt::format(", {} not available", na) : "";
  if (level == "PASS") return fmt::format("node PASS: {} checks{}", judged, na_text);
  std::vector<std::string> items;
  for (const Check& c : checks)
    if (c.level == level) items.push_back(short_text(c));
  std::string line = fmt::format("node {}: ", level);
  constexpr std::size_t kShown = 3;
  for (std::size_t i = 0; i < items.size() && i < kShown; ++i) line += (i ? "; " : "") + items[i];
  if (items.size() > kShown) line += fmt::format("; and {} more", items.size() - kShown);
  return line + fmt::format(" ({} checks{})", judged, na_text);
}

}  // namespace

Report check_report(const std::vector<Check>& checks, const Evidence& evidence,
                    const Expectations& expect, const Settings& settings) {
  std::vector<Check> sorted = checks;
  std::stable_sort(sorted.begin(), sorted.end(), [](const Check& a, const Check& b) {
    return level_rank(a.level) < level_rank(b.level);
  });
  Report r;
  r.module = "check";
  Verdict v;
  int na = 0, warn = 0, fail = 0;
  for (const Check& c : sorted) {
    CaseResult row;
    row.group = c.group;
    row.name = c.subject;
    row.params = {{"check", c.what}, {"verdict", c.level}};
    if (std::isfinite(c.value)) row.metric("value", c.value, c.unit);
    if (std::isfinite(c.expected)) row.metric("expected", c.expected, c.unit);
    row.note = c.reason;
    r.add(std::move(row));
    if (c.level == "N/A") {
      ++na;
      continue;
    }
    ++v.judged;
    warn += c.level == "WARN";
    fail += c.level == "FAIL";
    if (c.level != "PASS")
      v.add({c.level, c.subject, c.group + ": " + c.what, c.value, c.expected, c.unit, c.reason});
  }
  v.line = verdict_line(sorted, v.level, v.judged, na);
  r.set_headline_text("verdict", v.level);
  r.set_headline("checks", v.judged, "");
  r.set_headline("failures", fail, "");
  r.set_headline("warnings", warn, "");
  r.set_headline("not_available", na, "");
  r.verdict = std::move(v);
  r.extra["expectations"] = expect.to_json();
  r.extra["settings"] = settings.to_json();
  if (evidence.before) r.extra["health_before"] = evidence.before->to_json();
  if (evidence.after) r.extra["health_after"] = evidence.after->to_json();
  nlohmann::ordered_json xids = nlohmann::ordered_json::array();
  for (const XidWatcher::Event& x : evidence.xids)
    xids.push_back({{"gpu", x.gpu}, {"xid", x.xid}, {"at", x.at}});
  r.extra["xid_events"] = xids;
  if (!evidence.xid_unavailable.empty()) r.extra["xid_unavailable"] = evidence.xid_unavailable;
  nlohmann::ordered_json judged = nlohmann::ordered_json::array();
  for (const Report& rep : evidence.reports)
    judged.push_back({{"module", rep.module}, {"status", rep.status}, {"run_id", rep.run_id}});
  r.extra["judged_reports"] = judged;
  return r;
}

}  // namespace gpubench::check
