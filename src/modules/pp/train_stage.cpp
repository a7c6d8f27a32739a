// TrainStage (train_stage.hpp), and what balances training stages: their parts' FLOPs, or
// their times measured on a GPU.
#include "gpubench/modules/pp/train_stage.hpp"

#include <algorithm>
#include <cmath>

#include "gpubench/core/measure.hpp"
#include "gpubench/kernels/training.cuh"
#include "gpubench/model/observe.hpp"

namespace gpubench::pp {

namespace {

constexpr std::uint64_t kTokenSeed = 57;  // microbatch mb's prompts: seed kTokenSeed + mb
constexpr std::uint64_t kWeightSeed = 7;

GemmDtype gemm_dtype_of(ActDtype d) {
  return d == ActDtype::BF16 ? GemmDtype::Bf16 : GemmDtype::Fp16;
}

}  // namespace

TrainStage::TrainStage(const Settings& s, int device, std::vector<int> chunk_first,
                       std::vector<int> chunk_blocks, bool first_stage, bool last_stage,
                       std::int64_t seqs)
    : s_(s),
      m_(s.model),
      device_(device),
      first_(std::move(chunk_first)),
      blocks_(std::move(chunk_blocks)),
      first_stage_(first_stage),
      last_stage_(last_stage),
      seqs_(seqs),
      rows_(seqs * s.seq_len),
      dtype_(s.dtype == "fp16" ? ActDtype::F16 : ActDtype::BF16),
      eb_(static_cast<std::int64_t>(act_bytes(dtype_))),
      row_(saved_row(s.model)),
      attention_(device, model::AttentionPath::Auto) {
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

void TrainStage::build(int microbatches, cudaStream_t st) {
  const std::int64_t H = m_.hidden_size, Q = m_.q_dim(), KV = m_.kv_dim(), I = m_.intermediate_size,
                     V = m_.vocab_size, R = rows_;
  const std::int64_t U = m_.gated_mlp ? 2 * I : I;
  ws_ = DeviceBuffer(device_, gemm_workspace_bytes(9));
  for (std::size_t c = 0; c < blocks_.size(); ++c) {
    for (int i = 0; i < blocks_[c]; ++i) {
      const int k = first_[c] + i;
      const std::uint64_t g = static_cast<std::uint64_t>(k / 2);
      TrainBlock B;
      B.attention = k % 2 == 0;
      if (B.attention) {
        make_linear(B.in, Q + 2 * KV, H, 100 * g + 1, st);
        make_linear(B.out, H, Q, 100 * g + 2, st);
      } else {
        make_linear(B.in, U, H, 100 * g + 3, st);
        make_linear(B.out, H, I, 100 * g + 4, st);
      }
      B.norm = ones(H, st);
      blocks_w_.push_back(std::move(B));
    }
  }
  if (first_stage_) {
    embed_ = scratch(V * H);
    fill_weight(embed_.get(), V, static_cast<int>(H), 0, 0, H, kWeightSeed, 1, 1.0f, dtype_, st);
    ids_ = DeviceBuffer(device_, static_cast<std::size_t>(microbatches * R) * 4);
    for (int mb = 0; mb < microbatches; ++mb)
      fill_tokens(ids_.as<std::int32_t>() + mb * R, R, static_cast<int>(V), kTokenSeed + mb, st);
  }
  if (last_stage_) {
    make_linear(head_, V, H, 2, st);
    nf_ = ones(H, st);
    logits_ = scratch(R * V);
  }
  // Scratch of one microbatch: the gradient's pieces inside a layer.
  d_act_ = scratch(R * U);
  d_up_ = scratch(R * U);
  d_xn_ = scratch(R * H);
  d_attn_ = scratch(R * Q);
  // The q|k|v gradient the attention backward would produce: a fixed random one of its shape
  // (the stand-in's own output goes to d_attn_); the GEMMs after it see real-looking values.
  d_qkv_ = scratch(R * (Q + 2 * KV));
  fill_weight(d_qkv_.get(), R, static_cast<int>(Q + 2 * KV), 0, 0, Q + 2 * KV, kWeightSeed, 3, 1.0f,
              dtype_, st);
  attention_.prepare(attention_args(false));
  if (m_.num_heads % 2 == 0) attention_.prepare(attention_args(true));
  GPB_CUDA_CHECK(cudaStreamSynchronize(st));
}

std::uint64_t TrainStage::peak_slab_bytes(const std::vector<Op>& order) const {
  std::uint64_t held = 0, peak = 0;
  for (const Op& op : order) {
    held = op.forward ? held + slab_bytes(op.chunk) : held - slab_bytes(op.chunk);
    peak = std::max(peak, held);
  }
  return peak;
}

std::uint64_t TrainStage::planned_bytes(int microbatches, const std::vector<Op>& order) const {
  const std::int64_t H = m_.hidden_size, Q = m_.q_dim(), KV = m_.kv_dim(), I = m_.intermediate_size,
                     V = m_.vocab_size, R = rows_;
  const std::int64_t U = m_.gated_mlp ? 2 * I : I;
  std::int64_t elems = 0, largest = 0;  // elements of dtype_; the largest weight
  const auto linear = [&](std::int64_t out, std::int64_t in) {
    elems += 2 * out * in;
    largest = std::max(largest, out * in);
  };
  for (std::size_t c = 0; c < blocks_.size(); ++c)
    for (int i = 0; i < blocks_[c]; ++i) {
      if ((first_[c] + i) % 2 == 0) {
        linear(Q + 2 * KV, H);
        linear(H, Q);
      } else {
        linear(U, H);
        linear(H, I);
      }
      elems += H;
    }
  std::uint64_t bytes = 0;
  if (first_stage_) {
    elems += V * H;
    bytes += static_cast<std::uint64_t>(microbatches * R) * 4;
  }
  if (last_stage_) {
    linear(V, H);
    elems += H + R * V;
  }
  elems += R * (2 * U + H + Q + Q + 2 * KV) + largest;
  return bytes + static_cast<std::uint64_t>(elems * eb_) + gemm_workspace_bytes(9) +
         peak_slab_bytes(order);
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
      B.in.fwd.run(B.in.w.get(), xn, qkv, ws_.get(), st);
      AttentionArgs a = attention_args(false);
      set_qkv(a, qkv, attn);
      attention_.run(a, st);
      B.out.fwd.run(B.out.w.get(), attn, y, ws_.get(), st);
    } else {
      unsigned char* up = at(slab, o, row_.up);
      unsigned char* act = at(slab, o, row_.act);
      B.in.fwd.run(B.in.w.get(), xn, up, ws_.get(), st);
      if (m_.gated_mlp)
        swiglu(act, up, R, static_cast<int>(I), dtype_, st);
      else
        gelu(act, up, R * I, true, dtype_, st);
      B.out.fwd.run(B.out.w.get(), act, y, ws_.get(), st);
    }
    residual_add(y, x, R * H, dtype_, st);
  }
  if (has_head(c)) {
    unsigned char* xf = at(slab, off.back(), 0);
    unsigned char* xnf = xf + R * H * eb_;
    rms_norm(xnf, xf, nf_.get(), R, static_cast<int>(H), eps(), dtype_, st);
    head_.fwd.run(head_.w.get(), xnf, logits_.get(), ws_.get(), st);
  }
}

void TrainStage::backward(int c, unsigned char* slab, void* grad, cudaStream_t st, bool accumulate,
                          GemmCheckTally* tally, cudaEvent_t near_end) {
  const std::int64_t H = m_.hidden_size, R = rows_, I = m_.intermediate_size;
  const auto& off = offsets_[static_cast<std::size_t>(c)];
  const int n = blocks_[static_cast<std::size_t>(c)];
  if (has_head(c)) {
    unsigned char* xf = at(slab, off.back(), 0);
    unsigned char* xnf = xf + R * H * eb_;
    head_.dx.run(head_.w.get(), logits_.get(), d_xn_.get(), ws_.get(), st);
    head_.dw.run(xnf, logits_.get(), head_.grad.get(), ws_.get(), st, accumulate);
    GPB_CUDA_CHECK(cudaMemsetAsync(grad, 0, static_cast<std::size_t>(R * H * eb_), st));
    rms_norm_backward(grad, xf, nf_.get(), d_xn_.get(), R, static_cast<int>(H), eps(), dtype_, st);
  }
  for (int i = n - 1; i >= 0; --i) {
    if (near_end && i == 0) GPB_CUDA_CHECK(cudaEventRecord(near_end, st));
    TrainBlock& B = block(c, i);
    const std::int64_t o = off[static_cast<std::size_t>(i)];
    unsigned char* x = at(slab, o, 0);
    unsigned char* xn = at(slab, o, row_.xn);
    void* d_in = nullptr;  // the gradient of the input linear's output
    if (B.attention) {
      // Out projection, the stand-in, qkv.
      B.out.dx.run(B.out.w.get(), grad, d_attn_.get(), ws_.get(), st);
      B.out.dw.run(at(slab, o, row_.attn), grad, B.out.grad.get(), ws_.get(), st, accumulate);
      attention_backward_stand_in(at(slab, o, row_.qkv), st);
      d_in = d_qkv_.get();
    } else {
      // Down, activation, up.
      unsigned char* up = at(slab, o, row_.up);
      B.out.dx.run(B.out.w.get(), grad, d_act_.get(), ws_.get(), st);
      B.out.dw.run(at(slab, o, row_.act), grad, B.out.grad.get(), ws_.get(), st, accumulate);
      if (m_.gated_mlp)
        swiglu_backward(d_up_.get(), up, d_act_.get(), R, static_cast<int>(I), dtype_, st);
      else
        gelu_tanh_backward(d_up_.get(), up, d_act_.get(), R * I, dtype_, st);
      d_in = d_up_.get();
    }
    B.in.dx.run(B.in.w.get(), d_in, d_xn_.get(), ws_.get(), st);
    B.in.dw.run(xn, d_in, B.in.grad.get(), ws_.get(), st, accumulate);
    if (tally && i == 0) check_linear(B.in, xn, d_in, tally, st);
    // The block's norm, into the residual's gradient.
    rms_norm_backward(grad, x, B.norm.get(), d_xn_.get(), R, static_cast<int>(H), eps(), dtype_,
                      st);
  }
}

bool TrainStage::gradients_finite() const {
  for (const TrainBlock& B : blocks_w_)
    for (const TrainLinear* t : {&B.in, &B.out}) {
      const auto v = model::to_host_values(t->grad.get(), 4096, dtype_);
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

void TrainStage::make_linear(TrainLinear& t, std::int64_t out, std::int64_t in, std::uint64_t id,
                             cudaStream_t st) {
  t.out = out;
  t.in = in;
  const auto bytes = static_cast<std::size_t>(out * in * eb_);
  t.w = DeviceBuffer(device_, bytes);
  t.grad = DeviceBuffer(device_, bytes);
  fixed_ += 2 * bytes;
  fill_weight(t.w.get(), out, static_cast<int>(in), 0, 0, in, kWeightSeed, id,
              1.0f / std::sqrt(static_cast<float>(in)), dtype_, st);
  GPB_CUDA_CHECK(cudaMemsetAsync(t.grad.get(), 0, bytes, st));
  t.fwd = plan(GemmShape{out, rows_, in, true, false});
  t.dx = plan(GemmShape{in, rows_, out, false, false});
  t.dw = plan(GemmShape{in, out, rows_, false, true});
}

AttentionArgs TrainStage::attention_args(bool half) const {
  AttentionArgs a;
  a.dtype = dtype_ == ActDtype::BF16 ? AttnDtype::BF16 : AttnDtype::F16;
  a.batch = static_cast<int>(seqs_);
  a.q_tokens = static_cast<int>(s_.seq_len);
  a.max_context = static_cast<int>(s_.seq_len);
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
  dx.a = t.w.get();
  dx.b = dy;
  dx.d = d_xn_.get();
  dx.entries = 4096;
  check_gemm(dx, tally, st);
  // The weight gradient alone (not accumulated) into a buffer of its own.
  if (!check_ || check_.bytes() < t.grad.bytes()) check_ = DeviceBuffer(device_, t.grad.bytes());
  void* dst = check_.get();
  t.dw.run(x, dy, dst, ws_.get(), st);
  GemmCheckArgs dw = dx;
  dw.shape = t.dw.plan->shape();
  dw.a = x;
  dw.b = dy;
  dw.d = dst;
  check_gemm(dw, tally, st);
}

StageCosts training_flop_costs(const Settings& s) {
  auto flops = [&](int blocks, bool head) {
    const StageWork w = stage_work_blocks(s.model, 0, blocks, head, 1, s.seq_len, 2);
    return w.forward_flops + w.backward_flops;
  };
  StageCosts c;
  c.layer = flops(2, false);
  c.attention = flops(1, false);
  c.head = flops(2, true) - c.layer;
  return c;
}

std::vector<int> training_stage_blocks(const Settings& s, int p, Schedule sch,
                                       const StageCosts& costs) {
  if (sch == Schedule::Interleaved) {
    // Every chunk alike: layers / (p x chunks) each (resolve_settings checked that it divides).
    return std::vector<int>(static_cast<std::size_t>(p), 2 * (s.layers / p));
  }
  // The embedding on the first stage, the LM head's forward and backward on the last.
  if (s.half_layers) return stage_blocks_from_costs(costs, s.layers, p);
  return blocks_of_layers(stages_from_costs(costs, s.layers, p));
}

std::vector<int> training_stage_blocks(const Settings& s, int p, Schedule sch) {
  return training_stage_blocks(s, p, sch, training_flop_costs(s));
}

StageCosts measure_training_costs(const Settings& s, int device, cudaStream_t stream) {
  const int two = std::min(2, s.layers);
  // The forward and backward of one sequence through a stage of the embedding, `blocks`
  // half-layers and (with `head`) the final norm and LM head: the median of 11 after one to
  // warm up, through the core's measurement.
  MeasureOptions mo;
  mo.warmup = 1;
  mo.fixed_iters = 11;
  mo.l2 = L2Policy::Hot;
  Measurer measurer(device);
  auto time_stage = [&](int blocks, bool head) {
    TrainStage ts(s, device, {0}, {blocks}, true, head, 1);
    ts.build(1, stream);
    DeviceBuffer out(device, ts.transfer_bytes()), grad(device, ts.transfer_bytes());
    GPB_CUDA_CHECK(cudaMemsetAsync(grad.get(), 0, grad.bytes(), stream));
    auto pass = [&](cudaStream_t s2, int) {
      unsigned char* slab = ts.allocate(0, s2);
      ts.forward(0, 0, slab, head ? nullptr : out.get(), s2);
      ts.backward(0, slab, grad.get(), s2, false, nullptr);
      TrainStage::release(slab, s2);
    };
    return measurer.run(stream, pass, mo).median_s();
  };
  const double one = time_stage(2, false), one_head = time_stage(2, true);
  // Differences of medians: the small parts (the embedding above all) can come out a little
  // below zero from run-to-run noise; they count as free then, and a layer as `one` at worst.
  StageCosts c;
  const double layer = two > 1 ? time_stage(4, true) - one_head : one;
  c.layer = layer > 0 ? layer : one;
  c.head = std::max(0.0, one_head - one);
  c.embed = two > 1 ? std::max(0.0, one - c.layer) : 0.0;
  // The attention half: 1.5 layers less 1; by the FLOPs' share where that is lost in noise.
  const double attention = two > 1 ? time_stage(3, true) - one_head : 0.0;
  const StageCosts by_flops = training_flop_costs(s);
  c.attention = attention > 0 && attention < c.layer
                    ? attention
                    : c.layer * by_flops.attention / by_flops.layer;
  c.measured = true;
  return c;
}

}  // namespace gpubench::pp
