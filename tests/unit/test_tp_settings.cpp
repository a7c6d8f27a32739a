// Host side of `gpubench tp`: settings defaults per mode and per visible GPU count, which TP
// degrees split each preset (heads, then KV heads, then the MLP), every bad-input message, and the
// shards each rank holds tiling the full weights.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "gpubench/core/errors.hpp"
#include "gpubench/modules/tp/tp.hpp"
#include "input_error.hpp"

using namespace gpubench;
using namespace gpubench::tp;

namespace {

std::string error_of(const Options& o, int visible = 0, bool quick = false) {
  return gpubench::testing::input_error_of([&] { (void)resolve_settings(o, quick, visible); });
}

std::string tp_error(const std::string& model, const std::string& tp, int visible = 0) {
  Options o;
  o.model = model;
  o.tp = tp;
  return error_of(o, visible);
}

bool has(const std::string& text, const std::string& part) {
  return gpubench::testing::contains(text, part);
}

// How many times each index of [0, size) is covered by `ranges` (out-of-bounds ranges fail).
std::vector<int> coverage(std::int64_t size, const std::vector<Range>& ranges) {
  std::vector<int> count(static_cast<std::size_t>(size), 0);
  for (const Range& r : ranges) {
    EXPECT_GE(r.start, 0);
    EXPECT_LE(r.start + r.count, size);
    for (std::int64_t i = r.start; i < r.start + r.count && i < size; ++i)
      ++count[static_cast<std::size_t>(i)];
  }
  return count;
}

bool tiles_exactly(std::int64_t size, const std::vector<Range>& ranges) {
  const auto count = coverage(size, ranges);
  return std::all_of(count.begin(), count.end(), [](int c) { return c == 1; });
}

}  // namespace

TEST(TpSettings, DefaultsPerMode) {
  const Settings full = resolve_settings(Options{}, false, 0);
  EXPECT_EQ(full.model.name, "llama-2-7b");
  EXPECT_EQ(full.layers, 32);
  EXPECT_EQ(full.tp, (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(full.seq_lens, (std::vector<std::int64_t>{128, 512, 1024, 2048, 4096}));
  EXPECT_EQ(full.batch_sizes, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(full.contexts, (std::vector<std::int64_t>{2048}));
  EXPECT_EQ(full.dtype, "bf16");
  EXPECT_EQ(full.elem_bytes, 2);
  EXPECT_FALSE(full.sequence_parallel);
  EXPECT_TRUE(full.micro.empty());
  EXPECT_EQ(full.micro_size, 8192);
  EXPECT_EQ(full.micro_tokens, (std::vector<std::int64_t>{1, 16, 128, 1024, 4096}));
  EXPECT_FALSE(full.overlap);
  EXPECT_EQ(full.overlap_chunks, 4);
  EXPECT_EQ(full.collectives, "nccl");
  EXPECT_TRUE(full.notes.empty());  // 4096 tokens fit llama-2-7b's 4096 positions
  const Settings quick = resolve_settings(Options{}, true, 0);
  EXPECT_EQ(quick.seq_lens, (std::vector<std::int64_t>{1024, 4096}));
  EXPECT_EQ(quick.batch_sizes, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(quick.contexts, (std::vector<std::int64_t>{2048}));
  EXPECT_EQ(quick.tp, (std::vector<int>{1, 2, 4}));
}

TEST(TpSettings, DefaultDegreesDropWhatCannotRun) {
  const Settings two = resolve_settings(Options{}, false, 2);
  EXPECT_EQ(two.tp, (std::vector<int>{1, 2}));
  ASSERT_EQ(two.notes.size(), 1u);
  EXPECT_TRUE(has(two.notes[0], "4 needs 4 GPUs, 2 visible")) << two.notes[0];
  Options gpt2;
  gpt2.model = "gpt2-xl";  // 25 heads: neither 2 nor 4 splits them
  const Settings s = resolve_settings(gpt2, false, 8);
  EXPECT_EQ(s.tp, (std::vector<int>{1}));
  ASSERT_EQ(s.notes.size(), 3u);  // 2 and 4 left out; 4096 tokens pass its 1024 positions
  EXPECT_TRUE(has(s.notes[0], "25 attention heads")) << s.notes[0];
  EXPECT_EQ(resolve_settings(Options{}, false, 8).tp, (std::vector<int>{1, 2, 4}));
}

TEST(TpSettings, Llama2SevenBDivisibility) {
  // 32 heads, 32 KV heads, intermediate 11008 = 2^8 x 43.
  EXPECT_EQ(tp_error("llama-2-7b", "3"), "--tp: 3 does not divide llama-2-7b's 32 attention heads");
  for (const char* ok : {"1", "2", "4", "8", "16", "32", "1,2,4,8"})
    EXPECT_EQ(tp_error("llama-2-7b", ok), "") << ok;
  EXPECT_TRUE(has(tp_error("llama-2-7b", "64"), "32 attention heads"));
  EXPECT_TRUE(has(tp_error("llama-2-7b", "2,6"), "--tp: 6 "));
}

TEST(TpSettings, GroupedQueryKvHeads) {
  // qwen2.5-7b: 28 heads, 4 KV heads, intermediate 18944.
  EXPECT_EQ(tp_error("qwen2.5-7b", "8"), "--tp: 8 does not divide qwen2.5-7b's 28 attention heads");
  const std::string seven = tp_error("qwen2.5-7b", "7");  // 28 % 7 == 0, 4 % 7 != 0
  EXPECT_TRUE(has(seven, "--tp: 7 does not divide qwen2.5-7b's 4 KV heads")) << seven;
  EXPECT_TRUE(has(seven, "cannot be split 7 ways")) << seven;
  EXPECT_TRUE(has(seven, "grouped-query")) << seven;
  EXPECT_EQ(tp_error("qwen2.5-7b", "1,2,4"), "");
  // llama-3-8b: 32 heads, 8 KV heads, intermediate 14336.
  EXPECT_EQ(tp_error("llama-3-8b", "8"), "");
  EXPECT_TRUE(has(tp_error("llama-3-8b", "16"), "llama-3-8b's 8 KV heads"));
  // qwen3-8b: 32 heads, 8 KV heads.
  EXPECT_TRUE(has(tp_error("qwen3-8b", "16"), "8 KV heads cannot be split 16 ways"));
}

TEST(TpSettings, NonPowerOfTwoAndIntermediate) {
  // opt-125m: 12 heads (no GQA), intermediate 3072: 3 and 6 divide everything, 8 does not.
  EXPECT_EQ(tp_error("opt-125m", "3,6"), "");
  EXPECT_EQ(tp_error("opt-125m", "8"), "--tp: 8 does not divide opt-125m's 12 attention heads");
  // llama-2-13b: 40 heads and KV heads, intermediate 13824 = 2^9 x 27: 5 splits the heads only.
  EXPECT_EQ(tp_error("llama-2-13b", "5"),
            "--tp: 5 does not divide llama-2-13b's intermediate size 13824");
  const model::ModelConfig m = model::load_preset("llama-2-13b");
  EXPECT_EQ(why_not_divisible(m, 4), "");
  EXPECT_TRUE(has(why_not_divisible(m, 0), "at least 1"));
}

TEST(TpSettings, DegreesAgainstVisibleGpus) {
  EXPECT_EQ(tp_error("llama-2-7b", "8", 4), "--tp: 8 needs 8 GPUs, 4 visible");
  EXPECT_EQ(tp_error("llama-2-7b", "1,2,4", 4), "");
  EXPECT_EQ(tp_error("llama-2-7b", "8", 0), "");   // unknown count: not checked
  EXPECT_EQ(tp_error("llama-2-7b", "8", -1), "");  // same
  EXPECT_EQ(tp_error("llama-2-7b", "0"), "--tp: 0 must be at least 1");
  EXPECT_EQ(tp_error("llama-2-7b", "-2"), "--tp: -2 must be at least 1");
  EXPECT_TRUE(has(tp_error("llama-2-7b", "two"), "--tp: 'two' is not a whole number"));
  EXPECT_NE(tp_error("llama-2-7b", "1,,2"), "");  // split_list rejects the empty item
  const Settings s = resolve_settings([] {
    Options o;
    o.tp = "4,1,2,2";
    return o;
  }(), false, 4);
  EXPECT_EQ(s.tp, (std::vector<int>{1, 2, 4}));
}

TEST(TpSettings, BadInputNamesTheOption) {
  Options o;
  o.micro = "column,diagonal";
  EXPECT_EQ(error_of(o), "--micro: 'diagonal' is not column or row");
  o = Options{};
  o.overlap_chunks = 0;
  EXPECT_EQ(error_of(o), "--overlap-chunks: 0 is outside 1..16");
  o.overlap_chunks = 32;
  EXPECT_EQ(error_of(o), "--overlap-chunks: 32 is outside 1..16");
  o.overlap_chunks = 3;
  EXPECT_EQ(error_of(o), "--overlap-chunks: 3 does not divide --micro-size 8192");
  o = Options{};
  o.collectives = "mpi";
  EXPECT_EQ(error_of(o), "--collectives: 'mpi' is not nccl or copy-engine");
  o = Options{};
  o.timeout = 0;
  EXPECT_EQ(error_of(o), "--timeout must be greater than 0 seconds");
  o = Options{};
  o.small_collectives = "two-shot";
  EXPECT_EQ(error_of(o), "--small-collectives: 'two-shot' is not auto, nccl or one-shot");
  o.small_collectives = "one-shot";
  EXPECT_EQ(resolve_settings(o, false, 4).small_collectives, "one-shot");
  o.collectives = " copy-engine ";
  EXPECT_EQ(error_of(o), "");
  EXPECT_EQ(resolve_settings(o, false, 0).collectives, "copy-engine");
  o = Options{};
  o.layers = 33;
  EXPECT_TRUE(has(error_of(o), "--layers: 33 is outside 0..32"));
  o.layers = -1;
  EXPECT_TRUE(has(error_of(o), "--layers"));
  o = Options{};
  o.dtype = "fp8";
  EXPECT_TRUE(has(error_of(o), "--dtype: 'fp8'"));
  o = Options{};
  o.seq_lens = "0";
  EXPECT_TRUE(has(error_of(o), "--seq-lens"));
  o = Options{};
  o.batch_sizes = "1,x";
  EXPECT_TRUE(has(error_of(o), "--batch-sizes"));
  o = Options{};
  o.contexts = "-5";
  EXPECT_TRUE(has(error_of(o), "--contexts"));
  o = Options{};
  o.micro_tokens = "0";
  EXPECT_TRUE(has(error_of(o), "--micro-tokens"));
  o = Options{};
  o.micro_size = 0;
  EXPECT_TRUE(has(error_of(o), "--micro-size: 0 is outside"));
  o = Options{};
  o.model = "no-such-model";
  EXPECT_TRUE(has(error_of(o), "no-such-model"));
}

TEST(TpSettings, MicroAndSequenceParallel) {
  Options o;
  o.micro = "row, column,row";
  Settings s = resolve_settings(o, false, 0);
  EXPECT_EQ(s.micro, (std::vector<MicroKind>{MicroKind::Column, MicroKind::Row}));
  o.micro_size = 8190;  // not split by tp 4 (with 2 chunks so --overlap-chunks passes)
  o.overlap_chunks = 2;
  EXPECT_EQ(error_of(o), "--micro-size: 8190 does not split over --tp 4");
  o.tp = "1,2";
  EXPECT_EQ(error_of(o), "");
  o.micro = "";  // no micro-benchmark: the size need not split
  o.tp = "4";
  EXPECT_EQ(error_of(o), "");

  Options sp;
  sp.sequence_parallel = true;
  sp.seq_lens = "1000";
  sp.tp = "16";
  EXPECT_TRUE(has(error_of(sp), "--seq-lens: batch 1 x 1000 tokens do not split over --tp 16"));
  sp.tp = "8";
  EXPECT_EQ(error_of(sp), "");
  // The prefill that fills a decode point's cache is split too; rows, not tokens, must divide.
  sp.contexts = "2047";
  EXPECT_TRUE(has(error_of(sp), "--contexts: batch 1 x 2047 tokens do not split over --tp 8"));
  sp.batch_sizes = "8";
  EXPECT_EQ(error_of(sp), "");
  sp.contexts = "";
  EXPECT_TRUE(resolve_settings(sp, false, 0).sequence_parallel);
}

TEST(TpSettings, PositionsPastTheModelAreNoted) {
  Options o;
  o.model = "opt-125m";  // 2048 learned positions; decode at context 2048 writes position 2048
  const Settings s = resolve_settings(o, false, 0);
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_TRUE(has(s.notes[0], "4096 pass opt-125m's 2048")) << s.notes[0];
}

TEST(TpSettings, ModelConfigFileVocabNeedNotDivide) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("gpubench_tp_" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  const auto file = dir / "config.json";
  std::ofstream(file) << R"({"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816,
    "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
    "vocab_size": 32001, "max_position_embeddings": 4096})";
  Options o;
  o.model_config = file.string();
  o.tp = "2";
  const std::string ok = error_of(o);
  o.tp = "4";
  const std::string kv = error_of(o);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(ok, "");  // 32001 vocabulary entries: the LM head is not sharded
  EXPECT_TRUE(has(kv, "2 KV heads")) << kv;
}

TEST(TpSettings, ToJsonKeys) {
  Options o;
  o.micro = "column,row";
  o.overlap = true;
  const auto j = resolve_settings(o, true, 0).to_json();
  for (const char* key : {"model", "layers", "tp", "seq_lens", "batch_sizes", "contexts", "dtype",
                          "sequence_parallel", "micro", "micro_size", "micro_tokens", "overlap",
                          "overlap_chunks", "collectives", "small_collectives", "timeout_s"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j.size(), 16u);
  EXPECT_EQ(j["timeout_s"], 600);
  EXPECT_EQ(j["model"]["name"], "llama-2-7b");
  EXPECT_EQ(j["tp"], nlohmann::ordered_json::parse("[1,2,4]"));
  EXPECT_EQ(j["seq_lens"], nlohmann::ordered_json::parse("[1024,4096]"));
  EXPECT_EQ(j["micro"], nlohmann::ordered_json::parse(R"(["column","row"])"));
  EXPECT_EQ(j["overlap"], true);
  EXPECT_EQ(j["dtype"], "bf16");
}

TEST(TpShards, Llama2SevenBRankOneOfTwo) {
  const model::ModelConfig m = model::load_preset("llama-2-7b");  // q = kv = 4096, I = 11008
  const ShardShape s = shard_shape(m, 2, 1);
  EXPECT_EQ(s.heads, 16);
  EXPECT_EQ(s.kv_heads, 16);
  EXPECT_EQ(s.q_dim, 2048);
  EXPECT_EQ(s.kv_dim, 2048);
  EXPECT_EQ(s.intermediate, 5504);
  EXPECT_EQ(s.qkv_rows, (std::vector<Range>{{2048, 2048}, {6144, 2048}, {10240, 2048}}));
  EXPECT_EQ(s.gate_up_rows, (std::vector<Range>{{5504, 5504}, {16512, 5504}}));
  EXPECT_EQ(s.out_cols, (Range{2048, 2048}));
  EXPECT_EQ(s.down_cols, (Range{5504, 5504}));
  // GQA: llama-3-8b at 8 ranks holds 1 KV head (128 rows of k and of v) and 4 query heads.
  const ShardShape g = shard_shape(model::load_preset("llama-3-8b"), 8, 3);
  EXPECT_EQ(g.heads, 4);
  EXPECT_EQ(g.kv_heads, 1);
  EXPECT_EQ(g.qkv_rows, (std::vector<Range>{{1536, 512}, {4096 + 384, 128}, {5120 + 384, 128}}));
  // Not gated (opt-125m): one up block.
  const ShardShape o = shard_shape(model::load_preset("opt-125m"), 3, 2);
  EXPECT_EQ(o.gate_up_rows, (std::vector<Range>{{2048, 1024}}));
}

TEST(TpShards, RanksTileEveryFullWeight) {
  const std::vector<std::pair<std::string, std::vector<int>>> cases = {
      {"llama-2-7b", {1, 2, 4, 8}}, {"qwen2.5-7b", {2, 4}}, {"llama-3-8b", {2, 8}},
      {"opt-125m", {3, 4, 12}},     {"gpt2-xl", {5, 25}},  {"qwen2.5-1.5b", {2}}};
  for (const auto& [name, degrees] : cases) {
    const model::ModelConfig m = model::load_preset(name);
    const std::int64_t q = m.q_dim(), kv = m.kv_dim(), I = m.intermediate_size;
    for (int t : degrees) {
      std::vector<Range> qkv, gate_up, out, down;
      for (int r = 0; r < t; ++r) {
        const ShardShape s = shard_shape(m, t, r);
        qkv.insert(qkv.end(), s.qkv_rows.begin(), s.qkv_rows.end());
        gate_up.insert(gate_up.end(), s.gate_up_rows.begin(), s.gate_up_rows.end());
        out.push_back(s.out_cols);
        down.push_back(s.down_cols);
        EXPECT_EQ(s.heads * t, m.num_heads);
        EXPECT_EQ(s.kv_heads * t, m.num_kv_heads);
      }
      EXPECT_TRUE(tiles_exactly(q + 2 * kv, qkv)) << name << " t=" << t;
      EXPECT_TRUE(tiles_exactly(m.gated_mlp ? 2 * I : I, gate_up)) << name << " t=" << t;
      EXPECT_TRUE(tiles_exactly(q, out)) << name << " t=" << t;
      EXPECT_TRUE(tiles_exactly(I, down)) << name << " t=" << t;
    }
  }
}

TEST(TpShards, BadDegreeOrRank) {
  const model::ModelConfig m = model::load_preset("qwen2.5-7b");
  using gpubench::testing::input_error_of;
  EXPECT_TRUE(has(input_error_of([&] { (void)shard_shape(m, 7, 0); }), "4 KV heads"));
  EXPECT_EQ(input_error_of([&] { (void)shard_shape(m, 2, 2); }), "tp rank 2 is outside 0..1");
  EXPECT_NE(input_error_of([&] { (void)shard_shape(m, 2, -1); }), "");
  const ShardShape one = shard_shape(m, 1, 0);  // TP=1 holds everything
  EXPECT_EQ(one.qkv_rows, (std::vector<Range>{{0, 3584}, {3584, 512}, {4096, 512}}));
  EXPECT_EQ(one.down_cols, (Range{0, 18944}));
}
