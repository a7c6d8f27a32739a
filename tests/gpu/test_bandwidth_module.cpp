// `gpubench bandwidth` end to end on the GPUs of this machine, with small sizes: every case
// passes its verification, the headline keys appear with plausible values, and the matrices and
// the sweep have the expected shape.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "gpubench/core/context.hpp"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/module.hpp"
#include "gpubench/core/system.hpp"

namespace gpubench {
ModulePtr make_bandwidth_module();
}

using namespace gpubench;

namespace {

const System& discovered() {
  static const System system = System::discover(false);
  return system;
}

// Runs the module with `args` (after the subcommand) on `gpus`, quick and with short measurements.
Report run_bandwidth(const std::vector<std::string>& args, std::vector<int> gpus) {
  ModulePtr m = make_bandwidth_module();
  CLI::App app("bandwidth");
  m->add_options(app);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them reversed
  app.parse(reversed);
  m->validate();
  CommonOptions common;
  common.quick = true;
  common.min_time = 0.005;
  Context ctx(discovered(), std::move(gpus), common);
  Report r = m->run(ctx);
  r.settle_status();
  const auto cfg = m->config(true);
  EXPECT_TRUE(cfg.contains("hbm_size"));
  return r;
}

void expect_all_ok(const Report& r) {
  for (const CaseResult& c : r.results)
    EXPECT_NE(c.status, "failed") << c.group << " / " << c.name << ": " << c.note;
  EXPECT_NE(r.status, "failed");
}

}  // namespace

TEST(BandwidthModule, HbmOnOneGpu) {
  const Report r = run_bandwidth({"--tests", "hbm", "--hbm-size", "64M"}, {0});
  expect_all_ok(r);
  EXPECT_EQ(r.results.size(), 14u);  // 7 kernels x 2 dtypes
  for (const char* key : {"hbm_copy_GBps", "hbm_triad_GBps"}) {
    const Metric* m = r.find_headline(key);
    ASSERT_NE(m, nullptr) << key;
    EXPECT_GT(m->value, 50) << key;  // any GPU streams more than this
    EXPECT_EQ(m->unit, "GB/s");
  }
  const GpuInfo* g = discovered().gpu(0);
  if (g && g->hbm_GBps_theoretical() > 0) {
    const Metric* eff = r.find_headline("hbm_triad_efficiency_pct");
    ASSERT_NE(eff, nullptr);
    EXPECT_LT(eff->value, 105);
  }
}

TEST(BandwidthModule, HostAndLatencyOnOneGpu) {
  const Report r = run_bandwidth(
      {"--tests", "host,latency", "--host-size", "32M", "--latency-hops", "2000"}, {0});
  expect_all_ok(r);
  for (const char* key : {"h2d_pinned_GBps", "d2h_pinned_GBps"}) {
    const Metric* m = r.find_headline(key);
    ASSERT_NE(m, nullptr) << key;
    EXPECT_GT(m->value, 1) << key;
  }
  // Latency: local HBM on the diagonal, host memory in its own matrix.
  bool local = false, host = false;
  for (const Matrix& m : r.matrices) {
    if (m.name == "p2p_latency_us") {
      ASSERT_EQ(m.values.size(), 1u);
      EXPECT_GT(m.values[0][0], 0.05);
      EXPECT_LT(m.values[0][0], 10.0);
      local = true;
    }
    if (m.name == "host_latency_us") {
      EXPECT_GT(m.values[0][0], 0.1);
      host = true;
    }
  }
  EXPECT_TRUE(local);
  EXPECT_TRUE(host);
}

TEST(BandwidthModule, SweepOnOneGpuHasHostCurves) {
  const Report r = run_bandwidth({"--tests", "sweep", "--sweep-sizes", "1M,4M"}, {0});
  expect_all_ok(r);
  ASSERT_EQ(r.sweeps.size(), 1u);
  ASSERT_GE(r.sweeps[0].series.size(), 2u);  // H2D and D2H at least
  for (const Series& s : r.sweeps[0].series) EXPECT_EQ(s.x.size(), 2u) << s.label;
}

TEST(BandwidthModule, PeerPartsOnTwoGpus) {
  if (visible_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const Report r = run_bandwidth({"--tests", "p2p,latency", "--p2p-size", "64M"}, {0, 1});
  expect_all_ok(r);
  const Link* link = discovered().link(0, 1);
  if (!link || !link->p2p_access) GTEST_SKIP() << "GPU 0 and 1 have no peer access";
  for (const char* key :
       {"p2p_unidir_ce_GBps", "p2p_bidir_ce_GBps", "p2p_unidir_sm_GBps", "p2p_latency_us"})
    EXPECT_NE(r.find_headline(key), nullptr) << key;
  for (const Matrix& m : r.matrices) {
    ASSERT_EQ(m.values.size(), m.rows.size()) << m.name;
    if (m.name == "p2p_unidir_ce_GBps") {
      EXPECT_TRUE(std::isnan(m.values[0][0]));
      EXPECT_GT(m.values[0][1], 1);
      EXPECT_GT(m.values[1][0], 1);
    }
  }
}

TEST(BandwidthModule, SizesBeyondFreeMemoryAreInputErrors) {
  EXPECT_THROW(run_bandwidth({"--tests", "hbm", "--hbm-size", "64T"}, {0}), InputError);
}

TEST(BandwidthModule, HostPartOnEveryGpuAtOnce) {
  const int n = visible_device_count();
  if (n < 2) GTEST_SKIP() << "needs 2 GPUs";
  std::vector<int> gpus;
  for (int i = 0; i < n; ++i) gpus.push_back(i);
  const Report r = run_bandwidth({"--tests", "host", "--host-size", "32M"}, gpus);
  expect_all_ok(r);
  std::vector<std::string> directions;
  for (const CaseResult& c : r.results) {
    if (c.group.find("all GPUs at once") == std::string::npos) continue;
    directions.push_back(c.params.value("direction", ""));
    const Metric* bw = c.find_metric("bandwidth");
    ASSERT_NE(bw, nullptr) << c.name;
    EXPECT_GT(bw->value, 1) << c.name;
  }
  EXPECT_EQ(directions, (std::vector<std::string>{"h2d", "d2h", "both"}));
}
