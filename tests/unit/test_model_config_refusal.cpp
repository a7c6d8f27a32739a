// Configs whose layers the engine does not run are refused with one InputError line naming the
// field (mixture of experts, latent attention, sliding windows, soft-capping, partial RoPE,
// parallel blocks, families outside the modelled ones), while the dense configs it does run,
// including those that carry a disabled window or a zero expert count, are accepted.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "gpubench/core/errors.hpp"
#include "gpubench/model/presets.hpp"
#include "input_error.hpp"

using namespace gpubench;
using namespace gpubench::model;
using gpubench::testing::contains;
using gpubench::testing::input_error_of;
using nlohmann::json;

namespace {

// The message of the InputError parse_model_config throws on `config`; fails the test when it
// throws none or when the message is not one line.
std::string refusal(const json& config) {
  const std::string message = input_error_of([&] { (void)parse_model_config(config, "m"); });
  EXPECT_FALSE(message.empty()) << "accepted: " << config.dump();
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  return message;
}

// Mixtral-8x7B-v0.1's config.json.
json mixtral() {
  return json::parse(R"({
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
    "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": false,
    "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
    "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "use_cache": true, "vocab_size": 32000})");
}

// Qwen3-30B-A3B's config.json.
json qwen3_moe() {
  return json::parse(R"({
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48,
    "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
    "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
    "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null,
    "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 151936})");
}

// DeepSeek-V2-Lite's config.json (routed and shared experts, latent attention on kv only).
json deepseek_v2_lite() {
  return json::parse(R"({
    "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": false, "aux_loss_alpha": 0.001,
    "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 10944, "kv_lora_rank": 512, "max_position_embeddings": 163840,
    "model_type": "deepseek_v2", "moe_intermediate_size": 1408, "moe_layer_freq": 1,
    "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 2, "norm_topk_prob": false,
    "num_attention_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 27,
    "num_key_value_heads": 16, "q_lora_rank": null, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06, "rope_theta": 10000,
    "routed_scaling_factor": 1.0, "scoring_func": "softmax", "tie_word_embeddings": false,
    "topk_group": 1, "topk_method": "greedy", "v_head_dim": 128, "vocab_size": 102400})");
}

// DeepSeek-V3's config.json, rope_scaling dropped.
json deepseek_v3() {
  return json::parse(R"({
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false,
    "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
    "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
    "model_type": "deepseek_v3", "moe_intermediate_size": 2048, "moe_layer_freq": 1,
    "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true,
    "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
    "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06, "rope_theta": 10000,
    "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "tie_word_embeddings": false,
    "topk_group": 4, "topk_method": "noaux_tc", "v_head_dim": 128, "vocab_size": 129280})");
}

// Gemma-2-9B's config.json.
json gemma2() {
  return json::parse(R"({
    "architectures": ["Gemma2ForCausalLM"], "attention_bias": false,
    "attn_logit_softcapping": 50.0, "cache_implementation": "hybrid",
    "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584, "intermediate_size": 14336,
    "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 16,
    "num_hidden_layers": 42, "num_key_value_heads": 8, "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096,
    "sliding_window_size": 4096, "vocab_size": 256000})");
}

// Mistral-7B-v0.1's config.json: a 4096-token window over 32768 positions.
json mistral_v01() {
  return json::parse(R"({
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
    "vocab_size": 32000})");
}

// Qwen2-7B-Instruct's config.json: a window that use_sliding_window switches off.
json qwen2_7b() {
  return json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 3584,
    "initializer_range": 0.02, "intermediate_size": 18944, "max_position_embeddings": 32768,
    "max_window_layers": 28, "model_type": "qwen2", "num_attention_heads": 28,
    "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false,
    "vocab_size": 152064})");
}

// Llama-3.1-8B's config.json (llama3 RoPE scaling).
json llama31() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
    "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0,
    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "use_cache": true, "vocab_size": 128256})");
}

}  // namespace

TEST(ModelConfigRefusal, MixtralExpertsAreNamed) {
  const std::string message = refusal(mixtral());
  EXPECT_TRUE(contains(message, "model 'm': 'num_local_experts' 8: mixture-of-experts")) << message;
  EXPECT_TRUE(contains(message, "dense MLPs only")) << message;

  json top_k_only = mixtral();  // a count stripped away: the top-k still says experts
  top_k_only.erase("num_local_experts");
  EXPECT_TRUE(contains(refusal(top_k_only), "'num_experts_per_tok' 2")) << refusal(top_k_only);
}

TEST(ModelConfigRefusal, Qwen3MoeExpertsAreNamed) {
  const std::string message = refusal(qwen3_moe());
  EXPECT_TRUE(contains(message, "'num_experts' 128: mixture-of-experts")) << message;

  json width_only = qwen3_moe();  // no count, no top-k: the expert width still says experts
  width_only.erase("num_experts");
  width_only.erase("num_experts_per_tok");
  EXPECT_TRUE(contains(refusal(width_only), "'moe_intermediate_size' 768")) << refusal(width_only);

  json dense = qwen3_moe();  // no expert field left: decoder_sparse_step alone places nothing
  dense.erase("num_experts");
  dense.erase("num_experts_per_tok");
  dense.erase("moe_intermediate_size");
  dense["model_type"] = "qwen3";
  EXPECT_EQ(parse_model_config(dense, "qwen3-dense").hidden_size, 2048);
}

TEST(ModelConfigRefusal, DeepSeekExpertsAndLatentAttentionAreNamed) {
  EXPECT_TRUE(contains(refusal(deepseek_v3()), "'n_routed_experts' 256: mixture-of-experts"))
      << refusal(deepseek_v3());
  EXPECT_TRUE(contains(refusal(deepseek_v2_lite()), "'n_routed_experts' 64"))
      << refusal(deepseek_v2_lite());

  // Dense DeepSeek layers (n_routed_experts null: shared experts unused) still use latent
  // attention: kv_lora_rank, or q_lora_rank where kv's is off.
  json dense = deepseek_v2_lite();
  dense["n_routed_experts"] = nullptr;
  const std::string kv = refusal(dense);
  EXPECT_TRUE(contains(kv, "'kv_lora_rank' 512: multi-head latent attention")) << kv;
  json q_only = deepseek_v3();
  q_only["n_routed_experts"] = nullptr;
  q_only["kv_lora_rank"] = nullptr;
  EXPECT_TRUE(contains(refusal(q_only), "'q_lora_rank' 1536")) << refusal(q_only);

  // Without latent attention the family itself is not one the engine models.
  dense.erase("kv_lora_rank");
  EXPECT_TRUE(contains(refusal(dense), "'model_type' 'deepseek_v2': not a family"))
      << refusal(dense);
}

TEST(ModelConfigRefusal, Gemma2FieldsAreNamed) {
  json config = gemma2();
  EXPECT_TRUE(contains(refusal(config), "'attn_logit_softcapping' 50.0: soft-capped attention"))
      << refusal(config);
  config.erase("attn_logit_softcapping");
  EXPECT_TRUE(contains(refusal(config), "'final_logit_softcapping' 30.0: soft-capped logits"))
      << refusal(config);
  config.erase("final_logit_softcapping");
  EXPECT_TRUE(contains(refusal(config), "'model_type' 'gemma2'")) << refusal(config);

  // Gemma-2's window and attention scale, each on an otherwise modelled (Llama-style) config.
  config["model_type"] = "llama";
  config["hidden_act"] = "silu";
  const std::string window = refusal(config);
  EXPECT_TRUE(contains(window, "'sliding_window' 4096: sliding-window attention")) << window;
  EXPECT_TRUE(contains(window, "8192 positions")) << window;
  config.erase("sliding_window");
  config["head_dim"] = 128;
  config["query_pre_attn_scalar"] = 144;  // Gemma-2-27B's
  EXPECT_TRUE(contains(refusal(config), "'query_pre_attn_scalar' 144: attention scores scaled"))
      << refusal(config);
  config["query_pre_attn_scalar"] = 128;  // the engine's 1/sqrt(head_dim)
  EXPECT_EQ(parse_model_config(config, "m").head_dim, 128);
}

TEST(ModelConfigRefusal, GatedGeluIsNotSwiGlu) {
  json config = llama31();
  config["hidden_act"] = "gelu_pytorch_tanh";  // Gemma's GeGLU on a gated family
  EXPECT_TRUE(contains(refusal(config), "'hidden_act' 'gelu_pytorch_tanh': a gated MLP"))
      << refusal(config);

  const json opt = json::parse(R"({"model_type": "opt", "hidden_size": 768, "ffn_dim": 3072,
      "num_hidden_layers": 12, "num_attention_heads": 12, "max_position_embeddings": 2048,
      "vocab_size": 50272, "activation_function": "silu"})");
  EXPECT_TRUE(contains(refusal(opt), "'activation_function' 'silu': an un-gated MLP"))
      << refusal(opt);
}

TEST(ModelConfigRefusal, MistralSlidingWindowIsNamed) {
  const std::string message = refusal(mistral_v01());
  EXPECT_TRUE(contains(message,
                       "'sliding_window' 4096: sliding-window attention narrower than "
                       "the model's 32768 positions is not modelled"))
      << message;

  json v03 = mistral_v01();  // Mistral-7B-v0.3: no window
  v03["sliding_window"] = nullptr;
  EXPECT_EQ(parse_model_config(v03, "mistral-v0.3").num_kv_heads, 8);
  json off = mistral_v01();
  off["use_sliding_window"] = false;
  EXPECT_EQ(parse_model_config(off, "mistral-off").num_layers, 32);
  json wide = mistral_v01();  // a window as wide as the context never narrows attention
  wide["sliding_window"] = 32768;
  EXPECT_EQ(parse_model_config(wide, "mistral-wide").num_layers, 32);
}

TEST(ModelConfigRefusal, QwenWindowFollowsUseSlidingWindow) {
  json config = qwen2_7b();
  config["sliding_window"] = 4096;
  EXPECT_EQ(parse_model_config(config, "q").hidden_size, 3584);  // use_sliding_window false
  config.erase("use_sliding_window");                            // Qwen's default: off
  EXPECT_EQ(parse_model_config(config, "q").hidden_size, 3584);
  config["use_sliding_window"] = true;  // max_window_layers 28 of 28: no layer uses it
  EXPECT_EQ(parse_model_config(config, "q").hidden_size, 3584);
  config["max_window_layers"] = 21;
  EXPECT_TRUE(contains(refusal(config), "'sliding_window' 4096")) << refusal(config);
}

TEST(ModelConfigRefusal, LayerTypesOtherThanFullAttention) {
  json config = qwen2_7b();
  config["layer_types"] = json::array({"full_attention", "sliding_attention"});
  EXPECT_TRUE(contains(refusal(config), "'layer_types' lists \"sliding_attention\" layers"))
      << refusal(config);
  config["layer_types"] = json::array({"full_attention", "full_attention"});
  EXPECT_EQ(parse_model_config(config, "q").num_layers, 28);
}

TEST(ModelConfigRefusal, OtherLayerVariantsAreNamed) {
  const struct {
    const char* key;
    json value;
    const char* named;
  } variants[] = {
      {"partial_rotary_factor", 0.5, "'partial_rotary_factor' 0.5: RoPE on part of each head"},
      {"rotary_pct", 0.25, "'rotary_pct' 0.25: RoPE on part of each head"},
      {"rotary_dim", 64, "'rotary_dim' 64: RoPE on part of each head"},
      {"parallel_attn", true, "'parallel_attn' true: parallel attention and MLP"},
      {"use_parallel_residual", true, "'use_parallel_residual' true: parallel attention"},
      {"alibi", true, "'alibi' true: ALiBi"},
      {"use_qk_norm", true, "'use_qk_norm' true: norms on q and k"},
      {"clip_qkv", 8, "'clip_qkv' 8: clamped q, k and v"},
      {"do_layer_norm_before", false, "'do_layer_norm_before' false: post-norm blocks"},
      {"word_embed_proj_dim", 512, "'word_embed_proj_dim' 512: embeddings projected"},
  };
  for (const auto& v : variants) {
    json config = llama31();  // head_dim 128
    config[v.key] = v.value;
    const std::string message = refusal(config);
    EXPECT_TRUE(contains(message, v.named)) << v.key << ": " << message;
  }
  json nested = llama31();
  nested["rope_parameters"] = {{"rope_theta", 500000.0}, {"partial_rotary_factor", 0.75}};
  EXPECT_TRUE(contains(refusal(nested), "rope_parameters: 'partial_rotary_factor' 0.75"))
      << refusal(nested);
}

TEST(ModelConfigRefusal, FamiliesOutsideTheEngineAreNamed) {
  const json falcon = json::parse(R"({"model_type": "falcon", "hidden_size": 4544,
      "num_hidden_layers": 32, "num_attention_heads": 71, "vocab_size": 65024,
      "parallel_attn": true, "multi_query": true, "alibi": false,
      "new_decoder_architecture": false, "bias": false})");
  EXPECT_TRUE(contains(refusal(falcon), "'parallel_attn' true")) << refusal(falcon);

  json gemma = llama31();
  gemma["model_type"] = "gemma";
  const std::string message = refusal(gemma);
  EXPECT_TRUE(contains(message, "'model_type' 'gemma': not a family the engine models (llama"))
      << message;
}

TEST(ModelConfigRefusal, DenseConfigsAreAccepted) {
  // A zero, single or null expert count declares a dense model, whatever the other MoE fields.
  for (const json& count : {json(0), json(1), json(nullptr)}) {
    json config = llama31();
    config["num_experts"] = count;
    config["num_experts_per_tok"] = 2;
    config["moe_intermediate_size"] = 1408;
    EXPECT_EQ(parse_model_config(config, "dense").intermediate_size, 14336) << count;
  }
  const ModelConfig llama = parse_model_config(llama31(), "llama-3.1-8b");  // rope_scaling kept
  EXPECT_EQ(llama.num_kv_heads, 8);
  EXPECT_DOUBLE_EQ(llama.rope_theta, 500000.0);
  const ModelConfig qwen2 = parse_model_config(qwen2_7b(), "qwen2-7b");
  EXPECT_TRUE(qwen2.qkv_bias);
  for (const std::string& name : preset_names()) EXPECT_NO_THROW(load_preset(name)) << name;
}

TEST(ModelConfigRefusal, MultiQueryMeansOneKvHead) {
  const json starcoder = json::parse(R"({"model_type": "gpt_bigcode", "n_embd": 6144,
      "n_head": 48, "n_layer": 40, "n_positions": 8192, "vocab_size": 49152,
      "activation_function": "gelu_pytorch_tanh"})");  // multi_query: GPTBigCode's default
  EXPECT_EQ(parse_model_config(starcoder, "starcoder").num_kv_heads, 1);
  json multi_head = starcoder;
  multi_head["multi_query"] = false;
  EXPECT_EQ(parse_model_config(multi_head, "santacoder-mha").num_kv_heads, 48);
}

TEST(ModelConfigRefusal, FieldsOfTheWrongTypeAreNamed) {
  json config = mixtral();
  config["num_local_experts"] = "8";
  EXPECT_TRUE(contains(refusal(config), "'num_local_experts' must be a number, got \"8\""))
      << refusal(config);
  config = qwen2_7b();
  config["layer_types"] = "full_attention";
  EXPECT_TRUE(contains(refusal(config), "'layer_types' must be a list")) << refusal(config);
}

TEST(ModelConfigRefusal, FileAndEngineLoadsNameTheFileAndField) {
  std::random_device random;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("gpubench_refusal_" + std::to_string(random()) + std::to_string(random()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "mixtral.json").string();
  std::ofstream(path) << mixtral().dump(2);
  const std::string file = input_error_of([&] { (void)load_model_config(path); });
  const std::string engine = input_error_of([&] { (void)load_engine_model("", path); });
  std::filesystem::remove_all(dir);
  EXPECT_TRUE(contains(file, "model config '" + path + "': 'num_local_experts' 8")) << file;
  EXPECT_EQ(engine, file);
}

// Dimensions whose parameter count would overflow a 64-bit integer (signed overflow: undefined
// behaviour) are refused with the count, before anything multiplies them.
TEST(ModelConfigRefusal, ParameterCountThatWouldOverflowIsRefused) {
  json huge = json::parse(R"({"model_type": "llama", "hidden_size": 8192,
    "intermediate_size": 2000000000, "num_hidden_layers": 2000000000,
    "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 2000000000,
    "max_position_embeddings": 4096, "hidden_act": "silu", "rms_norm_eps": 1e-05})");
  EXPECT_TRUE(contains(refusal(huge), "parameters")) << refusal(huge);
  // Llama-2-70b's size is far below the cap.
  json big = huge;
  big["intermediate_size"] = 28672;
  big["num_hidden_layers"] = 80;
  big["vocab_size"] = 32000;
  EXPECT_GT(parse_model_config(big, "70b").params_total(), 60'000'000'000LL);
}
