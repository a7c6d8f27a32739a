#pragma once
// Earlier runs read back from disk, for the modules that judge them (compare, check --from,
// check --reference).
#include <string>
#include <vector>

#include "gpubench/core/result.hpp"

namespace gpubench {

// A run's reports: a report file, a file holding an array of reports (`all --json`), or a run
// folder's report files (<module>.json; other JSON there is not a report and is left alone).
struct RunReports {
  std::string path;
  std::vector<Report> reports;
};

// InputError "<who>: ..." naming the path when it holds no report, a file is not JSON or not a
// gpubench report, is larger than any report, or two reports are of one module.
RunReports read_run(const std::string& path, const std::string& who);

}  // namespace gpubench
