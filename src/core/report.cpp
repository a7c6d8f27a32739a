// Writers: JSON, Markdown, console and the run summary; atomic files and the run folder.
#include "gpubench/core/report.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <random>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/report_tables.hpp"

namespace gpubench {

using detail::render_aligned;
using detail::render_pipe;

std::string render_json(const Report& r, int indent) {
  return to_json(r).dump(indent) + "\n";
}

namespace {

std::string gpu_line(const ojson& g) {
  const auto mem = g.value("memory_bytes", 0.0) / 1073741824.0;
  return fmt::format("GPU {}: {} ({:.0f} GiB, cc {}, {} SMs, PCI {})", g.value("index", -1),
                     g.value("name", "?"), mem, g.value("cc", "?"), g.value("sm_count", 0),
                     g.value("pci_bus_id", "?"));
}

std::string monitor_lines(const ojson& mon, const char* bullet) {
  std::string out;
  if (!mon.value("available", false)) return out;
  for (const auto& g : mon.value("gpus", ojson::array())) {
    std::string reasons;
    for (const auto& n : g.value("throttle_reasons", ojson::array()))
      reasons += (reasons.empty() ? "" : ", ") + n.get<std::string>();
    out += fmt::format("{}GPU {}: SM {}-{} MHz, memory {}-{} MHz, max {} C, max {:.0f} W{}{}\n",
                       bullet, g.value("gpu", -1), g["sm_clock_MHz"].value("min", 0),
                       g["sm_clock_MHz"].value("max", 0), g["mem_clock_MHz"].value("min", 0),
                       g["mem_clock_MHz"].value("max", 0), g.value("temperature_max_C", 0),
                       g.value("power_max_W", 0.0),
                       reasons.empty() ? "" : ", clock events: " + reasons,
                       g.value("throttled", false) ? " (THROTTLED)" : "");
  }
  return out;
}

// Where a chart goes: an HTML comment, invisible, that scripts/plot_results.py replaces with the
// image link once it has drawn the file, so the Markdown never links a file that is not there.
std::string chart_slot(const std::string& module, const std::string& name) {
  return fmt::format("<!-- chart: charts/{}_{}.png -->\n\n", module, name);
}

// A CSV field: quoted (quotes doubled) when it holds a comma, quote or line break.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string csv_value(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  return v.dump();
}

}  // namespace

std::string render_csv(const std::vector<Report>& reports) {
  // Columns: every parameter and every metric ("name (unit)") met, in the order first met.
  std::vector<std::string> params, metrics;
  const auto note = [](std::vector<std::string>& list, const std::string& name) {
    if (std::find(list.begin(), list.end(), name) == list.end()) list.push_back(name);
  };
  const auto metric_column = [](const std::string& key, const Metric& m) {
    return m.unit.empty() || !m.text.empty() ? key : fmt::format("{} ({})", key, m.unit);
  };
  for (const Report& r : reports)
    for (const CaseResult& c : r.results) {
      for (const auto& [k, v] : c.params.items()) note(params, k);
      for (const auto& [k, m] : c.metrics) note(metrics, metric_column(k, m));
    }
  std::string out = "module,group,case,status";
  for (const auto& p : params) out += "," + csv_field(p);
  for (const auto& m : metrics) out += "," + csv_field(m);
  out += ",note\n";
  for (const Report& r : reports)
    for (const CaseResult& c : r.results) {
      out += csv_field(r.module) + "," + csv_field(c.group) + "," + csv_field(c.name) + "," +
             csv_field(c.status);
      for (const auto& p : params)
        out += "," + (c.params.contains(p) ? csv_field(csv_value(c.params[p])) : std::string());
      for (const auto& col : metrics) {
        std::string cell;
        for (const auto& [k, m] : c.metrics)
          if (metric_column(k, m) == col)
            cell = m.text.empty() ? fmt::format("{:.6g}", m.value) : m.text;
        out += "," + csv_field(cell);
      }
      out += "," + csv_field(c.note) + "\n";
    }
  return out;
}

namespace {

// The verdict first: its line, then the findings that are not PASS.
std::string verdict_markdown(const Verdict& v) {
  std::string md = fmt::format("## Verdict: {}\n\n{}\n\n", v.level, v.line);
  if (v.findings.empty()) return md;
  md += "| level | subject | what | value | expected | unit | reason |\n";
  md += "|---|---|---|---:|---:|---|---|\n";
  auto num = [](double x) { return std::isfinite(x) ? detail::format_number(x) : std::string(); };
  for (const Finding& f : v.findings)
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", f.level, f.subject, f.what,
                      num(f.value), num(f.expected), f.unit, f.reason);
  return md + "\n";
}

}  // namespace

std::string render_markdown(const Report& r) {
  std::string md = fmt::format("# gpubench {}\n\n", r.module);
  md += fmt::format("- status: **{}**{}\n", r.status, r.error.empty() ? "" : " — " + r.error);
  md += fmt::format("- run: `{}`, {} to {}\n", r.run_id, r.started_at, r.finished_at);
  md += fmt::format("- gpubench {}\n", r.version);
  std::string cmd;
  for (const auto& a : r.command) cmd += (cmd.empty() ? "" : " ") + a;
  if (!cmd.empty()) md += fmt::format("- command: `{}`\n", cmd);
  if (r.system.contains("driver"))
    md += fmt::format("- driver {}, CUDA runtime {}, NCCL {}\n", r.system.value("driver", "?"),
                      r.system.value("cuda_runtime", "?"), r.system.value("nccl", "?"));
  for (const auto& g : r.system.value("gpus", ojson::array())) md += "- " + gpu_line(g) + "\n";
  md += "\n";
  if (r.verdict) md += verdict_markdown(*r.verdict);
  if (!r.headline.empty()) md += "## Headline\n\n" + render_pipe(detail::headline_table(r)) + "\n";
  if (!r.findings.empty()) {
    md += "## Findings\n\n";
    for (const auto& f : r.findings) md += "- " + f + "\n";
    md += "\n";
  }
  if (!r.warnings.empty()) {
    md += "## Warnings\n\n";
    for (const auto& w : r.warnings) md += "- " + w + "\n";
    md += "\n";
  }
  for (const auto& t : detail::case_tables(r))
    md += "## " + t.title + "\n\n" + render_pipe(t) + "\n";
  for (const auto& m : r.matrices) {
    const auto t = detail::matrix_table(m);
    md += "## " + t.title + "\n\n" + render_pipe(t) + "\n";
    md += chart_slot(r.module, m.name);
  }
  for (const auto& s : r.sweeps) {
    const auto t = detail::sweep_table(s);
    md += "## " + t.title + "\n\n" + render_pipe(t) + "\n";
    md += chart_slot(r.module, s.name);
  }
  if (!r.attachments.empty()) {
    md += "## Files\n\n";
    for (const auto& a : r.attachments) md += fmt::format("- [{}]({})\n", a.first, a.first);
    md += "\n";
  }
  const std::string mon = monitor_lines(r.monitor, "- ");
  if (!mon.empty()) md += "## Clocks, power and temperature while measuring\n\n" + mon + "\n";
  if (!r.matrices.empty() || !r.sweeps.empty())
    md +=
        "_Charts: `scripts/plot_results.py <run folder>` draws them and links them above "
        "(quick_start.sh runs it)._\n";
  return md;
}

std::string render_console(const Report& r) {
  std::string out = fmt::format("== gpubench {} : {}{}\n", r.module, r.status,
                                r.error.empty() ? "" : " (" + r.error + ")");
  for (const auto& t : detail::case_tables(r)) out += "\n" + render_aligned(t);
  for (const auto& m : r.matrices) out += "\n" + render_aligned(detail::matrix_table(m));
  for (const auto& s : r.sweeps) out += "\n" + render_aligned(detail::sweep_table(s));
  if (!r.headline.empty()) out += "\n" + render_aligned(detail::headline_table(r));
  if (!r.findings.empty()) out += "\n";
  for (const auto& f : r.findings) out += f + "\n";
  const std::string mon = monitor_lines(r.monitor, "  ");
  if (!mon.empty()) out += "\nMonitor\n" + mon;
  for (const auto& w : r.warnings) out += "warning: " + w + "\n";
  if (r.verdict) out += "\n" + r.verdict->line + "\n";
  return out;
}

std::string render_summary_markdown(const std::vector<Report>& reports) {
  std::string md = "# gpubench summary\n\n";
  for (const auto& r : reports)
    if (r.verdict)
      md += fmt::format("**{}** (see [{}]({}.md))\n\n", r.verdict->line, r.module, r.module);
  md += "| module | status | note |\n|---|---|---|\n";
  for (const auto& r : reports)
    md += fmt::format("| [{}]({}.md) | {} | {} |\n", r.module, r.module, r.status, r.error);
  md += "\n## Headline figures\n\n| module | key | value | unit |\n|---|---|---:|---|\n";
  for (const auto& r : reports)
    for (const auto& [k, m] : r.headline)
      md += fmt::format("| {} | {} | {} | {} |\n", r.module, k,
                        m.text.empty() ? detail::format_number(m.value) : m.text, m.unit);
  return md;
}

namespace {

namespace fs = std::filesystem;

// The file a path names once its symlinks are followed (the path itself when it names nothing
// yet); a symlink to nothing is refused, as writing would create a file elsewhere.
fs::path resolve_output_path(const fs::path& path, const char* option) {
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(path, ec);
  if (!fs::is_symlink(link)) return path;
  const fs::path target = fs::canonical(path, ec);
  if (ec)
    throw InputError(fmt::format("{}: '{}' is a symlink to a missing file", option, path.string()));
  return target;
}

bool written_in_place(const fs::file_status& st) {
  return fs::is_character_file(st) || fs::is_fifo(st);
}

}  // namespace

void check_output_file(const fs::path& path, const char* option) {
  const fs::path target = resolve_output_path(path, option);
  std::error_code ec;
  const fs::file_status st = fs::status(target, ec);
  if (fs::exists(st)) {
    if (fs::is_directory(st))
      throw InputError(fmt::format("{}: '{}' is a folder, not a file", option, path.string()));
    if (!fs::is_regular_file(st) && !written_in_place(st))
      throw InputError(
          fmt::format("{}: '{}' is neither a regular file nor a character device or pipe", option,
                      path.string()));
    if (::access(target.c_str(), W_OK) != 0)
      throw InputError(fmt::format("{}: '{}' is not writable", option, path.string()));
    if (!fs::is_regular_file(st)) return;
  }
  const fs::path folder = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  if (!fs::is_directory(folder, ec))
    throw InputError(fmt::format("{}: folder '{}' does not exist", option, folder.string()));
  if (::access(folder.c_str(), W_OK) != 0)
    throw InputError(fmt::format("{}: folder '{}' is not writable", option, folder.string()));
}

void write_output_file(const fs::path& path, const std::string& text) {
  std::error_code ec;
  fs::path target = path;
  if (fs::is_symlink(fs::symlink_status(path, ec))) {
    target = fs::canonical(path, ec);
    if (ec) throw WriteError(fmt::format("cannot write '{}': {}", path.string(), ec.message()));
  }
  if (written_in_place(fs::status(target, ec))) {  // /dev/null, /dev/stdout, a pipe
    std::ofstream f(target, std::ios::binary);
    f << text;
    f.flush();
    if (!f) throw WriteError(fmt::format("cannot write '{}'", path.string()));
    return;
  }
  static std::mt19937_64 rng{std::random_device{}()};
  const fs::path tmp = target.string() + fmt::format(".tmp{:x}", rng());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f)
      throw WriteError(
          fmt::format("cannot write '{}': folder missing or not writable", path.string()));
    f << text;
    f.flush();
    if (!f) {
      fs::remove(tmp, ec);
      throw WriteError(fmt::format("cannot write '{}': disk full or not writable", path.string()));
    }
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    throw WriteError(fmt::format("cannot write '{}': {}", path.string(), why));
  }
}

std::string make_run_id() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "test_%Y%m%d_%H%M%S", &tm);
  return buf;
}

void check_output_dir(const std::string& output_dir) {
  if (output_dir.empty()) return;
  const fs::path dir(output_dir);
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(st))
      throw InputError(fmt::format("--output-dir: '{}' exists and is not a folder", output_dir));
    if (!fs::is_empty(dir, ec))
      throw InputError(fmt::format(
          "--output-dir: '{}' already holds files; a run's reports are never mixed with "
          "others': name a new or empty folder",
          output_dir));
    if (::access(dir.c_str(), W_OK) != 0)
      throw InputError(fmt::format("--output-dir: '{}' is not writable", output_dir));
    return;
  }
  // The nearest existing ancestor must be a writable folder.
  fs::path up = dir.parent_path();
  while (!up.empty() && !fs::exists(up, ec)) up = up.parent_path();
  if (up.empty()) up = ".";
  if (!fs::is_directory(up, ec))
    throw InputError(fmt::format("--output-dir: cannot create '{}': '{}' is not a folder",
                                 output_dir, up.string()));
  if (::access(up.c_str(), W_OK) != 0)
    throw InputError(fmt::format("--output-dir: cannot create '{}': '{}' is not writable",
                                 output_dir, up.string()));
}

fs::path make_output_dir(const std::string& output_dir, std::string& run_id) {
  std::error_code ec;
  if (!output_dir.empty()) {
    check_output_dir(output_dir);
    fs::create_directories(output_dir, ec);
    if (ec)
      throw InputError(
          fmt::format("--output-dir: cannot create '{}': {}", output_dir, ec.message()));
    return output_dir;
  }
  const fs::path parent = "results";
  fs::create_directories(parent, ec);
  if (ec || ::access(parent.c_str(), W_OK) != 0)
    throw InputError(fmt::format("cannot create the report folder under '{}': {}", parent.string(),
                                 ec ? ec.message() : "not writable"));
  // mkdir fails on an existing folder, so two runs started in the same second get two folders.
  const std::string base = run_id;
  for (int n = 1; n <= 1000; ++n) {
    const std::string id = n == 1 ? base : fmt::format("{}_{}", base, n);
    if (fs::create_directory(parent / id, ec)) {
      run_id = id;
      return parent / id;
    }
    if (ec)
      throw InputError(fmt::format("cannot create '{}': {}", (parent / id).string(), ec.message()));
  }
  throw InputError(
      fmt::format("cannot create a new folder for '{}' under '{}'", base, parent.string()));
}

void write_report_files(const std::filesystem::path& dir, const Report& r) {
  for (const auto& [name, content] : r.attachments) {
    const std::filesystem::path path = dir / name;
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec)
      throw WriteError(
          fmt::format("cannot create '{}': {}", path.parent_path().string(), ec.message()));
    write_output_file(path, content.dump());
  }
  write_output_file(dir / (r.module + ".json"), render_json(r));
  write_output_file(dir / (r.module + ".md"), render_markdown(r));
}

}  // namespace gpubench
