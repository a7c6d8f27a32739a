// The synthetic transformer engine: weights from seeds, prefill and decode steps over a KV cache.
#include "gpubench/model/transformer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/kernels/attention.cuh"
#include "gpubench/kernels/skinny_gemm.cuh"
#include "gpubench/kernels/transformer_engine.cuh"

namespace gpubench::model {

namespace {

GemmDtype gemm_dtype(ActDtype t) {
  return t == ActDtype::BF16 ? GemmDtype::Bf16 : GemmDtype::Fp16;
}
AttnDtype attn_dtype(ActDtype t) {
  return t == ActDtype::BF16 ? AttnDtype::BF16 : AttnDtype::F16;
}

// Weight ids: global tensors first, then 32 per layer.
enum GlobalId : std::uint64_t { kEmbedId = 1, kPositionsId, kLmHeadId, kFinalNormBiasId };
enum LayerId : std::uint64_t {
  kQkv,
  kQkvBias,
  kOut,
  kOutBias,
  kGateUp,
  kUpBias,
  kDown,
  kDownBias,
  kInNormBias,
  kPostNormBias,
};
std::uint64_t layer_id(int l, LayerId t) {
  return 1000 + static_cast<std::uint64_t>(l) * 32 + t;
}

constexpr float kBiasScale = 0.02f;

// A scope that tells the observer (if any) where an operation begins and ends.
class OpScope {
 public:
  OpScope(OpObserver* o, const char* op, int layer, cudaStream_t s)
      : o_(o), op_(op), layer_(layer), s_(s) {
    if (o_) o_->begin(op_, layer_, s_);
  }
  ~OpScope() {
    if (o_) o_->end(op_, layer_, s_);
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  OpObserver* o_;
  const char* op_;
  int layer_;
  cudaStream_t s_;
};

}  // namespace

const char* to_string(AttentionPath p) {
  switch (p) {
    case AttentionPath::Auto:
      return "auto";
    case AttentionPath::Cudnn:
      return "cudnn";
    case AttentionPath::Own:
      return "own";
  }
  return "?";
}

AttentionPath parse_attention_path(const std::string& text) {
  if (text == "auto") return AttentionPath::Auto;
  if (text == "cudnn") return AttentionPath::Cudnn;
  if (text == "own") return AttentionPath::Own;
  throw InputError(fmt::format("--attention: '{}' is not auto, cudnn or own", text));
}

struct Transformer::Layer {
  void* in_norm_w = nullptr;
  void* in_norm_b = nullptr;
  void* qkv_w = nullptr;
  void* qkv_b = nullptr;
  void* q_norm_w = nullptr;
  void* k_norm_w = nullptr;
  void* out_w = nullptr;
  void* out_b = nullptr;
  void* post_norm_w = nullptr;
  void* post_norm_b = nullptr;
  void* up_w = nullptr;  // [2I, H] gate first when gated, else [I, H]
  void* up_b = nullptr;
  void* down_w = nullptr;
  void* down_b = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
};

DeviceBuffer Transformer::alloc(std::uint64_t bytes, std::uint64_t* counter) {
  *counter += bytes;
  return DeviceBuffer(device_, std::max<std::uint64_t>(bytes, 256));
}

void* Transformer::weight(std::int64_t rows, std::int64_t cols, std::uint64_t id, float scale,
                          cudaStream_t stream, std::vector<DeviceBuffer>& store) {
  store.push_back(alloc(static_cast<std::uint64_t>(rows * cols) * elem_, &memory_.weights));
  fill_weight(store.back().get(), rows, static_cast<int>(cols), 0, 0, cols, opts_.seed, id, scale,
              opts_.dtype, stream);
  return store.back().get();
}

void* Transformer::weight_rows(const std::vector<Range>& rows, std::int64_t cols, std::uint64_t id,
                               float scale, cudaStream_t stream) {
  return weight_rows_of(rows, cols, cols, id, scale, stream, false);
}

// The blocks `ranges` of a full weight, stacked: rows of a [*, full_cols] matrix (cols each), or
// with `of_columns` columns of a one-row [1, full_cols] vector (a bias that follows the rows of
// its weight).
void* Transformer::weight_rows_of(const std::vector<Range>& ranges, std::int64_t cols,
                                  std::int64_t full_cols, std::uint64_t id, float scale,
                                  cudaStream_t stream, bool of_columns) {
  std::int64_t total = 0;
  for (const Range& r : ranges) total += r.count;
  const std::int64_t width = of_columns ? 1 : pitch(cols);
  weights_.push_back(alloc(static_cast<std::uint64_t>(total * width) * elem_, &memory_.weights));
  auto* dst = weights_.back().as<unsigned char>();
  for (const Range& r : ranges) {
    if (of_columns)
      fill_weight(dst, 1, static_cast<int>(r.count), 0, r.start, full_cols, opts_.seed, id, scale,
                  opts_.dtype, stream);
    else
      fill_weight(dst, r.count, static_cast<int>(cols), r.start, 0, full_cols, opts_.seed, id,
                  scale, opts_.dtype, stream, width);
    dst += static_cast<std::uint64_t>(r.count * width) * elem_;
  }
  return weights_.back().get();
}

void* Transformer::weight_cols(std::int64_t rows, Range range, std::int64_t full_cols,
                               std::uint64_t id, float scale, cudaStream_t stream) {
  const std::int64_t ld = pitch(range.count);
  weights_.push_back(alloc(static_cast<std::uint64_t>(rows * ld) * elem_, &memory_.weights));
  fill_weight(weights_.back().get(), rows, static_cast<int>(range.count), 0, range.start, full_cols,
              opts_.seed, id, scale, opts_.dtype, stream, ld);
  return weights_.back().get();
}

void* Transformer::bias_cols(const std::vector<Range>& ranges, std::int64_t full_cols,
                             std::uint64_t id, cudaStream_t stream) {
  return weight_rows_of(ranges, 1, full_cols, id, kBiasScale, stream, true);
}

Transformer::Transformer(const ModelConfig& model, const EngineOptions& options, int device)
    : model_(model),
      opts_(options),
      device_(device),
      layers_(options.layers > 0
                  ? std::min(options.layers, model.num_layers - std::max(options.first_layer, 0))
                  : model.num_layers - std::max(options.first_layer, 0)),
      elem_(act_bytes(options.dtype)),
      row_pad_(weight_row_pad(options)),
      kv_pitch_(0) {
  const ModelConfig& m = model_;
  if (m.head_dim != 64 && m.head_dim != 128)
    throw InputError(
        fmt::format("{}: head_dim {} (the attention kernels take 64 or 128)", m.name, m.head_dim));
  if (opts_.max_batch < 1 || opts_.max_tokens < 1 || opts_.max_context < opts_.max_tokens)
    throw InputError("engine: max_batch and max_tokens must be >= 1, max_context >= max_tokens");
  if (opts_.cache_batch != 0 && opts_.cache_batch < opts_.max_batch)
    throw InputError(fmt::format("engine: a cache of {} sequences is smaller than a step's {}",
                                 opts_.cache_batch, opts_.max_batch));
  shard_ = shard_shape(m, opts_.tp_size, opts_.tp_rank);  // InputError when t does not split m
  kv_pitch_ = shard_.kv_dim + kv_row_pad(opts_);
  if (opts_.first_layer < 0 || opts_.first_layer >= m.num_layers)
    throw InputError(fmt::format("engine: first layer {} is outside 0..{} ({})", opts_.first_layer,
                                 m.num_layers - 1, m.name));
  if (opts_.overlap_chunks < 1 || opts_.overlap_chunks > kMaxOverlapChunks)
    throw InputError(fmt::format("engine: overlap chunks {} outside 1..{}", opts_.overlap_chunks,
                                 kMaxOverlapChunks));
  GPB_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_));
  attention_ = std::make_unique<AttentionRunner>(device_, opts_.attention);
  if (opts_.tp_size > 1 && opts_.overlap_chunks > 1) {
    comm_ = Stream(device_, true);
    for (int c = 0; c < opts_.overlap_chunks; ++c) {
      computed_.emplace_back(device_, false);
      attn_summed_.emplace_back(device_, false);
      mlp_summed_.emplace_back(device_, false);
    }
  }
  Stream setup(device_);
  cudaStream_t s = setup.get();
  // Full dimensions (weight scales, fills) and this rank's (allocations).
  const std::int64_t H = m.hidden_size, Q = m.q_dim(), I = m.intermediate_size;
  const std::int64_t Ql = shard_.q_dim, KVl = shard_.kv_dim, Il = shard_.intermediate;
  const bool ln = m.norm == Norm::LayerNorm;
  auto norm_weight = [&](std::int64_t n, std::uint64_t bias_id, void** w, void** b) {
    weights_.push_back(alloc(static_cast<std::uint64_t>(n) * elem_, &memory_.weights));
    fill_ones(weights_.back().get(), n, opts_.dtype, s);
    *w = weights_.back().get();
    if (ln) *b = weight(1, n, bias_id, kBiasScale, s, weights_);
  };

  // The embedding on the first stage (and on the last when the LM head is tied to it).
  if (opts_.embed || (opts_.head && m.tie_word_embeddings))
    embed_ = weight(m.vocab_size, H, kEmbedId, 1.0f, s, weights_);
  if (opts_.embed && m.positions == Positions::Learned)
    positions_w_ =
        weight(std::max(m.max_positions, opts_.max_context), H, kPositionsId, 1.0f, s, weights_);
  if (opts_.head) {
    lm_head_ = m.tie_word_embeddings
                   ? embed_
                   : weight(m.vocab_size, H, kLmHeadId, 1.0f / std::sqrt(float(H)), s, weights_);
    norm_weight(H, kFinalNormBiasId, &final_norm_w_, &final_norm_b_);
  }

  const std::uint64_t cache_elems = static_cast<std::uint64_t>(cache_sequences(opts_)) *
                                    static_cast<std::uint64_t>(opts_.max_context) *
                                    static_cast<std::uint64_t>(kv_pitch_);
  kv_ = alloc(2 * static_cast<std::uint64_t>(layers_) * cache_elems * elem_, &memory_.kv_cache);
  for (int l = 0; l < layers_; ++l) {
    const int g = opts_.first_layer + l;  // the layer's index in the whole model: its weights
    auto L = std::make_unique<Layer>();
    norm_weight(H, layer_id(g, kInNormBias), &L->in_norm_w, &L->in_norm_b);
    // Column-parallel: this rank's q, k and v rows (gate and up rows below); row-parallel: its
    // columns of out and down. At tp_size 1 the blocks cover the whole weight.
    const std::int64_t qkv_cols = m.q_dim() + 2 * m.kv_dim();
    L->qkv_w = weight_rows(shard_.qkv_rows, H, layer_id(g, kQkv), 1.0f / std::sqrt(float(H)), s);
    if (m.qkv_bias) L->qkv_b = bias_cols(shard_.qkv_rows, qkv_cols, layer_id(g, kQkvBias), s);
    if (m.qk_norm) {  // one buffer: the q norm's head_dim weights, then the k norm's
      weights_.push_back(
          alloc(static_cast<std::uint64_t>(2 * m.head_dim) * elem_, &memory_.weights));
      fill_ones(weights_.back().get(), 2 * m.head_dim, opts_.dtype, s);
      L->q_norm_w = weights_.back().get();
      L->k_norm_w = static_cast<unsigned char*>(L->q_norm_w) + m.head_dim * elem_;
    }
    L->out_w = weight_cols(H, shard_.out_cols, Q, layer_id(g, kOut), 1.0f / std::sqrt(float(Q)), s);
    if (m.out_bias) L->out_b = weight(1, H, layer_id(g, kOutBias), kBiasScale, s, weights_);
    norm_weight(H, layer_id(g, kPostNormBias), &L->post_norm_w, &L->post_norm_b);
    const std::int64_t up_rows = m.gated_mlp ? 2 * I : I;
    L->up_w =
        weight_rows(shard_.gate_up_rows, H, layer_id(g, kGateUp), 1.0f / std::sqrt(float(H)), s);
    if (m.mlp_bias) L->up_b = bias_cols(shard_.gate_up_rows, up_rows, layer_id(g, kUpBias), s);
    L->down_w =
        weight_cols(H, shard_.down_cols, I, layer_id(g, kDown), 1.0f / std::sqrt(float(I)), s);
    if (m.mlp_bias) L->down_b = weight(1, H, layer_id(g, kDownBias), kBiasScale, s, weights_);
    auto* base = kv_.as<unsigned char>() + 2 * static_cast<std::uint64_t>(l) * cache_elems * elem_;
    L->k_cache = base;
    L->v_cache = base + cache_elems * elem_;
    layer_.push_back(std::move(L));
  }

  // Activations for the largest step.
  const std::uint64_t rows =
      static_cast<std::uint64_t>(opts_.max_batch) * static_cast<std::uint64_t>(opts_.max_tokens);
  auto act = [&](std::uint64_t cols) { return alloc(rows * cols * elem_, &memory_.activations); };
  x_ = act(H);
  h_ = act(H);
  tmp_ = act(H);
  qkv_ = act(Ql + 2 * KVl);
  attn_ = act(Ql);
  mlp_ = act(m.gated_mlp ? 2 * Il : Il);
  act_ = act(Il);
  positions_ = alloc(rows * sizeof(std::int32_t), &memory_.activations);
  ids_ = alloc(rows * sizeof(std::int32_t), &memory_.activations);
  last_ = alloc(static_cast<std::uint64_t>(opts_.max_batch) * H * elem_, &memory_.activations);
  logits_ = alloc(static_cast<std::uint64_t>(opts_.max_batch) * m.vocab_size * elem_,
                  &memory_.activations);
  AttentionArgs probe;
  probe.batch = opts_.max_batch;
  probe.heads = shard_.heads;
  probe.head_dim = m.head_dim;
  attn_ws_ = alloc(decode_workspace_bytes(probe, 64), &memory_.workspace);
  workspace_ = alloc(gemm_workspace_bytes(compute_capability_major(device_)), &memory_.workspace);
  setup.synchronize();
}

Transformer::~Transformer() = default;

const void* Transformer::parameter(const std::string& name, int layer) const {
  if (layer < 0) {
    if (name == "embed") return embed_;
    if (name == "lm_head") return lm_head_;
    if (name == "final_norm_w") return final_norm_w_;
    if (name == "final_norm_b") return final_norm_b_;
  } else if (layer < layers_) {
    const Layer& L = *layer_[static_cast<std::size_t>(layer)];
    const std::pair<const char*, const void*> all[] = {{"in_norm_w", L.in_norm_w},
                                                       {"in_norm_b", L.in_norm_b},
                                                       {"qkv_w", L.qkv_w},
                                                       {"qkv_b", L.qkv_b},
                                                       {"q_norm_w", L.q_norm_w},
                                                       {"k_norm_w", L.k_norm_w},
                                                       {"out_w", L.out_w},
                                                       {"out_b", L.out_b},
                                                       {"post_norm_w", L.post_norm_w},
                                                       {"post_norm_b", L.post_norm_b},
                                                       {"up_w", L.up_w},
                                                       {"up_b", L.up_b},
                                                       {"down_w", L.down_w},
                                                       {"down_b", L.down_b}};
    for (const auto& [n, p] : all)
      if (name == n) return p;
  }
  throw InputError(fmt::format("engine: no parameter '{}' in layer {}", name, layer));
}

std::int64_t Transformer::parameter_pitch(const std::string& name) const {
  const ModelConfig& m = model_;
  if (name == "qkv_w" || name == "up_w") return pitch(m.hidden_size);
  if (name == "out_w") return pitch(shard_.q_dim);
  if (name == "down_w") return pitch(shard_.intermediate);
  if (name == "embed" || name == "lm_head") return m.hidden_size;
  // The rest are one-row tensors; parameter() throws on a name that is none of them (layer 0
  // exists: an engine has at least one layer).
  static_cast<void>(parameter(name, name.rfind("final_", 0) == 0 ? -1 : 0));
  return 0;
}

const std::int32_t* Transformer::tokens(int batch, int tokens, std::uint64_t seed,
                                        cudaStream_t stream) {
  fill_tokens(ids_.as<std::int32_t>(), static_cast<std::int64_t>(batch) * tokens, model_.vocab_size,
              seed, stream);
  return ids_.as<std::int32_t>();
}

// The heuristic's first few algorithms for a new GEMM shape, each timed on the step's own
// operands (the output is overwritten by the real run that follows); the fastest is kept. Inside
// a graph capture nothing can be timed: the heuristic's first pick is used.
GemmAlgo Transformer::pick_algo(const GemmPlan& plan, const void* w, const void* x, void* y,
                                cudaStream_t stream) {
  const std::vector<GemmAlgo> algos = plan.candidates(kTimedAlgos);
  if (algos.size() == 1 || stream_capturing(stream)) return algos.front();
  Event start(device_), stop(device_);
  std::size_t best = 0;
  double best_s = 0;
  for (std::size_t i = 0; i < algos.size(); ++i) {
    plan.run(algos[i], w, x, y, workspace_.get(), stream);  // warm-up
    start.record(stream);
    for (int r = 0; r < 3; ++r) plan.run(algos[i], w, x, y, workspace_.get(), stream);
    stop.record(stream);
    if (host_wait_)
      host_wait_(stop);
    else
      stop.synchronize();
    const double s = stop.seconds_since(start);
    if (i == 0 || s < best_s) {
      best = i;
      best_s = s;
    }
  }
  return algos[best];
}

void Transformer::linear(const char* op, int l, const void* x, const void* w, std::int64_t ldw,
                         const void* bias, void* y, std::int64_t rows, std::int64_t out,
                         std::int64_t in, cudaStream_t stream, const SkinnyFusion* fusion) {
  OpScope scope(observer_, op, l, stream);
  if (fusion != nullptr ||
      (rows <= skinny_gemm_max_rows() && skinny_gemm_supported(static_cast<int>(rows), in))) {
    // Decode's few rows: a GEMV-like kernel that streams W at HBM speed, bias included.
    skinny_gemm(x, w, bias, y, static_cast<int>(rows), out, in,
                opts_.dtype == ActDtype::BF16 ? SkinnyDtype::BF16 : SkinnyDtype::F16, stream,
                fusion ? *fusion : SkinnyFusion{}, ldw);
    return;
  }
  auto key = std::make_tuple(out, rows, in, ldw);
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    GemmShape shape{out, rows, in, true, false, ldw};  // Y^T = W X^T in column-major terms
    auto plan =
        std::make_unique<GemmPlan>(handle_, gemm_dtype(opts_.dtype), shape, workspace_.bytes());
    const GemmAlgo algo = pick_algo(*plan, w, x, y, stream);
    it = plans_.emplace(key, std::make_pair(std::move(plan), algo)).first;
  }
  it->second.first->run(it->second.second, w, x, y, workspace_.get(), stream);
  if (bias) add_bias(y, bias, rows, static_cast<int>(out), opts_.dtype, stream);
}

void Transformer::reduce_rows(const char* op, int l, void* data, const void* bias,
                              std::int64_t rows, cudaStream_t stream) {
  {
    OpScope scope(observer_, op, l, stream);
    collectives_->all_reduce(data, rows * model_.hidden_size, opts_.dtype, stream);
  }
  if (bias) add_bias(data, bias, rows, model_.hidden_size, opts_.dtype, stream);
}

void Transformer::scatter_rows(const char* op, int l, void* data, const void* bias,
                               std::int64_t rows, cudaStream_t stream) {
  const std::int64_t local = rows / opts_.tp_size, H = model_.hidden_size;
  {
    OpScope scope(observer_, op, l, stream);
    collectives_->reduce_scatter(data, local * H, opts_.dtype, stream);
  }
  if (bias)
    add_bias(static_cast<unsigned char*>(data) + opts_.tp_rank * local * H * elem_, bias, local,
             static_cast<int>(H), opts_.dtype, stream);
}

void Transformer::gather_rows(const char* op, int l, void* data, std::int64_t rows,
                              cudaStream_t stream) {
  OpScope scope(observer_, op, l, stream);
  collectives_->all_gather(data, rows / opts_.tp_size * model_.hidden_size, opts_.dtype, stream);
}

SkinnyFusion Transformer::norm_fusion(const void* weight) const {
  SkinnyFusion f;
  f.prologue = SkinnyPrologue::RmsNorm;
  f.norm_weight = weight;
  f.eps = static_cast<float>(model_.norm_eps);
  f.weights_ready = true;  // filled and synchronized when the engine was built
  return f;
}

SkinnyFusion Transformer::residual_fusion() const {
  SkinnyFusion f;
  f.epilogue = SkinnyEpilogue::Residual;
  f.weights_ready = true;
  return f;
}

SkinnyFusion Transformer::up_fusion(const void* post_norm_weight) const {
  const ModelConfig& m = model_;
  SkinnyFusion f = norm_fusion(post_norm_weight);
  f.epilogue = m.gated_mlp                            ? SkinnyEpilogue::SwiGlu
               : m.activation == Activation::Relu     ? SkinnyEpilogue::Relu
               : m.activation == Activation::GeluTanh ? SkinnyEpilogue::GeluTanh
                                                      : SkinnyEpilogue::Gelu;
  return f;
}

// The fused layer (layer_forward) as skinny_gemm checks it: the RMSNorm prologue on qkv and up
// (and the LM head), the residual epilogue on out and down, the activation on up. LayerNorm
// models keep their kernels.
bool Transformer::fusable(std::int64_t rows) const {
  if (!opts_.fuse_small_steps || opts_.tp_size > 1 || layers_ == 0 ||
      rows > skinny_fusion_max_rows() || model_.norm != Norm::RMSNorm)
    return false;
  const ModelConfig& m = model_;
  const Layer& L = *layer_.front();
  const int r = static_cast<int>(rows);
  return skinny_fusion_supported(r, shard_.q_dim + 2 * shard_.kv_dim, m.hidden_size,
                                 norm_fusion(L.in_norm_w)) &&
         skinny_fusion_supported(r, m.hidden_size, shard_.q_dim, residual_fusion()) &&
         skinny_fusion_supported(r, m.gated_mlp ? 2 * shard_.intermediate : shard_.intermediate,
                                 m.hidden_size, up_fusion(L.post_norm_w)) &&
         skinny_fusion_supported(r, m.hidden_size, shard_.intermediate, residual_fusion());
}

unsigned char* Transformer::row_ptr(const DeviceBuffer& b, const Rows& r, std::int64_t cols) const {
  return b.as<unsigned char>() + r.row0 * cols * static_cast<std::int64_t>(elem_);
}

unsigned char* Transformer::local_rows(const DeviceBuffer& b, const Rows& r) const {
  // With sequence parallelism a step is one chunk (row0 0) split into tp_size row blocks.
  const std::int64_t first = r.row0 + (sp_ ? opts_.tp_rank * (r.rows / opts_.tp_size) : 0);
  return b.as<unsigned char>() + first * model_.hidden_size * static_cast<std::int64_t>(elem_);
}

unsigned char* Transformer::cache_ptr(void* cache, const Rows& r) const {
  return static_cast<unsigned char*>(cache) + static_cast<std::int64_t>(r.seq0) *
                                                  opts_.max_context * kv_pitch_ *
                                                  static_cast<std::int64_t>(elem_);
}

void Transformer::set_overlap_chunks(int chunks) {
  const int built = static_cast<int>(computed_.size());
  if (chunks < 1 || (chunks > 1 && chunks > built))
    throw InputError(
        fmt::format("engine: {} overlap chunks, built for at most {}", chunks, std::max(built, 1)));
  opts_.overlap_chunks = chunks;
}

std::vector<Transformer::Rows> Transformer::step_chunks(int batch, int tokens, int pos0,
                                                        bool decode, int seq0) const {
  const int c = opts_.overlap_chunks;
  const Rows whole{0, static_cast<std::int64_t>(batch) * tokens, seq0, batch, tokens, pos0};
  if (decode || sp_ || opts_.tp_size < 2 || c < 2) return {whole};
  std::vector<Rows> out;
  if (batch % c == 0) {  // whole sequences: no chunk attends to another's keys
    const int per = batch / c;
    for (int i = 0; i < c; ++i)
      out.push_back({static_cast<std::int64_t>(i) * per * tokens,
                     static_cast<std::int64_t>(per) * tokens, seq0 + i * per, per, tokens, pos0});
  } else if (batch == 1 && tokens % c == 0) {  // prompt slices, later ones over earlier keys
    const int per = tokens / c;
    for (int i = 0; i < c; ++i)
      out.push_back({static_cast<std::int64_t>(i) * per, per, seq0, 1, per, pos0 + i * per});
  } else {
    out.push_back(whole);
  }
  return out;
}

void Transformer::prefill(const std::int32_t* ids, int batch, int tokens, cudaStream_t stream,
                          int seq0) {
  if (batch < 1 || batch > opts_.max_batch || tokens < 1 || tokens > opts_.max_tokens)
    throw InputError(fmt::format("prefill: batch {} x {} tokens outside the engine's {} x {}",
                                 batch, tokens, opts_.max_batch, opts_.max_tokens));
  forward(ids, batch, tokens, 0, false, stream, seq0);
}

void Transformer::decode(const std::int32_t* ids, int batch, int context, cudaStream_t stream,
                         int seq0) {
  if (batch < 1 || batch > opts_.max_batch || context < 0 || context >= opts_.max_context)
    throw InputError(fmt::format("decode: batch {} at context {} outside the engine's {} x {}",
                                 batch, context, opts_.max_batch, opts_.max_context));
  forward(ids, batch, 1, context, true, stream, seq0);
}

void Transformer::forward(const std::int32_t* ids, int batch, int tokens, int pos0, bool decode,
                          cudaStream_t stream, int seq0) {
  if (seq0 < 0 || seq0 + batch > cache_sequences(opts_))
    throw InputError(fmt::format("engine: sequences {}..{} outside the engine's {}", seq0,
                                 seq0 + batch - 1, cache_sequences(opts_)));
  collectives_ = collectives(decode ? Phase::Decode : Phase::Prefill);
  if (opts_.tp_size > 1 && collectives_ == nullptr)
    throw InputError("engine: tensor parallelism needs set_collectives() before a step");
  const ModelConfig& m = model_;
  const std::int64_t rows = static_cast<std::int64_t>(batch) * tokens;
  const std::int64_t H = m.hidden_size;
  sp_ = opts_.sequence_parallel && opts_.tp_size > 1 && !decode;
  fused_ = fusable(rows);
  if (sp_ && rows % opts_.tp_size != 0)
    throw InputError(
        fmt::format("engine: sequence parallelism needs batch x tokens ({}) divisible by tp {}",
                    rows, opts_.tp_size));
  {
    // Every rank embeds every row; with sequence parallelism it then keeps only its own. A later
    // pipeline stage starts from input_hidden() instead.
    OpScope scope(observer_, "embedding", -1, stream);
    // One kernel writes the positions and the embedding, so that a decode step launches no
    // separate positions kernel.
    if (opts_.embed)
      embedding_step(x_.get(), embed_, ids, batch, tokens, static_cast<int>(H), positions_w_, pos0,
                     positions_.as<std::int32_t>(), opts_.dtype, stream);
    else
      fill_positions(positions_.as<std::int32_t>(), batch, tokens, pos0, stream);
  }
  const std::vector<Rows> chunks = step_chunks(batch, tokens, pos0, decode, seq0);
  last_chunks_ = static_cast<int>(chunks.size());
  if (chunks.size() > 1)
    overlapped_layers(chunks, stream);
  else
    for (int l = 0; l < layers_; ++l) layer_forward(l, chunks.front(), decode, stream);
  if (sp_) gather_rows("final_all_gather", -1, x_.get(), rows, stream);  // every row's stream
  if (!opts_.head) return;  // a pipeline stage before the last: its output is hidden()
  if (fused_) {
    // The final norm inside the LM head's GEMV, on the last position of each sequence (the
    // residual stream itself when a step has one token per sequence).
    const void* last = x_.get();
    if (tokens > 1) {
      OpScope scope(observer_, "final_norm", -1, stream);
      GPB_CUDA_CHECK(cudaMemcpy2DAsync(
          last_.get(), H * elem_, x_.as<unsigned char>() + (tokens - 1) * H * elem_,
          tokens * H * elem_, H * elem_, batch, cudaMemcpyDeviceToDevice, stream));
      last = last_.get();
    }
    const SkinnyFusion f = norm_fusion(final_norm_w_);
    linear("lm_head", -1, last, lm_head_, H, nullptr, logits_.get(), batch, m.vocab_size, H, stream,
           &f);
    return;
  }
  {
    OpScope scope(observer_, "final_norm", -1, stream);
    // The last position of each sequence, then the final norm in place.
    GPB_CUDA_CHECK(
        cudaMemcpy2DAsync(last_.get(), H * elem_, x_.as<unsigned char>() + (tokens - 1) * H * elem_,
                          tokens * H * elem_, H * elem_, batch, cudaMemcpyDeviceToDevice, stream));
    if (m.norm == Norm::RMSNorm)
      rms_norm(last_.get(), last_.get(), final_norm_w_, batch, static_cast<int>(H),
               static_cast<float>(m.norm_eps), opts_.dtype, stream);
    else
      layer_norm(last_.get(), last_.get(), final_norm_w_, final_norm_b_, batch, static_cast<int>(H),
                 static_cast<float>(m.norm_eps), opts_.dtype, stream);
  }
  linear("lm_head", -1, last_.get(), lm_head_, H, nullptr, logits_.get(), batch, m.vocab_size, H,
         stream);
}

void Transformer::layer_forward(int l, const Rows& r, bool decode, cudaStream_t stream) {
  if (fused_) {
    fused_layer(l, r, decode, stream);
    return;
  }
  const Layer& L = *layer_[static_cast<std::size_t>(l)];
  attention_part(l, r, decode, stream);
  sum_partials("attn_all_reduce", "attn_reduce_scatter", l, r, L.out_b, stream);
  mlp_part(l, r, stream);
  sum_partials("mlp_all_reduce", "mlp_reduce_scatter", l, r, L.down_b, stream);
  layer_end(l, r, stream);
}

void Transformer::overlapped_layers(const std::vector<Rows>& chunks, cudaStream_t stream) {
  cudaStream_t comm = comm_.get();
  // Chunk c's partial sum goes to comm_ once `stream` has computed it; the sum's event tells
  // the chunk's next part on `stream` that it may go on. comm_ joins a captured step through
  // the first of these waits, and `stream` waits for its last sums before the step ends.
  auto hand_over = [&](std::size_t c, const char* op, int l, const void* bias, const Event& done) {
    computed_[c].record(stream);
    GPB_CUDA_CHECK(cudaStreamWaitEvent(comm, computed_[c].get(), 0));
    sum_partials(op, op, l, chunks[c], bias, comm);
    done.record(comm);
  };
  auto wait = [&](const Event& e) { GPB_CUDA_CHECK(cudaStreamWaitEvent(stream, e.get(), 0)); };
  for (int l = 0; l < layers_; ++l) {
    const Layer& L = *layer_[static_cast<std::size_t>(l)];
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      if (l > 0) {
        wait(mlp_summed_[c]);
        layer_end(l - 1, chunks[c], stream);
      }
      attention_part(l, chunks[c], false, stream);
      hand_over(c, "attn_all_reduce", l, L.out_b, attn_summed_[c]);
    }
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      wait(attn_summed_[c]);
      mlp_part(l, chunks[c], stream);
      hand_over(c, "mlp_all_reduce", l, L.down_b, mlp_summed_[c]);
    }
  }
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    wait(mlp_summed_[c]);
    layer_end(layers_ - 1, chunks[c], stream);
  }
}

void Transformer::fused_layer(int l, const Rows& r, bool decode, cudaStream_t stream) {
  // No normalized copy h: each norm runs in the prologue of the GEMV that reads it, from the
  // residual stream x, and the residual adds and the MLP's activation in the epilogues of the
  // GEMVs before them: x += out(attention); act = activation(up(post-attention norm of x));
  // x += down(act).
  const ModelConfig& m = model_;
  const Layer& L = *layer_[static_cast<std::size_t>(l)];
  const std::int64_t H = m.hidden_size, Q = shard_.q_dim, I = shard_.intermediate;
  const std::int64_t W = Q + 2 * shard_.kv_dim, up_rows = m.gated_mlp ? 2 * I : I;
  // A decode step's qkv GEMV runs one 512-thread block an SM (SkinnyFusion::wide_block): a block
  // starts only on an SM that the down GEMV has left entirely, and attention's blocks start on an
  // SM only once its qkv block has ended.
  SkinnyFusion in_norm = norm_fusion(L.in_norm_w);
  in_norm.wide_block = decode;
  linear("qkv", l, x_.get(), L.qkv_w, pitch(H), L.qkv_b, qkv_.get(), r.rows, W, H, stream,
         &in_norm);
  // The fused step's attention: the unfused one's, then no partial sums (tp_size 1).
  attention_part(l, r, decode, stream);
  const SkinnyFusion residual = residual_fusion();
  // A decode step's gate|up GEMV shares the last part of its rows over the grid
  // (SkinnyFusion::shared_tail), so that blocks slowed by attention's do not hold up its end.
  SkinnyFusion up = up_fusion(L.post_norm_w);
  up.shared_tail = decode;
  // A decode step's output GEMV launches beside attention (the merge kernel lets it: see
  // attention_part). Where attention's chunks fill a wave of the split kernel, gate|up launches
  // at the output GEMV's start and both MLP GEMVs stage their second step of W in shared memory
  // (SkinnyFusion::stage_next); in a part wave, gate|up waits for the output GEMV's end, so that
  // the MLP's GEMVs do not start ahead of blocks that attention still holds.
  const bool wave = decode && attention_fills_wave_;
  SkinnyFusion out_residual = residual;
  out_residual.late_dependents = decode && !wave;
  up.stage_next = wave;
  SkinnyFusion down_residual = residual;
  down_residual.stage_next = wave;
  linear("attn_out", l, attn_.get(), L.out_w, pitch(Q), L.out_b, x_.get(), r.rows, H, Q, stream,
         &out_residual);
  linear(m.gated_mlp ? "mlp_gate_up" : "mlp_up", l, x_.get(), L.up_w, pitch(H), L.up_b, act_.get(),
         r.rows, up_rows, H, stream, &up);
  linear("mlp_down", l, act_.get(), L.down_w, pitch(I), L.down_b, x_.get(), r.rows, H, I, stream,
         &down_residual);
}

void Transformer::attention_part(int l, const Rows& r, bool decode, cudaStream_t stream) {
  const ModelConfig& m = model_;
  const Layer& L = *layer_[static_cast<std::size_t>(l)];
  // This rank's widths (at tp_size 1 the model's): heads, KV heads and MLP columns are sharded.
  const std::int64_t H = m.hidden_size, Q = shard_.q_dim, KV = shard_.kv_dim;
  const std::int64_t W = Q + 2 * KV;  // qkv row width
  const int heads = shard_.heads, kv_heads = shard_.kv_heads;
  const float eps = static_cast<float>(m.norm_eps);
  unsigned char* const qkv = row_ptr(qkv_, r, W);
  // A fused step has run its qkv GEMV (the input norm inside) already.
  if (!fused_) {
    // From the second layer on, the previous layer's last residual add already left this
    // layer's input norm in h (one fused kernel).
    if (l == 0) {
      {
        // Sequence parallelism: the residual stream x and the norms' outputs h on this rank's
        // rows.
        const std::int64_t nrows = sp_ ? r.rows / opts_.tp_size : r.rows;
        OpScope scope(observer_, "input_norm", l, stream);
        if (m.norm == Norm::LayerNorm)
          layer_norm(local_rows(h_, r), local_rows(x_, r), L.in_norm_w, L.in_norm_b, nrows,
                     static_cast<int>(H), eps, opts_.dtype, stream);
        else
          rms_norm(local_rows(h_, r), local_rows(x_, r), L.in_norm_w, nrows, static_cast<int>(H),
                   eps, opts_.dtype, stream);
      }
      if (sp_) gather_rows("input_all_gather", l, h_.get(), r.rows, stream);
    }
    linear("qkv", l, row_ptr(h_, r, H), L.qkv_w, pitch(H), L.qkv_b, qkv, r.rows, W, H, stream);
  }
  if (m.qk_norm) {
    OpScope scope(observer_, "qk_norm", l, stream);
    rms_norm_heads(qkv, L.q_norm_w, r.rows, heads, m.head_dim, W, eps, opts_.dtype, stream);
    rms_norm_heads(qkv + Q * elem_, L.k_norm_w, r.rows, kv_heads, m.head_dim, W, eps, opts_.dtype,
                   stream);
  }
  unsigned char* const k_cache = cache_ptr(L.k_cache, r);
  unsigned char* const v_cache = cache_ptr(L.v_cache, r);
  const bool rotary = m.positions == Positions::Rope;
  AttentionArgs a;
  a.q = qkv;
  a.k = k_cache;
  a.v = v_cache;
  a.out = row_ptr(attn_, r, Q);
  a.dtype = attn_dtype(opts_.dtype);
  a.batch = r.batch;
  a.q_tokens = r.tokens;
  a.heads = heads;
  a.kv_heads = kv_heads;
  a.head_dim = m.head_dim;
  a.q_pos0 = r.pos0;
  a.max_context = opts_.max_context;
  a.q_stride = W;
  a.kv_stride = kv_pitch_;
  // A decode step's RoPE and cache write run inside the attention kernel (timed as attention).
  const bool append = decode && decode_append_supported(a);
  if (append) {
    a.k_new = qkv + Q * elem_;
    a.v_new = qkv + (Q + KV) * elem_;
    a.rope = rotary;
    a.rope_theta = static_cast<float>(m.rope_theta);
  } else {
    // RoPE on q and k, k and v into the caches: one kernel.
    OpScope scope(observer_, rotary ? "rope_kv_cache" : "kv_write", l, stream);
    qkv_to_cache(qkv, r.rows, r.tokens, heads, kv_heads, m.head_dim, W,
                 positions_.as<std::int32_t>() + r.row0, rotary, static_cast<float>(m.rope_theta),
                 k_cache, v_cache, opts_.max_context, kv_pitch_, opts_.dtype, stream);
  }
  {
    OpScope scope(observer_, "attention", l, stream);
    if (decode) {
      // The fused step's output GEMV loads its weights while attention runs (fused_layer).
      a.merge_launches_next = fused_;
      // Earlier cache rows may be loaded before the previous kernel ends only in a captured step,
      // where just earlier steps and the prefill, all before the graph's launch, wrote them; in
      // eager steps a programmatic launch chain reaches back over the step before.
      a.cache_ready = stream_capturing(stream);
      attention_fills_wave_ = decode_attention_fills_wave(a, sm_count_);
      decode_attention(a, decode_attention_splits(a, sm_count_), attn_ws_.get(), stream);
    } else {
      if (l == 0) {  // every layer has the same shapes (each chunk its own)
        attention_path_ = attention_->prepare(a);
        attention_note_ = attention_->note();
        if (attention_path_.empty()) throw InputError("--attention cudnn: " + attention_note_);
      }
      attention_->run(a, stream);
    }
  }
  if (fused_) return;  // the output projection and its residual add are one fused GEMV
  // Row-parallel: each rank's partial sum; the bias is added once, after the sum.
  const bool split = opts_.tp_size > 1;
  linear("attn_out", l, row_ptr(attn_, r, Q), L.out_w, pitch(Q), split ? nullptr : L.out_b,
         row_ptr(tmp_, r, H), r.rows, H, Q, stream);
}

void Transformer::sum_partials(const char* all_reduce_op, const char* reduce_scatter_op, int l,
                               const Rows& r, const void* bias, cudaStream_t stream) {
  if (sp_)
    scatter_rows(reduce_scatter_op, l, tmp_.get(), bias, r.rows, stream);
  else if (opts_.tp_size > 1)
    reduce_rows(all_reduce_op, l, row_ptr(tmp_, r, model_.hidden_size), bias, r.rows, stream);
}

void Transformer::residual_norm(const char* op, const char* gather_op, int l, const Rows& r,
                                const void* w, const void* b, cudaStream_t stream) {
  const ModelConfig& m = model_;
  const std::int64_t nrows = sp_ ? r.rows / opts_.tp_size : r.rows;
  const int H = static_cast<int>(m.hidden_size);
  const float eps = static_cast<float>(m.norm_eps);
  {
    OpScope scope(observer_, op, l, stream);
    if (m.norm == Norm::LayerNorm)
      add_layer_norm(local_rows(x_, r), local_rows(h_, r), local_rows(tmp_, r), w, b, nrows, H, eps,
                     opts_.dtype, stream);
    else
      add_rms_norm(local_rows(x_, r), local_rows(h_, r), local_rows(tmp_, r), w, nrows, H, eps,
                   opts_.dtype, stream);
  }
  if (sp_) gather_rows(gather_op, l, h_.get(), r.rows, stream);
}

void Transformer::mlp_part(int l, const Rows& r, cudaStream_t stream) {
  const ModelConfig& m = model_;
  const Layer& L = *layer_[static_cast<std::size_t>(l)];
  const std::int64_t H = m.hidden_size, I = shard_.intermediate;
  const std::int64_t up_rows = m.gated_mlp ? 2 * I : I;
  // x += attention output; h = post-attention norm of x.
  residual_norm("residual_norm", "attn_all_gather", l, r, L.post_norm_w, L.post_norm_b, stream);
  unsigned char* const mlp = row_ptr(mlp_, r, up_rows);
  unsigned char* const act = row_ptr(act_, r, I);
  linear(m.gated_mlp ? "mlp_gate_up" : "mlp_up", l, row_ptr(h_, r, H), L.up_w, pitch(H), L.up_b,
         mlp, r.rows, up_rows, H, stream);
  {
    OpScope scope(observer_, "mlp_act", l, stream);
    if (m.gated_mlp)
      swiglu(act, mlp, r.rows, static_cast<int>(I), opts_.dtype, stream);
    else if (m.activation == Activation::Relu)
      relu(act, mlp, r.rows * I, opts_.dtype, stream);
    else
      gelu(act, mlp, r.rows * I, m.activation == Activation::GeluTanh, opts_.dtype, stream);
  }
  linear("mlp_down", l, act, L.down_w, pitch(I), opts_.tp_size > 1 ? nullptr : L.down_b,
         row_ptr(tmp_, r, H), r.rows, H, I, stream);
}

void Transformer::layer_end(int l, const Rows& r, cudaStream_t stream) {
  if (l + 1 < layers_) {
    // x += MLP output; h = the next layer's input norm of x.
    const Layer& next = *layer_[static_cast<std::size_t>(l + 1)];
    residual_norm("mlp_residual_norm", "mlp_all_gather", l, r, next.in_norm_w, next.in_norm_b,
                  stream);
  } else {
    OpScope scope(observer_, "residual", l, stream);
    residual_add(local_rows(x_, r), local_rows(tmp_, r),
                 (sp_ ? r.rows / opts_.tp_size : r.rows) * model_.hidden_size, opts_.dtype, stream);
  }
}

}  // namespace gpubench::model
