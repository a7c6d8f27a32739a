// stress's options: durations, workloads, data types and shares, checked before anything runs.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/modules/stress/stress.hpp"

namespace gpubench::stress {

namespace {

constexpr double kWeek = 7 * 24 * 3600.0;

}  // namespace

double parse_duration(const std::string& text) {
  const std::string t = trim(text);
  const auto bad = [&](const char* why) {
    return InputError(
        fmt::format("--duration '{}': {} (e.g. 90s, 15m, 1h30m, or seconds)", text, why));
  };
  if (t.empty()) throw bad("empty");
  double total = 0;
  std::size_t i = 0;
  bool any = false;
  char last_unit = 0;
  while (i < t.size()) {
    std::size_t j = i;
    while (j < t.size() && (std::isdigit(static_cast<unsigned char>(t[j])) || t[j] == '.')) ++j;
    if (j == i) throw bad("not a duration");
    double value = 0;
    try {
      std::size_t used = 0;
      value = std::stod(t.substr(i, j - i), &used);
      if (used != j - i) throw bad("not a duration");
    } catch (const std::logic_error&) {
      throw bad("not a duration");
    }
    double unit = 1;
    char u = 's';
    if (j < t.size()) {
      u = static_cast<char>(std::tolower(static_cast<unsigned char>(t[j])));
      if (u == 'h')
        unit = 3600;
      else if (u == 'm')
        unit = 60;
      else if (u != 's')
        throw bad("units are h, m and s");
      ++j;
    } else if (any) {
      throw bad("a number after a unit needs its own unit");
    }
    const auto rank = [](char c) { return c == 'h' ? 3 : c == 'm' ? 2 : c == 's' ? 1 : 4; };
    if (last_unit && rank(u) >= rank(last_unit)) throw bad("units go from hours to seconds");
    last_unit = u;
    total += value * unit;
    any = true;
    i = j;
  }
  if (!std::isfinite(total) || !(total > 0)) throw bad("must be more than 0");
  if (total > kWeek) throw bad("at most a week");
  return total;
}

Settings resolve_settings(const Options& o, bool quick) {
  Settings s;
  s.quick = quick;
  s.duration_s = trim(o.duration).empty() ? (quick ? 60.0 : 900.0) : parse_duration(o.duration);
  const std::string w = trim(o.workload);
  if (w != "all") {
    s.gemm = s.memory = s.link = false;
    for (const std::string& item : split_list(w)) {
      if (item == "gemm")
        s.gemm = true;
      else if (item == "memory")
        s.memory = true;
      else if (item == "link")
        s.link = true;
      else
        throw InputError(
            fmt::format("--workload: unknown workload '{}' (gemm, memory, link or all)", item));
    }
  }
  s.dtypes.clear();
  if (s.gemm) {
    for (const std::string& item : split_list(o.dtypes)) {
      GemmDtype t{};
      try {
        t = parse_gemm_dtype(item);
      } catch (const InputError& e) {
        throw InputError(std::string("--dtypes: ") + e.what());
      }
      if (std::find(s.dtypes.begin(), s.dtypes.end(), t) == s.dtypes.end()) s.dtypes.push_back(t);
    }
  }
  if (!std::isfinite(o.memory) || !(o.memory > 0) || o.memory > 95)
    throw InputError(fmt::format("--memory {}: must be a percent in (0, 95]", o.memory));
  if (!std::isfinite(o.outlier) || !(o.outlier > 0) || !(o.outlier < 100))
    throw InputError(fmt::format("--outlier {}: must be a percent in (0, 100)", o.outlier));
  s.memory_share = o.memory / 100;
  s.outlier = o.outlier / 100;
  return s;
}

nlohmann::ordered_json Settings::to_json() const {
  nlohmann::ordered_json workloads = nlohmann::ordered_json::array();
  if (gemm) workloads.push_back("gemm");
  if (memory) workloads.push_back("memory");
  if (link) workloads.push_back("link");
  nlohmann::ordered_json types = nlohmann::ordered_json::array();
  for (GemmDtype t : dtypes) types.push_back(to_string(t));
  return {{"duration_s", duration_s},
          {"workloads", workloads},
          {"dtypes", types},
          {"memory_pct", memory_share * 100},
          {"outlier_pct", outlier * 100},
          {"quick", quick},
          {"hang_limit_s", hang_s}};
}

}  // namespace gpubench::stress
