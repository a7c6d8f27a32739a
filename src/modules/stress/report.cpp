// stress's report: what each GPU and link sustained, a row per check, each GPU OK or FAULTY,
// the verdict, the time series as sweeps (charts) and in full in `extra`.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "gpubench/core/monitor.hpp"
#include "gpubench/core/progress.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/modules/stress/stress.hpp"

namespace gpubench::stress {

namespace {

void figure_rows(const Outcome& o, Report& r) {
  for (const GpuOutcome& g : o.gpus) {
    for (const GemmOutcome& m : g.gemm) {
      CaseResult c;
      c.group = fmt::format("Sustained GEMM {}", to_string(m.dtype));
      c.name = fmt::format("GPU {}", g.gpu);
      c.params = {{"shape", m.shape}, {"algo", m.algo}};
      c.metric("tflops_median", m.tflops, "TFLOP/s");
      c.metric("tflops_p5", m.tflops_low, "TFLOP/s");
      c.metric("outputs", static_cast<double>(m.iterations), "");
      c.metric("mismatched", static_cast<double>(m.mismatched), "");
      // The rows stay ok (the load ran); a wrong output is the verdict's, and its rate is not
      // a verified figure: noted here, left out of the headline.
      if (!m.reference_ok)
        c.note = "not verified: first output wrong (" + m.reference_note + ")";
      else if (m.mismatched > 0)
        c.note = fmt::format("not verified: {} elements differed", m.mismatched);
      r.add(std::move(c));
    }
    if (g.memory) {
      CaseResult c;
      c.group = "Memory test";
      c.name = fmt::format("GPU {}", g.gpu);
      c.metric("tested", static_cast<double>(g.memory->bytes) / kGiB, "GiB");
      c.metric("passes", static_cast<double>(g.memory->passes), "");
      c.metric("bandwidth", g.memory->GBps, "GB/s");
      c.metric("bit_errors", static_cast<double>(g.memory->bit_errors), "");
      r.add(std::move(c));
    }
  }
  for (const LinkOutcome& l : o.links) {
    CaseResult c;
    c.group = "Link copies";
    c.name = l.name();
    c.params = {{"src", l.src}, {"dst", l.dst}, {"bytes", l.bytes_each}};
    c.metric("bandwidth", l.GBps, "GB/s");
    c.metric("copies", static_cast<double>(l.copies), "");
    c.metric("wrong_words", static_cast<double>(l.wrong_words), "");
    if (!l.error.empty()) {  // its figures stopped short: not a bandwidth to hold anything to
      c.status = "failed";
      c.note = l.error;
    }
    r.add(std::move(c));
  }
}

// One sweep per quantity of the time series: a curve per GPU over seconds.
void series_sweeps(const Outcome& o, Report& r) {
  struct Quantity {
    const char* name;
    const char* title;
    const char* label;
    const char* unit;
    double (*get)(const Sample&);
  };
  static const Quantity kQuantities[] = {
      {"stress_tflops", "GEMM rate over the run", "rate", "TFLOP/s",
       [](const Sample& s) { return s.tflops; }},
      {"stress_memory_GBps", "Memory test bandwidth over the run", "bandwidth", "GB/s",
       [](const Sample& s) { return s.memory_GBps; }},
      {"stress_sm_clock", "SM clock over the run", "SM clock", "MHz",
       [](const Sample& s) { return s.sm_MHz ? double(*s.sm_MHz) : std::nan(""); }},
      {"stress_power", "Power over the run", "power", "W",
       [](const Sample& s) { return s.power_W ? *s.power_W : std::nan(""); }},
      {"stress_temperature", "Temperature over the run", "temperature", "C",
       [](const Sample& s) { return s.temperature_C ? double(*s.temperature_C) : std::nan(""); }},
  };
  for (const Quantity& q : kQuantities) {
    Sweep sw{q.name, q.title, "time", "s", q.label, q.unit, false, {}};
    for (const GpuOutcome& g : o.gpus) {
      Series s{fmt::format("GPU {}", g.gpu), {}, {}};
      for (const Sample& x : g.series) {
        const double y = q.get(x);
        if (!std::isfinite(y)) continue;
        s.x.push_back(x.t);
        s.y.push_back(y);
      }
      if (!s.x.empty()) sw.series.push_back(std::move(s));
    }
    if (!sw.series.empty()) r.sweeps.push_back(std::move(sw));
  }
}

nlohmann::ordered_json series_json(const GpuOutcome& g) {
  const auto num = [](double v) {
    return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
  };
  const auto opt = [](const auto& v) {
    return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
  };
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const Sample& s : g.series)
    rows.push_back({{"t", s.t},
                    {"tflops", num(s.tflops)},
                    {"memory_GBps", num(s.memory_GBps)},
                    {"link_GBps", num(s.link_GBps)},
                    {"sm_MHz", opt(s.sm_MHz)},
                    {"mem_MHz", opt(s.mem_MHz)},
                    {"power_W", opt(s.power_W)},
                    {"temperature_C", opt(s.temperature_C)},
                    {"reasons", throttle_reason_names(s.reasons)},
                    {"errors", s.errors}});
  return rows;
}

nlohmann::ordered_json details_json(const GpuOutcome& g) {
  nlohmann::ordered_json j = {{"gpu", g.gpu}};
  nlohmann::ordered_json gemm = nlohmann::ordered_json::array();
  for (const GemmOutcome& m : g.gemm)
    gemm.push_back({{"dtype", to_string(m.dtype)},
                    {"golden_hash", fmt::format("{:016x}", m.golden_hash)},
                    {"first_mismatch", m.first_mismatch},
                    {"mismatch_at", m.mismatch_at}});
  j["gemm"] = gemm;
  if (g.memory) {
    nlohmann::ordered_json wrong = nlohmann::ordered_json::array();
    for (const WrongWord& w : g.memory->first_wrong)
      wrong.push_back({{"address", fmt::format("0x{:x}", w.address)},
                       {"expected", fmt::format("0x{:016x}", w.expected)},
                       {"got", fmt::format("0x{:016x}", w.got)}});
    j["memory_first_wrong"] = wrong;
  }
  if (!g.error.empty()) j["error"] = g.error;
  if (!g.hung.empty()) j["hung"] = g.hung;
  j["series"] = series_json(g);
  return j;
}

void headline(const Outcome& o, const Verdict& v, std::size_t faulty, Report& r) {
  r.set_headline_text("verdict", v.level);
  r.set_headline("gpus_faulty", static_cast<double>(faulty), "");
  r.set_headline("checks", v.judged, "");
  std::map<GemmDtype, double> slowest;
  double mismatched = 0, bit_errors = 0, link_errors = 0, memory = std::nan("");
  for (const GpuOutcome& g : o.gpus) {
    for (const GemmOutcome& m : g.gemm) {
      mismatched += static_cast<double>(m.mismatched);
      if (!m.reference_ok || m.mismatched > 0 || m.agrees == false) continue;  // unverified
      auto it = slowest.find(m.dtype);
      if (it == slowest.end() || m.tflops < it->second) slowest[m.dtype] = m.tflops;
    }
    if (g.memory) {
      bit_errors += static_cast<double>(g.memory->bit_errors);
      const bool verified = g.memory->passes > 0 && g.memory->words_wrong == 0;
      if (verified && !(g.memory->GBps >= memory)) memory = g.memory->GBps;
    }
  }
  for (const LinkOutcome& l : o.links) link_errors += static_cast<double>(l.wrong_words);
  for (const auto& [t, v2] : slowest)
    if (v2 > 0) r.set_headline(fmt::format("sustained_{}_tflops", to_string(t)), v2, "TFLOP/s");
  if (std::isfinite(memory)) r.set_headline("memory_test_GBps", memory, "GB/s");
  r.set_headline("gemm_mismatches", mismatched, "");
  r.set_headline("memory_bit_errors", bit_errors, "");
  r.set_headline("link_errors", link_errors, "");
  r.set_headline("duration_s", o.elapsed_s, "s");
}

}  // namespace

Report stress_report(const Outcome& o) {
  Report r;
  r.module = "stress";
  figure_rows(o, r);
  const std::vector<Check> checks = judge(o);
  std::vector<int> gpus;
  for (const GpuOutcome& g : o.gpus) gpus.push_back(g.gpu);
  const auto faulty = faulty_gpus(checks, gpus);
  for (const GpuOutcome& g : o.gpus) {
    CaseResult c;
    c.group = "GPUs";
    c.name = fmt::format("GPU {}", g.gpu);
    const auto it = faulty.find(g.gpu);
    c.params = {{"verdict", it == faulty.end() ? "OK" : "FAULTY"}};
    if (it != faulty.end())
      for (const std::string& why : it->second) c.note += (c.note.empty() ? "" : "; ") + why;
    r.add(std::move(c));
  }
  Verdict v = add_check_rows(r, checks);
  const auto na =
      std::count_if(checks.begin(), checks.end(), [](const Check& c) { return c.level == "N/A"; });
  const std::string counts =
      fmt::format("{} checks{}", v.judged, na ? fmt::format(", {} not available", na) : "");
  const std::string span =
      progress::clock_text(o.elapsed_s) + (o.interrupted ? ", stopped early" : "");
  if (faulty.empty()) {
    v.line = fmt::format("stress {}: {} GPU{} OK over {} ({})", v.level, o.gpus.size(),
                         o.gpus.size() == 1 ? "" : "s", span, counts);
  } else {
    std::string list;
    for (const auto& [gpu, why] : faulty)
      list += fmt::format("{}GPU {} FAULTY ({}{})", list.empty() ? "" : "; ", gpu, why.front(),
                          why.size() > 1 ? fmt::format("; and {} more", why.size() - 1) : "");
    v.line = fmt::format("stress FAIL: {} over {} ({})", list, span, counts);
  }
  headline(o, v, faulty.size(), r);
  series_sweeps(o, r);
  r.verdict = std::move(v);
  r.extra["settings"] = o.settings.to_json();
  write_health_evidence(health_of(o), r.extra);
  nlohmann::ordered_json details = nlohmann::ordered_json::array();
  for (const GpuOutcome& g : o.gpus) details.push_back(details_json(g));
  r.extra["gpus"] = details;
  return r;
}

}  // namespace gpubench::stress
