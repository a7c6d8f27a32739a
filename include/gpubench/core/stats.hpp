#pragma once
// Summary statistics over per-iteration samples (seconds). Rates are computed from the median
// time by the caller, never by averaging rates.
#include <cstddef>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gpubench {

struct Stats {
  std::size_t n = 0;
  double median = 0, min = 0, max = 0, mean = 0;
  double p5 = 0, p95 = 0, p99 = 0;
  double stdev = 0;  // sample standard deviation (n-1)
  double cv = 0;     // stdev / mean
};

// Percentile with linear interpolation between closest ranks (q in [0,1]) of sorted data.
double percentile_sorted(const std::vector<double>& sorted, double q);
// The median of unsorted values; NaN when there are none.
double median_of(std::vector<double> values);
// Throws std::invalid_argument on an empty sample.
Stats compute_stats(std::vector<double> samples);
// Relative noise used by the stopping rule: stdev / mean (0 for fewer than 2 samples).
double relative_noise(const std::vector<double>& samples);

// {"n","median","min","max","mean","p5","p95","p99","stdev","cv"}; `scale` multiplies the
// time fields (1e6 to report microseconds), `unit` is recorded as "unit".
nlohmann::ordered_json stats_to_json(const Stats& s, double scale = 1.0, const char* unit = "s");

}  // namespace gpubench
