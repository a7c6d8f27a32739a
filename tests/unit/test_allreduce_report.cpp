// The allreduce report keeps unverified figures out of every derived number: a size whose check
// failed, or was not run (--check 0), is shown with its status but never feeds the curves, the
// fit, the knees or the headline.
#include <gtest/gtest.h>

#include <string>

#include "gpubench/modules/allreduce/allreduce.hpp"
#include "gpubench/modules/allreduce/results.hpp"

using namespace gpubench;
using namespace gpubench::allreduce;

namespace {

const Collective& all_reduce() {
  return all_collectives().front();
}

// A row of all_reduce fp32 sum at `size` taking `us` per op, checked unless `checked` is false.
Row row(std::uint64_t size, double us, bool checked = true, std::uint64_t wrong = 0) {
  Row r;
  r.collective = &all_reduce();
  r.type = "fp32";
  r.op = "sum";
  r.type_bytes = 4;
  r.size = size;
  r.count = size / 4;
  r.out_of_place.measured = true;
  r.out_of_place.per_op = compute_stats({us * 1e-6, us * 1e-6, us * 1e-6});
  r.out_of_place.checked = checked;
  r.out_of_place.wrong = wrong;
  r.sweep_end = size == (1u << 28);  // the tests' sweeps end at 256 MiB
  return r;
}

Report report_of(const std::vector<Row>& rows) {
  Report r;
  RunFacts facts;
  facts.nranks = 4;
  build_report(r, rows, facts);
  return r;
}

const CaseResult* find_case(const Report& r, const std::string& name) {
  for (const auto& c : r.results)
    if (c.name == name && c.group == "all_reduce fp32 sum") return &c;
  return nullptr;
}

std::size_t curve_points(const Report& r) {
  for (const auto& s : r.sweeps)
    if (s.name == "busbw_vs_size") return s.series.front().x.size();
  return 0;
}

bool warned(const Report& r, const std::string& fragment) {
  for (const auto& w : r.warnings)
    if (w.find(fragment) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(AllreduceReport, AllVerifiedFeedsEverything) {
  const Report r = report_of({row(1 << 20, 10), row(1 << 24, 100), row(1 << 28, 1000)});
  EXPECT_EQ(curve_points(r), 3u);
  ASSERT_NE(r.find_headline("all_reduce_busbw_GBps"), nullptr);
  // 256 MiB in 1 ms: algbw 268.4 GB/s, busbw x 2(n-1)/n = 1.5.
  EXPECT_NEAR(r.find_headline("all_reduce_busbw_GBps")->value, 268.435456 * 1.5, 1e-6);
  EXPECT_NEAR(r.find_headline("all_reduce_latency_us")->value, 10, 1e-9);
  EXPECT_TRUE(r.warnings.empty());
}

TEST(AllreduceReport, FailedSizeFeedsNoCurveAndNoHeadline) {
  // The largest size computed wrong: it is a failed row, out of the curve, and the headline
  // (defined at the largest size) is absent rather than taken from a smaller size.
  const Report r = report_of({row(1 << 20, 10), row(1 << 24, 100), row(1 << 28, 1, true, 7)});
  const CaseResult* bad = find_case(r, "256M");
  ASSERT_NE(bad, nullptr);
  EXPECT_EQ(bad->status, "failed");
  EXPECT_NE(bad->note.find("7 wrong"), std::string::npos);
  EXPECT_EQ(curve_points(r), 2u);
  EXPECT_EQ(r.find_headline("all_reduce_busbw_GBps"), nullptr);
  ASSERT_NE(r.find_headline("all_reduce_latency_us"), nullptr);
  for (const auto& c : r.results)
    if (c.group == "Comparison across collectives") {
      const Metric* largest = c.find_metric("size_largest");
      ASSERT_NE(largest, nullptr);
      EXPECT_EQ(largest->value, static_cast<double>(1 << 24));  // the failed size is not used
      EXPECT_LT(c.find_metric("peak_busbw")->value, 1000);  // 1 us at 256 MiB: 400000
    }
}

TEST(AllreduceReport, ChecksOffIsMarkedAndFeedsNothing) {
  const Report r = report_of({row(1 << 20, 10, false), row(1 << 24, 100, false)});
  for (const auto& c : r.results) {
    if (c.group != "all_reduce fp32 sum") continue;
    EXPECT_EQ(c.status, "unchecked") << c.name;
  }
  EXPECT_EQ(curve_points(r), 0u);
  EXPECT_TRUE(r.headline.empty());
  EXPECT_TRUE(warned(r, "checks off"));
}

TEST(AllreduceReport, InPlaceNotRunIsSaidOnce) {
  Row a = row(1 << 20, 10);
  a.in_place.not_run = true;
  Row b = row(1 << 24, 100);
  b.in_place.not_run = true;
  b.sweep_end = true;
  const Report r = report_of({a, b});
  EXPECT_TRUE(warned(r, "in place are not run"));
  EXPECT_EQ(curve_points(r), 2u);
  EXPECT_NE(r.find_headline("all_reduce_busbw_GBps"), nullptr);
}

TEST(AllreduceReport, CurveCutShortHasNoBandwidthHeadline) {
  // Stopped by SIGTERM after 16 MiB of a sweep to 256 MiB: the rows stand, the latency (the
  // smallest size ran) too, but no busbw headline would be at the sweep's largest size.
  const Report r = report_of({row(1 << 20, 10), row(1 << 24, 100)});
  EXPECT_EQ(curve_points(r), 2u);
  EXPECT_EQ(r.find_headline("all_reduce_busbw_GBps"), nullptr);
  EXPECT_NE(r.find_headline("all_reduce_latency_us"), nullptr);
}

// -r all: a curve per root of a rooted collective, named with its root.
TEST(AllreduceReport, EveryRootItsOwnCurve) {
  const Collective* reduce = nullptr;
  for (const Collective& c : all_collectives())
    if (c.name == "reduce") reduce = &c;
  ASSERT_NE(reduce, nullptr);
  std::vector<Row> rows;
  for (int root : {0, 1})
    for (std::uint64_t size : {1u << 20, 1u << 28}) {
      Row r = row(size, 10);
      r.collective = reduce;
      r.root = root;
      rows.push_back(r);
    }
  Report out;
  RunFacts facts;
  facts.nranks = 4;
  facts.all_roots = true;
  build_report(out, rows, facts);
  int root0 = 0, root1 = 0;
  for (const auto& c : out.results) {
    root0 += c.group == "reduce fp32 sum root 0";
    root1 += c.group == "reduce fp32 sum root 1";
  }
  EXPECT_EQ(root0, 2);
  EXPECT_EQ(root1, 2);
}

// -N 2: each sweep its own curves; the headline comes from the first.
TEST(AllreduceReport, EachCycleItsOwnCurve) {
  std::vector<Row> rows;
  for (int cycle : {1, 2})
    for (std::uint64_t size : {1u << 20, 1u << 28}) {
      Row r = row(size, cycle == 1 ? 10 : 20);
      r.cycle = cycle;
      rows.push_back(r);
    }
  Report out;
  RunFacts facts;
  facts.nranks = 4;
  build_report(out, rows, facts);
  int first = 0, second = 0;
  for (const auto& c : out.results) {
    first += c.group == "all_reduce fp32 sum cycle 1";
    second += c.group == "all_reduce fp32 sum cycle 2";
  }
  EXPECT_EQ(first, 2);
  EXPECT_EQ(second, 2);
  const Metric* latency = out.find_headline("all_reduce_latency_us");
  ASSERT_NE(latency, nullptr);
  EXPECT_NEAR(latency->value, 10.0, 1e-9);
}
