// The cuBLASLt GEMM wrapper: type table, layout rules, descriptors and the heuristic's candidates.
#include "gpubench/core/gemm.hpp"

#include <fmt/format.h>

#include <utility>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"

namespace gpubench {

namespace {

// A, B, D element types, cuBLASLt types, compute type, and the rules each dtype comes with.
// fp16/bf16/fp8 accumulate in fp32 (what frameworks use for training and inference); fp8 writes
// bf16 as torch._scaled_mm does; e5m2 pairs with an e4m3 B (cuBLASLt has no e5m2 x e5m2), the
// gradient GEMM of fp8 training.
const GemmTypeInfo kTypes[] = {
    {GemmElement::F64, GemmElement::F64, GemmElement::F64, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F,
     CUDA_R_64F, CUBLAS_COMPUTE_64F, "fp64 x fp64", "fp64", "fp64", 0, false, 1},
    {GemmElement::F32, GemmElement::F32, GemmElement::F32, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
     CUDA_R_32F, CUBLAS_COMPUTE_32F, "fp32 x fp32", "fp32", "fp32", 0, false, 1},
    {GemmElement::F32, GemmElement::F32, GemmElement::F32, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
     CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, "tf32 x tf32 (fp32 storage)", "fp32", "fp32", 80,
     false, 1},
    {GemmElement::F16, GemmElement::F16, GemmElement::F16, CUDA_R_16F, CUDA_R_16F, CUDA_R_16F,
     CUDA_R_32F, CUBLAS_COMPUTE_32F, "fp16 x fp16", "fp32", "fp16", 70, false, 1},
    {GemmElement::BF16, GemmElement::BF16, GemmElement::BF16, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
     CUDA_R_32F, CUBLAS_COMPUTE_32F, "bf16 x bf16", "fp32", "bf16", 80, false, 1},
    {GemmElement::E4M3, GemmElement::E4M3, GemmElement::BF16, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3,
     CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F, "e4m3 x e4m3", "fp32", "bf16", 89, true, 16},
    {GemmElement::E5M2, GemmElement::E4M3, GemmElement::BF16, CUDA_R_8F_E5M2, CUDA_R_8F_E4M3,
     CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F, "e5m2 x e4m3", "fp32", "bf16", 89, true, 16},
    {GemmElement::I8, GemmElement::I8, GemmElement::I32, CUDA_R_8I, CUDA_R_8I, CUDA_R_32I,
     CUDA_R_32I, CUBLAS_COMPUTE_32I, "int8 x int8", "int32", "int32", 75, true, 4},
};

const char* const kNames[] = {"fp64", "fp32",     "tf32",     "fp16",
                              "bf16", "fp8_e4m3", "fp8_e5m2", "int8"};

}  // namespace

const char* to_string(GemmDtype t) {
  return kNames[static_cast<int>(t)];
}

GemmDtype parse_gemm_dtype(const std::string& text) {
  const std::string name = canonical_dtype(text);
  for (GemmDtype t : kAllGemmDtypes)
    if (name == to_string(t)) return t;
  std::string known;
  for (GemmDtype t : kAllGemmDtypes) known += std::string(known.empty() ? "" : ", ") + to_string(t);
  throw InputError(fmt::format("unknown data type '{}' (known: {})", text, known));
}

std::size_t element_bytes(GemmElement e) {
  switch (e) {
    case GemmElement::F64:
      return 8;
    case GemmElement::F32:
    case GemmElement::I32:
      return 4;
    case GemmElement::F16:
    case GemmElement::BF16:
      return 2;
    case GemmElement::E4M3:
    case GemmElement::E5M2:
    case GemmElement::I8:
      return 1;
  }
  return 0;
}

const GemmTypeInfo& gemm_type_info(GemmDtype t) {
  return kTypes[static_cast<int>(t)];
}

std::optional<std::string> gemm_dtype_unsupported(GemmDtype t, int cc_major, int cc_minor) {
  const int need = gemm_type_info(t).min_cc;
  if (cc_major * 10 + cc_minor >= need) return std::nullopt;
  return fmt::format("{} needs compute capability {}.{} or newer (this GPU: {}.{})", to_string(t),
                     need / 10, need % 10, cc_major, cc_minor);
}

std::string GemmShape::to_string() const {
  return fmt::format("{}x{}x{}", m, n, k);
}

std::string GemmShape::layout() const {
  return std::string(trans_a ? "T" : "N") + (trans_b ? "T" : "N");
}

double gemm_flops(const GemmShape& s) {
  return 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
}

GemmOperandBytes gemm_operand_bytes(GemmDtype t, const GemmShape& s) {
  const GemmTypeInfo& info = gemm_type_info(t);
  const auto m = static_cast<std::uint64_t>(s.m), n = static_cast<std::uint64_t>(s.n),
             k = static_cast<std::uint64_t>(s.k);
  return {m * k * element_bytes(info.a), k * n * element_bytes(info.b),
          m * n * element_bytes(info.d)};
}

std::optional<std::string> gemm_shape_problem(GemmDtype t, const GemmShape& s) {
  if (s.m <= 0 || s.n <= 0 || s.k <= 0)
    return fmt::format("shape {}: every dimension must be positive", s.to_string());
  const GemmTypeInfo& info = gemm_type_info(t);
  if (info.tn_only && !(s.trans_a && !s.trans_b))
    return fmt::format("{} needs the TN layout (A transposed, B not); got {}", to_string(t),
                       s.layout());
  if (info.alignment > 1 && (s.m % info.alignment || s.n % info.alignment || s.k % info.alignment))
    return fmt::format("{} needs M, N and K to be multiples of {}; got {}", to_string(t),
                       info.alignment, s.to_string());
  if (s.lda != 0) {
    const std::int64_t a_rows = s.trans_a ? s.k : s.m;
    if (s.lda < a_rows)
      return fmt::format("shape {}: lda {} is below A's {} stored rows", s.to_string(), s.lda,
                         a_rows);
    if (info.alignment > 1 && s.lda % info.alignment)
      return fmt::format("{} needs lda to be a multiple of {}; got {}", to_string(t),
                         info.alignment, s.lda);
  }
  return std::nullopt;
}

GemmTolerance gemm_tolerance(GemmDtype t) {
  switch (t) {
    case GemmDtype::Fp64:
      return {1e-15, 1e-13};
    case GemmDtype::Fp32:
      return {2e-7, 1e-5};
    case GemmDtype::Tf32:  // inputs rounded to 10 mantissa bits: each product within 2^-10
      return {2e-7, 2e-3};
    case GemmDtype::Fp16:  // half an ulp of fp16 is 2^-11
      return {0x1.0p-10, 1e-5};
    case GemmDtype::Bf16:  // half an ulp of bf16 is 2^-8
      return {0x1.0p-7, 1e-5};
    case GemmDtype::Fp8E4M3:
    case GemmDtype::Fp8E5M2:  // exact products, fp32 sums, bf16 output
      return {0x1.0p-7, 1e-4};
    case GemmDtype::Int8:
      return {0, 0};
  }
  return {};
}

bool gemm_output_narrower(GemmDtype t) {
  const GemmTypeInfo& info = gemm_type_info(t);
  const std::size_t accumulate_bytes = info.compute == CUBLAS_COMPUTE_64F ? 8 : 4;
  return element_bytes(info.d) < accumulate_bytes;
}

std::uint32_t gemm_reduction_mask(GemmDtype t, GemmReduction r) {
  if (r == GemmReduction::Any || !gemm_output_narrower(t)) return CUBLASLT_REDUCTION_SCHEME_MASK;
  return CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
}

const char* reduction_scheme_name(std::uint32_t scheme) {
  switch (scheme) {
    case CUBLASLT_REDUCTION_SCHEME_NONE:
      return "none";
    case CUBLASLT_REDUCTION_SCHEME_INPLACE:
      return "inplace";
    case CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE:
      return "compute";
    case CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE:
      return "output";
    default:
      return "?";
  }
}

std::size_t gemm_workspace_bytes(int cc_major) {
  return cc_major >= 9 ? (32u << 20) : (4u << 20);
}

namespace {

template <class T>
T algo_attr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T v{};
  std::size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written) !=
      CUBLAS_STATUS_SUCCESS)
    return T{};
  return v;
}

}  // namespace

int GemmAlgo::split_k() const {
  return algo_attr<int>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
}

std::uint32_t GemmAlgo::reduction_scheme() const {
  return algo_attr<std::uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
}

std::string GemmAlgo::describe() const {
  return fmt::format("id {} tile {} stages {} splitK {} reduction {} swizzle {} cluster {}",
                     algo_attr<int>(algo, CUBLASLT_ALGO_CONFIG_ID),
                     algo_attr<std::uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                     algo_attr<std::uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID), split_k(),
                     reduction_scheme_name(reduction_scheme()),
                     algo_attr<std::uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                     algo_attr<std::uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
}

nlohmann::ordered_json GemmAlgo::to_json() const {
  return {{"heuristic_rank", heuristic_rank},
          {"config", describe()},
          {"workspace_bytes", workspace_bytes},
          {"waves", waves}};
}

GemmPlan::GemmPlan(const CublasLtHandle& handle, GemmDtype dtype, const GemmShape& shape,
                   std::size_t workspace_bytes, GemmReduction reduction)
    : handle_(handle.get()), dtype_(dtype), shape_(shape), workspace_bytes_(workspace_bytes) {
  if (auto why = gemm_shape_problem(dtype, shape)) throw InputError(*why);
  const GemmTypeInfo& info = gemm_type_info(dtype);
  try {
    GPB_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, info.compute, info.scale_cuda));
    const cublasOperation_t ta = shape.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = shape.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    GPB_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    GPB_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    // fp8: no scale pointers, so the per-tensor scales are 1. (cuBLASLt 13 on Hopper refused
    // every algorithm with device scale pointers set and the default scale mode.)
    // Stored shapes (column-major, leading dimension = stored rows, A's lda where given).
    const std::uint64_t a_rows = shape.trans_a ? shape.k : shape.m;
    const std::uint64_t a_cols = shape.trans_a ? shape.m : shape.k;
    const std::uint64_t b_rows = shape.trans_b ? shape.n : shape.k;
    const std::uint64_t b_cols = shape.trans_b ? shape.k : shape.n;
    const auto lda =
        static_cast<int64_t>(shape.lda != 0 ? static_cast<std::uint64_t>(shape.lda) : a_rows);
    GPB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a_, info.a_cuda, a_rows, a_cols, lda));
    GPB_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&b_, info.b_cuda, b_rows, b_cols, static_cast<int64_t>(b_rows)));
    GPB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d_, info.d_cuda, shape.m, shape.n, shape.m));
    GPB_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref_));
    const std::uint64_t ws = workspace_bytes;
    GPB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    // With AccumulateType, split-K partials of a narrow D are summed in the accumulate type, so
    // D is the accumulation rounded once: what gemm_tolerance and the reported accumulate type say.
    const std::uint32_t mask = gemm_reduction_mask(dtype, reduction);
    GPB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref_, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof(mask)));
  } catch (...) {
    reset();
    throw;
  }
}

GemmPlan::~GemmPlan() {
  reset();
}

GemmPlan::GemmPlan(GemmPlan&& o) noexcept {
  *this = std::move(o);
}

GemmPlan& GemmPlan::operator=(GemmPlan&& o) noexcept {
  if (this != &o) {
    reset();
    handle_ = std::exchange(o.handle_, nullptr);
    dtype_ = o.dtype_;
    shape_ = o.shape_;
    workspace_bytes_ = o.workspace_bytes_;
    desc_ = std::exchange(o.desc_, nullptr);
    a_ = std::exchange(o.a_, nullptr);
    b_ = std::exchange(o.b_, nullptr);
    d_ = std::exchange(o.d_, nullptr);
    pref_ = std::exchange(o.pref_, nullptr);
  }
  return *this;
}

void GemmPlan::reset() noexcept {
  if (pref_) (void)cublasLtMatmulPreferenceDestroy(pref_);
  if (d_) (void)cublasLtMatrixLayoutDestroy(d_);
  if (b_) (void)cublasLtMatrixLayoutDestroy(b_);
  if (a_) (void)cublasLtMatrixLayoutDestroy(a_);
  if (desc_) (void)cublasLtMatmulDescDestroy(desc_);
  pref_ = nullptr;
  d_ = b_ = a_ = nullptr;
  desc_ = nullptr;
}

std::vector<GemmAlgo> GemmPlan::candidates(int max_count) const {
  std::vector<cublasLtMatmulHeuristicResult_t> found(static_cast<std::size_t>(max_count));
  int returned = 0;
  GPB_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, desc_, a_, b_, d_, d_, pref_, max_count,
                                                  found.data(), &returned));
  std::vector<GemmAlgo> out;
  for (int i = 0; i < returned; ++i) {
    if (found[i].state != CUBLAS_STATUS_SUCCESS) continue;
    GemmAlgo g;
    g.algo = found[i].algo;
    g.workspace_bytes = found[i].workspaceSize;
    g.waves = found[i].wavesCount;
    g.heuristic_rank = i;
    out.push_back(g);
  }
  if (out.empty())
    throw GpuError(fmt::format("cuBLASLt offers no algorithm for {} {} {}", to_string(dtype_),
                               shape_.to_string(), shape_.layout()));
  return out;
}

void GemmPlan::run(const GemmAlgo& algo, const void* a, const void* b, void* d, void* workspace,
                   cudaStream_t stream, bool accumulate) const {
  const GemmTypeInfo& info = gemm_type_info(dtype_);
  // alpha = 1, beta = 0 (1 to accumulate) in the scale type.
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0f, zero_f = 0.0f;
  const std::int32_t one_i = 1, zero_i = 0;
  const void* alpha = &one_f;
  const void* beta = accumulate ? &one_f : &zero_f;
  if (info.scale_cuda == CUDA_R_64F) {
    alpha = &one_d;
    beta = accumulate ? &one_d : &zero_d;
  } else if (info.scale_cuda == CUDA_R_32I) {
    alpha = &one_i;
    beta = accumulate ? &one_i : &zero_i;
  }
  GPB_CUBLAS_CHECK(cublasLtMatmul(handle_, desc_, alpha, a, a_, b, b_, beta, d, d_, d, d_,
                                  &algo.algo, workspace, workspace_bytes_, stream));
}

}  // namespace gpubench
