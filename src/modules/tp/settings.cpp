// Host side of `gpubench tp`: its settings, checked against the model (which TP degrees split
// heads, KV heads and the MLP evenly) and the GPUs before anything touches them, and the shard each
// rank holds.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/modules/tp/tp.hpp"

namespace gpubench::tp {

namespace {

constexpr std::int64_t kMaxTokens = 1 << 20;
constexpr std::int64_t kMaxBatch = 4096;
constexpr std::int64_t kMaxDegree = 1024;
constexpr std::int64_t kMaxMicroSize = 1 << 16;

// A whole number, optionally negative (so "--tp -1" says "at least 1", not "malformed").
std::int64_t parse_int(const std::string& text, const std::string& option) {
  const std::string t = trim(text);
  const std::size_t digits = !t.empty() && t[0] == '-' ? 1 : 0;
  if (t.size() == digits || t.size() > 9 + digits ||
      !std::all_of(t.begin() + digits, t.end(), [](unsigned char c) { return std::isdigit(c); }))
    throw InputError(fmt::format("{}: '{}' is not a whole number", option, text));
  return std::stoll(t);
}

// "a,b,c" or a range ("a:b:xF", "a:b:+S") -> ascending unique values, each in [1, max].
std::vector<std::int64_t> parse_counts(const std::string& text, const std::string& option,
                                       std::int64_t max) {
  if (text.find(':') != std::string::npos) return gpubench::parse_counts(text, option, max);
  std::vector<std::int64_t> out;
  for (const auto& item : split_list(trim(text))) {
    const std::int64_t v = parse_int(item, option);
    if (v < 1 || v > max) throw InputError(fmt::format("{}: {} is outside 1..{}", option, v, max));
    out.push_back(v);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::int64_t> or_default(const std::string& text, const std::string& option,
                                     std::int64_t max, std::vector<std::int64_t> fallback) {
  return trim(text).empty() ? fallback : parse_counts(text, option, max);
}

// The TP degrees: explicit ones must all run; default ones that cannot are dropped with a note.
std::vector<int> resolve_degrees(const Options& o, const model::ModelConfig& m, int visible,
                                 std::vector<std::string>& notes) {
  const bool given = !trim(o.tp).empty();
  std::vector<int> out;
  for (const auto& item : split_list(given ? trim(o.tp) : std::string("1,2,4"))) {
    const std::int64_t t = parse_int(item, "--tp");
    if (t < 1) throw InputError(fmt::format("--tp: {} must be at least 1", t));
    if (t > kMaxDegree) throw InputError(fmt::format("--tp: {} is above {}", t, kMaxDegree));
    const int d = static_cast<int>(t);
    std::string why = why_not_divisible(m, d);
    if (why.empty() && visible > 0 && d > visible)
      why = fmt::format("--tp: {} needs {} GPUs, {} visible", d, d, visible);
    if (!why.empty()) {
      if (given) throw InputError(why);
      notes.push_back(fmt::format("default degree {} left out ({})", d, why.substr(6)));
      continue;
    }
    out.push_back(d);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<MicroKind> parse_micro(const std::string& text) {
  std::vector<MicroKind> out;
  if (trim(text).empty()) return out;
  bool column = false, row = false;
  for (const auto& item : split_list(trim(text))) {
    const std::string v = trim(item);
    if (v == "column")
      column = true;
    else if (v == "row")
      row = true;
    else
      throw InputError(fmt::format("--micro: '{}' is not column or row", item));
  }
  if (column) out.push_back(MicroKind::Column);
  if (row) out.push_back(MicroKind::Row);
  return out;
}

}  // namespace

const char* to_string(MicroKind kind) {
  return kind == MicroKind::Column ? "column" : "row";
}

Settings resolve_settings(const Options& o, bool quick, int visible_gpus) {
  Settings s;
  s.model = model::load_engine_model(o.model, o.model_config);
  s.dtype = model::engine_dtype(o.dtype);
  s.elem_bytes = 2;
  s.layers = model::engine_layers(s.model, o.layers);
  s.tp = resolve_degrees(o, s.model, visible_gpus, s.notes);

  s.seq_lens = or_default(o.seq_lens, "--seq-lens", kMaxTokens,
                          quick ? std::vector<std::int64_t>{1024, 4096}
                                : std::vector<std::int64_t>{128, 512, 1024, 2048, 4096});
  s.batch_sizes = or_default(o.batch_sizes, "--batch-sizes", kMaxBatch, {1});
  s.contexts = or_default(o.contexts, "--contexts", kMaxTokens, {2048});
  // The engine runs any position (learned tables are allocated as long as needed), but the model
  // was not trained past its own: say so rather than refuse.
  const std::int64_t longest = std::max(s.seq_lens.back(), s.contexts.back() + 1);
  if (longest > s.model.max_positions)
    s.notes.push_back(
        fmt::format("positions up to {} pass {}'s {}: the model was not trained "
                    "that far",
                    longest, s.model.name, s.model.max_positions));

  // Sequence parallelism splits a prefill's rows (batch x tokens) over the ranks (Megatron's
  // [s/t, b, h]): the measured prompts' and the prefills that fill the decode points' caches.
  s.sequence_parallel = o.sequence_parallel;
  if (s.sequence_parallel)
    for (int t : s.tp)
      for (std::int64_t b : s.batch_sizes)
        for (const auto& [flag, lens] :
             {std::make_pair("--seq-lens", &s.seq_lens), std::make_pair("--contexts", &s.contexts)})
          for (std::int64_t l : *lens)
            if ((b * l) % t != 0)
              throw InputError(
                  fmt::format("{}: batch {} x {} tokens do not split over --tp {} "
                              "(--sequence-parallel gives each rank whole tokens)",
                              flag, b, l, t));

  s.micro = parse_micro(o.micro);
  if (o.micro_size < 1 || o.micro_size > kMaxMicroSize)
    throw InputError(fmt::format("--micro-size: {} is outside 1..{}", o.micro_size, kMaxMicroSize));
  s.micro_size = o.micro_size;
  if (!s.micro.empty())
    for (int t : s.tp)
      if (s.micro_size % t != 0)
        throw InputError(
            fmt::format("--micro-size: {} does not split over --tp {}", s.micro_size, t));
  s.micro_tokens =
      or_default(o.micro_tokens, "--micro-tokens", kMaxTokens, {1, 16, 128, 1024, 4096});
  s.overlap = o.overlap;
  if (o.overlap_chunks < 1 || o.overlap_chunks > model::Transformer::kMaxOverlapChunks)
    throw InputError(fmt::format("--overlap-chunks: {} is outside 1..{}", o.overlap_chunks,
                                 model::Transformer::kMaxOverlapChunks));
  if (s.micro_size % o.overlap_chunks != 0)
    throw InputError(fmt::format("--overlap-chunks: {} does not divide --micro-size {}",
                                 o.overlap_chunks, s.micro_size));
  s.overlap_chunks = o.overlap_chunks;
  const std::string c = trim(o.collectives);
  if (c != "nccl" && c != "copy-engine")
    throw InputError(fmt::format("--collectives: '{}' is not nccl or copy-engine", o.collectives));
  s.collectives = c;
  const std::string sc = trim(o.small_collectives);
  if (sc != "auto" && sc != "nccl" && sc != "one-shot")
    throw InputError(fmt::format("--small-collectives: '{}' is not auto, nccl or one-shot",
                                 o.small_collectives));
  s.small_collectives = sc;
  if (!(o.timeout > 0)) throw InputError("--timeout must be greater than 0 seconds");
  s.timeout_s = o.timeout;
  return s;
}

nlohmann::ordered_json Settings::to_json() const {
  std::vector<std::string> micro_names;
  for (MicroKind k : micro) micro_names.push_back(to_string(k));
  return {{"model", model.to_json()},
          {"layers", layers},
          {"tp", tp},
          {"seq_lens", seq_lens},
          {"batch_sizes", batch_sizes},
          {"contexts", contexts},
          {"dtype", dtype},
          {"sequence_parallel", sequence_parallel},
          {"micro", micro_names},
          {"micro_size", micro_size},
          {"micro_tokens", micro_tokens},
          {"overlap", overlap},
          {"overlap_chunks", overlap_chunks},
          {"collectives", collectives},
          {"small_collectives", small_collectives},
          {"timeout_s", timeout_s}};
}

}  // namespace gpubench::tp
