#pragma once
// Causal prefill attention through cuDNN 9's fused flash-attention forward (the engine behind
// PyTorch's default scaled_dot_product_attention on Hopper), built with the cuDNN backend graph
// API. libcudnn is opened with dlopen at first use and never linked, so gpubench runs on machines
// without it; those get a reason string instead and keep using the project's own kernel.
//
// The operation graph is the flash-attention fprop pattern the backend fuses into one kernel:
//   S = Q K^T (fp32) -> S * scale -> causal mask (GEN_INDEX rows/cols, CMP_GE, BINARY_SELECT
//   with -inf; rows shifted by s_kv - s_q when the queries start at q_pos0 > 0, i.e. the
//   bottom-right diagonal) -> softmax (MAX, SUB, EXP, ADD reduction, DIV; the log-sum-exp stats
//   are a virtual tensor, so nothing is written for a backward pass) -> P (bf16/fp16) V -> O.
// Q is (b, h, s_q, d), K and V are (b, h_kv, s_kv, d) with s_kv = q_pos0 + q_tokens, all given by
// strides over the row-major layouts of AttentionArgs, so Q may sit inside a fused qkv buffer and
// K/V are the first s_kv rows of [batch, max_context, kv_stride] caches. h_kv < h is grouped-query
// attention. The engine is the first configuration the heuristics propose (mode A, then the
// fallback list) that finalizes into an execution plan.
//
// run() allocates no GPU memory and compiles nothing: it binds the pointers, sets the stream and
// executes a plan finalized by prepare() (which also sized the workspace), so it is meant to be
// recorded into a CUDA graph; tests/gpu/test_cudnn_attention.cu replays a captured run against a
// direct one. Call prepare() for every shape before capturing. All plans share one workspace, so
// run them on one stream at a time. One object per GPU; not thread-safe.
#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "gpubench/kernels/attention.cuh"

namespace gpubench {

class CudnnAttention {
 public:
  explicit CudnnAttention(int device);  // opens the library and creates the handle lazily
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // "cuDNN 9.19.0", or why the library cannot be used ("libcudnn.so.9 not found: ...",
  // "cuDNN 8.9.7 is older than 9.0", a missing entry point).
  static std::string library_status();
  // True when library_status() names a usable cuDNN 9 library.
  static bool library_available();

  // Builds and caches (keyed by batch, q_tokens, heads, kv_heads, head_dim, q_pos0, max_context,
  // strides, dtype and scale) the execution plan for causal prefill attention of `a`, with the
  // semantics and layouts of prefill_attention in attention.cuh: query t sits at position
  // q_pos0 + t and attends to keys 0 .. q_pos0 + t of its sequence's cache. Returns "" on success
  // or why cuDNN cannot do it (library missing or too old, GPU older than sm_80, head_dim,
  // strides or pointer alignment, no engine finalizes the graph, ...): the caller then uses its
  // own kernel. A failure is cached too, so asking again is cheap.
  std::string prepare(const AttentionArgs& a);

  // Runs the plan prepare(a) built, on `stream`, with a's pointers. Allocates nothing. Throws
  // GpuError when `a` was not prepared successfully or cuDNN fails.
  void run(const AttentionArgs& a, cudaStream_t stream);

  // What prepare(a) chose, for logs: "cuDNN 9.19.0 engine 8 (knobs 17=1 ...), workspace 0 B";
  // "" when `a` has no plan.
  std::string describe(const AttentionArgs& a) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpubench
