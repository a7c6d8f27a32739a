#pragma once
// `gpubench pp` (pipeline parallelism). The host-side arithmetic the GPU runs rest on: options
// and their checks, stage balancing, the three schedules as per-stage operation orders, a simulator
// that turns an order and operation times into timelines (bubble fraction, peak activations,
// exposed transfers), the theory it is compared with, a training stage's work per microbatch (FLOPs
// forward and backward, saved activations, transfers), parallel layouts, and the Chrome trace of a
// timeline; then the runs on the GPUs (inference.cpp, train_run.cpp, layout_run.cpp).
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpubench/core/context.hpp"
#include "gpubench/core/measure.hpp"
#include "gpubench/core/ranks.hpp"
#include "gpubench/model/presets.hpp"
#include "gpubench/model/training.hpp"
#include "gpubench/parallel/layout.hpp"

namespace gpubench::pp {

// ---------------------------------------------------------------------------------------------
// Options and settings (settings.cpp)

enum class Schedule;

// As given on the command line or in the config (long option names = INI keys); empty lists mean
// "the default".
struct Options {
  std::string model = "llama-2-7b";
  std::string model_config;     // a HuggingFace config.json instead of a preset
  std::string pp;               // stages; default 2,4 (those the GPUs and layers allow)
  std::string microbatches;     // default 1,2,4,8,16 (quick 4,16)
  std::string schedule;         // default gpipe,1f1b
  int chunks = 2;               // model chunks a stage for the interleaved schedule
  int batch = 16;               // sequences a step, split into the microbatches
  std::int64_t seq_len = 1024;  // prompt tokens a sequence
  int layers = 0;               // > 0: only this many decoder layers
  std::string layouts;          // "" (none), a list such as "dp=4,tp=2xdp=2", or "all"
  std::string dtype = "bf16";
  std::string workload;               // inference, training or both (default both)
  std::string layout_batches;         // the layouts' batch sizes (default 1 and --batch)
  std::string transfers = "nccl";     // training's stage-to-stage transfers: nccl or copy-engine
  int nccl_ctas = 0;                  // > 0: the CTAs NCCL may use for a stage-to-stage transfer
  std::string stage_split = "layer";  // training stages' boundaries: layer or half-layer
  double timeout = 600;               // seconds without progress before a stuck run is ended
};

struct Settings {
  model::ModelConfig model;
  int layers = 0;
  std::vector<int> pp;            // ascending, unique
  std::vector<int> microbatches;  // ascending, unique, each dividing batch
  std::vector<Schedule> schedules;
  int chunks = 2;
  int batch = 16;
  std::int64_t seq_len = 1024;
  std::string layouts_text;  // resolved against the GPUs when the run starts
  std::string dtype = "bf16";
  bool inference = true, training = true;
  std::vector<int> layout_batches;  // ascending, unique
  std::string transfers = "nccl";   // nccl or copy-engine
  int nccl_ctas = 0;                // 0: NCCL's own choice
  bool half_layers = false;         // training stages may end between a layer's halves
  double timeout_s = 600;           // the watchdog's limit (no rank group passing a barrier)
  std::vector<std::string> notes;   // what the defaults dropped, for the report's warnings
  nlohmann::ordered_json to_json() const;
};

// Applies the defaults (quick: 8 layers unless --layers, microbatches 4,16) and checks every
// value; throws InputError("--option: why") with one line:
// a stage count above the layers or the visible GPUs (visible_gpus <= 0: unknown, not checked),
// microbatches that do not divide --batch, an unknown schedule, interleaving whose chunks do not
// divide each stage's layers (layers % (p x chunks)) or whose microbatches are not a multiple of
// p, a layout whose product is not the GPU count. Default values that cannot run are dropped
// with a note instead.
Settings resolve_settings(const Options& o, bool quick, int visible_gpus);

// ---------------------------------------------------------------------------------------------
// Schedules

enum class Schedule { GPipe, OneFOneB, Interleaved };
const char* to_string(Schedule s);  // "gpipe" / "1f1b" / "interleaved"
// "gpipe", "1f1b", "interleaved" (case-insensitive); InputError naming --schedule otherwise.
Schedule parse_schedule(const std::string& text);

// One unit of work of a stage: the forward or backward pass of microbatch `mb` through the
// stage's model chunk `chunk` (0 unless interleaved, where each stage holds v chunks).
struct Op {
  bool forward = true;
  int mb = 0, chunk = 0;
  bool operator==(const Op& o) const {
    return forward == o.forward && mb == o.mb && chunk == o.chunk;
  }
};

// The order in which stage `stage` of p runs its operations for m microbatches (v chunks per
// stage for Interleaved, else 1):
//   GPipe: every forward (mb 0..m-1), then every backward (mb 0..m-1).
//   1F1B: min(p - stage - 1, m) warm-up forwards, then one forward and one backward in turn,
//     then the remaining backwards (Megatron's non-interleaved schedule).
//   Interleaved (Megatron's interleaved 1F1B): forwards in groups of p microbatches per chunk
//     (chunk 0 of mb 0..p-1, chunk 1 of the same, ...), (p - stage - 1) * 2 + (v - 1) * p
//     warm-up forwards (capped at m * v), then 1F1B over the virtual microbatches, backwards
//     in the mirrored chunk order. Needs m a multiple of p.
// InputError when p, m or v < 1, v > 1 without Interleaved, or Interleaved with m % p != 0.
std::vector<Op> stage_order(Schedule s, int p, int m, int v, int stage);

// Bubble fraction of the step in theory (equal stages, no transfer time):
//   GPipe and 1F1B: (p - 1) / (m + p - 1); Interleaved: (p - 1) / (v * m + p - 1).
double theory_bubble(Schedule s, int p, int m, int v);

// ---------------------------------------------------------------------------------------------
// Simulation: the timeline an order gives

// Times of one microbatch through one chunk of one stage (every stage alike, or per stage).
struct OpTimes {
  std::vector<double> forward_s, backward_s;  // per stage (size p)
  double transfer_s = 0;                      // stage to stage, each way, per microbatch
};

struct Span {
  Op op;
  double start = 0, end = 0;
};
struct Timeline {
  std::vector<std::vector<Span>> stages;  // per stage, in its order
  double makespan_s = 0;
  double busy_s = 0;                // sum of all compute spans
  double bubble = 0;                // 1 - busy / (p x makespan)
  std::vector<int> peak_in_flight;  // per stage: most microbatch-chunks forwarded, not yet back
  // Measured runs only: per stage, each send (its op, from enqueue-ready to done) and each
  // receive (from the data's first possible move to its arrival).
  std::vector<std::vector<Span>> sends, recvs;
};

// Runs the orders: an operation starts when its stage is free and its input has arrived (a
// forward after the same microbatch's forward on the previous stage, or on the last stage of the
// previous chunk, plus transfer_s; a backward after its forward and after the same microbatch's
// backward downstream plus transfer_s). Interleaved chunks go around the ring: chunk c of stage
// p-1 feeds chunk c+1 of stage 0. InputError on an order that deadlocks or on sizes that do not
// match.
Timeline simulate(Schedule s, int p, int m, int v, const OpTimes& times);

// The bubble this schedule would have with every operation of a stage taking that stage's mean
// forward / backward time in `measured` (its spans) and each hop's transfer `transfer_s`: with
// free transfers, the part of a measured bubble that unequal stages explain (the textbook theory
// assumes equal ones); with the measured mean hop, also what the transfers on the schedule's
// critical path explain (1F1B's steady state has no slack between neighbours: each hop counts
// once a microbatch, where GPipe overlaps them). The rest is waiting (kernels competing for
// SMs, streams). 0 for one stage; InputError when a stage of the timeline lacks forward or
// backward spans, or transfer_s < 0.
double stage_time_bubble(const Timeline& measured, Schedule s, int p, int m, int v,
                         double transfer_s = 0);

// What a measured step recorded for one operation of a stage's order, in seconds from the
// stage's start of the step (-1: not recorded: no receive, no send): when its inputs were
// queued (ready), when the compute stream could use what it received (usable) and was done
// (end), the receive's begin and end, the send's begin and end.
struct OpMarks {
  double ready = -1, usable = -1, end = -1;
  double recv_begin = -1, recv_end = -1, send_begin = -1, send_end = -1;
};
// The timeline of a measured training step from every stage's marks (marks[stage][i] for
// operation i of stage_order(s, p, m, v, stage)): compute spans from usable to end, each send,
// and each receive, which over NCCL spans from the later of its send's begin and its own
// posting to its arrival and over the copy engines (`copy_engines`) is the sender's peer copy.
// Also the transfers' total time, the part of it a receiving stage stood waiting (from the
// later of ready and the transfer's begin to the arrival) and the hops. InputError when the
// marks do not match the orders.
struct TransferTotals {
  double transfer_s = 0, exposed_s = 0;
  int hops = 0;
};
Timeline measured_timeline(Schedule s, int p, int m, int v,
                           const std::vector<std::vector<OpMarks>>& marks, bool copy_engines,
                           TransferTotals& totals);

// ---------------------------------------------------------------------------------------------
// Stages

// balance_stages: the pipeline split of gpubench/parallel/layout.hpp.
using parallel::balance_stages;

// What the parts of a stage cost for one sequence of seq_len tokens: a decoder layer, the
// embedding (on the first stage) and the final norm and LM head (on the last). Inference: a
// prefill; training: a forward and a backward. Seconds when measured on a GPU, else FLOPs.
struct StageCosts {
  double layer = 0, embed = 0, head = 0;
  // Of `layer`, its attention half (see stage_blocks_from_costs); the rest is its MLP half.
  // 0: not known.
  double attention = 0;
  bool measured = false;
  // "measured: layer 2.100 ms (attention half 0.700 ms), embedding 0.010 ms, head 1.300 ms (one
  // sequence)", or "by FLOPs: head 0.65 of a layer, attention half 0.33".
  std::string describe() const;
};
// Layers per stage: balance_stages over `layers` layers of c.layer each, c.embed on the first
// stage and c.head on the last.
std::vector<int> stages_from_costs(const StageCosts& c, int layers, int p);
// Half-layers ("blocks"): decoder layer l is block 2l, its attention half (input norm, qkv,
// attention, output projection, residual), then block 2l + 1, its MLP half (post-attention norm,
// MLP, residual). What flows between any two blocks is the residual stream, [tokens, hidden]: a
// stage boundary inside a layer sends what one between layers does, and lets the stages even
// out the LM head's work on the last one.
// Blocks per stage: balance_stages over 2 x layers blocks costing c.attention and c.layer -
// c.attention by turns, c.embed on the first stage and c.head on the last; whole layers (an
// even count each) when c.attention is not inside (0, c.layer).
std::vector<int> stage_blocks_from_costs(const StageCosts& c, int layers, int p);
// Blocks per stage from whole layers per stage (twice each).
std::vector<int> blocks_of_layers(std::vector<int> layers);
// Layers per stage from blocks per stage: "16.5/15.5".
std::string stage_layers_text(const std::vector<int>& blocks);
// The costs every rank of `group` splits by: `measure` run on rank 0 only, its layer, its
// attention half, embedding and head broadcast to the others. Every rank calls it, inside
// group.run().
StageCosts agreed_stage_costs(RankGroup& group, int rank,
                              const std::function<StageCosts()>& measure);
// agreed_memory_check and kMemoryReserve: gpubench/parallel/layout.hpp.
using parallel::agreed_memory_check;
using parallel::kMemoryReserve;

// ---------------------------------------------------------------------------------------------
// A training stage's work (training.cpp): what the GPU runner (train_run.cpp) runs for one
// microbatch and what its measurements are compared with

// Linear, layer_linears, StageWork, stage_work, stage_work_blocks, SavedRow and saved_row: the
// training cost model of gpubench/model/training.hpp.
using model::layer_linears;
using model::Linear;
using model::saved_row;
using model::SavedRow;
using model::stage_work;
using model::stage_work_blocks;
using model::StageWork;
// What the stages of s compute on.
model::TrainShape train_shape(const Settings& s);

// Peak saved activations of a stage under a schedule: the most microbatch-chunks in flight
// (Timeline::peak_in_flight) times one microbatch's saved bytes. GPipe holds all m, 1F1B at most
// p - stage: the bound is 1F1B <= (p / m) x GPipe (+10%).
std::uint64_t peak_saved_bytes(const StageWork& w, int in_flight);

// ---------------------------------------------------------------------------------------------
// Inference on the GPUs (inference.cpp)

// Decoder layers per stage for inference: balance_stages over equal layers, the final norm and
// LM head (last positions) on the last stage.
std::vector<int> inference_stage_layers(const Settings& s, int p);
// The FLOPs behind it: a layer's prefill of one sequence, the final norm and the LM head for its
// last position, no embedding (a lookup).
StageCosts inference_flop_costs(const Settings& s);
// The same parts timed on `device` (CUDA events around every operation of a 2-layer engine's
// prefill of one sequence, the median of 5): what run_inference balances its stages by.
StageCosts measure_inference_costs(const Settings& s, int device, cudaStream_t stream);

// One measured pipeline: s.batch prompts of s.seq_len tokens in m microbatches over p stages.
struct InferenceOutcome {
  int p = 1, m = 1;
  std::int64_t micro_sequences = 0;
  std::vector<int> stage_layers;
  std::string status = "ok", note;
  Measurement step;   // the whole batch, the slowest stage per iteration
  Timeline timeline;  // one more step's forward spans per stage (from each stage's start)
  double bubble_theory = 0;
  double transfer_s = 0;             // that step's send spans summed over the stages
  double transfer_bytes = 0;         // one microbatch's hidden states, each hop
  double check_error = 0;            // the last stage's logits against the whole model's
  std::uint64_t memory_per_gpu = 0;  // rank 0's engine
  // Decode after the prefill: one token for every sequence at context seq_len, microbatch by
  // microbatch through the stages (each microbatch's own KV cache rows).
  Measurement decode;
  double decode_check_error = 0;
  StageCosts balance;  // what the stages were balanced by
};
// The whole model's logits per (sequences, seq_len, microbatch), made once on the first GPU.
using ReferenceKey = std::tuple<std::int64_t, std::int64_t, int>;
using ReferenceLogits = std::map<ReferenceKey, std::vector<double>>;
// Under mpirun/srun the reference is made in rank 0's process only: every rank of `group`
// (all calling it) gets rank 0's `keys`, `elems` values each, into its process's `reference`.
// Nothing to do in one process, where every rank reads the same map.
void share_reference(RankGroup& group, int rank, ReferenceLogits& reference,
                     const std::vector<ReferenceKey>& keys, std::size_t elems);

// For every microbatch count of s: the stages' engines (weights of their layers' global
// indices), one checked step (every microbatch's logits against the whole model), the timed
// steps, and one step with events for the timeline and the measured bubble. Each stage runs its
// microbatches in order: receive the hidden states from the stage before (ncclRecv into
// input_hidden()), prefill its layers, send hidden() to the stage after. Returns rank 0's
// outcomes. The group has p ranks.
std::vector<InferenceOutcome> run_inference(Context& ctx, const Settings& s, int p,
                                            RankGroup& group, ReferenceLogits& reference);

// ---------------------------------------------------------------------------------------------
// Training on the GPUs (train_run.cpp)

// Half-layer blocks per stage for training (see stage_blocks_from_costs): balanced over
// `costs` (the LM head's forward and backward on the last stage), whole layers unless
// s.half_layers (then also between a layer's halves); interleaved: 2 x layers / p each (v equal
// chunks of whole layers).
std::vector<int> training_stage_blocks(const Settings& s, int p, Schedule sch,
                                       const StageCosts& costs);
// The same by training_flop_costs.
std::vector<int> training_stage_blocks(const Settings& s, int p, Schedule sch);
// A layer's forward and backward FLOPs for one sequence, its attention half's, the LM head's
// (over every position), no embedding.
StageCosts training_flop_costs(const Settings& s);
// The same parts timed on `device`: the forward and backward of one sequence through training
// stages of embedding + 1 layer, embedding + 1 layer + head, embedding + 1.5 layers + head and
// embedding + 2 layers + head (medians of 11), the parts their differences (the attention half
// by FLOPs where its difference is lost in noise): what run_training balances its stages by.
StageCosts measure_training_costs(const Settings& s, int device, cudaStream_t stream);

// One measured training step: s.batch sequences of s.seq_len tokens in m microbatches over p
// stages in the order `schedule` gives each stage.
struct TrainingOutcome {
  Schedule schedule = Schedule::OneFOneB;
  int p = 1, m = 1, v = 1;
  std::string transport = "nccl";  // what carried the stage-to-stage transfers
  int nccl_ctas = 0;               // the CTAs NCCL transfers were held to (0: NCCL's choice)
  StageCosts balance;              // what the stages were balanced by
  std::int64_t micro_sequences = 0;
  std::vector<int> stage_blocks;  // half-layers per stage
  std::string status = "ok", note;
  Measurement step;   // the whole step, the slowest stage per iteration
  Timeline timeline;  // one more step's forward and backward spans
  double bubble_theory = 0;
  double transfer_s = 0;                      // that step's transfers, summed over the hops
  double transfer_exposed_s = 0;              // of which a receiving stage stood waiting
  int transfers = 0;                          // hops in the step, both ways
  double transfer_bytes = 0;                  // one microbatch's hidden states (or gradient)
  double transfer_alone_s = 0;                // one NCCL send/recv of those bytes alone, 0 -> 1
  double p2p_copy_s = 0;                      // one peer copy of them alone (copy engine), 0 -> 1
  std::vector<std::uint64_t> peak_saved;      // per stage: the saved activations' measured peak
  std::vector<std::uint64_t> expected_saved;  // per stage: slabs in flight along its order
  double check_error = 0;                     // the gradient GEMM checks' worst error / tolerance
  std::uint64_t memory_per_gpu = 0;           // weights, gradients, scratch and peak saved
  double flops = 0;                           // the step's FLOPs over every stage
};

// For every microbatch count of s: each stage's weights (its layers' global indices), one
// checked step (the gradient GEMMs of the input linear, qkv or the MLP's up, of the first block
// of each stage's last backward against a reference, weight gradients finite, the last
// transfer each way equal on both sides), the timed steps, and one step with
// events for the timeline, the measured bubble, the transfers and the activation peak (the
// saved activations come from a memory pool whose high-water mark is read). Returns rank 0's
// outcomes. The group has p ranks.
std::vector<TrainingOutcome> run_training(Context& ctx, const Settings& s, int p, Schedule sch,
                                          RankGroup& group);

// ---------------------------------------------------------------------------------------------
// Parallel layouts

// Layout, every_layout and parse_layouts: gpubench/parallel/layout.hpp.
using parallel::Layout;
using parallel::parse_layouts;

// The layouts' inference (layout_run.cpp): s.seq_len-token prompts, prefill, `batch` of them
// split over dp replicas, each replica's share in microbatches through its pp stages, each
// stage split over tp ranks (Megatron, NCCL all-reduces).

// Microbatches a layout runs: 1 without pipeline stages, else the largest of s.microbatches
// that divides a replica's share of the batch.
int layout_microbatches(const Settings& s, const Layout& l, int batch);

struct LayoutOutcome {
  Layout layout;
  int batch = 0, m = 1;
  std::string status = "ok", note;
  Measurement step;  // the whole batch, the slowest rank per iteration
  double check_error = 0;
  std::uint64_t memory_per_gpu = 0;  // the largest engine
};
// One layout on `group` (layout.gpus() ranks: threads of one process, or processes under MPI):
// every rank's engine (its stage's layers, its tensor shard), microbatch 0 checked on every
// replica's last stage against the whole model's logits (kept in `reference`), then the step
// timed. A batch the replicas do not split is skipped with the reason.
LayoutOutcome run_layout(Context& ctx, const Settings& s, const Layout& l, int batch,
                         RankGroup& group, ReferenceLogits& reference);

// ---------------------------------------------------------------------------------------------
// Trace

// A Chrome trace (chrome://tracing, Perfetto) of a timeline: one process, one track (thread)
// per stage named "stage s", a complete event per span ("F3" / "B3", chunk suffix ".c1" when
// interleaved) in microseconds, plus the measured send and receive spans of t.sends / t.recvs
// on a transfer track per stage, or (simulated timelines) spans of transfer_s after each
// cross-stage hop.
nlohmann::ordered_json chrome_trace(const Timeline& t, Schedule s, double transfer_s,
                                    const std::string& title);

}  // namespace gpubench::pp
