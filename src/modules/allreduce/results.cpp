// The allreduce report: nccl-tests' columns per collective, busbw and time curves, the
// alpha-beta fits and knees in one comparison table, and the headline keys.
#include "gpubench/modules/allreduce/results.hpp"

#include <fmt/format.h>

#include <cmath>
#include <map>

#include "gpubench/core/units.hpp"

namespace gpubench::allreduce {

namespace {

double algbw_GBps(std::uint64_t size, double seconds) {
  return seconds > 0 ? static_cast<double>(size) / seconds / 1e9 : std::nan("");
}

// "all_reduce fp32 sum": the rows of one curve ("reduce fp32 sum root 2" when every root ran).
std::string series_key(const Row& r, const RunFacts& facts) {
  std::string key = r.collective->reduces
                        ? fmt::format("{} {} {}", r.collective->name, r.type, r.op)
                        : fmt::format("{} {}", r.collective->name, r.type);
  if (facts.all_roots && r.root >= 0) key += fmt::format(" root {}", r.root);
  if (r.cycle > 0) key += fmt::format(" cycle {}", r.cycle);
  return key;
}

void add_place(CaseResult& c, const PlaceResult& p, const Row& r, int nranks, const char* suffix) {
  if (!p.measured) return;
  const double t = p.per_op.median;
  const double alg = algbw_GBps(r.size, t) * r.collective->alg_factor(nranks);
  c.metric(fmt::format("time{}", suffix), t * 1e6, "us");
  c.metric(fmt::format("algbw{}", suffix), alg, "GB/s");
  c.metric(fmt::format("busbw{}", suffix), alg * r.collective->bus_factor(nranks), "GB/s");
  if (p.checked) c.metric(fmt::format("#wrong{}", suffix), static_cast<double>(p.wrong), "");
}

const PlaceResult& main_place(const Row& r) {
  return r.out_of_place.measured ? r.out_of_place : r.in_place;
}

// A row's figure counts only when every placement that ran was checked and right.
bool row_verified(const Row& r) {
  const bool out_ok = !r.out_of_place.measured || r.out_of_place.verified();
  const bool in_ok = !r.in_place.measured || r.in_place.verified();
  return main_place(r).measured && out_ok && in_ok;
}

// The verified points of a curve, by size.
std::vector<Point> curve(const std::vector<const Row*>& rows, int nranks) {
  std::vector<Point> pts;
  for (const Row* r : rows) {
    if (!row_verified(*r)) continue;
    const PlaceResult& p = main_place(*r);
    Point pt;
    pt.size = r->size;
    pt.time_s = p.per_op.median;
    pt.algbw_GBps = algbw_GBps(r->size, pt.time_s) * r->collective->alg_factor(nranks);
    pt.busbw_GBps = pt.algbw_GBps * r->collective->bus_factor(nranks);
    pts.push_back(pt);
  }
  return pts;
}

// Headline: per collective, its first curve (the first type and op asked for), at its largest
// and smallest sizes, each only when that size's figure is verified; the bandwidth only when
// the curve reached the sweep's end (a run stopped by a signal leaves curves cut short).
void headline(Report& r, const std::vector<std::string>& order,
              std::map<std::string, std::vector<const Row*>>& by_series, int n) {
  std::map<std::string, bool> seen;
  for (const auto& key : order) {
    const auto& series = by_series[key];
    const std::string& name = series.front()->collective->name;
    if (seen[name]) continue;
    seen[name] = true;
    std::vector<const Row*> ran;
    for (const Row* row : series)
      if (main_place(*row).measured) ran.push_back(row);
    if (ran.empty()) continue;
    if (ran.back()->sweep_end && row_verified(*ran.back()))
      r.set_headline(name + "_busbw_GBps", curve({ran.back()}, n).front().busbw_GBps, "GB/s");
    if (row_verified(*ran.front()))
      r.set_headline(name + "_latency_us", curve({ran.front()}, n).front().time_s * 1e6, "us");
  }
}

// Says once when figures were not checked (--check 0) or placements not run.
void warn_unverified(Report& r, const std::vector<Row>& rows) {
  bool unchecked = false, not_run = false;
  for (const Row& row : rows) {
    unchecked = unchecked || (main_place(row).measured && !main_place(row).checked);
    not_run = not_run || row.in_place.not_run;
  }
  if (unchecked)
    r.warn(
        "checks off (--check 0): no figure is verified, so none is in the curves, fits, "
        "knees or headline");
  if (not_run)
    r.warn(
        "alltoall and sendrecv in place are not run: each rank's buffer is another's source, "
        "so the output is undefined and cannot be checked");
}

}  // namespace

void build_report(Report& r, const std::vector<Row>& rows, const RunFacts& facts) {
  const int n = facts.nranks;
  std::vector<std::string> order;
  std::map<std::string, std::vector<const Row*>> by_series;
  for (const Row& row : rows) {
    const std::string key = series_key(row, facts);
    if (!by_series.count(key)) order.push_back(key);
    by_series[key].push_back(&row);
  }

  // One table per curve, in nccl-tests' columns (out-of-place, then in-place with "_ip").
  for (const Row& row : rows) {
    CaseResult c;
    c.group = series_key(row, facts);
    c.name = format_bytes_short(row.size);
    c.params = {{"size", row.size},
                {"count", row.count},
                {"type", row.type},
                {"redop", row.op},
                {"root", row.root}};
    if (!row.timestamp.empty()) c.params["timestamp"] = row.timestamp;
    add_place(c, row.out_of_place, row, n, "");
    add_place(c, row.in_place, row, n, "_ip");
    const PlaceResult& main = main_place(row);
    if (main.measured) {
      c.stats = main.per_op;
      c.params["ops_per_iteration"] = main.agg;
    }
    if (row.in_place.measured && row.out_of_place.measured)
      c.params["in_place_stats"] = stats_to_json(row.in_place.per_op, 1e6, "us");
    const std::uint64_t wrong = row.out_of_place.wrong + row.in_place.wrong;
    if (wrong > 0) {
      c.status = "failed";
      c.note = fmt::format("{} wrong elements", wrong);
    } else if (!main.measured) {
      c.status = "skipped";
      c.note = "in place only, and its output is undefined: not run";
    } else if (!row_verified(row)) {
      c.status = "unchecked";
      c.note = "output not checked (--check 0): not in the curves, fit or headline";
    } else if (!main.converged) {
      c.note = fmt::format("noise target not met (stopped on {})", main.stop_reason);
    }
    r.add(std::move(c));
  }

  // Curves: busbw and time per op against size.
  Sweep bus{"busbw_vs_size",
            "Bus bandwidth against message size (out-of-place)",
            "size",
            "bytes",
            "busbw",
            "GB/s",
            true,
            {}};
  Sweep lat{"time_vs_size", "Time per op against message size (out-of-place)",
            "size",         "bytes",
            "time",         "us",
            true,           {}};
  for (const auto& key : order) {
    Series sb{key, {}, {}}, st{key, {}, {}};
    for (const Point& p : curve(by_series[key], n)) {
      sb.x.push_back(static_cast<double>(p.size));
      sb.y.push_back(p.busbw_GBps);
      st.x.push_back(static_cast<double>(p.size));
      st.y.push_back(p.time_s * 1e6);
    }
    bus.series.push_back(std::move(sb));
    lat.series.push_back(std::move(st));
  }
  r.sweeps.push_back(std::move(bus));
  r.sweeps.push_back(std::move(lat));

  // Comparison across collectives: the largest and smallest sizes, the fit and the knees.
  for (const auto& key : order) {
    const auto& series = by_series[key];
    const std::vector<Point> pts = curve(series, n);
    if (pts.empty()) continue;
    const Collective& coll = *series.front()->collective;
    const double factor = coll.bus_factor(n);
    double peak = 0;
    for (const Point& p : pts) peak = std::max(peak, p.busbw_GBps);
    CaseResult c;
    c.group = "Comparison across collectives";
    c.name = key;
    c.params = {{"ranks", n}, {"link", facts.link_name}};
    c.metric("busbw_largest", pts.back().busbw_GBps, "GB/s");
    c.metric("size_largest", static_cast<double>(pts.back().size), "bytes");
    c.metric("time_smallest", pts.front().time_s * 1e6, "us");
    c.metric("peak_busbw", peak, "GB/s");
    if (facts.link_peak_GBps > 0)
      c.metric("of_link_peak", 100.0 * peak / facts.link_peak_GBps, "%");
    if (auto f = fit_alpha_beta(pts)) {
      c.metric("alpha", f->alpha_s * 1e6, "us");
      c.metric("beta_busbw", f->beta_Bps * factor / 1e9, "GB/s");
      c.metric("fit_r2", f->r2, "");
    }
    if (auto s50 = size_at_fraction_of_peak(pts, 0.5)) c.metric("size_50pct_peak", *s50, "bytes");
    if (auto s90 = size_at_fraction_of_peak(pts, 0.9)) c.metric("size_90pct_peak", *s90, "bytes");
    r.add(std::move(c));
  }

  headline(r, order, by_series, n);
  warn_unverified(r, rows);
  if (facts.groups > 1)
    r.warn(
        fmt::format("--split {}: {} groups of {} ranks ran at once; each iteration's time is the "
                    "slowest rank's over every group",
                    facts.groups, facts.groups, n));
}

}  // namespace gpubench::allreduce
