#pragma once
// A training step's part of the model on one GPU, shared by pp's pipeline stages and dp's
// replicas: the weights, gradients and GEMM plans of a run of half-layer blocks, the forward and
// backward of one microbatch through them (the real GEMMs, attention, norms and activation;
// attention's backward stood in for by forwards of 2.5x its FLOPs), and the pool its saved
// activations come from. Parameters are the linears' weights (the embedding and the norms'
// weights stay fixed: they have no gradient here); the stage owns them, or a caller places them
// (data parallelism's flat, bucketed and sharded buffers) and runs its collectives from hooks
// between the blocks.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "gpubench/core/cublaslt.hpp"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/gemm.hpp"
#include "gpubench/kernels/attention.cuh"
#include "gpubench/kernels/gemm_check.cuh"
#include "gpubench/kernels/transformer.cuh"
#include "gpubench/model/presets.hpp"
#include "gpubench/model/training.hpp"
#include "gpubench/model/transformer.hpp"

namespace gpubench::model {

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
// weight gradient dW^T = X^T dY (NT). `w` and `grad` point at [out, in] elements: the stage's
// own buffers, or a caller's (TrainStage::place).
struct TrainLinear {
  std::int64_t out = 0, in = 0;
  void* w = nullptr;
  void* grad = nullptr;
  DeviceBuffer own_w, own_grad;
  Gemm fwd, dx, dw;
};

// A half-layer: attention (in = qkv, out = the output projection) or MLP (in = gate|up or up,
// out = down), with its norm's weight (ones).
struct TrainBlock {
  bool attention = true;
  TrainLinear in, out;
  DeviceBuffer norm;
};

// What a caller runs between the stage's units on the step's stream (data parallelism's
// gathers of weights before a unit, its reductions of gradients after one). Units as in
// TrainParam: blocks in forward order, the head last (its forward after the blocks', its
// backward before them).
class TrainHooks {
 public:
  virtual ~TrainHooks() = default;
  virtual void before_forward(int unit, cudaStream_t st) = 0;
  virtual void after_forward(int unit, cudaStream_t st) = 0;
  virtual void before_backward(int unit, cudaStream_t st) = 0;
  // The unit's weight gradients have been written (in stream order).
  virtual void after_backward(int unit, cudaStream_t st) = 0;
};

// v chunks of half-layer blocks (the first chunk of the first stage starts with the embedding,
// the last chunk of the last stage ends with the final norm and the LM head), the scratch of one
// microbatch and a memory pool for the saved activations of the microbatches in flight.
class TrainStage {
 public:
  TrainStage(const TrainShape& shape, int device, std::vector<int> chunk_first,
             std::vector<int> chunk_blocks, bool first_stage, bool last_stage, std::int64_t seqs);
  ~TrainStage();
  TrainStage(const TrainStage&) = delete;
  TrainStage& operator=(const TrainStage&) = delete;

  // The parameters, known before build().
  std::vector<TrainParam> params() const;
  int units() const;

  // The GEMM plans, scratch and, on the first stage, the token ids of `microbatches`
  // microbatches: microbatch mb holds sequences first_sequence + mb x seqs, ... of seq_len tokens
  // each, every sequence's tokens seeded by its index (so a batch split over replicas gives them
  // the same tokens as the whole batch). With own_params, the weights (seeded per global layer
  // and linear, the same on every stage and replica) and zeroed gradients; else the caller
  // places every parameter before the first pass.
  void build(int microbatches, cudaStream_t st, bool own_params = true,
             std::int64_t first_sequence = 0);
  // Parameter i (params() order) at the caller's w and grad ([out, in] elements each).
  void place(int i, void* w, void* grad);
  // Parameter i's initial values (what build writes for an own parameter) into `dst`.
  void init_param(int i, void* dst, cudaStream_t st) const;
  // Parameter i's linear: its weight and gradient where they are now.
  const TrainLinear& param(int i) const { return linear(i); }

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
  // What build(microbatches, own_params) and a run whose saved activations peak at `peak_slab`
  // bytes allocate, before any of it is: weights and gradients (own_params), norms, embedding
  // and token ids (first stage), head logits (last), the microbatch's scratch, the GEMM
  // workspace, the check's copy of a gradient and the saved activations at their peak.
  std::uint64_t planned_bytes(int microbatches, std::uint64_t peak_slab,
                              bool own_params = true) const;
  // What a data-parallel replica (one chunk, one microbatch, parameters placed by the caller)
  // holds besides its weights, gradients and optimizer state: planned_bytes' rest with one
  // microbatch's saved activations, and the buffer its input gradient is left in.
  std::uint64_t replica_bytes() const {
    return planned_bytes(1, slab_bytes(0), false) + transfer_bytes();
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
  // Hooks run between the units of every later pass (null: none). Not owned.
  void set_hooks(TrainHooks* hooks) { hooks_ = hooks; }

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
               cudaEvent_t near_end = nullptr);

  // Backward of microbatch mb through chunk c: from `grad` [rows, H] (received; on the model's
  // last chunk the logits stand in for the loss gradient), block by block in reverse; the
  // gradient of the chunk's input is left in `grad` (sent on unless this is the first chunk of
  // stage 0). Weight gradients accumulate. With `check`, the input-gradient GEMM and a fresh
  // copy of the weight-gradient GEMM of the chunk's first block's input linear (qkv, or the
  // MLP's up projection) are checked against a reference (tallies in `tally`) before the slab
  // goes. `near_end` (if any) is recorded as the last block (the chunk's first) starts.
  void backward(int c, unsigned char* slab, void* grad, cudaStream_t st, bool accumulate,
                GemmCheckTally* tally, cudaEvent_t near_end = nullptr);

  // The first 4096 entries of every weight gradient of the stage are finite.
  bool gradients_finite() const;

 private:
  float eps() const { return static_cast<float>(m_.norm_eps); }
  int unit_of(int c, int i) const {
    int k = 0;
    for (int j = 0; j < c; ++j) k += blocks_[static_cast<std::size_t>(j)];
    return k + i;
  }
  TrainBlock& block(int c, int i) { return blocks_w_[static_cast<std::size_t>(unit_of(c, i))]; }
  TrainLinear& linear(int i);
  const TrainLinear& linear(int i) const { return const_cast<TrainStage*>(this)->linear(i); }
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
  DeviceBuffer ones(std::int64_t n, cudaStream_t st);
  Gemm plan(const GemmShape& shape);
  void make_linear(TrainLinear& t, std::int64_t out, std::int64_t in, bool own, cudaStream_t st);
  // Global linear id of parameter i: what its initial values are seeded by.
  std::uint64_t weight_id(int i) const;
  // Causal attention of a microbatch straight from the fused q|k|v rows; `half`: half the
  // heads (and KV heads), for the stand-in's last half pass.
  AttentionArgs attention_args(bool half) const;
  void set_qkv(AttentionArgs& a, unsigned char* qkv, void* out) const;
  // Attention's backward stood in for by 2.5x its forward FLOPs of the same kernels: two
  // forwards over every head and one over half of them (three whole ones when the heads are
  // odd), on the saved q, k, v, into d_attn_.
  void attention_backward_stand_in(unsigned char* qkv, cudaStream_t st);
  // dX = W^T dY (in d_xn_) and a fresh dW = X^T dY of linear t against a reference.
  void check_linear(const TrainLinear& t, const void* x, const void* dy, GemmCheckTally* tally,
                    cudaStream_t st);
  void hook(void (TrainHooks::*f)(int, cudaStream_t), int unit, cudaStream_t st) {
    if (hooks_) (hooks_->*f)(unit, st);
  }

  TrainShape shape_;
  const ModelConfig& m_;
  int device_;
  std::vector<int> first_, blocks_;                 // per chunk: its first global block, its blocks
  std::vector<std::vector<std::int64_t>> offsets_;  // per chunk: saved_row offsets, then the end
  bool first_stage_, last_stage_;
  std::int64_t seqs_, rows_;
  ActDtype dtype_;
  std::int64_t eb_;
  SavedRow row_;
  CublasLtHandle handle_;
  AttentionRunner attention_;
  cudaMemPool_t pool_ = nullptr;
  TrainHooks* hooks_ = nullptr;
  std::vector<TrainBlock> blocks_w_;
  TrainLinear head_;
  DeviceBuffer embed_, ids_, nf_, logits_, ws_;
  DeviceBuffer d_act_, d_up_, d_xn_, d_attn_, check_;
  std::uint64_t fixed_ = 0;
};

}  // namespace gpubench::model
