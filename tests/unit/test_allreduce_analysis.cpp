// The allreduce sweep and analysis: nccl-tests sizes, the alpha-beta fit, the knees.
#include <gtest/gtest.h>

#include <cmath>

#include "gpubench/core/errors.hpp"
#include "gpubench/modules/allreduce/allreduce.hpp"

using namespace gpubench;
using namespace gpubench::allreduce;

TEST(AllreduceSweep, FactorAndStep) {
  EXPECT_EQ(sweep_sizes(8, 128, 2, 0, 1), (std::vector<std::uint64_t>{8, 16, 32, 64, 128}));
  EXPECT_EQ(sweep_sizes(8, 100, 2, 0, 1), (std::vector<std::uint64_t>{8, 16, 32, 64}));
  EXPECT_EQ(sweep_sizes(1 << 20, 4 << 20, 0, 1 << 20, 1),
            (std::vector<std::uint64_t>{1 << 20, 2 << 20, 3 << 20, 4 << 20}));
  // 8 B .. 8 GiB by 2: 31 sizes, the last exactly 8 GiB.
  const auto full = sweep_sizes(8, 8ull << 30, 2, 0, 1);
  ASSERT_EQ(full.size(), 31u);
  EXPECT_EQ(full.back(), 8ull << 30);
}

TEST(AllreduceSweep, AlignmentDropsZeroAndDuplicates) {
  // Aligned to 16 bytes (4 ranks x fp32): 8 rounds to 0 and is dropped.
  EXPECT_EQ(sweep_sizes(8, 64, 2, 0, 16), (std::vector<std::uint64_t>{16, 32, 64}));
  EXPECT_EQ(sweep_sizes(20, 40, 0, 4, 16), (std::vector<std::uint64_t>{16, 32}));
}

TEST(AllreduceSweep, BadInput) {
  EXPECT_THROW(sweep_sizes(0, 8, 2, 0, 1), InputError);
  EXPECT_THROW(sweep_sizes(64, 8, 2, 0, 1), InputError);
  EXPECT_THROW(sweep_sizes(8, 64, 1.0, 0, 1), InputError);
  EXPECT_THROW(sweep_sizes(8, 64, 0.5, 0, 1), InputError);
}

// A factor a hair above 1 used to loop for ever (s * factor == s); a step of one byte up to
// 8 GiB built billions of sizes. Both are refused before any size is made.
TEST(AllreduceSweep, TooManySizesRefusedAtOnce) {
  EXPECT_THROW(sweep_sizes(8, 8ull << 30, 1.0000000000000002, 0, 1), InputError);
  EXPECT_THROW(sweep_sizes(8, 8ull << 30, 0, 1, 1), InputError);
  EXPECT_THROW(sweep_sizes(1, ~0ull, 1.001, 0, 1), InputError);
  EXPECT_EQ(sweep_sizes(1, 4096, 0, 1, 1).size(), 4096u);  // the cap itself is allowed
}

TEST(AllreduceFit, RecoversAlphaAndBeta) {
  std::vector<Point> pts;
  const double alpha = 20e-6, beta = 300e9;
  for (std::uint64_t s = 8; s <= (1ull << 33); s *= 2) pts.push_back({s, alpha + s / beta, 0, 0});
  const auto f = fit_alpha_beta(pts);
  ASSERT_TRUE(f.has_value());
  EXPECT_NEAR(f->alpha_s, alpha, alpha * 1e-6);
  EXPECT_NEAR(f->beta_Bps, beta, beta * 1e-6);
  EXPECT_NEAR(f->r2, 1.0, 1e-9);
  EXPECT_FALSE(fit_alpha_beta({{8, 1e-5, 0, 0}}).has_value());
}

TEST(AllreduceKnee, InterpolatesOnLogSize) {
  std::vector<Point> pts = {
      {1024, 0, 0, 10}, {2048, 0, 0, 50}, {4096, 0, 0, 90}, {8192, 0, 0, 100}};
  // 50% of 100 is reached exactly at 2048; 90% exactly at 4096; 70% halfway (log2) in between.
  EXPECT_NEAR(*size_at_fraction_of_peak(pts, 0.5), 2048, 1e-6);
  EXPECT_NEAR(*size_at_fraction_of_peak(pts, 0.9), 4096, 1e-6);
  EXPECT_NEAR(*size_at_fraction_of_peak(pts, 0.7), std::exp2(11.5), 1e-6);
  EXPECT_NEAR(*size_at_fraction_of_peak(pts, 0.05), 1024, 1e-6);
  EXPECT_FALSE(size_at_fraction_of_peak({}, 0.5).has_value());
}

#include "gpubench/modules/allreduce/settings.hpp"

TEST(AllreduceSettings, DefaultsAndChecks) {
  const Settings full = resolve_settings(Options{}, false);
  EXPECT_EQ(full.min_bytes, 8u);
  EXPECT_EQ(full.max_bytes, 8ull << 30);
  EXPECT_EQ(full.step_factor, 2.0);
  ASSERT_EQ(full.collectives.size(), 1u);
  EXPECT_EQ(full.collectives[0].name, "all_reduce");
  const Settings quick = resolve_settings(Options{}, true);
  EXPECT_EQ(quick.max_bytes, 256ull << 20);
  EXPECT_EQ(quick.step_factor, 4.0);
  Options o;
  o.collective = "all";
  EXPECT_EQ(resolve_settings(o, false).collectives.size(), 11u);
  o = Options{};
  o.place = "sideways";
  EXPECT_THROW(resolve_settings(o, false), InputError);
  o = Options{};
  o.step_bytes = "1M";
  o.step_factor = 3;
  EXPECT_THROW(resolve_settings(o, false), InputError);
  o = Options{};
  o.cuda_graph = true;
  o.blocking_mode = 2;
  EXPECT_THROW(resolve_settings(o, false), InputError);
  o = Options{};
  o.split = 0;
  EXPECT_THROW(resolve_settings(o, false), InputError);
}

// nccl-tests' flags: mapped onto gpubench's meaning, a note where they change nothing.
TEST(AllreduceSettings, NcclTestsFlagsMapped) {
  Options o;
  o.nthreads = 2;
  o.ngpus = 2;
  o.iters = 20;
  o.warmup_iters = 5;
  o.per_iter_skip = 2;
  o.blocking_mode = 1;
  Settings s = resolve_settings(o, false);
  EXPECT_EQ(s.gpus_per_process, 4);
  EXPECT_EQ(s.iters, 20);
  EXPECT_EQ(s.warmup, 7);  // -w 5 and the 2 samples -K leaves out
  EXPECT_TRUE(s.blocking);
  EXPECT_TRUE(s.barrier_each_op);
  EXPECT_TRUE(s.notes.empty());
  o = Options{};
  o.cudagraph = 10;
  o.parallel_init = 1;
  o.per_iter_timing = 1;
  o.average = 3;
  o.blocking_mode = 3;
  s = resolve_settings(o, false);
  EXPECT_TRUE(s.cuda_graph);
  EXPECT_FALSE(s.blocking);
  EXPECT_EQ(s.notes.size(), 4u);  // -G N, -p, -z 3, -I: what they mean here
  o = Options{};
  o.blocking_mode = 2;
  s = resolve_settings(o, false);
  EXPECT_TRUE(s.blocking);
  EXPECT_FALSE(s.barrier_each_op);
  EXPECT_EQ(resolve_settings(Options{}, false).gpus_per_process, 0);
}

// The flags that came with registration, rank times and roots.
TEST(AllreduceSettings, NcclTestsFlagsWithValues) {
  Options o;
  o.local_register = 2;
  o.average = 1;
  o.cta_policy = 1;
  o.unalign = 3;
  o.memory = 1;
  o.report_timestamps = 1;
  o.root = "all";
  Settings s = resolve_settings(o, false);
  EXPECT_EQ(s.registration, 2);
  EXPECT_EQ(s.rank_time, 1);
  EXPECT_EQ(s.cta_policy, 1);
  EXPECT_EQ(s.unalign, 3);
  EXPECT_TRUE(s.memory_report);
  EXPECT_TRUE(s.timestamps);
  EXPECT_TRUE(s.all_roots);
  const auto j = s.to_json();
  EXPECT_EQ(j["registration"], "symmetric windows");
  EXPECT_EQ(j["rank_time"], "mean");
  EXPECT_EQ(j["root"], "all");
  // Defaults: no registration, the slowest rank, root 0.
  s = resolve_settings(Options{}, false);
  EXPECT_EQ(s.registration, 0);
  EXPECT_EQ(s.rank_time, 3);
  EXPECT_FALSE(s.all_roots);
  EXPECT_EQ(s.root, 0);
  EXPECT_EQ(s.to_json()["rank_time"], "slowest");
  o = Options{};
  o.root = "-1";  // nccl-tests' spelling of every root
  EXPECT_TRUE(resolve_settings(o, false).all_roots);
  o.root = " 3 ";
  EXPECT_EQ(resolve_settings(o, false).root, 3);
  for (const char* bad : {"-2", "x", "", "1.5"}) {
    o.root = bad;
    EXPECT_THROW(resolve_settings(o, false), InputError) << bad;
  }
  o = Options{};
  EXPECT_EQ(resolve_settings(o, false).cycles, 1);
  o.run_cycles = 0;  // until stopped
  EXPECT_EQ(resolve_settings(o, false).cycles, 0);
  o.run_cycles = 3;
  EXPECT_EQ(resolve_settings(o, false).to_json()["cycles"], 3);
  o = Options{};
  o.skew = -0.1;
  EXPECT_THROW(resolve_settings(o, false), InputError);
  o.skew = 0.25;
  o.collective = "alltoallv";
  s = resolve_settings(o, false);
  EXPECT_DOUBLE_EQ(s.collectives[0].skew, 0.25);
  EXPECT_EQ(s.to_json()["alltoallv_skew"], 0.25);
}

TEST(AllreduceSettings, OpsPerIteration) {
  EXPECT_EQ(agg_for(8, 0), 20);
  EXPECT_EQ(agg_for(1 << 20, 0), 20);
  EXPECT_EQ(agg_for(16 << 20, 0), 4);
  EXPECT_EQ(agg_for(8 << 20, 0), 8);
  EXPECT_EQ(agg_for(64 << 20, 0), 4);
  EXPECT_EQ(agg_for(8ull << 30, 0), 4);
  EXPECT_EQ(agg_for(8ull << 30, 5), 5);
}
