// Host side of `gpubench pp`: defaults, the checks of the issue's bad input (stages above layers or
// GPUs, microbatches that do not divide the batch, unknown schedules, chunks that do not divide the
// layers, layouts of the wrong size) and what the defaults drop.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpubench/core/errors.hpp"
#include "gpubench/modules/pp/pp.hpp"
#include "input_error.hpp"

using namespace gpubench;
using namespace gpubench::pp;
using gpubench::testing::input_error_of;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(PpSettings, Defaults) {
  const Settings s = resolve_settings(Options{}, false, 4);
  EXPECT_EQ(s.model.name, "llama-2-7b");
  EXPECT_EQ(s.layers, 32);
  EXPECT_EQ(s.pp, (std::vector<int>{2, 4}));
  EXPECT_EQ(s.microbatches, (std::vector<int>{1, 2, 4, 8, 16}));
  EXPECT_EQ(s.schedules, (std::vector<Schedule>{Schedule::GPipe, Schedule::OneFOneB}));
  EXPECT_EQ(s.batch, 16);
  EXPECT_TRUE(s.notes.empty());
  EXPECT_EQ(resolve_settings(Options{}, true, 4).microbatches, (std::vector<int>{4, 16}));
  // Two GPUs: the default 4 stages are dropped with a note.
  const Settings two = resolve_settings(Options{}, false, 2);
  EXPECT_EQ(two.pp, (std::vector<int>{2}));
  ASSERT_EQ(two.notes.size(), 1u);
  EXPECT_TRUE(has(two.notes[0], "4 stages need 4 GPUs, 2 visible"));
  const auto j = s.to_json();
  EXPECT_EQ(j["schedules"], nlohmann::ordered_json::parse(R"(["gpipe","1f1b"])"));
}

TEST(PpSettings, BadInput) {
  auto err = [](Options o, int visible = 4) {
    return input_error_of([&] { (void)resolve_settings(o, false, visible); });
  };
  Options o;
  o.pp = "8";
  EXPECT_EQ(err(o), "--pp: 8 stages need 8 GPUs, 4 visible");
  o.pp = "2";
  o.layers = 1;
  EXPECT_EQ(err(o), "--pp: 2 stages need at least 2 layers (llama-2-7b has 1)");
  o = Options{};
  o.microbatches = "3";
  EXPECT_EQ(err(o), "--microbatches: 3 does not divide --batch 16");
  o = Options{};
  o.schedule = "gpipe,zero-bubble";
  EXPECT_EQ(err(o), "--schedule: 'zero-bubble' is not gpipe, 1f1b or interleaved");
  o = Options{};
  o.schedule = "interleaved";
  o.chunks = 3;
  o.pp = "2";
  EXPECT_TRUE(has(err(o), "3 chunks on each of 2 stages do not divide 32 layers"));
  o.chunks = 2;
  o.pp = "4";
  o.microbatches = "2";
  EXPECT_EQ(err(o), "--microbatches: 2 is not a multiple of 4 stages (the interleaved schedule)");
  o = Options{};
  o.layouts = "tp=2";
  EXPECT_EQ(err(o), "--layouts: 'tp=2' uses 2 GPUs, not the 4 of the run");
  o = Options{};
  o.batch = 0;
  EXPECT_EQ(err(o), "--batch: 0 is outside 1..4096");
  o = Options{};
  o.dtype = "fp8";
  EXPECT_TRUE(has(err(o), "--dtype: 'fp8'"));
  o = Options{};
  o.pp = "two";
  EXPECT_TRUE(has(err(o), "--pp"));
  // Interleaved defaults: counts that are not multiples of the stages are dropped with notes.
  o = Options{};
  o.schedule = "interleaved";
  const Settings s = resolve_settings(o, false, 4);
  EXPECT_EQ(s.microbatches, (std::vector<int>{4, 8, 16}));
  EXPECT_EQ(s.notes.size(), 2u);
  // Given microbatches against the default stages: judged once the GPUs are known (2 GPUs drop
  // the default 4 stages, so 2 microbatches run), not while the options are only read.
  o.microbatches = "2,4";
  EXPECT_EQ(resolve_settings(o, false, 0).microbatches, (std::vector<int>{2, 4}));
  EXPECT_EQ(resolve_settings(o, false, 2).pp, (std::vector<int>{2}));
  EXPECT_EQ(resolve_settings(o, false, 2).microbatches, (std::vector<int>{2, 4}));
  EXPECT_EQ(err(o), "--microbatches: 2 is not a multiple of 4 stages (the interleaved schedule)");
  // --transfers
  o = Options{};
  EXPECT_EQ(resolve_settings(o, false, 4).transfers, "nccl");
  o.transfers = "Copy-Engine";
  EXPECT_EQ(resolve_settings(o, false, 4).transfers, "copy-engine");
  o.transfers = "pigeon";
  EXPECT_EQ(err(o), "--transfers: 'pigeon' is not nccl or copy-engine");
  // --nccl-ctas
  o = Options{};
  EXPECT_EQ(resolve_settings(o, false, 4).nccl_ctas, 0);
  o.nccl_ctas = 8;
  EXPECT_EQ(resolve_settings(o, false, 4).to_json()["nccl_ctas"], 8);
  o.nccl_ctas = -1;
  EXPECT_EQ(err(o), "--nccl-ctas: -1 is outside 0..64 (0: NCCL's own choice)");
  o.nccl_ctas = 65;
  EXPECT_EQ(err(o), "--nccl-ctas: 65 is outside 0..64 (0: NCCL's own choice)");
  // --stage-split
  o = Options{};
  EXPECT_FALSE(resolve_settings(o, false, 4).half_layers);
  EXPECT_EQ(resolve_settings(o, false, 4).to_json()["stage_split"], "layer");
  o.stage_split = "Half-Layer";
  EXPECT_TRUE(resolve_settings(o, false, 4).half_layers);
  EXPECT_EQ(resolve_settings(o, false, 4).to_json()["stage_split"], "half-layer");
  o.stage_split = "quarter";
  EXPECT_EQ(err(o), "--stage-split: 'quarter' is not layer or half-layer");
  // --timeout
  o = Options{};
  EXPECT_EQ(resolve_settings(o, false, 4).timeout_s, 600);
  EXPECT_EQ(resolve_settings(o, false, 4).to_json()["timeout_s"], 600);
  o.timeout = 0;
  EXPECT_EQ(err(o), "--timeout must be greater than 0 seconds");
  o.timeout = -5;
  EXPECT_EQ(err(o), "--timeout must be greater than 0 seconds");
  // --workload
  o = Options{};
  o.workload = "training";
  EXPECT_FALSE(resolve_settings(o, false, 4).inference);
  o.workload = "Inference";
  EXPECT_FALSE(resolve_settings(o, false, 4).training);
  o.workload = "sideways";
  EXPECT_EQ(err(o), "--workload: 'sideways' is not inference, training or both");
  // Layouts' batches: 1 and --batch unless given; their microbatches: the largest count of
  // --microbatches that divides a replica's share (1 without stages).
  o = Options{};
  EXPECT_EQ(resolve_settings(o, false, 4).layout_batches, (std::vector<int>{1, 16}));
  o.layout_batches = "8,2";
  EXPECT_EQ(resolve_settings(o, false, 4).layout_batches, (std::vector<int>{2, 8}));
  o.layout_batches = "0";
  EXPECT_TRUE(has(err(o), "--layout-batches"));
  o = Options{};
  const Settings d = resolve_settings(o, false, 4);
  Layout pp2dp2;
  pp2dp2.pp = 2;
  pp2dp2.dp = 2;
  EXPECT_EQ(layout_microbatches(d, pp2dp2, 16), 8);
  EXPECT_EQ(layout_microbatches(d, pp2dp2, 4), 2);
  EXPECT_EQ(layout_microbatches(d, pp2dp2, 1), 1);
  Layout tp4;
  tp4.tp = 4;
  EXPECT_EQ(layout_microbatches(d, tp4, 16), 1);
  // Quick: 8 layers unless --layers.
  o = Options{};
  EXPECT_EQ(resolve_settings(o, true, 4).layers, 8);
  o.layers = 16;
  EXPECT_EQ(resolve_settings(o, true, 4).layers, 16);
}
