// `gpubench pp` on the GPUs, training: one step of s.batch sequences in m microbatches through p
// pipeline stages (one GPU and one thread each, or one process each under MPI), in the order a
// schedule gives each stage (stage_order). Forward: the decoder layers' real GEMMs, attention
// (cuDNN's fused flash attention or gpubench's own), norms and activation; backward: the input
// and weight gradient GEMMs of every linear layer at their true shapes (weight gradients summed
// over the microbatches), the norms' and the activation's backward kernels, and attention's
// backward stood in for by flash-attention forwards of 2.5x its FLOPs. Activations go forward
// and gradients back over NCCL send/recv, each direction of each stage pair on a communicator
// and streams of its own, so that a transfer never waits behind the other direction.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <cuda.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>

#include "gemm_check.cuh"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/gemm.hpp"
#include "gpubench/core/nccl.hpp"
#include "gpubench/core/peers.hpp"
#include "gpubench/core/stats.hpp"
#include "gpubench/model/observe.hpp"
#include "gpubench/model/transformer.hpp"
#include "pp.hpp"
#include "training.cuh"

namespace gpubench::pp {

namespace {

constexpr std::uint64_t kTokenSeed = 57;  // microbatch mb's prompts: seed kTokenSeed + mb
constexpr std::uint64_t kWeightSeed = 7;
constexpr int kRing = 2;  // buffers per direction and side: a transfer overlaps the next op

GemmDtype gemm_dtype_of(ActDtype d) {
  return d == ActDtype::BF16 ? GemmDtype::Bf16 : GemmDtype::Fp16;
}
ncclDataType_t nccl_type_of(ActDtype d) {
  return d == ActDtype::BF16 ? ncclBfloat16 : ncclFloat16;
}

// The driver's stream memory operations (a 32-bit write, and a wait for a cyclic >=), found
// at run time so that nothing links the driver library.
struct StreamMemOps {
  CUresult (*write)(CUstream, CUdeviceptr, cuuint32_t, unsigned int) = nullptr;
  CUresult (*wait)(CUstream, CUdeviceptr, cuuint32_t, unsigned int) = nullptr;
};
const StreamMemOps& stream_mem_ops() {
  static const StreamMemOps ops = [] {
    StreamMemOps o;
    auto find = [](const char* name) {
      void* fn = nullptr;
      cudaDriverEntryPointQueryResult q{};
      GPB_CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q));
      if (q != cudaDriverEntryPointSuccess || fn == nullptr)
        throw GpuError(fmt::format("the driver has no {}", name));
      return fn;
    };
    o.write = reinterpret_cast<decltype(o.write)>(find("cuStreamWriteValue32"));
    o.wait = reinterpret_cast<decltype(o.wait)>(find("cuStreamWaitValue32"));
    return o;
  }();
  return ops;
}
// `stream` writes `value` to `flag` (on this GPU or a peer's) after what it ran before.
void write_flag(cudaStream_t stream, std::uint32_t* flag, std::uint32_t value) {
  const CUresult r = stream_mem_ops().write(reinterpret_cast<CUstream>(stream),
                                            reinterpret_cast<CUdeviceptr>(flag), value,
                                            CU_STREAM_WRITE_VALUE_DEFAULT);
  if (r != CUDA_SUCCESS)
    throw GpuError(fmt::format("cuStreamWriteValue32 failed: CUresult {}", static_cast<int>(r)));
}
// `stream` waits until `flag` (on this GPU) reaches `value` (cyclic >=).
void wait_flag(cudaStream_t stream, std::uint32_t* flag, std::uint32_t value) {
  const CUresult r =
      stream_mem_ops().wait(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(flag),
                            value, CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS)
    throw GpuError(fmt::format("cuStreamWaitValue32 failed: CUresult {}", static_cast<int>(r)));
}

// Copy-engine transfers (one process): what a stage shows its neighbours. Flags, on the stage's
// own GPU: [0] activations arrived in its forward receive ring, [1] its activation sends whose
// ring slot the next stage has released, [2] gradients arrived, [3] its gradient sends
// released by the previous stage. Counts only grow (cyclic compare).
struct CePeer {
  std::array<void*, kRing> frecv{}, brecv{};
  std::uint32_t* flags = nullptr;
  void* wake = nullptr;  // kWakeBytes a sender's link-waking copy lands in
  int device = -1;
};
// A peer copy that follows an idle stretch without any peer copy takes longer, whatever its
// size: the link has to wake up first (docs/DECISIONS.md). A copy of this many bytes, issued as
// the operation whose output is to be sent starts its last block, wakes it.
constexpr std::size_t kWakeBytes = std::size_t{2} << 20;

// A GEMM plan with the algorithm the heuristic ranks first.
struct Gemm {
  std::unique_ptr<GemmPlan> plan;
  GemmAlgo algo;
  void run(const void* a, const void* b, void* d, void* ws, cudaStream_t st,
           bool accumulate = false) const {
    plan->run(algo, a, b, d, ws, st, accumulate);
  }
};

// One linear layer Y[rows, out] = X[rows, in] W^T with its weight, its gradient and the three
// GEMMs (column-major terms): forward Y^T = W X^T (TN), input gradient dX^T = W^T dY^T (NN),
// weight gradient dW^T = X^T dY (NT).
struct TrainLinear {
  std::int64_t out = 0, in = 0;
  DeviceBuffer w, grad;
  Gemm fwd, dx, dw;
};

// A half-layer (see stage_blocks_from_costs): attention (in = qkv, out = the output projection)
// or MLP (in = gate|up or up, out = down), with its norm's weight (ones).
struct TrainBlock {
  bool attention = true;
  TrainLinear in, out;
  DeviceBuffer norm;
};

// A pipeline stage's part of the model for training: v chunks of half-layer blocks (the first
// chunk of stage 0 starts with the embedding, the last chunk of the last stage ends with the
// final norm and the LM head), the scratch of one microbatch and a memory pool for the saved
// activations of the microbatches in flight.
class TrainStage {
 public:
  TrainStage(const Settings& s, int device, std::vector<int> chunk_first,
             std::vector<int> chunk_blocks, bool first_stage, bool last_stage, std::int64_t seqs)
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
  ~TrainStage() {
    if (pool_) (void)cudaMemPoolDestroy(pool_);
  }
  TrainStage(const TrainStage&) = delete;
  TrainStage& operator=(const TrainStage&) = delete;

  // Weights (seeded per global layer and linear), gradients, scratch, the GEMM plans; the
  // microbatches' token ids on the first stage.
  void build(int microbatches, cudaStream_t st) {
    const std::int64_t H = m_.hidden_size, Q = m_.q_dim(), KV = m_.kv_dim(),
                       I = m_.intermediate_size, V = m_.vocab_size, R = rows_;
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
    fill_weight(d_qkv_.get(), R, static_cast<int>(Q + 2 * KV), 0, 0, Q + 2 * KV, kWeightSeed, 3,
                1.0f, dtype_, st);
    attention_.prepare(attention_args(false));
    if (m_.num_heads % 2 == 0) attention_.prepare(attention_args(true));
    GPB_CUDA_CHECK(cudaStreamSynchronize(st));
  }

  std::int64_t rows() const { return rows_; }
  std::uint64_t transfer_bytes() const {
    return static_cast<std::uint64_t>(rows_ * m_.hidden_size * eb_);
  }
  // Bytes saved per microbatch through chunk c.
  std::uint64_t slab_bytes(int c) const {
    std::int64_t elems = offsets_[static_cast<std::size_t>(c)].back();
    if (has_head(c)) elems += 2 * m_.hidden_size;  // the final norm's input and output
    return static_cast<std::uint64_t>(rows_ * elems * eb_);
  }
  std::uint64_t fixed_bytes() const { return fixed_; }
  // Saved activations held at once along a stage's `order`: each forward adds its chunk's slab,
  // each backward frees it.
  std::uint64_t peak_slab_bytes(const std::vector<Op>& order) const {
    std::uint64_t held = 0, peak = 0;
    for (const Op& op : order) {
      held = op.forward ? held + slab_bytes(op.chunk) : held - slab_bytes(op.chunk);
      peak = std::max(peak, held);
    }
    return peak;
  }
  // What build(microbatches) and a run along `order` allocate, before any of it is: weights and
  // gradients, norms, embedding and token ids (first stage), head and logits (last), the
  // microbatch's scratch, the GEMM workspace, the check's copy of a gradient and the saved
  // activations at their peak.
  std::uint64_t planned_bytes(int microbatches, const std::vector<Op>& order) const {
    const std::int64_t H = m_.hidden_size, Q = m_.q_dim(), KV = m_.kv_dim(),
                       I = m_.intermediate_size, V = m_.vocab_size, R = rows_;
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
  cudaMemPool_t pool() const { return pool_; }
  std::uint64_t pool_high() const {
    std::uint64_t v = 0;
    GPB_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &v));
    return v;
  }
  void reset_pool_high() const {
    std::uint64_t zero = 0;
    GPB_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero));
  }
  bool has_embed(int c) const { return first_stage_ && c == 0; }
  bool has_head(int c) const { return last_stage_ && c + 1 == static_cast<int>(blocks_.size()); }

  // Saved activations of one microbatch through chunk c, from the pool, in stream order.
  unsigned char* allocate(int c, cudaStream_t st) {
    void* p = nullptr;
    GPB_CUDA_CHECK(cudaMallocFromPoolAsync(&p, slab_bytes(c), pool_, st));
    return static_cast<unsigned char*>(p);
  }
  static void release(unsigned char* slab, cudaStream_t st) {
    GPB_CUDA_CHECK(cudaFreeAsync(slab, st));
  }

  // Where chunk c's input goes in its slab ([rows, H]): copied there from the receive buffer,
  // or written by the embedding.
  unsigned char* input_of(unsigned char* slab) const { return at(slab, 0, 0); }

  // Forward of microbatch mb through chunk c: the embedding first on the first chunk of stage 0
  // (else the input is in the slab already), every block, the output into `out` (not on the
  // model's last chunk, whose LM head writes logits_).
  // `near_end` (if any) is recorded as the last block starts.
  void forward(int c, int mb, unsigned char* slab, void* out, cudaStream_t st,
               cudaEvent_t near_end = nullptr) {
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

  // Backward of microbatch mb through chunk c: from `grad` [rows, H] (received; on the model's
  // last chunk the logits stand in for the loss gradient), block by block in reverse; the
  // gradient of the chunk's input is left in `grad` (sent on unless this is the first chunk of
  // stage 0). Weight gradients accumulate. With `check`, the input-gradient GEMM and a fresh
  // copy of the weight-gradient GEMM of the chunk's first block's input linear (qkv, or the
  // MLP's up projection) are checked against a reference (tallies in `tally`) before the slab
  // goes. `near_end` (if any) is recorded as the last block (the chunk's first) starts.
  void backward(int c, unsigned char* slab, void* grad, cudaStream_t st, bool accumulate,
                GemmCheckTally* tally, cudaEvent_t near_end = nullptr) {
    const std::int64_t H = m_.hidden_size, R = rows_, I = m_.intermediate_size;
    const auto& off = offsets_[static_cast<std::size_t>(c)];
    const int n = blocks_[static_cast<std::size_t>(c)];
    if (has_head(c)) {
      unsigned char* xf = at(slab, off.back(), 0);
      unsigned char* xnf = xf + R * H * eb_;
      head_.dx.run(head_.w.get(), logits_.get(), d_xn_.get(), ws_.get(), st);
      head_.dw.run(xnf, logits_.get(), head_.grad.get(), ws_.get(), st, accumulate);
      GPB_CUDA_CHECK(cudaMemsetAsync(grad, 0, static_cast<std::size_t>(R * H * eb_), st));
      rms_norm_backward(grad, xf, nf_.get(), d_xn_.get(), R, static_cast<int>(H), eps(), dtype_,
                        st);
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

  // The first 4096 entries of every weight gradient of the stage are finite.
  bool gradients_finite() const {
    for (const TrainBlock& B : blocks_w_)
      for (const TrainLinear* t : {&B.in, &B.out}) {
        const auto v = model::to_host_values(t->grad.get(), 4096, dtype_);
        for (double x : v)
          if (!std::isfinite(x)) return false;
      }
    return true;
  }

 private:
  float eps() const { return static_cast<float>(m_.norm_eps); }
  TrainBlock& block(int c, int i) {
    int k = 0;
    for (int j = 0; j < c; ++j) k += blocks_[static_cast<std::size_t>(j)];
    return blocks_w_[static_cast<std::size_t>(k + i)];
  }
  // A saved tensor of a slab: `col` elements a row into the block whose tensors start at
  // `offset` (each tensor is [rows, width], one after another).
  unsigned char* at(unsigned char* slab, std::int64_t offset, std::int64_t col) const {
    return slab + (offset + col) * rows_ * eb_;
  }
  // Elements that stay for the run (counted in fixed_bytes()).
  DeviceBuffer scratch(std::int64_t elems) {
    DeviceBuffer b(device_, static_cast<std::size_t>(elems * eb_));
    fixed_ += b.bytes();
    return b;
  }
  DeviceBuffer ones(std::int64_t n, cudaStream_t st) {
    DeviceBuffer b(device_, static_cast<std::size_t>(n * eb_));
    fill_ones(b.get(), n, dtype_, st);
    fixed_ += b.bytes();
    return b;
  }
  Gemm plan(const GemmShape& shape) {
    Gemm g;
    g.plan = std::make_unique<GemmPlan>(handle_, gemm_dtype_of(dtype_), shape, ws_.bytes());
    g.algo = g.plan->candidates(1).front();
    return g;
  }
  void make_linear(TrainLinear& t, std::int64_t out, std::int64_t in, std::uint64_t id,
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
  // Causal attention of a microbatch straight from the fused q|k|v rows; `half`: half the
  // heads (and KV heads), for the stand-in's last half pass.
  AttentionArgs attention_args(bool half) const {
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
  void set_qkv(AttentionArgs& a, unsigned char* qkv, void* out) const {
    a.q = qkv;
    a.k = qkv + m_.q_dim() * eb_;
    a.v = qkv + (m_.q_dim() + m_.kv_dim()) * eb_;
    a.out = out;
  }
  // Attention's backward stood in for by 2.5x its forward FLOPs of the same kernels: two
  // forwards over every head and one over half of them (three whole ones when the heads are
  // odd), on the saved q, k, v, into d_attn_.
  void attention_backward_stand_in(unsigned char* qkv, cudaStream_t st) {
    const bool halves =
        m_.num_heads % 2 == 0 && (m_.num_heads / 2) % std::max(1, m_.num_kv_heads / 2) == 0;
    for (int k = 0; k < 3; ++k) {
      AttentionArgs a = attention_args(k == 2 && halves);
      set_qkv(a, qkv, d_attn_.get());
      attention_.run(a, st);
    }
  }
  // dX = W^T dY (in d_xn_) and a fresh dW = X^T dY of linear t against a reference.
  void check_linear(const TrainLinear& t, const void* x, const void* dy, GemmCheckTally* tally,
                    cudaStream_t st) {
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

  const Settings& s_;
  const model::ModelConfig& m_;
  int device_;
  std::vector<int> first_, blocks_;                 // per chunk: its first global block, its blocks
  std::vector<std::vector<std::int64_t>> offsets_;  // per chunk: saved_row offsets, then the end
  bool first_stage_, last_stage_;
  std::int64_t seqs_, rows_;
  ActDtype dtype_;
  std::int64_t eb_;
  SavedRow row_;
  CublasLtHandle handle_;
  model::AttentionRunner attention_;
  cudaMemPool_t pool_ = nullptr;
  std::vector<TrainBlock> blocks_w_;
  TrainLinear head_;
  DeviceBuffer embed_, ids_, nf_, logits_, ws_;
  DeviceBuffer d_act_, d_up_, d_xn_, d_attn_, d_qkv_, check_;
  std::uint64_t fixed_ = 0;
};

}  // namespace

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
  constexpr int kRuns = 11;
  const int two = std::min(2, s.layers);
  // The forward and backward of one sequence through a stage of the embedding, `blocks`
  // half-layers and (with `head`) the final norm and LM head: the median of kRuns after one to
  // warm up.
  auto time_stage = [&](int blocks, bool head) {
    TrainStage ts(s, device, {0}, {blocks}, true, head, 1);
    ts.build(1, stream);
    DeviceBuffer out(device, ts.transfer_bytes()), grad(device, ts.transfer_bytes());
    GPB_CUDA_CHECK(cudaMemsetAsync(grad.get(), 0, grad.bytes(), stream));
    Event a(device), b(device);
    std::vector<double> t;
    for (int r = 0; r <= kRuns; ++r) {
      a.record(stream);
      unsigned char* slab = ts.allocate(0, stream);
      ts.forward(0, 0, slab, head ? nullptr : out.get(), stream);
      ts.backward(0, slab, grad.get(), stream, false, nullptr);
      TrainStage::release(slab, stream);
      b.record(stream);
      b.synchronize();
      if (r > 0) t.push_back(b.seconds_since(a));
    }
    return compute_stats(t).median;
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

std::vector<TrainingOutcome> run_training(Context& ctx, const Settings& s, int p, Schedule sch,
                                          RankGroup& group) {
  if (group.size() != p)
    throw InputError(fmt::format("--pp: {} ranks for {} stages", group.size(), p));
  const int v = sch == Schedule::Interleaved ? s.chunks : 1;
  const MeasureOptions mo = model::engine_step_options(ctx);
  const ActDtype dtype = s.dtype == "fp16" ? ActDtype::F16 : ActDtype::BF16;
  const ncclDataType_t type = nccl_type_of(dtype);
  // Forward edges stage e -> e + 1 (around the ring, p-1 -> 0, when interleaved); each carries
  // activations on one communicator and gradients back on another.
  const int edges = p < 2 ? 0 : (v > 1 ? p : p - 1);
  std::vector<TrainingOutcome> out;
  // The copy engines' peer copy of a transfer alone needs peer access (one process only).
  bool peer_copy = false, peers_all = false;
  if (p > 1 && !group.is_mpi()) {
    const PeerAccess peers(group.devices());
    peer_copy = peers.pair(group.devices()[0], group.devices()[1]);
    peers_all = peers.all();
  }
  // --transfers copy-engine: peer copies between the stages' rings, ordered by flags in GPU
  // memory (no SMs, no host waits); one process with peer access between all the GPUs only.
  // Two stages only: more stages can stall (docs/DECISIONS.md), so they run over NCCL.
  const bool ce = s.transfers == "copy-engine" && p == 2 && peers_all;
  if (s.transfers == "copy-engine" && p > 2)
    spdlog::warn("pp: --transfers copy-engine runs 2 stages only; {} stages run over NCCL",
                 p);
  else if (s.transfers == "copy-engine" && p > 1 && !ce)
    spdlog::warn(
        "pp: --transfers copy-engine needs one process and peer access between all "
        "the GPUs; running over NCCL");
  if (ce) (void)stream_mem_ops();  // fail here, not inside a rank
  std::vector<CePeer> ce_peers(static_cast<std::size_t>(p));

  group.run([&](Rank& self) {
    const int stage = self.rank;
    cudaStream_t st = self.stream->get();
    // Stages balanced by measured time (not interleaved, whose chunks are equal): rank 0 times
    // a layer (and its attention half), the embedding and the head on its GPU, and every rank
    // splits by those figures.
    const StageCosts balance =
        p > 1 && v == 1
            ? agreed_stage_costs(group, self.rank,
                                 [&] { return measure_training_costs(s, self.device, st); })
            : training_flop_costs(s);
    const std::vector<int> stage_blocks = training_stage_blocks(s, p, sch, balance);
    if (self.rank == 0 && p > 1 && v == 1)
      spdlog::info("pp: training stages {} layers by {}", stage_layers_text(stage_blocks),
                   balance.describe());
    std::vector<ncclUniqueId> ids(static_cast<std::size_t>(2 * edges));
    if (self.rank == 0)
      for (auto& id : ids) GPB_NCCL_CHECK(ncclGetUniqueId(&id));
    if (edges > 0) group.broadcast(self.rank, ids.data(), ids.size() * sizeof(ncclUniqueId));
    // This stage's edge in (from the previous stage) and out (to the next), in edge order so
    // that the pairs' initializations cannot wait on each other in a cycle.
    const int in_edge = v > 1 ? (stage + p - 1) % p : stage - 1;
    const int out_edge = v > 1 || stage < p - 1 ? stage : -1;
    // Activations in / out, gradients back to in / from out. In an edge's communicators the
    // sending (earlier) stage is rank 0, the receiving one rank 1.
    NcclComm f_in, b_in, f_out, b_out;
    for (int e = 0; e < edges; ++e) {
      const auto E = static_cast<std::size_t>(e);
      if (e == out_edge) {
        f_out = NcclComm(ids[2 * E], 2, 0, s.nccl_ctas);
        b_out = NcclComm(ids[2 * E + 1], 2, 0, s.nccl_ctas);
      }
      if (e == in_edge) {
        f_in = NcclComm(ids[2 * E], 2, 1, s.nccl_ctas);
        b_in = NcclComm(ids[2 * E + 1], 2, 1, s.nccl_ctas);
      }
    }

    for (int m : s.microbatches) {
      if (group.any(self.rank, Context::interrupted())) break;  // all stages stop together
      const std::int64_t seqs = s.batch / m;
      TrainingOutcome o;
      o.schedule = sch;
      o.p = p;
      o.m = m;
      o.v = v;
      o.micro_sequences = seqs;
      o.stage_blocks = stage_blocks;
      o.nccl_ctas = s.nccl_ctas;
      o.balance = balance;
      o.bubble_theory = theory_bubble(sch, p, m, v);
      if (self.rank == 0)
        spdlog::info("pp: training, {}, {} stages, {} microbatches of {} sequences", to_string(sch),
                     p, m, seqs);

      // The chunks of this stage: global first block and count.
      std::vector<int> first, count;
      if (v > 1) {
        const int per = 2 * (s.layers / (p * v));
        for (int c = 0; c < v; ++c) {
          first.push_back((c * p + stage) * per);
          count.push_back(per);
        }
      } else {
        int f = 0;
        for (int j = 0; j < stage; ++j) f += stage_blocks[static_cast<std::size_t>(j)];
        first.push_back(f);
        count.push_back(stage_blocks[static_cast<std::size_t>(stage)]);
      }
      TrainStage ts(s, self.device, first, count, stage == 0, stage == p - 1, seqs);
      const std::vector<Op> order = stage_order(sch, p, m, v, stage);
      // Memory, before anything is allocated, agreed by every stage.
      if (const std::string why = agreed_memory_check(group, self.rank, ts.planned_bytes(m, order));
          !why.empty()) {
        o.status = "skipped";
        o.note = why;
        if (self.rank == 0) out.push_back(std::move(o));
        continue;
      }
      ts.build(m, st);
      spdlog::debug("pp: stage {}, m {}: stage built", stage, m);
      const std::int64_t R = ts.rows(), H = s.model.hidden_size;
      const std::size_t hb = ts.transfer_bytes();
      const std::size_t helems = static_cast<std::size_t>(R * H);
      o.transfer_bytes = static_cast<double>(hb);

      // Rings: forward receive, forward send, backward receive, backward work-and-send.
      struct Ring {
        std::array<DeviceBuffer, kRing> buf;
        std::array<Event, kRing> ready, free;
        int next = 0, last = -1;
        // The slot to use next; the one after it from then on.
        int advance() {
          const int slot = next;
          next = (next + 1) % kRing;
          return slot;
        }
      };
      auto make_ring = [&](Ring& r) {
        for (int k = 0; k < kRing; ++k) {
          r.buf[static_cast<std::size_t>(k)] = DeviceBuffer(self.device, hb);
          r.ready[static_cast<std::size_t>(k)] = Event(self.device, false);
          r.free[static_cast<std::size_t>(k)] = Event(self.device, false);
        }
      };
      Ring frecv, fsend, brecv, bwork;
      for (Ring* r : {&frecv, &fsend, &brecv, &bwork}) make_ring(*r);
      o.transport = ce ? "copy-engine" : "nccl";
      DeviceBuffer flags(self.device, 4 * sizeof(std::uint32_t));
      std::uint32_t* my_flags = flags.as<std::uint32_t>();
      // The link-waking copies: what they send, where they land, and the events (recorded as a
      // sending operation starts its last block) they start at, one per direction.
      DeviceBuffer wake_from, wake_into;
      Event near_f(self.device, false), near_b(self.device, false);
      std::uint32_t f_sent = 0, f_got = 0, b_sent = 0, b_got = 0;
      const int prev = (stage + p - 1) % p, next = (stage + 1) % p;
      if (ce) {
        // On the rank's own stream: the legacy stream would also wait for NCCL's streams.
        GPB_CUDA_CHECK(cudaMemsetAsync(flags.get(), 0, flags.bytes(), st));
        wake_from = DeviceBuffer(self.device, kWakeBytes);
        wake_into = DeviceBuffer(self.device, kWakeBytes);
        GPB_CUDA_CHECK(cudaMemsetAsync(wake_from.get(), 0, kWakeBytes, st));
        GPB_CUDA_CHECK(cudaStreamSynchronize(st));
        spdlog::debug("pp: stage {}, m {}: copy-engine flags ready", stage, m);
        CePeer& me = ce_peers[static_cast<std::size_t>(stage)];
        for (int k = 0; k < kRing; ++k) {
          me.frecv[static_cast<std::size_t>(k)] = frecv.buf[static_cast<std::size_t>(k)].get();
          me.brecv[static_cast<std::size_t>(k)] = brecv.buf[static_cast<std::size_t>(k)].get();
        }
        me.flags = my_flags;
        me.wake = wake_into.get();
        me.device = self.device;
        group.barrier();  // every stage's rings and flags published before any step
        spdlog::debug("pp: stage {}, m {}: copy-engine peers published", stage, m);
      }
      // The transfers' streams are high-priority: their NCCL kernels get SMs as soon as some
      // free up, instead of queueing behind the next operation's GEMM blocks.
      Stream s_frecv(self.device, true), s_fsend(self.device, true), s_brecv(self.device, true),
          s_bsend(self.device, true);
      // The gradient of the model's first chunk goes nowhere: its own buffer, so that the
      // send ring holds only what was sent.
      DeviceBuffer bfirst(self.device, hb);
      Event join(self.device, false);
      std::vector<unsigned char*> slabs(static_cast<std::size_t>(m * v), nullptr);
      // Per op of the order (timeline step only): compute ready / start / end, receive start /
      // end, send start / end.
      constexpr int kMarks = 7;
      std::vector<Event> marks;
      DeviceBuffer tally(self.device, sizeof(GemmCheckTally));

      auto vstage = [&](const Op& op) { return op.chunk * p + stage; };
      const int last_v = p * v - 1;
      auto rec = [&](bool mark, std::size_t i, int k, cudaStream_t on) {
        if (mark) marks[i * kMarks + static_cast<std::size_t>(k)].record(on);
      };
      // A receive posted on its side stream into the ring's next buffer, once that buffer is
      // free (marks 3 and 4 around it); the slot.
      auto post_recv = [&](Ring& r, NcclComm& comm, int peer, cudaStream_t side, bool mark,
                           std::size_t i) {
        const int slot = r.advance();
        const auto S = static_cast<std::size_t>(slot);
        GPB_CUDA_CHECK(cudaStreamWaitEvent(side, r.free[S].get(), 0));
        rec(mark, i, 3, side);
        GPB_NCCL_CHECK(ncclRecv(r.buf[S].get(), helems, type, peer, comm.get(), side));
        rec(mark, i, 4, side);
        r.ready[S].record(side);
        r.last = slot;
        return slot;
      };
      // The compute stream takes what arrived in `slot` (mark 1 once it may), copying it to
      // `dst`, and frees the buffer.
      auto take = [&](Ring& r, int slot, void* dst, cudaStream_t cs, bool mark, std::size_t i) {
        const auto S = static_cast<std::size_t>(slot);
        GPB_CUDA_CHECK(cudaStreamWaitEvent(cs, r.ready[S].get(), 0));
        rec(mark, i, 1, cs);
        GPB_CUDA_CHECK(cudaMemcpyAsync(dst, r.buf[S].get(), hb, cudaMemcpyDeviceToDevice, cs));
        r.free[S].record(cs);
      };
      // The ring's next send buffer, once its last send is done; the slot.
      auto claim = [&](Ring& r, cudaStream_t cs) {
        const int slot = r.advance();
        GPB_CUDA_CHECK(cudaStreamWaitEvent(cs, r.free[static_cast<std::size_t>(slot)].get(), 0));
        return slot;
      };
      // The send of `slot` on its side stream once the compute stream has filled it (marks 5
      // and 6 around it).
      auto post_send = [&](Ring& r, int slot, NcclComm& comm, int peer, cudaStream_t cs,
                           cudaStream_t side, bool mark, std::size_t i) {
        const auto S = static_cast<std::size_t>(slot);
        r.ready[S].record(cs);
        GPB_CUDA_CHECK(cudaStreamWaitEvent(side, r.ready[S].get(), 0));
        rec(mark, i, 5, side);
        GPB_NCCL_CHECK(ncclSend(r.buf[S].get(), helems, type, peer, comm.get(), side));
        rec(mark, i, 6, side);
        r.free[S].record(side);
        r.last = slot;
      };
      // Copy-engine versions. A receive only takes the ring's next slot (the sender copies into
      // it); taking it waits on the arrival flag (mark 3 before, 1 and 4 once it may), copies it
      // out and tells the sender the slot is free. A send waits until the receiver has freed the
      // slot it will fill (kRing sends back), peer-copies into it and raises the arrival flag;
      // before that, once `near` has passed (its operation's last block started), it wakes the
      // link with kWakeBytes into the receiver's wake buffer.
      auto ce_post_recv = [&](Ring& r) {
        r.last = r.advance();
        return r.last;
      };
      auto ce_take = [&](Ring& r, int slot, void* dst, bool forward, cudaStream_t cs, bool mark,
                         std::size_t i) {
        const std::uint32_t n = forward ? ++f_got : ++b_got;
        rec(mark, i, 3, cs);
        wait_flag(cs, my_flags + (forward ? 0 : 2), n);
        rec(mark, i, 1, cs);
        rec(mark, i, 4, cs);
        GPB_CUDA_CHECK(cudaMemcpyAsync(dst, r.buf[static_cast<std::size_t>(slot)].get(), hb,
                                       cudaMemcpyDeviceToDevice, cs));
        const CePeer& sender = ce_peers[static_cast<std::size_t>(forward ? prev : next)];
        write_flag(cs, sender.flags + (forward ? 1 : 3), n);
      };
      auto ce_post_send = [&](Ring& r, int slot, bool forward, cudaStream_t cs, cudaStream_t side,
                              cudaEvent_t near, bool mark, std::size_t i) {
        const auto S = static_cast<std::size_t>(slot);
        const std::uint32_t n = forward ? ++f_sent : ++b_sent;
        const CePeer& to = ce_peers[static_cast<std::size_t>(forward ? next : prev)];
        GPB_CUDA_CHECK(cudaStreamWaitEvent(side, near, 0));
        GPB_CUDA_CHECK(cudaMemcpyPeerAsync(to.wake, to.device, wake_from.get(), self.device,
                                           kWakeBytes, side));
        r.ready[S].record(cs);
        GPB_CUDA_CHECK(cudaStreamWaitEvent(side, r.ready[S].get(), 0));
        if (n > static_cast<std::uint32_t>(kRing))
          wait_flag(side, my_flags + (forward ? 1 : 3), n - kRing);
        rec(mark, i, 5, side);
        const std::size_t dst_slot = (n - 1) % kRing;
        GPB_CUDA_CHECK(cudaMemcpyPeerAsync(forward ? to.frecv[dst_slot] : to.brecv[dst_slot],
                                           to.device, r.buf[S].get(), self.device, hb, side));
        write_flag(side, to.flags + (forward ? 0 : 2), n);
        rec(mark, i, 6, side);
        r.free[S].record(side);
        r.last = slot;
      };
      bool over_ce = ce;  // this step's transfers: the copy engines, or NCCL
      auto step = [&](cudaStream_t cs, bool mark, bool check) {
        std::vector<bool> seen(static_cast<std::size_t>(v), false);  // first backward per chunk
        const Op* last_b = nullptr;
        for (const Op& op : order)
          if (!op.forward) last_b = &op;
        for (std::size_t i = 0; i < order.size(); ++i) {
          const Op& op = order[i];
          const int k = vstage(op);
          const std::size_t slot_id = static_cast<std::size_t>(op.mb * v + op.chunk);
          // What this operation receives (forward: from the previous virtual stage; backward:
          // from the next) and whether it sends on.
          const bool receives = op.forward ? k > 0 : k < last_v;
          const bool sends = op.forward ? k < last_v : k > 0;
          Ring& in = op.forward ? frecv : brecv;
          Ring& outr = op.forward ? fsend : bwork;
          unsigned char* slab = op.forward ? ts.allocate(op.chunk, cs) : slabs[slot_id];
          if (op.forward) slabs[slot_id] = slab;
          const int in_slot = !receives ? -1
                              : over_ce
                                  ? ce_post_recv(in)
                                  : post_recv(in, op.forward ? f_in : b_out, op.forward ? 0 : 1,
                                              op.forward ? s_frecv.get() : s_brecv.get(), mark, i);
          rec(mark, i, 0, cs);
          const int out_slot = sends ? claim(outr, cs) : -1;
          // The operation's input: received into the slab (forward) or into the gradient it
          // works on (backward; the model's first chunk's own buffer when nothing goes on).
          void* grad = op.forward ? nullptr
                                  : (sends ? bwork.buf[static_cast<std::size_t>(out_slot)].get()
                                           : bfirst.get());
          if (in_slot >= 0 && over_ce)
            ce_take(in, in_slot, op.forward ? ts.input_of(slab) : grad, op.forward, cs, mark, i);
          else if (in_slot >= 0)
            take(in, in_slot, op.forward ? ts.input_of(slab) : grad, cs, mark, i);
          else
            rec(mark, i, 1, cs);
          // Where a copy-engine send's link-waking copy may start.
          cudaEvent_t near = nullptr;
          if (sends && over_ce) near = op.forward ? near_f.get() : near_b.get();
          if (op.forward) {
            ts.forward(op.chunk, op.mb, slab,
                       sends ? fsend.buf[static_cast<std::size_t>(out_slot)].get() : nullptr, cs,
                       near);
          } else {
            const bool first_b = !seen[static_cast<std::size_t>(op.chunk)];
            seen[static_cast<std::size_t>(op.chunk)] = true;
            const bool check_here = check && &op == last_b;
            ts.backward(op.chunk, slab, grad, cs, !first_b,
                        check_here ? tally.as<GemmCheckTally>() : nullptr, near);
            TrainStage::release(slab, cs);
            slabs[slot_id] = nullptr;
          }
          rec(mark, i, 2, cs);
          if (sends && over_ce)
            ce_post_send(outr, out_slot, op.forward, cs, op.forward ? s_fsend.get() : s_bsend.get(),
                         near, mark, i);
          else if (sends)
            post_send(outr, out_slot, op.forward ? f_out : b_in, op.forward ? 1 : 0, cs,
                      op.forward ? s_fsend.get() : s_bsend.get(), mark, i);
        }
        // Join the side streams back into the step's stream.
        for (Stream* side : {&s_frecv, &s_fsend, &s_brecv, &s_bsend})
          stream_wait(cs, side->get(), join);
      };

      if (ce) {
        // A first step over NCCL. Kernels load on first launch, and loading one may wait for
        // the whole GPU: over the copy engines that GPU may be waiting on a flag that only the
        // other stage's next peer copy raises, while that stage's thread waits on this one's
        // context, a deadlock. Over NCCL the step also builds the attention plans. Then the rings
        // start again from their first buffer on both sides.
        // It is a checked step, as the first copy-engine one will be: the check's buffer and
        // kernels are allocated and loaded here too.
        over_ce = false;
        GPB_CUDA_CHECK(cudaMemsetAsync(tally.get(), 0, sizeof(GemmCheckTally), st));
        step(st, false, true);
        GPB_CUDA_CHECK(cudaStreamSynchronize(st));
        group.barrier();  // every stage done with its rings before the copy engines fill them
        for (Ring* r : {&frecv, &fsend, &brecv, &bwork}) {
          r->next = 0;
          r->last = -1;
        }
        over_ce = true;
      }

      // Checked once: the gradient GEMMs of the input linear of the first block of the stage's
      // last backward against a reference,
      // the weight gradients finite, and the last transfer each way equal on both sides.
      GPB_CUDA_CHECK(cudaMemsetAsync(tally.get(), 0, sizeof(GemmCheckTally), st));
      step(st, false, true);
      spdlog::debug("pp: stage {}, m {}: check step queued", stage, m);
      GPB_CUDA_CHECK(cudaStreamSynchronize(st));
      spdlog::debug("pp: stage {}, m {}: check step done", stage, m);
      GemmCheckTally t{};
      GPB_CUDA_CHECK(cudaMemcpy(&t, tally.get(), sizeof t, cudaMemcpyDeviceToHost));
      float ratio = 0;
      std::memcpy(&ratio, &t.max_error_ratio_bits, sizeof ratio);
      std::string why;
      if (t.checked == 0 || t.wrong > 0)
        why = fmt::format("stage {}: {} of {} gradient GEMM entries outside tolerance", stage,
                          t.wrong, t.checked);
      else if (!ts.gradients_finite())
        why = fmt::format("stage {}: a weight gradient is not finite", stage);
      // Transfers: what each stage last sent against what its neighbour last received.
      auto digest = [&](const Ring& r) {
        if (r.last < 0) return -1.0;
        std::vector<std::uint64_t> h(hb / 8);
        GPB_CUDA_CHECK(cudaMemcpy(h.data(), r.buf[static_cast<std::size_t>(r.last)].get(),
                                  h.size() * 8, cudaMemcpyDeviceToHost));
        std::uint64_t x = 1469598103934665603ull;
        for (std::uint64_t w : h) x = (x ^ w) * 1099511628211ull;
        return static_cast<double>(x >> 12);  // exact in a double
      };
      const auto sent_f = group.all_gather(self.rank, digest(fsend));
      const auto got_f = group.all_gather(self.rank, digest(frecv));
      const auto sent_b = group.all_gather(self.rank, digest(bwork));
      const auto got_b = group.all_gather(self.rank, digest(brecv));
      for (int e = 0; e < edges && why.empty(); ++e) {
        const auto a = static_cast<std::size_t>(e), b = static_cast<std::size_t>((e + 1) % p);
        if (sent_f[a] != got_f[b])
          why = fmt::format("activations stage {} sent differ from what stage {} received", e,
                            (e + 1) % p);
        else if (sent_b[b] != got_b[a])
          why = fmt::format("gradients stage {} sent differ from what stage {} received",
                            (e + 1) % p, e);
      }
      const auto bad = group.all_gather(self.rank, why.empty() ? 0.0 : 1.0 + ratio);
      const auto worst_ratio = group.all_gather(self.rank, static_cast<double>(ratio));
      o.check_error = *std::max_element(worst_ratio.begin(), worst_ratio.end());
      for (int j = 0; j < p; ++j)
        if (bad[static_cast<std::size_t>(j)] > 0) o.status = "failed";
      if (!why.empty()) o.note = why;
      if (o.status != "ok" && o.note.empty()) o.note = "a stage's checks failed (see its log)";
      if (!why.empty()) spdlog::error("pp: {}", why);

      // Timed.
      if (o.status == "ok")
        o.step = group.measure(
            self, [&](cudaStream_t s2, int) { step(s2, false, false); }, mo);
      spdlog::debug("pp: stage {}, m {}: timed ({} steps)", stage, m, o.step.samples.size());

      // One more step with events: the timeline, the transfers, the activation peak.
      marks.clear();
      for (std::size_t k = 0; k < order.size() * kMarks; ++k) marks.emplace_back(self.device);
      Event start(self.device);
      GPB_CUDA_CHECK(cudaStreamSynchronize(st));
      ts.reset_pool_high();
      group.barrier();
      start.record(st);
      step(st, true, false);
      GPB_CUDA_CHECK(cudaStreamSynchronize(st));
      const std::uint64_t high = ts.pool_high();
      std::vector<std::vector<double>> at(order.size(), std::vector<double>(kMarks, -1.0));
      for (std::size_t i = 0; i < order.size(); ++i) {
        const Op& op = order[i];
        const int k = vstage(op);
        const bool recv = op.forward ? k > 0 : k < last_v;
        const bool send = op.forward ? k < last_v : k > 0;
        for (int j = 0; j < kMarks; ++j) {
          if ((j == 3 || j == 4) && !recv) continue;
          if ((j == 5 || j == 6) && !send) continue;
          at[i][static_cast<std::size_t>(j)] =
              marks[i * kMarks + static_cast<std::size_t>(j)].seconds_since(start);
        }
      }
      // Every stage's marks (the same number of ops on every stage), gathered in stage order.
      std::vector<std::vector<std::vector<double>>> all(
          static_cast<std::size_t>(p),
          std::vector<std::vector<double>>(order.size(), std::vector<double>(kMarks)));
      for (std::size_t i = 0; i < order.size(); ++i)
        for (int j = 0; j < kMarks; ++j) {
          const auto g = group.all_gather(self.rank, at[i][static_cast<std::size_t>(j)]);
          for (int r = 0; r < p; ++r)
            all[static_cast<std::size_t>(r)][i][static_cast<std::size_t>(j)] =
                g[static_cast<std::size_t>(r)];
        }
      const auto highs = group.all_gather(self.rank, static_cast<double>(high));
      // Expected peak: the slabs in flight along this stage's order.
      const auto expecteds =
          group.all_gather(self.rank, static_cast<double>(ts.peak_slab_bytes(order)));
      const auto fixed = group.all_gather(self.rank, static_cast<double>(ts.fixed_bytes()));

      if (self.rank == 0) {
        // Orders of every stage, to find a receive's sender.
        std::vector<std::vector<Op>> orders;
        for (int j = 0; j < p; ++j) orders.push_back(stage_order(sch, p, m, v, j));
        auto find = [&](int j, const Op& want) -> std::size_t {
          const auto& ord = orders[static_cast<std::size_t>(j)];
          for (std::size_t i = 0; i < ord.size(); ++i)
            if (ord[i] == want) return i;
          throw std::logic_error("pp: an operation missing from a stage's order");
        };
        Timeline tl;
        tl.stages.resize(static_cast<std::size_t>(p));
        tl.sends.resize(static_cast<std::size_t>(p));
        tl.recvs.resize(static_cast<std::size_t>(p));
        double transfer = 0, exposed = 0;
        int hops = 0;
        for (int j = 0; j < p; ++j) {
          const auto& ord = orders[static_cast<std::size_t>(j)];
          const auto& mk = all[static_cast<std::size_t>(j)];
          for (std::size_t i = 0; i < ord.size(); ++i) {
            const Op& op = ord[i];
            const auto& a = mk[i];
            tl.stages[static_cast<std::size_t>(j)].push_back(Span{op, a[1], a[2]});
            tl.busy_s += a[2] - a[1];
            tl.makespan_s = std::max({tl.makespan_s, a[2], a[6]});
            if (a[6] >= 0) tl.sends[static_cast<std::size_t>(j)].push_back(Span{op, a[5], a[6]});
            if (a[4] < 0) continue;  // nothing received
            // The sender: the previous virtual stage's forward, or the next one's backward.
            const int k = op.chunk * p + j;
            const int ks = op.forward ? k - 1 : k + 1;
            const int sj = ks % p;
            const Op sop{op.forward, op.mb, ks / p};
            const auto& sa = all[static_cast<std::size_t>(sj)][find(sj, sop)];
            // NCCL: from the later of the send and the posted receive to the arrival; copy
            // engines: the peer copy itself (the sender's clock), arrival as the receiver saw it.
            const double begin = ce ? sa[5] : std::max(sa[5], a[3]);
            const double end = ce ? sa[6] : a[4];
            const double dur = std::max(0.0, end - begin);
            tl.recvs[static_cast<std::size_t>(j)].push_back(Span{op, begin, end});
            transfer += dur;
            exposed += std::clamp(a[4] - std::max(a[0], begin), 0.0, dur);
            ++hops;
          }
        }
        tl.bubble = tl.makespan_s > 0 ? 1.0 - tl.busy_s / (p * tl.makespan_s) : 0.0;
        for (int j = 0; j < p; ++j) {
          o.peak_saved.push_back(static_cast<std::uint64_t>(highs[static_cast<std::size_t>(j)]));
          o.expected_saved.push_back(
              static_cast<std::uint64_t>(expecteds[static_cast<std::size_t>(j)]));
          o.memory_per_gpu = std::max<std::uint64_t>(
              o.memory_per_gpu, static_cast<std::uint64_t>(fixed[static_cast<std::size_t>(j)] +
                                                           highs[static_cast<std::size_t>(j)]));
        }
        o.timeline = std::move(tl);
        o.transfer_s = transfer;
        o.transfer_exposed_s = exposed;
        o.transfers = hops;
        for (int j = 0, first_j = 0; j < p; ++j) {
          // Interleaved chunks are whole layers: where they start does not change their work.
          const int blocks_j = stage_blocks[static_cast<std::size_t>(j)];
          const StageWork w =
              stage_work_blocks(s.model, v > 1 ? 0 : first_j, blocks_j, j == p - 1, seqs, s.seq_len,
                                static_cast<int>(act_bytes(dtype)));
          o.flops += m * (w.forward_flops + w.backward_flops);
          first_j += blocks_j;
        }
      }

      // The same transfer alone, stage 0 to 1: NCCL send/recv, and the copy engines' peer copy
      // (one process only: the peer's pointer is needed).
      if (p > 1 && (stage == 0 || stage == 1)) {
        constexpr int kWarm = 3, kTimed = 20;
        Event a(self.device), b(self.device);
        void* buf = stage == 0 ? fsend.buf[0].get() : frecv.buf[0].get();
        GPB_CUDA_CHECK(cudaStreamSynchronize(st));
        for (int r = 0; r < kWarm + kTimed; ++r) {
          if (r == kWarm) a.record(st);
          if (stage == 0)
            GPB_NCCL_CHECK(ncclSend(buf, helems, type, 1, f_out.get(), st));
          else
            GPB_NCCL_CHECK(ncclRecv(buf, helems, type, 0, f_in.get(), st));
        }
        b.record(st);
        b.synchronize();
        if (stage == 1) o.transfer_alone_s = b.seconds_since(a) / kTimed;
      }
      const auto alone = group.all_gather(self.rank, o.transfer_alone_s);
      if (p > 1) o.transfer_alone_s = alone[1];
      if (peer_copy) {
        // Stage 1's receive buffer, to stage 0.
        std::uintptr_t peer = stage == 1 ? reinterpret_cast<std::uintptr_t>(frecv.buf[0].get()) : 0;
        group.broadcast(self.rank, &peer, sizeof peer, 1);
        if (stage == 0) {
          const int dev1 = group.devices()[1];
          constexpr int kWarm = 3, kTimed = 20;
          Event a(self.device), b(self.device);
          for (int r = 0; r < kWarm + kTimed; ++r) {
            if (r == kWarm) a.record(st);
            GPB_CUDA_CHECK(cudaMemcpyPeerAsync(reinterpret_cast<void*>(peer), dev1,
                                               fsend.buf[0].get(), self.device, hb, st));
          }
          b.record(st);
          b.synchronize();
          o.p2p_copy_s = b.seconds_since(a) / kTimed;
        }
        group.barrier();
      }
      if (self.rank == 0) out.push_back(std::move(o));
      GPB_CUDA_CHECK(cudaStreamSynchronize(st));
      group.barrier();  // every stage done with its buffers before the next microbatch count
    }
  });
  return out;
}

}  // namespace gpubench::pp
