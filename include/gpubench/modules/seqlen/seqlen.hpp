#pragma once
// Private interface of `gpubench seqlen`: options and resolved settings of the prefill/decode
// sweep over sequence length and batch, one point's measurement on the GPU, and the host-side
// arithmetic around it (op kinds, knees).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpubench/core/context.hpp"
#include "gpubench/core/measure.hpp"
#include "gpubench/core/monitor.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/kernels/transformer.cuh"
#include "gpubench/model/cost.hpp"
#include "gpubench/model/presets.hpp"
#include "gpubench/model/transformer.hpp"

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
  std::string attention = "auto";  // prefill attention: auto (cuDNN where it runs), cudnn, own
  bool unfused = false;  // decode: one kernel per norm, residual add and activation
};

struct Settings {
  model::ModelConfig model;
  int layers = 0;                                                // layers actually run
  std::vector<std::int64_t> seq_lens, batch_sizes, output_lens;  // ascending, unique
  ActDtype dtype = ActDtype::BF16;
  bool force_length = false, profile_layer = false;
  model::AttentionPath attention = model::AttentionPath::Auto;
  bool fuse = true;  // EngineOptions::fuse_small_steps
  std::vector<std::string> notes;  // what the defaults changed, for the report's warnings
  nlohmann::ordered_json to_json() const;
};

// Applies the mode's defaults and checks every value; throws InputError("--option: why").
Settings resolve_settings(const Options& o, bool quick);

// "128,256" or "128:8192:x2": gpubench::parse_counts (core/units.hpp).
using gpubench::parse_counts;

// The model as run: `layers` decoder layers of it (for the cost model and memory plan).
model::ModelConfig model_as_run(const Settings& s);

// The engine's options for one (batch, prompt length) point: room for the prompt and every
// generated token but the last (it is never fed back).
model::EngineOptions point_engine_options(const Settings& s, std::int64_t batch,
                                          std::int64_t length);
// What the engine allocates for that point (model::engine_memory on a GPU of compute capability
// cc_major): the plan every point reports, skipped ones included.
model::MemoryPlan point_memory_plan(const Settings& s, std::int64_t batch, std::int64_t length,
                                    int cc_major);

// The kind an engine operation belongs to in the breakdown: "gemm" (qkv, attn_out, mlp_*,
// lm_head), "attention", "norm" (input_norm, residual_norm, mlp_residual_norm, qk_norm,
// final_norm), "rope" (rope_kv_cache: RoPE fused with the cache write), "activation" (mlp_act),
// "residual", "kv_cache" (kv_write), "embedding"; "other" otherwise.
std::string op_kind(const std::string& op);

// Per-operation GPU times of one step, from CUDA events around every operation.
struct OpTimes {
  std::map<std::string, double> by_op_s;    // summed over layers
  std::map<std::string, double> by_kind_s;  // op_kind of each op
  std::map<std::string, double> layer_s;    // one layer's ops (the profiled layer)
  double total_s = 0;                       // sum of every op
  double share(const std::string& kind) const;  // by_kind_s[kind] / total_s (0 when empty)
};

// One (batch, prompt length) point.
struct PointOutcome {
  std::int64_t batch = 1, length = 0;
  std::string status = "ok";  // ok | skipped | failed
  std::string note;
  Measurement prefill, decode;                 // one prefill; one decode step at context length
  std::map<std::int64_t, double> e2e_s;        // output length -> prefill + its decode steps
  OpTimes prefill_ops, decode_ops;             // one eager step each, with events per op
  model::EngineMemory engine;                  // what the engine allocated, by purpose
  std::uint64_t measured_bytes = 0;            // GPU memory taken while the point ran (peak)
  model::MemoryPlan plan;                      // the cost model's plan for the point
  double check_error = 0;                      // decode-after-prefill vs prefill, relative L2
  std::string attention_path;                  // which prefill attention ran
  std::string attention_why;                   // why not cuDNN, when it did not run
};

// Runs one point on `gpu`: memory check (skipped with the reason when it cannot fit), engine
// built for exactly this point, the decode-after-prefill check, prefill and decode measured,
// the generation loop for every output length (CUDA graphs, one per decode step), breakdowns.
PointOutcome run_point(Context& ctx, int gpu, const Settings& s, std::int64_t batch,
                       std::int64_t length);

// Prefill attention alone (batch 1, the model's heads): one path timed, its output checked
// against the plain reference kernel.
struct AttentionOutcome {
  std::int64_t length = 0;
  std::string path;  // "cudnn" | "own"
  std::string status = "ok", note;
  Measurement m;
  double flops = 0, tflops = 0, max_error = 0;  // error relative to the reference's max |value|
};
AttentionOutcome run_attention_alone(Context& ctx, int gpu, const Settings& s,
                                     std::int64_t length, model::AttentionPath path);

// The knees of one batch size's points (ascending lengths), from the ok ones: where prefill
// attention time passes the GEMMs' (interpolated; else extrapolated from the longest point as
// L x gemm / attention, attention growing as L^2 and GEMMs as L), where prefill latency turns
// super-linear (model::superlinear_onset), and the first length skipped. Needs two ok points
// for the first two.
struct Knees {
  std::optional<double> attention_passes_gemm, attention_passes_gemm_extrapolated;
  std::optional<double> superlinear_from;
  std::int64_t first_skipped = 0;  // 0: none
  bool enough_points = false;
};
Knees find_knees(const std::vector<PointOutcome>& points);

// The longest prompt (a multiple of 128 up to `cap`) whose memory plan fits `free_bytes`
// for `batch` sequences generating `generate` tokens; 0 when none does.
std::int64_t longest_fitting(const model::ModelConfig& m, std::int64_t batch,
                             std::int64_t generate, int elem_bytes, std::uint64_t free_bytes,
                             std::int64_t cap);

// The point's SM clocks while its prefill and its decode step were timed, from each
// measurement's NVML samples of `gpu` (none where NVML gave no samples), and a note naming each
// phase that ran below its clocks under load, with the reasons ("prefill throttled:
// sw_power_cap"); empty when neither did. The module's warning says only that the GPU throttled
// somewhere; a decode figure taken at full clocks after a power-capped prefill says so here.
struct PhaseClocks {
  std::optional<unsigned> prefill_sm_min_MHz, decode_sm_min_MHz;
  std::string note;
};
PhaseClocks phase_clocks(const MonitorSummary& prefill, const MonitorSummary& decode, int gpu);

}  // namespace gpubench::seqlen
