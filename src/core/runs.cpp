// Reading earlier runs back: report files, arrays of reports, run folders.
#include "gpubench/core/runs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gpubench/core/errors.hpp"

namespace gpubench {

namespace fs = std::filesystem;

namespace {

// Larger than any report gpubench writes; a bigger file (or a device) is not one.
constexpr std::uintmax_t kMaxReportBytes = std::uintmax_t{256} << 20;

bool is_report(const ojson& j) {
  return j.is_object() && j.value("schema", "") == kResultSchema;
}

ojson parse_file(const fs::path& file, const std::string& who) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    throw InputError(fmt::format("{}: {} is not a report file", who, file.string()));
  if (fs::file_size(file, ec) > kMaxReportBytes)
    throw InputError(fmt::format("{}: {} is larger than any report", who, file.string()));
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) throw InputError(fmt::format("{}: cannot read {}", who, file.string()));
  try {
    return ojson::parse(text.str());
  } catch (const nlohmann::json::exception&) {
    throw InputError(fmt::format("{}: {} is not JSON", who, file.string()));
  }
}

// The reports of one file: a report, or an array of them.
std::vector<Report> reports_of(const fs::path& file, const std::string& who) {
  const ojson j = parse_file(file, who);
  std::vector<Report> out;
  if (is_report(j)) {
    out.push_back(report_from_json(j));
  } else if (j.is_array() && !j.empty() && std::all_of(j.begin(), j.end(), is_report)) {
    for (const auto& r : j) out.push_back(report_from_json(r));
  } else {
    throw InputError(fmt::format("{}: {} is not a gpubench report", who, file.string()));
  }
  return out;
}

}  // namespace

RunReports read_run(const std::string& path, const std::string& who) {
  RunReports run{path, {}};
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.path().extension() == ".json" && e.is_regular_file(ec)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      const ojson j = parse_file(f, who);
      if (is_report(j)) run.reports.push_back(report_from_json(j));  // other JSON is not ours
    }
  } else {
    run.reports = reports_of(path, who);
  }
  if (run.reports.empty())
    throw InputError(fmt::format("{}: {} holds no gpubench report", who, path));
  for (std::size_t i = 0; i < run.reports.size(); ++i)
    for (std::size_t k = 0; k < i; ++k)
      if (run.reports[i].module == run.reports[k].module)
        throw InputError(
            fmt::format("{}: {} holds two {} reports", who, path, run.reports[i].module));
  return run;
}

}  // namespace gpubench
