// Model presets and HuggingFace config.json files normalized into ModelConfig: each family's
// spelling of a field and its defaults live here, so the benchmarks see one shape description.
#include "gpubench/model/presets.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <optional>
#include <sstream>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"

namespace gpubench::model {

// Generated at configure time from config/models/*.json (see CMakeLists.txt): file stems and
// texts, each array ending with nullptr.
namespace detail {
extern const char* const kDataNames[];
extern const char* const kDataTexts[];
extern const std::size_t kDataCount;
}  // namespace detail

namespace {

using nlohmann::json;

// Families with learned absolute positions and LayerNorm (HF keeps them in GPT-2 / OPT form).
bool is_learned_position_family(const std::string& model_type) {
  return model_type == "opt" || model_type == "gpt2" || model_type == "gpt_bigcode" ||
         model_type == "biogpt";
}

// The model_type values whose layers the engine runs as HF defines them, and whether their MLP is
// gated (gate and up projections: SwiGLU) or un-gated (up, activation, down).
struct Family {
  const char* model_type;
  bool gated_mlp;
};
constexpr Family kModelledFamilies[] = {{"llama", true}, {"mistral", true}, {"phi3", true},
                                        {"qwen2", true}, {"qwen3", true},   {"biogpt", false},
                                        {"gpt2", false}, {"opt", false},    {"gpt_bigcode", false}};

// Reads the fields of one config; every error names where the config came from.
class ConfigReader {
 public:
  ConfigReader(const json& config, std::string source)
      : config_(config), source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& what) const { throw InputError(source_ + ": " + what); }

  // Present and not null.
  bool has(const char* key) const {
    const auto it = config_.find(key);
    return it != config_.end() && !it->is_null();
  }
  bool has_any(std::initializer_list<const char*> keys) const {
    return std::any_of(keys.begin(), keys.end(), [&](const char* key) { return has(key); });
  }
  // Present, even as null (GPT-2's "n_inner": null means "4 x hidden").
  bool contains(const char* key) const { return config_.contains(key); }

  // The first of `keys` present, or nullptr.
  const char* first_present(std::initializer_list<const char*> keys) const {
    for (const char* key : keys) {
      if (has(key)) return key;
    }
    return nullptr;
  }

  // A required positive integer, read from the first of `keys` present.
  int positive_int(std::initializer_list<const char*> keys) const {
    const char* key = first_present(keys);
    if (key == nullptr) fail("missing " + describe(keys));
    return positive_int_at(key);
  }

  int positive_int_or(std::initializer_list<const char*> keys, int fallback) const {
    const char* key = first_present(keys);
    return key == nullptr ? fallback : positive_int_at(key);
  }

  double positive_double_or(std::initializer_list<const char*> keys, double fallback) const {
    const char* key = first_present(keys);
    if (key == nullptr) return fallback;
    const json& value = config_.at(key);
    if (!value.is_number() || !(value.get<double>() > 0.0) || !std::isfinite(value.get<double>())) {
      fail("'" + std::string(key) + "' must be a positive number, got " + value.dump());
    }
    return value.get<double>();
  }

  // A number, or nothing when absent or null; a value of another type fails.
  std::optional<double> number(const char* key) const {
    if (!has(key)) return std::nullopt;
    const json& value = config_.at(key);
    if (!value.is_number())
      fail("'" + std::string(key) + "' must be a number, got " + value.dump());
    return value.get<double>();
  }

  // Refuses the config for `key` (present): "'key' value: why".
  [[noreturn]] void refuse(const char* key, const std::string& why) const {
    const json& value = config_.at(key);
    const std::string shown =
        value.is_string() ? "'" + value.get<std::string>() + "'" : value.dump();
    fail("'" + std::string(key) + "' " + shown + ": " + why);
  }

  bool bool_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& value = config_.at(key);
    if (!value.is_boolean()) {
      fail("'" + std::string(key) + "' must be true or false, got " + value.dump());
    }
    return value.get<bool>();
  }

  // The first of `keys` present as a string; `fallback` when none is present.
  std::string string_or(std::initializer_list<const char*> keys, const std::string& fallback,
                        const char** found = nullptr) const {
    const char* key = first_present(keys);
    if (found != nullptr) *found = key;
    if (key == nullptr) return fallback;
    const json& value = config_.at(key);
    if (!value.is_string()) {
      fail("'" + std::string(key) + "' must be a string, got " + value.dump());
    }
    return value.get<std::string>();
  }

  const json& at(const char* key) const { return config_.at(key); }

 private:
  int positive_int_at(const char* key) const {
    const json& value = config_.at(key);
    const auto fail_bad = [&] {
      fail("'" + std::string(key) + "' must be a positive integer, got " + value.dump());
    };
    constexpr long long kMax = std::numeric_limits<int>::max();
    if (value.is_number_unsigned()) {
      const unsigned long long number = value.get<unsigned long long>();
      if (number == 0 || number > static_cast<unsigned long long>(kMax)) fail_bad();
      return static_cast<int>(number);
    }
    if (value.is_number_integer()) {
      const long long number = value.get<long long>();
      if (number <= 0 || number > kMax) fail_bad();
      return static_cast<int>(number);
    }
    if (value.is_number_float()) {  // 4096.0 is accepted, 4096.5 is not
      const double number = value.get<double>();
      if (number >= 1.0 && number <= static_cast<double>(kMax) && number == std::floor(number)) {
        return static_cast<int>(number);
      }
    }
    fail_bad();
    return 0;  // not reached: fail_bad throws
  }

  // "'hidden_size' (also read as 'n_embd', 'd_model')".
  static std::string describe(std::initializer_list<const char*> keys) {
    std::string text;
    std::string others;
    for (const char* key : keys) {
      const std::string quoted = "'" + std::string(key) + "'";
      if (text.empty()) {
        text = quoted;
      } else {
        others += (others.empty() ? "" : ", ") + quoted;
      }
    }
    return others.empty() ? text : text + " (also read as " + others + ")";
  }

  const json& config_;
  std::string source_;
};

Activation parse_activation(const ConfigReader& reader, const std::string& model_type) {
  std::string fallback = "silu";  // LlamaConfig, Qwen2Config, MistralConfig, ...
  if (model_type == "opt") fallback = "relu";
  if (model_type == "gpt2" || model_type == "gpt_bigcode") fallback = "gelu_new";
  if (model_type == "biogpt") fallback = "gelu";
  const char* key = nullptr;
  const std::string name = reader.string_or({"hidden_act", "activation_function"}, fallback, &key);
  if (name == "silu" || name == "swish") return Activation::Silu;
  if (name == "relu") return Activation::Relu;
  if (name == "gelu" || name == "gelu_python") return Activation::Gelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") {
    return Activation::GeluTanh;
  }
  reader.fail("'" + std::string(key != nullptr ? key : "hidden_act") + "' '" + name +
              "' is not a known activation (relu, gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, "
              "silu, swish)");
}

// Newer configs keep rope_theta inside "rope_parameters"; older ones at the top level.
double parse_rope_theta(const ConfigReader& reader, const std::string& source) {
  if (reader.has("rope_parameters") && reader.at("rope_parameters").is_object()) {
    const ConfigReader inner(reader.at("rope_parameters"), source + ": rope_parameters");
    if (inner.has("rope_theta")) return inner.positive_double_or({"rope_theta"}, 10000.0);
  }
  return reader.positive_double_or({"rope_theta"}, 10000.0);
}

// ---- Layers the engine does not run ----------------------------------------------------------
// The engine runs one kind of decoder layer: a pre-norm block of full causal attention (scores
// scaled by 1/sqrt(head_dim); RoPE over the whole head, or learned positions; Qwen3's per-head
// RMSNorm on q and k), then a pre-norm dense MLP: SwiGLU, or an un-gated ReLU / GELU. A config
// whose layers compute anything else is refused with an InputError naming the field and why, so
// no figure is reported for a model the engine did not run. Accepted on purpose: rope_scaling and
// rope_parameters (they change the angles RoPE rotates by, not the work the layers do) and the
// fields of training or generation alone (dropout, initializer_range, use_cache, ...).

constexpr const char* kDenseOnly =
    "mixture-of-experts models are not modelled (the engine runs dense MLPs only)";
constexpr const char* kParallel =
    "parallel attention and MLP blocks are not modelled (the engine runs attention, then the MLP)";
constexpr const char* kLatent =
    "multi-head latent attention (low-rank q / kv projections) is not modelled (the engine "
    "projects q, k and v at full rank)";
constexpr const char* kQkNorm =
    "norms on q and k are modelled only as Qwen3's per-head RMSNorm (model_type qwen3)";
constexpr const char* kPartialRope =
    "RoPE on part of each head is not modelled (the engine rotates the whole head_dim)";

struct Unmodelled {
  const char* key;
  const char* why;
};

// Numbers that change the layers when positive; null or 0 mean "off".
constexpr Unmodelled kRefusedWhenPositive[] = {
    {"kv_lora_rank", kLatent},
    {"q_lora_rank", kLatent},
    {"attn_logit_softcapping",
     "soft-capped attention scores are not modelled (the engine's attention takes a plain "
     "softmax)"},
    {"final_logit_softcapping",
     "soft-capped logits are not modelled (the engine's LM head ends at the plain logits)"},
    {"clip_qkv", "clamped q, k and v are not modelled (the engine's attention takes them as is)"},
};

// Booleans that change the layers when true.
constexpr Unmodelled kRefusedWhenTrue[] = {
    {"alibi",
     "ALiBi attention biases are not modelled (the engine uses RoPE or learned positions)"},
    {"parallel_attn", kParallel},
    {"use_parallel_residual", kParallel},
    {"parallel_residual", kParallel},
    {"new_decoder_architecture", kParallel},
    {"use_qk_norm", kQkNorm},
    {"qk_layernorm", kQkNorm},
    {"add_cross_attention",
     "cross-attention layers are not modelled (the engine runs a decoder-only stack)"},
    {"_remove_final_layer_norm",
     "a model without its final norm is not modelled (the engine normalizes before the LM head)"},
};

// Mixture of experts. An expert count above 1 is refused, while 0, 1 or null declare a dense
// model (some dense configs carry "num_experts": 0, DeepSeek's "n_routed_experts": null). Without
// any count, an expert width or a top-k above 1 still means experts; layout fields
// (decoder_sparse_step, moe_layer_freq, first_k_dense_replace, ...) only place the experts a
// count declares, so they are judged through the count.
void refuse_experts(const ConfigReader& r) {
  bool counted = false;
  for (const char* key :
       {"num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"}) {
    if (!r.contains(key)) continue;
    counted = true;
    const std::optional<double> n = r.number(key);
    if (n && *n > 1) r.refuse(key, kDenseOnly);
  }
  if (counted) return;
  for (const char* key :
       {"moe_intermediate_size", "shared_expert_intermediate_size", "n_shared_experts"}) {
    const std::optional<double> n = r.number(key);
    if (n && *n > 0) r.refuse(key, kDenseOnly);
  }
  for (const char* key : {"num_experts_per_tok", "moe_top_k"}) {
    const std::optional<double> n = r.number(key);
    if (n && *n > 1) r.refuse(key, kDenseOnly);
  }
}

// What can be judged before the shapes are read: experts, attention and block variants, the
// per-layer attention kinds of newer configs ("layer_types": full_attention only), then the
// family (last, so that a config of a family outside kModelledFamilies is refused by the field
// that shows why, when it has one).
void refuse_unmodelled_fields(const ConfigReader& r, const std::string& model_type) {
  refuse_experts(r);
  for (const Unmodelled& u : kRefusedWhenPositive) {
    const std::optional<double> value = r.number(u.key);
    if (value && *value > 0) r.refuse(u.key, u.why);
  }
  for (const Unmodelled& u : kRefusedWhenTrue) {
    if (r.bool_or(u.key, false)) r.refuse(u.key, u.why);
  }
  if (r.has("layer_types")) {
    const json& types = r.at("layer_types");
    if (!types.is_array()) r.fail("'layer_types' must be a list, got " + types.dump());
    for (const json& type : types) {
      if (!type.is_string() || type.get<std::string>() != "full_attention") {
        r.fail("'layer_types' lists " + type.dump() +
               " layers: only full attention is modelled (the engine attends to the whole "
               "context in every layer)");
      }
    }
  }
  if (model_type.empty()) return;  // no model_type: the generic reading of the fields
  std::string known;
  for (const Family& family : kModelledFamilies) {
    if (model_type == family.model_type) return;
    known += (known.empty() ? "" : ", ") + std::string(family.model_type);
  }
  r.refuse("model_type", "not a family the engine models (" + known + ")");
}

// Sliding-window attention. The window is in use when 'sliding_window' is a positive number
// narrower than max_position_embeddings and 'use_sliding_window' is true, or absent outside the
// Qwen families (whose HF default is off: Qwen2.5 ships a window with the switch false), unless
// Qwen's 'max_window_layers' (the first layer with the window) is at or past the layer count.
void refuse_sliding_window(const ConfigReader& r, const ModelConfig& m) {
  const std::optional<double> window = r.number("sliding_window");
  if (!window || *window <= 0 || *window >= m.max_positions) return;
  const bool qwen = m.model_type.rfind("qwen", 0) == 0;
  if (!r.bool_or("use_sliding_window", !qwen)) return;
  const std::optional<double> first = r.number("max_window_layers");
  if (first && *first >= m.num_layers) return;
  r.refuse("sliding_window",
           fmt::format("sliding-window attention narrower than the model's {} positions is not "
                       "modelled (the engine attends to the whole context)",
                       m.max_positions));
}

// What needs the shapes: the sliding window, the attention scale, partial RoPE, OPT's variants
// and the MLP's activation against the family's gating (the engine gates SiLU only).
void refuse_unmodelled_shapes(const ConfigReader& r, const ModelConfig& m,
                              const std::string& source) {
  refuse_sliding_window(r, m);
  const std::optional<double> scale = r.number("query_pre_attn_scalar");
  if (scale && *scale != m.head_dim) {
    r.refuse("query_pre_attn_scalar",
             fmt::format("attention scores scaled by other than 1/sqrt(head_dim {}) are not "
                         "modelled",
                         m.head_dim));
  }
  if (m.positions == Positions::Rope) {
    for (const char* key : {"partial_rotary_factor", "rotary_pct"}) {
      const std::optional<double> part = r.number(key);
      if (part && *part < 1.0) r.refuse(key, kPartialRope);
    }
    if (r.has("rope_parameters") && r.at("rope_parameters").is_object()) {
      const ConfigReader inner(r.at("rope_parameters"), source + ": rope_parameters");
      const std::optional<double> part = inner.number("partial_rotary_factor");
      if (part && *part < 1.0) inner.refuse("partial_rotary_factor", kPartialRope);
    }
    const std::optional<double> rotary = r.number("rotary_dim");
    if (rotary && *rotary < m.head_dim) r.refuse("rotary_dim", kPartialRope);
  }
  if (!r.bool_or("do_layer_norm_before", true)) {
    r.refuse("do_layer_norm_before",
             "post-norm blocks are not modelled (the engine normalizes before attention and MLP)");
  }
  const std::optional<double> embed = r.number("word_embed_proj_dim");
  if (embed && *embed != m.hidden_size) {
    r.refuse("word_embed_proj_dim",
             fmt::format("embeddings projected to and from 'hidden_size' {} are not modelled",
                         m.hidden_size));
  }
  const char* act = r.first_present({"hidden_act", "activation_function"});
  if (act == nullptr) return;  // the family's default activation, which the engine runs
  for (const Family& family : kModelledFamilies) {
    if (m.model_type != family.model_type) continue;
    if (family.gated_mlp && m.activation != Activation::Silu) {
      r.refuse(act,
               "a gated MLP with this activation is not modelled (the engine gates with "
               "SiLU only: SwiGLU)");
    }
    if (!family.gated_mlp && m.activation == Activation::Silu) {
      r.refuse(act,
               "an un-gated MLP with SiLU is not modelled (the engine runs SiLU gated: "
               "SwiGLU)");
    }
  }
}

// Parameter counts are computed in 64-bit integers (params_total and its callers): a config
// whose dimensions would overflow them is refused here, where the count is taken in floating
// point, instead of wrapping (signed overflow is undefined behaviour).
static void refuse_oversized(const ConfigReader& reader, const ModelConfig& m) {
  const long double h = m.hidden_size, ff = m.intermediate_size, layers = m.num_layers;
  const long double q = static_cast<long double>(m.num_heads) * m.head_dim;
  const long double kv = static_cast<long double>(m.num_kv_heads) * m.head_dim;
  const long double per_layer = h * (q + 2 * kv) + q * h + 3 * h * ff + 2 * ff + 8 * h;
  const long double total =
      layers * per_layer + 2.0L * m.vocab_size * h + (m.max_positions + 2.0L) * h;
  constexpr long double kMaxParams = 1e15L;  // 1000x the largest dense models
  if (!(total <= kMaxParams))
    reader.fail(fmt::format("about {:.3g} parameters: more than the {:.0e} gpubench models",
                            static_cast<double>(total), static_cast<double>(kMaxParams)));
}

ModelConfig parse_config(const json& config, const std::string& name, const std::string& source) {
  const ConfigReader reader(config, source);
  if (!config.is_object())
    reader.fail("must be a JSON object, got " + std::string(config.type_name()));

  ModelConfig m;
  m.name = name;
  m.model_type = reader.string_or({"model_type"}, "");
  refuse_unmodelled_fields(reader, m.model_type);
  const bool learned = is_learned_position_family(m.model_type) ||
                       (reader.has("n_positions") && !reader.has_any({"rotary_dim", "rope_theta"}));

  m.hidden_size = reader.positive_int({"hidden_size", "n_embd", "d_model"});
  m.num_layers = reader.positive_int({"num_hidden_layers", "n_layer"});
  m.num_heads = reader.positive_int({"num_attention_heads", "n_head"});
  // Multi-query attention (one KV head): GPTBigCode's default, or any config's "multi_query".
  const bool multi_query = reader.bool_or("multi_query", m.model_type == "gpt_bigcode");
  m.num_kv_heads = reader.positive_int_or({"num_key_value_heads"}, multi_query ? 1 : m.num_heads);
  m.vocab_size = reader.positive_int({"vocab_size"});
  m.max_positions = reader.positive_int({"max_position_embeddings", "n_positions"});

  // GPT-2 style: n_inner (or intermediate_size) null or absent means 4 x hidden.
  if (reader.has_any({"intermediate_size", "ffn_dim", "n_inner"})) {
    m.intermediate_size = reader.positive_int({"intermediate_size", "ffn_dim", "n_inner"});
  } else if (reader.contains("n_inner") || reader.contains("intermediate_size") ||
             m.model_type == "gpt2" || m.model_type == "gpt_bigcode") {
    if (m.hidden_size > std::numeric_limits<int>::max() / 4) {
      reader.fail("4 x 'hidden_size' (the default intermediate size) is too large");
    }
    m.intermediate_size = 4 * m.hidden_size;
  } else {
    reader.fail("missing 'intermediate_size' (also read as 'ffn_dim', 'n_inner')");
  }

  if (reader.has("head_dim")) {
    m.head_dim = reader.positive_int({"head_dim"});
  } else {
    if (m.hidden_size % m.num_heads != 0) {
      reader.fail("hidden size " + std::to_string(m.hidden_size) + " is not divisible by " +
                  std::to_string(m.num_heads) + " attention heads (give 'head_dim')");
    }
    m.head_dim = m.hidden_size / m.num_heads;
  }
  if (m.num_kv_heads > m.num_heads || m.num_heads % m.num_kv_heads != 0) {
    reader.fail(std::to_string(m.num_heads) + " attention heads are not a multiple of " +
                std::to_string(m.num_kv_heads) + " 'num_key_value_heads'");
  }
  if (static_cast<long long>(m.num_heads) * m.head_dim > std::numeric_limits<int>::max()) {
    reader.fail("attention width (heads x head_dim) is too large");
  }

  m.activation = parse_activation(reader, m.model_type);
  m.gated_mlp = m.activation == Activation::Silu;

  const bool rms = reader.has("rms_norm_eps");
  const bool layer_norm = reader.has_any({"layer_norm_epsilon", "layer_norm_eps"});
  m.norm = learned || (layer_norm && !rms) ? Norm::LayerNorm : Norm::RMSNorm;
  m.norm_eps =
      reader.positive_double_or({"rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps"}, 1e-5);
  m.positions = learned ? Positions::Learned : Positions::Rope;
  m.rope_theta = learned ? 0.0 : parse_rope_theta(reader, source);

  // Biases: OPT and GPT-2 have them everywhere; Qwen2 only on q, k and v; Llama, Qwen3 and most
  // others nowhere unless attention_bias / mlp_bias say so.
  if (learned) {
    const bool all = reader.bool_or("enable_bias", true);
    m.qkv_bias = m.out_bias = m.mlp_bias = all;
  } else if (m.model_type == "qwen2") {
    m.qkv_bias = true;
  }
  if (reader.has("attention_bias")) {
    m.qkv_bias = m.out_bias = reader.bool_or("attention_bias", false);
  }
  m.mlp_bias = reader.bool_or("mlp_bias", m.mlp_bias);

  m.qk_norm = m.model_type == "qwen3" || m.model_type == "qwen3_moe";
  m.tie_word_embeddings = reader.bool_or("tie_word_embeddings", learned);
  refuse_unmodelled_shapes(reader, m, source);
  refuse_oversized(reader, m);
  return m;
}

json parse_json_text(const std::string& text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    // Drop nlohmann's "[json.exception.parse_error.101] " prefix: the rest says where and why.
    std::string what = e.what();
    const auto bracket = what.find("] ");
    if (what.rfind("[json.exception", 0) == 0 && bracket != std::string::npos) {
      what = what.substr(bracket + 2);
    }
    throw InputError(source + ": invalid JSON: " + what);
  }
}

std::string known_presets() {
  std::string list;
  for (const std::string& name : preset_names()) {
    list += (list.empty() ? "" : ", ") + name;
  }
  return list;
}

}  // namespace

const char* to_string(Norm norm) {
  return norm == Norm::LayerNorm ? "layernorm" : "rmsnorm";
}

const char* to_string(Positions positions) {
  return positions == Positions::Learned ? "learned" : "rope";
}

const char* to_string(Activation activation) {
  switch (activation) {
    case Activation::Relu:
      return "relu";
    case Activation::Gelu:
      return "gelu";
    case Activation::GeluTanh:
      return "gelu_tanh";
    case Activation::Silu:
      return "silu";
  }
  return "unknown";
}

int ModelConfig::q_dim() const {
  return num_heads * head_dim;
}

int ModelConfig::kv_dim() const {
  return num_kv_heads * head_dim;
}

long long ModelConfig::params_per_layer() const {
  const long long h = hidden_size, ff = intermediate_size, q = q_dim(), kv = kv_dim();
  const long long norm_params = norm == Norm::LayerNorm ? 2 * h : h;  // LayerNorm adds a bias
  long long attention = h * (q + 2 * kv) + q * h;
  if (qkv_bias) attention += q + 2 * kv;
  if (out_bias) attention += h;
  if (qk_norm) attention += 2LL * head_dim;
  long long mlp = (gated_mlp ? 3 : 2) * h * ff;
  if (mlp_bias) mlp += (gated_mlp ? 2 : 1) * ff + h;
  return attention + mlp + 2 * norm_params;
}

long long ModelConfig::params_total() const {
  const long long h = hidden_size, vocab = vocab_size;
  long long total = num_layers * params_per_layer();
  total += vocab * h;                            // token embeddings
  if (!tie_word_embeddings) total += vocab * h;  // lm head
  total += norm == Norm::LayerNorm ? 2 * h : h;  // final norm
  if (positions == Positions::Learned) {
    // OPT's position table has 2 extra rows (HF OPTLearnedPositionalEmbedding offset).
    const long long rows = max_positions + (model_type == "opt" ? 2 : 0);
    total += rows * h;
  }
  return total;
}

nlohmann::ordered_json ModelConfig::to_json() const {
  nlohmann::ordered_json j;
  j["name"] = name;
  j["model_type"] = model_type;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_layers"] = num_layers;
  j["num_heads"] = num_heads;
  j["num_kv_heads"] = num_kv_heads;
  j["head_dim"] = head_dim;
  j["vocab_size"] = vocab_size;
  j["max_positions"] = max_positions;
  j["norm"] = to_string(norm);
  j["norm_eps"] = norm_eps;
  j["positions"] = to_string(positions);
  if (positions == Positions::Rope) j["rope_theta"] = rope_theta;
  j["activation"] = to_string(activation);
  j["gated_mlp"] = gated_mlp;
  j["qkv_bias"] = qkv_bias;
  j["out_bias"] = out_bias;
  j["mlp_bias"] = mlp_bias;
  j["qk_norm"] = qk_norm;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["params_total"] = params_total();
  return j;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names(detail::kDataNames, detail::kDataNames + detail::kDataCount);
  std::sort(names.begin(), names.end());
  return names;
}

ModelConfig load_preset(const std::string& name) {
  for (std::size_t i = 0; i < detail::kDataCount; ++i) {
    if (name == detail::kDataNames[i]) {
      const std::string source = "model preset '" + name + "'";
      return parse_config(parse_json_text(detail::kDataTexts[i], source), name, source);
    }
  }
  throw InputError("unknown model '" + name + "' (known: " + known_presets() + ")");
}

ModelConfig load_model_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file = path;
  if (fs::is_directory(file, ec)) file /= "config.json";  // a downloaded model folder
  const std::string source = "model config '" + file.string() + "'";
  if (!fs::is_regular_file(file, ec)) {
    throw InputError(source + ": " +
                     (fs::exists(file, ec) ? "not a regular file" : "no such file"));
  }
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw InputError(source + ": cannot be read");

  const json config = parse_json_text(text.str(), source);
  // Name: the HF repo id when the file records it, else the folder of a config.json, else the stem.
  std::string name = file.stem().string();
  if (file.filename() == "config.json" && file.has_parent_path()) {
    name = fs::absolute(file, ec).parent_path().filename().string();
  }
  if (config.is_object()) {
    const auto it = config.find("_name_or_path");
    if (it != config.end() && it->is_string() && !it->get<std::string>().empty()) {
      name = it->get<std::string>();
    }
  }
  return parse_config(config, name, source);
}

ModelConfig parse_model_config(const nlohmann::json& config, const std::string& name) {
  return parse_config(config, name, "model '" + name + "'");
}

std::vector<LayerGemm> layer_gemms(const ModelConfig& model, long long tokens) {
  if (tokens <= 0) {
    throw InputError("model '" + model.name + "': token count must be positive, got " +
                     std::to_string(tokens));
  }
  const long long h = model.hidden_size, ff = model.intermediate_size;
  std::vector<LayerGemm> gemms;
  gemms.push_back({"qkv", tokens, model.q_dim() + 2LL * model.kv_dim(), h});
  gemms.push_back({"attn_out", tokens, h, model.q_dim()});
  if (model.gated_mlp) {
    gemms.push_back({"mlp_gate_up", tokens, 2 * ff, h});
  } else {
    gemms.push_back({"mlp_up", tokens, ff, h});
  }
  gemms.push_back({"mlp_down", tokens, h, ff});
  return gemms;
}

ModelConfig load_engine_model(const std::string& preset, const std::string& config_path) {
  ModelConfig m;
  if (!trim(config_path).empty()) {
    m = load_model_config(config_path);
  } else {
    if (trim(preset).empty()) throw InputError("--model: give a preset or --model-config");
    m = load_preset(trim(preset));
  }
  if (m.head_dim != 64 && m.head_dim != 128)
    throw InputError(m.name + ": head_dim " + std::to_string(m.head_dim) +
                     " is not supported by the engine's attention kernels (64 or 128)");
  return m;
}

std::string engine_dtype(const std::string& text) {
  const std::string t = canonical_dtype(text);
  if (t != "bf16" && t != "fp16")
    throw InputError(
        fmt::format("--dtype: '{}' is not supported by the engine (bf16 or fp16)", text));
  return t;
}

int engine_layers(const ModelConfig& m, int requested) {
  if (requested < 0 || requested > m.num_layers)
    throw InputError(fmt::format("--layers: {} is outside 0..{} (0: all of {})", requested,
                                 m.num_layers, m.name));
  return requested > 0 ? requested : m.num_layers;
}

}  // namespace gpubench::model
