#pragma once
// `gpubench tp` (tensor parallelism, Megatron style). Options and their checks against the model
// (which degrees shard it evenly), the bytes each layer moves between ranks, the prediction "TP=1
// compute / t + measured collectives" and its error, the column/row-parallel micro-benchmark
// shapes, the headline keys, the engine's NCCL all-reduce and the runs on the GPUs (bench.cpp,
// micro.cpp).
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <nccl.h>
#include <nlohmann/json.hpp>

#include "gpubench/core/context.hpp"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/measure.hpp"
#include "gpubench/core/ranks.hpp"
#include "gpubench/model/cost.hpp"
#include "gpubench/model/presets.hpp"
#include "gpubench/model/shard.hpp"
#include "gpubench/model/transformer.hpp"
#include "gpubench/parallel/collectives.hpp"

namespace gpubench::tp {

// ---------------------------------------------------------------------------------------------
// Options and settings

// As given on the command line or in the config (long option names = INI keys); empty lists
// mean "the default for this mode".
struct Options {
  std::string model = "llama-2-7b";
  std::string model_config;  // a HuggingFace config.json instead of a preset
  std::string tp;            // TP degrees; default 1,2,4
  std::string seq_lens;      // prefill prompts; default 128,512,1024,2048,4096; quick 1024,4096
  std::string batch_sizes;   // default 1 (both modes)
  std::string contexts;      // decode: tokens already cached; default 2048 (both modes)
  int layers = 0;            // > 0: only this many decoder layers (all by default)
  std::string dtype = "bf16";
  bool sequence_parallel = false;  // prefill: reduce-scatter + all-gather instead of all-reduce
  std::string micro;               // "" (none) or a list of column,row
  std::int64_t micro_size = 8192;  // the micro-benchmark's W is micro_size x micro_size
  std::string micro_tokens;        // default 1,16,128,1024,4096
  // Micro, row-parallel: the GEMM in chunks, each chunk's all-reduce behind the next one's GEMM;
  // prefill (without sequence parallelism): the step in chunks (Transformer's overlap_chunks).
  bool overlap = false;
  int overlap_chunks = 4;
  std::string collectives = "nccl";        // the model run's: nccl or copy-engine
  std::string small_collectives = "auto";  // its small all-reduces: auto, nccl or one-shot
  double timeout = 600;  // seconds without progress before a stuck run ends with its report
};

// The two Megatron linear layers the micro-benchmark isolates.
enum class MicroKind { Column, Row };
const char* to_string(MicroKind kind);  // "column" / "row"

struct Settings {
  model::ModelConfig model;
  int layers = 0;                                             // layers actually run
  std::vector<int> tp;                                        // ascending, unique
  std::vector<std::int64_t> seq_lens, batch_sizes, contexts;  // ascending, unique
  std::string dtype = "bf16";                                 // "bf16" | "fp16"
  int elem_bytes = 2;
  bool sequence_parallel = false;
  std::vector<MicroKind> micro;  // column before row; empty: no micro-benchmark
  std::int64_t micro_size = 8192;
  std::vector<std::int64_t> micro_tokens;
  bool overlap = false;
  int overlap_chunks = 4;
  // The model run's collectives: "nccl", or "copy-engine" (parallel::CopyEngineCollectives:
  // prefill's large messages through the copy engines, the rest through NCCL).
  std::string collectives = "nccl";
  // Its all-reduces of up to parallel::OneShotCollectives::kMaxBytes (decode's): "nccl", "one-shot"
  // (parallel::OneShotCollectives: one kernel pushing over NVLink, in the decode graph too), or
  // "auto" (one-shot where it can run: GPUs of one host with peer access, at most 8 ranks, as
  // threads or as processes sharing buffers through CUDA IPC; else NCCL).
  std::string small_collectives = "auto";
  double timeout_s = 600;          // the watchdog's limit (no rank group passing a barrier)
  std::vector<std::string> notes;  // what the defaults changed, for the report's warnings
  nlohmann::ordered_json to_json() const;
};

// Applies the mode's defaults and checks every value; throws InputError("--option: why") with
// one line. For each degree t, in order: t >= 1; t divides the attention heads, then the KV
// heads (grouped-query attention: every rank holds whole KV heads, none are replicated), then
// the intermediate size (the vocabulary need not divide: the LM head is not sharded here); then
// t <= visible_gpus. A t that is not a power of two is fine when it divides all three.
// visible_gpus <= 0 means unknown (no check). Default degrees that cannot run (too few GPUs,
// uneven split) are dropped with a note instead of an error.
Settings resolve_settings(const Options& o, bool quick, int visible_gpus);

// ---------------------------------------------------------------------------------------------
// Shards (what each rank holds)

// What each rank holds: model::ShardShape and model::shard_shape (gpubench/model/shard.hpp),
// shared with the engine that builds the shards.
using model::Range;
using model::shard_shape;
using model::ShardShape;
using model::why_not_divisible;

// What one decoder layer sends between the t ranks in one forward step. `rows` of activations
// are summed (or scattered and gathered): batch x tokens in prefill, batch in decode.
//   Without sequence parallelism: 2 all-reduces (after attention out, after MLP down), each of
//   rows x hidden x elem bytes.
//   With it (prefill only: decode keeps the all-reduces, one row per sequence is not split):
//   each all-reduce becomes a reduce-scatter (input rows x hidden x elem) and, before the next
//   column-parallel GEMM, an all-gather (output rows x hidden x elem): 2 + 2 collectives of the
//   same size. Bus bytes (what each rank's links carry, nccl-tests busbw factors) are equal:
//   all-reduce 2(t-1)/t x size = reduce-scatter (t-1)/t x size + all-gather (t-1)/t x size.
// At t = 1 nothing moves (all counts 0).
struct LayerComm {
  int all_reduces = 0, reduce_scatters = 0, all_gathers = 0;
  std::uint64_t bytes_per_collective = 0;  // nccl-tests "size" of each one
  std::uint64_t total_bytes = 0;           // collectives x bytes_per_collective
  double bus_bytes = 0;                    // sum of size x bus factor
};
// InputError when batch or tokens (prefill) < 1, t < 1 or elem_bytes is not 1, 2 or 4.
LayerComm layer_comm(const model::ModelConfig& m, model::Phase phase, std::int64_t batch,
                     std::int64_t tokens, int elem_bytes, int t, bool sequence_parallel);

// ---------------------------------------------------------------------------------------------
// Prediction (analysis.cpp)

// Collective time by message size, measured on t GPUs (the allreduce module's out-of-place
// points: allreduce::Point{size, time_s} -> CommSample{size, time_s}).
struct CommSample {
  double bytes = 0, seconds = 0;
};
struct CommTable {
  int ranks = 0;
  std::vector<CommSample> samples;  // ascending bytes, all positive
  // Linear in (log bytes, log seconds) between samples (exact at them); below the smallest, its
  // time (latency bound); above the largest, the last segment's bandwidth added on (or the
  // largest sample's algbw when the last segment does not grow). InputError when empty, not
  // ascending or not positive, or bytes <= 0.
  double seconds(double bytes) const;
};

struct Prediction {
  double compute_s = 0, comm_s = 0, total_s = 0;
};
// One forward step at TP=t: layers x layer_compute_s / t (one layer's compute measured at TP=1,
// assumed to split perfectly) plus 2 x layers x table.seconds(bytes_per_allreduce) (no
// communication at t = 1, whatever the table). InputError when t < 1, layers < 1,
// layer_compute_s < 0, or t > 1 and the table was measured on other than t ranks.
Prediction predict(double layer_compute_s, int t, int layers, double bytes_per_allreduce,
                   const CommTable& table);

// 100 x (predicted - measured) / measured: positive when the prediction is slower than the run.
// InputError when measured <= 0.
double prediction_error_pct(double measured_s, double predicted_s);

// tp1_s / tp_s; speed-up / t; comm_s / total_s. InputError on non-positive denominators.
double speedup(double tp1_s, double tp_s);
double efficiency(double speedup, int t);
double comm_share(double comm_s, double total_s);

// The decode check: a decode step at TP=t should expose about 2 x layers small all-reduces of
// batch x hidden x elem bytes each (nothing hides them: every GEMM waits for the sum before).
double expected_decode_comm_s(int layers, double bytes_per_allreduce, const CommTable& table);

// |a - b| <= pct% of |b| (b is the reference). InputError when pct < 0.
bool within_pct(double a, double b, double pct);

// ---------------------------------------------------------------------------------------------
// Micro-benchmark shapes

// One rank's GEMM of the micro-benchmark, Y[tokens x n] = X[tokens x k] W^T, with a square
// W of size x size split over t ranks:
//   column-parallel: W's rows are split: each rank computes [tokens, size/t] from the full input
//     (k = size, n = size/t). No communication is needed for the next row-parallel layer; the
//     optional all-gather that rebuilds the full output moves tokens x size x elem bytes
//     (nccl-tests all_gather size: the gathered output).
//   row-parallel: W's columns are split: each rank computes a partial [tokens, size] from its
//     size/t slice of the input (k = size/t, n = size), then an all-reduce of tokens x size x elem
//     bytes sums them.
struct MicroShape {
  MicroKind kind = MicroKind::Column;
  std::int64_t tokens = 0, n = 0, k = 0;  // the local GEMM
  double flops_per_rank = 0;              // 2 x tokens x n x k
  std::uint64_t comm_bytes = 0;           // tokens x size x elem (0 at t = 1)
  std::string collective;                 // "all_gather" (optional) or "all_reduce"; "" at t = 1
};
// InputError when size, tokens or t < 1, t does not divide size, or elem_bytes not 1, 2 or 4.
MicroShape micro_shape(MicroKind kind, std::int64_t size, std::int64_t tokens, int t,
                       int elem_bytes);

// ---------------------------------------------------------------------------------------------
// Headline keys

enum class HeadlineKind { PrefillSpeedup, DecodeSpeedup, CommSharePrefill };
// "tp{t}_prefill_speedup_{len}", "tp{t}_decode_speedup_ctx{len}", "tp{t}_comm_share_prefill_{len}"
std::string headline_key(HeadlineKind kind, int t, std::int64_t length);

inline constexpr const char* kTp2PrefillSpeedup4096 = "tp2_prefill_speedup_4096";
inline constexpr const char* kTp2DecodeSpeedupCtx2048 = "tp2_decode_speedup_ctx2048";
inline constexpr const char* kTp4PrefillSpeedup4096 = "tp4_prefill_speedup_4096";
inline constexpr const char* kTp2CommSharePrefill4096 = "tp2_comm_share_prefill_4096";

// ---------------------------------------------------------------------------------------------
// Communication: the engine's collectives live in the parallel layer
// (gpubench/parallel/collectives.hpp); the groups a run's settings ask for (collectives.cpp)

// The copy-engine group of a degree-t run under --collectives copy-engine, staging chunks of up
// to max_chunk_bytes; null where the run goes over NCCL alone: t = 1, --collectives nccl, ranks
// in several processes (mpirun/srun) or GPUs without peer access between some pair (the last
// two with a warning on the log).
std::unique_ptr<parallel::CopyEngineGroup> copy_engine_group(const Settings& s, int t,
                                                             RankGroup& group,
                                                             std::size_t max_chunk_bytes);

// The one-shot group of a degree-t run under --small-collectives one-shot (slots of kMaxBytes);
// null where the run's small all-reduces go over NCCL: t = 1, --small-collectives nccl, more
// than kOneShotMaxRanks ranks, ranks in several processes (mpirun/srun) or GPUs without peer
// access between some pair (the last three with a warning on the log).
std::unique_ptr<parallel::OneShotGroup> one_shot_group(const Settings& s, int t, RankGroup& group);

// ---------------------------------------------------------------------------------------------
// The runs (bench.cpp): the engine split over t GPUs, one thread (or MPI process) per rank

// Events around the engine's operations of one eager step, summed by kind.
struct OpSplit {
  double gemm_s = 0, attention_s = 0, comm_s = 0, other_s = 0;
  double total_s() const { return gemm_s + attention_s + comm_s + other_s; }
};
// "gemm", "attention", "communication" or "other" for an engine op name.
std::string op_kind(const std::string& op);

// One measured point of one degree: a prefill of `length` tokens or a decode step at context
// `length`, `batch` sequences.
struct Outcome {
  int t = 1;
  model::Phase phase = model::Phase::Prefill;
  std::int64_t batch = 1, length = 0;
  std::string status = "ok", note;
  Measurement step;            // per iteration: the slowest rank's time
  OpSplit ops;                 // rank 0's eager step with events
  double allreduce_bytes = 0;  // one all-reduce of the layer (0 at t = 1)
  // The same all-reduce timed alone on the same GPUs: prefill, one per iteration; decode, per
  // all-reduce of a CUDA graph of 2 x layers of them back to back (as the decode step's graph
  // launches them).
  double allreduce_alone_s = 0;
  double no_comm_s = 0;  // decode: the step's graph with parallel::SkippedCollectives (median)
  double check_error = 0;            // rank 0's logits against the reference, relative L2
  int checked_against = 0;           // the reference's degree (1; 0: none, the point unchecked)
  std::uint64_t memory_per_gpu = 0;  // the engine's bytes on rank 0
  // Prefill with --overlap (when the step divides into the chunks): the step in
  // overlap_chunks chunks, each chunk's all-reduces behind the next chunk's compute (median,
  // slowest rank), and its logits against TP=1.
  int overlap_chunks = 0;
  double overlap_s = 0;
  double overlap_check_error = 0;
  std::string collectives = "nccl";        // what the step's large collectives ran over
  std::string small_collectives = "nccl";  // what its small all-reduces ran over
  std::string attention_path;              // prefill: rank 0's attention kernel ("cudnn" or "own")
  std::string attention_why;               // why not cuDNN, when it did not run
};

// The logits each point is checked against: TP=1's, or where TP=1 did not run the point (a model
// that does not fit one GPU) the first degree that did. Key (phase, batch, length).
struct ReferenceRun {
  int t = 1;  // the degree whose logits these are
  std::vector<double> logits;
};
using ReferenceLogits = std::map<std::tuple<int, std::int64_t, std::int64_t>, ReferenceRun>;

// A point TP=1 did not run (a model that does not fit one GPU) is the reference of the first
// degree that ran it and stays "unchecked"; when a later degree's logits agreed with it, it is
// "ok", checked against that degree. Outcomes by degree, as run_degree returns them.
void confirm_across_degrees(std::map<int, std::vector<Outcome>>& by_degree);

// Runs every (batch, prompt) prefill and (batch, context) decode point of `s` at degree t on
// `group` (t ranks: threads of one process, or processes under MPI). Checks rank 0's logits
// against `reference`; a point it has none for becomes the reference, and at t > 1 is
// "unchecked" until a later degree agrees with it (confirm_across_degrees).
std::vector<Outcome> run_degree(Context& ctx, const Settings& s, int t, RankGroup& group,
                                ReferenceLogits& reference);

// The column/row-parallel micro-benchmark at degree t: Y = X W^T with a square W of
// s.micro_size on t ranks, for every kind of s.micro and token count of s.micro_tokens. X and W
// are seeded per (row, column) so that every rank's slices are those of one full problem, and
// the result is checked against the full GEMM on rank 0 (row-parallel: after the all-reduce;
// column-parallel: every block of the all-gather). At t = 1 only the GEMM runs (the baseline).
struct MicroOutcome {
  MicroKind kind = MicroKind::Column;
  int t = 1;
  std::int64_t tokens = 0;
  std::string status = "ok", note;
  std::string collective;  // "all_reduce", "all_gather" or "" (t = 1)
  double compute_s = 0;    // the local GEMM alone
  double comm_s = 0;       // the collective alone
  double total_s = 0;      // GEMM then collective
  double overlap_s = 0;    // row-parallel in overlap_chunks chunks, collectives overlapped
  double comm_bytes = 0;   // nccl-tests size of the collective
  double flops_per_rank = 0;
  double check_error = 0;  // relative L2 against the full GEMM
  double overlap_check_error = 0;
  std::string collectives = "nccl";  // what the row-parallel all-reduces ran over
};
std::vector<MicroOutcome> run_micro(Context& ctx, const Settings& s, int t, RankGroup& group);

}  // namespace gpubench::tp
