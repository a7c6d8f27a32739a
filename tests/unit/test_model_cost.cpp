// The transformer cost model against hand-computed numbers: Llama-2-7b GEMM and attention FLOPs,
// decode bytes (weights + KV cache), GQA, family-specific ops, memory plans, rooflines and knees.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/model/cost.hpp"
#include "gpubench/model/presets.hpp"

using namespace gpubench;
using namespace gpubench::model;

namespace {

constexpr int kBf16 = 2;
constexpr std::uint64_t kOneGiB = 1ULL << 30;

std::vector<std::string> names_of(const std::vector<OpCost>& ops) {
  std::vector<std::string> names;
  for (const OpCost& op : ops) names.push_back(op.name);
  return names;
}

const OpCost* find_op(const std::vector<OpCost>& ops, const std::string& name) {
  const auto it =
      std::find_if(ops.begin(), ops.end(), [&](const OpCost& op) { return op.name == name; });
  return it == ops.end() ? nullptr : &*it;
}

CostTotals sum_of_kind(const std::vector<OpCost>& ops, OpKind kind) {
  CostTotals sum;
  for (const OpCost& op : ops) {
    if (op.kind != kind) continue;
    sum.flops += op.flops;
    sum.bytes += op.bytes;
  }
  return sum;
}

}  // namespace

TEST(ModelCost, Llama2PrefillGemmFlopsPerLayerAreExact) {
  const ModelConfig llama = load_preset("llama-2-7b");
  const auto ops = layer_ops(llama, Phase::Prefill, 1, 2048, 0, kBf16);
  const long long expected =
      2LL * 2048 * (4096LL * 12288 + 4096LL * 4096 + 4096LL * 22016 + 11008LL * 4096);
  EXPECT_EQ(sum_of_kind(ops, OpKind::Gemm).flops, static_cast<double>(expected));
  // Causal attention: QK^T and PV over the lower triangle, diagonal included.
  const long long attention = 2LL * 2 * 1 * 32 * 128 * (2048LL * 2049 / 2);
  EXPECT_EQ(sum_of_kind(ops, OpKind::Attention).flops, static_cast<double>(attention));
  // qkv GEMM bytes: weights + input + output, bf16.
  const OpCost* qkv = find_op(ops, "qkv");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->bytes, 2.0 * (4096.0 * 12288 + 2048.0 * 4096 + 2048.0 * 12288));
}

TEST(ModelCost, Llama2LayerOpsInOrder) {
  const auto ops = layer_ops(load_preset("llama-2-7b"), Phase::Prefill, 2, 16, 0, kBf16);
  const std::vector<std::string> expected = {
      "input_norm",     "qkv",         "rope",    "attention", "attn_out",    "attn_residual",
      "post_attn_norm", "mlp_gate_up", "mlp_act", "mlp_down",  "mlp_residual"};
  EXPECT_EQ(names_of(ops), expected);
  EXPECT_EQ(find_op(ops, "mlp_act")->kind, OpKind::Activation);
  EXPECT_EQ(find_op(ops, "rope")->kind, OpKind::Rope);
  EXPECT_EQ(find_op(ops, "attn_residual")->kind, OpKind::Residual);
}

TEST(ModelCost, Llama2WholeModelPrefillIsTwoFlopsPerParameterAndToken) {
  const ModelConfig llama = load_preset("llama-2-7b");
  const ModelCost cost = model_cost(llama, Phase::Prefill, 1, 2048, 0, kBf16);
  const double attention = 32.0 * 4 * 32 * 128 * (2048.0 * 2049 / 2);
  EXPECT_DOUBLE_EQ(cost.attention.flops, attention);
  // The rule of thumb counts the embeddings and an LM head for every position; the model only
  // runs the LM head for the last one, so it lands a few % below.
  const double rule_of_thumb = 2.0 * 6.74e9 * 2048 + attention;
  EXPECT_NEAR(cost.total.flops / rule_of_thumb, 1.0, 0.05);
  EXPECT_LT(cost.total.flops, rule_of_thumb);
  // Without embeddings: 2 x layer weights x tokens + attention + the last position's LM head.
  const double exact_gemms = 2.0 * 32 * llama.params_per_layer() * 2048;
  EXPECT_NEAR(cost.total.flops / (exact_gemms + attention + 2.0 * 4096 * 32000), 1.0, 1e-3);
  EXPECT_NEAR(cost.total.flops / 27.6e12, 1.0, 0.01);  // the 27.6 TFLOP
  EXPECT_DOUBLE_EQ(cost.total.flops, cost.gemm.flops + cost.attention.flops + cost.other.flops);
  EXPECT_DOUBLE_EQ(cost.total.bytes, cost.gemm.bytes + cost.attention.bytes + cost.other.bytes);
  EXPECT_LT(cost.other.flops, 0.01 * cost.total.flops);
  const std::vector<std::string> outside = {"token_embedding", "final_norm", "lm_head"};
  EXPECT_EQ(names_of(cost.outside_layers), outside);
  const OpCost* lm_head = find_op(cost.outside_layers, "lm_head");
  EXPECT_EQ(lm_head->kind, OpKind::LmHead);
  EXPECT_EQ(lm_head->flops, 2.0 * 1 * 4096 * 32000);  // last position only
}

TEST(ModelCost, Llama2DecodeBytesAreWeightsPlusKvCache) {
  const ModelConfig llama = load_preset("llama-2-7b");
  const ModelCost cost = model_cost(llama, Phase::Decode, 1, 1, 2048, kBf16);
  // Attention reads Q, writes O and reads K and V of the 2048 cached tokens and the new one.
  const double kv_read = 32.0 * 2 * 2049 * 4096 * 2;
  EXPECT_DOUBLE_EQ(cost.attention.bytes, kv_read + 32.0 * 2 * 4096 * 2);
  EXPECT_NEAR(kv_read / 1.07e9, 1.0, 0.01);
  EXPECT_DOUBLE_EQ(cost.attention.flops, 32.0 * 4 * 32 * 128 * 2049);
  // Every weight but the embedding table (only one row per token is gathered) is streamed once.
  const double streamed_weights = (llama.params_total() - 32000.0 * 4096) * 2;
  EXPECT_GT(cost.total.bytes, streamed_weights + kv_read);
  // The rest, about 10.5 MB, is each op's activations of one token (some 164K elements a layer).
  EXPECT_LT(cost.total.bytes, streamed_weights + kv_read + 12e6);
  // Against "13.5 GB of bf16 weights + 1.07 GB of cache": within a few %.
  EXPECT_NEAR(cost.total.bytes / (13.5e9 + 1.07e9), 1.0, 0.03);
  EXPECT_NEAR(cost.total.flops /
                  (2.0 * (llama.params_total() - 32000.0 * 4096) + 32.0 * 4 * 32 * 128 * 2049),
              1.0, 1e-3);
  // `tokens` is not used in decode.
  EXPECT_DOUBLE_EQ(model_cost(llama, Phase::Decode, 1, 0, 2048, kBf16).total.bytes,
                   cost.total.bytes);
}

TEST(ModelCost, ChunkedPrefillAttentionAddsUpToTheWholePrompt) {
  const ModelConfig llama = load_preset("llama-2-7b");
  const auto attention_flops = [&](long long tokens, long long context) {
    return find_op(layer_ops(llama, Phase::Prefill, 3, tokens, context, kBf16), "attention")->flops;
  };
  EXPECT_DOUBLE_EQ(attention_flops(1024, 0) + attention_flops(1024, 1024),
                   attention_flops(2048, 0));
  // A decode step is a one-token prefill after the context.
  const double decode =
      find_op(layer_ops(llama, Phase::Decode, 3, 1, 700, kBf16), "attention")->flops;
  EXPECT_DOUBLE_EQ(decode, attention_flops(1, 700));
  EXPECT_DOUBLE_EQ(decode, 4.0 * 3 * 32 * 128 * 701);
}

TEST(ModelCost, Llama3KvCacheUsesGroupedQueryWidth) {
  const ModelConfig llama3 = load_preset("llama-3-8b");
  ASSERT_EQ(llama3.kv_dim(), 1024);
  const auto ops = layer_ops(llama3, Phase::Decode, 4, 1, 8191, kBf16);
  // Q and O: 4 x 4096 each; K and V: 4 sequences x 8192 tokens x 1024.
  EXPECT_DOUBLE_EQ(find_op(ops, "attention")->bytes,
                   2.0 * (2.0 * 4 * 4096 + 2.0 * 4 * 8192 * 1024));
  EXPECT_DOUBLE_EQ(find_op(ops, "qkv")->flops, 2.0 * 4 * (4096 + 2 * 1024) * 4096);
  EXPECT_EQ(memory_plan(llama3, 1, 8192, kBf16).kv_cache_bytes, 1ULL * kOneGiB);
}

TEST(ModelCost, Qwen3HasQkNormAndQwen2HasQkvBias) {
  const auto qwen3 = layer_ops(load_preset("qwen3-8b"), Phase::Prefill, 1, 128, 0, kBf16);
  const OpCost* qk_norm = find_op(qwen3, "qk_norm");
  ASSERT_NE(qk_norm, nullptr);
  EXPECT_EQ(qk_norm->kind, OpKind::Norm);
  // Reads and writes q (32 heads) and k (8 heads) of 128 tokens, plus two 128-wide weights.
  EXPECT_DOUBLE_EQ(qk_norm->bytes, 2.0 * (2.0 * 128 * (4096 + 1024) + 2 * 128));
  EXPECT_EQ(
      find_op(layer_ops(load_preset("llama-2-7b"), Phase::Prefill, 1, 128, 0, kBf16), "qk_norm"),
      nullptr);

  const auto qwen2 = layer_ops(load_preset("qwen2.5-1.5b"), Phase::Prefill, 1, 64, 0, kBf16);
  const double n = 1536 + 2 * 256, k = 1536;
  EXPECT_DOUBLE_EQ(find_op(qwen2, "qkv")->flops, 2.0 * 64 * n * k + 64 * n);    // + bias
  EXPECT_DOUBLE_EQ(find_op(qwen2, "attn_out")->flops, 2.0 * 64 * 1536 * 1536);  // no bias
}

TEST(ModelCost, OptHasLearnedPositionsAndNoRope) {
  const ModelConfig opt = load_preset("opt-125m");
  const ModelCost cost = model_cost(opt, Phase::Prefill, 2, 100, 0, kBf16);
  EXPECT_EQ(find_op(cost.layer, "rope"), nullptr);
  EXPECT_EQ(find_op(cost.layer, "mlp_gate_up"), nullptr);
  const OpCost* up = find_op(cost.layer, "mlp_up");
  ASSERT_NE(up, nullptr);
  EXPECT_DOUBLE_EQ(up->flops, 2.0 * 200 * 3072 * 768 + 200 * 3072);  // bias in the epilogue
  const OpCost* positions = find_op(cost.outside_layers, "position_embedding");
  ASSERT_NE(positions, nullptr);
  EXPECT_EQ(positions->kind, OpKind::Embedding);
  // 100 table rows shared by the batch, plus read and write of 200 token rows.
  EXPECT_DOUBLE_EQ(positions->bytes, 2.0 * (100.0 * 768 + 2 * 200.0 * 768));
  // LayerNorm weights and biases.
  EXPECT_DOUBLE_EQ(find_op(cost.layer, "input_norm")->bytes, 2.0 * (2 * 200.0 * 768 + 2 * 768));
  // Four GEMMs of 12 x 768^2 weights in all, each with a bias.
  EXPECT_DOUBLE_EQ(sum_of_kind(cost.layer, OpKind::Gemm).flops,
                   2.0 * 200 * 12 * 768 * 768 + 200.0 * (2304 + 768 + 3072 + 768));
}

TEST(ModelCost, MemoryPlanOfLlama2) {
  const ModelConfig llama = load_preset("llama-2-7b");
  const MemoryPlan plan = memory_plan(llama, 1, 2048, kBf16);
  EXPECT_EQ(plan.weight_bytes, static_cast<std::uint64_t>(llama.params_total()) * 2);
  EXPECT_EQ(plan.kv_cache_bytes, 2ULL * 32 * 2048 * 4096 * 2);
  const std::uint64_t activations =
      2048ULL * (3 * 4096 + 2 * 11008) * 2 + 32ULL * 2048 * 4 + 32000ULL * 2;
  EXPECT_EQ(plan.activation_bytes, activations);
  EXPECT_EQ(plan.total_bytes, plan.weight_bytes + plan.kv_cache_bytes + plan.activation_bytes);
  EXPECT_TRUE(fits(plan, 80 * kOneGiB));
  EXPECT_EQ(why_not(plan, 80 * kOneGiB), "");
  // 13.7 GiB does not fit in 90% of 15 GiB (13.5 GiB) but does in all of it.
  EXPECT_FALSE(fits(plan, 15 * kOneGiB));
  EXPECT_TRUE(fits(plan, 15 * kOneGiB, 1.0));
}

TEST(ModelCost, Llama2_70bInBf16DoesNotFitIn80GB) {
  const MemoryPlan plan = memory_plan(load_preset("llama-2-70b"), 1, 4096, kBf16);
  EXPECT_GT(plan.weight_bytes, 130e9);
  EXPECT_EQ(plan.kv_cache_bytes, 2ULL * 80 * 4096 * 1024 * 2);  // GQA: 8 KV heads
  EXPECT_FALSE(fits(plan, 80 * kOneGiB));
  const std::string reason = why_not(plan, 80 * kOneGiB);
  EXPECT_EQ(reason.rfind("needs " + format_bytes(plan.total_bytes) + " (weights 128.", 0), 0u)
      << reason;
  EXPECT_NE(reason.find("GPU has 80 GiB free"), std::string::npos) << reason;
  EXPECT_NE(reason.find("KV cache 1.25 GiB"), std::string::npos) << reason;
  EXPECT_THROW(fits(plan, 80 * kOneGiB, 0.0), InputError);
  EXPECT_THROW(fits(plan, 80 * kOneGiB, 1.5), InputError);
}

TEST(ModelCost, Rooflines) {
  // 2 TFLOP at 1000 TFLOP/s = 2 ms; 1 GB at 4000 GB/s = 0.25 ms: compute bound.
  EXPECT_DOUBLE_EQ(roofline_seconds(2e12, 1e9, 1000.0, 4000.0), 2e-3);
  // 1 GFLOP = 1 us; 14.4 GB at 4800 GB/s = 3 ms: memory bound.
  EXPECT_DOUBLE_EQ(roofline_seconds(1e9, 14.4e9, 1000.0, 4800.0), 3e-3);
  EXPECT_DOUBLE_EQ(decode_hbm_share(14.4e9, 3.6e-3, 4800.0), 14.4e9 / 3.6e-3 / 1e9 / 4800.0);
  EXPECT_NEAR(decode_hbm_share(14.4e9, 3.6e-3, 4800.0), 0.8333, 1e-4);
  EXPECT_THROW(roofline_seconds(1, 1, 0.0, 1.0), InputError);
  EXPECT_THROW(roofline_seconds(1, 1, 1.0, -1.0), InputError);
  EXPECT_THROW(decode_hbm_share(1, 0.0, 1.0), InputError);
}

TEST(ModelCost, CrossoverInterpolatesInLog2) {
  const std::vector<double> xs = {1, 2, 4, 8};
  // a - b goes from -1 at x=2 to +1 at x=4: the zero is halfway in log2, at 2^1.5.
  const auto knee = crossover(xs, {1, 2, 4, 8}, {3, 3, 3, 3});
  ASSERT_TRUE(knee.has_value());
  EXPECT_NEAR(*knee, std::exp2(1.5), 1e-12);
  // Equal at a sweep point: that point.
  EXPECT_EQ(crossover(xs, {1, 2, 3, 8}, {3, 3, 3, 3}), 4.0);
  // True from the start; never true.
  EXPECT_EQ(crossover(xs, {5, 5, 5, 5}, {3, 3, 3, 3}), 1.0);
  EXPECT_FALSE(crossover(xs, {1, 1, 1, 1}, {3, 3, 3, 3}).has_value());
  EXPECT_FALSE(crossover({}, {}, {}).has_value());
  // Uneven interpolation: -3 at x=128, +1 at x=512: 3/4 of the way in log2 from 7 to 9.
  EXPECT_NEAR(*crossover({128, 512}, {0, 4}, {3, 3}), std::exp2(8.5), 1e-9);
  EXPECT_THROW(crossover(xs, {1, 2, 3}, {3, 3, 3, 3}), InputError);
  EXPECT_THROW(crossover({1, 4, 2, 8}, {1, 2, 3, 4}, {3, 3, 3, 3}), InputError);
  EXPECT_THROW(crossover({0, 1}, {1, 2}, {3, 3}), InputError);
}

TEST(ModelCost, SuperlinearOnset) {
  const std::vector<double> xs = {128, 256, 512, 1024, 2048};
  // Linear: never.
  EXPECT_FALSE(superlinear_onset(xs, {1, 2, 4, 8, 16}).has_value());
  // Slightly super-linear (slope log2(2.2) = 1.14) stays under the default threshold.
  EXPECT_FALSE(superlinear_onset(xs, {1, 2.2, 4.84, 10.648, 23.4256}).has_value());
  // Linear, then quadratic after 512: the onset is the last point before the steep segment.
  EXPECT_EQ(superlinear_onset(xs, {1, 2, 4, 16, 64}), 512.0);
  // Quadratic from the start.
  EXPECT_EQ(superlinear_onset(xs, {1, 4, 16, 64, 256}), 128.0);
  // A higher threshold.
  EXPECT_FALSE(superlinear_onset(xs, {1, 4, 16, 64, 256}, 2.5).has_value());
  EXPECT_FALSE(superlinear_onset({128}, {1}).has_value());
  EXPECT_THROW(superlinear_onset(xs, {1, 2, 0, 8, 16}), InputError);
  EXPECT_THROW(superlinear_onset(xs, {1, 2, 4}), InputError);
}

TEST(ModelCost, BadInputIsInputError) {
  const ModelConfig llama = load_preset("llama-2-7b");
  EXPECT_THROW(layer_ops(llama, Phase::Prefill, 0, 128, 0, kBf16), InputError);
  EXPECT_THROW(layer_ops(llama, Phase::Decode, -1, 1, 128, kBf16), InputError);
  EXPECT_THROW(layer_ops(llama, Phase::Prefill, 1, 0, 0, kBf16), InputError);
  EXPECT_NO_THROW(layer_ops(llama, Phase::Decode, 1, 0, 0, kBf16));  // tokens unused in decode
  EXPECT_THROW(layer_ops(llama, Phase::Decode, 1, 1, -1, kBf16), InputError);
  EXPECT_THROW(model_cost(llama, Phase::Prefill, 1, 128, -5, kBf16), InputError);
  for (int bad : {0, 3, 8, -2}) {
    EXPECT_THROW(layer_ops(llama, Phase::Prefill, 1, 128, 0, bad), InputError) << bad;
    EXPECT_THROW(memory_plan(llama, 1, 128, bad), InputError) << bad;
  }
  for (int good : {1, 2, 4}) EXPECT_NO_THROW(model_cost(llama, Phase::Decode, 1, 1, 9, good));
  EXPECT_THROW(memory_plan(llama, 0, 128, kBf16), InputError);
  EXPECT_THROW(memory_plan(llama, 1, 0, kBf16), InputError);
  try {
    layer_ops(llama, Phase::Prefill, 0, 128, 0, kBf16);
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "model 'llama-2-7b': batch size must be positive, got 0");
  }
}

TEST(ModelCost, NamesOfKindsAndPhases) {
  EXPECT_STREQ(to_string(Phase::Prefill), "prefill");
  EXPECT_STREQ(to_string(Phase::Decode), "decode");
  EXPECT_STREQ(to_string(OpKind::LmHead), "lm_head");
  EXPECT_STREQ(to_string(OpKind::Attention), "attention");
  const auto ops = layer_ops(load_preset("gpt2-xl"), Phase::Prefill, 1, 8, 0, 4);
  EXPECT_EQ(totals(ops).flops, [&] {
    double sum = 0;
    for (const OpCost& op : ops) sum += op.flops;
    return sum;
  }());
}
