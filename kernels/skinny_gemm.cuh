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

// Whether skinny_gemm takes this many rows and this inner dimension (pointers aside).
bool skinny_gemm_supported(int rows, std::int64_t in);

// Y = X W^T (+ bias) on `stream`. out == 0 launches nothing. InputError when the shape is not
// supported or a pointer is misaligned.
void skinny_gemm(const void* x, const void* w, const void* bias, void* y, int rows,
                 std::int64_t out, std::int64_t in, SkinnyDtype dtype, cudaStream_t stream);

}  // namespace gpubench
