// Pure arithmetic of `gpubench bandwidth`: bytes per STREAM kernel, repeats per launch,
// efficiency, and the worst-of headline.
#include <algorithm>
#include <cmath>
#include <limits>

#include "gpubench/modules/bandwidth/bandwidth.hpp"

namespace gpubench::bandwidth {

std::uint64_t stream_bytes(StreamOp op, std::uint64_t n, std::size_t element_bytes) {
  return static_cast<std::uint64_t>(stream_arrays_moved(op)) * n * element_bytes;
}

int repeats_for(std::uint64_t bytes, double expected_GBps, double target_s) {
  if (bytes == 0 || !(expected_GBps > 0) || !(target_s > 0)) return 1;
  const double one = static_cast<double>(bytes) / (expected_GBps * 1e9);
  const double wanted = std::ceil(target_s / one);
  return static_cast<int>(std::clamp(wanted, 1.0, static_cast<double>(kMaxRepeats)));
}

double efficiency_pct(double GBps, double peak_GBps) {
  if (!(peak_GBps > 0) || !std::isfinite(GBps)) return std::numeric_limits<double>::quiet_NaN();
  return 100.0 * GBps / peak_GBps;
}

std::optional<Figure> worst_of(const std::vector<Figure>& figures, bool lower_is_worse) {
  std::optional<Figure> worst;
  for (const Figure& f : figures) {
    if (!std::isfinite(f.value)) continue;
    if (!worst || (lower_is_worse ? f.value < worst->value : f.value > worst->value)) worst = f;
  }
  return worst;
}

namespace {

void headline_pair(Report& r, const std::string& key, const std::vector<Figure>& figures) {
  const auto w = worst_of(figures, true);
  if (!w) return;
  r.set_headline(key + "_GBps", w->value, "GB/s");
  if (std::isfinite(w->efficiency)) r.set_headline(key + "_efficiency_pct", w->efficiency, "%");
}

}  // namespace

void set_headline(Report& report, const Figures& f) {
  headline_pair(report, "hbm_copy", f.hbm_copy);
  headline_pair(report, "hbm_triad", f.hbm_triad);
  headline_pair(report, "h2d_pinned", f.h2d_pinned);
  headline_pair(report, "d2h_pinned", f.d2h_pinned);
  headline_pair(report, "p2p_unidir_ce", f.p2p_unidir_ce);
  headline_pair(report, "p2p_bidir_ce", f.p2p_bidir_ce);
  headline_pair(report, "p2p_unidir_sm", f.p2p_unidir_sm);
  if (const auto w = worst_of(f.p2p_latency, false))
    report.set_headline("p2p_latency_us", w->value, "us");
}

}  // namespace gpubench::bandwidth
