// Pipeline schedules as per-stage operation orders, the timeline simulator and the theory.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <tuple>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/modules/pp/pp.hpp"

namespace gpubench::pp {

const char* to_string(Schedule s) {
  switch (s) {
    case Schedule::GPipe:
      return "gpipe";
    case Schedule::OneFOneB:
      return "1f1b";
    case Schedule::Interleaved:
      return "interleaved";
  }
  return "?";
}

Schedule parse_schedule(const std::string& text) {
  std::string t = trim(text);
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "gpipe") return Schedule::GPipe;
  if (t == "1f1b") return Schedule::OneFOneB;
  if (t == "interleaved") return Schedule::Interleaved;
  throw InputError(fmt::format("--schedule: '{}' is not gpipe, 1f1b or interleaved", trim(text)));
}

namespace {

void check_sizes(Schedule s, int p, int m, int v) {
  if (p < 1) throw InputError(fmt::format("--pp: {} must be at least 1", p));
  if (m < 1) throw InputError(fmt::format("--microbatches: {} must be at least 1", m));
  if (v < 1) throw InputError(fmt::format("--chunks: {} must be at least 1", v));
  if (v > 1 && s != Schedule::Interleaved)
    throw InputError(fmt::format("--chunks: {} chunks a stage need the interleaved schedule", v));
  if (s == Schedule::Interleaved && m % p != 0)
    throw InputError(fmt::format(
        "--microbatches: the interleaved schedule needs a multiple of the {} stages, not {}", p,
        m));
}

}  // namespace

std::vector<Op> stage_order(Schedule s, int p, int m, int v, int stage) {
  check_sizes(s, p, m, v);
  if (stage < 0 || stage >= p)
    throw InputError(fmt::format("stage {} is outside 0..{}", stage, p - 1));
  std::vector<Op> order;
  if (s == Schedule::GPipe) {
    for (int mb = 0; mb < m; ++mb) order.push_back({true, mb, 0});
    for (int mb = 0; mb < m; ++mb) order.push_back({false, mb, 0});
    return order;
  }
  // Forward k and backward k of the stage's k-th virtual microbatch (v = 1: microbatch k).
  auto fwd = [&](int k) {
    const int group = k / (p * v), in_group = k % (p * v);
    return Op{true, group * p + in_group % p, in_group / p};
  };
  auto bwd = [&](int k) {
    const int group = k / (p * v), in_group = k % (p * v);
    return Op{false, group * p + in_group % p, v - 1 - in_group / p};
  };
  const int total = m * v;
  int warmup = s == Schedule::OneFOneB ? std::min(p - stage - 1, m)
                                       : std::min((p - stage - 1) * 2 + (v - 1) * p, total);
  if (s == Schedule::OneFOneB) {  // microbatches in order: virtual index = microbatch
    auto f1 = [](int k) { return Op{true, k, 0}; };
    auto b1 = [](int k) { return Op{false, k, 0}; };
    for (int k = 0; k < warmup; ++k) order.push_back(f1(k));
    for (int i = 0; i < m - warmup; ++i) {
      order.push_back(f1(warmup + i));
      order.push_back(b1(i));
    }
    for (int k = m - warmup; k < m; ++k) order.push_back(b1(k));
    return order;
  }
  for (int k = 0; k < warmup; ++k) order.push_back(fwd(k));
  for (int i = 0; i < total - warmup; ++i) {
    order.push_back(fwd(warmup + i));
    order.push_back(bwd(i));
  }
  for (int k = total - warmup; k < total; ++k) order.push_back(bwd(k));
  return order;
}

double theory_bubble(Schedule s, int p, int m, int v) {
  check_sizes(s, p, m, v);
  const double chunks = s == Schedule::Interleaved ? v : 1;
  return (p - 1) / (chunks * m + p - 1);
}

double stage_time_bubble(const Timeline& measured, Schedule s, int p, int m, int v,
                         double transfer_s) {
  if (p < 2) return 0.0;
  if (measured.stages.size() != static_cast<std::size_t>(p))
    throw InputError(fmt::format("stage_time_bubble: {} stages in the timeline, {} expected",
                                 measured.stages.size(), p));
  OpTimes times;
  for (const std::vector<Span>& stage : measured.stages) {
    double f = 0, b = 0;
    int nf = 0, nb = 0;
    for (const Span& sp : stage) {
      (sp.op.forward ? f : b) += sp.end - sp.start;
      ++(sp.op.forward ? nf : nb);
    }
    if (nf == 0 || nb == 0)
      throw InputError("stage_time_bubble: a stage without forward or backward spans");
    times.forward_s.push_back(f / nf);
    times.backward_s.push_back(b / nb);
  }
  times.transfer_s = transfer_s;
  return simulate(s, p, m, v, times).bubble;
}

Timeline simulate(Schedule s, int p, int m, int v, const OpTimes& times) {
  check_sizes(s, p, m, v);
  if (times.forward_s.size() != static_cast<std::size_t>(p) ||
      times.backward_s.size() != static_cast<std::size_t>(p))
    throw InputError(fmt::format("simulate: {} stages need {} forward and backward times", p, p));
  if (times.transfer_s < 0) throw InputError("simulate: the transfer time must be >= 0");
  std::vector<std::vector<Op>> orders;
  for (int st = 0; st < p; ++st) orders.push_back(stage_order(s, p, m, v, st));
  // Finish time of (forward?, mb, chunk, stage).
  std::map<std::tuple<bool, int, int, int>, double> done;
  auto finished = [&](bool f, int mb, int c, int st, double& at) {
    const auto it = done.find({f, mb, c, st});
    if (it == done.end()) return false;
    at = it->second;
    return true;
  };
  Timeline t;
  t.stages.assign(static_cast<std::size_t>(p), {});
  t.peak_in_flight.assign(static_cast<std::size_t>(p), 0);
  std::vector<std::size_t> next(static_cast<std::size_t>(p), 0);
  std::vector<double> free_at(static_cast<std::size_t>(p), 0.0);
  std::vector<int> in_flight(static_cast<std::size_t>(p), 0);
  std::size_t left = 0;
  for (const auto& o : orders) left += o.size();
  while (left > 0) {
    bool progress = false;
    for (int st = 0; st < p; ++st) {
      const auto su = static_cast<std::size_t>(st);
      while (next[su] < orders[su].size()) {
        const Op op = orders[su][next[su]];
        double ready = 0, at = 0;
        bool ok = true;
        if (op.forward) {
          if (st > 0) {
            ok = finished(true, op.mb, op.chunk, st - 1, at);
            ready = at + times.transfer_s;
          } else if (op.chunk > 0) {
            ok = finished(true, op.mb, op.chunk - 1, p - 1, at);
            ready = at + times.transfer_s;
          }
        } else {
          ok = finished(true, op.mb, op.chunk, st, at);
          ready = at;
          if (ok && st < p - 1) {
            ok = finished(false, op.mb, op.chunk, st + 1, at);
            ready = std::max(ready, at + times.transfer_s);
          } else if (ok && op.chunk < v - 1) {
            ok = finished(false, op.mb, op.chunk + 1, 0, at);
            ready = std::max(ready, at + times.transfer_s);
          }
        }
        if (!ok) break;
        const double dur = op.forward ? times.forward_s[su] : times.backward_s[su];
        const double start = std::max(free_at[su], ready);
        t.stages[su].push_back({op, start, start + dur});
        done[{op.forward, op.mb, op.chunk, st}] = start + dur;
        free_at[su] = start + dur;
        t.busy_s += dur;
        in_flight[su] += op.forward ? 1 : -1;
        t.peak_in_flight[su] = std::max(t.peak_in_flight[su], in_flight[su]);
        ++next[su];
        --left;
        progress = true;
      }
    }
    if (!progress) throw InputError("simulate: the stage orders deadlock");
  }
  for (double f : free_at) t.makespan_s = std::max(t.makespan_s, f);
  t.bubble = t.makespan_s > 0 ? 1 - t.busy_s / (p * t.makespan_s) : 0;
  return t;
}

Timeline measured_timeline(Schedule s, int p, int m, int v,
                           const std::vector<std::vector<OpMarks>>& marks, bool copy_engines,
                           TransferTotals& totals) {
  std::vector<std::vector<Op>> orders;
  for (int j = 0; j < p; ++j) orders.push_back(stage_order(s, p, m, v, j));
  if (marks.size() != orders.size())
    throw InputError(fmt::format("measured timeline: marks of {} stages for {}", marks.size(), p));
  for (int j = 0; j < p; ++j)
    if (marks[static_cast<std::size_t>(j)].size() != orders[static_cast<std::size_t>(j)].size())
      throw InputError(fmt::format("measured timeline: stage {} has marks of {} operations for {}",
                                   j, marks[static_cast<std::size_t>(j)].size(),
                                   orders[static_cast<std::size_t>(j)].size()));
  // Where an operation is in its stage's order.
  auto find = [&](int j, const Op& want) -> std::size_t {
    const auto& ord = orders[static_cast<std::size_t>(j)];
    for (std::size_t i = 0; i < ord.size(); ++i)
      if (ord[i] == want) return i;
    throw InputError("measured timeline: an operation missing from a stage's order");
  };
  Timeline tl;
  tl.stages.resize(static_cast<std::size_t>(p));
  tl.sends.resize(static_cast<std::size_t>(p));
  tl.recvs.resize(static_cast<std::size_t>(p));
  totals = TransferTotals{};
  for (int j = 0; j < p; ++j) {
    const auto J = static_cast<std::size_t>(j);
    for (std::size_t i = 0; i < orders[J].size(); ++i) {
      const Op& op = orders[J][i];
      const OpMarks& a = marks[J][i];
      tl.stages[J].push_back(Span{op, a.usable, a.end});
      tl.busy_s += a.end - a.usable;
      tl.makespan_s = std::max({tl.makespan_s, a.end, a.send_end});
      if (a.send_end >= 0) tl.sends[J].push_back(Span{op, a.send_begin, a.send_end});
      if (a.recv_end < 0) continue;  // nothing received
      // The sender: the previous virtual stage's forward, or the next one's backward.
      const int k = op.chunk * p + j;
      const int ks = op.forward ? k - 1 : k + 1;
      const int sj = ks % p;
      const OpMarks& sa =
          marks[static_cast<std::size_t>(sj)][find(sj, Op{op.forward, op.mb, ks / p})];
      const double begin = copy_engines ? sa.send_begin : std::max(sa.send_begin, a.recv_begin);
      const double end = copy_engines ? sa.send_end : a.recv_end;
      const double dur = std::max(0.0, end - begin);
      tl.recvs[J].push_back(Span{op, begin, end});
      totals.transfer_s += dur;
      totals.exposed_s += std::clamp(a.recv_end - std::max(a.ready, begin), 0.0, dur);
      ++totals.hops;
    }
  }
  tl.bubble = tl.makespan_s > 0 ? 1.0 - tl.busy_s / (p * tl.makespan_s) : 0.0;
  return tl;
}

}  // namespace gpubench::pp
