#pragma once
// `gpubench compare BASE NEW`: every headline figure and case metric two runs share, held
// against each other direction-aware (a time lower is better, a bandwidth higher), beyond a
// threshold and beyond the noise the two runs measured; the regressions ranked first and a FAIL
// verdict when there is one, so that CI and cron jobs can gate on the exit code.
#include <cmath>
#include <string>
#include <vector>

#include "gpubench/core/result.hpp"
#include "gpubench/core/runs.hpp"

namespace gpubench::compare {

struct Options {
  std::string base, now;  // run folders or report files
  double threshold = 5;   // percent
};

struct Settings {
  std::string base, now;
  double threshold = 0.05;  // a fraction
  ojson to_json() const;
};
// InputError with one line when a path is empty or names nothing, or the threshold is not a
// number in (0, 100).
Settings resolve_settings(const Options& o);

// The runs compared, read as core's read_run reads them (InputError "compare: ...").
using Run = RunReports;
inline Run load_run(const std::string& path) {
  return read_run(path, "compare");
}

// Which way a figure is better, from its unit and key: rates, bandwidths, speed-ups and
// efficiencies higher; times, latencies and bubbles lower; the rest (memory, clocks, counts,
// check errors) neither: shown when they change, never a regression.
enum class Better { Higher, Lower, Neither };
Better better_of(const std::string& key, const std::string& unit);

// One figure both runs have. `noise`: the larger relative spread (stdev / mean) of the two
// runs' per-iteration times behind it; NaN where none is known (headline figures).
struct Figure {
  std::string module, where, key, unit;  // where: "headline" or "<group> / <case>"
  double base = 0, now = 0, noise = 0;
  Better better = Better::Neither;
  // regressed, improved: worse or better beyond the threshold and the noise; noisy: beyond the
  // threshold, within the noise; changed: beyond the threshold, neither way better; same.
  std::string outcome;
  double change() const { return (now - base) / std::abs(base); }  // relative
};

struct Comparison {
  std::vector<Figure> figures;      // regressed (worst first), improved, noisy, changed, same
  std::vector<std::string> failed;  // cases ok in the base, not in the new run
  std::vector<std::string> only_base, only_new;  // modules in one run only
  std::vector<std::string> differences;          // of system and options between the runs
};
Comparison compare_runs(const Run& base, const Run& now, double threshold);

// The report: one case per figure that moved beyond the threshold (every figure in `extra`),
// a headline of counts, and the verdict: FAIL on a regression or a case that failed only in
// the new run; WARN on noisy figures, differences of system and options, missing modules.
Report comparison_report(const Comparison& c, const Settings& s);

}  // namespace gpubench::compare
