#pragma once
// The result model: a Report is data only (schema gpubench.result/1). Writers render it as
// JSON, Markdown and a console table; modules never print or write files themselves.
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpubench/core/stats.hpp"

namespace gpubench {

using ojson = nlohmann::ordered_json;

inline constexpr const char* kResultSchema = "gpubench.result/1";

// A number with its unit, or (text non-empty) a label such as a shape "8192x8192x8192".
struct Metric {
  double value = 0;
  std::string unit;
  std::string text;
};

// One measured case (a row). `group` names the table it belongs to in the console/Markdown
// views ("HBM fp64", "P2P unidirectional, copy engine"); `params` are its inputs.
struct CaseResult {
  std::string group;
  std::string name;
  ojson params = ojson::object();
  std::vector<std::pair<std::string, Metric>> metrics;  // in display order
  std::optional<Stats> stats;                           // per-iteration times, seconds
  std::string status = "ok";                            // ok | skipped | failed
  std::string note;

  CaseResult& metric(const std::string& key, double value, const std::string& unit);
  const Metric* find_metric(const std::string& key) const;
};

// A GPU x GPU (or host x GPU) matrix, rendered as a table and a heatmap.
// Missing entries (the diagonal, unsupported pairs) are NaN and written as null.
struct Matrix {
  std::string name;   // file-safe id: "p2p_unidir_ce_GBps"
  std::string title;  // "P2P unidirectional bandwidth, copy engine (GB/s)"
  std::string unit;
  std::string row_label = "src", col_label = "dst";
  std::vector<std::string> rows, cols;
  std::vector<std::vector<double>> values;
};

// A curve (or several) over a swept parameter, rendered as a chart.
struct Series {
  std::string label;
  std::vector<double> x, y;
};
struct Sweep {
  std::string name;  // file-safe id: "p2p_size_sweep"
  std::string title;
  std::string x_label, x_unit;  // "size", "bytes"
  std::string y_label, y_unit;  // "bandwidth", "GB/s"
  bool log_x = true;
  std::vector<Series> series;
};

// A judgement of a run: `compare`'s of a run against its base (and `check`'s of a node). Each
// finding is PASS, WARN or FAIL, with what it is about, the value against what was expected and
// why; the verdict's level is the worst finding's, with one line a person reads at a glance. A
// FAIL verdict ends the run with kExitVerdict.
struct Finding {
  std::string level;    // PASS | WARN | FAIL
  std::string subject;  // "GPU 2", "NVLink 1<->3", "bandwidth: HBM fp64 / triad"
  std::string what;     // the figure or counter: "bandwidth", "NVLink CRC errors"
  double value = std::nan(""), expected = std::nan("");  // NaN where there is none
  std::string unit;
  std::string reason;  // "-12.1% (base 4.35, noise 0.4%)"
};
// One judged item of a verdict, before it is rendered: PASS, WARN, FAIL, or N/A (what it needs
// is not available here; never counted as PASS). `check` and `stress` build their reports from
// these.
struct Check {
  std::string level;
  std::string group;    // "HBM triad (fp64)", "Health", "NVLink", "Runs"
  std::string subject;  // "GPU 2", "GPU 1 link 3", "node"
  std::string what;     // "floor", "outlier", "ECC uncorrected errors", ...
  double value = std::nan(""), expected = std::nan("");
  std::string unit;
  std::string reason;
};
struct Verdict {
  std::string level = "PASS";
  std::string line;               // "compare FAIL: 3 of 412 figures regressed (worst ...)"
  int judged = 0;                 // figures or checks held against an expectation
  std::vector<Finding> findings;  // the WARN and FAIL ones, worst first
  // Adds a finding and raises the level to it.
  void add(Finding f);
};
struct Report;
// Adds a row per check to `r`, FAILs first and N/A last (group and subject from the check, its
// level and what in params, value and expected as metrics, the reason as the note), and returns
// the verdict of the checks: the worst level, a finding per WARN and FAIL, `judged` the checks
// that are not N/A. The caller writes the verdict's line.
Verdict add_check_rows(Report& r, const std::vector<Check>& checks);
// The worse of two levels (PASS < WARN < FAIL).
const std::string& worse_level(const std::string& a, const std::string& b);

struct Report {
  std::string module;
  std::string version;
  std::string run_id;
  std::string started_at, finished_at;  // ISO 8601 UTC
  std::vector<std::string> command;
  ojson system = ojson::object();
  ojson config = ojson::object();
  std::vector<std::pair<std::string, Metric>> headline;
  std::vector<CaseResult> results;
  std::vector<Matrix> matrices;
  std::vector<Sweep> sweeps;
  ojson monitor = ojson::object();
  ojson extra = ojson::object();  // module-specific data (env's inventory, ...)
  // Further JSON files of the run, written beside the report at <run folder>/<name> (pp's
  // Chrome traces, "pp_traces/p4_1f1b_m8.json"); the report lists their names only.
  std::vector<std::pair<std::string, ojson>> attachments;
  std::vector<std::string> warnings;
  // What the run concluded, a sentence each (advise's advice): the Markdown shows them under
  // "Findings" after the headline, the console after the tables.
  std::vector<std::string> findings;
  std::string status = "ok";  // ok | partial | failed
  std::string error;          // why, when failed
  std::optional<Verdict> verdict;

  CaseResult& add(CaseResult r) {
    results.push_back(std::move(r));
    return results.back();
  }
  void set_headline(const std::string& key, double value, const std::string& unit);
  void set_headline_text(const std::string& key, const std::string& text,
                         const std::string& unit = "");
  const Metric* find_headline(const std::string& key) const;
  void warn(const std::string& text);  // deduplicated
  // ok when every case is ok or skipped, partial when some failed, failed when all failed.
  void settle_status();
};

ojson to_json(const Report& r);
Report report_from_json(const ojson& j);  // for tests and tools that read reports back

}  // namespace gpubench
