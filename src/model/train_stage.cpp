// TrainStage (train_stage.hpp): a training stage's weights, its forward and backward of a
// microbatch, what it allocates.
#include "gpubench/model/train_stage.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "gpubench/core/errors.hpp"
#include "gpubench/kernels/training.cuh"
#include "gpubench/model/observe.hpp"

namespace gpubench::model {

namespace {

constexpr std::uint64_t kTokenSeed = 57;  // sequence g's tokens: seed kTokenSeed + g
constexpr std::uint64_t kWeightSeed = 7;

GemmDtype gemm_dtype_of(ActDtype d) {
  return d == ActDtype::BF16 ? GemmDtype::Bf16 : GemmDtype::Fp16;
}

}  // namespace

TrainStage::TrainStage(const TrainShape& shape, int device, std::vector<int> chunk_first,
                       std::vector<int> chunk_blocks, bool first_stage, bool last_stage,
                       std::int64_t seqs)
    : shape_(shape),
      m_(shape_.model),
      device_(device),
      first_(std::move(chunk_first)),
      blocks_(std::move(chunk_blocks)),
      first_stage_(first_stage),
      last_stage_(last_stage),
      seqs_(seqs),
      rows_(seqs * shape_.seq_len),
      dtype_(shape_.dtype),
      eb_(static_cast<std::int64_t>(act_bytes(dtype_))),
      row_(saved_row(shape_.model)),
      attention_(device, AttentionPath::Auto) {
  // Where each block's saved tensors start in a chunk's slab (elements a row), then the end.
  for (std::size_t c = 0; c < blocks_.size(); ++c) {
    std::vector<std::int64_t> at{0};
    for (int i = 0; i < blocks_[c]; ++i) at.push_back(at.back() + row_.of(first_[c] + i));
    offsets_.push_back(std::move(at));
  }
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  GPB_CUDA_CHECK(cudaMemPoolCreate(&pool_, &props));
  std::uint64_t keep = ~0ull;  // keep what was reserved: no release between steps
  GPB_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));
}
TrainStage::~TrainStage() {
  if (pool_) (void)cudaMemPoolDestroy(pool_);
}

int TrainStage::units() const {
  int n = 0;
  for (int b : blocks_) n += b;
  return n + (last_stage_ ? 1 : 0);
}

std::vector<TrainParam> TrainStage::params() const {
  const std::int64_t H = m_.hidden_size, Q = m_.q_dim(), KV = m_.kv_dim(), I = m_.intermediate_size;
  const std::int64_t U = m_.gated_mlp ? 2 * I : I;
  std::vector<TrainParam> out;
  int unit = 0;
  for (std::size_t c = 0; c < blocks_.size(); ++c)
    for (int i = 0; i < blocks_[c]; ++i, ++unit) {
      if ((first_[c] + i) % 2 == 0) {
        out.push_back({unit, Q + 2 * KV, H});
        out.push_back({unit, H, Q});
      } else {
        out.push_back({unit, U, H});
        out.push_back({unit, H, I});
      }
    }
  if (last_stage_) out.push_back({unit, m_.vocab_size, H});
  return out;
}

TrainLinear& TrainStage::linear(int i) {
  const auto n = static_cast<int>(2 * blocks_w_.size());
  if (i < 0 || i > n || (i == n && !last_stage_))
    throw InputError(fmt::format("training stage: no parameter {}", i));
  if (i == n) return head_;
  TrainBlock& B = blocks_w_[static_cast<std::size_t>(i / 2)];
  return i % 2 == 0 ? B.in : B.out;
}

std::uint64_t TrainStage::weight_id(int i) const {
  const auto n = static_cast<int>(2 * blocks_w_.size());
  if (i == n) return 2;  // the head
  int unit = i / 2, c = 0;
  while (unit >= blocks_[static_cast<std::size_t>(c)])
    unit -= blocks_[static_cast<std::size_t>(c++)];
  const int k = first_[static_cast<std::size_t>(c)] + unit;
  const std::uint64_t g = static_cast<std::uint64_t>(k / 2);
  return 100 * g + (k % 2 == 0 ? 1 : 3) + static_cast<std::uint64_t>(i % 2);
}

void TrainStage::init_param(int i, void* dst, cudaStream_t st) const {
  const TrainLinear& t = linear(i);
  fill_weight(dst, t.out, static_cast<int>(t.in), 0, 0, t.in, kWeightSeed, weight_id(i),
              1.0f / std::sqrt(static_cast<float>(t.in)), dtype_, st);
}

void TrainStage::place(int i, void* w, void* grad) {
  TrainLinear& t = linear(i);
  t.w = w;
  t.grad = grad;
}

void TrainStage::build(int microbatches, cudaStream_t st, bool own_params,
                       std::int64_t first_sequence) {
  const std::int64_t H = m_.hidden_size, Q = m_.q_dim(), KV = m_.kv_dim(), I = m_.intermediate_size,
                     V = m_.vocab_size, R = rows_;
  const std::int64_t U = m_.gated_mlp ? 2 * I : I;
  ws_ = DeviceBuffer(device_, gemm_workspace_bytes(9));
  for (std::size_t c = 0; c < blocks_.size(); ++c) {
    for (int i = 0; i < blocks_[c]; ++i) {
      TrainBlock B;
      B.attention = (first_[c] + i) % 2 == 0;
      if (B.attention) {
        make_linear(B.in, Q + 2 * KV, H, own_params, st);
        make_linear(B.out, H, Q, own_params, st);
      } else {
        make_linear(B.in, U, H, own_params, st);
        make_linear(B.out, H, I, own_params, st);
      }
      B.norm = ones(H, st);
      blocks_w_.push_back(std::move(B));
    }
  }
  if (first_stage_) {
    embed_ = scratch(V * H);
    fill_weight(embed_.get(), V, static_cast<int>(H), 0, 0, H, kWeightSeed, 1, 1.0f, dtype_, st);
    const std::int64_t seqs = microbatches * seqs_;
    ids_ = DeviceBuffer(device_, static_cast<std::size_t>(seqs * shape_.seq_len) * 4);
    for (std::int64_t q = 0; q < seqs; ++q)
      fill_tokens(ids_.as<std::int32_t>() + q * shape_.seq_len, shape_.seq_len, static_cast<int>(V),
                  kTokenSeed + static_cast<std::uint64_t>(first_sequence + q), st);
  }
  if (last_stage_) {
    make_linear(head_, V, H, own_params, st);
    nf_ = ones(H, st);
    logits_ = scratch(R * V);
  }
  if (own_params) {
    const auto n = static_cast<int>(params().size());
    for (int i = 0; i < n; ++i) init_param(i, linear(i).w, st);
  }
  // Scratch of one microbatch: the gradient's pieces inside a layer.
  d_act_ = scratch(R * U);
  d_up_ = scratch(R * U);
  d_xn_ = scratch(R * H);
  d_attn_ = scratch(R * Q);
  attention_.prepare(attention_args(false));
  if (m_.num_heads % 2 == 0) attention_.prepare(attention_args(true));
  GPB_CUDA_CHECK(cudaStreamSynchronize(st));
}

std::uint64_t TrainStage::planned_bytes(int microbatches, std::uint64_t peak_slab,
                                        bool own_params) const {
  const std::int64_t H = m_.hidden_size, Q = m_.q_dim(), I = m_.intermediate_size,
                     V = m_.vocab_size, R = rows_;
  const std::int64_t U = m_.gated_mlp ? 2 * I : I;
  std::int64_t elems = 0, largest = 0;  // elements of dtype_; the largest weight
  for (const TrainParam& p : params()) {
    if (own_params) elems += 2 * p.elems();
    largest = std::max(largest, p.elems());
  }
  for (int b : blocks_) elems += b * H;  // the norms
  std::uint64_t bytes = 0;
  if (first_stage_) {
    elems += V * H;
    bytes += static_cast<std::uint64_t>(microbatches * R) * 4;
  }
  if (last_stage_) elems += H + R * V;
  elems += R * (2 * U + H + Q) + largest;
  return bytes + static_cast<std::uint64_t>(elems * eb_) + gemm_workspace_bytes(9) + peak_slab;
}

void TrainStage::forward(int c, int mb, unsigned char* slab, void* out, cudaStream_t st,
                         cudaEvent_t near_end) {
  const std::int64_t H = m_.hidden_size, R = rows_, I = m_.intermediate_size;
  if (has_embed(c))
    embedding_lookup(input_of(slab), embed_.get(), ids_.as<std::int32_t>() + mb * R, R,
                     static_cast<int>(H), nullptr, nullptr, dtype_, st);
  const auto& off = offsets_[static_cast<std::size_t>(c)];
  const int n = blocks_[static_cast<std::size_t>(c)];
  for (int i = 0; i < n; ++i) {
    if (near_end && i + 1 == n) GPB_CUDA_CHECK(cudaEventRecord(near_end, st));
    hook(&TrainHooks::before_forward, unit_of(c, i), st);
    const TrainBlock& B = block(c, i);
    const std::int64_t o = off[static_cast<std::size_t>(i)];
    unsigned char* x = at(slab, o, 0);
    unsigned char* xn = at(slab, o, row_.xn);
    // The block's output: the next block's saved input, the final norm's input or the
    // chunk's output.
    const std::int64_t next = off[static_cast<std::size_t>(i) + 1];
    void* y = i + 1 < n || has_head(c) ? static_cast<void*>(at(slab, next, 0)) : out;
    rms_norm(xn, x, B.norm.get(), R, static_cast<int>(H), eps(), dtype_, st);
    if (B.attention) {
      unsigned char* qkv = at(slab, o, row_.qkv);
      unsigned char* attn = at(slab, o, row_.attn);
      B.in.fwd.run(B.in.w, xn, qkv, ws_.get(), st);
      AttentionArgs a = attention_args(false);
      set_qkv(a, qkv, attn);
      attention_.run(a, st);
      B.out.fwd.run(B.out.w, attn, y, ws_.get(), st);
    } else {
      unsigned char* up = at(slab, o, row_.up);
      unsigned char* act = at(slab, o, row_.act);
      B.in.fwd.run(B.in.w, xn, up, ws_.get(), st);
      if (m_.gated_mlp)
        swiglu(act, up, R, static_cast<int>(I), dtype_, st);
      else
        gelu(act, up, R * I, true, dtype_, st);
      B.out.fwd.run(B.out.w, act, y, ws_.get(), st);
    }
    residual_add(y, x, R * H, dtype_, st);
    hook(&TrainHooks::after_forward, unit_of(c, i), st);
  }
  if (has_head(c)) {
    const int unit = unit_of(c, n);
    hook(&TrainHooks::before_forward, unit, st);
    unsigned char* xf = at(slab, off.back(), 0);
    unsigned char* xnf = xf + R * H * eb_;
    rms_norm(xnf, xf, nf_.get(), R, static_cast<int>(H), eps(), dtype_, st);
    head_.fwd.run(head_.w, xnf, logits_.get(), ws_.get(), st);
    hook(&TrainHooks::after_forward, unit, st);
  }
}

void TrainStage::backward(int c, unsigned char* slab, void* grad, cudaStream_t st, bool accumulate,
                          GemmCheckTally* tally, cudaEvent_t near_end) {
  const std::int64_t H = m_.hidden_size, R = rows_, I = m_.intermediate_size;
  const auto& off = offsets_[static_cast<std::size_t>(c)];
  const int n = blocks_[static_cast<std::size_t>(c)];
  if (has_head(c)) {
    const int unit = unit_of(c, n);
    hook(&TrainHooks::before_backward, unit, st);
    unsigned char* xf = at(slab, off.back(), 0);
    unsigned char* xnf = xf + R * H * eb_;
    head_.dx.run(head_.w, logits_.get(), d_xn_.get(), ws_.get(), st);
    head_.dw.run(xnf, logits_.get(), head_.grad, ws_.get(), st, accumulate);
    hook(&TrainHooks::after_backward, unit, st);
    GPB_CUDA_CHECK(cudaMemsetAsync(grad, 0, static_cast<std::size_t>(R * H * eb_), st));
    rms_norm_backward(grad, xf, nf_.get(), d_xn_.get(), R, static_cast<int>(H), eps(), dtype_, st);
  }
  for (int i = n - 1; i >= 0; --i) {
    if (near_end && i == 0) GPB_CUDA_CHECK(cudaEventRecord(near_end, st));
    hook(&TrainHooks::before_backward, unit_of(c, i), st);
    TrainBlock& B = block(c, i);
    const std::int64_t o = off[static_cast<std::size_t>(i)];
    unsigned char* x = at(slab, o, 0);
    unsigned char* xn = at(slab, o, row_.xn);
    void* d_in = nullptr;  // the gradient of the input linear's output
    if (B.attention) {
      // Out projection, the stand-in, qkv.
      B.out.dx.run(B.out.w, grad, d_attn_.get(), ws_.get(), st);
      B.out.dw.run(at(slab, o, row_.attn), grad, B.out.grad, ws_.get(), st, accumulate);
      // The q|k|v gradient attention's backward would produce: stood in for by the saved q|k|v
      // itself, a function of each row's own data (so a batch split over replicas gives the
      // whole batch's gradients); the stand-in's output goes to d_attn_.
      unsigned char* qkv = at(slab, o, row_.qkv);
      attention_backward_stand_in(qkv, st);
      d_in = qkv;
    } else {
      // Down, activation, up.
      unsigned char* up = at(slab, o, row_.up);
      B.out.dx.run(B.out.w, grad, d_act_.get(), ws_.get(), st);
      B.out.dw.run(at(slab, o, row_.act), grad, B.out.grad, ws_.get(), st, accumulate);
      if (m_.gated_mlp)
        swiglu_backward(d_up_.get(), up, d_act_.get(), R, static_cast<int>(I), dtype_, st);
      else
        gelu_tanh_backward(d_up_.get(), up, d_act_.get(), R * I, dtype_, st);
      d_in = d_up_.get();
    }
    B.in.dx.run(B.in.w, d_in, d_xn_.get(), ws_.get(), st);
    B.in.dw.run(xn, d_in, B.in.grad, ws_.get(), st, accumulate);
    if (tally && i == 0) check_linear(B.in, xn, d_in, tally, st);
    // The block's norm, into the residual's gradient.
    rms_norm_backward(grad, x, B.norm.get(), d_xn_.get(), R, static_cast<int>(H), eps(), dtype_,
                      st);
    hook(&TrainHooks::after_backward, unit_of(c, i), st);
  }
}

bool TrainStage::gradients_finite() const {
  for (const TrainBlock& B : blocks_w_)
    for (const TrainLinear* t : {&B.in, &B.out}) {
      const auto v = to_host_values(t->grad, 4096, dtype_);
      for (double x : v)
        if (!std::isfinite(x)) return false;
    }
  return true;
}

DeviceBuffer TrainStage::ones(std::int64_t n, cudaStream_t st) {
  DeviceBuffer b(device_, static_cast<std::size_t>(n * eb_));
  fill_ones(b.get(), n, dtype_, st);
  fixed_ += b.bytes();
  return b;
}

Gemm TrainStage::plan(const GemmShape& shape) {
  Gemm g;
  g.plan = std::make_unique<GemmPlan>(handle_, gemm_dtype_of(dtype_), shape, ws_.bytes());
  g.algo = g.plan->candidates(1).front();
  return g;
}

void TrainStage::make_linear(TrainLinear& t, std::int64_t out, std::int64_t in, bool own,
                             cudaStream_t st) {
  t.out = out;
  t.in = in;
  if (own) {
    const auto bytes = static_cast<std::size_t>(out * in * eb_);
    t.own_w = DeviceBuffer(device_, bytes);
    t.own_grad = DeviceBuffer(device_, bytes);
    fixed_ += 2 * bytes;
    t.w = t.own_w.get();
    t.grad = t.own_grad.get();
    GPB_CUDA_CHECK(cudaMemsetAsync(t.grad, 0, bytes, st));
  }
  t.fwd = plan(GemmShape{out, rows_, in, true, false});
  t.dx = plan(GemmShape{in, rows_, out, false, false});
  t.dw = plan(GemmShape{in, out, rows_, false, true});
}

AttentionArgs TrainStage::attention_args(bool half) const {
  AttentionArgs a;
  a.dtype = dtype_ == ActDtype::BF16 ? AttnDtype::BF16 : AttnDtype::F16;
  a.batch = static_cast<int>(seqs_);
  a.q_tokens = static_cast<int>(shape_.seq_len);
  a.max_context = static_cast<int>(shape_.seq_len);
  a.heads = half ? m_.num_heads / 2 : m_.num_heads;
  a.kv_heads = half ? std::max(1, m_.num_kv_heads / 2) : m_.num_kv_heads;
  a.head_dim = m_.head_dim;
  a.q_stride = a.kv_stride = m_.q_dim() + 2 * m_.kv_dim();
  a.scale = 1.0f / std::sqrt(static_cast<float>(m_.head_dim));
  return a;
}

void TrainStage::set_qkv(AttentionArgs& a, unsigned char* qkv, void* out) const {
  a.q = qkv;
  a.k = qkv + m_.q_dim() * eb_;
  a.v = qkv + (m_.q_dim() + m_.kv_dim()) * eb_;
  a.out = out;
}

void TrainStage::attention_backward_stand_in(unsigned char* qkv, cudaStream_t st) {
  const bool halves =
      m_.num_heads % 2 == 0 && (m_.num_heads / 2) % std::max(1, m_.num_kv_heads / 2) == 0;
  for (int k = 0; k < 3; ++k) {
    AttentionArgs a = attention_args(k == 2 && halves);
    set_qkv(a, qkv, d_attn_.get());
    attention_.run(a, st);
  }
}

void TrainStage::check_linear(const TrainLinear& t, const void* x, const void* dy,
                              GemmCheckTally* tally, cudaStream_t st) {
  const GemmTolerance tol = gemm_tolerance(gemm_dtype_of(dtype_));
  const GemmElement e = gemm_type_info(gemm_dtype_of(dtype_)).a;
  GemmCheckArgs dx;
  dx.a_type = dx.b_type = dx.d_type = e;
  dx.shape = t.dx.plan->shape();
  dx.tolerance = tol;
  dx.a = t.w;
  dx.b = dy;
  dx.d = d_xn_.get();
  dx.entries = 4096;
  check_gemm(dx, tally, st);
  // The weight gradient alone (not accumulated) into a buffer of its own.
  const auto bytes = static_cast<std::size_t>(t.out * t.in * eb_);
  if (!check_ || check_.bytes() < bytes) check_ = DeviceBuffer(device_, bytes);
  void* dst = check_.get();
  t.dw.run(x, dy, dst, ws_.get(), st);
  GemmCheckArgs dw = dx;
  dw.shape = t.dw.plan->shape();
  dw.a = x;
  dw.b = dy;
  dw.d = dst;
  check_gemm(dw, tally, st);
}

}  // namespace gpubench::model
