// The transformer engine on a GPU: decode after prefill equals the prefill of the longer prompt
// at its last position (the KV cache, positions and both attention paths agree), and every
// preset builds and runs one layer with finite logits.
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "gpubench/core/cuda.hpp"
#include "gpubench/model/presets.hpp"
#include "gpubench/model/transformer.hpp"

using namespace gpubench;
using namespace gpubench::model;

namespace {

constexpr int kGpu = 0;

std::vector<float> logits_of(const Transformer& t, int batch, int vocab) {
  std::vector<__nv_bfloat16> raw(static_cast<std::size_t>(batch) * vocab);
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
  GPB_CUDA_CHECK(cudaMemcpy(raw.data(), t.logits(), raw.size() * 2, cudaMemcpyDeviceToHost));
  std::vector<float> out(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) out[i] = __bfloat162float(raw[i]);
  return out;
}

ModelConfig tiny_llama() {
  return parse_model_config(nlohmann::json::parse(R"({
    "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 1000, "max_position_embeddings": 512, "hidden_act": "silu",
    "rms_norm_eps": 1e-5, "tie_word_embeddings": false})"),
                            "tiny-llama");
}

}  // namespace

TEST(Transformer, DecodeAfterPrefillEqualsLongerPrefill) {
  DeviceGuard guard(kGpu);
  for (const ModelConfig& m : {tiny_llama(), load_preset("opt-125m")}) {
    EngineOptions o;
    o.max_batch = 2;
    o.max_tokens = 64;
    o.max_context = 128;
    o.layers = 2;
    Transformer t(m, o, kGpu);
    Stream s(kGpu);
    const int batch = 2, n = 34;
    DeviceBuffer long_ids(kGpu, batch * n * 4), short_ids(kGpu, batch * (n - 1) * 4),
        next_ids(kGpu, batch * 4);
    const std::int32_t* ids = t.tokens(batch, n, 5, s.get());
    s.synchronize();  // the copies below run on the legacy stream
    GPB_CUDA_CHECK(cudaMemcpy(long_ids.get(), ids, batch * n * 4, cudaMemcpyDeviceToDevice));
    // Per sequence: its first n-1 tokens, and its n-th as the decode input.
    GPB_CUDA_CHECK(cudaMemcpy2D(short_ids.get(), (n - 1) * 4, long_ids.get(), n * 4, (n - 1) * 4,
                                batch, cudaMemcpyDeviceToDevice));
    GPB_CUDA_CHECK(cudaMemcpy2D(next_ids.get(), 4, long_ids.as<char>() + (n - 1) * 4, n * 4, 4,
                                batch, cudaMemcpyDeviceToDevice));
    t.prefill(long_ids.as<std::int32_t>(), batch, n, s.get());
    const auto want = logits_of(t, batch, m.vocab_size);
    t.prefill(short_ids.as<std::int32_t>(), batch, n - 1, s.get());
    t.decode(next_ids.as<std::int32_t>(), batch, n - 1, s.get());
    const auto got = logits_of(t, batch, m.vocab_size);
    float scale = 0;
    for (float v : want) scale = std::max(scale, std::fabs(v));
    ASSERT_GT(scale, 0.0f) << m.name;
    int wrong = 0;
    for (std::size_t i = 0; i < want.size(); ++i)
      wrong += !(std::fabs(got[i] - want[i]) <= 0.03f * scale);
    EXPECT_EQ(wrong, 0) << m.name << ": logits of decode vs prefill (max |logit| " << scale << ")";
  }
}

TEST(Transformer, EveryPresetRunsOneLayer) {
  DeviceGuard guard(kGpu);
  for (const auto& name : preset_names()) {
    const ModelConfig m = load_preset(name);
    EngineOptions o;
    o.layers = 1;
    o.max_batch = 2;
    o.max_tokens = 64;
    o.max_context = 96;
    Transformer t(m, o, kGpu);
    Stream s(kGpu);
    const std::int32_t* ids = t.tokens(2, 64, 3, s.get());
    t.prefill(ids, 2, 64, s.get());
    t.decode(ids, 2, 64, s.get());
    const auto logits = logits_of(t, 2, m.vocab_size);
    int bad = 0;
    for (float v : logits) bad += !std::isfinite(v);
    EXPECT_EQ(bad, 0) << name;
    EXPECT_GT(t.memory().weights, 0u);
    EXPECT_GT(t.memory().kv_cache, 0u);
  }
}
