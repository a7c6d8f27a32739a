#pragma once
// Shared table building for the console and Markdown writers (private to src/core).
#include <string>
#include <vector>

#include "gpubench/core/result.hpp"

namespace gpubench::detail {

struct TextTable {
  std::string title;
  std::vector<std::string> headers;
  std::vector<std::vector<std::string>> rows;
};

std::string format_number(double v);                  // 4 significant digits, "n/a" for NaN
std::string param_text(const ojson& v);               // scalar params as text
std::vector<TextTable> case_tables(const Report& r);  // one table per group
TextTable matrix_table(const Matrix& m);
TextTable sweep_table(const Sweep& s);
TextTable headline_table(const Report& r);
std::string render_aligned(const TextTable& t);  // console
std::string render_pipe(const TextTable& t);     // Markdown

}  // namespace gpubench::detail
