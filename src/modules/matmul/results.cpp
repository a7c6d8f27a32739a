// `gpubench matmul` rows: one per case and GPU, with the algorithm, the check and the clocks.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "gpubench/core/peaks.hpp"
#include "gpubench/modules/matmul/matmul.hpp"

namespace gpubench::matmul {

std::string group_of(const CaseSpec& spec, const std::string& model, std::int64_t tokens) {
  const std::string t = to_string(spec.dtype);
  switch (spec.kind) {
    case CaseKind::Square:
      return t + " square";
    case CaseKind::Shape:
      return t + " shapes";
    case CaseKind::Model:
      return fmt::format("{} {} layer, {} tokens", t, model, tokens);
    case CaseKind::Mamf:
      return t + " MAMF";
    case CaseKind::Sustained:
      return t + " sustained";
  }
  return t;
}

std::string check_failure_text(std::uint64_t wrong, std::uint64_t checked, double worst_ratio,
                               std::int64_t row, std::int64_t column) {
  return fmt::format(
      "{} of {} checked entries outside the tolerance, worst {:.3g}x it, first at row {} column {}",
      wrong, checked, worst_ratio, row, column);
}

std::string rejection_note(const std::vector<RejectedAlgo>& rejected, bool verified) {
  if (rejected.empty()) return "";
  std::string note = verified ? "faster candidates failed verification and were passed over: "
                              : "verification failed for every candidate that ran: ";
  const std::size_t shown = std::min(rejected.size(), kNotedRejections);
  for (std::size_t i = 0; i < shown; ++i)
    note += fmt::format("{}{} ({})", i ? "; " : "", rejected[i].config, rejected[i].why);
  if (rejected.size() > shown) note += fmt::format("; and {} more", rejected.size() - shown);
  return note;
}

CaseResult to_case_result(const CaseOutcome& o, const std::optional<double>& peak_tflops,
                          bool several_gpus) {
  CaseResult r;
  const std::string shape = o.spec.shape.to_string();
  const std::string what =
      o.spec.kind == CaseKind::Model ? fmt::format("{} {}", o.spec.label, shape) : shape;
  r.name = several_gpus ? fmt::format("GPU{} {}", o.gpu, what) : what;
  const GemmTypeInfo& info = gemm_type_info(o.spec.dtype);
  r.params = {{"gpu", o.gpu},          {"dtype", to_string(o.spec.dtype)},
              {"m", o.spec.shape.m},   {"n", o.spec.shape.n},
              {"k", o.spec.shape.k},   {"layout", o.spec.shape.layout()},
              {"inputs", info.inputs}, {"accumulate", info.accumulate},
              {"output", info.output}};
  if (!o.spec.label.empty()) r.params["gemm"] = o.spec.label;
  r.status = o.status;
  r.note = o.note;
  if (!o.rejected.empty()) {
    auto& list = r.params["rejected_candidates"] = nlohmann::ordered_json::array();
    for (const auto& x : o.rejected) list.push_back({{"config", x.config}, {"why", x.why}});
  }
  if (!o.ok) return r;
  r.params["algo"] = o.algo.to_json();
  r.params["candidates_timed"] = o.candidates_timed;
  r.params["gemms_per_iteration"] = o.repeats;
  r.params["rotation_sets"] = o.sets;
  r.params["checked_entries"] = o.checked;
  r.metric("tflops", o.tflops, "TFLOP/s");
  if (peak_tflops) r.metric("mfu", mfu_pct(o.tflops, *peak_tflops), "%");
  r.metric("time", o.median_s * 1e6, "us");
  r.metric("vs_first_pick", o.first_pick_gain_pct, "%");
  r.metric("check_error", o.max_error_ratio, "x tol");
  if (const GpuMonitorSummary* g = o.measurement.monitor.sampled(o.gpu)) {
    r.metric("sm_clock_min", g->sm_clock_min_MHz, "MHz");
    r.metric("power_max", g->power_max_W, "W");
    if (g->throttled())
      r.note = (r.note.empty() ? "" : r.note + "; ") +
               "throttled: " + throttling_list(g->throttle_reasons);
  }
  // Per GEMM: an iteration ran `repeats` of them back to back.
  Stats st = o.measurement.stats;
  const double inv = 1.0 / o.repeats;
  for (double* f : {&st.median, &st.min, &st.max, &st.mean, &st.p5, &st.p95, &st.p99, &st.stdev})
    *f *= inv;
  r.stats = st;
  return r;
}

}  // namespace gpubench::matmul
