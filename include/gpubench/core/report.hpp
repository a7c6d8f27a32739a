#pragma once
// Writers: one Report, several renderings; the run folder and the files written into it.
#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "gpubench/core/result.hpp"

namespace gpubench {

std::string render_json(const Report& r, int indent = 2);
std::string render_markdown(const Report& r);
std::string render_console(const Report& r);
// Summary of several reports (gpubench all): module, status, headline figures.
std::string render_summary_markdown(const std::vector<Report>& reports);
// One CSV row per case of every report: module, group, case, status, each parameter, each
// metric with its unit in the header ("time (ms)"), note. A case without a column's value
// leaves it empty.
std::string render_csv(const std::vector<Report>& reports);

// Checks, before a run, that `path` (given by `option`, e.g. "--json") can be written: an
// existing regular file or a new one in an existing writable folder (symlinks followed), or a
// character device or pipe (/dev/null, /dev/stdout), written in place. Throws InputError.
void check_output_file(const std::filesystem::path& path, const char* option);
// Writes `text` to `path`: a regular file atomically (temp file + rename beside the symlink's
// target, so a symlink stays one), a character device or pipe in place, nothing else. Throws
// WriteError naming the path.
void write_output_file(const std::filesystem::path& path, const std::string& text);

// "test_YYYYMMDD_HHMMSS" for the current local time.
std::string make_run_id();
// Checks, before a run, that --output-dir (when given) is a new or empty folder that can be
// made and written. Throws InputError with one clear line.
void check_output_dir(const std::string& output_dir);
// Creates the run's folder: --output-dir (checked as above), else results/<run_id>, or
// results/<run_id>_N when that exists (made with mkdir: never shared with another run), and
// sets run_id to the folder's name. Throws InputError.
std::filesystem::path make_output_dir(const std::string& output_dir, std::string& run_id);

// Writes <dir>/<module>.json and <dir>/<module>.md.
void write_report_files(const std::filesystem::path& dir, const Report& r);

}  // namespace gpubench
