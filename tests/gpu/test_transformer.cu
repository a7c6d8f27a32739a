// The transformer engine on a GPU: decode after prefill equals the prefill of the longer prompt
// at its last position (the KV cache, positions and both attention paths agree), fused decode
// steps equal unfused ones, and every preset builds and runs one layer with finite logits.
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
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

// Logits of `got` off `want` by more than `share` of the largest |want|; -1 when `want` is all
// zero (nothing to compare against).
int mismatches(const std::vector<float>& want, const std::vector<float>& got,
               float share = 0.03f) {
  float scale = 0;
  for (float v : want) scale = std::max(scale, std::fabs(v));
  if (!(scale > 0)) return -1;
  int wrong = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    wrong += !(std::fabs(got[i] - want[i]) <= share * scale);
  return wrong;
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
    EXPECT_EQ(mismatches(want, got), 0) << m.name << ": logits of decode vs prefill";
  }
}

// Microbatches of one sequence each in their own cache rows (seq0) of an engine whose steps are
// one sequence (max_batch 1, cache_batch 2): the same logits as an engine sized for both, less
// activation memory, the same cache; a step outside the cache and a cache smaller than a step are
// refused.
TEST(Transformer, MicrobatchesInTheirOwnCacheRows) {
  DeviceGuard guard(kGpu);
  const ModelConfig m = tiny_llama();
  EngineOptions both;
  both.max_batch = 2;
  both.max_tokens = 64;
  both.max_context = 128;
  EngineOptions micro = both;
  micro.max_batch = 1;
  micro.cache_batch = 2;
  const int n = 30;
  std::vector<std::vector<float>> logits;
  std::vector<EngineMemory> memory;
  for (const EngineOptions& o : {both, micro}) {
    Transformer t(m, o, kGpu);
    Stream s(kGpu);
    for (int mb = 0; mb < 2; ++mb) t.prefill(t.tokens(1, n, 5 + mb, s.get()), 1, n, s.get(), mb);
    for (int mb = 1; mb >= 0; --mb) {
      t.decode(t.tokens(1, 1, 9 + mb, s.get()), 1, n, s.get(), mb);
      logits.push_back(logits_of(t, 1, m.vocab_size));
    }
    memory.push_back(t.memory());
    if (o.cache_batch == 2)
      EXPECT_THROW(t.prefill(t.tokens(1, n, 5, s.get()), 1, n, s.get(), 2), InputError);
  }
  for (std::size_t i = 0; i < 2; ++i)
    EXPECT_EQ(mismatches(logits[i], logits[i + 2]), 0) << "microbatch " << 1 - i;
  EXPECT_EQ(memory[1].kv_cache, memory[0].kv_cache);
  EXPECT_LT(memory[1].activations, memory[0].activations);
  EngineOptions small = micro;
  small.max_batch = 2;
  small.cache_batch = 1;
  EXPECT_THROW(Transformer(m, small, kGpu), InputError);
}

// A new GEMM shape's algorithms are timed through the wait the engine was given (a rank's,
// which ends when a peer failed): the engine makes no host wait of its own then, and one that
// throws ends the step with its error.
TEST(Transformer, TimesNewShapesThroughItsHostWait) {
  DeviceGuard guard(kGpu);
  EngineOptions o;
  o.max_batch = 1;
  o.max_tokens = 64;
  o.max_context = 64;
  Transformer t(tiny_llama(), o, kGpu);
  Stream s(kGpu);
  int waits = 0;
  t.set_host_wait([&](const Event& e) {
    ++waits;
    e.synchronize();
  });
  t.prefill(t.tokens(1, 48, 3, s.get()), 1, 48, s.get());
  s.synchronize();
  EXPECT_GT(waits, 0) << "no GEMM shape timed through the wait";
  t.set_host_wait([](const Event&) { throw std::runtime_error("a peer failed"); });
  EXPECT_THROW(t.prefill(t.tokens(1, 40, 3, s.get()), 1, 40, s.get()), std::runtime_error);
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
}

// The operations a step ran, by name.
struct OpNames : OpObserver {
  std::set<std::string> seen;
  void begin(const char* op, int, cudaStream_t) override { seen.insert(op); }
  void end(const char*, int, cudaStream_t) override {}
};

// Decode steps of one sequence of an RMSNorm model fold the norms, residual adds and the
// activation into the skinny GEMVs (EngineOptions::fuse_small_steps): their logits must be the
// unfused engine's, step after step (the residual stream and the KV cache carry over), and the
// separate norm and activation kernels must be gone. Llama shapes, Qwen2.5 (qkv bias, tied
// embeddings) and Qwen3 (per-head q/k norm).
TEST(Transformer, FusedDecodeEqualsUnfused) {
  DeviceGuard guard(kGpu);
  for (const ModelConfig& m :
       {tiny_llama(), load_preset("qwen2.5-1.5b"), load_preset("qwen3-8b")}) {
    const int batch = 1;
    EngineOptions o;
    o.max_batch = batch;
    o.max_tokens = 24;
    o.max_context = 32;
    o.layers = 2;
    EngineOptions plain = o;
    plain.fuse_small_steps = false;
    Transformer fused(m, o, kGpu), unfused(m, plain, kGpu);
    Stream s(kGpu);
    const int n = 20;
    for (Transformer* t : {&fused, &unfused})
      t->prefill(t->tokens(batch, n, 9, s.get()), batch, n, s.get());
    for (int step = 0; step < 3; ++step) {
      std::vector<float> got[2];
      OpNames ops[2];
      for (int i = 0; i < 2; ++i) {
        Transformer* t = i == 0 ? &fused : &unfused;
        t->set_observer(&ops[i]);
        t->decode(t->tokens(batch, 1, 20 + step, s.get()), batch, n + step, s.get());
        t->set_observer(nullptr);
        got[i] = logits_of(*t, batch, m.vocab_size);
      }
      const std::string where =
          m.name + " batch " + std::to_string(batch) + " step " + std::to_string(step);
      for (const char* op : {"residual_norm", "mlp_residual_norm", "mlp_act", "final_norm"}) {
        EXPECT_EQ(ops[0].seen.count(op), 0u) << where << ": fused step ran " << op;
        EXPECT_EQ(ops[1].seen.count(op), 1u) << where << ": unfused step without " << op;
      }
      EXPECT_EQ(mismatches(got[1], got[0], 0.02f), 0) << where << ": fused vs unfused logits";
    }
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

namespace {

float rb(float x) {  // round to bf16 and back, as the GPU stores every op's output
  return __bfloat162float(__float2bfloat16(x));
}

// `rows` rows of `cols` bf16 values, `pitch` elements apart on the GPU, packed as floats.
std::vector<float> fetch_rows(const void* p, std::size_t rows, std::size_t cols,
                              std::size_t pitch) {
  std::vector<__nv_bfloat16> raw(rows * cols);
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
  GPB_CUDA_CHECK(
      cudaMemcpy2D(raw.data(), cols * 2, p, pitch * 2, cols * 2, rows, cudaMemcpyDeviceToHost));
  std::vector<float> out(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) out[i] = __bfloat162float(raw[i]);
  return out;
}

std::vector<float> fetch(const void* p, std::size_t n) {
  return fetch_rows(p, 1, n, n);
}

// A weight matrix [rows, cols] of `t`, packed (its rows are parameter_pitch() apart on the GPU).
std::vector<float> fetch_matrix(const Transformer& t, const char* name, int layer, std::size_t rows,
                                std::size_t cols) {
  return fetch_rows(t.parameter(name, layer), rows, cols,
                    static_cast<std::size_t>(t.parameter_pitch(name)));
}

using Rows = std::vector<std::vector<float>>;

Rows rms(const Rows& x, const std::vector<float>& w, float eps) {
  Rows y = x;
  for (auto& row : y) {
    float ss = 0;
    for (float v : row) ss += v * v;
    const float r = 1.0f / std::sqrt(ss / static_cast<float>(row.size()) + eps);
    for (std::size_t c = 0; c < row.size(); ++c) row[c] = rb(row[c] * r * w[c]);
  }
  return y;
}

// Y[t][n] = sum_k X[t][k] W[n][k], W [out, in] row-major.
Rows matmul(const Rows& x, const std::vector<float>& w, std::size_t out) {
  const std::size_t in = x[0].size();
  Rows y(x.size(), std::vector<float>(out));
  for (std::size_t t = 0; t < x.size(); ++t)
    for (std::size_t n = 0; n < out; ++n) {
      double s = 0;
      for (std::size_t k = 0; k < in; ++k) s += static_cast<double>(x[t][k]) * w[n * in + k];
      y[t][n] = rb(static_cast<float>(s));
    }
  return y;
}

// HF rotate_half on `heads` heads of `hd` starting at column `col0` of each row.
void rope_host(Rows& x, std::size_t col0, int heads, int hd, float theta) {
  for (std::size_t t = 0; t < x.size(); ++t)
    for (int h = 0; h < heads; ++h) {
      float* v = x[t].data() + col0 + static_cast<std::size_t>(h) * hd;
      for (int i = 0; i < hd / 2; ++i) {
        const float inv = static_cast<float>(std::pow(static_cast<double>(theta), -2.0 * i / hd));
        const float ang = static_cast<float>(t) * inv;
        const float c = std::cos(ang), s = std::sin(ang), x1 = v[i], x2 = v[i + hd / 2];
        v[i] = rb(x1 * c - x2 * s);
        v[i + hd / 2] = rb(x2 * c + x1 * s);
      }
    }
}

}  // namespace

// A two-layer tiny Llama (RMSNorm, RoPE, grouped-query heads, SwiGLU, own LM head) recomputed
// on the host from the engine's own weights, rounding to bf16 where the GPU stores.
TEST(Transformer, PrefillMatchesHostReference) {
  DeviceGuard guard(kGpu);
  const ModelConfig m = tiny_llama();
  EngineOptions o;
  o.max_batch = 1;
  o.max_tokens = 16;
  o.max_context = 32;
  Transformer t(m, o, kGpu);
  Stream s(kGpu);
  const int T = 9;
  const std::int32_t* ids = t.tokens(1, T, 7, s.get());
  t.prefill(ids, 1, T, s.get());
  const auto got = logits_of(t, 1, m.vocab_size);
  std::vector<std::int32_t> id(T);
  GPB_CUDA_CHECK(cudaMemcpy(id.data(), ids, T * 4, cudaMemcpyDeviceToHost));

  const int H = m.hidden_size, Q = m.q_dim(), KV = m.kv_dim(), I = m.intermediate_size;
  const int hd = m.head_dim, group = m.num_heads / m.num_kv_heads;
  const float eps = static_cast<float>(m.norm_eps), theta = static_cast<float>(m.rope_theta);
  const auto embed = fetch(t.parameter("embed"), static_cast<std::size_t>(m.vocab_size) * H);
  Rows x(T, std::vector<float>(H));
  for (int i = 0; i < T; ++i)
    std::copy_n(embed.begin() + static_cast<std::ptrdiff_t>(id[i]) * H, H, x[i].begin());
  for (int l = 0; l < t.layers(); ++l) {
    Rows h = rms(x, fetch(t.parameter("in_norm_w", l), H), eps);
    Rows qkv = matmul(h, fetch_matrix(t, "qkv_w", l, Q + 2 * KV, H), Q + 2 * KV);
    rope_host(qkv, 0, m.num_heads, hd, theta);
    rope_host(qkv, Q, m.num_kv_heads, hd, theta);
    Rows attn(T, std::vector<float>(Q));
    for (int i = 0; i < T; ++i)
      for (int hh = 0; hh < m.num_heads; ++hh) {
        const int g = hh / group;
        std::vector<double> sc(i + 1);
        double mx = -1e300;
        for (int j = 0; j <= i; ++j) {
          double d = 0;
          for (int c = 0; c < hd; ++c) d += qkv[i][hh * hd + c] * qkv[j][Q + g * hd + c];
          sc[j] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, sc[j]);
        }
        double den = 0;
        for (int j = 0; j <= i; ++j) den += std::exp(sc[j] - mx);
        for (int c = 0; c < hd; ++c) {
          double num = 0;
          for (int j = 0; j <= i; ++j) num += std::exp(sc[j] - mx) * qkv[j][Q + KV + g * hd + c];
          attn[i][hh * hd + c] = rb(static_cast<float>(num / den));
        }
      }
    const Rows o_proj = matmul(attn, fetch_matrix(t, "out_w", l, H, Q), H);
    for (int i = 0; i < T; ++i)
      for (int c = 0; c < H; ++c) x[i][c] = rb(x[i][c] + o_proj[i][c]);
    h = rms(x, fetch(t.parameter("post_norm_w", l), H), eps);
    const Rows gu = matmul(h, fetch_matrix(t, "up_w", l, 2 * I, H), 2 * I);
    Rows act(T, std::vector<float>(I));
    for (int i = 0; i < T; ++i)
      for (int c = 0; c < I; ++c) {
        const float g = gu[i][c];
        act[i][c] = rb(g / (1.0f + std::exp(-g)) * gu[i][I + c]);
      }
    const Rows down = matmul(act, fetch_matrix(t, "down_w", l, H, I), H);
    for (int i = 0; i < T; ++i)
      for (int c = 0; c < H; ++c) x[i][c] = rb(x[i][c] + down[i][c]);
  }
  const Rows last = rms(Rows{x[T - 1]}, fetch(t.parameter("final_norm_w"), H), eps);
  const Rows want =
      matmul(last, fetch(t.parameter("lm_head"), std::size_t(m.vocab_size) * H), m.vocab_size);
  float scale = 0;
  for (float v : want[0]) scale = std::max(scale, std::fabs(v));
  int wrong = 0;
  for (int v = 0; v < m.vocab_size; ++v)
    wrong += !(std::fabs(got[v] - want[0][v]) <= 0.03f * scale);
  EXPECT_EQ(wrong, 0) << "max |logit| " << scale;
}

// Pipeline stages: the model cut in two engines on one GPU, the first's residual stream handed
// to the second, gives the one-engine logits, prefill and decode after it (same weights by global
// layer index; the only difference is the cut itself: the whole model fuses the residual add with
// the next layer's norm, the stages run them as two kernels, so a value may round differently);
// also with a tied LM head (opt-125m), which the last stage holds without the embedding step.
TEST(Transformer, PipelineStagesEqualTheWholeModel) {
  DeviceGuard guard(kGpu);
  for (const ModelConfig& m : {tiny_llama(), load_preset("opt-125m")}) {
    EngineOptions o;
    o.max_batch = 2;
    o.max_tokens = 32;
    o.max_context = 64;
    o.layers = 2;
    EngineOptions first = o, second = o;
    first.layers = 1;
    first.head = false;
    second.first_layer = 1;
    second.layers = 1;
    second.embed = false;
    Transformer whole(m, o, kGpu), a(m, first, kGpu), b(m, second, kGpu);
    Stream s(kGpu);
    const int batch = 2, n = 20;
    const std::size_t hidden_bytes = static_cast<std::size_t>(batch) * n * m.hidden_size * 2;
    const std::int32_t* ids = whole.tokens(batch, n, 3, s.get());
    whole.prefill(ids, batch, n, s.get());
    const auto want = logits_of(whole, batch, m.vocab_size);
    const std::int32_t* ids_a = a.tokens(batch, n, 3, s.get());
    a.prefill(ids_a, batch, n, s.get());
    GPB_CUDA_CHECK(cudaMemcpyAsync(b.input_hidden(), a.hidden(), hidden_bytes,
                                   cudaMemcpyDeviceToDevice, s.get()));
    b.prefill(nullptr, batch, n, s.get());
    auto close = [](const std::vector<float>& got, const std::vector<float>& ref) {
      return mismatches(ref, got, 0.01f);
    };
    EXPECT_EQ(close(logits_of(b, batch, m.vocab_size), want), 0) << m.name << ": prefill";
    // One decode step at position n through both.
    const std::int32_t* next = whole.tokens(batch, 1, 4, s.get());
    whole.decode(next, batch, n, s.get());
    const auto want_decode = logits_of(whole, batch, m.vocab_size);
    const std::int32_t* next_a = a.tokens(batch, 1, 4, s.get());
    a.decode(next_a, batch, n, s.get());
    GPB_CUDA_CHECK(cudaMemcpyAsync(b.input_hidden(), a.hidden(),
                                   static_cast<std::size_t>(batch) * m.hidden_size * 2,
                                   cudaMemcpyDeviceToDevice, s.get()));
    b.decode(nullptr, batch, n, s.get());
    EXPECT_EQ(close(logits_of(b, batch, m.vocab_size), want_decode), 0) << m.name << ": decode";
  }
}
