// Host side of `gpubench advise`: the settings and their checks, the layouts a model allows and
// where a rank sits in one, microbatches, plans (stages, memory, why a layout cannot run), the
// blocks a plan needs, the prediction's formulas against hand-computed values, and error_pct.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include <filesystem>

#include "advise_fixtures.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/gemm.hpp"
#include "gpubench/core/report.hpp"
#include "gpubench/model/cost.hpp"
#include "gpubench/model/presets.hpp"
#include "gpubench/modules/advise/advise.hpp"
#include "input_error.hpp"

using namespace gpubench;
using namespace gpubench::advise;
using gpubench::testing::contains;
using gpubench::testing::expect_rel;
using gpubench::testing::input_error_of;
using gpubench::testing::kGiB;
using gpubench::testing::plan_of;
using gpubench::testing::small_settings;

namespace {

// The one-line InputError resolve_settings throws for `o`, or "" when it throws none.
std::string settings_error(const Options& o) {
  return input_error_of([&] { (void)resolve_settings(o, false); });
}

// "--option: why", on one line.
bool names_option(const std::string& message, const std::string& option) {
  return message.rfind(option + ":", 0) == 0 && !contains(message, "\n");
}

template <class T>
std::vector<T> sorted(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST(AdviseSettings, Defaults) {
  const Settings s = resolve_settings(Options{}, false);
  EXPECT_EQ(s.model.hidden_size, 4096);
  EXPECT_EQ(s.layers, 32);  // every decoder layer of llama-2-7b
  EXPECT_EQ(s.workloads,
            (std::vector<Workload>{Workload::Latency, Workload::Throughput, Workload::Train}));
  EXPECT_EQ(s.prompt, 1024);
  EXPECT_EQ(s.output_len, 128);
  EXPECT_EQ(s.batch_sizes, (std::vector<std::int64_t>{8, 32}));
  EXPECT_EQ(s.memory_bytes, 0u);  // each GPU's free memory
  EXPECT_EQ(s.elem_bytes, 2);     // bf16
  EXPECT_EQ(s.top, 3);
  EXPECT_EQ(s.timeout_s, 600);
  EXPECT_EQ(s.small_collectives, "auto");
  EXPECT_EQ(s.small_all_reduces, "");  // decided on the GPUs
  EXPECT_FALSE(s.to_json().contains("small_all_reduces"));
  EXPECT_EQ(s.layouts, "");
  EXPECT_EQ(s.to_json()["layouts"], "every");
  const Settings q = resolve_settings(Options{}, true);
  EXPECT_EQ(q.prompt, 512);
  EXPECT_EQ(q.output_len, 32);
  EXPECT_EQ(q.batch_sizes, (std::vector<std::int64_t>{16}));
  EXPECT_EQ(q.top, 1);  // quick: the best predicted layout beside the baseline
  EXPECT_EQ(std::string(to_string(Workload::Latency)), "latency");
  EXPECT_EQ(std::string(to_string(Workload::Throughput)), "throughput");
}

TEST(AdviseSettings, GivenValues) {
  Options o;
  o.workload = "throughput";
  o.prompt = 64;
  o.output_len = 8;
  o.batch_sizes = "32,8";  // kept ascending
  o.memory = 80;           // GiB
  o.top = 16;
  o.layouts = " tp=4,tp=2xpp=2,pp=4 ";  // against the run's GPU count in run(), the rest here
  const Settings s = resolve_settings(o, true);  // given values win over quick's defaults
  EXPECT_EQ(s.layouts, "tp=4,tp=2xpp=2,pp=4");
  EXPECT_EQ(s.to_json()["layouts"], "tp=4,tp=2xpp=2,pp=4");
  EXPECT_EQ(s.workloads, (std::vector<Workload>{Workload::Throughput}));
  EXPECT_EQ(s.prompt, 64);
  EXPECT_EQ(s.output_len, 8);
  EXPECT_EQ(s.batch_sizes, (std::vector<std::int64_t>{8, 32}));
  EXPECT_EQ(s.memory_bytes, 80 * kGiB);
  EXPECT_EQ(s.top, 16);
  o.top = 0;  // only the baseline: allowed
  o.batch_sizes = "1,4096";
  EXPECT_EQ(settings_error(o), "");
}

// Every bad value: one line that starts with the option it came from.
TEST(AdviseSettings, BadValuesNameTheirOption) {
  const auto error = [](auto set) {
    Options o;
    set(o);
    return settings_error(o);
  };
  EXPECT_TRUE(names_option(error([](Options& o) { o.workload = "batch"; }), "--workload"));
  // 0 is "the default" for the lengths: the bad ones are below 1 or past 1 << 20.
  EXPECT_TRUE(names_option(error([](Options& o) { o.prompt = -1; }), "--prompt"));
  EXPECT_TRUE(names_option(error([](Options& o) { o.prompt = (1 << 20) + 1; }), "--prompt"));
  EXPECT_TRUE(names_option(error([](Options& o) { o.output_len = -1; }), "--output-len"));
  EXPECT_TRUE(
      names_option(error([](Options& o) { o.output_len = (1 << 20) + 1; }), "--output-len"));
  EXPECT_TRUE(names_option(error([](Options& o) { o.batch_sizes = "0"; }), "--batch-sizes"));
  EXPECT_TRUE(names_option(error([](Options& o) { o.batch_sizes = "5000"; }), "--batch-sizes"));
  EXPECT_TRUE(names_option(error([](Options& o) { o.memory = -1; }), "--memory"));
  EXPECT_TRUE(names_option(error([](Options& o) { o.top = -1; }), "--top"));
  EXPECT_TRUE(names_option(error([](Options& o) { o.top = 17; }), "--top"));
  EXPECT_TRUE(names_option(error([](Options& o) { o.timeout = 0; }), "--timeout"));
  EXPECT_TRUE(names_option(error([](Options& o) { o.timeout = -5; }), "--timeout"));
  EXPECT_TRUE(
      names_option(error([](Options& o) { o.small_collectives = "nvls"; }), "--small-collectives"));
  // Layouts: all but the GPU count, before any GPU is looked at.
  EXPECT_TRUE(names_option(error([](Options& o) { o.layouts = "tp4"; }), "--layouts"));
  EXPECT_TRUE(names_option(error([](Options& o) { o.layouts = "tp=3"; }), "--layouts"));
  EXPECT_TRUE(names_option(error([](Options& o) { o.layouts = "tp=4,pp=2"; }), "--layouts"));
  EXPECT_EQ(error([](Options& o) { o.layouts = "all"; }), "");
}

// Ordered by tp, then pp; dp fills the rest.
TEST(AdviseLayouts, EveryLayoutOfFourGpus) {
  const model::ModelConfig m = model::load_preset("llama-2-7b");
  EXPECT_EQ(
      parallel::every_layout(4, m),
      (std::vector<Layout>{{4, 1, 1}, {2, 1, 2}, {1, 1, 4}, {2, 2, 1}, {1, 2, 2}, {1, 4, 1}}));
  EXPECT_EQ(parallel::every_layout(1, m), (std::vector<Layout>{{1, 1, 1}}));
}

// 32 heads do not split 3 ways: no tp=3.
TEST(AdviseLayouts, TensorParallelismMustSplitTheModel) {
  const model::ModelConfig m = model::load_preset("llama-2-7b");
  EXPECT_EQ(parallel::every_layout(3, m), (std::vector<Layout>{{3, 1, 1}, {1, 1, 3}}));
  EXPECT_THROW((void)parallel::every_layout(0, m), InputError);
}

// rank = ((replica x pp) + stage) x tp + tensor rank.
TEST(AdviseLayouts, PlaceOfEveryRank) {
  const Layout l{2, 2, 2};
  EXPECT_EQ(l.gpus(), 8);
  const int expected[8][3] = {{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1, 1},
                              {1, 0, 0}, {1, 0, 1}, {1, 1, 0}, {1, 1, 1}};  // replica, stage, trank
  for (int r = 0; r < 8; ++r) {
    const parallel::Place p = parallel::Place::of(l, r);
    EXPECT_EQ(p.replica, expected[r][0]) << r;
    EXPECT_EQ(p.stage, expected[r][1]) << r;
    EXPECT_EQ(p.trank, expected[r][2]) << r;
  }
}

// The count m: the largest divisor of the sequences that is at most pp.
TEST(AdviseMicrobatches, LargestDivisorAtMostPp) {
  EXPECT_EQ(microbatches(1, 4), 1);
  EXPECT_EQ(microbatches(8, 1), 1);
  EXPECT_EQ(microbatches(8, 2), 2);
  EXPECT_EQ(microbatches(8, 4), 4);
  EXPECT_EQ(microbatches(6, 4), 3);  // divisors 1, 2, 3, 6
  EXPECT_EQ(microbatches(5, 4), 1);  // prime: one microbatch
  EXPECT_EQ(microbatches(16, 8), 8);
}

// One GPU holds the whole model: weights alone are 6.74e9 parameters x 2 bytes.
TEST(AdvisePlan, OneGpu) {
  const Settings s = resolve_settings(Options{}, false);
  const Plan p = plan_of(s, Layout{1, 1, 1}, Workload::Latency, 1);
  EXPECT_EQ(p.why_not, "");
  EXPECT_EQ(p.stage_layers, (std::vector<int>{32}));
  EXPECT_EQ(p.batch, 1);
  EXPECT_EQ(p.sequences, 1);
  EXPECT_EQ(p.m, 1);
  EXPECT_EQ(p.micro, 1);
  EXPECT_GT(p.memory_per_gpu, 13'000'000'000ull);
  EXPECT_EQ(p.memory_per_gpu,
            model::engine_memory(s.model, rank_engine_options(s, p, 0, 0), gemm_workspace_bytes(9))
                    .total() +
                parallel::kMemoryReserve);
}

// A rank's engine: its stage's layers and tensor shard, the replica's sequences, the prompt and
// every generated token but the last.
// Microbatch 0's reference is shared by every layout of its microbatch size: its sequences'
// prompts and fed tokens must not depend on how many microbatches the replica runs.
TEST(AdvisePlan, TokensOfASequenceDoNotDependOnTheMicrobatches) {
  Options o;
  o.prompt = 16;
  o.output_len = 6;
  const Settings s = resolve_settings(o, false);
  Plan one, two;
  one.m = 1;
  two.m = 2;
  one.micro = two.micro = 2;
  const Tokens a = token_ids(s, one), b = token_ids(s, two);
  ASSERT_EQ(a.prompts.size(), 2u * 16);
  ASSERT_EQ(b.prompts.size(), 4u * 16);
  ASSERT_EQ(b.steps.size(), 5u * 4);
  for (std::size_t q = 0; q < 2; ++q) {
    for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(a.prompts[q * 16 + i], b.prompts[q * 16 + i]);
    for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(a.steps[i * 2 + q], b.steps[i * 4 + q]) << i;
  }
  EXPECT_NE(std::vector<std::int32_t>(b.prompts.begin(), b.prompts.begin() + 16),
            std::vector<std::int32_t>(b.prompts.begin() + 16, b.prompts.begin() + 32));
  for (std::int32_t id : b.steps) EXPECT_TRUE(id >= 0 && id < s.model.vocab_size);
}

TEST(AdvisePlan, RankEngineOptions) {
  const Settings s = small_settings();
  const Plan p = plan_of(s, Layout{1, 2, 2}, Workload::Throughput, 4);
  ASSERT_EQ(p.stage_layers, (std::vector<int>{16, 16}));
  const model::EngineOptions first = rank_engine_options(s, p, 0, 1);
  EXPECT_EQ(first.tp_size, 2);
  EXPECT_EQ(first.tp_rank, 1);
  EXPECT_EQ(first.first_layer, 0);
  EXPECT_EQ(first.layers, 16);
  EXPECT_TRUE(first.embed);
  EXPECT_FALSE(first.head);
  ASSERT_EQ(p.m, 2);
  EXPECT_EQ(first.max_batch, 2);    // a step: one microbatch
  EXPECT_EQ(first.cache_batch, 4);  // the cache: every microbatch's sequences
  EXPECT_EQ(first.max_tokens, 16);
  EXPECT_EQ(first.max_context, 16 + 5 - 1);
  const model::EngineOptions last = rank_engine_options(s, p, 1, 0);
  EXPECT_EQ(last.first_layer, 16);
  EXPECT_FALSE(last.embed);
  EXPECT_TRUE(last.head);
}

// Equal layers split evenly; a head worth 4 layers moves them to the first stage (36 units:
// 18 | 14 + 4); the memory is the larger stage's engine.
TEST(AdvisePlan, PipelineStages) {
  const Settings s = resolve_settings(Options{}, false);
  const Plan even = plan_of(s, Layout{1, 1, 2}, Workload::Latency, 1);
  EXPECT_EQ(even.why_not, "");
  EXPECT_EQ(even.stage_layers, (std::vector<int>{16, 16}));
  const Plan head =
      make_plan(s, Layout{1, 1, 2}, Workload::Latency, 1, Parts{1, 0, 4}, 9, 80 * kGiB);
  EXPECT_EQ(head.stage_layers, (std::vector<int>{18, 14}));
  const auto stage = [&](int k) {
    return model::engine_memory(s.model, rank_engine_options(s, head, k, 0),
                                gemm_workspace_bytes(9))
        .total();
  };
  EXPECT_EQ(head.memory_per_gpu, std::max(stage(0), stage(1)) + parallel::kMemoryReserve);
  // --layers below the stages: that layout cannot run, the others still can.
  Options o;
  o.layers = 3;
  const Settings cut = resolve_settings(o, false);
  EXPECT_EQ(plan_of(cut, Layout{1, 1, 4}, Workload::Latency, 1).why_not, "4 stages for 3 layers");
  EXPECT_EQ(plan_of(cut, Layout{1, 1, 2}, Workload::Latency, 1).why_not, "");
}

// Throughput: a replica's share of the batch, in microbatches over the stages.
TEST(AdvisePlan, ThroughputSplits) {
  const Settings s = resolve_settings(Options{}, false);
  const Plan pp4 = plan_of(s, Layout{1, 1, 4}, Workload::Throughput, 8);
  EXPECT_EQ(pp4.why_not, "");
  EXPECT_EQ(pp4.batch, 8);
  EXPECT_EQ(pp4.sequences, 8);
  EXPECT_EQ(pp4.m, 4);
  EXPECT_EQ(pp4.micro, 2);
  const Plan dp2 = plan_of(s, Layout{2, 1, 1}, Workload::Throughput, 8);
  EXPECT_EQ(dp2.sequences, 4);
  EXPECT_EQ(dp2.m, 1);
  EXPECT_EQ(dp2.micro, 4);
  // 2 replicas do not split 3 sequences.
  EXPECT_NE(plan_of(s, Layout{2, 1, 1}, Workload::Throughput, 3).why_not, "");
}

// llama-2-70b's weights (~138 GB) do not fit one 80 GiB GPU; a quarter of its layers do.
TEST(AdvisePlan, MemoryDecidesWhatFits) {
  Options o;
  o.model = "llama-2-70b";
  const Settings s = resolve_settings(o, false);
  const Plan one = plan_of(s, Layout{1, 1, 1}, Workload::Latency, 1);
  EXPECT_GT(one.memory_per_gpu, 80 * kGiB);
  EXPECT_TRUE(contains(one.why_not, "memory")) << one.why_not;
  const Plan tp4 = plan_of(s, Layout{1, 4, 1}, Workload::Latency, 1);
  EXPECT_EQ(tp4.why_not, "");
  EXPECT_LT(tp4.memory_per_gpu, 80 * kGiB);
}

// One GPU's needs: its compute parts only, no communication.
TEST(AdviseNeeds, OneGpu) {
  const Settings s = small_settings();
  const Needs n = needs_of(s, plan_of(s, Layout{1, 1, 1}, Workload::Latency, 1));
  EXPECT_EQ(n.compute, (std::vector<Blocks::Key>{{1, 1}}));
  EXPECT_TRUE(n.all_reduces.empty());
  EXPECT_TRUE(n.transfers.empty());
}

// tp=2: the shard's parts and the all-reduces of both phases: prefill micro x prompt x hidden
// x 2 bytes = 1 x 16 x 4096 x 2 = 131072, decode micro x hidden x 2 = 8192.
TEST(AdviseNeeds, TensorParallelAllReduces) {
  const Settings s = small_settings();
  const Needs n = needs_of(s, plan_of(s, Layout{1, 2, 1}, Workload::Latency, 1));
  EXPECT_EQ(n.compute, (std::vector<Blocks::Key>{{2, 1}}));
  EXPECT_EQ(sorted(n.all_reduces),
            (std::vector<std::pair<int, std::uint64_t>>{{2, 8192}, {2, 131072}}));
  EXPECT_TRUE(n.transfers.empty());
}

TEST(AdviseNeeds, MergeIsSortedAndUnique) {
  const Settings s = small_settings();
  const Needs one = needs_of(s, plan_of(s, Layout{1, 1, 1}, Workload::Latency, 1));
  const Needs tp2 = needs_of(s, plan_of(s, Layout{1, 2, 1}, Workload::Latency, 1));
  const Needs same = merge({tp2, tp2});
  EXPECT_EQ(same.compute, sorted(tp2.compute));
  EXPECT_EQ(same.all_reduces, sorted(tp2.all_reduces));
  EXPECT_EQ(same.transfers, sorted(tp2.transfers));
  const Needs both = merge({tp2, one});
  EXPECT_EQ(both.compute, (std::vector<Blocks::Key>{{1, 1}, {2, 1}}));
  EXPECT_EQ(both.all_reduces, sorted(tp2.all_reduces));
}

// One GPU, L = 32, 5 tokens: prefill 32 x 1e-3 + 2e-4 + 5e-4 = 0.0327; decode at the mean of
// the two contexts 32 x 2e-5 + 3e-6 + 4e-6 = 6.47e-4; e2e 0.0327 + 4 x 6.47e-4 = 0.035288.
TEST(AdvisePredict, OneGpu) {
  const Settings s = small_settings();
  const Plan p = plan_of(s, Layout{1, 1, 1}, Workload::Latency, 1);
  Blocks b;
  b.prefill[{1, 1}] = {1e-3, 2e-4, 5e-4};
  b.decode_first[{1, 1}] = {1e-5, 2e-6, 3e-6};
  b.decode_last[{1, 1}] = {3e-5, 4e-6, 5e-6};
  const Prediction r = predict(s, p, b);
  expect_rel(r.ttft_s, 0.0327);
  expect_rel(r.tpot_s, 6.47e-4);
  expect_rel(r.e2e_s, 0.035288);
  expect_rel(r.tokens_per_s, 1 * 5 / 0.035288);
  EXPECT_EQ(r.comm_s, 0.0);
  expect_rel(r.compute_s + r.comm_s + r.wait_s, r.e2e_s);
}

// The rooflines of the busiest GPU: one GPU reads every layer's bytes and the ends in a decode
// step, half a layer's at tp=2 (the head whole); the finding states them against the peaks only
// when the peaks are known.
TEST(AdvisePredict, RooflinesOfTheBusiestGpu) {
  const Settings s = small_settings();
  Blocks b;
  for (int t : {1, 2}) {
    b.prefill[{t, 1}] = {1e-3, 2e-4, 5e-4};
    b.decode_first[{t, 1}] = {1e-5, 2e-6, 3e-6};
    b.decode_last[{t, 1}] = {3e-5, 4e-6, 5e-6};
  }
  b.all_reduce_s[{2, 131072}] = 7e-5;
  b.all_reduce_s[{2, 8192}] = 1.1e-5;
  const Plan one = plan_of(s, Layout{1, 1, 1}, Workload::Latency, 1);
  const Plan two = plan_of(s, Layout{1, 2, 1}, Workload::Latency, 1);
  const Prediction a = predict(s, one, b), c = predict(s, two, b);
  const model::ModelCost dec =
      model::model_cost(s.model, model::Phase::Decode, 1, 1, s.prompt + 1, s.elem_bytes);
  const double layer = model::totals(dec.layer).bytes;
  const double ends = dec.total.bytes - 32 * layer;
  expect_rel(a.decode_bytes, dec.total.bytes);
  expect_rel(c.decode_bytes, 32 * layer / 2 + ends);
  expect_rel(a.decode_compute_s, a.tpot_s);  // nothing else on one GPU
  expect_rel(a.prefill_compute_s, a.ttft_s);
  EXPECT_LT(c.decode_compute_s, c.tpot_s);  // the all-reduces left out
  const std::string plain = explain(one, a, a);
  EXPECT_FALSE(contains(plain, "HBM peak"));
  const std::string full = explain(one, a, a, 3350, 989);
  EXPECT_TRUE(contains(full, "of the HBM peak")) << full;
  EXPECT_TRUE(contains(full, "of the dense peak")) << full;
  EXPECT_TRUE(contains(explain(two, c, a), "against")) << explain(two, c, a);
}

// tp=2: 2 L = 64 all-reduces a step, prefill's of 131072 bytes (7e-5 s), decode's of 8192
// (1.1e-5 s). TTFT 32 x 6e-4 + 7e-4 + 64 x 7e-5 = 0.02438; TPOT 32 x 1e-5 + 7e-6 + 64 x 1.1e-5
// = 1.031e-3; e2e 0.02438 + 4 x 1.031e-3 = 0.028504; all-reduces 64 x 7e-5 + 4 x 64 x 1.1e-5.
TEST(AdvisePredict, TensorParallel) {
  const Settings s = small_settings();
  const Plan p = plan_of(s, Layout{1, 2, 1}, Workload::Latency, 1);
  Blocks b;
  b.prefill[{2, 1}] = {6e-4, 2e-4, 5e-4};
  b.decode_first[{2, 1}] = {8e-6, 2e-6, 3e-6};
  b.decode_last[{2, 1}] = {1.2e-5, 4e-6, 5e-6};
  b.all_reduce_s[{2, 131072}] = 7e-5;
  b.all_reduce_s[{2, 8192}] = 1.1e-5;
  const Prediction r = predict(s, p, b);
  expect_rel(r.ttft_s, 0.02438);
  expect_rel(r.tpot_s, 1.031e-3);
  expect_rel(r.e2e_s, 0.028504);
  expect_rel(r.tokens_per_s, 5 / 0.028504);
  expect_rel(r.comm_s, 64 * 7e-5 + 4 * 64 * 1.1e-5);  // 0.007296
  expect_rel(r.compute_s + r.comm_s + r.wait_s, r.e2e_s);
}

// pp=2, batch 4: m = 2 microbatches of 2, stages of 16 layers. Transfers: prefill's hidden
// states 2 x 16 x 4096 x 2 = 262144 bytes, decode's 2 x 4096 x 2 = 16384, and the ring's next
// tokens (the third size needs_of asks for). Prefill F0 = 16e-3 + 2e-4 = 0.0162,
// F1 = 16e-3 + 6e-4 = 0.0166; decode D0 = 16 x 2e-5 + 2e-6 = 3.22e-4, D1 = 3.26e-4.
TEST(AdvisePredict, Pipeline) {
  const Settings s = small_settings();
  const Plan p = plan_of(s, Layout{1, 1, 2}, Workload::Throughput, 4);
  ASSERT_EQ(p.m, 2);
  ASSERT_EQ(p.micro, 2);
  ASSERT_EQ(p.stage_layers, (std::vector<int>{16, 16}));
  const Needs n = needs_of(s, p);
  EXPECT_EQ(n.compute, (std::vector<Blocks::Key>{{1, 2}}));
  EXPECT_TRUE(n.all_reduces.empty());
  const std::vector<std::uint64_t> sizes = sorted(n.transfers);
  ASSERT_EQ(sizes.size(), 3u);
  EXPECT_EQ(std::count(sizes.begin(), sizes.end(), 262144u), 1);
  EXPECT_EQ(std::count(sizes.begin(), sizes.end(), 16384u), 1);
  const std::uint64_t tokens = *std::find_if(
      sizes.begin(), sizes.end(), [](std::uint64_t x) { return x != 262144 && x != 16384; });
  Blocks b;
  b.prefill[{1, 2}] = {1e-3, 2e-4, 6e-4};
  b.decode_first[{1, 2}] = {1e-5, 2e-6, 4e-6};
  b.decode_last[{1, 2}] = {3e-5, 2e-6, 8e-6};
  // Played out by hand (play_pipeline's rules): microbatch 1 reaches stage 1 once stage 0 has
  // computed it and stage 1 is through microbatch 0: TTFT = F0 + X + F1 + (X + F1) = 0.0504. In
  // decode the first stage paces each microbatch: the tokens back (3e-5), D0, its send (5e-5):
  // 2 x 4.02e-4 a step after the first, which ends at 0.051178; whole 0.051178 + 3 x 8.04e-4 =
  // 0.05359, TPOT (0.05359 - 0.0504) / 4 = 7.975e-4.
  b.transfer_s = {{262144, 5e-4}, {16384, 5e-5}, {tokens, 3e-5}};
  Prediction r = predict(s, p, b);
  expect_rel(r.ttft_s, 0.0504);
  expect_rel(r.e2e_s, 0.05359);
  expect_rel(r.tpot_s, 7.975e-4);
  expect_rel(r.tokens_per_s, 4 * 5 / 0.05359);
  EXPECT_EQ(r.comm_s, 0.0);
  // A slow hand-off: the second microbatch's prefill waits for the first's to leave stage 0 and
  // then for stage 1: TTFT = 0.0162 + 0.02 + 0.0166 + (0.02 + 0.0166) = 0.0894 (max(F, X) would
  // say 0.0728). Decode: the last stage paces, X in + D1 = 3.27e-4 a microbatch; the first step
  // ends at 0.090054, the whole at 0.090054 + 3 x 6.54e-4 = 0.092016.
  b.transfer_s = {{262144, 0.02}, {16384, 1e-6}, {tokens, 2e-6}};
  r = predict(s, p, b);
  expect_rel(r.ttft_s, 0.0894);
  expect_rel(r.e2e_s, 0.092016);
  expect_rel(r.tpot_s, (0.092016 - 0.0894) / 4);
}

// A middle stage pays both hand-offs: f = 1, 2, 1 with X = 0.5, two microbatches, no decode:
// microbatch 1 leaves stage 1 at 6.5 (it waited for microbatch 0 to leave at 4), ends at 8 =
// sum F + 2 X + (X + 2 + X). One stage: m f, then m d a step.
TEST(AdvisePredict, PipelinePlayedOut) {
  PipelineTimes t = play_pipeline({1, 2, 1}, {0, 0, 0}, 0.5, 0, 0, 2, 0);
  expect_rel(t.ttft_s, 8);
  expect_rel(t.e2e_s, 8);
  t = play_pipeline({2}, {0.5}, 9, 9, 9, 3, 4);
  expect_rel(t.ttft_s, 6);
  expect_rel(t.e2e_s, 12);
  EXPECT_THROW(play_pipeline({1}, {1, 1}, 0, 0, 0, 1, 1), std::invalid_argument);
  EXPECT_THROW(play_pipeline({1}, {1}, 0, 0, 0, 0, 1), std::invalid_argument);
}

// Every block the plan needs must be there.
TEST(AdvisePredict, MissingBlock) {
  const Settings s = small_settings();
  const Plan p = plan_of(s, Layout{1, 2, 1}, Workload::Latency, 1);
  Blocks b;
  b.prefill[{2, 1}] = {6e-4, 2e-4, 5e-4};
  b.decode_first[{2, 1}] = {8e-6, 2e-6, 3e-6};
  b.decode_last[{2, 1}] = {1.2e-5, 4e-6, 5e-6};
  b.all_reduce_s[{2, 131072}] = 7e-5;
  b.all_reduce_s[{2, 8192}] = 1.1e-5;
  EXPECT_NO_THROW((void)predict(s, p, b));
  for (int drop = 0; drop < 3; ++drop) {
    Blocks less = b;
    if (drop == 0) less.decode_last.clear();
    if (drop == 1) less.all_reduce_s.erase({2, 8192});
    if (drop == 2) less.prefill = {{{1, 1}, Parts{6e-4, 2e-4, 5e-4}}};  // another key's only
    EXPECT_THROW((void)predict(s, p, less), InputError) << drop;
  }
}

TEST(AdviseError, Percent) {
  EXPECT_DOUBLE_EQ(error_pct(110, 100), 10);
  EXPECT_DOUBLE_EQ(error_pct(90, 100), -10);
  EXPECT_THROW((void)error_pct(1, 0), InputError);
  EXPECT_THROW((void)error_pct(1, -1), InputError);
}

// --from: the blocks an advise run wrote come back the same, and a run of another prompt or
// model, a report of another module or a broken list is refused naming --from.
TEST(AdviseFrom, BlocksRoundTripThroughAReport) {
  const Settings s = small_settings();
  Blocks b;
  b.prefill[{1, 2}] = {1e-3, 2e-5, 3e-4};
  b.decode_first[{1, 2}] = {1e-4, 1e-5, 8e-5};
  b.decode_last[{1, 2}] = {1.1e-4, 1e-5, 8e-5};
  b.all_reduce_s[{2, 8192}] = 9e-6;
  b.transfer_s[8] = 5e-6;
  const Blocks back = Blocks::from_json(b.to_json());
  EXPECT_EQ(back.to_json(), b.to_json());

  const auto dir = std::filesystem::temp_directory_path() /
                   ("gpubench_advise_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  Report r;
  r.module = "advise";
  r.config = s.to_json();
  r.extra["blocks"] = b.to_json();
  write_report_files(dir, r);
  EXPECT_EQ(blocks_from_run(dir.string(), s).to_json(), b.to_json());

  Settings other = s;
  other.prompt = 64;
  EXPECT_TRUE(names_option(input_error_of([&] { (void)blocks_from_run(dir.string(), other); }),
                           "--from"));
  EXPECT_TRUE(contains(input_error_of([&] { (void)blocks_from_run(dir.string(), other); }),
                       "prompt"));
  other = s;
  other.model = model::load_preset("llama-2-13b");
  EXPECT_TRUE(contains(input_error_of([&] { (void)blocks_from_run(dir.string(), other); }),
                       "model"));
  // Its all-reduces were NCCL's: a run whose small ones take the one-shot kernel cannot use
  // them; blocks without all-reduces (one GPU) serve either.
  other = s;
  other.small_all_reduces = "one-shot";
  EXPECT_TRUE(contains(input_error_of([&] { (void)blocks_from_run(dir.string(), other); }),
                       "small all-reduces over nccl, this run one-shot"));
  Blocks one_gpu = b;
  one_gpu.all_reduce_s.clear();
  r.extra["blocks"] = one_gpu.to_json();
  write_report_files(dir, r);
  EXPECT_EQ(blocks_from_run(dir.string(), other).to_json(), one_gpu.to_json());
  r.module = "tp";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  write_report_files(dir, r);
  EXPECT_TRUE(contains(input_error_of([&] { (void)blocks_from_run(dir.string(), s); }),
                       "no advise report"));
  std::filesystem::remove_all(dir);

  auto broken = b.to_json();
  broken["prefill"][0]["layer_s"] = -1;
  EXPECT_TRUE(contains(input_error_of([&] { (void)Blocks::from_json(broken); }), "layer_s"));
  broken = b.to_json();
  broken.erase("transfer");
  EXPECT_TRUE(contains(input_error_of([&] { (void)Blocks::from_json(broken); }), "transfer"));
}

// A step's parts from three timings: 2 layers with the head 0.25 s, 8 layers 0.85, 2 without the
// head 0.2. Head 0.05; by difference a layer is 0.1, so the fixed part is 0.25 - 0.2 - 0.05 = 0;
// a layer from the larger step (0.85 - 0.05 - 0) / 8. Nothing negative; one size alone gives the
// fixed part nothing.
TEST(AdviseCalibration, PartsOfThreeSteps) {
  EXPECT_EQ(calibration_layers(32), (std::pair<int, int>{2, 8}));
  EXPECT_EQ(calibration_layers(4), (std::pair<int, int>{1, 4}));
  EXPECT_EQ(calibration_layers(1), (std::pair<int, int>{1, 1}));
  Parts p = parts_of_steps(2, 8, 0.25, 0.85, 0.2);
  EXPECT_NEAR(p.head, 0.05, 1e-12);
  EXPECT_NEAR(p.embed, 0.0, 1e-12);
  EXPECT_NEAR(p.layer, 0.8 / 8, 1e-12);
  p = parts_of_steps(2, 8, 0.3, 0.85, 0.2);  // a fixed cost of 0.3 - 2 x 0.0917 - 0.1
  EXPECT_NEAR(p.embed, 0.3 - 2 * (0.55 / 6) - 0.1, 1e-12);
  EXPECT_NEAR(p.layer, (0.85 - 0.1 - p.embed) / 8, 1e-12);
  p = parts_of_steps(1, 1, 0.1, 0.1, 0.12);  // the headless step longer: no negative head
  EXPECT_EQ(p.head, 0.0);
  EXPECT_NEAR(p.embed, 0.1, 1e-12);
  EXPECT_EQ(p.layer, 0.0);
}
