// Building the bandwidth report's rows and matrices from measurements.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "gpubench/core/units.hpp"
#include "gpubench/modules/bandwidth/bandwidth.hpp"

namespace gpubench::bandwidth {

Stats scaled_stats(const Measurement& m, double divisor) {
  std::vector<double> samples = m.samples;
  for (double& s : samples) s /= divisor;
  return compute_stats(std::move(samples));
}

namespace {

CaseResult base_case(std::string group, std::string name, nlohmann::ordered_json params) {
  CaseResult c;
  c.group = std::move(group);
  c.name = std::move(name);
  c.params = std::move(params);
  return c;
}

// What a reader should know about how the measurement ended.
std::string measurement_note(const Measurement& m) {
  std::string note;
  if (!m.converged) note = fmt::format("noise target not met (stopped on {})", m.stop_reason);
  if (m.monitor.throttled())
    note += std::string(note.empty() ? "" : "; ") + "GPU throttled while measuring";
  return note;
}

}  // namespace

CaseResult bandwidth_case(std::string group, std::string name, nlohmann::ordered_json params,
                          double bytes_per_launch, int repeats, const Measurement& m,
                          double peak_GBps) {
  CaseResult c = base_case(std::move(group), std::move(name), std::move(params));
  c.params["repeats_per_iteration"] = repeats;
  const double gbps = GBps(bytes_per_launch, m.median_s());
  c.metric("bandwidth", gbps, "GB/s");
  const double eff = efficiency_pct(gbps, peak_GBps);
  if (std::isfinite(eff)) c.metric("efficiency", eff, "%");
  c.metric("time", m.median_s() / repeats * 1e6, "us");
  c.stats = scaled_stats(m, repeats);
  c.note = measurement_note(m);
  return c;
}

CaseResult failed_case(std::string group, std::string name, nlohmann::ordered_json params,
                       std::string note) {
  CaseResult c = base_case(std::move(group), std::move(name), std::move(params));
  c.status = "failed";
  c.note = std::move(note);
  return c;
}

CaseResult skipped_case(std::string group, std::string name, nlohmann::ordered_json params,
                        std::string note) {
  CaseResult c = base_case(std::move(group), std::move(name), std::move(params));
  c.status = "skipped";
  c.note = std::move(note);
  return c;
}

std::string gpu_label(int device) {
  return fmt::format("GPU{}", device);
}

Matrix make_matrix(std::string name, std::string title, std::string unit,
                   const std::vector<int>& gpus) {
  Matrix m;
  m.name = std::move(name);
  m.title = std::move(title);
  m.unit = std::move(unit);
  for (int g : gpus) {
    m.rows.push_back(gpu_label(g));
    m.cols.push_back(gpu_label(g));
  }
  m.values.assign(gpus.size(),
                  std::vector<double>(gpus.size(), std::numeric_limits<double>::quiet_NaN()));
  return m;
}

}  // namespace gpubench::bandwidth
