#pragma once
// Private interface of `gpubench seqlen` (being built; the subcommand is not registered yet):
// options and resolved settings of the prefill/decode sweep over sequence length and batch.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpubench/model/presets.hpp"
#include "transformer.cuh"

namespace gpubench::seqlen {

// As given on the command line or in the config (long option names = INI keys); empty values
// mean "the default for this mode".
struct Options {
  std::string model = "llama-2-7b";
  std::string model_config;  // a HuggingFace config.json instead of a preset
  std::string seq_lens;      // default 128,256,...,8192; quick 512,2048
  std::string batch_sizes;   // default 1,2,4,8; quick 1
  std::string output_lens;   // default 50,100,200; quick 50
  std::string dtype = "bf16";
  int layers = 0;              // > 0: only this many decoder layers (full model by default)
  bool force_length = false;   // allow lengths past the model's max_position_embeddings
  bool profile_layer = false;  // per-op breakdown of one layer in detail
};

struct Settings {
  model::ModelConfig model;
  int layers = 0;                                                // layers actually run
  std::vector<std::int64_t> seq_lens, batch_sizes, output_lens;  // ascending, unique
  ActDtype dtype = ActDtype::BF16;
  bool force_length = false, profile_layer = false;
  std::vector<std::string> notes;  // what the defaults changed, for the report's warnings
  nlohmann::ordered_json to_json() const;
};

// Applies the mode's defaults and checks every value; throws InputError("--option: why").
Settings resolve_settings(const Options& o, bool quick);

// "128,256" or "128:8192:x2" (start:stop:xF geometric, or start:stop:step), ascending, unique,
// each in [1, max]. Throws InputError naming `option`.
std::vector<std::int64_t> parse_counts(const std::string& text, const std::string& option,
                                       std::int64_t max);

}  // namespace gpubench::seqlen
