#pragma once
// The options every subcommand takes, and the measurement options they give.
#include <string>

#include "gpubench/core/measure.hpp"

namespace gpubench {

// Options every subcommand takes (and the [common] section of a config file).
struct CommonOptions {
  std::string gpus = "all";
  bool quick = false;
  int iters = 0;          // > 0: fixed timed iterations
  int warmup = -1;        // < 0: the default
  double min_time = -1;   // seconds; < 0: the default
  double max_noise = -1;  // percent (stdev/mean x 100); < 0: the default
  double max_time = -1;   // seconds per measurement; < 0: the default
  std::string l2 = "cold";
  std::string log_level = "info";
  std::string output_dir;  // "" -> results/test_YYYYMMDD_HHMMSS
  std::string json;        // "-" prints the JSON report to stdout
  std::string csv;         // "-" prints the CSV rows to stdout
  bool no_files = false;   // print only, write nothing
  bool dry_run = false;    // check the input, print the effective config, touch no GPU
};

// MeasureOptions from the common options (quick mode shortens the defaults).
MeasureOptions measure_options_from(const CommonOptions& common);

}  // namespace gpubench
