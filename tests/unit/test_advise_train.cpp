// Host side of `gpubench advise --workload train`: its settings, the training plans (buckets with
// their units' compute, memory by parallel::memory_plan), the blocks they need, the step's
// prediction against hand-computed values, and the training blocks in JSON.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "advise_fixtures.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/model/training.hpp"
#include "gpubench/modules/advise/advise.hpp"
#include "gpubench/parallel/data_parallel.hpp"
#include "input_error.hpp"

using namespace gpubench;
using namespace gpubench::advise;
using gpubench::parallel::Strategy;
using gpubench::testing::contains;
using gpubench::testing::expect_rel;
using gpubench::testing::input_error_of;
using gpubench::testing::kGiB;

namespace {

// llama-2-7b cut to 2 layers, 4 sequences of 4096 tokens a GPU (the defaults).
Settings train_settings() {
  Options o;
  o.workload = "train";
  o.layers = 2;
  return resolve_settings(o, false);
}

// A replica's parameters as model::TrainStage lists them (each half-layer's two linears, the
// head last), with `rest` bytes besides.
TrainFootprint footprint(const Settings& s, std::uint64_t rest = kGiB) {
  TrainFootprint f;
  const auto linears = model::layer_linears(s.model);  // qkv, attn_out, up(s), down
  for (int l = 0; l < s.layers; ++l)
    for (std::size_t i = 0; i < linears.size(); ++i)
      f.params.push_back({2 * l + (i < 2 ? 0 : 1), linears[i].out, linears[i].in});
  f.params.push_back({2 * s.layers, s.model.vocab_size, s.model.hidden_size});
  f.rest = rest;
  return f;
}

// Training blocks at 4 sequences a GPU.
Blocks train_blocks() {
  Blocks b;
  b.train_forward[4] = {1e-3, 1e-4, 2e-4};
  b.train_backward[4] = {2e-3, 1e-4, 4e-4};
  b.adamw_s = 1e-12;
  return b;
}

}  // namespace

TEST(AdviseTrainSettings, DefaultsAndBadValues) {
  const Settings s = resolve_settings(Options{}, false);
  EXPECT_EQ(s.workloads,
            (std::vector<Workload>{Workload::Latency, Workload::Throughput, Workload::Train}));
  EXPECT_EQ(s.train_batch, 4);
  EXPECT_EQ(s.seq_len, 4096);
  EXPECT_EQ(s.bucket_bytes, 25'000'000u);
  const Settings q = resolve_settings(Options{}, true);
  EXPECT_EQ(q.train_batch, 1);
  EXPECT_EQ(q.seq_len, 1024);
  EXPECT_EQ(std::string(to_string(Workload::Train)), "train");
  EXPECT_EQ(train_settings().workloads, (std::vector<Workload>{Workload::Train}));
  EXPECT_EQ(s.to_json()["train_batch"], 4);
  EXPECT_EQ(s.to_json()["seq_len"], 4096);

  const auto error = [](auto set) {
    Options o;
    set(o);
    return input_error_of([&] { (void)resolve_settings(o, false); });
  };
  EXPECT_EQ(error([](Options& o) { o.train_batch = -1; }).rfind("--train-batch:", 0), 0u);
  EXPECT_EQ(error([](Options& o) { o.train_batch = 4097; }).rfind("--train-batch:", 0), 0u);
  EXPECT_EQ(error([](Options& o) { o.seq_len = -1; }).rfind("--seq-len:", 0), 0u);
  EXPECT_EQ(error([](Options& o) { o.seq_len = (1 << 20) + 1; }).rfind("--seq-len:", 0), 0u);
  EXPECT_TRUE(contains(error([](Options& o) { o.workload = "training"; }), "train"));
}

// One GPU: ddp alone; every unit of llama-2-7b passes 25 MB, so a bucket each, the head first;
// the buckets' compute adds up to the layers; memory is parallel::memory_plan's plus the spare.
TEST(AdviseTrainPlan, OneGpuBucketsAndMemory) {
  const Settings s = train_settings();
  const TrainFootprint f = footprint(s);
  const Plan p = make_train_plan(s, 1, Strategy::Zero1, f, 0);
  EXPECT_EQ(p.strategy, Strategy::Ddp);  // one GPU shares nothing
  EXPECT_EQ(p.name(), "dp=1");
  EXPECT_EQ(p.batch, 4);
  EXPECT_EQ(p.micro, 4);
  ASSERT_EQ(p.buckets.size(), 5u);  // head, then 2 layers' MLP and attention halves
  EXPECT_TRUE(p.buckets[0].head);
  EXPECT_EQ(p.buckets[0].forward_layers, 0.0);
  double fwd = 0, bwd = 0;
  for (const TrainBucket& b : p.buckets) {
    fwd += b.forward_layers;
    bwd += b.backward_layers;
  }
  EXPECT_NEAR(fwd, 2.0, 1e-12);
  EXPECT_NEAR(bwd, 2.0, 1e-12);
  // Bucket 1 is the last layer's MLP half: its share of a layer's FLOPs, from the cost model.
  const auto half = model::stage_work_blocks(s.model, 1, 1, false, 4, 4096, 2);
  const auto layer = model::stage_work_blocks(s.model, 0, 2, false, 4, 4096, 2);
  EXPECT_NEAR(p.buckets[1].forward_layers, half.forward_flops / layer.forward_flops, 1e-12);
  const parallel::ParamPlan pp = parallel::plan_params(f.params, 12'500'000, 1);
  EXPECT_EQ(p.flat, pp.total);
  EXPECT_EQ(p.memory_per_gpu,
            parallel::memory_plan(Strategy::Ddp, pp, 2, kGiB).total() + parallel::kMemoryReserve);
  EXPECT_TRUE(p.why_not.empty());
  EXPECT_TRUE(contains(make_train_plan(s, 1, Strategy::Ddp, f, kGiB).why_not, "does not fit"));
  EXPECT_THROW((void)make_train_plan(s, 0, Strategy::Ddp, f, 0), InputError);
}

// A plan that does not fit says what its memory holds and how many sequences a GPU could train
// instead: the rest of the step (4 GiB here) as 4 equal shares of 1 GiB.
TEST(AdviseTrainPlan, MisfitSaysWhatFits) {
  const Settings s = train_settings();
  const TrainFootprint f = footprint(s, 4 * kGiB);
  const Plan whole = make_train_plan(s, 1, Strategy::Ddp, f, 0);
  const std::uint64_t states = whole.memory_per_gpu - 4 * kGiB;  // with the spare
  const std::string two = make_train_plan(s, 1, Strategy::Ddp, f, states + 2 * kGiB + 1).why_not;
  EXPECT_TRUE(contains(two, "activations of 4 sequences 4 GiB, 1 GiB spare)")) << two;
  EXPECT_TRUE(contains(two, "; 2 sequences a GPU fit (--train-batch)")) << two;
  const std::string one = make_train_plan(s, 1, Strategy::Ddp, f, states + kGiB + 1).why_not;
  EXPECT_TRUE(contains(one, "; 1 sequence a GPU fit")) << one;
  const std::string none = make_train_plan(s, 1, Strategy::Ddp, f, states + kGiB / 2).why_not;
  EXPECT_TRUE(contains(none, "; one sequence needs")) << none;
  const std::string states_alone = make_train_plan(s, 1, Strategy::Ddp, f, states / 2).why_not;
  EXPECT_TRUE(contains(states_alone, "optimizer states alone take")) << states_alone;
  // Sharding the states makes room: four GPUs under fsdp fit where one did not.
  EXPECT_TRUE(make_train_plan(s, 4, Strategy::Fsdp, f, states).why_not.empty());
}

// Four GPUs: the strategy named, the batch four replicas', sharding saves memory, fsdp's buckets
// are layers and the head.
TEST(AdviseTrainPlan, FourGpusEachStrategy) {
  const Settings s = train_settings();
  const TrainFootprint f = footprint(s);
  const Plan ddp = make_train_plan(s, 4, Strategy::Ddp, f, 0);
  const Plan zero1 = make_train_plan(s, 4, Strategy::Zero1, f, 0);
  const Plan fsdp = make_train_plan(s, 4, Strategy::Fsdp, f, 0);
  EXPECT_EQ(zero1.name(), "dp=4 zero1");
  EXPECT_EQ(ddp.batch, 16);
  EXPECT_LT(zero1.memory_per_gpu, ddp.memory_per_gpu);
  EXPECT_EQ(fsdp.buckets.size(), 3u);
  EXPECT_NEAR(fsdp.buckets[1].forward_layers, 1.0, 1e-12);
  for (const Plan* p : {&ddp, &zero1, &fsdp}) EXPECT_EQ(p->flat % (4 * parallel::kAlign), 0);
}

// What a plan needs measured: one GPU its compute and AdamW; ddp an all-reduce per bucket size,
// the zeros and fsdp a reduce-scatter and an all-gather.
TEST(AdviseTrainNeeds, ByStrategy) {
  const Settings s = train_settings();
  const TrainFootprint f = footprint(s);
  const Needs one = needs_of(s, make_train_plan(s, 1, Strategy::Ddp, f, 0));
  EXPECT_EQ(one.train, (std::vector<std::int64_t>{4}));
  EXPECT_TRUE(one.adamw);
  EXPECT_TRUE(one.bucket_all_reduces.empty() && one.reduce_scatters.empty() &&
              one.all_gathers.empty());
  EXPECT_TRUE(one.compute.empty());  // no inference engine
  const Plan ddp_plan = make_train_plan(s, 4, Strategy::Ddp, f, 0);
  const Needs ddp = merge({needs_of(s, ddp_plan)});
  ASSERT_FALSE(ddp.bucket_all_reduces.empty());
  EXPECT_EQ(ddp.bucket_all_reduces.front().first, 4);
  EXPECT_EQ(ddp.bucket_all_reduces.size(), 3u);  // head, MLP half, attention half: three sizes
  EXPECT_TRUE(ddp.all_reduces.empty());          // those are tensor parallelism's
  EXPECT_TRUE(ddp.reduce_scatters.empty());
  const Needs zero = merge({needs_of(s, make_train_plan(s, 4, Strategy::Zero2, f, 0))});
  EXPECT_EQ(zero.reduce_scatters, zero.all_gathers);
  EXPECT_TRUE(zero.bucket_all_reduces.empty());
}

// One GPU: the forward, the backward and AdamW one after the other.
//   F = 2 x 1e-3 + 1e-4 + 2e-4 = 2.3e-3, B = 2 x 2e-3 + 1e-4 + 4e-4 = 4.5e-3, O = 1e-12 x flat.
TEST(AdviseTrainPredict, OneGpuByHand) {
  const Settings s = train_settings();
  const Plan p = make_train_plan(s, 1, Strategy::Ddp, footprint(s), 0);
  const Prediction r = predict(s, p, train_blocks());
  const double opt = 1e-12 * static_cast<double>(p.flat);
  expect_rel(r.e2e_s, 2.3e-3 + 4.5e-3 + opt);
  expect_rel(r.compute_s, 2.3e-3 + 4.5e-3);
  expect_rel(r.optimizer_s, opt);
  EXPECT_NEAR(r.comm_s, 0.0, 1e-15);
  expect_rel(r.tokens_per_s, 4 * 4096 / r.e2e_s);
  const model::StageWork w = model::stage_work(s.model, 2, true, 4, 4096, 2);
  expect_rel(r.flops, w.forward_flops + w.backward_flops);
  const std::string why = explain(p, r, Prediction{}, 0, 989);
  EXPECT_TRUE(contains(why, "ms a step")) << why;
  EXPECT_TRUE(contains(why, "AdamW")) << why;
  EXPECT_TRUE(contains(why, "dense peak")) << why;
}

// ddp on four GPUs: all-reduces the backward hides cost only the last bucket's; all-reduces
// longer than the backward queue up behind each other from the head's bucket on.
TEST(AdviseTrainPredict, DdpHidesWhatBackwardCovers) {
  const Settings s = train_settings();
  const Plan p = make_train_plan(s, 4, Strategy::Ddp, footprint(s), 0);
  const double opt = 1e-12 * static_cast<double>(p.flat);
  Blocks b = train_blocks();
  for (const auto& [ranks, bytes] : needs_of(s, p).bucket_all_reduces)
    b.bucket_all_reduce_s[{ranks, bytes}] = 1e-6;
  Prediction r = predict(s, p, b);
  // The last bucket's all-reduce starts when the backward of its units ends, before the
  // backward's fixed part (1e-4) is over: nothing is exposed.
  expect_rel(r.e2e_s, 2.3e-3 + 4.5e-3 + opt);
  for (auto& [key, sec] : b.bucket_all_reduce_s) sec = 1e-2;
  r = predict(s, p, b);
  const double head_backward = 4e-4;  // bucket 0 is the head alone
  expect_rel(r.e2e_s, 2.3e-3 + head_backward + 5 * 1e-2 + opt);
  expect_rel(r.comm_s, r.e2e_s - r.compute_s - r.optimizer_s);
  expect_rel(r.tokens_per_s, 16 * 4096 / r.e2e_s);
  EXPECT_TRUE(contains(explain(p, r, Prediction{}, 0, 0), "does not hide"));
}

// zero1: reduce-scatters as ddp's all-reduces, AdamW over a quarter, then every bucket's
// all-gather; fsdp with collectives of no time is compute and a quarter of AdamW.
TEST(AdviseTrainPredict, ShardedStrategies) {
  const Settings s = train_settings();
  const TrainFootprint f = footprint(s);
  const Plan zero = make_train_plan(s, 4, Strategy::Zero1, f, 0);
  Blocks b = train_blocks();
  const Needs n = needs_of(s, zero);
  for (const auto& key : n.reduce_scatters) b.reduce_scatter_s[key] = 1e-7;
  for (const auto& key : n.all_gathers) b.all_gather_s[key] = 2e-4;
  const double quarter = 1e-12 * static_cast<double>(zero.flat / 4);
  expect_rel(predict(s, zero, b).e2e_s, 2.3e-3 + 4.5e-3 + quarter + 5 * 2e-4);
  expect_rel(predict(s, zero, b).optimizer_s, quarter);

  const Plan fsdp = make_train_plan(s, 4, Strategy::Fsdp, f, 0);
  Blocks z = train_blocks();
  for (const auto& key : needs_of(s, fsdp).reduce_scatters) z.reduce_scatter_s[key] = 0;
  for (const auto& key : needs_of(s, fsdp).all_gathers) z.all_gather_s[key] = 0;
  expect_rel(predict(s, fsdp, z).e2e_s, 2.3e-3 + 4.5e-3 + 1e-12 * (fsdp.flat / 4));
  // Slow gathers hold up the forward: at least every forward gather one after the other.
  for (auto& [key, sec] : z.all_gather_s) sec = 1e-2;
  EXPECT_GT(predict(s, fsdp, z).e2e_s, 3 * 1e-2);
}

// A missing block is an InputError naming it (its plan is dropped), not a guess.
TEST(AdviseTrainPredict, MissingBlocks) {
  const Settings s = train_settings();
  const Plan p = make_train_plan(s, 4, Strategy::Ddp, footprint(s), 0);
  EXPECT_TRUE(contains(input_error_of([&] { (void)predict(s, p, Blocks{}); }), "training forward"));
  EXPECT_TRUE(contains(input_error_of([&] { (void)predict(s, p, train_blocks()); }), "all-reduce"));
}

// The training blocks survive JSON; blocks written before training was advised still load.
TEST(AdviseTrainBlocks, RoundTripAndOlderRuns) {
  Blocks b = train_blocks();
  b.reduce_scatter_s[{4, 1 << 20}] = 1e-4;
  b.all_gather_s[{4, 1 << 20}] = 2e-4;
  b.bucket_all_reduce_s[{4, 1 << 20}] = 3e-4;
  const Blocks back = Blocks::from_json(b.to_json());
  EXPECT_EQ(back.to_json(), b.to_json());
  EXPECT_EQ(back.train_backward.at(4).head, 4e-4);
  // Runs before the buckets' all-reduces had a list of their own kept them with the rest (NCCL's
  // all of them then).
  auto mixed = b.to_json();
  mixed.erase("bucket_all_reduce");
  mixed["all_reduce"] =
      nlohmann::ordered_json::array({{{"ranks", 4}, {"bytes", 1 << 20}, {"seconds", 5e-4}}});
  EXPECT_EQ(Blocks::from_json(mixed).bucket_all_reduce_s.at({4, 1u << 20}), 5e-4);
  auto older = b.to_json();
  for (const char* key : {"train_forward", "train_backward", "adamw_s", "bucket_all_reduce",
                          "reduce_scatter", "all_gather"})
    older.erase(key);
  const Blocks old = Blocks::from_json(older);
  EXPECT_TRUE(old.train_forward.empty());
  EXPECT_EQ(old.adamw_s, 0.0);
  auto broken = b.to_json();
  broken["adamw_s"] = -1;
  EXPECT_TRUE(contains(input_error_of([&] { (void)Blocks::from_json(broken); }), "adamw_s"));
}
