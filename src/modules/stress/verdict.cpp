// stress's judgement: what each workload saw on each GPU and link, the rates against the other
// GPUs', and health, as checks; which GPUs they make FAULTY; the live view's line.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <regex>
#include <set>

#include "gpubench/core/monitor.hpp"
#include "gpubench/core/progress.hpp"
#include "gpubench/core/stats.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/modules/stress/stress.hpp"

namespace gpubench::stress {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string gpu_name(int gpu) {
  return gpu < 0 ? std::string("host") : fmt::format("GPU {}", gpu);
}

void gemm_checks(const GpuOutcome& g, const GemmOutcome& m, double others_median, double outlier,
                 std::vector<Check>& out) {
  const std::string group = fmt::format("GEMM {}", to_string(m.dtype));
  const std::string who = gpu_name(g.gpu);
  out.push_back({m.reference_ok ? "PASS" : "FAIL", group, who, "first output", kNaN, kNaN, "",
                 m.reference_ok ? "matches an fp64 reference of sampled entries"
                                : "differs from an fp64 reference: " + m.reference_note});
  if (m.agrees)
    out.push_back({*m.agrees ? "PASS" : "FAIL", group, who, "same as the other GPUs", kNaN, kNaN,
                   "",
                   *m.agrees ? "its first output is bit for bit the other GPUs'"
                             : "its first output differs from the other GPUs' (hash " +
                                   fmt::format("{:016x}", m.golden_hash) + ")"});
  if (m.iterations == 0) {
    out.push_back({"WARN", group, who, "outputs", 0, kNaN, "", "no output was compared"});
  } else if (m.mismatched == 0) {
    out.push_back({"PASS", group, who, "outputs", 0, kNaN, "",
                   fmt::format("{} outputs bit for bit the first", m.iterations)});
  } else {
    const std::string where =
        m.mismatch_at.empty()
            ? fmt::format("element {}", m.first_mismatch)
            : fmt::format("row {}, column {}", m.mismatch_at[0].first, m.mismatch_at[0].second);
    out.push_back({"FAIL", group, who, "outputs", static_cast<double>(m.mismatched), 0, "",
                   fmt::format("{} elements differed over {} outputs (first seen at {})",
                               m.mismatched, m.iterations, where)});
  }
  if (std::isfinite(others_median) && others_median > 0 && m.tflops > 0) {
    const double floor = others_median * (1 - outlier);
    const double below = 100 * (1 - m.tflops / others_median);
    out.push_back({m.tflops < floor ? "FAIL" : "PASS", group, who, "sustained rate", m.tflops,
                   floor, "TFLOP/s",
                   fmt::format("{:.1f} TFLOP/s, {:+.1f}% against the other GPUs' median {:.1f} "
                               "(allowed -{:.0f}%)",
                               m.tflops, -below, others_median, outlier * 100)});
  }
}

void memory_checks(const GpuOutcome& g, const MemoryOutcome& m, std::vector<Check>& out) {
  const std::string who = gpu_name(g.gpu);
  if (m.passes == 0) {
    out.push_back({"WARN", "Memory", who, "bit errors", kNaN, kNaN, "", "no pass finished"});
    return;
  }
  if (m.words_wrong == 0) {
    out.push_back({"PASS", "Memory", who, "bit errors", 0, kNaN, "",
                   fmt::format("{} passes over {}, none", m.passes, format_bytes(m.bytes))});
    return;
  }
  std::string first;
  for (std::size_t i = 0; i < m.first_wrong.size() && i < 3; ++i)
    first += fmt::format("{}0x{:x}: 0x{:016x} read as 0x{:016x}", i ? "; " : "",
                         m.first_wrong[i].address, m.first_wrong[i].expected, m.first_wrong[i].got);
  out.push_back({"FAIL", "Memory", who, "bit errors", static_cast<double>(m.bit_errors), 0, "",
                 fmt::format("{} bit errors in {} words over {} passes ({})", m.bit_errors,
                             m.words_wrong, m.passes, first)});
}

void link_checks(const LinkOutcome& l, std::vector<Check>& out) {
  if (!l.error.empty()) {
    out.push_back({"FAIL", "Links", l.name(), "copies", static_cast<double>(l.wrong_words), 0, "",
                   fmt::format("ended by an error after {} copies: {}", l.copies, l.error)});
    return;
  }
  if (l.copies == 0) {
    out.push_back({"WARN", "Links", l.name(), "copies", 0, kNaN, "", "no copy finished"});
    return;
  }
  const bool ok = l.wrong_words == 0;
  out.push_back(
      {ok ? "PASS" : "FAIL", "Links", l.name(), "copies", static_cast<double>(l.wrong_words), 0, "",
       ok ? fmt::format("{} copies of {} verified, {:.1f} GB/s", l.copies,
                        format_bytes(l.bytes_each), l.GBps)
          : fmt::format("{} words arrived wrong over {} copies", l.wrong_words, l.copies)});
}

}  // namespace

HealthEvidence health_of(const Outcome& o) {
  HealthEvidence h = HealthEvidence::of(o.before, o.after, o.xids, o.xid_unavailable);
  h.during = "during the run";
  h.thermal_fails = true;
  return h;
}

void compare_first_outputs(Outcome& o) {
  std::map<std::string, std::map<std::uint64_t, int>> votes;
  const auto key = [](const GemmOutcome& m) { return std::string(to_string(m.dtype)) + m.algo; };
  for (const GpuOutcome& g : o.gpus)
    for (const GemmOutcome& m : g.gemm) ++votes[key(m)][m.golden_hash];
  for (GpuOutcome& g : o.gpus)
    for (GemmOutcome& m : g.gemm) {
      const auto& v = votes[key(m)];
      int voters = 0;
      for (const auto& [hash, n] : v) voters += n;
      if (voters < 2) continue;
      m.agrees = 2 * v.at(m.golden_hash) > voters;
    }
}

std::string LinkOutcome::name() const {
  return gpu_name(src) + " -> " + gpu_name(dst);
}

namespace {

// The GPUs other than `gpu` one of whose own loads (GEMM or memory) hung: "GPU 2", "GPU 2, GPU
// 3"; "" when none.
std::string hung_elsewhere(const Outcome& o, int gpu) {
  std::string out;
  for (const GpuOutcome& g : o.gpus)
    if (g.gpu != gpu &&
        std::any_of(g.hung.begin(), g.hung.end(), [](const std::string& l) { return l != "link"; }))
      out += (out.empty() ? "" : ", ") + gpu_name(g.gpu);
  return out;
}

}  // namespace

bool Outcome::any_hung() const {
  return std::any_of(gpus.begin(), gpus.end(), [](const GpuOutcome& g) { return !g.hung.empty(); });
}

std::vector<Check> judge(const Outcome& o) {
  std::vector<Check> out;
  // Each GPU's rate is held against the median of the other GPUs' (of the same dtype).
  const auto others_median = [&](int gpu, GemmDtype t) {
    std::vector<double> r;
    for (const GpuOutcome& g : o.gpus)
      for (const GemmOutcome& m : g.gemm)
        if (g.gpu != gpu && m.dtype == t && m.tflops > 0) r.push_back(m.tflops);
    return median_of(r);
  };
  for (const GpuOutcome& g : o.gpus) {
    for (const std::string& load : g.hung) {
      // A link load copies to its peers and checks on them: where another GPU's own load hung,
      // this one is waiting on that GPU, not a fault of its own.
      const std::string peer = load == "link" ? hung_elsewhere(o, g.gpu) : "";
      out.push_back({peer.empty() ? "FAIL" : "WARN", "Runs", gpu_name(g.gpu), "hung", kNaN, kNaN,
                     "",
                     fmt::format("its {} load made no progress for {:g} s (a kernel or copy "
                                 "that never ended){}",
                                 load, o.settings.hang_s,
                                 peer.empty() ? "" : "; " + peer + " hung: it waits on it")});
    }
    if (!g.error.empty())
      out.push_back({"FAIL", "Runs", gpu_name(g.gpu), "workloads", kNaN, kNaN, "", g.error});
    for (const GemmOutcome& m : g.gemm)
      gemm_checks(g, m, others_median(g.gpu, m.dtype), o.settings.outlier, out);
    if (g.memory) memory_checks(g, *g.memory, out);
  }
  for (const LinkOutcome& l : o.links) link_checks(l, out);
  HealthEvidence health = health_of(o);
  for (const GpuOutcome& g : o.gpus) {  // the clocks-event reasons its samples saw
    std::uint64_t seen = 0;
    for (const Sample& s : g.series) seen |= s.reasons;
    const std::vector<std::string> names = throttle_reason_names(seen);
    health.throttles[g.gpu] = std::set<std::string>(names.begin(), names.end());
  }
  for (Check& c : judge_health(health)) out.push_back(std::move(c));
  return out;
}

std::map<int, std::vector<std::string>> faulty_gpus(const std::vector<Check>& checks,
                                                    const std::vector<int>& gpus) {
  static const std::regex kGpu("GPU (\\d+)");
  std::map<int, std::vector<std::string>> faulty;
  for (const Check& c : checks) {
    if (c.level != "FAIL") continue;
    std::vector<int> named;
    for (auto it = std::sregex_iterator(c.subject.begin(), c.subject.end(), kGpu);
         it != std::sregex_iterator(); ++it)
      named.push_back(std::stoi((*it)[1].str()));
    if (named.empty()) named = gpus;
    const std::string reason = fmt::format("{} {}: {}", c.group, c.what, c.reason);
    for (int g : named) {
      auto& list = faulty[g];
      if (std::find(list.begin(), list.end(), reason) == list.end()) list.push_back(reason);
    }
  }
  return faulty;
}

std::string live_line(int gpu, const Sample& s, double duration_s) {
  std::string line = fmt::format("GPU {}  {} / {}", gpu, progress::clock_text(s.t),
                                 progress::clock_text(duration_s));
  if (std::isfinite(s.tflops)) line += fmt::format("  {:.1f} TFLOP/s", s.tflops);
  if (std::isfinite(s.memory_GBps)) line += fmt::format("  mem {:.0f} GB/s", s.memory_GBps);
  if (std::isfinite(s.link_GBps)) line += fmt::format("  links {:.1f} GB/s", s.link_GBps);
  if (s.sm_MHz) line += fmt::format("  {} MHz", *s.sm_MHz);
  if (s.power_W) line += fmt::format("  {:.0f} W", *s.power_W);
  if (s.temperature_C) line += fmt::format("  {} C", *s.temperature_C);
  return line + fmt::format("  errors {}", s.errors);
}

}  // namespace gpubench::stress
