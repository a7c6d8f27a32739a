// Model presets and config.json parsing: the real shapes, parameter counts against the published
// sizes, per-layer GEMM shapes, and clear errors on bad configs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "gpubench/core/errors.hpp"
#include "gpubench/model/presets.hpp"

using namespace gpubench;
using namespace gpubench::model;
using nlohmann::json;

namespace {

struct ExpectedShape {
  const char* preset;
  const char* model_type;
  int hidden, intermediate, layers, heads, kv_heads, head_dim, vocab, max_positions;
};

const ExpectedShape kExpectedShapes[] = {
    {"opt-125m", "opt", 768, 3072, 12, 12, 12, 64, 50272, 2048},
    {"opt-1.3b", "opt", 2048, 8192, 24, 32, 32, 64, 50272, 2048},
    {"gpt2-xl", "gpt2", 1600, 6400, 48, 25, 25, 64, 50257, 1024},
    {"qwen2.5-1.5b", "qwen2", 1536, 8960, 28, 12, 2, 128, 151936, 131072},
    {"qwen2.5-7b", "qwen2", 3584, 18944, 28, 28, 4, 128, 152064, 131072},
    {"qwen3-8b", "qwen3", 4096, 12288, 36, 32, 8, 128, 151936, 40960},
    {"llama-2-7b", "llama", 4096, 11008, 32, 32, 32, 128, 32000, 4096},
    {"llama-3-8b", "llama", 4096, 14336, 32, 32, 8, 128, 128256, 8192},
    {"llama-2-13b", "llama", 5120, 13824, 40, 40, 40, 128, 32000, 4096},
    {"llama-2-70b", "llama", 8192, 28672, 80, 64, 8, 128, 32000, 4096},
};

// The error message of `call`, which must throw InputError.
template <typename Call>
std::string input_error_of(Call call) {
  try {
    call();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
}

// A minimal Llama-style config to break one field at a time.
json llama_like() {
  return json{{"model_type", "llama"},     {"hidden_size", 1024},
              {"intermediate_size", 2816}, {"num_hidden_layers", 4},
              {"num_attention_heads", 16}, {"num_key_value_heads", 4},
              {"vocab_size", 32000},       {"max_position_embeddings", 2048},
              {"hidden_act", "silu"},      {"rms_norm_eps", 1e-6}};
}

// A fresh folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::random_device random;
    path_ = std::filesystem::temp_directory_path() /
            ("gpubench_presets_" + std::to_string(random()) + std::to_string(random()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    const auto file = path_ / name;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << text;
    return file.string();
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

void expect_near_relative(double actual, double expected, double tolerance) {
  EXPECT_NEAR(actual / expected, 1.0, tolerance)
      << "actual " << actual << ", expected " << expected;
}

}  // namespace

TEST(ModelPresets, NamesAreSortedAndComplete) {
  const auto names = preset_names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_GE(names.size(), std::size(kExpectedShapes));
  for (const auto& expected : kExpectedShapes) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected.preset), names.end())
        << expected.preset;
  }
}

TEST(ModelPresets, EveryPresetHasItsRealShape) {
  for (const auto& e : kExpectedShapes) {
    SCOPED_TRACE(e.preset);
    const ModelConfig m = load_preset(e.preset);
    EXPECT_EQ(m.name, e.preset);
    EXPECT_EQ(m.model_type, e.model_type);
    EXPECT_EQ(m.hidden_size, e.hidden);
    EXPECT_EQ(m.intermediate_size, e.intermediate);
    EXPECT_EQ(m.num_layers, e.layers);
    EXPECT_EQ(m.num_heads, e.heads);
    EXPECT_EQ(m.num_kv_heads, e.kv_heads);
    EXPECT_EQ(m.head_dim, e.head_dim);
    EXPECT_EQ(m.vocab_size, e.vocab);
    EXPECT_EQ(m.max_positions, e.max_positions);
  }
}

TEST(ModelPresets, EveryPresetFileParsesAsTheEmbeddedCopy) {
  for (const std::string& name : preset_names()) {
    SCOPED_TRACE(name);
    const std::string file = std::string(GPUBENCH_SOURCE_DIR) + "/config/models/" + name + ".json";
    const ModelConfig from_file = load_model_config(file);
    ModelConfig embedded = load_preset(name);
    embedded.name = from_file.name;  // the file is named by its _name_or_path
    EXPECT_EQ(from_file.to_json(), embedded.to_json());
  }
}

TEST(ModelPresets, FamiliesGetTheirArchitecture) {
  const ModelConfig opt = load_preset("opt-125m");
  EXPECT_EQ(opt.norm, Norm::LayerNorm);
  EXPECT_EQ(opt.positions, Positions::Learned);
  EXPECT_EQ(opt.activation, Activation::Relu);
  EXPECT_FALSE(opt.gated_mlp);
  EXPECT_TRUE(opt.qkv_bias && opt.out_bias && opt.mlp_bias);
  EXPECT_TRUE(opt.tie_word_embeddings);

  const ModelConfig gpt2 = load_preset("gpt2-xl");
  EXPECT_EQ(gpt2.norm, Norm::LayerNorm);
  EXPECT_EQ(gpt2.positions, Positions::Learned);
  EXPECT_EQ(gpt2.activation, Activation::GeluTanh);
  EXPECT_FALSE(gpt2.gated_mlp);
  EXPECT_TRUE(gpt2.qkv_bias && gpt2.out_bias && gpt2.mlp_bias);
  EXPECT_TRUE(gpt2.tie_word_embeddings);

  const ModelConfig llama3 = load_preset("llama-3-8b");
  EXPECT_EQ(llama3.norm, Norm::RMSNorm);
  EXPECT_EQ(llama3.positions, Positions::Rope);
  EXPECT_DOUBLE_EQ(llama3.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(llama3.norm_eps, 1e-5);
  EXPECT_EQ(llama3.activation, Activation::Silu);
  EXPECT_TRUE(llama3.gated_mlp);
  EXPECT_FALSE(llama3.qkv_bias || llama3.out_bias || llama3.mlp_bias || llama3.qk_norm);
  EXPECT_FALSE(llama3.tie_word_embeddings);

  const ModelConfig qwen2 = load_preset("qwen2.5-1.5b");
  EXPECT_TRUE(qwen2.qkv_bias);
  EXPECT_FALSE(qwen2.out_bias || qwen2.mlp_bias || qwen2.qk_norm);
  EXPECT_TRUE(qwen2.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(qwen2.norm_eps, 1e-6);

  const ModelConfig qwen3 = load_preset("qwen3-8b");
  EXPECT_TRUE(qwen3.qk_norm);
  EXPECT_FALSE(qwen3.qkv_bias || qwen3.out_bias);
  EXPECT_EQ(qwen3.q_dim(), 4096);
  EXPECT_EQ(qwen3.kv_dim(), 1024);
}

TEST(ModelPresets, ParameterCountsMatchPublishedSizes) {
  expect_near_relative(load_preset("llama-2-7b").params_total(), 6.74e9, 0.01);
  expect_near_relative(load_preset("llama-2-13b").params_total(), 13.02e9, 0.01);
  expect_near_relative(load_preset("llama-2-70b").params_total(), 68.98e9, 0.01);
  expect_near_relative(load_preset("llama-3-8b").params_total(), 8.03e9, 0.01);
  expect_near_relative(load_preset("qwen2.5-7b").params_total(), 7.62e9, 0.01);
  expect_near_relative(load_preset("qwen2.5-1.5b").params_total(), 1.54e9, 0.01);
  expect_near_relative(load_preset("qwen3-8b").params_total(), 8.19e9, 0.01);
  expect_near_relative(load_preset("opt-125m").params_total(), 125e6, 0.03);
  expect_near_relative(load_preset("opt-1.3b").params_total(), 1.3e9, 0.03);
  expect_near_relative(load_preset("gpt2-xl").params_total(), 1.56e9, 0.02);
}

TEST(ModelPresets, ParameterCountsAreExactForKnownCheckpoints) {
  // Sums of the tensors in the released checkpoints.
  EXPECT_EQ(load_preset("llama-2-7b").params_total(), 6'738'415'616LL);
  EXPECT_EQ(load_preset("llama-3-8b").params_total(), 8'030'261'248LL);
  EXPECT_EQ(load_preset("opt-125m").params_total(), 125'239'296LL);
  EXPECT_EQ(load_preset("gpt2-xl").params_total(), 1'557'611'200LL);
  EXPECT_EQ(load_preset("qwen2.5-7b").params_total(), 7'615'616'512LL);
}

TEST(ModelPresets, PerLayerParametersOfLlama2_7b) {
  // 4 x 4096^2 attention + 3 x 4096 x 11008 MLP + 2 RMSNorm weights.
  EXPECT_EQ(load_preset("llama-2-7b").params_per_layer(),
            4LL * 4096 * 4096 + 3LL * 4096 * 11008 + 2 * 4096);
}

TEST(ModelPresets, LayerGemmsOfLlama2_7b) {
  const auto gemms = layer_gemms(load_preset("llama-2-7b"), 2048);
  ASSERT_EQ(gemms.size(), 4u);
  const struct {
    const char* name;
    long long out, in;
  } expected[] = {
      {"qkv", 3 * 4096, 4096},
      {"attn_out", 4096, 4096},
      {"mlp_gate_up", 2 * 11008, 4096},
      {"mlp_down", 4096, 11008},
  };
  for (std::size_t i = 0; i < gemms.size(); ++i) {
    EXPECT_EQ(gemms[i].name, expected[i].name);
    EXPECT_EQ(gemms[i].tokens, 2048);
    EXPECT_EQ(gemms[i].out_features, expected[i].out) << gemms[i].name;
    EXPECT_EQ(gemms[i].in_features, expected[i].in) << gemms[i].name;
  }
}

TEST(ModelPresets, LayerGemmsOfLlama3_8bUseGroupedKv) {
  const auto gemms = layer_gemms(load_preset("llama-3-8b"), 512);
  ASSERT_EQ(gemms.size(), 4u);
  EXPECT_EQ(gemms[0].name, "qkv");
  EXPECT_EQ(gemms[0].out_features, 4096 + 2 * 1024);  // 8 kv heads x 128
  EXPECT_EQ(gemms[0].in_features, 4096);
  EXPECT_EQ(gemms[1].out_features, 4096);
  EXPECT_EQ(gemms[1].in_features, 4096);
  EXPECT_EQ(gemms[2].name, "mlp_gate_up");
  EXPECT_EQ(gemms[2].out_features, 2 * 14336);
  EXPECT_EQ(gemms[3].name, "mlp_down");
  EXPECT_EQ(gemms[3].out_features, 4096);
  EXPECT_EQ(gemms[3].in_features, 14336);
  for (const auto& gemm : gemms) EXPECT_EQ(gemm.tokens, 512);
}

TEST(ModelPresets, LayerGemmsOfAnUngatedMlp) {
  const auto gemms = layer_gemms(load_preset("gpt2-xl"), 1);
  ASSERT_EQ(gemms.size(), 4u);
  EXPECT_EQ(gemms[2].name, "mlp_up");
  EXPECT_EQ(gemms[2].out_features, 6400);
  EXPECT_EQ(gemms[3].in_features, 6400);
  EXPECT_THROW(layer_gemms(load_preset("gpt2-xl"), 0), InputError);
}

TEST(ModelPresets, ToJsonHasTheNormalizedFields) {
  const auto j = load_preset("qwen3-8b").to_json();
  EXPECT_EQ(j.at("name"), "qwen3-8b");
  EXPECT_EQ(j.at("head_dim"), 128);
  EXPECT_EQ(j.at("norm"), "rmsnorm");
  EXPECT_EQ(j.at("positions"), "rope");
  EXPECT_EQ(j.at("activation"), "silu");
  EXPECT_EQ(j.at("qk_norm"), true);
  EXPECT_EQ(j.at("params_total"), load_preset("qwen3-8b").params_total());
  EXPECT_FALSE(load_preset("gpt2-xl").to_json().contains("rope_theta"));
}

TEST(ModelConfigParse, DefaultsFollowHuggingFace) {
  json config = llama_like();
  config.erase("num_key_value_heads");
  config.erase("rms_norm_eps");
  const ModelConfig m = parse_model_config(config, "tiny");
  EXPECT_EQ(m.name, "tiny");
  EXPECT_EQ(m.num_kv_heads, 16);
  EXPECT_EQ(m.head_dim, 64);
  EXPECT_DOUBLE_EQ(m.rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(m.norm_eps, 1e-5);
  EXPECT_FALSE(m.tie_word_embeddings);

  // GPT-2 spellings; n_inner absent means 4 x hidden; ties by default.
  const json gpt2 = {{"model_type", "gpt2"}, {"n_embd", 768},       {"n_layer", 12},
                     {"n_head", 12},         {"n_positions", 1024}, {"vocab_size", 50257}};
  const ModelConfig small = parse_model_config(gpt2, "gpt2");
  EXPECT_EQ(small.intermediate_size, 3072);
  EXPECT_EQ(small.activation, Activation::GeluTanh);
  EXPECT_TRUE(small.tie_word_embeddings);
  EXPECT_EQ(small.positions, Positions::Learned);
  expect_near_relative(small.params_total(), 124.44e6, 0.001);  // GPT-2 small: 124,439,808
}

TEST(ModelConfigParse, BiasKeysAreHonoured) {
  json config = llama_like();
  config["attention_bias"] = true;
  config["mlp_bias"] = true;
  const ModelConfig m = parse_model_config(config, "biased");
  EXPECT_TRUE(m.qkv_bias && m.out_bias && m.mlp_bias);

  json opt = json::parse(R"({"model_type": "opt", "hidden_size": 64, "ffn_dim": 256,
      "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 128,
      "vocab_size": 100, "enable_bias": false})");
  const ModelConfig unbiased = parse_model_config(opt, "opt-nobias");
  EXPECT_FALSE(unbiased.qkv_bias || unbiased.out_bias || unbiased.mlp_bias);
}

TEST(ModelConfigParse, ActivationSpellings) {
  const struct {
    const char* name;
    Activation activation;
  } spellings[] = {{"silu", Activation::Silu},         {"swish", Activation::Silu},
                   {"relu", Activation::Relu},         {"gelu", Activation::Gelu},
                   {"gelu_new", Activation::GeluTanh}, {"gelu_pytorch_tanh", Activation::GeluTanh},
                   {"gelu_fast", Activation::GeluTanh}};
  for (const auto& spelling : spellings) {
    json config = llama_like();
    config.erase("model_type");  // the generic reading: gated exactly when SiLU (as the engine)
    config["hidden_act"] = spelling.name;
    const ModelConfig m = parse_model_config(config, "act");
    EXPECT_EQ(m.activation, spelling.activation) << spelling.name;
    EXPECT_EQ(m.gated_mlp, spelling.activation == Activation::Silu) << spelling.name;
  }
}

TEST(ModelConfigErrors, UnknownPresetListsTheKnownOnes) {
  const std::string message = input_error_of([] { load_preset("llama-9-999b"); });
  EXPECT_NE(message.find("unknown model 'llama-9-999b'"), std::string::npos) << message;
  EXPECT_NE(message.find("known: "), std::string::npos) << message;
  EXPECT_NE(message.find("llama-2-7b"), std::string::npos) << message;
  EXPECT_NE(message.find("qwen3-8b"), std::string::npos) << message;
}

TEST(ModelConfigErrors, MissingFileIsNamed) {
  const TempDir dir;
  const std::string path = (dir.path() / "absent.json").string();
  const std::string message = input_error_of([&] { load_model_config(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("no such file"), std::string::npos) << message;
}

TEST(ModelConfigErrors, BadJsonIsNamed) {
  const TempDir dir;
  const std::string path = dir.write("broken.json", R"({"hidden_size": 4096,)");
  const std::string message = input_error_of([&] { load_model_config(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("invalid JSON"), std::string::npos) << message;

  const std::string array = dir.write("array.json", "[1, 2]");
  EXPECT_NE(input_error_of([&] { load_model_config(array); }).find("must be a JSON object"),
            std::string::npos);
}

TEST(ModelConfigErrors, MissingHiddenSizeNamesTheFileAndField) {
  const TempDir dir;
  json config = llama_like();
  config.erase("hidden_size");
  const std::string path = dir.write("no_hidden.json", config.dump(2));
  const std::string message = input_error_of([&] { load_model_config(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("missing 'hidden_size'"), std::string::npos) << message;
}

TEST(ModelConfigErrors, NonPositiveFieldsAreNamed) {
  const TempDir dir;
  json config = llama_like();
  config["num_attention_heads"] = 0;
  const std::string path = dir.write("zero_heads.json", config.dump());
  const std::string message = input_error_of([&] { load_model_config(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("'num_attention_heads' must be a positive integer, got 0"),
            std::string::npos)
      << message;

  for (const json& bad : {json(-8), json(1.5), json("32"), json(true)}) {
    json broken = llama_like();
    broken["num_hidden_layers"] = bad;
    const std::string text = input_error_of([&] { parse_model_config(broken, "m"); });
    EXPECT_NE(text.find("'num_hidden_layers' must be a positive integer"), std::string::npos)
        << text;
  }
}

TEST(ModelConfigErrors, HeadDimMustDivideHidden) {
  json config = llama_like();
  config["num_attention_heads"] = 24;  // 1024 / 24 is not whole
  config["num_key_value_heads"] = 24;
  const std::string message = input_error_of([&] { parse_model_config(config, "odd"); });
  EXPECT_NE(message.find("model 'odd'"), std::string::npos) << message;
  EXPECT_NE(message.find("not divisible by 24 attention heads"), std::string::npos) << message;

  config["head_dim"] = 64;  // an explicit head_dim makes it valid (as in Qwen3)
  EXPECT_EQ(parse_model_config(config, "odd").q_dim(), 24 * 64);
}

TEST(ModelConfigErrors, KvHeadsMustDivideHeads) {
  json config = llama_like();
  config["num_key_value_heads"] = 3;
  EXPECT_NE(input_error_of([&] {
              parse_model_config(config, "gqa");
            }).find("not a multiple of 3 'num_key_value_heads'"),
            std::string::npos);
}

TEST(ModelConfigErrors, UnknownActivationIsNamed) {
  json config = llama_like();
  config["hidden_act"] = "mish";
  const std::string message = input_error_of([&] { parse_model_config(config, "m"); });
  EXPECT_NE(message.find("'hidden_act' 'mish' is not a known activation"), std::string::npos)
      << message;
}

TEST(ModelConfigFiles, FolderAndNameOrPath) {
  const TempDir dir;
  dir.write("my-model/config.json", llama_like().dump());
  EXPECT_EQ(load_model_config((dir.path() / "my-model").string()).name, "my-model");

  json named = llama_like();
  named["_name_or_path"] = "org/some-model";
  const std::string path = dir.write("named.json", named.dump());
  const ModelConfig m = load_model_config(path);
  EXPECT_EQ(m.name, "org/some-model");
  EXPECT_EQ(m.hidden_size, 1024);
  EXPECT_EQ(m.num_kv_heads, 4);
}
