#pragma once
// The cuBLASLt GEMM wrapper shared by matmul and the transformer engine: data types with their
// cuBLASLt types and accumulate types, shapes with their layout rules, and a GemmPlan (the
// descriptors of one dtype + shape) that lists the heuristic's candidate algorithms and runs one.
// Every matrix is column-major: D (M x N) = op(A) (M x K) * op(B) (K x N), beta = 0.
#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpubench/core/cublaslt.hpp"
#include "gpubench/core/cuda.hpp"

namespace gpubench {

enum class GemmDtype { Fp64, Fp32, Tf32, Fp16, Bf16, Fp8E4M3, Fp8E5M2, Int8 };
inline constexpr GemmDtype kAllGemmDtypes[] = {
    GemmDtype::Fp64, GemmDtype::Fp32,    GemmDtype::Tf32,    GemmDtype::Fp16,
    GemmDtype::Bf16, GemmDtype::Fp8E4M3, GemmDtype::Fp8E5M2, GemmDtype::Int8};

// "fp64", "fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8" (the peak table's keys).
const char* to_string(GemmDtype t);
// Accepts those names (and "fp8" for fp8_e4m3); throws InputError naming the known ones.
GemmDtype parse_gemm_dtype(const std::string& text);

// Storage types of the elements the wrapper and the check kernels know.
enum class GemmElement { F64, F32, F16, BF16, E4M3, E5M2, I8, I32 };
std::size_t element_bytes(GemmElement e);

// How one GEMM data type maps onto cuBLASLt.
struct GemmTypeInfo {
  GemmElement a, b, d;  // C has D's type (beta = 0, C aliases D)
  cudaDataType_t a_cuda, b_cuda, d_cuda, scale_cuda;
  cublasComputeType_t compute;
  const char* inputs;      // "bf16 x bf16", "e5m2 x e4m3"
  const char* accumulate;  // what the products are summed in: "fp32", "fp64", "int32"
  const char* output;      // D's type
  int min_cc = 0;          // 10 * major + minor the tensor cores need (fp8: 89)
  bool tn_only = false;    // fp8 and int8: A transposed, B not (cuBLASLt's layout rule)
  int alignment = 1;       // M, N, K must be multiples of this (fp8 16, int8 4)
};
const GemmTypeInfo& gemm_type_info(GemmDtype t);

// Why this GPU cannot run `t` ("fp8_e4m3 needs compute capability 8.9 or newer (this GPU: 8.0)"),
// or nothing.
std::optional<std::string> gemm_dtype_unsupported(GemmDtype t, int cc_major, int cc_minor);

struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
  bool trans_a = true, trans_b = false;  // TN: A stored K x M, B stored K x N
  // A's leading dimension in elements (column-major: from one stored column to the next), at
  // least its stored rows; 0: its stored rows (packed). The engine pads its weights' rows.
  std::int64_t lda = 0;
  std::string to_string() const;  // "8192x8192x8192"
  std::string layout() const;     // "TN", "NN", "NT", "TT"
};

double gemm_flops(const GemmShape& s);  // 2 M N K
// Bytes of A, B and D of one operand set.
struct GemmOperandBytes {
  std::uint64_t a = 0, b = 0, d = 0;
  std::uint64_t total() const { return a + b + d; }
};
GemmOperandBytes gemm_operand_bytes(GemmDtype t, const GemmShape& s);
// Why cuBLASLt cannot run this dtype + shape (zero dimension, fp8/int8 alignment or layout, an
// lda below A's stored rows or off the dtype's alignment), or nothing. B and D are packed, so
// the alignment of M, N, K covers their leading dimensions.
std::optional<std::string> gemm_shape_problem(GemmDtype t, const GemmShape& s);

// The tolerance of one D entry: |d - ref| <= eps_out * |ref| + eps_acc * sum_k |a_ik b_kj|.
// eps_out covers rounding D to its type once, eps_acc the accumulation order and reduced-precision
// products (tf32). Zero for int8 (exact). It holds for the algorithms of a plan made with
// GemmReduction::AccumulateType; a split-K reduction in D's type is outside it (see there).
struct GemmTolerance {
  double eps_out = 0, eps_acc = 0;
};
GemmTolerance gemm_tolerance(GemmDtype t);

// How a split-K algorithm may sum its partial results (cuBLASLt's reduction schemes). INPLACE and
// OUTPUT_TYPE round each split's partial sum to D's type before the next is added: with a D
// narrower than the accumulate type (fp16, bf16, fp8's bf16) that is an extra rounding of the
// order of the partial's ulp, not the result's, so where the partials cancel an entry can be off
// by several of its own ulps; the sum is no longer one in the accumulate type.
enum class GemmReduction {
  AccumulateType,  // no split-K, or partials summed in the accumulate type (COMPUTE_TYPE scheme)
  Any,             // whatever the heuristic offers, reductions in D's type included
};
// The heuristic's reduction scheme mask (CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK) for `t`:
// NONE | COMPUTE_TYPE with AccumulateType where D is narrower than the accumulate type (as torch's
// allow_bf16_reduced_precision_reduction = False), else every scheme (a D in the accumulate type
// is summed in it whatever the scheme).
std::uint32_t gemm_reduction_mask(GemmDtype t, GemmReduction r);
// Whether D is narrower than the accumulate type (fp16, bf16, fp8).
bool gemm_output_narrower(GemmDtype t);
// "none", "inplace", "compute", "output" for a cublasLtReductionScheme_t; "?" for another value.
const char* reduction_scheme_name(std::uint32_t scheme);

// Workspace cuBLASLt gets: 32 MiB on Hopper and newer (NVIDIA's recommendation), 4 MiB before.
std::size_t gemm_workspace_bytes(int cc_major);

// One algorithm the heuristic offered, with a readable name of its configuration.
struct GemmAlgo {
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace_bytes = 0;
  float waves = 0;
  int heuristic_rank = 0;                  // 0 = the heuristic's first pick
  int split_k() const;                     // CUBLASLT_ALGO_CONFIG_SPLITK_NUM
  std::uint32_t reduction_scheme() const;  // CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME
  // "id 66 tile 20 stages 33 splitK 1 reduction none swizzle 0 cluster 2"
  std::string describe() const;
  nlohmann::ordered_json to_json() const;
};

// The descriptors of one dtype + shape on the current device; move-only. The heuristic is told
// the workspace and the reduction schemes allowed. Pointer alignment is left at cuBLASLt's
// default assumption (MIN_ALIGNMENT_A/B/C/D_BYTES 256: matmul's operand sets are 256-byte
// aligned); the alignment the leading dimensions allow (an odd one: the element size only)
// cuBLASLt takes from the layouts itself.
class GemmPlan {
 public:
  GemmPlan(const CublasLtHandle& handle, GemmDtype dtype, const GemmShape& shape,
           std::size_t workspace_bytes, GemmReduction reduction = GemmReduction::AccumulateType);
  ~GemmPlan();
  GemmPlan(GemmPlan&& o) noexcept;
  GemmPlan& operator=(GemmPlan&& o) noexcept;
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;

  GemmDtype dtype() const noexcept { return dtype_; }
  const GemmShape& shape() const noexcept { return shape_; }
  // Up to `max_count` algorithms in the heuristic's order (throws when it offers none).
  std::vector<GemmAlgo> candidates(int max_count) const;
  // D = op(A) op(B) with `algo` (D += op(A) op(B) with `accumulate`: beta 1, C = D, as a
  // weight gradient summed over microbatches); `workspace` holds at least the plan's workspace
  // bytes.
  void run(const GemmAlgo& algo, const void* a, const void* b, void* d, void* workspace,
           cudaStream_t stream, bool accumulate = false) const;

 private:
  void reset() noexcept;
  cublasLtHandle_t handle_ = nullptr;
  GemmDtype dtype_ = GemmDtype::Bf16;
  GemmShape shape_;
  std::size_t workspace_bytes_ = 0;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulPreference_t pref_ = nullptr;
};

}  // namespace gpubench
