// Host side of `gpubench tp`: the bytes a layer moves between ranks, the prediction "TP=1 compute /
// t + measured collectives" the runs are compared with, the micro-benchmark's shapes and the
// headline keys. Pure arithmetic, no GPU.
#include <fmt/format.h>

#include <cmath>

#include "gpubench/core/errors.hpp"
#include "gpubench/modules/tp/tp.hpp"

namespace gpubench::tp {

namespace {

void check_elem_bytes(int elem_bytes) {
  if (elem_bytes != 1 && elem_bytes != 2 && elem_bytes != 4)
    throw InputError(fmt::format("element size {} is not 1, 2 or 4 bytes", elem_bytes));
}

}  // namespace

LayerComm layer_comm(const model::ModelConfig& m, model::Phase phase, std::int64_t batch,
                     std::int64_t tokens, int elem_bytes, int t, bool sequence_parallel) {
  check_elem_bytes(elem_bytes);
  if (batch < 1) throw InputError(fmt::format("batch {} must be at least 1", batch));
  if (phase == model::Phase::Prefill && tokens < 1)
    throw InputError(fmt::format("prefill tokens {} must be at least 1", tokens));
  if (t < 1) throw InputError(fmt::format("--tp: {} must be at least 1", t));
  LayerComm c;
  if (t == 1) return c;
  const std::int64_t rows = phase == model::Phase::Prefill ? batch * tokens : batch;
  c.bytes_per_collective = static_cast<std::uint64_t>(rows) *
                           static_cast<std::uint64_t>(m.hidden_size) *
                           static_cast<std::uint64_t>(elem_bytes);
  const double n = t, size = static_cast<double>(c.bytes_per_collective);
  if (sequence_parallel && phase == model::Phase::Prefill) {
    c.reduce_scatters = c.all_gathers = 2;
    c.bus_bytes = 2 * size * (n - 1) / n + 2 * size * (n - 1) / n;
  } else {
    c.all_reduces = 2;
    c.bus_bytes = 2 * size * 2 * (n - 1) / n;
  }
  c.total_bytes = static_cast<std::uint64_t>(c.all_reduces + c.reduce_scatters + c.all_gathers) *
                  c.bytes_per_collective;
  return c;
}

double CommTable::seconds(double bytes) const {
  if (samples.empty())
    throw InputError(fmt::format("no collective times measured on {} GPUs", ranks));
  if (!(bytes > 0)) throw InputError(fmt::format("message size {} must be positive", bytes));
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (!(samples[i].bytes > 0) || !(samples[i].seconds > 0) ||
        (i > 0 && samples[i].bytes <= samples[i - 1].bytes))
      throw InputError("collective times must have positive, ascending sizes and times");
  }
  const CommSample& first = samples.front();
  const CommSample& last = samples.back();
  if (bytes <= first.bytes) return first.seconds;  // latency bound: never faster than the smallest
  if (bytes >= last.bytes) {
    // Past the table the time grows at the last segment's incremental bandwidth (alpha-beta:
    // the latency is already in last.seconds); a flat or noisy last segment falls back to the
    // largest message's own bandwidth.
    if (samples.size() >= 2) {
      const CommSample& prev = samples[samples.size() - 2];
      if (last.seconds > prev.seconds)
        return last.seconds +
               (bytes - last.bytes) * (last.seconds - prev.seconds) / (last.bytes - prev.bytes);
    }
    return last.seconds * bytes / last.bytes;
  }
  std::size_t i = 1;
  while (samples[i].bytes < bytes) ++i;
  const CommSample& a = samples[i - 1];
  const CommSample& b = samples[i];
  const double f = std::log(bytes / a.bytes) / std::log(b.bytes / a.bytes);
  return std::exp(std::log(a.seconds) + f * std::log(b.seconds / a.seconds));
}

Prediction predict(double layer_compute_s, int t, int layers, double bytes_per_allreduce,
                   const CommTable& table) {
  if (t < 1) throw InputError(fmt::format("--tp: {} must be at least 1", t));
  if (layers < 1) throw InputError(fmt::format("layers {} must be at least 1", layers));
  if (!(layer_compute_s >= 0))
    throw InputError(fmt::format("layer compute time {} must not be negative", layer_compute_s));
  Prediction p;
  p.compute_s = layers * layer_compute_s / t;
  if (t > 1) {
    if (table.ranks != t)
      throw InputError(
          fmt::format("collective times were measured on {} GPUs, not {}", table.ranks, t));
    p.comm_s = 2.0 * layers * table.seconds(bytes_per_allreduce);
  }
  p.total_s = p.compute_s + p.comm_s;
  return p;
}

double prediction_error_pct(double measured_s, double predicted_s) {
  if (!(measured_s > 0))
    throw InputError(fmt::format("measured time {} must be positive", measured_s));
  return 100.0 * (predicted_s - measured_s) / measured_s;
}

double speedup(double tp1_s, double tp_s) {
  if (!(tp_s > 0)) throw InputError(fmt::format("TP time {} must be positive", tp_s));
  return tp1_s / tp_s;
}

double efficiency(double speedup, int t) {
  if (t < 1) throw InputError(fmt::format("--tp: {} must be at least 1", t));
  return speedup / t;
}

double comm_share(double comm_s, double total_s) {
  if (!(total_s > 0)) throw InputError(fmt::format("total time {} must be positive", total_s));
  return comm_s / total_s;
}

double expected_decode_comm_s(int layers, double bytes_per_allreduce, const CommTable& table) {
  if (layers < 1) throw InputError(fmt::format("layers {} must be at least 1", layers));
  return 2.0 * layers * table.seconds(bytes_per_allreduce);
}

bool within_pct(double a, double b, double pct) {
  if (!(pct >= 0)) throw InputError(fmt::format("tolerance {}% must not be negative", pct));
  return std::fabs(a - b) <= pct / 100.0 * std::fabs(b);
}

MicroShape micro_shape(MicroKind kind, std::int64_t size, std::int64_t tokens, int t,
                       int elem_bytes) {
  check_elem_bytes(elem_bytes);
  if (size < 1 || tokens < 1 || t < 1)
    throw InputError(fmt::format("micro shape: size {}, tokens {} and --tp {} must be at least 1",
                                 size, tokens, t));
  if (size % t != 0)
    throw InputError(fmt::format("--micro-size: {} does not split over --tp {}", size, t));
  MicroShape s;
  s.kind = kind;
  s.tokens = tokens;
  s.n = kind == MicroKind::Column ? size / t : size;
  s.k = kind == MicroKind::Column ? size : size / t;
  s.flops_per_rank =
      2.0 * static_cast<double>(tokens) * static_cast<double>(s.n) * static_cast<double>(s.k);
  if (t > 1) {
    s.comm_bytes = static_cast<std::uint64_t>(tokens) * static_cast<std::uint64_t>(size) *
                   static_cast<std::uint64_t>(elem_bytes);
    s.collective = kind == MicroKind::Column ? "all_gather" : "all_reduce";
  }
  return s;
}

std::string headline_key(HeadlineKind kind, int t, std::int64_t length) {
  switch (kind) {
    case HeadlineKind::PrefillSpeedup:
      return fmt::format("tp{}_prefill_speedup_{}", t, length);
    case HeadlineKind::DecodeSpeedup:
      return fmt::format("tp{}_decode_speedup_ctx{}", t, length);
    case HeadlineKind::CommSharePrefill:
      return fmt::format("tp{}_comm_share_prefill_{}", t, length);
  }
  return "";
}

void confirm_across_degrees(std::map<int, std::vector<Outcome>>& by_degree) {
  for (auto& [t, outcomes] : by_degree)
    for (Outcome& o : outcomes) {
      if (o.status != "unchecked") continue;
      for (const auto& [later_t, later] : by_degree)
        for (const Outcome& l : later)
          if (later_t > t && l.status == "ok" && l.checked_against == t && l.phase == o.phase &&
              l.batch == o.batch && l.length == o.length) {
            o.status = "ok";
            o.checked_against = later_t;
            o.check_error = l.check_error;  // the one comparison made: theirs
            o.note = fmt::format("TP=1 did not run this point: checked against TP={}", later_t);
          }
    }
}

}  // namespace gpubench::tp
