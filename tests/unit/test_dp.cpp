// Host side of `gpubench dp`: the settings and their checks, the flat parameter buffer's buckets
// and shards, each strategy's memory per GPU, and AdamW's first step by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gpubench/kernels/optimizer.cuh"
#include "gpubench/modules/dp/dp.hpp"
#include "input_error.hpp"

using namespace gpubench;
using namespace gpubench::dp;
using gpubench::testing::contains;
using gpubench::testing::input_error_of;

namespace {

std::string settings_error(const Options& o, int visible = 4) {
  return input_error_of([&] { (void)resolve_settings(o, false, visible); });
}

// Two decoder layers (units 0..3: attention, MLP, attention, MLP) and the head (unit 4).
std::vector<model::TrainParam> two_layers() {
  return {{0, 300, 100}, {0, 100, 100}, {1, 500, 100}, {1, 100, 250}, {2, 300, 100},
          {2, 100, 100}, {3, 500, 100}, {3, 100, 250}, {4, 1000, 100}};
}

}  // namespace

TEST(DpSettings, DefaultsFollowTheModeAndTheGpus) {
  const Settings full = resolve_settings(Options{}, false, 4);
  EXPECT_EQ(full.strategies.size(), 4u);
  EXPECT_EQ(full.gpu_counts, (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(full.batch_sizes, (std::vector<std::int64_t>{4}));
  EXPECT_EQ(full.seq_len, 4096);
  EXPECT_EQ(full.layers, full.model.num_layers);
  EXPECT_EQ(full.bucket_bytes, 25'000'000u);
  EXPECT_EQ(full.bucket_sweep, (std::vector<std::uint64_t>{5'000'000, 25'000'000, 100'000'000}));
  const Settings quick = resolve_settings(Options{}, true, 6);
  EXPECT_EQ(quick.gpu_counts, (std::vector<int>{1, 2, 4, 6}));
  EXPECT_EQ(quick.batch_sizes, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(quick.seq_len, 1024);
  EXPECT_EQ(quick.layers, 4);
  EXPECT_TRUE(quick.bucket_sweep.empty());
  Options o;
  o.strategy = "fsdp, ddp,ddp";
  o.gpu_counts = "2,1";
  o.bucket_sweep = "none";
  const Settings s = resolve_settings(o, false, 2);
  EXPECT_EQ(s.strategies, (std::vector<Strategy>{Strategy::Ddp, Strategy::Fsdp}));
  EXPECT_EQ(s.gpu_counts, (std::vector<int>{1, 2}));
  EXPECT_TRUE(s.bucket_sweep.empty());
  EXPECT_EQ(s.to_json()["strategies"], nlohmann::ordered_json({"ddp", "fsdp"}));
}

TEST(DpSettings, BadInputNamesItsOption) {
  const auto bad = [](auto set, const std::string& option, int visible = 4) {
    Options o;
    set(o);
    const std::string e = settings_error(o, visible);
    EXPECT_TRUE(contains(e, option)) << option << ": '" << e << "'";
    EXPECT_EQ(e.find('\n'), std::string::npos);
  };
  bad([](Options& o) { o.strategy = "zero3"; }, "--strategy");
  bad([](Options& o) { o.gpu_counts = "8"; }, "--gpu-counts");
  bad([](Options& o) { o.gpu_counts = "0"; }, "--gpu-counts");
  bad([](Options& o) { o.batch_sizes = "0"; }, "--batch-sizes");
  bad([](Options& o) { o.seq_len = -1; }, "--seq-len");
  bad([](Options& o) { o.seq_len = (1 << 20) + 1; }, "--seq-len");
  bad([](Options& o) { o.bucket_size = "100KB"; }, "--bucket-size");
  bad([](Options& o) { o.bucket_size = "100TB"; }, "--bucket-size");
  bad([](Options& o) { o.bucket_sweep = "5MB,x"; }, "--bucket-sweep");
  bad([](Options& o) { o.bucket_sweep = "1KB"; }, "--bucket-sweep");
  bad([](Options& o) { o.layers = 1000; }, "--layers");
  bad([](Options& o) { o.dtype = "fp8"; }, "--dtype");
  bad([](Options& o) { o.timeout = 0; }, "--timeout");
  // GPU counts are checked against the GPUs only when they are known.
  Options o;
  o.gpu_counts = "8";
  EXPECT_EQ(settings_error(o, -1), "");
}

TEST(DpPlan, BucketsHoldWholeUnitsFromTheHeadBackwards) {
  const auto params = two_layers();
  // Buckets of at least 80,000 elements, 4 ranks.
  const ParamPlan p = plan_params(params, 80'000, 4);
  ASSERT_GE(p.buckets.size(), 2u);
  EXPECT_EQ(p.buckets[0].last_unit, 4);  // the head's bucket first
  std::int64_t params_elems = 0;
  for (const auto& t : params) params_elems += t.elems();
  EXPECT_EQ(p.params, params_elems);
  std::int64_t covered = 0;
  for (std::size_t b = 0; b < p.buckets.size(); ++b) {
    const Bucket& k = p.buckets[b];
    EXPECT_EQ(k.elems % (4 * kAlign), 0) << b;
    EXPECT_EQ(k.begin % (4 * kAlign), 0) << b;
    covered += k.elems;
    // Every bucket but the one that ends the model (the first layers) reaches the size.
    std::int64_t held = 0;
    for (std::size_t i = 0; i < params.size(); ++i)
      if (params[i].unit >= k.first_unit && params[i].unit <= k.last_unit) {
        held += params[i].elems();
        EXPECT_GE(p.offset[i], k.begin);
        EXPECT_LE(p.offset[i] + params[i].elems(), k.begin + k.elems);
        EXPECT_EQ(p.offset[i] % kAlign, 0);
        EXPECT_EQ(p.bucket_of_unit[static_cast<std::size_t>(params[i].unit)], static_cast<int>(b));
      }
    if (k.first_unit > 0) {
      EXPECT_GE(held, 80'000) << b;
    }
    if (b > 0) {
      EXPECT_EQ(k.last_unit + 1, p.buckets[b - 1].first_unit);
    }
    // Shards: equal chunks, one after another, each rank's in its shard in bucket order.
    for (int r = 0; r < 4; ++r)
      EXPECT_EQ(p.chunk_begin(static_cast<int>(b), r), k.begin + r * k.elems / 4);
    EXPECT_EQ(p.shard_offset(static_cast<int>(b)), k.begin / 4);
    EXPECT_EQ(p.owner(k.begin), 0);
    EXPECT_EQ(p.owner(k.begin + k.elems - 1), 3);
  }
  EXPECT_EQ(covered, p.total);
  EXPECT_EQ(p.shard_elems() * 4, p.total);
  EXPECT_EQ(p.offset[0], 0);  // forward order in memory: the first parameter first
}

TEST(DpPlan, FsdpBucketsAreLayersAndTheHead) {
  const ParamPlan p = plan_params(two_layers(), 0, 2);
  ASSERT_EQ(p.buckets.size(), 3u);
  EXPECT_EQ(p.buckets[0].first_unit, 4);
  EXPECT_EQ(p.buckets[0].last_unit, 4);
  EXPECT_EQ(p.buckets[1].first_unit, 2);
  EXPECT_EQ(p.buckets[1].last_unit, 3);
  EXPECT_EQ(p.buckets[2].first_unit, 0);
  EXPECT_EQ(p.buckets[2].last_unit, 1);
  EXPECT_EQ(p.buckets[0].elems, 100'096);  // the head's 100,000, padded to 2 x 128
  // A layer: 30,000 + 10,000 + 50,000 + 25,000, each aligned to 128, padded to 2 x 128.
  EXPECT_EQ(p.buckets[1].elems, 115'456);
  EXPECT_EQ(p.largest, 115'456);
}

TEST(DpPlan, RefusesWhatCannotBeLaidOut) {
  EXPECT_NE(input_error_of([] { (void)plan_params({}, 100, 2); }), "");
  EXPECT_NE(input_error_of([] { (void)plan_params(two_layers(), 100, 0); }), "");
  EXPECT_NE(input_error_of([] { (void)plan_params(two_layers(), -1, 2); }), "");
  auto backwards = two_layers();
  backwards[3].unit = 0;
  EXPECT_NE(input_error_of([] { (void)plan_params({{0, 10, 10}, {2, 10, 10}}, 100, 2); }), "");
  EXPECT_NE(input_error_of([&] { (void)plan_params(backwards, 100, 2); }), "");
  const ParamPlan p = plan_params(two_layers(), 0, 2);
  EXPECT_NE(input_error_of([&] { (void)p.owner(p.total); }), "");
}

TEST(DpMemory, EachStrategyHoldsItsShare) {
  const ParamPlan p = plan_params(two_layers(), 0, 4);
  const std::uint64_t P = static_cast<std::uint64_t>(p.total), S = P / 4,
                      B = static_cast<std::uint64_t>(p.largest);
  const MemoryPlan ddp = memory_plan(Strategy::Ddp, p, 2, 1000);
  EXPECT_EQ(ddp.params, 2 * P);
  EXPECT_EQ(ddp.grads, 2 * P);
  EXPECT_EQ(ddp.optimizer, 12 * P);
  EXPECT_EQ(ddp.activations, 1000u);
  EXPECT_EQ(ddp.total(), 16 * P + 1000);
  const MemoryPlan z1 = memory_plan(Strategy::Zero1, p, 2, 0);
  EXPECT_EQ(z1.params, 2 * P);
  EXPECT_EQ(z1.grads, 2 * P);
  EXPECT_EQ(z1.optimizer, 12 * S);
  const MemoryPlan z2 = memory_plan(Strategy::Zero2, p, 2, 0);
  EXPECT_EQ(z2.params, 2 * P);
  EXPECT_EQ(z2.grads, 2 * S + 4 * B);
  EXPECT_EQ(z2.optimizer, 12 * S);
  const MemoryPlan f = memory_plan(Strategy::Fsdp, p, 2, 0);
  EXPECT_EQ(f.params, 2 * S + 4 * B);
  EXPECT_EQ(f.grads, 2 * S + 4 * B);
  EXPECT_EQ(f.optimizer, 12 * S);
  EXPECT_EQ(f.to_json()["total"], f.total());
}

TEST(DpAdamW, FirstStepsByHand) {
  const AdamW h;  // lr 1e-4, betas 0.9 / 0.95, eps 1e-8, weight decay 0.1
  float w = 1.0f, m = 0, v = 0;
  adamw_update(w, m, v, 0.5f, h, adamw_terms(h, 1));
  // m = 0.05, v = 0.0125; corrected 0.5 and 0.25: the step is lr x 0.5 / 0.5 = lr.
  EXPECT_NEAR(m, 0.05, 1e-7);
  EXPECT_NEAR(v, 0.0125, 1e-8);
  EXPECT_NEAR(w, 1.0 * (1 - 1e-5) - 1e-4 * 0.5 / (0.5 + 1e-8), 1e-7);
  // Step 2 with g = -0.5: m = 0.9 x 0.05 - 0.05 = -0.005, v = 0.95 x 0.0125 + 0.0125.
  const float w1 = w;
  adamw_update(w, m, v, -0.5f, h, adamw_terms(h, 2));
  const double mh = -0.005 / (1 - 0.81), vh = (0.95 * 0.0125 + 0.0125) / (1 - 0.9025);
  EXPECT_NEAR(w, w1 * (1 - 1e-5) - 1e-4 * mh / (std::sqrt(vh) + 1e-8), 1e-7);
}

TEST(DpTrace, SpansBecomeChromeEvents) {
  const auto t = chrome_trace(
      {{"F head", 0, 0.001, 0.002}, {"all-reduce bucket 0", 1, 0.002, 0.0025}}, "ddp on 2 GPUs");
  const auto& ev = t["traceEvents"];
  ASSERT_EQ(ev.size(), 4u);  // two lane names, two spans
  EXPECT_EQ(ev[2]["name"], "F head");
  EXPECT_DOUBLE_EQ(ev[2]["ts"].get<double>(), 1000.0);
  EXPECT_DOUBLE_EQ(ev[2]["dur"].get<double>(), 1000.0);
  EXPECT_EQ(ev[3]["tid"], 1);
  EXPECT_EQ(ev[3]["cat"], "communication");
  EXPECT_EQ(t["otherData"]["title"], "ddp on 2 GPUs");
}
