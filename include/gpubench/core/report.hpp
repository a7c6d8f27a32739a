#pragma once
// Writers: one Report, several renderings. Files are written atomically (temp + rename).
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

// Writes `text` to `path` atomically; throws InputError when the folder is not writable.
void write_file_atomic(const std::filesystem::path& path, const std::string& text);

// "test_YYYYMMDD_HHMMSS" for the current local time.
std::string make_run_id();
// Creates (if needed) and checks the output folder: results/<run_id> or --output-dir.
// Throws InputError with one clear line when it cannot be created or written.
std::filesystem::path prepare_output_dir(const std::string& output_dir, const std::string& run_id);

// Writes <dir>/<module>.json and <dir>/<module>.md.
void write_report_files(const std::filesystem::path& dir, const Report& r);

}  // namespace gpubench
