#pragma once
// `gpubench check`: one verdict per node. A short battery (HBM, host<->device, GPU<->GPU,
// all_reduce, a GEMM per tensor-core dtype, a decode step) or an earlier run's reports, held
// against floors per GPU model (config/expect/*.ini), against the node's own median (a GPU or
// pair more than a set share below it is an outlier) and, on request, against a known-good
// run; NVML's health counters read before and after, XID events in between. Every check is
// PASS, WARN or FAIL (or N/A where the driver does not tell); the node's verdict is the worst.
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gpubench/core/health.hpp"
#include "gpubench/core/result.hpp"

namespace gpubench::check {

struct Options {
  std::string from;       // judge this run instead of measuring
  std::string expect;     // floors over the built-in ones
  std::string reference;  // a known-good run of the same kind
  double outlier = 5;     // percent below the node's median
};

struct Settings {
  std::string from, expect, reference;
  double outlier = 0.05;  // a fraction
  bool quick = false;
  nlohmann::ordered_json to_json() const;
};
// InputError with one line when a path names nothing or the share is not in (0, 100).
Settings resolve_settings(const Options& o, bool quick);

// ---- Expectations ----

// Floors: figure key ("hbm_triad", "gemm_bf16", ...) -> share (%) of the figure's peak.
struct Expectations {
  std::string name;    // the built-in file's stem ("h200"), or "default"
  std::string source;  // "built in" or the --expect file over it
  std::map<std::string, double> floors;
  nlohmann::ordered_json to_json() const;
};
// The figure keys a floor may name.
const std::vector<std::string>& floor_keys();
// One expectations file: [gpu] match = substrings of GPU names (comma-separated), [floors]
// key = percent. InputError "origin:line: ..." on an unknown section or key, or a floor that is
// not a number in (0, 100].
struct ExpectFile {
  std::vector<std::string> match;
  std::map<std::string, double> floors;
};
ExpectFile parse_expect_file(const std::string& text, const std::string& origin);
// The built-in file whose `match` names `gpu_name` (case-insensitive), else "default"; then the
// floors of `expect_file` (when given) over it.
Expectations expectations_for(const std::string& gpu_name, const std::string& expect_file);

// ---- Figures ----

// A measured figure a check holds against something: a GPU's, a pair's or the node's.
struct Figure {
  std::string key;      // "hbm_triad", "p2p_unidir", "gemm_bf16", "all_reduce_busbw", "decode_tp1"
  std::string title;    // "HBM triad (fp64)"
  std::string subject;  // "GPU 2", "GPU 0->1", "GPU 0<->1", "node"
  double value = 0;
  std::string unit;
  double pct_of_peak = std::nan("");  // NaN when gpubench knows no peak for it
  bool higher_better = true;
  // Outliers are judged among the figures of the same key and cohort: a pair's link ("NVLink
  // x18", "PCIe"), so that a node whose pairs are joined differently holds each pair against
  // those joined alike; "" for the rest.
  std::string cohort;
};
// The figures of a battery's (or an `all` run's) reports, from verified cases only: a case
// whose check failed or did not run is never a figure.
std::vector<Figure> figures_of(const std::vector<Report>& reports);

// ---- Judging ----

struct Evidence {
  std::vector<Report> reports;  // the battery's, or those of --from
  std::optional<HealthSnapshot> before, after;
  std::vector<XidWatcher::Event> xids;
  std::string xid_unavailable;  // why XID events were not watched ("" when they were)
};

// Every check of the evidence: floors, outliers (more than `outlier` below the median of the
// same figure on the node's other GPUs or pairs), the reference run's figures when given, failed
// cases, and health.
std::vector<Check> judge(const Evidence& evidence, const Expectations& expect,
                         const std::vector<Report>* reference, double outlier);
// The health part of the evidence (its snapshots and XID events; no throttling).
HealthEvidence health_of(const Evidence& evidence);

// The report: a case per check (FAILs first), the verdict (the worst level; a line naming the
// FAILs, else the WARNs), the snapshots and expectations in `extra`.
Report check_report(const std::vector<Check>& checks, const Evidence& evidence,
                    const Expectations& expect, const Settings& settings);

}  // namespace gpubench::check
