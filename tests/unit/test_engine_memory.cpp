// The engine's allocations computed on the host (model::engine_memory): the weights are the
// model's parameters, the KV cache and activations follow the options, tensor-parallel ranks hold
// their shards. (That the Transformer allocates exactly this is a GPU test, test_tp_engine.)
#include <gtest/gtest.h>

#include "gpubench/core/errors.hpp"
#include "gpubench/model/presets.hpp"
#include "gpubench/model/transformer.hpp"

using namespace gpubench;
using namespace gpubench::model;

TEST(EngineMemory, FollowsTheModelAndOptions) {
  for (const char* name : {"llama-2-7b", "opt-125m", "qwen2.5-7b", "qwen3-8b", "gpt2-xl"}) {
    const ModelConfig m = load_preset(name);
    EngineOptions o;
    o.max_batch = 2;
    o.max_tokens = 512;
    o.max_context = 1024;
    const EngineMemory mem = engine_memory(m, o, 1 << 20);
    // Learned position tables are sized for the engine's context when it is longer.
    const std::uint64_t extra_positions =
        m.positions == Positions::Learned && o.max_context > m.max_positions
            ? static_cast<std::uint64_t>(o.max_context - m.max_positions) * m.hidden_size * 2
            : 0;
    // OPT's table has 2 more rows in the parameter count (HF's position offset); the engine
    // indexes positions from 0 and leaves them out.
    const std::uint64_t opt_offset = m.model_type == "opt" ? 2ull * m.hidden_size * 2 : 0;
    // Each row of a layer's qkv, out, gate|up (up) and down matrices is followed by the pad.
    const std::uint64_t rows_per_layer = m.q_dim() + 2ull * m.kv_dim() + m.hidden_size +
                                         (m.gated_mlp ? 2ull : 1ull) * m.intermediate_size +
                                         m.hidden_size;
    const std::uint64_t pad_bytes =
        m.num_layers * rows_per_layer * EngineOptions::kWeightRowPad * 2ull;
    EXPECT_EQ(weight_row_pad(o), EngineOptions::kWeightRowPad);
    EXPECT_EQ(mem.weights + opt_offset,
              static_cast<std::uint64_t>(m.params_total()) * 2 + extra_positions + pad_bytes)
        << name;
    EngineOptions packed = o;
    packed.weight_row_pad = 0;
    EXPECT_EQ(engine_memory(m, packed, 1 << 20).weights + pad_bytes, mem.weights) << name;
    EXPECT_EQ(kv_row_pad(o), EngineOptions::kKvRowPad);
    EXPECT_EQ(mem.kv_cache,
              2ull * m.num_layers * 2 * 1024 * (m.kv_dim() + EngineOptions::kKvRowPad) * 2)
        << name;
    EXPECT_GT(mem.activations, 2ull * 512 * 3 * m.hidden_size * 2) << name;
    EXPECT_GE(mem.workspace, 1u << 20) << name;
    EXPECT_EQ(mem.total(), mem.weights + mem.kv_cache + mem.activations + mem.workspace);
  }
}

TEST(EngineMemory, LayersAndShards) {
  const ModelConfig m = load_preset("llama-2-7b");
  EngineOptions o;
  o.weight_row_pad = 0;  // packed rows: a shard's out and down rows are half as long
  o.kv_row_pad = 0;      // and its cache rows
  const EngineMemory full = engine_memory(m, o, 0);
  o.layers = 2;
  const EngineMemory two = engine_memory(m, o, 0);
  EXPECT_EQ(two.kv_cache * 16, full.kv_cache);
  EXPECT_LT(two.weights, full.weights);
  o.layers = 0;
  o.tp_size = 2;
  const EngineMemory half = engine_memory(m, o, 0);
  EXPECT_EQ(half.kv_cache * 2, full.kv_cache);
  // The decoder layers halve; embedding, LM head and norms stay whole on every rank.
  const std::uint64_t replicated =
      (2ull * m.vocab_size * m.hidden_size + (2ull * m.num_layers + 1) * m.hidden_size) * 2;
  EXPECT_EQ((half.weights - replicated) * 2, full.weights - replicated);
  o.tp_size = 3;
  EXPECT_THROW((void)engine_memory(m, o, 0), InputError);
}

// Pipeline stages: the layers and the ends split, nothing counted twice but a tied embedding,
// which both ends hold.
TEST(EngineMemory, PipelineStages) {
  for (const char* name : {"llama-2-7b", "opt-125m"}) {
    const ModelConfig m = load_preset(name);
    EngineOptions o;
    const EngineMemory whole = engine_memory(m, o, 0);
    EngineOptions first = o, last = o;
    first.layers = m.num_layers / 2;
    first.head = false;
    last.first_layer = m.num_layers / 2;
    last.embed = false;
    const EngineMemory a = engine_memory(m, first, 0), b = engine_memory(m, last, 0);
    const std::uint64_t tied =
        m.tie_word_embeddings ? static_cast<std::uint64_t>(m.vocab_size) * m.hidden_size * 2 : 0;
    EXPECT_EQ(a.weights + b.weights, whole.weights + tied) << name;
    EXPECT_EQ(a.kv_cache + b.kv_cache, whole.kv_cache) << name;
  }
}

// A stage's microbatches: the cache holds every sequence (cache_batch), the activations one step's
// (max_batch); a cache smaller than a step is refused.
TEST(EngineMemory, CacheHoldsEveryMicrobatchActivationsOneStep) {
  const ModelConfig m = load_preset("llama-2-7b");
  EngineOptions step;
  step.max_batch = 4;
  step.max_tokens = 1024;
  step.max_context = 1151;
  EngineOptions all = step;
  all.max_batch = 16;
  EngineOptions micro = step;
  micro.cache_batch = 16;
  EXPECT_EQ(cache_sequences(step), 4);
  EXPECT_EQ(cache_sequences(micro), 16);
  const EngineMemory s = engine_memory(m, step, 0), a = engine_memory(m, all, 0),
                     u = engine_memory(m, micro, 0);
  EXPECT_EQ(u.kv_cache, a.kv_cache);
  EXPECT_EQ(u.activations, s.activations);
  EXPECT_EQ(u.workspace, s.workspace);
  EXPECT_EQ(u.weights, s.weights);
  EXPECT_LT(u.total(), a.total());
}

// The row pad is a non-negative multiple of 8 elements (16 bytes in bf16), else a clear error.
TEST(EngineMemory, RowPadIsChecked) {
  const ModelConfig m = load_preset("llama-2-7b");
  EngineOptions o;
  for (int bad : {-8, 4, 100}) {
    o.weight_row_pad = bad;
    EXPECT_THROW((void)weight_row_pad(o), InputError) << bad;
    EXPECT_THROW((void)engine_memory(m, o, 0), InputError) << bad;
  }
  o.weight_row_pad = 64;
  EXPECT_EQ(weight_row_pad(o), 64);
}

// The cache rows' pad: checked the same way, and counted once per position of every layer's K and
// V caches.
TEST(EngineMemory, KvRowPad) {
  const ModelConfig m = load_preset("llama-2-7b");
  EngineOptions o;
  o.max_batch = 2;
  o.max_context = 1000;
  for (int bad : {-8, 4, 100}) {
    o.kv_row_pad = bad;
    EXPECT_THROW((void)kv_row_pad(o), InputError) << bad;
    EXPECT_THROW((void)engine_memory(m, o, 0), InputError) << bad;
  }
  o.kv_row_pad = 0;
  const std::uint64_t packed = engine_memory(m, o, 0).kv_cache;
  EXPECT_EQ(packed, 2ull * m.num_layers * 2 * 1000 * m.kv_dim() * 2);
  o.kv_row_pad = 64;
  EXPECT_EQ(kv_row_pad(o), 64);
  EXPECT_EQ(engine_memory(m, o, 0).kv_cache, packed + 2ull * m.num_layers * 2 * 1000 * 64 * 2);
}
