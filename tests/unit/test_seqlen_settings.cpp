// `gpubench seqlen` settings: defaults per mode, list and range parsing, the model's positions
// (learned tables cut, RoPE past its context only when forced or by default), bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/gemm.hpp"
#include "gpubench/modules/seqlen/seqlen.hpp"
#include "input_error.hpp"

using namespace gpubench;
using namespace gpubench::seqlen;

namespace {

std::string error_of(const Options& o, bool quick = false) {
  return gpubench::testing::input_error_of([&] { (void)resolve_settings(o, quick); });
}

bool has(const std::string& text, const std::string& part) {
  return gpubench::testing::contains(text, part);
}

}  // namespace

TEST(SeqlenSettings, DefaultsPerMode) {
  const Settings full = resolve_settings(Options{}, false);
  EXPECT_EQ(full.model.name, "llama-2-7b");
  EXPECT_EQ(full.layers, 32);
  EXPECT_EQ(full.seq_lens, (std::vector<std::int64_t>{128, 256, 512, 1024, 2048, 4096, 8192}));
  EXPECT_EQ(full.batch_sizes, (std::vector<std::int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(full.output_lens, (std::vector<std::int64_t>{50, 100, 200}));
  ASSERT_EQ(full.notes.size(), 1u);  // 8192 + 200 passes llama-2-7b's 4096 positions
  EXPECT_TRUE(has(full.notes[0], "4096"));
  const Settings quick = resolve_settings(Options{}, true);
  EXPECT_EQ(quick.seq_lens, (std::vector<std::int64_t>{512, 2048}));
  EXPECT_EQ(quick.batch_sizes, (std::vector<std::int64_t>{1}));
  EXPECT_TRUE(quick.notes.empty());
  EXPECT_EQ(full.to_json()["dtype"], "bf16");
}

TEST(SeqlenSettings, ParsesListsAndRanges) {
  EXPECT_EQ(parse_counts("128:1024:x2", "--seq-lens", 1 << 20),
            (std::vector<std::int64_t>{128, 256, 512, 1024}));
  EXPECT_EQ(parse_counts("100:300:100", "--seq-lens", 1 << 20),
            (std::vector<std::int64_t>{100, 200, 300}));
  EXPECT_EQ(parse_counts("8,2,8", "--batch-sizes", 64), (std::vector<std::int64_t>{2, 8}));
  for (const char* bad : {"", "0", "-1", "2:1:1", "1:8:x1", "1:2", "a", "1:100000:1", "65"})
    EXPECT_THROW(parse_counts(bad, "--batch-sizes", 64), InputError) << bad;
}

TEST(SeqlenSettings, PositionsOfTheModel) {
  Options o;
  o.seq_lens = "2048,8192";
  EXPECT_TRUE(has(error_of(o), "--force-length"));  // llama-2-7b: 4096 positions
  o.force_length = true;
  EXPECT_EQ(error_of(o), "");
  Options opt;
  opt.model = "opt-125m";  // learned table of 2048 rows: the default sweep is cut
  const Settings s = resolve_settings(opt, false);
  EXPECT_EQ(s.seq_lens.back(), 1024);
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_TRUE(has(s.notes[0], "learned"));
  opt.seq_lens = "4096";
  opt.force_length = true;  // cannot force past a learned table
  EXPECT_TRUE(has(error_of(opt), "learned position table"));
  Options llama3;
  llama3.model = "llama-3-8b";  // 8192 positions: 8192 + 200 still passes, noted
  EXPECT_EQ(resolve_settings(llama3, false).notes.size(), 1u);
}

TEST(SeqlenSettings, BadInputNamesTheOption) {
  Options o;
  o.model = "no-such-model";
  EXPECT_TRUE(has(error_of(o), "no-such-model"));
  o = Options{};
  o.dtype = "fp8";
  EXPECT_TRUE(has(error_of(o), "--dtype"));
  o = Options{};
  o.layers = 33;
  EXPECT_TRUE(has(error_of(o), "--layers"));
  o = Options{};
  o.batch_sizes = "0";
  EXPECT_TRUE(has(error_of(o), "--batch-sizes"));
  o = Options{};
  o.model_config = "/no/such/config.json";
  EXPECT_TRUE(has(error_of(o), "no such file"));
  o = Options{};
  o.layers = 2;
  EXPECT_EQ(resolve_settings(o, true).layers, 2);
}

TEST(SeqlenSettings, AttentionPathAndHeadDim) {
  Options o;
  EXPECT_EQ(resolve_settings(o, false).attention, model::AttentionPath::Auto);
  o.attention = "own";
  EXPECT_EQ(resolve_settings(o, false).to_json()["attention"], "own");
  o.attention = "flash";
  EXPECT_TRUE(has(error_of(o), "--attention"));
}

TEST(SeqlenAnalysis, OpKindsCoverEveryEngineOp) {
  for (const char* op : {"qkv", "attn_out", "mlp_gate_up", "mlp_up", "mlp_down", "lm_head"})
    EXPECT_EQ(op_kind(op), "gemm") << op;
  for (const char* op : {"input_norm", "residual_norm", "mlp_residual_norm", "qk_norm",
                         "final_norm"})
    EXPECT_EQ(op_kind(op), "norm") << op;
  EXPECT_EQ(op_kind("attention"), "attention");
  EXPECT_EQ(op_kind("rope_kv_cache"), "rope");
  EXPECT_EQ(op_kind("kv_write"), "kv_cache");
  EXPECT_EQ(op_kind("mlp_act"), "activation");
  EXPECT_EQ(op_kind("residual"), "residual");
  EXPECT_EQ(op_kind("embedding"), "embedding");
  EXPECT_EQ(op_kind("something_new"), "other");
}

TEST(SeqlenAnalysis, OpTimesShare) {
  OpTimes t;
  EXPECT_EQ(t.share("gemm"), 0.0);
  t.by_kind_s = {{"gemm", 3.0}, {"attention", 1.0}};
  t.total_s = 4.0;
  EXPECT_DOUBLE_EQ(t.share("gemm"), 0.75);
  EXPECT_DOUBLE_EQ(t.share("attention"), 0.25);
  EXPECT_EQ(t.share("rope"), 0.0);
}

TEST(SeqlenAnalysis, LongestFittingPromptFollowsTheMemoryPlan) {
  const model::ModelConfig m = model::load_preset("llama-2-7b");
  const std::uint64_t gib = 1ull << 30;
  // 140 GiB free: the longest prompt is a multiple of 128 that fits, and one step more does not.
  const std::int64_t l = longest_fitting(m, 8, 200, 2, 140 * gib, 1 << 20);
  ASSERT_GT(l, 0);
  EXPECT_EQ(l % 128, 0);
  EXPECT_TRUE(model::fits(model::memory_plan(m, 8, l + 200, 2), 140 * gib));
  EXPECT_FALSE(model::fits(model::memory_plan(m, 8, l + 128 + 200, 2), 140 * gib));
  // More sequences fit less; weights alone above the free memory fit nothing.
  EXPECT_LT(longest_fitting(m, 16, 200, 2, 140 * gib, 1 << 20), l);
  EXPECT_EQ(longest_fitting(m, 1, 200, 2, 10 * gib, 1 << 20), 0);
  // The cap bounds the answer.
  EXPECT_EQ(longest_fitting(m, 1, 200, 2, 140 * gib, 4096), 4096);
}

TEST(SeqlenSettings, HeadDimTheKernelsLackAndNoModel) {
  const auto path = std::filesystem::temp_directory_path() / "gpubench_seqlen_head_dim_96.json";
  std::ofstream(path) << R"({"model_type": "llama", "hidden_size": 3072, "head_dim": 96,
    "intermediate_size": 8192, "num_hidden_layers": 2, "num_attention_heads": 32,
    "vocab_size": 32000, "max_position_embeddings": 4096})";
  Options o;
  o.model_config = path.string();
  EXPECT_TRUE(has(error_of(o), "head_dim 96"));
  std::filesystem::remove(path);
  o.model_config = "";
  o.model = "";
  EXPECT_TRUE(has(error_of(o), "--model"));
}

namespace {

// An ok point of `length` tokens: prefill `prefill_s`, of which `attention_s` and `gemm_s`.
PointOutcome point(std::int64_t length, double prefill_s, double attention_s, double gemm_s) {
  PointOutcome p;
  p.length = length;
  p.prefill.stats.median = prefill_s;
  p.prefill_ops.by_kind_s = {{"attention", attention_s}, {"gemm", gemm_s}};
  p.prefill_ops.total_s = attention_s + gemm_s;
  return p;
}

}  // namespace

TEST(SeqlenAnalysis, KneesWithinTheSweep) {
  // Attention grows as L^2 and passes the GEMMs between 4096 and 8192; the latency's slope
  // from 4096 to 8192 is log2(3) > 1.15.
  std::vector<PointOutcome> pts = {point(1024, 1.0, 0.1, 0.9), point(2048, 2.0, 0.4, 1.6),
                                   point(4096, 4.0, 1.6, 2.4), point(8192, 12.0, 6.4, 5.6)};
  PointOutcome skipped;
  skipped.length = 16384;
  skipped.status = "skipped";
  pts.push_back(skipped);
  const Knees k = find_knees(pts);
  ASSERT_TRUE(k.enough_points);
  ASSERT_TRUE(k.attention_passes_gemm.has_value());
  EXPECT_GT(*k.attention_passes_gemm, 4096.0);
  EXPECT_LT(*k.attention_passes_gemm, 8192.0);
  EXPECT_FALSE(k.attention_passes_gemm_extrapolated.has_value());
  ASSERT_TRUE(k.superlinear_from.has_value());
  EXPECT_EQ(*k.superlinear_from, 4096.0);
  EXPECT_EQ(k.first_skipped, 16384);
}

TEST(SeqlenAnalysis, KneesExtrapolatedPastTheSweepAndTooFewPoints) {
  // Attention at a tenth of the GEMMs at 8192 tokens: the two meet at 10 x 8192 (L^2 vs L).
  const Knees k = find_knees({point(4096, 1.0, 0.025, 0.95), point(8192, 2.0, 0.1, 1.0)});
  EXPECT_FALSE(k.attention_passes_gemm.has_value());
  ASSERT_TRUE(k.attention_passes_gemm_extrapolated.has_value());
  EXPECT_DOUBLE_EQ(*k.attention_passes_gemm_extrapolated, 81920.0);
  EXPECT_FALSE(k.superlinear_from.has_value());  // slope exactly 1
  EXPECT_EQ(k.first_skipped, 0);
  PointOutcome failed = point(2048, 1.0, 0.1, 0.9);
  failed.status = "failed";
  const Knees few = find_knees({point(1024, 1.0, 0.1, 0.9), failed});
  EXPECT_FALSE(few.enough_points);
  EXPECT_FALSE(few.attention_passes_gemm.has_value());
  EXPECT_EQ(few.first_skipped, 0);  // a failed point is not a memory knee
}

// Every point reports the engine's own plan, skipped points included: the same weights, a cache
// for the prompt and all but the last generated token, growing with the prompt and the batch.
TEST(SeqlenSettings, PointMemoryPlanIsTheEngines) {
  const Settings s = resolve_settings(Options{}, false);  // llama-2-7b, outputs up to 200
  const model::EngineOptions eo = point_engine_options(s, 2, 2048);
  EXPECT_EQ(eo.max_batch, 2);
  EXPECT_EQ(eo.max_tokens, 2048);
  EXPECT_EQ(eo.max_context, 2048 + 199);
  EXPECT_EQ(eo.layers, 32);
  const model::EngineMemory engine = model::engine_memory(s.model, eo, gemm_workspace_bytes(9));
  const model::MemoryPlan plan = point_memory_plan(s, 2, 2048, 9);
  EXPECT_EQ(plan.weight_bytes, engine.weights);
  EXPECT_EQ(plan.kv_cache_bytes, engine.kv_cache);
  EXPECT_EQ(plan.activation_bytes, engine.activations + engine.workspace);
  EXPECT_EQ(plan.total_bytes, engine.total());
  const model::MemoryPlan shorter = point_memory_plan(s, 2, 512, 9);
  const model::MemoryPlan one = point_memory_plan(s, 1, 2048, 9);
  EXPECT_EQ(shorter.weight_bytes, plan.weight_bytes);
  EXPECT_LT(shorter.total_bytes, plan.total_bytes);
  EXPECT_LT(one.total_bytes, plan.total_bytes);
  // 2 x 32 layers x 2 sequences x 2247 positions x 4096 x 2 bytes (at least: a row pitch may pad)
  EXPECT_GE(plan.kv_cache_bytes, 2ull * 32 * 2 * 2247 * 4096 * 2);
}

// Each phase's clocks come from its own measurement's samples of the point's GPU: a power cap
// seen while prefill was timed is named on prefill, not on the decode step timed at full clocks.
TEST(SeqlenAnalysis, PhaseClocksNameThePhaseThatThrottled) {
  auto summary = [](int gpu, int samples, unsigned sm_min, std::uint64_t reasons) {
    MonitorSummary m;
    m.available = true;
    GpuMonitorSummary g;
    g.gpu = gpu;
    g.samples = samples;
    g.sm_clock_min_MHz = sm_min;
    g.sm_clock_max_MHz = 1980;
    g.throttle_reasons = reasons;
    m.gpus.push_back(g);
    return m;
  };
  // 0x4: software power cap; 0x1: GPU idle, which does not lower clocks under load.
  const PhaseClocks c = phase_clocks(summary(0, 40, 1575, 0x4 | 0x1), summary(0, 60, 1980, 0x1), 0);
  ASSERT_TRUE(c.prefill_sm_min_MHz.has_value());
  ASSERT_TRUE(c.decode_sm_min_MHz.has_value());
  EXPECT_EQ(*c.prefill_sm_min_MHz, 1575u);
  EXPECT_EQ(*c.decode_sm_min_MHz, 1980u);
  EXPECT_EQ(c.note, "prefill throttled: sw_power_cap");

  const PhaseClocks both = phase_clocks(summary(1, 5, 1500, 0x4), summary(1, 5, 1600, 0x4), 1);
  EXPECT_EQ(both.note, "prefill throttled: sw_power_cap; decode throttled: sw_power_cap");

  // Another GPU's samples, or none (NVML missing): no clocks, no note.
  const PhaseClocks other = phase_clocks(summary(1, 40, 1500, 0x4), summary(1, 40, 1500, 0x4), 0);
  EXPECT_FALSE(other.prefill_sm_min_MHz.has_value());
  EXPECT_FALSE(other.decode_sm_min_MHz.has_value());
  EXPECT_TRUE(other.note.empty());
  const PhaseClocks none = phase_clocks(MonitorSummary{}, summary(0, 0, 0, 0x4), 0);
  EXPECT_FALSE(none.decode_sm_min_MHz.has_value());
  EXPECT_TRUE(none.note.empty());
}
