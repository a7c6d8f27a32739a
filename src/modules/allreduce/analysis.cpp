// Pure host arithmetic of `gpubench allreduce`: the nccl-tests size sweep, the latency/bandwidth
// fit t = alpha + n / beta, and the message size that reaches a fraction of the peak busbw.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/modules/allreduce/allreduce.hpp"

namespace gpubench::allreduce {

std::vector<std::uint64_t> sweep_sizes(std::uint64_t min_bytes, std::uint64_t max_bytes,
                                       double factor, std::uint64_t step, std::uint64_t align) {
  if (min_bytes == 0) throw InputError("--min-bytes must be greater than 0");
  if (min_bytes > max_bytes)
    throw InputError(fmt::format("--min-bytes {} is larger than --max-bytes {}",
                                 format_bytes(min_bytes), format_bytes(max_bytes)));
  if (step == 0 && !(factor > 1.0))
    throw InputError(fmt::format("--step-factor must be greater than 1 (got {})", factor));
  // Count the points before making them: a step of 1 byte or a factor of 1 + 1e-16 would
  // otherwise build billions of sizes (or loop for ever, as s * factor == s).
  const double points =
      step > 0
          ? static_cast<double>((max_bytes - min_bytes) / step) + 1
          : std::floor(std::log(static_cast<double>(max_bytes) / min_bytes) / std::log(factor) +
                       1e-9) +
                1;
  if (!(points <= kMaxSweepSizes))
    throw InputError(fmt::format("{} from {} to {} makes {:.3g} sizes; at most {} are allowed",
                                 step > 0 ? fmt::format("--step-bytes {}", format_bytes(step))
                                          : fmt::format("--step-factor {}", factor),
                                 format_bytes(min_bytes), format_bytes(max_bytes), points,
                                 kMaxSweepSizes));
  align = std::max<std::uint64_t>(align, 1);
  std::vector<std::uint64_t> sizes;
  auto push = [&](std::uint64_t s) {
    s -= s % align;
    if (s > 0 && (sizes.empty() || sizes.back() != s)) sizes.push_back(s);
  };
  if (step > 0) {
    for (std::uint64_t s = min_bytes; s <= max_bytes; s += step) {
      push(s);
      if (s > max_bytes - step) break;  // no overflow past the top
    }
  } else {
    // Multiply in floating point but land exactly on powers of the factor from min.
    for (double s = static_cast<double>(min_bytes);
         s <= static_cast<double>(max_bytes) * (1 + 1e-12); s *= factor)
      push(static_cast<std::uint64_t>(std::llround(s)));
  }
  return sizes;
}

std::optional<Fit> fit_alpha_beta(const std::vector<Point>& points) {
  // Weighted least squares of t = a + b x (x = size, b = 1/beta) with weights 1/t^2, so the
  // relative error of every point counts alike (an unweighted fit is all large sizes).
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  int n = 0;
  for (const Point& p : points) {
    if (!(p.time_s > 0) || p.size == 0) continue;
    const double w = 1.0 / (p.time_s * p.time_s), x = static_cast<double>(p.size), y = p.time_s;
    sw += w;
    sx += w * x;
    sy += w * y;
    sxx += w * x * x;
    sxy += w * x * y;
    ++n;
  }
  if (n < 2) return std::nullopt;
  const double det = sw * sxx - sx * sx;
  if (!(std::fabs(det) > 0)) return std::nullopt;
  const double b = (sw * sxy - sx * sy) / det;
  const double a = (sy - b * sx) / sw;
  Fit f;
  f.alpha_s = a;
  f.beta_Bps = b > 0 ? 1.0 / b : std::numeric_limits<double>::infinity();
  // Weighted R^2.
  const double mean = sy / sw;
  double ss_res = 0, ss_tot = 0;
  for (const Point& p : points) {
    if (!(p.time_s > 0) || p.size == 0) continue;
    const double w = 1.0 / (p.time_s * p.time_s);
    const double pred = a + b * static_cast<double>(p.size);
    ss_res += w * (p.time_s - pred) * (p.time_s - pred);
    ss_tot += w * (p.time_s - mean) * (p.time_s - mean);
  }
  f.r2 = ss_tot > 0 ? 1.0 - ss_res / ss_tot : 1.0;
  return f;
}

std::optional<double> size_at_fraction_of_peak(const std::vector<Point>& points, double fraction) {
  if (points.empty()) return std::nullopt;
  std::vector<Point> sorted = points;
  std::sort(sorted.begin(), sorted.end(),
            [](const Point& a, const Point& b) { return a.size < b.size; });
  double peak = 0;
  for (const Point& p : sorted) peak = std::max(peak, p.busbw_GBps);
  if (!(peak > 0)) return std::nullopt;
  const double target = fraction * peak;
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i].busbw_GBps < target) continue;
    if (i == 0) return static_cast<double>(sorted[0].size);
    // Interpolate on log2(size) between the point below the target and this one.
    const Point& lo = sorted[i - 1];
    const Point& hi = sorted[i];
    const double t = (target - lo.busbw_GBps) / (hi.busbw_GBps - lo.busbw_GBps);
    const double l = std::log2(static_cast<double>(lo.size)),
                 h = std::log2(static_cast<double>(hi.size));
    return std::exp2(l + t * (h - l));
  }
  return std::nullopt;
}

}  // namespace gpubench::allreduce
