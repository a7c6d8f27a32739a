// Host side of `gpubench advise`: its settings, checked before anything touches a GPU.
#include <fmt/format.h>

#include <algorithm>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/runs.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/modules/advise/advise.hpp"
#include "gpubench/parallel/collectives.hpp"

namespace gpubench::advise {

namespace {

constexpr std::int64_t kMaxTokens = 1 << 20;
constexpr std::int64_t kMaxBatch = 4096;
constexpr int kMaxTop = 16;

std::vector<Workload> parse_workloads(const std::string& text) {
  std::vector<Workload> out;
  for (const auto& item : split_list(trim(text).empty() ? "all" : trim(text))) {
    const std::string w = trim(item);
    if (w == "all") return {Workload::Latency, Workload::Throughput, Workload::Train};
    if (w != "latency" && w != "throughput" && w != "train")
      throw InputError(fmt::format("--workload: '{}' is not latency, throughput, train or all", w));
    const Workload k = w == "latency"      ? Workload::Latency
                       : w == "throughput" ? Workload::Throughput
                                           : Workload::Train;
    if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::int64_t tokens(std::int64_t given, std::int64_t fallback, const char* option) {
  const std::int64_t v = given == 0 ? fallback : given;
  if (v < 1 || v > kMaxTokens)
    throw InputError(fmt::format("{}: {} is outside 1..{}", option, v, kMaxTokens));
  return v;
}

}  // namespace

const char* to_string(Workload w) {
  switch (w) {
    case Workload::Latency:
      return "latency";
    case Workload::Throughput:
      return "throughput";
    case Workload::Train:
      return "train";
  }
  return "?";
}

std::string sequences(std::int64_t n) {
  return fmt::format("{} sequence{}", n, n == 1 ? "" : "s");
}

Settings resolve_settings(const Options& o, bool quick) {
  Settings s;
  s.model = model::load_engine_model(o.model, o.model_config);
  s.model_preset = o.model;
  s.model_config = o.model_config;
  s.dtype = model::engine_dtype(o.dtype) == "fp16" ? ActDtype::F16 : ActDtype::BF16;
  s.elem_bytes = 2;
  s.layers = model::engine_layers(s.model, o.layers);
  s.workloads = parse_workloads(o.workload);
  if (o.prompt < 0)
    throw InputError(fmt::format("--prompt: {} is outside 1..{}", o.prompt, kMaxTokens));
  if (o.output_len < 0)
    throw InputError(fmt::format("--output-len: {} is outside 1..{}", o.output_len, kMaxTokens));
  s.prompt = tokens(o.prompt, quick ? 512 : 1024, "--prompt");
  s.output_len = tokens(o.output_len, quick ? 32 : 128, "--output-len");
  if (s.output_len < 2)
    throw InputError("--output-len: 1 token is the prefill's alone; at least 2 make a generation");
  if (s.prompt + s.output_len > kMaxTokens)
    throw InputError(fmt::format("--output-len: {} after a prompt of {} passes {} positions",
                                 s.output_len, s.prompt, kMaxTokens));
  if (s.prompt + s.output_len > s.model.max_positions)
    s.notes.push_back(
        fmt::format("positions up to {} pass {}'s {}: the model was not trained "
                    "that far",
                    s.prompt + s.output_len, s.model.name, s.model.max_positions));
  s.batch_sizes = trim(o.batch_sizes).empty()
                      ? (quick ? std::vector<std::int64_t>{16} : std::vector<std::int64_t>{8, 32})
                      : parse_counts(o.batch_sizes, "--batch-sizes", kMaxBatch);
  if (o.train_batch < 0 || o.train_batch > kMaxBatch)
    throw InputError(fmt::format("--train-batch: {} is outside 1..{}", o.train_batch, kMaxBatch));
  s.train_batch = o.train_batch > 0 ? o.train_batch : (quick ? 1 : 4);
  if (o.seq_len < 0)
    throw InputError(fmt::format("--seq-len: {} is outside 1..{}", o.seq_len, kMaxTokens));
  s.seq_len = tokens(o.seq_len, quick ? 1024 : 4096, "--seq-len");
  if (!(o.memory >= 0) || o.memory > 1e6)
    throw InputError(
        fmt::format("--memory: {} GiB is not a size a GPU holds (0: what each has "
                    "free)",
                    o.memory));
  s.memory_bytes = static_cast<std::uint64_t>(o.memory * static_cast<double>(1ull << 30));
  s.top = o.top.value_or(quick ? 1 : 3);
  if (s.top < 0 || s.top > kMaxTop)
    throw InputError(fmt::format("--top: {} is outside 0..{}", s.top, kMaxTop));
  s.layouts = trim(o.layouts) == "every" ? "" : trim(o.layouts);  // the config's own word
  // All but the GPU count, which run() checks: bad input before anything runs (or `all`'s
  // earlier modules do).
  if (!s.layouts.empty()) (void)parallel::parse_layouts(s.layouts, 0, s.model);
  s.from = trim(o.from);
  if (!(o.timeout > 0))
    throw InputError(fmt::format("--timeout: {} s is not greater than 0", o.timeout));
  s.timeout_s = o.timeout;
  s.small_collectives = trim(o.small_collectives);
  if (s.small_collectives != "auto" && s.small_collectives != "nccl" &&
      s.small_collectives != "one-shot")
    throw InputError(fmt::format("--small-collectives: '{}' is not auto, nccl or one-shot",
                                 o.small_collectives));
  return s;
}

nlohmann::ordered_json Settings::to_json() const {
  std::vector<std::string> w;
  for (Workload k : workloads) w.push_back(to_string(k));
  nlohmann::ordered_json out{{"model", model.to_json()},
                             {"layers", layers},
                             {"workloads", w},
                             {"prompt", prompt},
                             {"output_len", output_len},
                             {"batch_sizes", batch_sizes},
                             {"train_batch", train_batch},
                             {"seq_len", seq_len},
                             {"bucket_bytes", bucket_bytes},
                             {"memory_bytes", memory_bytes},
                             {"dtype", dtype == ActDtype::BF16 ? "bf16" : "fp16"},
                             {"top", top},
                             {"layouts", layouts.empty() ? "every" : layouts},
                             {"from", from},
                             {"timeout_s", timeout_s},
                             {"small_collectives", small_collectives}};
  if (!small_all_reduces.empty()) out["small_all_reduces"] = small_all_reduces;
  return out;
}

Blocks blocks_from_run(const std::string& path, const Settings& s) {
  for (const Report& r : read_run(path, "--from").reports) {
    if (r.module != "advise") continue;
    const nlohmann::ordered_json mine = s.to_json();
    std::vector<const char*> keys{"layers", "prompt", "output_len", "dtype"};
    if (std::find(s.workloads.begin(), s.workloads.end(), Workload::Train) != s.workloads.end())
      keys.insert(keys.end(), {"train_batch", "seq_len", "bucket_bytes"});
    for (const char* key : keys)
      if (r.config.value(key, nlohmann::ordered_json()) != mine[key])
        throw InputError(fmt::format("--from: {} ran {} {}, this run {}", path, key,
                                     r.config.value(key, nlohmann::ordered_json()).dump(),
                                     mine[key].dump()));
    const auto model = r.config.value("model", nlohmann::ordered_json::object());
    if (model.value("name", "") != s.model.name || model != mine["model"])
      throw InputError(fmt::format("--from: {} ran model {}, this run {}", path,
                                   model.value("name", "?"), s.model.name));
    if (!r.extra.contains("blocks"))
      throw InputError(fmt::format("--from: {}'s advise report holds no building blocks", path));
    // The small all-reduces' path matters where this run has tensor-parallel layouts and the
    // earlier blocks hold all-reduces the one-shot kernel takes (runs made before the option
    // took NCCL's).
    const std::string path_then = r.config.value("small_all_reduces", "nccl");
    bool small = false;
    for (const auto& e : r.extra["blocks"].value("all_reduce", nlohmann::ordered_json::array()))
      small = small || e.value("bytes", 0.0) <= parallel::OneShotCollectives::kMaxBytes;
    if (!s.small_all_reduces.empty() && small && path_then != s.small_all_reduces)
      throw InputError(fmt::format(
          "--from: {} ran its small all-reduces over {}, this run {} (--small-collectives {})",
          path, path_then, s.small_all_reduces, path_then == "nccl" ? "nccl" : "auto"));
    return Blocks::from_json(r.extra["blocks"]);
  }
  throw InputError(fmt::format("--from: {} holds no advise report", path));
}

}  // namespace gpubench::advise
