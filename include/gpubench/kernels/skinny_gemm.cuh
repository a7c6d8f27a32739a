#pragma once
// Skinny GEMM for decode steps: Y[rows, out] = X[rows, in] * W^T (+ bias) with 1..8 rows, the
// shape of a linear layer applied to a batch of single tokens. Such a product is a stream of the
// weight W [out, in] (row-major, a linear layer's weight) with next to no arithmetic; GEMM
// libraries tile for large M and read it slowly. This kernel reads every W element once with
// 16-byte loads and multiplies on tensor cores (mma m16n8k16: 16 outputs x up to 8 rows), with
// fp32 accumulation and one rounding of each output to the storage type.
//
// Layouts: X [rows, in], W [out, in], Y [rows, out], all row-major and dense; bias [out] or null.
// Requirements: 1 <= rows <= skinny_gemm_max_rows(), `in` a positive multiple of 8, x, w and y
// 16-byte aligned (bias any alignment); Y must not overlap X or W. No allocation and no host
// synchronization: capturable in a CUDA graph.
#include <cuda_runtime.h>

#include <cstdint>

namespace gpubench {

enum class SkinnyDtype { BF16, F16 };

// Most rows (tokens) one call takes.
constexpr int skinny_gemm_max_rows() {
  return 8;
}

// What a decode step of one sequence does around its GEMVs, done inside them instead of in
// kernels of their own (one row of X: rows <= skinny_fusion_max_rows()).
enum class SkinnyPrologue {
  None,
  // X := rms_norm(X) * norm_weight: computed as rstd * sum_k W[o,k] (x[k] nw[k]), the sum of
  // x^2 taken on the way, so the normalized X is not rounded to the storage type before the
  // product as the separate norm kernel's output is.
  RmsNorm,
};
enum class SkinnyEpilogue {
  None,      // Y = round(X W^T + bias)
  Residual,  // Y = round(Y + round(X W^T + bias)): the residual add, Y being the residual stream
  Relu,      // Y = round(act(round(X W^T + bias))), as the separate kernels round
  Gelu,      // erf form
  GeluTanh,  // GPT-2's tanh form
  // W holds 2*I rows (the gate projection's I rows above the up projection's) and Y [1, I]:
  // Y[g] = round(silu(round(gate_g)) * round(up_g)), gate_g and up_g with their biases.
  SwiGlu,
};
struct SkinnyFusion {
  SkinnyPrologue prologue = SkinnyPrologue::None;
  const void* norm_weight = nullptr;  // [in], 16-byte aligned
  float eps = 0.0f;
  SkinnyEpilogue epilogue = SkinnyEpilogue::None;
  // W is not written by any kernel that may still run on the stream, so a programmatic
  // dependent launch may start reading W before the previous kernel has finished (X, the bias
  // and the norm weight are read only after it). Leave false right after filling W on the
  // stream. With one row of X it takes the fused kernel, which leaves room on each SM for the
  // next kernel to do the same; more rows ignore it.
  bool weights_ready = false;
  // The next kernel on the stream may launch only once this one ends (no early
  // griddepcontrol.launch_dependents): for the decode step's output GEMV, which itself launches
  // beside attention, so that the gate|up GEMV's blocks do not wait beside it (measured faster on
  // Hopper: docs/DECISIONS.md).
  bool late_dependents = false;
  // With one row of X: the block-split kernel on one block of 512 threads an SM (16 warps
  // splitting `in`, up to 3 pieces of x a thread: `in` <= 12288), where the 256-thread blocks
  // would run two an SM. Such a block takes all of an SM's registers, so it starts only on an SM
  // that no other kernel's block holds, and no block of a later kernel starts beside it. The
  // decode step's qkv GEMV uses it; shapes past those limits take the usual kernels.
  bool wide_block = false;
  // With one row of X, on the block-split kernel: each block takes 80% of its share of the rows
  // as its own and the rest from a pool shared by the grid, a step at a time through an atomic
  // counter, so that the blocks that finish their own rows first (SMs stream at different rates
  // and start at different times after the previous kernel) take more of it. The same bits as
  // without: every row is summed in the same order whichever block takes it. The counters are the
  // module's own, a pool of 4096 pairs handed out in turn, each set back to zero by the last block
  // of the kernel that used it: two launches that may run at once must lie fewer than 4096 such
  // launches apart (a captured graph keeps the pairs it was given). The decode step's gate|up GEMV
  // uses it.
  bool shared_tail = false;
  // With one row of X, on the block-split kernel's 256-thread blocks with weights_ready, for a
  // GEMV with both the RMSNorm and SwiGLU's row pairs or neither (the decode step's gate|up and
  // down GEMVs; others ignore it): each block also copies its second step of W rows into shared
  // memory before the wait (cp.async), so that two steps are on their way while the previous
  // kernel ends and x arrives. The same bits as without.
  bool stage_next = false;
};

// Whether a fused skinny_gemm call (one row, and a prologue, an epilogue or weights_ready: the
// calls that take the fused kernels) with f.wide_block set would run the 512-thread kernel.
bool skinny_wide_block_applies(int rows, std::int64_t out, std::int64_t in, const SkinnyFusion& f);
// Whether such a call with f.shared_tail set would share its tail (else: the static split; a
// grid with too few steps for a pool, or a block's sums past its default shared memory).
bool skinny_shared_tail_applies(int rows, std::int64_t out, std::int64_t in, const SkinnyFusion& f);

// Most rows a fused call takes.
constexpr int skinny_fusion_max_rows() {
  return 1;
}

// Whether skinny_gemm takes this many rows and this inner dimension (pointers aside).
bool skinny_gemm_supported(int rows, std::int64_t in);

// Whether skinny_gemm takes `fusion`'s prologue and epilogue for this shape: rows <=
// skinny_fusion_max_rows(), the norm's weight given for the RMSNorm prologue, an even `out` for
// SwiGlu.
bool skinny_fusion_supported(int rows, std::int64_t out, std::int64_t in,
                             const SkinnyFusion& fusion);

// Y = X W^T (+ bias) on `stream`, with `fusion`'s prologue and epilogue. W's rows are `ldw`
// elements apart (0: `in`, packed). out == 0 launches nothing. InputError when the shape or
// fusion is not supported, a pointer is misaligned, or ldw is below `in` or not a multiple of 8.
void skinny_gemm(const void* x, const void* w, const void* bias, void* y, int rows,
                 std::int64_t out, std::int64_t in, SkinnyDtype dtype, cudaStream_t stream,
                 const SkinnyFusion& fusion = {}, std::int64_t ldw = 0);

}  // namespace gpubench
