// The pipeline stage's training work per microbatch: linear shapes, forward and backward FLOPs
// (gradient GEMMs twice the forward's, attention's stand-in 2.5x), saved activations, transfers,
// and the peak saved activations of GPipe against 1F1B.
#include <gtest/gtest.h>

#include "gpubench/core/errors.hpp"
#include "gpubench/model/cost.hpp"
#include "gpubench/model/presets.hpp"
#include "gpubench/modules/pp/pp.hpp"
#include "gpubench/parallel/stage_links.hpp"

using namespace gpubench;
using namespace gpubench::pp;

TEST(PpTraining, Llama7bLinears) {
  const auto l = layer_linears(model::load_preset("llama-2-7b"));
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(l[0].name, "qkv");
  EXPECT_EQ(l[0].out, 3 * 4096);
  EXPECT_EQ(l[0].in, 4096);
  EXPECT_EQ(l[1].name, "attn_out");
  EXPECT_EQ(l[2].name, "mlp_gate_up");
  EXPECT_EQ(l[2].out, 2 * 11008);
  EXPECT_EQ(l[3].name, "mlp_down");
  EXPECT_EQ(l[3].in, 11008);
  // Grouped-query attention and an ungated MLP.
  const auto q = layer_linears(model::load_preset("llama-3-8b"));
  EXPECT_EQ(q[0].out, 4096 + 2 * 1024);
  const auto o = layer_linears(model::load_preset("opt-1.3b"));
  EXPECT_EQ(o[2].name, "mlp_up");
  EXPECT_EQ(o[2].out, 8192);
}

TEST(PpTraining, StageWorkByHand) {
  const model::ModelConfig m = model::load_preset("llama-2-7b");
  const double rows = 2 * 1024;
  const StageWork w = stage_work(m, 3, false, 2, 1024, 2);
  const double gemm = 2 * rows * (12288.0 * 4096 + 4096.0 * 4096 + 22016.0 * 4096 + 4096.0 * 11008);
  const double attention = 4.0 * 2 * 32 * 128 * (1024.0 * 1025 / 2);
  EXPECT_DOUBLE_EQ(w.forward_gemm_flops, 3 * gemm);
  EXPECT_DOUBLE_EQ(w.attention_flops, 3 * attention);
  EXPECT_DOUBLE_EQ(w.forward_flops, 3 * (gemm + attention));
  EXPECT_DOUBLE_EQ(w.backward_attention_flops, 2.5 * 3 * attention);
  EXPECT_DOUBLE_EQ(w.backward_flops, 3 * (2 * gemm + 2.5 * attention));
  const double per_row = (4096 * 4 + 12288 + 4096 + 22016 + 11008) * 2.0;
  EXPECT_EQ(w.saved_bytes, static_cast<std::uint64_t>(3 * rows * per_row));
  EXPECT_EQ(w.transfer_bytes, static_cast<std::uint64_t>(rows * 4096 * 2));
  // The last stage adds the LM head (and keeps the final norm's input and output).
  const StageWork l = stage_work(m, 3, true, 2, 1024, 2);
  const double head = 2 * rows * 32000.0 * 4096;
  EXPECT_DOUBLE_EQ(l.forward_flops, w.forward_flops + head);
  EXPECT_DOUBLE_EQ(l.backward_flops, w.backward_flops + 2 * head);
  EXPECT_EQ(l.saved_bytes, w.saved_bytes + static_cast<std::uint64_t>(2 * rows * 4096 * 2));

  // Half-layers: the attention half has qkv, the output projection and attention; the MLP half
  // the MLP's linears. Even blocks are attention halves.
  const double attention_gemm = 2 * rows * (12288.0 * 4096 + 4096.0 * 4096);
  const double mlp_gemm = gemm - attention_gemm;
  const StageWork a = stage_work_blocks(m, 0, 1, false, 2, 1024, 2);
  EXPECT_DOUBLE_EQ(a.forward_gemm_flops, attention_gemm);
  EXPECT_DOUBLE_EQ(a.attention_flops, attention);
  EXPECT_EQ(a.saved_bytes, static_cast<std::uint64_t>(rows * (4096 * 2 + 12288 + 4096) * 2.0));
  const StageWork mlp = stage_work_blocks(m, 5, 1, false, 2, 1024, 2);
  EXPECT_DOUBLE_EQ(mlp.forward_gemm_flops, mlp_gemm);
  EXPECT_DOUBLE_EQ(mlp.attention_flops, 0.0);
  EXPECT_DOUBLE_EQ(mlp.backward_flops, 2 * mlp_gemm);
  EXPECT_EQ(mlp.saved_bytes, static_cast<std::uint64_t>(rows * (4096 * 2 + 22016 + 11008) * 2.0));
  EXPECT_EQ(a.saved_bytes + mlp.saved_bytes, static_cast<std::uint64_t>(rows * per_row));
  // 5 blocks from block 1 on (an MLP half first): MLP, attention, MLP, attention, MLP; with
  // the LM head.
  const StageWork odd = stage_work_blocks(m, 1, 5, true, 2, 1024, 2);
  EXPECT_DOUBLE_EQ(odd.forward_gemm_flops, 2 * attention_gemm + 3 * mlp_gemm);
  EXPECT_DOUBLE_EQ(odd.attention_flops, 2 * attention);
  EXPECT_DOUBLE_EQ(odd.forward_flops, 2 * attention_gemm + 3 * mlp_gemm + 2 * attention + head);
  // Whole layers are even block counts.
  const StageWork w2 = stage_work_blocks(m, 0, 6, false, 2, 1024, 2);
  EXPECT_DOUBLE_EQ(w2.forward_flops, w.forward_flops);
  EXPECT_EQ(w2.saved_bytes, w.saved_bytes);
}

// The forward counts agree with the seqlen cost model's prefill of the same tokens.
TEST(PpTraining, ForwardMatchesTheCostModel) {
  for (const char* name : {"llama-2-7b", "llama-3-8b", "qwen2.5-7b"}) {
    const model::ModelConfig m = model::load_preset(name);
    const StageWork w = stage_work(m, 1, false, 3, 512, 2);
    double gemm = 0, attention = 0;
    for (const auto& op : model::layer_ops(m, model::Phase::Prefill, 3, 512, 0, 2)) {
      if (op.kind == model::OpKind::Gemm) gemm += op.flops;
      if (op.kind == model::OpKind::Attention) attention += op.flops;
    }
    // The cost model counts biases (rows x out each): within 0.1% for the Qwen qkv bias.
    EXPECT_NEAR(w.forward_gemm_flops, gemm, 1e-3 * gemm) << name;
    EXPECT_DOUBLE_EQ(w.attention_flops, attention) << name;
  }
}

// The memory bound: 1F1B's peak saved activations on a stage at most p/m of GPipe's.
TEST(PpTraining, OneFOneBHoldsPOverMOfGPipe) {
  const model::ModelConfig m = model::load_preset("llama-2-7b");
  const StageWork w = stage_work(m, 8, false, 1, 1024, 2);
  for (int p : {2, 4})
    for (int mb : {4, 8, 16}) {
      OpTimes t;
      t.forward_s.assign(static_cast<std::size_t>(p), 1.0);
      t.backward_s.assign(static_cast<std::size_t>(p), 2.0);
      const Timeline g = simulate(Schedule::GPipe, p, mb, 1, t);
      const Timeline f = simulate(Schedule::OneFOneB, p, mb, 1, t);
      const double gpipe = static_cast<double>(peak_saved_bytes(w, g.peak_in_flight[0]));
      const double one_f = static_cast<double>(peak_saved_bytes(w, f.peak_in_flight[0]));
      EXPECT_EQ(gpipe, static_cast<double>(w.saved_bytes) * mb);
      EXPECT_LE(one_f, 1.1 * static_cast<double>(p) / mb * gpipe) << "p " << p << " m " << mb;
    }
}

TEST(PpTraining, BadInput) {
  const model::ModelConfig m = model::load_preset("llama-2-7b");
  EXPECT_THROW(stage_work(m, 0, false, 1, 1, 2), InputError);
  EXPECT_THROW(stage_work(m, 1, false, 0, 1, 2), InputError);
  EXPECT_THROW(stage_work(m, 1, false, 1, 0, 2), InputError);
  EXPECT_THROW(stage_work(m, 1, false, 1, 1, 3), InputError);
  EXPECT_THROW(stage_work_blocks(m, -1, 1, false, 1, 1, 2), InputError);
  EXPECT_THROW(stage_work_blocks(m, 0, 0, false, 1, 1, 2), InputError);
  EXPECT_THROW(peak_saved_bytes(stage_work(m, 1, false, 1, 1, 2), -1), InputError);
  EXPECT_EQ(peak_saved_bytes(stage_work(m, 1, false, 1, 1, 2), 0), 0u);
}

// Inference stages: equal layers (the LM head of the last positions is small), every layer once.
TEST(PpInference, StageLayers) {
  Options o;
  o.pp = "2";
  Settings s = resolve_settings(o, false, 0);
  EXPECT_EQ(inference_stage_layers(s, 2), (std::vector<int>{16, 16}));
  EXPECT_EQ(inference_stage_layers(s, 4), (std::vector<int>{8, 8, 8, 8}));
  o.layers = 6;
  s = resolve_settings(o, false, 0);
  const auto four = inference_stage_layers(s, 4);
  ASSERT_EQ(four.size(), 4u);
  int sum = 0;
  for (int l : four) {
    EXPECT_GE(l, 1);
    EXPECT_LE(l, 2);
    sum += l;
  }
  EXPECT_EQ(sum, 6);
  EXPECT_THROW(inference_stage_layers(s, 7), InputError);
}

// Training stages by FLOPs: every half-layer placed once, whole layers by default. llama-2-7b's
// LM head (about 0.63 of a layer's work at 1024 tokens) leaves 16 / 16 layers the best whole
// split (16 / 16.63 layers' worth); --stage-split half-layer moves the attention half of layer
// 16 onto the first stage: 16.5 / 15.5 layers (33 / 31 blocks: 16.35 / 16.28 layers' worth).
// Interleaved stages hold layers / p each (v chunks of layers / (p v)).
TEST(PpTraining, TrainingStageBlocks) {
  Options o;
  o.pp = "2";
  Settings s = resolve_settings(o, false, 4);
  EXPECT_EQ(training_stage_blocks(s, 2, Schedule::GPipe), (std::vector<int>{32, 32}));
  s.half_layers = true;
  EXPECT_EQ(training_stage_blocks(s, 2, Schedule::OneFOneB), (std::vector<int>{33, 31}));
  EXPECT_EQ(stage_layers_text(training_stage_blocks(s, 2, Schedule::GPipe)), "16.5/15.5");
  for (bool halves : {false, true})
    for (int stages : {2, 4}) {
      s.half_layers = halves;
      const std::vector<int> b = training_stage_blocks(s, stages, Schedule::OneFOneB);
      ASSERT_EQ(b.size(), static_cast<std::size_t>(stages));
      int sum = 0;
      for (int x : b) {
        sum += x;
        if (!halves) {
          EXPECT_EQ(x % 2, 0);
        }
      }
      EXPECT_EQ(sum, 64);
      EXPECT_LE(b.back(), b.front());
      EXPECT_EQ(training_stage_blocks(s, stages, Schedule::Interleaved),
                std::vector<int>(static_cast<std::size_t>(stages), 64 / stages));
    }
  // A head as heavy as several layers moves layers off the last stage: opt-125m's LM head
  // (50272 x 768) is about 4.8 of its layers' work at 1024 tokens, so 12 layers split 8 / 4
  // whole (the slowest stage 8.8 layers' worth; 9 / 3 would make it 9).
  o = Options{};
  o.model = "opt-125m";
  o.pp = "2";
  s = resolve_settings(o, false, 4);
  EXPECT_EQ(training_stage_blocks(s, 2, Schedule::GPipe), (std::vector<int>{16, 8}));
}

// Stages from costs: the embedding and the head weigh on the first and last stage as extra
// layers' worth; a measured split says so in its description, a FLOP split gives the head's
// share of a layer.
TEST(PpStages, StagesFromCosts) {
  StageCosts c;
  c.layer = 2e-3;
  EXPECT_EQ(stages_from_costs(c, 12, 3), (std::vector<int>{4, 4, 4}));
  c.head = 8e-3;  // 4 layers' worth on the last stage
  EXPECT_EQ(stages_from_costs(c, 12, 2), (std::vector<int>{8, 4}));
  c.embed = 8e-3;  // and as much on the first: equal again
  EXPECT_EQ(stages_from_costs(c, 12, 2), (std::vector<int>{6, 6}));
  // Noise that makes a part negative counts as nothing; a layer of no cost as one unit.
  c.head = -1e-3;
  c.embed = 0;
  EXPECT_EQ(stages_from_costs(c, 12, 2), (std::vector<int>{6, 6}));
  c.layer = 0;
  EXPECT_EQ(stages_from_costs(c, 8, 4), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_THROW(stages_from_costs(c, 3, 4), InputError);

  c = StageCosts{};
  c.layer = 2.1e-3;
  c.embed = 1e-5;
  c.head = 1.3e-3;
  c.measured = true;
  EXPECT_EQ(c.describe(),
            "measured: layer 2.100 ms, embedding 0.010 ms, head 1.300 ms (one sequence)");
  c.attention = 0.7e-3;
  EXPECT_EQ(c.describe(),
            "measured: layer 2.100 ms (attention half 0.700 ms), embedding 0.010 ms, head "
            "1.300 ms (one sequence)");
  c = StageCosts{};
  c.layer = 2.0;
  c.head = 1.3;
  EXPECT_EQ(c.describe(), "by FLOPs: head 0.65 of a layer");
  c.attention = 0.66;
  EXPECT_EQ(c.describe(), "by FLOPs: head 0.65 of a layer, attention half 0.33");
}

// Half-layer stages: blocks costing attention and layer - attention by turns. 4 layers of
// 1 + 2 with a head of 3 on the last stage: 5 / 3 blocks (7 and 8), where whole layers can do
// no better than 9 on one stage. Without an attention share inside (0, layer): whole layers.
TEST(PpStages, StageBlocksFromCosts) {
  StageCosts c;
  c.layer = 3;
  c.attention = 1;
  EXPECT_EQ(stage_blocks_from_costs(c, 4, 2), (std::vector<int>{4, 4}));
  c.head = 3;
  EXPECT_EQ(stage_blocks_from_costs(c, 4, 2), (std::vector<int>{5, 3}));
  EXPECT_EQ(stage_layers_text({5, 3}), "2.5/1.5");
  EXPECT_EQ(stage_layers_text({32, 32}), "16/16");
  EXPECT_EQ(stage_layers_text({1, 3, 4}), "0.5/1.5/2");
  const std::vector<int> whole = blocks_of_layers(stages_from_costs(c, 4, 2));
  EXPECT_EQ(blocks_of_layers({3, 1}), (std::vector<int>{6, 2}));
  for (double a : {0.0, 3.0, -1.0}) {
    c.attention = a;
    EXPECT_EQ(stage_blocks_from_costs(c, 4, 2), whole) << a;
  }
  EXPECT_THROW(stage_blocks_from_costs(c, 4, 0), InputError);
}

// The FLOP costs are what the FLOP-based splits use: the same layers per stage either way.
TEST(PpStages, FlopCostsGiveTheFlopSplits) {
  Options o;
  o.model = "opt-125m";
  o.pp = "2";
  const Settings s = resolve_settings(o, false, 4);
  const StageCosts t = training_flop_costs(s);
  EXPECT_FALSE(t.measured);
  EXPECT_GT(t.layer, 0);
  EXPECT_NEAR(t.head / t.layer, 4.8, 0.2);  // opt-125m's LM head, as above
  EXPECT_GT(t.attention, 0.2 * t.layer);
  EXPECT_LT(t.attention, 0.5 * t.layer);
  EXPECT_EQ(training_stage_blocks(s, 2, Schedule::GPipe, t), training_stage_blocks(s, 2, Schedule::GPipe));
  EXPECT_EQ(stages_from_costs(inference_flop_costs(s), s.layers, 2), inference_stage_layers(s, 2));
  // Interleaved ignores the costs: equal chunks.
  Options oi;
  oi.pp = "2";
  const Settings si = resolve_settings(oi, false, 4);
  EXPECT_EQ(training_stage_blocks(si, 2, Schedule::Interleaved, t), (std::vector<int>{32, 32}));
}

// What a stage's links allocate, counted in its memory check before they are made: two ring
// buffers each way, receive and send side; over the copy engines also the flags and two 2 MiB
// wake buffers.
TEST(PpTraining, StageLinksPlannedBytes) {
  const std::size_t bytes = 128u << 20;  // 16 sequences x 1024 tokens x 4096 x 2
  EXPECT_EQ(parallel::StageLinks::planned_bytes(bytes, false), 8ull * bytes);
  EXPECT_EQ(parallel::StageLinks::planned_bytes(bytes, true),
            8ull * bytes + 2 * (2u << 20) + 4 * sizeof(std::uint32_t));
}
