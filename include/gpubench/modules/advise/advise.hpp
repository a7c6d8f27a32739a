#pragma once
// `gpubench advise`: which layout of data, tensor and pipeline parallelism to run a model on
// with these GPUs. Every layout the model splits into and that fits memory is predicted from
// building blocks measured here (each tensor-parallel shard's prefill and decode steps timed on
// one GPU without communication, the all-reduces and stage-to-stage sends at the sizes the
// layouts move), ranked, and the best ones and the one-GPU baseline are run end to end (prefill,
// then every output token) with the real engine and checked, measured beside predicted.
//
// What a layout runs (the prediction and the runs share it): each of the dp replicas serves its
// own share of the sequences (latency: one sequence each); a replica's sequences go through its
// pp stages in m microbatches (the largest divisor of its sequences that is at most pp), each
// stage's layers split over its tp ranks (Megatron; all-reduces of up to 256 KiB through the
// one-shot kernel where the GPUs allow, as tp runs them, the others over NCCL). Prefill runs the
// prompts' microbatches through the stages one after the other; then every step a microbatch's next
// tokens go through the stages, and the last stage hands the step's next tokens back to the
// first on a ring of their own, so a microbatch's step starts only when its previous one ended.
// A tensor-parallel layout is also a candidate with its prefill overlapped (Plan::overlap): the
// microbatch's rows in kOverlapChunks chunks, each chunk's all-reduces through the copy engines
// (parallel::CopyEngineCollectives, no SMs taken) behind the next chunk's compute, as
// `tp --overlap --collectives copy-engine` runs it.
//
// Training (--workload train): every GPU trains --train-batch sequences a step as a data-parallel
// replica under each strategy of parallel/data_parallel.hpp (ddp, zero1, zero2, fsdp), or one
// GPU alone. A step is predicted from a forward and a backward of a replica's batch timed on one
// GPU (model::TrainStage), AdamW's time a parameter, and the buckets' collectives, played out on
// a compute and a communication stream as the replica runs them; the layouts are run by `dp`
// itself (through the core, checked there against one GPU's step over the whole batch). Tensor
// and pipeline parallelism are not candidates for training: no runner trains them here.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpubench/core/context.hpp"
#include "gpubench/core/ranks.hpp"
#include "gpubench/model/presets.hpp"
#include "gpubench/model/training.hpp"
#include "gpubench/model/transformer.hpp"
#include "gpubench/parallel/data_parallel.hpp"
#include "gpubench/parallel/layout.hpp"

namespace gpubench::advise {

using parallel::Layout;

// ---------------------------------------------------------------------------------------------
// Options and settings (settings.cpp)

enum class Workload { Latency, Throughput, Train };
const char* to_string(Workload w);  // "latency" / "throughput" / "train"
std::string sequences(std::int64_t n);  // "1 sequence", "4 sequences"

// As given on the command line or in the config (long option names = INI keys); empty lists
// mean "the default for this mode".
struct Options {
  std::string model = "llama-2-7b";
  std::string model_config;     // a HuggingFace config.json instead of a preset
  std::string workload;         // latency, throughput, train (default all three)
  std::int64_t prompt = 0;      // prompt tokens a sequence; 0: 1024 (quick 512)
  std::int64_t output_len = 0;  // tokens generated a sequence; 0: 128 (quick 32)
  std::string batch_sizes;      // throughput: sequences on the node; default 8,32 (quick 16)
  std::int64_t train_batch = 0;  // train: sequences a GPU trains a step; 0: 4 (quick 1)
  std::int64_t seq_len = 0;      // train: tokens a sequence; 0: 4096 (quick 1024)
  double memory = 0;            // GiB a GPU may hold; 0: what each GPU has free
  int layers = 0;               // > 0: only this many decoder layers
  std::string dtype = "bf16";
  std::optional<int> top;  // layouts run besides the one-GPU baseline, per workload and batch;
                           // unset: 3 (quick 1)
  std::string layouts;     // generation's layouts over all the GPUs ("tp=4,pp=4"); "": every one
  std::string from;      // an earlier advise run whose building blocks are used
  double timeout = 600;  // seconds without progress before a stuck run ends
  std::string small_collectives = "auto";  // tensor-parallel all-reduces of up to 256 KiB
};

struct Settings {
  model::ModelConfig model;
  std::string model_preset, model_config;  // as given: training runs `dp` with the same model
  int layers = 0;  // decoder layers run
  std::vector<Workload> workloads;
  std::int64_t prompt = 1024, output_len = 128;
  std::vector<std::int64_t> batch_sizes;  // throughput's, ascending, unique
  std::int64_t train_batch = 4, seq_len = 4096;
  std::uint64_t bucket_bytes = 25'000'000;  // training's gradient buckets (dp's default)
  std::uint64_t memory_bytes = 0;         // 0: each GPU's free memory
  ActDtype dtype = ActDtype::BF16;
  int elem_bytes = 2;
  int top = 3;
  // Generation's layouts to consider, as given (parallel::parse_layouts over the GPUs of the run;
  // the one-GPU baseline beside them); "": every layout.
  std::string layouts;
  std::string from;  // "" or the run (folder or report) whose blocks replace the calibration
  double timeout_s = 600;
  // Tensor-parallel all-reduces of up to parallel::OneShotCollectives::kMaxBytes (decode's), as
  // asked: "auto" or "one-shot" (through the one-shot kernel where the GPUs allow) or "nccl";
  // and what the calibration and the runs take, decided on the GPUs before anything is measured
  // (asked for, and peer access between every pair of the GPUs; a group of more than
  // kOneShotMaxRanks runs over NCCL, parallel::OneShotGroup, in the calibration as in the runs):
  // "one-shot" or "nccl" ("" until then, and on one GPU: NCCL's).
  std::string small_collectives = "auto";
  std::string small_all_reduces;
  bool one_shot() const { return small_all_reduces == "one-shot"; }
  std::vector<std::string> notes;  // what the defaults changed, for the report's warnings
  model::TrainShape train_shape() const { return {model, seq_len, dtype}; }
  nlohmann::ordered_json to_json() const;
};

// Applies the mode's defaults and checks every value; throws InputError("--option: why") with
// one line: an unknown workload, a prompt < 1 or an output length < 2, either past 1 << 20, batch
// sizes or --train-batch outside 1..4096, --seq-len outside 1..1 << 20, --memory < 0, --top
// outside 0..16, --timeout <= 0, --small-collectives other than auto, nccl or one-shot.
Settings resolve_settings(const Options& o, bool quick);

// ---------------------------------------------------------------------------------------------
// Plans: what a layout runs for a workload and batch, and what it holds (plan.cpp)

// The parts of one engine step, in seconds: a decoder layer, what the first stage adds (the
// embedding and the step's fixed cost) and what the last adds (final norm and LM head).
struct Parts {
  double layer = 0, embed = 0, head = 0;
};

// A gradient bucket of a training plan, in backward order (bucket 0 holds the LM head): its
// elements (padded for the ranks) and the compute of its units, in decoder layers (a half-layer
// by its share of the layer's FLOPs, forward and backward apart), and whether the head is one.
struct TrainBucket {
  std::int64_t elems = 0;
  double forward_layers = 0, backward_layers = 0;
  bool head = false;
};

// Overlapped prefill's chunks (tp's --overlap-chunks default).
constexpr int kOverlapChunks = 4;

struct Plan {
  Layout layout;
  bool overlap = false;  // prefill in kOverlapChunks chunks, all-reduces over the copy engines
  Workload workload = Workload::Latency;
  std::int64_t batch = 1;      // sequences on the node (latency: one per replica)
  std::int64_t sequences = 1;  // a replica's
  int m = 1;                   // microbatches a replica's sequences go in
  std::int64_t micro = 1;      // sequences a microbatch (sequences / m)
  std::vector<int> stage_layers;
  std::uint64_t memory_per_gpu = 0;  // the largest rank's engine, plus parallel::kMemoryReserve
  std::string why_not;               // "": it can run; else why not (batch split, memory)
  // Training: the data-parallel strategy, its buckets and the flat buffer's elements.
  parallel::Strategy strategy = parallel::Strategy::Ddp;
  std::vector<TrainBucket> buckets;
  std::int64_t flat = 0;
  // The layout's name, with " overlap" for an overlapped prefill and the strategy for training
  // on several GPUs ("tp=4 overlap", "dp=4 zero1").
  std::string name() const;
};

// The microbatch count m for `sequences` on pp stages: the largest divisor of sequences that is
// at most pp. InputError when either is < 1.
int microbatches(std::int64_t sequences, int pp);

// The engine options of one rank of the plan (its stage's layers, its tensor shard): room for a
// microbatch's prompt and every token generated but the last, for all of the replica's
// sequences.
model::EngineOptions rank_engine_options(const Settings& s, const Plan& p, int stage, int trank);

// The plan of layout l for a workload and node batch: the replica's sequences (a batch the dp
// replicas do not split gets why_not), microbatches, stages balanced by `parts` (balance_stages:
// equal layers, the embedding on the first stage, the head on the last), and the memory of its
// largest rank (model::engine_memory with the cuBLASLt workspace of compute capability
// cc_major; with `overlap`, the copy engines' staging too), against gpu_bytes (why_not when
// over). `overlap` where it does not apply (overlap_applies) gets why_not.
Plan make_plan(const Settings& s, const Layout& l, Workload w, std::int64_t batch,
               const Parts& parts, int cc_major, std::uint64_t gpu_bytes, bool overlap = false);

// Whether a microbatch's prefill splits into kOverlapChunks chunks on layout l (the engine's
// rule: tp > 1, and its sequences divide into the chunks, or one sequence's prompt does) whose
// all-reduces go through the copy engines (at least CopyEngineCollectives::kMinBytes each).
bool overlap_applies(const Settings& s, const Layout& l, std::int64_t micro);
// The bytes of one overlap chunk's all-reduce: a microbatch's prompt rows over the chunks.
std::uint64_t overlap_chunk_bytes(const Settings& s, std::int64_t micro);
// A copy-engine staging slot for all-reduces of up to `bytes` on `ranks`: a rank's share, with
// room for its alignment (parallel::CopyEngineGroup's max_chunk_bytes).
std::size_t copy_slot_bytes(std::uint64_t bytes, int ranks);

// What a replica of --train-batch sequences trains (a model::TrainStage of the run's layers,
// probed on a GPU before the plans): its parameters, and what its step holds besides their
// weights, gradients and optimizer state (TrainStage::replica_bytes).
struct TrainFootprint {
  std::vector<model::TrainParam> params;
  std::uint64_t rest = 0;
};

// The training plan of strategy k on `gpus` replicas (1: one GPU alone, ddp): a batch of
// gpus x train_batch sequences, the buckets of parallel::plan_params (bucket_bytes; fsdp a layer
// each) and the memory of parallel::memory_plan plus parallel::kMemoryReserve, against gpu_bytes
// (why_not when over).
Plan make_train_plan(const Settings& s, int gpus, parallel::Strategy k, const TrainFootprint& f,
                     std::uint64_t gpu_bytes);

// An attention half's share of a decoder layer's FLOPs, forward or backward, at `sequences` of
// `tokens` (model::stage_work_blocks of one half-layer over two); the MLP's is the rest.
double attention_share(const Settings& s, std::int64_t sequences, std::int64_t tokens,
                       bool forward);

// Balancing parts before anything is measured: a decode step's HBM bytes of a layer, the
// embedding row and the head (model::model_cost), which is what decode time follows.
Parts parts_by_bytes(const Settings& s);

// ---------------------------------------------------------------------------------------------
// Building blocks and the prediction (predict.cpp)

// What was measured here. Compute parts by (tp degree, sequences a step): a prefill of the
// prompt; a decode step at the first and at the last context of the generation. Collectives by
// (ranks, bytes): one NCCL all-reduce alone. Transfers by bytes: one stage-to-stage NCCL send
// and receive.
struct Blocks {
  using Key = std::pair<int, std::int64_t>;
  std::map<Key, Parts> prefill, decode_first, decode_last;
  std::map<std::pair<int, std::uint64_t>, double> all_reduce_s;
  std::map<std::uint64_t, double> transfer_s;
  // Overlapped prefill: the prefill's parts in kOverlapChunks chunks (no communication), and
  // all-reduces through the copy engines by (ranks, bytes) (eager, as a prefill runs them; under
  // CopyEngineCollectives::kMinBytes they take the small all-reduces' path). Absent from runs
  // made before overlap was advised.
  std::map<Key, Parts> prefill_overlap;
  std::map<std::pair<int, std::uint64_t>, double> copy_all_reduce_s;
  // Training (no tensor parallelism), by sequences a GPU: a replica's forward and its backward,
  // in parts (a decoder layer; the step's fixed cost with the embedding; the final norm and the
  // LM head); AdamW's seconds a parameter; NCCL's all-reduces, reduce-scatters and all-gathers of
  // the buckets by (ranks, bytes of the whole buffer), as `dp` runs them. Absent from runs made
  // before training was advised (whose bucket all-reduces, NCCL's too, were in all_reduce_s).
  std::map<std::int64_t, Parts> train_forward, train_backward;
  double adamw_s = 0;
  std::map<std::pair<int, std::uint64_t>, double> bucket_all_reduce_s, reduce_scatter_s,
      all_gather_s;
  nlohmann::ordered_json to_json() const;
  // The inverse of to_json; InputError naming what is missing or not a positive number.
  static Blocks from_json(const nlohmann::ordered_json& j);
};

// The blocks of an earlier advise run (a folder or report, core/runs.hpp's read_run), for
// --from. InputError "--from: ..." when it holds no advise report or no blocks, or was run with
// another model, layer count, dtype, prompt or output length than `s`.
Blocks blocks_from_run(const std::string& path, const Settings& s);

// What the blocks must hold for a plan: its compute keys, all-reduce sizes and transfer sizes.
struct Needs {
  std::vector<Blocks::Key> compute;
  std::vector<std::pair<int, std::uint64_t>> all_reduces;
  std::vector<std::uint64_t> transfers;
  std::vector<Blocks::Key> overlap_compute;  // of overlapped plans
  std::vector<std::pair<int, std::uint64_t>> copy_all_reduces;
  std::vector<std::int64_t> train;  // sequences a GPU
  std::vector<std::pair<int, std::uint64_t>> bucket_all_reduces, reduce_scatters, all_gathers;
  bool adamw = false;
};
Needs needs_of(const Settings& s, const Plan& p);
// The union of several plans' needs, sorted and unique.
Needs merge(const std::vector<Needs>& all);

struct Prediction {
  double ttft_s = 0;        // the replica's whole prompt batch through prefill: its first tokens
  double tpot_s = 0;        // then one token a sequence every tpot_s
  double e2e_s = 0;         // ttft + (output_len - 1) x tpot
  double tokens_per_s = 0;  // generated tokens of the node's batch / e2e
  // The busiest rank's time over the generation: computing, in tensor-parallel all-reduces,
  // and waiting (e2e - the two: pipeline bubbles and stage-to-stage transfers).
  double compute_s = 0, comm_s = 0, wait_s = 0;
  // What one GPU of the busiest stage does, for the rooflines: a decode step's HBM bytes (its
  // share of the weights and of the KV cache at the mean context, model::layer_ops over tp; the
  // head and embedding whole) in decode_compute_s, and a microbatch's prefill FLOPs in
  // prefill_compute_s (both without the all-reduces).
  double decode_bytes = 0, decode_compute_s = 0, prefill_flops = 0, prefill_compute_s = 0;
  // Training: e2e_s is a step, compute_s its forward and backward, comm_s the communication they
  // do not hide, optimizer_s AdamW's step; flops a GPU's in a step.
  double optimizer_s = 0, flops = 0;
};
// The plan's generation from the blocks. Per stage k (its layers L_k, the parts of its tp
// degree and microbatch): prefill F_k = L_k layer + embed (first) + head (last) + 2 L_k
// all-reduces of micro x prompt x hidden; decode D_k the same at the mean of the first and last
// contexts, with all-reduces of micro x hidden. The stages' jobs are played out as the engine
// issues them (play_pipeline, with the transfers X of the hidden states and X_tokens); TPOT is
// (whole - TTFT) / (output - 1). An overlapped plan's F_k is overlapped_prefill_s of its layers
// (the chunked parts, the copy engines' all-reduce of a chunk) plus its ends. InputError when a
// block the plan needs is missing. A training plan: predict_train.
Prediction predict(const Settings& s, const Plan& p, const Blocks& b);

// A generation through pp stages as the engine issues it: every stage runs m prefill jobs, then
// `steps` x m decode jobs, in that order; f[k] and d[k] are stage k's compute of a prefill and a
// decode job. A stage's stream reaches a job once its previous job is computed and (all but the
// last stage) that job's hidden states have left, the one buffer they share being written next;
// then stage k > 0 receives the job's hidden states, and the first stage, in a decode job, the
// tokens the last stage sent back for that microbatch (after its previous job of it). A transfer
// begins when the sender has computed the job and the receiver's stream has reached it, and
// takes x_pre or x_dec (the hidden states), x_tok (the tokens). Returns the last stage's end of
// its last prefill (TTFT) and of its last job (the whole generation). std::invalid_argument on
// no stages, f and d of different sizes, m < 1 or steps < 0.
struct PipelineTimes {
  double ttft_s = 0, e2e_s = 0;
};
PipelineTimes play_pipeline(const std::vector<double>& f, const std::vector<double>& d,
                            double x_pre, double x_dec, double x_tok, int m, std::int64_t steps);

// The layers of an overlapped prefill as the engine issues them (Transformer::overlapped_layers):
// per layer, every chunk's attention half on the compute stream, each followed by its all-reduce
// on the communication stream; then every chunk's MLP half once its attention all-reduce is in,
// each followed by its own; a chunk's next layer waits for its MLP all-reduce. A half takes its
// share of layer_s / chunks (attention_share for attention), an all-reduce all_reduce_s. Returns
// when the last all-reduce has ended and the compute stream is done.
double overlapped_prefill_s(int layers, double layer_s, double attention_share, double all_reduce_s,
                            int chunks);

// A training step of plan p: the forward (F: its units' layers x a layer, the fixed part, the
// head) then the backward, unit after unit on the compute stream, each bucket's collective
// (ddp all-reduce, else reduce-scatter) queued on the communication stream as its units' backward
// ends; the step waits for both, then AdamW over the rank's parameters (ddp all, else 1 / N) and,
// for zero1/zero2, the buckets' all-gathers. fsdp gathers each bucket before its forward (the
// next one prefetched into a second slot, freed when its forward ends) and again before its
// backward (but the last two of the forward), the next prefetched ahead of the reduce-scatter.
// One GPU runs no collective.
Prediction predict_train(const Settings& s, const Plan& p, const Blocks& b);

// A layout's plain and overlapped prefill plans are one choice: of inference plans ranked best
// predicted first, the index of the plan of ranked[i]'s layout ranked before it (the twin that
// keeps the layout's place), or -1 when ranked[i] is its layout's first. For latency a layout's
// replica (tp and pp) is what counts: its dp replicas each run the one sequence, so dp=4 is the
// one-GPU baseline's twin. The baseline and training plans are never twins (each data-parallel
// strategy is a choice of its own).
int better_twin(const std::vector<Plan>& ranked, std::size_t i);

// 100 x (predicted - measured) / measured; InputError when measured <= 0.
double error_pct(double predicted, double measured);

// One sentence on the plan's prediction against the one-GPU baseline's and what its busiest
// GPU's time goes to ("Predicted 2.61 ms a token and 9.8 ms to the first against 7.90 and 30.1
// on one GPU; its busiest GPU computes 81% of the time, spends 15% in tensor-parallel
// all-reduces and 4% waiting on other stages."); without a baseline (e2e_s 0: one GPU cannot
// hold the model) the comparison is left out. A training plan's says what its step goes to:
// compute, AdamW, communication not hidden, and its TFLOP/s against the dense peak.
// With the GPU's HBM bandwidth (GB/s) and dense peak (TFLOP/s) known (> 0), a second sentence
// on the rooflines: "A decode step reads 3.37 GB on its busiest GPU in 1.21 ms (2.79 TB/s, 83%
// of the HBM peak); prefill computes at 612 TFLOP/s (62% of the dense peak)."
std::string explain(const Plan& p, const Prediction& pred, const Prediction& baseline,
                    double hbm_GBps = 0, double peak_tflops = 0);

// ---------------------------------------------------------------------------------------------
// On the GPUs

// The blocks `needs` asks for (calibrate.cpp): compute parts on `device` (engines of 2 and 4
// layers with and without the head, tp shard 0 of each degree, no communication; prefill eager,
// also in kOverlapChunks chunks for needs.overlap_compute, decode steps as CUDA graphs),
// all-reduces on the first t GPUs of `ctx` (as the engines make them; the copy engines' eagerly),
// transfers between the first two. Compute keys whose engines do not fit are left out (their
// plans are dropped).
// The layer counts (a, b) of the two engines, or training stages, a step's parts come from: b up
// to 8 of the model's layers, a a quarter of b (at least 1).
std::pair<int, int> calibration_layers(int model_layers);
// The parts of a step from three timings: ta of a layers with the head, tb of b layers with it,
// tc of a layers without. The head is ta - tc; the fixed part (the embedding and the step's own
// cost) what ta takes beyond a layers, a layer by the two sizes' difference; a layer is the rest
// of tb over b, so that the larger step is reproduced exactly (a short step can run at higher
// clocks than a long one, which would make the difference overstate a layer). None negative.
Parts parts_of_steps(int a, int b, double ta, double tb, double tc);

// Training's: a replica's forward and backward at each batch of needs.train (train_parts), AdamW,
// and reduce-scatters and all-gathers like the all-reduces.
Blocks calibrate(Context& ctx, const Settings& s, const Needs& needs);

// One generation measured and checked (generate.cpp).
struct Measured {
  std::string status = "ok", note;
  double ttft_s = 0, tpot_s = 0, e2e_s = 0, tokens_per_s = 0;
  double check_error = 0;  // the last step's logits against the reference, relative L2
  std::string checked_by;  // what the logits were held against
  // A model too large for one GPU: the layout cut to `cut_layers` layers (the most whose
  // one-GPU reference fits), its last logits against that reference (0: not run).
  int cut_layers = 0;
  double cut_error = 0;
  std::uint64_t memory_per_gpu = 0;
};
// A generation's token ids: the prompts [m][micro][prompt] and the fed tokens [steps][m][micro],
// seeded per sequence (its prompt, then its fed tokens), so that a sequence's tokens are the same
// whatever the microbatches: a microbatch's reference serves every layout of its microbatch size.
struct Tokens {
  std::vector<std::int32_t> prompts, steps;
};
Tokens token_ids(const Settings& s, const Plan& p);

// Reference logits of the last step of a replica's sequences (in order, vocab values each), by
// (a replica's sequences, prompt, output_len), so that layouts splitting them into other
// microbatches are held against one another (token_ids gives a sequence the same tokens in
// every layout): a prefill of each microbatch's whole stream (prompt and the fed tokens) on one
// GPU where the model fits (in its free memory, and in --memory when given), made over a
// layout's where one fits later; else the first layout that ran through (replica 0's). A model
// that does not fit is also checked cut down: every layout's generation with the most layers
// whose one-GPU reference fits (at least one a stage), against that reference.
struct Reference {
  std::vector<double> logits;
  std::string source;
  bool from_layout = false;
};
using References = std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, Reference>;
// Runs plan p on `group` (p.layout.gpus() ranks, threads of one process): every rank's engine,
// one generation checked (every microbatch's last logits on every replica's last stage against
// the reference, the worst one's error; cut down first when the model does not fit one GPU; the
// replicas run the same sequences), then the generation timed
// (median of 3, quick 1): TTFT on the last stages, the whole on every rank (the slowest).
Measured run_generation(Context& ctx, const Settings& s, const Plan& p, RankGroup& group,
                        References& refs);

// ---------------------------------------------------------------------------------------------
// Training on the GPUs (train.cpp)

// A replica's footprint: a TrainStage of the run's layers over --train-batch sequences, probed
// (not built) on `device`.
TrainFootprint train_footprint(const Settings& s, int device);

// On `device`: a replica's forward and backward over `seqs` sequences a GPU (TrainStages of 2 and
// 8 layers with the head and 2 without, as the inference parts are found) into
// blocks.train_forward / train_backward, and AdamW over 64M parameters into blocks.adamw_s. A
// replica that does not fit is left out (its plans are dropped).
void train_parts(Context& ctx, const Settings& s, const std::vector<std::int64_t>& seqs, bool adamw,
                 int device, Blocks& blocks);

// Plan p run by the `dp` module through the core (its strategy on p's GPUs, the run's model,
// layers, batch and sequence length): its step checked there against one GPU's step over the
// whole batch, then timed; dp's row gives the status, the note and the figures (e2e_s a step).
Measured run_training(Context& ctx, const Settings& s, const Plan& p);

}  // namespace gpubench::advise
