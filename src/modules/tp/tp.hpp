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
#include "one_shot.cuh"

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
  // The model run's collectives: "nccl", or "copy-engine" (CopyEngineTpCollectives: prefill's
  // large messages through the copy engines, the rest through NCCL).
  std::string collectives = "nccl";
  // Its all-reduces of up to OneShotTpCollectives::kMaxBytes (decode's): "nccl", "one-shot"
  // (OneShotTpCollectives: one kernel pushing over NVLink, in the decode graph too), or "auto"
  // (one-shot where it can run: GPUs of one host with peer access, at most 8 ranks, as threads
  // or as processes sharing buffers through CUDA IPC; else NCCL).
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
// Communication (collectives.cpp)

// The engine's collectives over an NCCL communicator, in place, bf16 / fp16 sums on the step's
// stream (capturable in a CUDA graph): the all-reduce of the row-parallel outputs, and with
// sequence parallelism the reduce-scatter and all-gather (NCCL's in-place layouts: rank r's
// chunk at data + r * chunk). The communicator is owned by the caller and must outlive this.
class NcclTpCollectives : public model::TpCollectives {
 public:
  explicit NcclTpCollectives(ncclComm_t comm);
  void all_reduce(void* data, std::int64_t elems, ActDtype dtype, cudaStream_t stream) override;
  void reduce_scatter(void* data, std::int64_t chunk, ActDtype dtype, cudaStream_t stream) override;
  void all_gather(void* data, std::int64_t chunk, ActDtype dtype, cudaStream_t stream) override;

 private:
  ncclComm_t comm_;
  int rank_ = 0;
};

// The ranks' shared part of CopyEngineTpCollectives: threads of one process, a GPU each.
// Enables peer access between every pair (peers_ok() says whether all pairs have it), holds
// each rank's staging (t - 1 slots of max_chunk_bytes each: what its peers send it in a
// reduce-scatter) and its events, and the spinning barrier that keeps the ranks' event records
// and waits in step on the host. A rank that does not reach a barrier within 60 s makes the
// others throw GpuError instead of waiting for ever.
class CopyEngineGroup {
 public:
  CopyEngineGroup(const std::vector<int>& devices, std::size_t max_chunk_bytes);
  int size() const noexcept { return static_cast<int>(devices_.size()); }
  bool peers_ok() const noexcept { return peers_ok_; }

 private:
  friend class CopyEngineTpCollectives;
  void barrier();
  std::vector<int> devices_;
  bool peers_ok_ = false;
  std::size_t max_chunk_bytes_ = 0;
  std::vector<DeviceBuffer> staging_;
  std::vector<Event> arrived_, sent_;  // per rank: its stream reached a collective; its copies
  std::vector<void*> data_;            // per rank: the buffer of the collective under way
  std::atomic<int> waiting_{0};
  std::atomic<unsigned> generation_{0};
};

// A TP step's collectives through the copy engines (cudaMemcpyAsync between peers), so that
// they take no SMs and a collective on a second stream does not slow the GEMMs it overlaps:
//   reduce-scatter: rank r copies its chunk j into slot r of rank j's staging, then each rank
//     adds its slots into its own chunk (one small kernel);
//   all-gather: rank r copies its chunk r into chunk r of every peer;
//   all-reduce: the two.
// Each phase ends with an event per rank that the peers' streams wait on (cross-device waits),
// recorded and waited between host barriers. Messages under min_bytes, and every call while
// the stream is being captured (decode's graph), go to `fallback` (NCCL, lower latency).
class CopyEngineTpCollectives : public model::TpCollectives {
 public:
  static constexpr std::size_t kMinBytes = std::size_t{2} << 20;
  CopyEngineTpCollectives(CopyEngineGroup& group, int rank, model::TpCollectives& fallback,
                          std::size_t min_bytes = kMinBytes);
  void all_reduce(void* data, std::int64_t elems, ActDtype dtype, cudaStream_t stream) override;
  void reduce_scatter(void* data, std::int64_t chunk, ActDtype dtype, cudaStream_t stream) override;
  void all_gather(void* data, std::int64_t chunk, ActDtype dtype, cudaStream_t stream) override;
  // Collectives that went through the copy engines, and to the fallback.
  std::int64_t copied() const noexcept { return copied_; }
  std::int64_t fell_back() const noexcept { return fell_back_; }

 private:
  // Whether this collective goes to the fallback (and counts it).
  bool use_fallback(std::size_t chunk_bytes, std::size_t total_bytes, cudaStream_t stream);
  // This rank records its event of `events` (and publishes `publish` as its buffer, if not
  // null), then after a barrier its stream waits for every peer's.
  void exchange(std::vector<Event>& events, cudaStream_t stream, void* publish);
  // The phases on chunks [r * chunk, ...) of `elems` in all (the last chunk may be shorter).
  void scatter_and_sum(void* data, std::int64_t chunk, std::int64_t elems, ActDtype dtype,
                       cudaStream_t stream);
  void gather(void* data, std::int64_t chunk, std::int64_t elems, ActDtype dtype,
              cudaStream_t stream);
  struct Copy {
    void* dst;
    const void* src;
    std::size_t bytes;
  };
  // The copies at once, each on a lane of its own forked from `stream`, joined back to it.
  void copy_to_peers(const std::vector<Copy>& copies, cudaStream_t stream);
  CopyEngineGroup& g_;
  int rank_;
  std::vector<Stream> lanes_;  // t - 1 of them
  std::vector<Event> landed_;
  Event forked_;
  model::TpCollectives& fallback_;
  std::size_t min_bytes_;
  std::int64_t copied_ = 0, fell_back_ = 0;
};

// The copy-engine group of a degree-t run under --collectives copy-engine, staging chunks of up
// to max_chunk_bytes; null where the run goes over NCCL alone: t = 1, --collectives nccl, ranks
// in several processes (mpirun/srun) or GPUs without peer access between some pair (the last
// two with a warning on the log).
std::unique_ptr<CopyEngineGroup> copy_engine_group(const Settings& s, int t, RankGroup& group,
                                                   std::size_t max_chunk_bytes);

// The ranks' shared part of OneShotTpCollectives: threads of one process, a GPU each, peer
// access between every pair (peers_ok() says whether all pairs have it). Holds each rank's
// receive buffer (2 x t slots of slot_bytes), flags, call counter and error word, zeroed, and
// each rank's view of them (OneShotPeers, kernels/one_shot.cuh).
class OneShotGroup {
 public:
  OneShotGroup(const std::vector<int>& devices, std::size_t slot_bytes);
  // Ranks that are processes of one host (mpirun/srun, a GPU each; call from inside
  // group.run(), every rank): this rank's buffers, the peers' mapped through CUDA IPC. Null,
  // on every rank alike, when the ranks span hosts, some pair of their GPUs lacks peer access or
  // some rank could not export or map the buffers.
  // Before it is destroyed every rank must be done with it (a group barrier).
  static std::unique_ptr<OneShotGroup> over_ipc(RankGroup& group, int rank, int device,
                                                std::size_t slot_bytes);
  ~OneShotGroup();
  OneShotGroup(const OneShotGroup&) = delete;
  OneShotGroup& operator=(const OneShotGroup&) = delete;
  int size() const noexcept { return static_cast<int>(devices_.size()); }
  bool peers_ok() const noexcept { return peers_ok_; }
  std::size_t slot_bytes() const noexcept { return slot_bytes_; }
  const OneShotPeers& peers(int rank) const { return peers_.at(static_cast<std::size_t>(rank)); }
  // Whether a wait of `rank`'s for a peer timed out (a synchronous read of its error word).
  bool timed_out(int rank) const;

 private:
  OneShotGroup() = default;
  std::vector<int> devices_;
  bool peers_ok_ = false;
  std::size_t slot_bytes_ = 0;
  std::vector<DeviceBuffer> recv_, words_;
  std::vector<OneShotPeers> peers_;
  std::vector<void*> opened_;  // the peers' buffers mapped through IPC (over_ipc)
};

// A TP step's all-reduces of up to kMaxBytes through the one-shot kernel (each rank pushes its
// data to every peer over NVLink, then sums; one kernel, capturable, so decode's graph takes it
// too); larger ones, reduce-scatters and all-gathers go to `fallback`.
class OneShotTpCollectives : public model::TpCollectives {
 public:
  static constexpr std::size_t kMaxBytes = std::size_t{256} << 10;
  OneShotTpCollectives(const OneShotGroup& group, int rank, model::TpCollectives& fallback);
  void all_reduce(void* data, std::int64_t elems, ActDtype dtype, cudaStream_t stream) override;
  void reduce_scatter(void* data, std::int64_t chunk, ActDtype dtype, cudaStream_t stream) override;
  void all_gather(void* data, std::int64_t chunk, ActDtype dtype, cudaStream_t stream) override;
  std::int64_t one_shot() const noexcept { return one_shot_; }
  std::int64_t fell_back() const noexcept { return fell_back_; }

 private:
  const OneShotGroup& g_;
  int rank_;
  model::TpCollectives& fallback_;
  std::int64_t one_shot_ = 0, fell_back_ = 0;
};

// The one-shot group of a degree-t run under --small-collectives one-shot (slots of kMaxBytes);
// null where the run's small all-reduces go over NCCL: t = 1, --small-collectives nccl, more
// than kOneShotMaxRanks ranks, ranks in several processes (mpirun/srun) or GPUs without peer
// access between some pair (the last three with a warning on the log).
std::unique_ptr<OneShotGroup> one_shot_group(const Settings& s, int t, RankGroup& group);

// Collectives that do nothing: a decode step captured with them runs every kernel of the TP
// step but no communication (wrong logits, never checked), which timed against the real step
// gives the communication the step exposes.
class SkippedCollectives : public model::TpCollectives {
 public:
  void all_reduce(void*, std::int64_t, ActDtype, cudaStream_t) override {}
  void reduce_scatter(void*, std::int64_t, ActDtype, cudaStream_t) override {}
  void all_gather(void*, std::int64_t, ActDtype, cudaStream_t) override {}
};

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
  double no_comm_s = 0;              // decode: the step's graph with SkippedCollectives (median)
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
