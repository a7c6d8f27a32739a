#pragma once
// Transformer shapes from HuggingFace config.json files: the presets built into gpubench
// (config/models/*.json) and any user file, normalized into one ModelConfig for the model-shaped
// benchmarks (matmul, seqlen, tp, pp).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gpubench::model {

enum class Norm { LayerNorm, RMSNorm };
enum class Positions { Learned, Rope };
enum class Activation { Relu, Gelu, GeluTanh /* gelu_new, gelu_pytorch_tanh, gelu_fast */, Silu };

// "layernorm" / "rmsnorm", "learned" / "rope", "relu" / "gelu" / "gelu_tanh" / "silu".
const char* to_string(Norm norm);
const char* to_string(Positions positions);
const char* to_string(Activation activation);

// One decoder-only transformer, whatever the family spelled its config.
struct ModelConfig {
  std::string name;        // preset name, or the file's _name_or_path / stem
  std::string model_type;  // "llama", "qwen2", "qwen3", "opt", "gpt2", ...
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int vocab_size = 0;
  int max_positions = 0;
  Norm norm = Norm::RMSNorm;
  double norm_eps = 1e-5;
  Positions positions = Positions::Rope;
  double rope_theta = 10000.0;  // only meaningful with Positions::Rope
  Activation activation = Activation::Silu;
  bool gated_mlp = true;  // SwiGLU (gate + up) for the llama / qwen families
  bool qkv_bias = false;  // qwen2: qkv bias only; opt / gpt2: every bias
  bool out_bias = false;
  bool mlp_bias = false;
  bool qk_norm = false;  // qwen3's per-head RMSNorm on q and k
  bool tie_word_embeddings = false;

  int q_dim() const;   // num_heads * head_dim
  int kv_dim() const;  // num_kv_heads * head_dim
  // Weights of one decoder layer: attention, MLP, its norms and biases.
  long long params_per_layer() const;
  // Every weight: layers, token embeddings, learned positions, final norm, untied lm head.
  long long params_total() const;
  // The normalized fields (and params_total), for reports.
  nlohmann::ordered_json to_json() const;
};

// Names of the built-in presets, sorted ("gpt2-xl", "llama-2-7b", ...).
std::vector<std::string> preset_names();

// A built-in preset; InputError "unknown model 'x' (known: a, b, ...)".
ModelConfig load_preset(const std::string& name);

// Any HuggingFace config.json (or a folder holding one). InputError naming the file and the field
// on an unreadable file, invalid JSON, a missing or non-positive field, or a field whose layers
// the engine does not run (see parse_model_config).
ModelConfig load_model_config(const std::string& path);

// The --model / --model-config pair of the transformer subcommands (seqlen, tp, pp): the
// config file when given, else the preset; then the engine's limit (its attention kernels take
// head_dim 64 or 128). InputError naming the option or the model.
ModelConfig load_engine_model(const std::string& preset, const std::string& config_path);

// The --dtype of those subcommands: "bf16" or "fp16" (trimmed), what the engine computes in;
// InputError naming --dtype otherwise.
std::string engine_dtype(const std::string& text);

// The --layers of those subcommands: 0 (all of the model's) or 1..num_layers; the count to run.
// InputError naming --layers otherwise.
int engine_layers(const ModelConfig& m, int requested);

// The shared normalizer: reads the HF spellings of each field (hidden_size | n_embd | d_model,
// ...) and fills in each family's defaults. `name` names the model in errors and in the result.
// A config the engine does not model is refused with one InputError line, "'field' value: why",
// naming the first field found of:
//   mixture of experts: num_local_experts / num_experts / n_routed_experts / moe_num_experts
//     above 1 (0, 1 or null: dense); with no count, moe_intermediate_size,
//     shared_expert_intermediate_size or n_shared_experts above 0, num_experts_per_tok above 1;
//   attention: kv_lora_rank / q_lora_rank (latent attention), attn_logit_softcapping,
//     final_logit_softcapping, clip_qkv (each when positive); alibi, use_qk_norm, qk_layernorm
//     (when true); layer_types other than full_attention; a sliding_window narrower than
//     max_position_embeddings while in use (use_sliding_window true, or absent outside the Qwen
//     families, and Qwen's max_window_layers below the layer count); query_pre_attn_scalar other
//     than head_dim; partial_rotary_factor / rotary_pct below 1, rotary_dim below head_dim;
//   blocks: parallel_attn / use_parallel_residual / parallel_residual / new_decoder_architecture,
//     add_cross_attention, _remove_final_layer_norm (when true); do_layer_norm_before false;
//     word_embed_proj_dim other than hidden_size;
//   family: a model_type other than llama, mistral, phi3, qwen2, qwen3 (gated SwiGLU MLPs) and
//     biogpt, gpt2, opt, gpt_bigcode (un-gated MLPs), or an activation that family's MLP would
//     pair with differently than the engine (it gates SiLU only). No model_type: the generic
//     reading, where the MLP is gated exactly when the activation is SiLU.
// rope_scaling is accepted: it changes RoPE's angles, not the work. "multi_query" (GPTBigCode's
// default) means one KV head.
ModelConfig parse_model_config(const nlohmann::json& config, const std::string& name);

// One GEMM of a layer for T tokens: Y[tokens x out_features] = X[tokens x in_features] W^T.
struct LayerGemm {
  std::string name;
  long long tokens = 0;
  long long out_features = 0;
  long long in_features = 0;
};

// One layer's GEMMs in order: "qkv" (out = q_dim + 2 kv_dim), "attn_out" (hidden x q_dim), then
// "mlp_gate_up" (out = 2 intermediate, gate and up fused) for gated MLPs, else "mlp_up"
// (intermediate), then "mlp_down" (hidden x intermediate). InputError when tokens <= 0.
std::vector<LayerGemm> layer_gemms(const ModelConfig& model, long long tokens);

}  // namespace gpubench::model
