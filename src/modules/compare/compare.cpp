// `gpubench compare`: loading two runs' reports, holding their figures against each other, and
// the report with its verdict.
#include "gpubench/modules/compare/compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "gpubench/core/errors.hpp"

namespace gpubench::compare {

namespace fs = std::filesystem;

namespace {

bool contains(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

// The outcome of a figure under `threshold` (a fraction).
std::string outcome_of(const Figure& f, double threshold) {
  if (f.base == f.now) return "same";
  const double rel = f.change();
  if (!(std::abs(rel) > threshold)) return "same";
  if (f.better == Better::Neither) return "changed";
  const bool beyond_noise = std::isnan(f.noise) || std::abs(rel) > f.noise;
  if (!beyond_noise) return "noisy";
  const bool worse = f.better == Better::Higher ? rel < 0 : rel > 0;
  return worse ? "regressed" : "improved";
}

int outcome_rank(const std::string& o) {
  static const std::map<std::string, int> rank{
      {"regressed", 0}, {"improved", 1}, {"noisy", 2}, {"changed", 3}, {"same", 4}};
  return rank.at(o);
}

// A figure both runs have, when both are finite numbers of one unit and the base is not 0.
void add_figure(std::vector<Figure>& out, const std::string& module, const std::string& where,
                const std::string& key, const Metric& b, const Metric* n, double noise) {
  if (!n || !b.text.empty() || !n->text.empty() || b.unit != n->unit) return;
  if (!std::isfinite(b.value) || !std::isfinite(n->value) || b.value == 0) return;
  Figure f;
  f.module = module;
  f.where = where;
  f.key = key;
  f.unit = b.unit;
  f.base = b.value;
  f.now = n->value;
  f.noise = noise;
  f.better = better_of(key, b.unit);
  out.push_back(std::move(f));
}

// Cases by "<group> / <case>", a repeated one numbered (#2, #3, ...).
std::map<std::string, const CaseResult*> cases_by_name(const Report& r) {
  std::map<std::string, const CaseResult*> out;
  for (const CaseResult& c : r.results) {
    std::string name = c.group + " / " + c.name;
    for (int k = 2; out.count(name); ++k) name = fmt::format("{} / {} #{}", c.group, c.name, k);
    out[name] = &c;
  }
  return out;
}

void compare_module(const Report& b, const Report& n, Comparison& c) {
  for (const auto& [key, m] : b.headline)
    add_figure(c.figures, b.module, "headline", key, m, n.find_headline(key), std::nan(""));
  const auto now = cases_by_name(n);
  for (const auto& [name, bc] : cases_by_name(b)) {
    const auto it = now.find(name);
    if (it == now.end()) continue;
    const CaseResult& nc = *it->second;
    if (bc->status == "ok" && nc.status == "failed") {
      c.failed.push_back(fmt::format("{}: {}: {}", b.module, name, nc.note));
      continue;
    }
    if (bc->status != "ok" || nc.status != "ok") continue;
    const double noise =
        bc->stats && nc.stats ? std::max(bc->stats->cv, nc.stats->cv) : std::nan("");
    for (const auto& [key, m] : bc->metrics)
      add_figure(c.figures, b.module, name, key, m, nc.find_metric(key), noise);
  }
}

std::string text_of(const ojson& j) {
  return j.is_string() ? j.get<std::string>() : j.dump();
}

// The GPUs of a report's system: "NVIDIA H200 x4".
std::string gpus_of(const Report& r) {
  std::map<std::string, int> count;
  for (const auto& g : r.system.value("gpus", ojson::array())) ++count[g.value("name", "?")];
  std::string out;
  for (const auto& [name, k] : count)
    out += fmt::format("{}{} x{}", out.empty() ? "" : ", ", name, k);
  return out.empty() ? std::string("no GPU") : out;
}

// What differs between the systems two reports were measured on, and gpubench's version.
void add_system_differences(const Report& b, const Report& n, Comparison& c) {
  if (gpus_of(b) != gpus_of(n))
    c.differences.push_back(fmt::format("GPUs: {} -> {}", gpus_of(b), gpus_of(n)));
  for (const char* key : {"driver", "cuda_runtime", "nccl", "cublas", "cudnn"}) {
    const ojson vb = b.system.value(key, ojson()), vn = n.system.value(key, ojson());
    if (vb != vn)
      c.differences.push_back(fmt::format("{}: {} -> {}", key, text_of(vb), text_of(vn)));
  }
  if (b.version != n.version)
    c.differences.push_back(fmt::format("gpubench: {} -> {}", b.version, n.version));
}

// The options a module ran with that differ between the runs.
void add_option_differences(const Report& b, const Report& n, Comparison& c) {
  for (const auto& [key, vb] : b.config.items()) {
    const ojson vn = n.config.value(key, ojson());
    if (vb != vn)
      c.differences.push_back(
          fmt::format("{} {}: {} -> {}", b.module, key, text_of(vb), text_of(vn)));
  }
}

}  // namespace

ojson Settings::to_json() const {
  return {{"base", base}, {"new", now}, {"threshold_pct", threshold * 100}};
}

Settings resolve_settings(const Options& o) {
  if (!(o.threshold > 0 && o.threshold < 100))
    throw InputError(fmt::format(
        "compare: --threshold {} must be a percentage above 0 and below 100", o.threshold));
  for (const std::string* p : {&o.base, &o.now}) {
    std::error_code ec;
    if (p->empty()) throw InputError("compare: needs two runs: gpubench compare BASE NEW");
    if (!fs::exists(*p, ec)) throw InputError(fmt::format("compare: {} does not exist", *p));
  }
  return Settings{o.base, o.now, o.threshold / 100};
}

Better better_of(const std::string& key, const std::string& unit) {
  if (unit == "ms/token") return Better::Lower;
  if (contains(unit, "/s") || unit == "x") return Better::Higher;
  if (unit == "s" || unit == "ms" || unit == "us" || unit == "ns" || unit == "cycles")
    return Better::Lower;
  if (unit == "%" || unit == "pp") {
    for (const char* lower : {"bubble", "exposed", "overhead", "noise"})
      if (contains(key, lower)) return Better::Lower;
    for (const char* higher : {"efficiency", "mfu", "utilization"})
      if (contains(key, higher)) return Better::Higher;
  }
  return Better::Neither;
}

Comparison compare_runs(const Run& base, const Run& now, double threshold) {
  Comparison c;
  if (!base.reports.empty() && !now.reports.empty())
    add_system_differences(base.reports.front(), now.reports.front(), c);
  for (const Report& b : base.reports) {
    const auto it = std::find_if(now.reports.begin(), now.reports.end(),
                                 [&](const Report& n) { return n.module == b.module; });
    if (it == now.reports.end()) {
      c.only_base.push_back(b.module);
      continue;
    }
    compare_module(b, *it, c);
    add_option_differences(b, *it, c);
  }
  for (const Report& n : now.reports)
    if (std::none_of(base.reports.begin(), base.reports.end(),
                     [&](const Report& b) { return b.module == n.module; }))
      c.only_new.push_back(n.module);
  for (Figure& f : c.figures) f.outcome = outcome_of(f, threshold);
  // Regressions worst first, then improvements largest first, the rest in report order.
  std::stable_sort(c.figures.begin(), c.figures.end(), [](const Figure& a, const Figure& b) {
    if (outcome_rank(a.outcome) != outcome_rank(b.outcome))
      return outcome_rank(a.outcome) < outcome_rank(b.outcome);
    if (a.outcome == "regressed" || a.outcome == "improved")
      return std::abs(a.change()) > std::abs(b.change());
    return false;
  });
  return c;
}

}  // namespace gpubench::compare
