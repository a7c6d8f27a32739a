// Summary statistics over per-iteration samples.
#include "gpubench/core/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <stdexcept>

namespace gpubench {

double median_of(std::vector<double> values) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  return percentile_sorted(values, 0.5);
}

double percentile_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) throw std::invalid_argument("percentile of an empty sample");
  if (sorted.size() == 1) return sorted.front();
  q = std::clamp(q, 0.0, 1.0);
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

static double mean_of(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

static double stdev_of(const std::vector<double>& v, double mean) {
  if (v.size() < 2) return 0.0;
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

Stats compute_stats(std::vector<double> samples) {
  if (samples.empty()) throw std::invalid_argument("statistics of an empty sample");
  std::sort(samples.begin(), samples.end());
  Stats s;
  s.n = samples.size();
  s.min = samples.front();
  s.max = samples.back();
  s.median = percentile_sorted(samples, 0.5);
  s.p5 = percentile_sorted(samples, 0.05);
  s.p95 = percentile_sorted(samples, 0.95);
  s.p99 = percentile_sorted(samples, 0.99);
  s.mean = mean_of(samples);
  s.stdev = stdev_of(samples, s.mean);
  s.cv = s.mean > 0 ? s.stdev / s.mean : 0.0;
  return s;
}

double relative_noise(const std::vector<double>& samples) {
  if (samples.size() < 2) return 0.0;
  const double m = mean_of(samples);
  return m > 0 ? stdev_of(samples, m) / m : 0.0;
}

nlohmann::ordered_json stats_to_json(const Stats& s, double scale, const char* unit) {
  nlohmann::ordered_json j;
  j["n"] = s.n;
  j["unit"] = unit;
  j["median"] = s.median * scale;
  j["min"] = s.min * scale;
  j["max"] = s.max * scale;
  j["mean"] = s.mean * scale;
  j["p5"] = s.p5 * scale;
  j["p95"] = s.p95 * scale;
  j["p99"] = s.p99 * scale;
  j["stdev"] = s.stdev * scale;
  j["cv"] = s.cv;
  return j;
}

}  // namespace gpubench
