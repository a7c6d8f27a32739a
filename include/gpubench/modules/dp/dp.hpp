#pragma once
// `gpubench dp`: data-parallel training and how it scales on this machine. The synthetic
// transformer (model::TrainStage: real forward and backward GEMMs, attention, norms) trained on
// every selected GPU with a batch of its own, then an AdamW step over fp32 master weights, under
// four strategies:
//   ddp    gradients all-reduced in buckets as backward produces them (a communication stream,
//          overlapped with the rest of backward); every rank holds and updates everything.
//   zero1  gradients reduce-scattered in the same buckets; each rank holds the optimizer state of
//          its shard (chunk `rank` of every bucket) and updates it; weights all-gathered after.
//   zero2  as zero1, and the gradients sharded too: backward writes a bucket's into one of two
//          staging buffers, reduce-scattered into the rank's shard.
//   fsdp   (ZeRO-3) weights sharded as well: each layer's gathered before its forward and again
//          before its backward (the next one prefetched), gradients reduce-scattered as zero2.
// The flat parameter buffer's buckets and shards and what each strategy holds are the parallel
// layer's (parallel/data_parallel.hpp, shared with advise); the settings here are unit-tested;
// run.cpp is the GPU runner.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpubench/core/context.hpp"
#include "gpubench/core/measure.hpp"
#include "gpubench/core/ranks.hpp"
#include "gpubench/kernels/optimizer.cuh"
#include "gpubench/model/presets.hpp"
#include "gpubench/model/training.hpp"
#include "gpubench/parallel/data_parallel.hpp"

namespace gpubench::dp {

// ---------------------------------------------------------------------------------------------
// Options and settings (settings.cpp)

using parallel::Bucket;
using parallel::kAlign;
using parallel::memory_plan;
using parallel::MemoryPlan;
using parallel::ParamPlan;
using parallel::plan_params;
using parallel::Strategy;

// As given on the command line or in the config (long option names = INI keys); empty lists
// mean "the default for this mode".
struct Options {
  std::string model = "llama-2-7b";
  std::string model_config;  // a HuggingFace config.json instead of a preset
  std::string strategy;      // ddp,zero1,zero2,fsdp or all (default all)
  std::string gpu_counts;    // GPUs a run spans; default 1, 2, 4, ... and the selected count
  std::string batch_sizes;   // sequences a GPU; default 4 (quick 1)
  std::int64_t seq_len = 0;  // tokens a sequence; 0: 4096 (quick 1024)
  int layers = 0;            // > 0: only this many decoder layers (quick 4)
  std::string bucket_size;   // ddp/zero buckets; default 25MB
  std::string
      bucket_sweep;  // ddp's bucket sizes on all the GPUs; default 5MB,25MB,100MB (quick none)
  std::string dtype = "bf16";
  double timeout = 600;  // seconds without progress before a stuck run ends
};

struct Settings {
  model::ModelConfig model;
  int layers = 0;
  std::vector<Strategy> strategies;
  std::vector<int> gpu_counts;  // ascending, unique
  std::vector<std::int64_t> batch_sizes;
  std::int64_t seq_len = 4096;
  std::uint64_t bucket_bytes = 25'000'000;
  std::vector<std::uint64_t> bucket_sweep;  // ascending, unique
  ActDtype dtype = ActDtype::BF16;
  AdamW adamw;
  double timeout_s = 600;
  std::vector<std::string> notes;  // what the defaults dropped, for the report's warnings
  model::TrainShape shape() const { return {model, seq_len, dtype}; }
  nlohmann::ordered_json to_json() const;
};

// Applies the defaults and checks every value; throws InputError("--option: why") with one line:
// an unknown strategy, a GPU count < 1 or above the visible GPUs (visible_gpus <= 0: not known,
// not checked), batch sizes outside 1..4096, a sequence length outside 1..1 << 20, a bucket
// size below 1 MB or above 64 GB, --timeout <= 0. The default GPU counts above the GPUs are
// dropped.
Settings resolve_settings(const Options& o, bool quick, int visible_gpus);

// ---------------------------------------------------------------------------------------------
// A run on the GPUs (run.cpp)

// A span of one traced step on rank 0, in seconds from the step's start: lane 0 the compute
// stream (forward and backward of each unit, the optimizer), lane 1 the communication stream
// (each bucket's collective, fsdp's gathers).
struct TraceSpan {
  std::string name;
  int lane = 0;
  double start = 0, end = 0;
};

// One measured point: a strategy on `gpus` ranks, `batch` sequences a GPU.
struct Outcome {
  Strategy strategy = Strategy::Ddp;
  int gpus = 1;
  std::int64_t batch = 1;
  std::uint64_t bucket_bytes = 0;
  std::string status = "ok", note;
  Measurement step;          // forward, backward, gradient sync and optimizer, slowest rank
  Measurement compute_only;  // the same step with every collective skipped
  Measurement comm_alone;    // the step's collectives alone, back to back
  double flops = 0;          // one rank's step
  MemoryPlan planned;
  std::uint64_t measured_bytes = 0;  // the most a rank's step took (device memory used)
  // The checked step: reduced gradients against one GPU's over the concatenated batch (relative
  // L2), parameter updates against AdamW's from that gradient (share off by more than
  // kUpdateSlack of lr), every bit of the weights (and ddp's master weights) alike on every rank.
  double grad_error = 0, update_mismatch = 0;
  double moment_error = 0;  // AdamW's first moments against one GPU's, relative L2
  bool ranks_agree = true;
  int buckets = 0;
  std::vector<TraceSpan> trace;  // one more step, rank 0's
};

// The Chrome trace (chrome://tracing, Perfetto) of a traced step (trace.cpp).
nlohmann::ordered_json chrome_trace(const std::vector<TraceSpan>& spans, const std::string& title);

// Tolerances of the checked step.
inline constexpr double kGradTolerance = 0.02;    // relative L2 of the reduced gradients
inline constexpr double kUpdateSlack = 0.1;       // of lr, per parameter
inline constexpr double kUpdateTolerance = 0.02;  // share of parameters beyond the slack

// Faults a GPU test injects to prove the checks (never reached from options): the reduced
// gradients of bucket `zero_bucket` zeroed on every rank after their collective; the first
// weight of rank `flip_rank` changed after its first optimizer step; with `unscaled`, AdamW
// takes the ranks' summed gradients (not their mean).
struct Faults {
  int zero_bucket = -1;
  int flip_rank = -1;
  bool unscaled = false;
};

// One GPU's reference steps made so far, by (GPUs, sequences a GPU): sampled gradients and
// initial weights, empty when one GPU could not hold it. The reference does not depend on the
// strategy, so the strategies of one GPU count and batch share it.
using References = std::map<std::pair<int, std::int64_t>, std::vector<double>>;

// One strategy on `group` (gpus ranks, each `batch` sequences): memory planned and checked
// against every rank's free memory (skipped with why), one checked step against one GPU's
// (made first on the group's first GPU, or taken from `refs` and kept there), the timed steps,
// the step without communication and the collectives alone. Returns rank 0's outcome.
Outcome run_strategy(Context& ctx, const Settings& s, Strategy strategy, std::int64_t batch,
                     std::uint64_t bucket_bytes, RankGroup& group, const Faults& faults = {},
                     References* refs = nullptr);

}  // namespace gpubench::dp
