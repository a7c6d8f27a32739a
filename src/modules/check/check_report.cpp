// check's report: a row per check, the verdict and its one line, the evidence in `extra`.
#include <fmt/format.h>

#include <algorithm>

#include "gpubench/modules/check/check.hpp"

namespace gpubench::check {

namespace {

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
  Report r;
  r.module = "check";
  Verdict v = add_check_rows(r, checks);
  const auto count = [&](const char* level) {
    return std::count_if(checks.begin(), checks.end(),
                         [&](const Check& c) { return c.level == level; });
  };
  const auto na = static_cast<int>(count("N/A"));
  const auto warn = count("WARN"), fail = count("FAIL");
  v.line = verdict_line(checks, v.level, v.judged, na);
  r.set_headline_text("verdict", v.level);
  r.set_headline("checks", v.judged, "");
  r.set_headline("failures", static_cast<double>(fail), "");
  r.set_headline("warnings", static_cast<double>(warn), "");
  r.set_headline("not_available", na, "");
  r.verdict = std::move(v);
  r.extra["expectations"] = expect.to_json();
  r.extra["settings"] = settings.to_json();
  write_health_evidence(health_of(evidence), r.extra);
  nlohmann::ordered_json judged = nlohmann::ordered_json::array();
  for (const Report& rep : evidence.reports)
    judged.push_back({{"module", rep.module}, {"status", rep.status}, {"run_id", rep.run_id}});
  r.extra["judged_reports"] = judged;
  return r;
}

}  // namespace gpubench::check
