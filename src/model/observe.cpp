// Per-operation events, device values on the host, and the relative L2 error of the checks.
#include "gpubench/model/observe.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace gpubench::model {

void OpSpans::begin(const char* op, int layer, cudaStream_t stream) {
  spans_.push_back({op, layer, next_event(), nullptr});
  spans_.back().begin->record(stream);
}

void OpSpans::end(const char*, int, cudaStream_t stream) {
  spans_.back().end = next_event();
  spans_.back().end->record(stream);
}

std::vector<OpSpan> OpSpans::collect() {
  std::vector<OpSpan> out;
  out.reserve(spans_.size());
  for (const auto& sp : spans_) {
    sp.end->synchronize();
    out.push_back({sp.op, sp.layer, sp.end->seconds_since(*sp.begin)});
  }
  spans_.clear();
  used_ = 0;
  return out;
}

Event* OpSpans::next_event() {
  if (used_ == events_.size()) events_.emplace_back(device_);
  return &events_[used_++];
}

double half_bits_to_double(std::uint16_t bits, ActDtype dtype) {
  const std::uint32_t h = bits;
  if (dtype == ActDtype::BF16) {
    const std::uint32_t wide = h << 16;
    float f;
    std::memcpy(&f, &wide, sizeof(f));
    return f;
  }
  // IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
  const std::uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 31, man = h & 1023;
  const double v = exp == 0 ? std::ldexp(static_cast<double>(man), -24)
                   : exp == 31
                       ? (man ? NAN : INFINITY)
                       : std::ldexp(static_cast<double>(man | 1024), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

std::vector<double> to_host_values(const void* device_ptr, std::size_t n, ActDtype dtype) {
  std::vector<std::uint16_t> raw(n);
  GPB_CUDA_CHECK(cudaMemcpy(raw.data(), device_ptr, n * 2, cudaMemcpyDeviceToHost));
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = half_bits_to_double(raw[i], dtype);
  return out;
}

MeasureOptions engine_step_options(const CommonOptions& c) {
  MeasureOptions m = measure_options_from(c);
  m.l2 = L2Policy::Hot;
  if (m.fixed_iters == 0) {
    m.min_iters = c.quick ? 3 : 5;
    m.warmup = c.warmup >= 0 ? c.warmup : 1;
    m.min_time_s = c.min_time >= 0 ? c.min_time : (c.quick ? 0.05 : 0.2);
    m.max_noise = c.max_noise >= 0 ? c.max_noise / 100 : 0.01;
    m.max_time_s = c.max_time >= 0 ? c.max_time : (c.quick ? 1.0 : 3.0);
  }
  return m;
}

double relative_l2(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : INFINITY;
}

}  // namespace gpubench::model
