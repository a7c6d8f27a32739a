// Skinny GEMM: Y[rows, out] = X[rows, in] W^T (+ bias) for 1..8 rows, a stream of W.
//
// Two paths, both reading every W element once with 16-byte loads:
//
// Rows 1..2 (CUDA cores): the product is a pure stream of W and the arithmetic per W byte is
// small enough for FMAs. Each warp owns one W row at a time and walks it in steps of 8 16-byte
// loads per lane, all issued before the first FMA: 4 KiB of W in flight per warp, ~100 KiB per
// SM with 24 warps, well over what HBM needs to stay busy (latency x bandwidth ~ 40 KiB). W
// loads bypass L1 (ld.global.nc.L1::no_allocate); X is small and read by every warp, so it is
// read through L1 (ld.global.nc), where it stays. A lane's 8 elements of a load are the same k
// for W and X; the warp sums its lanes with shuffles. The grid is persistent (a fixed number of
// blocks per SM, each warp looping over its W rows), so every SM has work from the start and
// there is no partial last wave of blocks.
//
// Rows 3..8 (tensor cores; from 3 rows they stream W faster than the CUDA-core kernel, measured
// on Hopper: docs/DECISIONS.md): a block owns 16 outputs (W rows); its 4 warps take turns over `in`
// in steps of 64 elements. In a step, lane (g, t) of a warp (g = lane/4, t = lane%4) copies 16
// bytes of W rows g and g+8 at k = 32j + 8t (j = 0, 1) and the same 16 bytes of X row g into its
// own slots of a shared-memory ring (cp.async), kStages-1 steps ahead of the step it multiplies:
// the loads stay in flight without registers, and the 4 warps read 512 contiguous bytes of each row
// per turn. Two mma.m16n8k16 per piece take the pieces as they are: the A fragment of lane (g, t)
// holds rows g, g+8 at k-slots 2t, 2t+1, 2t+8, 2t+9 and the B fragment X row g at the same slots,
// so mapping those slots to 4 consecutive k of the lane (the same map in every lane) keeps A and B
// consistent; the sum over k does not care about the order. Rows past `rows` multiply zeros. The
// warps' partial sums meet in shared memory.
//
// One row with a SkinnyFusion: an RMSNorm prologue and a residual / activation / SwiGLU epilogue,
// the kernels of a batch-1 decode step. split_gemv_kernel (the default where x fits in its
// registers: `in` up to 12288, 8192 with the norm) splits `in` over a block's warps and keeps x in
// registers; fused_gemv_kernel (the rest) is the CUDA-core stream
// above with one warp a row (or gate/up pair) and x read through L1.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/kernels/skinny_gemm.cuh"
#include "gpubench/kernels/skinny_gemm_common.cuh"

namespace gpubench {

namespace skinny {

int sm_count() {
  int dev = 0, sms = 0;
  GPB_CUDA_CHECK(cudaGetDevice(&dev));
  GPB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return std::max(sms, 1);
}

}  // namespace skinny

namespace {

using namespace skinny;

// One fused row: split over a block's warps where x's pieces fit its registers, else a warp a
// row (SwiGLU: gate|up pairs; the RMSNorm prologue without an epilogue (qkv, the LM head): rows
// g and g + out/2 a warp, the SwiGLU kernel's 16 pieces a step, where the one-row kernel has
// registers for 8).
void launch_fused(SkinnyDtype dtype, const void* x, const void* w, const void* bias, void* y,
                  std::int64_t out, std::int64_t in, std::int64_t ldw, const SkinnyFusion& f,
                  cudaStream_t stream) {
  const bool norm = f.prologue == SkinnyPrologue::RmsNorm;
  const bool swiglu = f.epilogue == SkinnyEpilogue::SwiGlu;
  if (launch_split(dtype, norm, swiglu, x, w, bias, y, out, in, ldw, f, stream)) return;
  const bool pairs = swiglu || (norm && f.epilogue == SkinnyEpilogue::None && out % 2 == 0);
  launch_fused_kernel(dtype, pairs ? 2 : 1, norm, x, w, bias, y, out, in, ldw, f, stream);
}

// Unfused rows: 1..2 on CUDA cores, 3..8 on tensor cores.
void launch(SkinnyDtype dtype, const void* x, const void* w, const void* bias, void* y, int rows,
            std::int64_t out, std::int64_t in, std::int64_t ldw, cudaStream_t stream) {
  if (rows <= kVecMaxRows) return launch_vec(dtype, rows, x, w, bias, y, out, in, ldw, stream);
  launch_mma(dtype, x, w, bias, y, rows, out, in, ldw, stream);
}

bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

}  // namespace

bool skinny_gemm_supported(int rows, std::int64_t in) {
  return rows >= 1 && rows <= skinny_gemm_max_rows() && in > 0 && in % 8 == 0;
}

bool skinny_fusion_supported(int rows, std::int64_t out, std::int64_t in,
                             const SkinnyFusion& fusion) {
  if (!skinny_gemm_supported(rows, in) || rows > skinny_fusion_max_rows()) return false;
  if (fusion.epilogue == SkinnyEpilogue::SwiGlu && out % 2 != 0) return false;
  return fusion.prologue == SkinnyPrologue::None || fusion.norm_weight != nullptr;
}

void skinny_gemm(const void* x, const void* w, const void* bias, void* y, int rows,
                 std::int64_t out, std::int64_t in, SkinnyDtype dtype, cudaStream_t stream,
                 const SkinnyFusion& fusion, std::int64_t ldw) {
  if (!skinny_gemm_supported(rows, in) || out < 0)
    throw InputError("skinny_gemm: needs 1..8 rows and `in` a positive multiple of 8");
  if (ldw == 0) ldw = in;
  if (ldw < in || ldw % 8 != 0)
    throw InputError("skinny_gemm: W's row pitch must be at least `in` and a multiple of 8");
  const bool norm = fusion.prologue == SkinnyPrologue::RmsNorm;
  if ((norm || fusion.epilogue != SkinnyEpilogue::None) &&
      !skinny_fusion_supported(rows, out, in, fusion))
    throw InputError(
        "skinny_gemm: fusions need one row, an even `out` for SwiGLU and the norm's weight");
  if (!aligned16(x) || !aligned16(w) || !aligned16(y) || (norm && !aligned16(fusion.norm_weight)))
    throw InputError("skinny_gemm: x, w, y and the norm's weight must be 16-byte aligned");
  if (out == 0) return;
  const bool fused = rows <= skinny_fusion_max_rows() &&
                     (norm || fusion.epilogue != SkinnyEpilogue::None || fusion.weights_ready);
  if (fused) return launch_fused(dtype, x, w, bias, y, out, in, ldw, fusion, stream);
  launch(dtype, x, w, bias, y, rows, out, in, ldw, stream);
}

}  // namespace gpubench
