// `gpubench pp`'s settings, checked against the model and the GPUs before anything touches
// them.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/modules/pp/pp.hpp"

namespace gpubench::pp {

namespace {

constexpr std::int64_t kMaxStages = 1024;
constexpr std::int64_t kMaxMicrobatches = 4096;
constexpr std::int64_t kMaxTokens = 1 << 20;

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

std::vector<int> as_ints(const std::vector<std::int64_t>& v) {
  return std::vector<int>(v.begin(), v.end());
}

}  // namespace

Settings resolve_settings(const Options& o, bool quick, int visible_gpus) {
  Settings s;
  s.model = model::load_engine_model(o.model, o.model_config);
  s.dtype = model::engine_dtype(o.dtype);
  s.layers = model::engine_layers(s.model, o.layers);
  if (quick && o.layers == 0) s.layers = std::min(s.layers, 8);
  if (!(o.timeout > 0)) throw InputError("--timeout must be greater than 0 seconds");
  s.timeout_s = o.timeout;
  s.transfers = lower(trim(o.transfers));
  if (s.transfers.empty()) s.transfers = "nccl";
  if (s.transfers != "nccl" && s.transfers != "copy-engine")
    throw InputError(
        fmt::format("--transfers: '{}' is not nccl or copy-engine", trim(o.transfers)));
  if (o.nccl_ctas < 0 || o.nccl_ctas > 64)
    throw InputError(
        fmt::format("--nccl-ctas: {} is outside 0..64 (0: NCCL's own choice)", o.nccl_ctas));
  s.nccl_ctas = o.nccl_ctas;
  const std::string split = lower(trim(o.stage_split));
  if (split == "half-layer")
    s.half_layers = true;
  else if (!split.empty() && split != "layer")
    throw InputError(
        fmt::format("--stage-split: '{}' is not layer or half-layer", trim(o.stage_split)));
  const std::string workload = lower(trim(o.workload));
  if (workload == "inference")
    s.training = false;
  else if (workload == "training")
    s.inference = false;
  else if (!workload.empty() && workload != "both")
    throw InputError(fmt::format("--workload: '{}' is not inference, training or both",
                                 o.workload));
  if (o.batch < 1 || o.batch > kMaxMicrobatches)
    throw InputError(fmt::format("--batch: {} is outside 1..{}", o.batch, kMaxMicrobatches));
  s.batch = o.batch;
  if (o.seq_len < 1 || o.seq_len > kMaxTokens)
    throw InputError(fmt::format("--seq-len: {} is outside 1..{}", o.seq_len, kMaxTokens));
  s.seq_len = o.seq_len;
  if (o.chunks < 1 || o.chunks > 64)
    throw InputError(fmt::format("--chunks: {} is outside 1..64", o.chunks));
  s.chunks = o.chunks;

  // Schedules.
  for (const auto& item : split_list(trim(o.schedule).empty() ? "gpipe,1f1b" : trim(o.schedule))) {
    const Schedule sc = parse_schedule(item);
    if (std::find(s.schedules.begin(), s.schedules.end(), sc) == s.schedules.end())
      s.schedules.push_back(sc);
  }
  const bool interleaved =
      std::find(s.schedules.begin(), s.schedules.end(), Schedule::Interleaved) != s.schedules.end();

  // Stages: explicit ones must all run; default ones that cannot are dropped with a note.
  const bool pp_given = !trim(o.pp).empty();
  for (int p : as_ints(parse_counts(pp_given ? o.pp : "2,4", "--pp", kMaxStages))) {
    std::string why;
    if (p > s.layers)
      why = fmt::format("--pp: {} stages need at least {} layers ({} has {})", p, p, s.model.name,
                        s.layers);
    else if (visible_gpus > 0 && p > visible_gpus)
      why = fmt::format("--pp: {} stages need {} GPUs, {} visible", p, p, visible_gpus);
    else if (interleaved && s.layers % (p * s.chunks) != 0)
      why = fmt::format(
          "--chunks: {} chunks on each of {} stages do not divide {} layers (interleaving needs "
          "layers % (stages x chunks) == 0)",
          s.chunks, p, s.layers);
    if (why.empty()) {
      s.pp.push_back(p);
    } else if (pp_given) {
      throw InputError(why);
    } else {
      s.notes.push_back(why + ": skipped");
    }
  }
  if (s.pp.empty())
    throw InputError(fmt::format("--pp: no default stage count (2, 4) runs here ({})",
                                 s.notes.empty() ? "" : s.notes.back()));

  // Microbatches: each divides the batch; interleaving also needs multiples of every p.
  const bool mb_given = !trim(o.microbatches).empty();
  const std::vector<std::int64_t> fallback =
      quick ? std::vector<std::int64_t>{4, 16} : std::vector<std::int64_t>{1, 2, 4, 8, 16};
  for (int m : as_ints(mb_given ? parse_counts(o.microbatches, "--microbatches", kMaxMicrobatches)
                                : fallback)) {
    std::string why;
    if (s.batch % m != 0)
      why = fmt::format("--microbatches: {} does not divide --batch {}", m, s.batch);
    else if (interleaved && (pp_given || visible_gpus > 0))  // default stages: once GPUs are known
      for (int p : s.pp)
        if (m % p != 0) {
          why = fmt::format(
              "--microbatches: {} is not a multiple of {} stages (the interleaved schedule)", m, p);
          break;
        }
    if (why.empty()) {
      s.microbatches.push_back(m);
    } else if (mb_given) {
      throw InputError(why);
    } else {
      s.notes.push_back(why + ": skipped");
    }
  }
  if (s.microbatches.empty())
    throw InputError(fmt::format("--microbatches: no default count divides --batch {}", s.batch));

  // Layouts: checked against the GPUs here when they are known, else all but their count.
  s.layouts_text = trim(o.layouts);
  if (!s.layouts_text.empty())
    (void)parse_layouts(s.layouts_text, std::max(visible_gpus, 0), s.model);
  if (trim(o.layout_batches).empty()) {
    s.layout_batches = s.batch == 1 ? std::vector<int>{1} : std::vector<int>{1, s.batch};
  } else {
    s.layout_batches =
        as_ints(parse_counts(o.layout_batches, "--layout-batches", kMaxMicrobatches));
  }
  return s;
}

nlohmann::ordered_json Settings::to_json() const {
  std::vector<std::string> sched;
  for (Schedule sc : schedules) sched.push_back(to_string(sc));
  return {{"model", model.to_json()},
          {"layers", layers},
          {"pp", pp},
          {"microbatches", microbatches},
          {"schedules", sched},
          {"chunks", chunks},
          {"batch", batch},
          {"seq_len", seq_len},
          {"layouts", layouts_text},
          {"layout_batches", layout_batches},
          {"transfers", transfers},
          {"nccl_ctas", nccl_ctas},
          {"stage_split", half_layers ? "half-layer" : "layer"},
          {"timeout_s", timeout_s},
          {"dtype", dtype},
          {"workload", inference && training ? "both" : (inference ? "inference" : "training")}};
}

}  // namespace gpubench::pp
