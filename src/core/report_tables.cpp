// Builds the tables that both the console and the Markdown writer render.
#include "gpubench/core/report_tables.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "gpubench/core/units.hpp"

namespace gpubench::detail {

std::string format_number(double v) {
  if (!std::isfinite(v)) return "n/a";
  const double a = std::fabs(v);
  if (a == 0) return "0";
  // Counts and other whole numbers read best without decimals.
  if (a < 1e15 && v == std::floor(v)) return fmt::format("{:.0f}", v);
  if (a >= 1e6) return fmt::format("{:.4g}", v);
  if (a >= 100) return fmt::format("{:.1f}", v);
  if (a >= 10) return fmt::format("{:.2f}", v);
  if (a >= 1) return fmt::format("{:.3f}", v);
  return fmt::format("{:.4g}", v);
}

std::string param_text(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  if (v.is_number()) return format_number(v.get<double>());
  if (v.is_null()) return "";
  return v.dump();
}

namespace {
template <class T>
void add_unique(std::vector<T>& v, const T& x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}
}  // namespace

std::vector<TextTable> case_tables(const Report& r) {
  std::vector<std::string> groups;
  for (const auto& c : r.results) add_unique(groups, c.group);
  std::vector<TextTable> out;
  for (const auto& g : groups) {
    std::vector<std::string> param_keys;
    std::vector<std::pair<std::string, std::string>> metric_keys;  // key, unit
    bool any_note = false, any_not_ok = false;
    for (const auto& c : r.results) {
      if (c.group != g) continue;
      for (const auto& [k, v] : c.params.items())
        if (!v.is_object() && !v.is_array()) add_unique(param_keys, k);
      for (const auto& kv : c.metrics) add_unique(metric_keys, {kv.first, kv.second.unit});
      any_note = any_note || !c.note.empty();
      any_not_ok = any_not_ok || c.status != "ok";
    }
    TextTable t;
    t.title = g.empty() ? "Results" : g;
    t.headers.push_back("case");
    for (const auto& k : param_keys) t.headers.push_back(k);
    for (const auto& [k, unit] : metric_keys)
      t.headers.push_back(unit.empty() ? k : fmt::format("{} ({})", k, unit));
    if (any_not_ok) t.headers.push_back("status");
    if (any_note) t.headers.push_back("note");
    for (const auto& c : r.results) {
      if (c.group != g) continue;
      std::vector<std::string> row{c.name};
      for (const auto& k : param_keys)
        row.push_back(c.params.contains(k) ? param_text(c.params[k]) : "");
      for (const auto& [k, unit] : metric_keys) {
        const Metric* m = c.find_metric(k);
        if (!m || m->unit != unit)
          row.push_back("");
        else
          row.push_back(m->text.empty() ? format_number(m->value) : m->text);
      }
      if (any_not_ok) row.push_back(c.status);
      if (any_note) row.push_back(c.note);
      t.rows.push_back(std::move(row));
    }
    out.push_back(std::move(t));
  }
  return out;
}

TextTable matrix_table(const Matrix& m) {
  TextTable t;
  t.title = m.title.empty() ? m.name : m.title;
  t.headers.push_back(fmt::format("{} \\ {}", m.row_label, m.col_label));
  for (const auto& c : m.cols) t.headers.push_back(c);
  for (std::size_t i = 0; i < m.rows.size(); ++i) {
    std::vector<std::string> row{m.rows[i]};
    for (std::size_t k = 0; k < m.cols.size(); ++k) {
      const double v = i < m.values.size() && k < m.values[i].size() ? m.values[i][k] : NAN;
      row.push_back(std::isfinite(v) ? format_number(v) : "-");
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

TextTable sweep_table(const Sweep& s) {
  TextTable t;
  t.title = s.title.empty() ? s.name : s.title;
  std::vector<double> xs;
  for (const auto& se : s.series)
    for (double x : se.x) add_unique(xs, x);
  std::sort(xs.begin(), xs.end());
  // A long series (stress's time series) shows evenly spaced rows, the last one included; the
  // JSON and the chart keep every point.
  constexpr std::size_t kMaxRows = 40;
  if (xs.size() > kMaxRows) {
    const std::size_t step = (xs.size() + kMaxRows - 1) / kMaxRows;
    std::vector<double> kept;
    for (std::size_t i = 0; i < xs.size(); i += step) kept.push_back(xs[i]);
    if (kept.back() != xs.back()) kept.push_back(xs.back());
    t.title += fmt::format(" ({} of {} points shown; all in the JSON and the chart)", kept.size(),
                           xs.size());
    xs = std::move(kept);
  }
  t.headers.push_back(s.x_unit.empty() ? s.x_label : fmt::format("{} ({})", s.x_label, s.x_unit));
  for (const auto& se : s.series)
    t.headers.push_back(s.y_unit.empty() ? se.label : fmt::format("{} ({})", se.label, s.y_unit));
  for (double x : xs) {
    std::vector<std::string> row;
    row.push_back(s.x_unit == "bytes" ? format_bytes(static_cast<std::uint64_t>(x))
                                      : format_number(x));
    for (const auto& se : s.series) {
      std::string cell;
      for (std::size_t i = 0; i < se.x.size() && i < se.y.size(); ++i)
        if (se.x[i] == x) cell = format_number(se.y[i]);
      row.push_back(cell);
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

TextTable headline_table(const Report& r) {
  TextTable t;
  t.title = "Headline";
  t.headers = {"key", "value", "unit"};
  for (const auto& [k, m] : r.headline)
    t.rows.push_back({k, m.text.empty() ? format_number(m.value) : m.text, m.unit});
  return t;
}

namespace {
std::vector<std::size_t> widths_of(const TextTable& t) {
  std::vector<std::size_t> w(t.headers.size(), 0);
  for (std::size_t i = 0; i < t.headers.size(); ++i) w[i] = t.headers[i].size();
  for (const auto& row : t.rows)
    for (std::size_t i = 0; i < row.size() && i < w.size(); ++i)
      w[i] = std::max(w[i], row[i].size());
  return w;
}
}  // namespace

std::string render_aligned(const TextTable& t) {
  const auto w = widths_of(t);
  std::string out = t.title + "\n";
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (std::size_t i = 0; i < w.size(); ++i) {
      const std::string c = i < cells.size() ? cells[i] : "";
      // First column left-aligned (names), the rest right-aligned (numbers).
      s += i == 0 ? fmt::format("  {:<{}}", c, w[i]) : fmt::format("  {:>{}}", c, w[i]);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  out += line(t.headers);
  std::size_t total = 0;
  for (auto x : w) total += x + 2;
  out += "  " + std::string(total > 2 ? total - 2 : 0, '-') + "\n";
  for (const auto& row : t.rows) out += line(row);
  return out;
}

std::string render_pipe(const TextTable& t) {
  auto esc = [](std::string s) {
    std::string o;
    for (char c : s) {
      if (c == '|')
        o += "\\|";
      else if (c == '\n')
        o += ' ';
      else
        o += c;
    }
    return o;
  };
  std::string out = "| ";
  for (const auto& h : t.headers) out += esc(h) + " | ";
  out.pop_back();
  out += "\n|";
  for (std::size_t i = 0; i < t.headers.size(); ++i) out += i == 0 ? "---|" : "---:|";
  out += "\n";
  for (const auto& row : t.rows) {
    out += "| ";
    for (std::size_t i = 0; i < t.headers.size(); ++i)
      out += esc(i < row.size() ? row[i] : "") + " | ";
    out.pop_back();
    out += "\n";
  }
  return out;
}

}  // namespace gpubench::detail
