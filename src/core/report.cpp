// Writers: JSON, Markdown, console and the run summary; atomic files and the run folder.
#include "gpubench/core/report.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <random>

#include "gpubench/core/errors.hpp"
#include "report_tables.hpp"

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
  if (!r.headline.empty()) md += "## Headline\n\n" + render_pipe(detail::headline_table(r)) + "\n";
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
    md += fmt::format("![{}](charts/{}_{}.png)\n\n", t.title, r.module, m.name);
  }
  for (const auto& s : r.sweeps) {
    const auto t = detail::sweep_table(s);
    md += "## " + t.title + "\n\n" + render_pipe(t) + "\n";
    md += fmt::format("![{}](charts/{}_{}.png)\n\n", t.title, r.module, s.name);
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
        "_Charts are drawn by `scripts/plot_results.py <run folder>` (quick_start.sh runs it)._\n";
  return md;
}

std::string render_console(const Report& r) {
  std::string out = fmt::format("== gpubench {} : {}{}\n", r.module, r.status,
                                r.error.empty() ? "" : " (" + r.error + ")");
  for (const auto& t : detail::case_tables(r)) out += "\n" + render_aligned(t);
  for (const auto& m : r.matrices) out += "\n" + render_aligned(detail::matrix_table(m));
  for (const auto& s : r.sweeps) out += "\n" + render_aligned(detail::sweep_table(s));
  if (!r.headline.empty()) out += "\n" + render_aligned(detail::headline_table(r));
  const std::string mon = monitor_lines(r.monitor, "  ");
  if (!mon.empty()) out += "\nMonitor\n" + mon;
  for (const auto& w : r.warnings) out += "warning: " + w + "\n";
  return out;
}

std::string render_summary_markdown(const std::vector<Report>& reports) {
  std::string md = "# gpubench summary\n\n| module | status | note |\n|---|---|---|\n";
  for (const auto& r : reports)
    md += fmt::format("| [{}]({}.md) | {} | {} |\n", r.module, r.module, r.status, r.error);
  md += "\n## Headline figures\n\n| module | key | value | unit |\n|---|---|---:|---|\n";
  for (const auto& r : reports)
    for (const auto& [k, m] : r.headline)
      md += fmt::format("| {} | {} | {} | {} |\n", r.module, k,
                        m.text.empty() ? detail::format_number(m.value) : m.text, m.unit);
  return md;
}

void write_file_atomic(const std::filesystem::path& path, const std::string& text) {
  namespace fs = std::filesystem;
  static std::mt19937_64 rng{std::random_device{}()};
  const fs::path tmp = path.string() + fmt::format(".tmp{:x}", rng());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw InputError(fmt::format("cannot write '{}': folder not writable", path.string()));
    f << text;
    f.flush();
    if (!f) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw InputError(fmt::format("cannot write '{}': disk full or not writable", path.string()));
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw InputError(fmt::format("cannot write '{}': {}", path.string(), ec.message()));
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

std::filesystem::path prepare_output_dir(const std::string& output_dir, const std::string& run_id) {
  namespace fs = std::filesystem;
  const fs::path dir = output_dir.empty() ? fs::path("results") / run_id : fs::path(output_dir);
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw InputError(fmt::format("--output-dir: '{}' exists and is not a folder", dir.string()));
  fs::create_directories(dir, ec);
  if (ec)
    throw InputError(
        fmt::format("--output-dir: cannot create '{}': {}", dir.string(), ec.message()));
  if (::access(dir.c_str(), W_OK) != 0)
    throw InputError(fmt::format("--output-dir: '{}' is not writable", dir.string()));
  return dir;
}

void write_report_files(const std::filesystem::path& dir, const Report& r) {
  for (const auto& [name, content] : r.attachments) {
    const std::filesystem::path path = dir / name;
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec)
      throw InputError(fmt::format("cannot create '{}': {}", path.parent_path().string(),
                                   ec.message()));
    write_file_atomic(path, content.dump());
  }
  write_file_atomic(dir / (r.module + ".json"), render_json(r));
  write_file_atomic(dir / (r.module + ".md"), render_markdown(r));
}

}  // namespace gpubench
