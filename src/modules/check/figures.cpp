// The figures check judges, read from the reports of the modules that measured them: only ok
// cases count (a case whose data check failed or did not run is never a figure).
#include <fmt/format.h>

#include <map>

#include "gpubench/modules/check/check.hpp"

namespace gpubench::check {

namespace {

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

double metric_or_nan(const CaseResult& c, const char* key) {
  const Metric* m = c.find_metric(key);
  return m && m->text.empty() ? m->value : std::nan("");
}

int param_int(const CaseResult& c, const char* key) {
  return c.params.contains(key) && c.params[key].is_number_integer() ? c.params[key].get<int>()
                                                                     : -1;
}

std::string param_text(const CaseResult& c, const char* key) {
  return c.params.contains(key) && c.params[key].is_string() ? c.params[key].get<std::string>()
                                                             : "";
}

Figure rate(const CaseResult& c, std::string key, std::string title, std::string subject,
            const char* value_key, const char* pct_key) {
  Figure f;
  f.key = std::move(key);
  f.title = std::move(title);
  f.subject = std::move(subject);
  const Metric* m = c.find_metric(value_key);
  f.value = m ? m->value : std::nan("");
  f.unit = m ? m->unit : "";
  f.pct_of_peak = metric_or_nan(c, pct_key);
  return f;
}

// bandwidth: HBM triad per GPU (fp64, else fp32), pinned host<->device per GPU and direction,
// copy-engine peer copies per pair.
void bandwidth_figures(const Report& r, std::vector<Figure>& out) {
  bool have_fp64 = false;
  for (const CaseResult& c : r.results) have_fp64 |= c.group == "HBM fp64" && c.status == "ok";
  const std::string hbm_group = have_fp64 ? "HBM fp64" : "HBM fp32";
  for (const CaseResult& c : r.results) {
    if (c.status != "ok") continue;
    const std::string gpu = fmt::format("GPU {}", param_int(c, "gpu"));
    if (c.group == hbm_group && param_text(c, "kernel") == "triad") {
      out.push_back(rate(c, "hbm_triad", fmt::format("HBM triad ({})", hbm_group.substr(4)), gpu,
                         "bandwidth", "efficiency"));
    } else if (c.group == "Host<->device, pinned") {
      const std::string dir = param_text(c, "direction");
      if (dir == "h2d" || dir == "d2h")
        out.push_back(rate(c, dir + "_pinned",
                           dir == "h2d" ? "Host to device (pinned)" : "Device to host (pinned)",
                           gpu, "bandwidth", "efficiency"));
    } else if (starts_with(c.group, "P2P unidirectional, copy engine")) {
      out.push_back(rate(c, "p2p_unidir", "GPU to GPU, copy engine, one way",
                         fmt::format("GPU {}->{}", param_int(c, "src"), param_int(c, "dst")),
                         "bandwidth", "efficiency"));
      out.back().cohort = param_text(c, "link");
    } else if (starts_with(c.group, "P2P bidirectional, copy engine")) {
      out.push_back(rate(c, "p2p_bidir", "GPU to GPU, copy engine, both ways",
                         fmt::format("GPU {}<->{}", param_int(c, "a"), param_int(c, "b")),
                         "bandwidth", "efficiency"));
      out.back().cohort = param_text(c, "link");
    }
  }
}

// allreduce: all_reduce's bus bandwidth at its best size, of the link peak.
void allreduce_figures(const Report& r, std::vector<Figure>& out) {
  for (const CaseResult& c : r.results)
    if (c.status == "ok" && c.group == "Comparison across collectives" &&
        starts_with(c.name, "all_reduce"))
      out.push_back(rate(c, "all_reduce_busbw", "NCCL all_reduce bus bandwidth", "node",
                         "peak_busbw", "of_link_peak"));
}

// matmul: per GPU and dtype (the best of its cases: the battery has one shape).
void matmul_figures(const Report& r, std::vector<Figure>& out) {
  for (const CaseResult& c : r.results) {
    const std::string dtype = param_text(c, "dtype");
    const int gpu = param_int(c, "gpu");
    if (c.status != "ok" || dtype.empty() || gpu < 0 || !c.find_metric("tflops")) continue;
    out.push_back(
        rate(c, "gemm_" + dtype, "GEMM " + dtype, fmt::format("GPU {}", gpu), "tflops", "mfu"));
  }
}

// tp: one decode step's time per token at each degree (no peak: held against the median of
// nothing and against --reference).
void tp_figures(const Report& r, std::vector<Figure>& out) {
  for (const CaseResult& c : r.results) {
    if (c.status != "ok" || param_text(c, "phase") != "decode") continue;
    const int tp = param_int(c, "tp");
    Figure f = rate(
        c, fmt::format("decode_tp{}_b{}_ctx{}", tp, param_int(c, "batch"), param_int(c, "context")),
        fmt::format("Decode step, TP={} (batch {}, context {})", tp, param_int(c, "batch"),
                    param_int(c, "context")),
        "node", "time_per_token", "");
    f.higher_better = false;
    out.push_back(std::move(f));
  }
}

}  // namespace

std::vector<Figure> figures_of(const std::vector<Report>& reports) {
  std::vector<Figure> out;
  for (const Report& r : reports) {
    if (r.module == "bandwidth") bandwidth_figures(r, out);
    if (r.module == "allreduce") allreduce_figures(r, out);
    if (r.module == "matmul") matmul_figures(r, out);
    if (r.module == "tp") tp_figures(r, out);
  }
  // One figure per key and subject: the best (a run of several shapes, types or sizes).
  std::vector<Figure> best;
  std::map<std::pair<std::string, std::string>, std::size_t> at;
  for (Figure& f : out) {
    if (!std::isfinite(f.value) || !(f.value > 0)) continue;
    auto [it, fresh] = at.emplace(std::make_pair(f.key, f.subject), best.size());
    if (fresh) {
      best.push_back(std::move(f));
      continue;
    }
    Figure& kept = best[it->second];
    if (f.higher_better ? f.value > kept.value : f.value < kept.value) kept = std::move(f);
  }
  return best;
}

}  // namespace gpubench::check
