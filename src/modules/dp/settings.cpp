// Host side of `gpubench dp`: its settings, checked before anything touches a GPU.
#include <fmt/format.h>

#include <algorithm>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/modules/dp/dp.hpp"

namespace gpubench::dp {

namespace {

constexpr std::int64_t kMaxTokens = 1 << 20;
constexpr std::int64_t kMaxBatch = 4096;
constexpr std::uint64_t kMinBucket = 1'000'000, kMaxBucket = 64'000'000'000;

std::vector<Strategy> parse_strategies(const std::string& text) {
  const std::vector<Strategy> all = parallel::every_strategy();
  std::vector<Strategy> out;
  for (const auto& item : split_list(trim(text).empty() ? "all" : trim(text))) {
    const std::string w = trim(item);
    if (w == "all") return all;
    const auto it =
        std::find_if(all.begin(), all.end(), [&](Strategy s) { return w == to_string(s); });
    if (it == all.end())
      throw InputError(fmt::format("--strategy: '{}' is not ddp, zero1, zero2, fsdp or all", w));
    if (std::find(out.begin(), out.end(), *it) == out.end()) out.push_back(*it);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::uint64_t bucket(const std::string& option, const std::string& text) {
  const std::uint64_t b = parse_size_option(option, text, 25'000'000);
  if (b < kMinBucket || b > kMaxBucket)
    throw InputError(fmt::format("{}: {} is outside 1MB..64GB", option, format_bytes(b)));
  return b;
}

// 1, 2, 4, ... up to the GPUs, and the GPU count itself.
std::vector<int> default_counts(int gpus) {
  std::vector<int> out;
  for (int n = 1; n <= std::max(gpus, 1); n *= 2) out.push_back(n);
  if (gpus > out.back()) out.push_back(gpus);
  return out;
}

// A float as the shortest decimal that reads back as it (1e-4, not 9.99999974e-05).
double shortest(float v) {
  return std::stod(fmt::format("{}", v));
}

}  // namespace

Settings resolve_settings(const Options& o, bool quick, int visible_gpus) {
  Settings s;
  s.model = model::load_engine_model(o.model, o.model_config);
  s.dtype = model::engine_dtype(o.dtype) == "fp16" ? ActDtype::F16 : ActDtype::BF16;
  s.layers = model::engine_layers(
      s.model, o.layers > 0 || !quick ? o.layers : std::min(4, s.model.num_layers));
  s.strategies = parse_strategies(o.strategy);
  if (trim(o.gpu_counts).empty()) {
    s.gpu_counts = default_counts(visible_gpus);
  } else {
    for (std::int64_t n : parse_counts(o.gpu_counts, "--gpu-counts", kMaxGpuId + 1)) {
      if (visible_gpus > 0 && n > visible_gpus)
        throw InputError(
            fmt::format("--gpu-counts: {} GPUs, but {} are selected", n, visible_gpus));
      s.gpu_counts.push_back(static_cast<int>(n));
    }
  }
  s.batch_sizes = trim(o.batch_sizes).empty()
                      ? std::vector<std::int64_t>{quick ? 1 : 4}
                      : parse_counts(o.batch_sizes, "--batch-sizes", kMaxBatch);
  const std::int64_t seq = o.seq_len == 0 ? (quick ? 1024 : 4096) : o.seq_len;
  if (seq < 1 || seq > kMaxTokens)
    throw InputError(fmt::format("--seq-len: {} is outside 1..{}", seq, kMaxTokens));
  s.seq_len = seq;
  if (s.seq_len > s.model.max_positions)
    s.notes.push_back(
        fmt::format("{} tokens pass {}'s {} positions: the model was not trained "
                    "that far",
                    s.seq_len, s.model.name, s.model.max_positions));
  s.bucket_bytes = bucket("--bucket-size", trim(o.bucket_size));
  if (trim(o.bucket_sweep) == "none" || (quick && trim(o.bucket_sweep).empty())) {
    s.bucket_sweep.clear();
  } else if (trim(o.bucket_sweep).empty()) {
    s.bucket_sweep = {5'000'000, 25'000'000, 100'000'000};
  } else {
    std::vector<std::uint64_t> sizes;
    try {
      sizes = parse_size_list(o.bucket_sweep);
    } catch (const InputError& e) {
      throw InputError(fmt::format("--bucket-sweep: {}", e.what()));
    }
    for (std::uint64_t b : sizes)
      s.bucket_sweep.push_back(bucket("--bucket-sweep", std::to_string(b)));
    std::sort(s.bucket_sweep.begin(), s.bucket_sweep.end());
    s.bucket_sweep.erase(std::unique(s.bucket_sweep.begin(), s.bucket_sweep.end()),
                         s.bucket_sweep.end());
  }
  if (!(o.timeout > 0))
    throw InputError(fmt::format("--timeout: {} s is not greater than 0", o.timeout));
  s.timeout_s = o.timeout;
  return s;
}

nlohmann::ordered_json Settings::to_json() const {
  std::vector<std::string> names;
  for (Strategy k : strategies) names.push_back(to_string(k));
  return {{"model", model.to_json()},
          {"layers", layers},
          {"strategies", names},
          {"gpu_counts", gpu_counts},
          {"batch_sizes", batch_sizes},
          {"seq_len", seq_len},
          {"bucket_bytes", bucket_bytes},
          {"bucket_sweep", bucket_sweep},
          {"dtype", dtype == ActDtype::BF16 ? "bf16" : "fp16"},
          {"adamw",
           {{"lr", shortest(adamw.lr)},
            {"beta1", shortest(adamw.beta1)},
            {"beta2", shortest(adamw.beta2)},
            {"eps", shortest(adamw.eps)},
            {"weight_decay", shortest(adamw.weight_decay)}}},
          {"timeout_s", timeout_s}};
}

}  // namespace gpubench::dp
