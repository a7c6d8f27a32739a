#pragma once
// The synthetic transformer engine: a decoder-only model with the exact shapes of a ModelConfig
// and random non-zero weights made on the GPU from a seed (fill_weight: a value depends only on
// the seed, the tensor and its full row and column), run as prefill (a prompt per sequence,
// filling the KV cache) and decode (one token per sequence over the cache). GEMMs go through the
// shared cuBLASLt wrapper (core/gemm.hpp), the rest through kernels/transformer.cuh and
// kernels/attention.cuh. The same engine carries seqlen, tp and pp.
//
// Layouts, row-major: hidden states [batch * tokens, hidden]; a linear layer's weight is
// [out_features, in_features] and computes Y = X W^T; the fused qkv output is [rows, q + 2 kv]
// (q first); the fused gate/up output is [rows, 2 * intermediate] (gate first); KV caches are
// [batch, max_context, kv_dim] per layer.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/gemm.hpp"
#include "gpubench/kernels/attention.cuh"
#include "gpubench/kernels/skinny_gemm.cuh"
#include "gpubench/kernels/transformer.cuh"
#include "gpubench/model/cost.hpp"
#include "gpubench/model/presets.hpp"
#include "gpubench/model/shard.hpp"

namespace gpubench::model {

// Prefill attention: cuDNN's fused flash attention where it loads and accepts the shapes (Auto
// falls back to gpubench's own kernel, Cudnn refuses to), or always the own kernel.
enum class AttentionPath { Auto, Cudnn, Own };
const char* to_string(AttentionPath p);
// "auto" | "cudnn" | "own"; InputError naming --attention otherwise.
AttentionPath parse_attention_path(const std::string& text);

// Prefill attention through the chosen path: cuDNN's fused attention for the shapes it accepts
// (plans cached per shape), else gpubench's own flash-attention kernel.
class AttentionRunner {
 public:
  AttentionRunner(int device, AttentionPath path);
  ~AttentionRunner();
  AttentionRunner(const AttentionRunner&) = delete;
  AttentionRunner& operator=(const AttentionRunner&) = delete;
  // Readies `a` (plans, workspace) and returns the path that will run it: "cudnn" or "own";
  // "" when none may (cuDNN asked for and unusable), note() then says why. Not during capture.
  std::string prepare(const AttentionArgs& a);
  // Runs `a` on the path prepare() chose for its shape (prepare() first when it is new).
  void run(const AttentionArgs& a, cudaStream_t stream);
  // Why cuDNN did not run the last prepared shape ("" when it did or was not asked for).
  const std::string& note() const noexcept { return note_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  AttentionPath path_;
  std::string note_;
};

struct EngineOptions {
  ActDtype dtype = ActDtype::BF16;
  int layers = 0;          // decoder layers built and run (0: all of the model's)
  int max_batch = 1;       // sequences per step
  // Sequences the KV cache holds (0: max_batch; else at least max_batch). A pipeline stage runs
  // microbatches of max_batch sequences, each in its own cache rows (a step's seq0), so its
  // cache holds all of them while its activations are sized for one step.
  int cache_batch = 0;
  int max_tokens = 2048;   // prompt tokens per sequence in one prefill
  int max_context = 2048;  // positions the KV cache holds per sequence
  std::uint64_t seed = 1;  // weights
  AttentionPath attention = AttentionPath::Auto;
  // Tensor parallelism, Megatron style: this engine is rank tp_rank of tp_size. It holds its
  // rank's shards (model::shard_shape) of the attention heads, KV heads and MLP columns, each the
  // exact slice of the one-GPU model's seeded weight; embeddings, norms and the LM head are
  // replicated. With tp_size > 1 the row-parallel outputs (attention out, MLP down) are summed
  // over the ranks by the TpCollectives given to set_collectives(), their biases added after.
  int tp_size = 1;
  int tp_rank = 0;
  // Megatron sequence parallelism for prefill (tp_size > 1): the residual stream and the norms
  // are split by rows (rank r holds rows r*R/t .. of the R = batch x tokens), the row-parallel
  // outputs are reduce-scattered instead of all-reduced, and each norm's output is all-gathered
  // before the next column-parallel GEMM. R must divide by tp_size. Decode keeps the all-reduces.
  bool sequence_parallel = false;
  // Prefill under tensor parallelism without sequence parallelism: the step's rows in this many
  // chunks (whole sequences when the batch divides into them, else, at batch 1, prompt slices
  // that divide the prompt), each chunk's all-reduces on a second, high-priority stream while
  // the next chunk computes, so that communication hides behind the GEMMs. A chunk's attention
  // reads the earlier chunks' keys from the cache, so the result equals the unchunked step's.
  // 1 (or a step that does not divide): no overlap. At most kMaxOverlapChunks.
  int overlap_chunks = 1;
  // Pipeline parallelism: this engine is one stage, decoder layers first_layer ..
  // first_layer + layers - 1 (layers 0: to the model's last). `embed`: it starts from token ids
  // (the embedding); otherwise a step starts from the hidden states written to input_hidden().
  // `head`: it ends with the final norm and the LM head (logits); otherwise a step ends with the
  // residual stream in hidden(). Weights are the same seeded values as the one-GPU model's layers
  // of the same global index.
  int first_layer = 0;
  bool embed = true;
  bool head = true;
  // Steps of at most skinny_fusion_max_rows() rows (decode at small batch) of an RMSNorm model
  // that tensor parallelism does not split: the norms, the residual adds and the MLP's
  // activation run inside the skinny GEMVs next to them (kernels/skinny_gemm.cuh, SkinnyFusion)
  // instead of as kernels of their own. false: one kernel per operation (for comparisons).
  bool fuse_small_steps = true;
  // Elements of zeros after each row of a decoder layer's four weight matrices (qkv, out,
  // gate|up, down), never read: cuBLASLt and the skinny GEMVs take the row pitch. Rows of 4096
  // bf16 values all start at the same offset of HBM's address interleave, and a decode GEMV's
  // warps, all at the same step of their rows, then load from the same channels; 256 bytes
  // after each row spread them (kWeightRowPad; docs/DECISIONS.md).
  // A multiple of 8 (0: packed rows).
  int weight_row_pad = kWeightRowPad;
  static constexpr int kWeightRowPad = 128;
  // Elements of zeros after each position's row of the K and V caches (a row holds this rank's
  // KV heads), never read: every attention path takes the row pitch. A multiple of 8; 0: unlike
  // the weights' rows, a decode step gains nothing from padded cache rows (docs/DECISIONS.md).
  int kv_row_pad = kKvRowPad;
  static constexpr int kKvRowPad = 0;
};

// The row pad the engine uses with these options: weight_row_pad. InputError when it is
// negative or not a multiple of 8.
int weight_row_pad(const EngineOptions& options);
// The same for the caches' rows: kv_row_pad.
int kv_row_pad(const EngineOptions& options);
// The sequences the KV cache holds: cache_batch, or max_batch when it is 0.
int cache_sequences(const EngineOptions& options);

// Sums a buffer over the tensor-parallel ranks in place, enqueued on `stream` (an NCCL
// all-reduce for `gpubench tp`). Every rank calls it at the same points of a step.
class TpCollectives {
 public:
  virtual ~TpCollectives() = default;
  virtual void all_reduce(void* data, std::int64_t elems, ActDtype dtype, cudaStream_t stream) = 0;
  // In place over t chunks of `chunk` elements: afterwards chunk r of rank r holds the sum of
  // every rank's chunk r (the other chunks are left undefined).
  virtual void reduce_scatter(void* data, std::int64_t chunk, ActDtype dtype,
                              cudaStream_t stream) = 0;
  // In place over t chunks of `chunk` elements: rank r's chunk r is copied to chunk r of every
  // rank.
  virtual void all_gather(void* data, std::int64_t chunk, ActDtype dtype, cudaStream_t stream) = 0;
};

// Called around every operation of a step (for per-op CUDA-event timing); `layer` is -1 outside
// the decoder layers.
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  virtual void begin(const char* op, int layer, cudaStream_t stream) = 0;
  virtual void end(const char* op, int layer, cudaStream_t stream) = 0;
};

// Bytes the engine holds on the GPU, by purpose.
struct EngineMemory {
  std::uint64_t weights = 0, kv_cache = 0, activations = 0, workspace = 0;
  std::uint64_t total() const { return weights + kv_cache + activations + workspace; }
};

// The bytes a Transformer built with these options allocates (what memory() will report), on
// the host, before building it: to decide whether a point fits. gemm_workspace_bytes is the
// cuBLASLt workspace of the device (gemm_workspace_bytes(cc_major)). InputError as the
// constructor's (tp_size that does not split the model).
EngineMemory engine_memory(const ModelConfig& model, const EngineOptions& options,
                           std::size_t gemm_workspace_bytes);

class Transformer {
 public:
  static constexpr int kMaxOverlapChunks = 16;
  // Allocates and fills everything on `device` (the current device must be `device`).
  Transformer(const ModelConfig& model, const EngineOptions& options, int device);
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& model() const noexcept { return model_; }
  const EngineOptions& options() const noexcept { return opts_; }
  int layers() const noexcept { return layers_; }
  EngineMemory memory() const noexcept { return memory_; }

  // Seeded token ids for `batch` x `tokens` (device memory the engine owns, reused).
  const std::int32_t* tokens(int batch, int tokens, std::uint64_t seed, cudaStream_t stream);

  // The prompt `ids` [batch * tokens] at positions 0..tokens-1: fills the KV cache, leaves the
  // last position's logits [batch, vocab] in logits(). A stage without the embedding ignores
  // `ids` (may be null) and starts from input_hidden(); one without the head leaves hidden().
  // `seq0`: the sequences' KV cache rows start at sequence seq0 of the engine's max_batch (a
  // pipeline stage keeps each microbatch's cache apart); seq0 + batch <= max_batch.
  void prefill(const std::int32_t* ids, int batch, int tokens, cudaStream_t stream, int seq0 = 0);
  // One token per sequence, `ids` [batch], at position `context` (the cache holds 0..context-1):
  // writes its K/V at `context`, leaves logits. Capturable in a CUDA graph (no host copies).
  void decode(const std::int32_t* ids, int batch, int context, cudaStream_t stream, int seq0 = 0);

  const void* logits() const noexcept { return logits_.get(); }
  // The stream of the overlapped prefill's collectives; null where the engine has none.
  cudaStream_t comm_stream() const noexcept { return comm_.get(); }
  // A stage without the embedding: where a step's input hidden states go [batch * tokens,
  // hidden]; every stage: the residual stream after its last layer (before any final norm).
  void* input_hidden() noexcept { return x_.get(); }
  const void* hidden() const noexcept { return x_.get(); }
  // The hidden states after the final norm of the last step's last positions [batch, hidden].
  const void* final_hidden() const noexcept { return last_.get(); }

  void set_observer(OpObserver* observer) noexcept { observer_ = observer; }
  // How the engine waits on the host for its own stream (the one wait it makes: timing a new
  // GEMM shape's algorithms, whose stream may also wait for a peer's transfer or all-reduce);
  // unset, Event::synchronize. A rank of a group passes a wait that ends when a peer failed.
  using HostWait = std::function<void(const Event&)>;
  void set_host_wait(HostWait wait) { host_wait_ = std::move(wait); }
  // The collectives of the row-parallel outputs, required before a step when tp_size > 1:
  // prefill's, and decode's (null: prefill's). A decode step runs the same collectives eagerly
  // as inside the graphs captured from it, so a pair whose prefill side cannot be captured (the
  // copy engines) names decode's here, and NCCL's first call of a size (which sets up its
  // connections) is never inside a capture.
  void set_collectives(TpCollectives* prefill, TpCollectives* decode = nullptr) noexcept {
    prefill_collectives_ = prefill;
    decode_collectives_ = decode ? decode : prefill;
  }
  // The collectives a step of this phase calls (null: none set).
  TpCollectives* collectives(Phase phase) const noexcept {
    return phase == Phase::Decode ? decode_collectives_ : prefill_collectives_;
  }
  // What this rank holds (at tp_size 1: everything).
  const ShardShape& shard() const noexcept { return shard_; }
  // The chunks the last step ran in (EngineOptions::overlap_chunks; 1: not overlapped).
  int last_chunks() const noexcept { return last_chunks_; }
  // Later steps in `chunks` overlap chunks: 1 .. the overlap_chunks the engine was built with
  // (InputError otherwise).
  void set_overlap_chunks(int chunks);

  // The prefill attention path the last prefill used ("cudnn" or "own"), and why cuDNN was not
  // used when it was not ("" otherwise).
  const std::string& attention_path() const noexcept { return attention_path_; }
  const std::string& attention_note() const noexcept { return attention_note_; }

  // A weight by name (this rank's shard of it), for checks that recompute the model elsewhere:
  // "embed", "lm_head",
  // "final_norm_w", "final_norm_b", and per layer "in_norm_w", "in_norm_b", "qkv_w", "qkv_b",
  // "q_norm_w", "k_norm_w", "out_w", "out_b", "post_norm_w", "post_norm_b", "up_w", "up_b",
  // "down_w", "down_b" (null when the model has no such tensor). Throws on an unknown name.
  const void* parameter(const std::string& name, int layer = -1) const;
  // Elements from one row of that weight to the next: its columns plus weight_row_pad() for
  // "qkv_w", "out_w", "up_w" and "down_w"; its columns for the others (0 for the one-row ones:
  // norms and biases). Throws on an unknown name.
  std::int64_t parameter_pitch(const std::string& name) const;

 private:
  struct Layer;
  // The rows a step, or one overlap chunk of it, covers: rows row0 .. row0 + rows - 1 of the
  // step's batch x tokens, that is sequences seq0 .. seq0 + batch - 1 at positions
  // pos0 .. pos0 + tokens - 1.
  struct Rows {
    std::int64_t row0 = 0, rows = 0;
    int seq0 = 0, batch = 1, tokens = 1, pos0 = 0;
  };
  void forward(const std::int32_t* ids, int batch, int tokens, int pos0, bool decode,
               cudaStream_t stream, int seq0);
  // The step in overlap chunks (EngineOptions::overlap_chunks), or whole; its cache rows from
  // sequence seq0.
  std::vector<Rows> step_chunks(int batch, int tokens, int pos0, bool decode, int seq0) const;
  void layer_forward(int l, const Rows& r, bool decode, cudaStream_t stream);
  // A decoder layer in parts: the input norm (first layer) through attention's output
  // projection, whose partial sum is left in tmp_; the post-attention residual add and norm
  // through the MLP's down projection (tmp_ again); after each, sum_partials over the ranks;
  // then layer_end: the MLP's residual add with the next layer's input norm, or the last add.
  void attention_part(int l, const Rows& r, bool decode, cudaStream_t stream);
  void mlp_part(int l, const Rows& r, cudaStream_t stream);
  void layer_end(int l, const Rows& r, cudaStream_t stream);
  // x += tmp, then h = the norm (w, b) of x on r's rows (this rank's with sequence parallelism,
  // gathered to every row after).
  void residual_norm(const char* op, const char* gather_op, int l, const Rows& r, const void* w,
                     const void* b, cudaStream_t stream);
  // tmp_'s rows of r summed over the ranks (tp_size > 1; an all-reduce, or a reduce-scatter
  // with sequence parallelism), `bias` added after; nothing at tp_size 1.
  void sum_partials(const char* all_reduce_op, const char* reduce_scatter_op, int l, const Rows& r,
                    const void* bias, cudaStream_t stream);
  // The fused layer of a fused_ step.
  void fused_layer(int l, const Rows& r, bool decode, cudaStream_t stream);
  // Every layer over the chunks, chunk by chunk, each chunk's sums on comm_ while the next
  // chunk computes on `stream`, which waits for the last sums at the end.
  void overlapped_layers(const std::vector<Rows>& chunks, cudaStream_t stream);
  // Row r.row0 of a buffer of `cols` columns.
  unsigned char* row_ptr(const DeviceBuffer& b, const Rows& r, std::int64_t cols) const;
  // A layer's K or V cache from sequence r.seq0 on.
  unsigned char* cache_ptr(void* cache, const Rows& r) const;
  // Y[rows, out] = X[rows, in] W^T (+ bias), with `fusion`'s prologue and epilogue (the skinny
  // path only: fused_ steps).
  // `ldw`: elements from one row of W to the next (pitch() for a layer's weights).
  void linear(const char* op, int l, const void* x, const void* w, std::int64_t ldw,
              const void* bias, void* y, std::int64_t rows, std::int64_t out, std::int64_t in,
              cudaStream_t stream, const SkinnyFusion* fusion = nullptr);
  // The row pitch of a layer weight with `cols` columns (EngineOptions::weight_row_pad).
  std::int64_t pitch(std::int64_t cols) const noexcept { return cols + row_pad_; }
  // A skinny GEMV's RMSNorm prologue with this norm weight (the model's eps); the residual add
  // as its epilogue; the MLP's up GEMV: the post-attention norm and the model's activation.
  SkinnyFusion norm_fusion(const void* weight) const;
  SkinnyFusion residual_fusion() const;
  SkinnyFusion up_fusion(const void* post_norm_weight) const;
  // Whether a step of `rows` rows runs fused (EngineOptions::fuse_small_steps).
  bool fusable(std::int64_t rows) const;
  GemmAlgo pick_algo(const GemmPlan& plan, const void* w, const void* x, void* y,
                     cudaStream_t stream);
  static constexpr int kTimedAlgos = 4;  // heuristic candidates timed per new GEMM shape
  DeviceBuffer alloc(std::uint64_t bytes, std::uint64_t* counter);
  void* weight(std::int64_t rows, std::int64_t cols, std::uint64_t id, float scale,
               cudaStream_t stream, std::vector<DeviceBuffer>& store);
  // The blocks `rows` of a full weight with `cols` columns, stacked in order, pitch(cols) apart.
  void* weight_rows(const std::vector<Range>& rows, std::int64_t cols, std::uint64_t id,
                    float scale, cudaStream_t stream);
  // Columns `ranges` of a full one-row bias of full_cols values, stacked.
  void* bias_cols(const std::vector<Range>& ranges, std::int64_t full_cols, std::uint64_t id,
                  cudaStream_t stream);
  void* weight_rows_of(const std::vector<Range>& ranges, std::int64_t cols, std::int64_t full_cols,
                       std::uint64_t id, float scale, cudaStream_t stream, bool of_columns);
  // Columns `range` of a full [rows, full_cols] weight, rows pitch(range.count) apart.
  void* weight_cols(std::int64_t rows, Range range, std::int64_t full_cols, std::uint64_t id,
                    float scale, cudaStream_t stream);
  // Sums `rows` x hidden at `data` over the ranks (tp_size > 1), then adds `bias` (may be null).
  void reduce_rows(const char* op, int l, void* data, const void* bias, std::int64_t rows,
                   cudaStream_t stream);
  // Sequence parallelism: `rows` x hidden at `data`, summed into this rank's rows (then `bias`
  // added to them); and this rank's rows of `data` copied to every rank.
  void scatter_rows(const char* op, int l, void* data, const void* bias, std::int64_t rows,
                    cudaStream_t stream);
  void gather_rows(const char* op, int l, void* data, std::int64_t rows, cudaStream_t stream);
  // This rank's rows of r in a [rows, hidden] buffer (all of them without sequence
  // parallelism).
  unsigned char* local_rows(const DeviceBuffer& b, const Rows& r) const;

  ModelConfig model_;
  EngineOptions opts_;
  int device_;
  int layers_;
  std::size_t elem_;
  std::int64_t row_pad_;   // weight_row_pad(opts_)
  std::int64_t kv_pitch_;  // a cache row: this rank's KV heads plus kv_row_pad(opts_)
  EngineMemory memory_;
  OpObserver* observer_ = nullptr;
  HostWait host_wait_;
  TpCollectives* prefill_collectives_ = nullptr;
  TpCollectives* decode_collectives_ = nullptr;
  TpCollectives* collectives_ = nullptr;  // this step's: one of the two
  ShardShape shard_;
  bool sp_ = false;     // this step splits rows (sequence parallelism)
  bool fused_ = false;  // this step folds norms, residual adds and activations into its GEMVs
  CublasLtHandle handle_;
  DeviceBuffer workspace_;
  // (N, M, K, lda) of a GEMM -> its plan and the fastest of the heuristic's first kTimedAlgos.
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>,
           std::pair<std::unique_ptr<GemmPlan>, GemmAlgo>>
      plans_;
  std::vector<DeviceBuffer> weights_;
  std::vector<std::unique_ptr<Layer>> layer_;
  void* embed_ = nullptr;        // [vocab, hidden]; also the LM head when tied
  void* positions_w_ = nullptr;  // learned positions [max_positions, hidden] or null
  void* lm_head_ = nullptr;      // [vocab, hidden]
  void* final_norm_w_ = nullptr;
  void* final_norm_b_ = nullptr;
  DeviceBuffer kv_;  // every layer's K and V caches
  // Activations for max_batch * max_tokens rows.
  DeviceBuffer x_, h_, qkv_, attn_, tmp_, mlp_, act_, positions_, ids_, last_, logits_, attn_ws_;
  int sm_count_ = 0;
  // Overlap chunks (tp_size > 1, overlap_chunks > 1): the collectives' stream; per chunk, its
  // compute handed to comm_, and its attention and MLP sums done.
  Stream comm_;
  std::vector<Event> computed_, attn_summed_, mlp_summed_;
  int last_chunks_ = 1;
  std::unique_ptr<AttentionRunner> attention_;
  std::string attention_path_ = "own", attention_note_;
  // The last decode attention's split kernel filled a wave (decode_attention_fills_wave).
  bool attention_fills_wave_ = false;
};

}  // namespace gpubench::model
