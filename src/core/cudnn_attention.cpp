// cuDNN fused flash-attention forward through the backend graph API (see cudnn_attention.hpp).
// libcudnn is opened with dlopen and its few entry points resolved with dlsym; the cuDNN headers
// only supply types and enum values. Without those headers the class compiles to a stub that
// says so.
#include "gpubench/core/cudnn_attention.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"

#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#include <dlfcn.h>
#define GPUBENCH_HAVE_CUDNN_HEADERS 1
#endif

namespace gpubench {

#if GPUBENCH_HAVE_CUDNN_HEADERS

namespace {

// ---------------------------------------------------------------------------------------------
// The library: opened once per process, never closed (plans and handles may live until exit).

struct CudnnLibrary {
  std::string error;  // why it cannot be used; "" when it can
  std::size_t version = 0;
  decltype(&cudnnGetVersion) get_version = nullptr;
  decltype(&cudnnGetErrorString) error_string = nullptr;
  decltype(&cudnnGetLastErrorString) last_error_string = nullptr;  // optional
  decltype(&cudnnCreate) create = nullptr;
  decltype(&cudnnDestroy) destroy = nullptr;
  decltype(&cudnnSetStream) set_stream = nullptr;
  decltype(&cudnnBackendCreateDescriptor) create_descriptor = nullptr;
  decltype(&cudnnBackendDestroyDescriptor) destroy_descriptor = nullptr;
  decltype(&cudnnBackendSetAttribute) set_attribute = nullptr;
  decltype(&cudnnBackendGetAttribute) get_attribute = nullptr;
  decltype(&cudnnBackendFinalize) finalize = nullptr;
  decltype(&cudnnBackendExecute) execute = nullptr;
};

// cuDNN 8 encodes major*1000 + minor*100 + patch, cuDNN 9 major*10000 + minor*100 + patch.
std::string version_string(std::size_t v) {
  if (v < 10000) return fmt::format("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100);
  return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
}

CudnnLibrary open_cudnn() {
  CudnnLibrary lib;
  void* so = nullptr;
  std::string dl_error;
  for (const char* name : {"libcudnn.so.9", "libcudnn.so"}) {
    so = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (so) break;
    const char* e = dlerror();
    if (dl_error.empty() && e) dl_error = e;
  }
  if (!so) {
    lib.error = fmt::format("libcudnn.so.9 not found ({})", dl_error);
    return lib;
  }
  const char* missing = nullptr;
  auto resolve = [&](auto& fn, const char* name, bool required) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(so, name));
    if (!fn && required && !missing) missing = name;
  };
  resolve(lib.get_version, "cudnnGetVersion", true);
  resolve(lib.error_string, "cudnnGetErrorString", true);
  resolve(lib.last_error_string, "cudnnGetLastErrorString", false);
  resolve(lib.create, "cudnnCreate", true);
  resolve(lib.destroy, "cudnnDestroy", true);
  resolve(lib.set_stream, "cudnnSetStream", true);
  resolve(lib.create_descriptor, "cudnnBackendCreateDescriptor", true);
  resolve(lib.destroy_descriptor, "cudnnBackendDestroyDescriptor", true);
  resolve(lib.set_attribute, "cudnnBackendSetAttribute", true);
  resolve(lib.get_attribute, "cudnnBackendGetAttribute", true);
  resolve(lib.finalize, "cudnnBackendFinalize", true);
  resolve(lib.execute, "cudnnBackendExecute", true);
  if (missing) {
    lib.error = fmt::format("the cuDNN library found has no {}", missing);
    return lib;
  }
  lib.version = lib.get_version();
  if (lib.version < 90000)
    lib.error = fmt::format("cuDNN {} is older than 9.0 (the fused attention graphs need 9.x)",
                            version_string(lib.version));
  return lib;
}

const CudnnLibrary& cudnn() {
  static const CudnnLibrary lib = open_cudnn();
  return lib;
}

// ---------------------------------------------------------------------------------------------
// Errors while building a plan become reasons; while running, GpuError.

struct CudnnFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string status_text(cudnnStatus_t st) {
  const CudnnLibrary& lib = cudnn();
  std::string text = fmt::format("{} ({})", lib.error_string(st), static_cast<int>(st));
  if (lib.last_error_string) {
    char message[1024] = {};
    lib.last_error_string(message, sizeof message);
    message[sizeof message - 1] = '\0';
    if (message[0]) text += fmt::format(": {}", message);
  }
  return text;
}

void check(cudnnStatus_t st, const char* what, int detail = -1) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  if (detail >= 0) throw CudnnFailure(fmt::format("{}({}): {}", what, detail, status_text(st)));
  throw CudnnFailure(fmt::format("{}: {}", what, status_text(st)));
}

// A backend descriptor owned for its whole life (move-only).
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type) {
    check(cudnn().create_descriptor(type, &d_), "cudnnBackendCreateDescriptor",
          static_cast<int>(type));
  }
  ~Descriptor() {
    if (d_) (void)cudnn().destroy_descriptor(d_);
  }
  Descriptor(Descriptor&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Descriptor& operator=(Descriptor&& o) noexcept {
    std::swap(d_, o.d_);
    return *this;
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  cudnnBackendDescriptor_t get() const noexcept { return d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// Typed setters: each passes exactly the attribute type and element count the backend documents.
void set_attr(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
              cudnnBackendAttributeType_t type, std::int64_t count, const void* values) {
  check(cudnn().set_attribute(d, name, type, count, values), "cudnnBackendSetAttribute",
        static_cast<int>(name));
}
void set_descriptor(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                    cudnnBackendDescriptor_t value) {
  set_attr(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
}
void set_int64(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, std::int64_t value) {
  set_attr(d, name, CUDNN_TYPE_INT64, 1, &value);
}
void set_data_type(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                   cudnnDataType_t value) {
  set_attr(d, name, CUDNN_TYPE_DATA_TYPE, 1, &value);
}
void set_bool(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, bool value) {
  set_attr(d, name, CUDNN_TYPE_BOOLEAN, 1, &value);
}
void set_float(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, float value) {
  set_attr(d, name, CUDNN_TYPE_FLOAT, 1, &value);
}
void set_handle(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnHandle_t h) {
  set_attr(d, name, CUDNN_TYPE_HANDLE, 1, &h);
}
void finalize(cudnnBackendDescriptor_t d, const char* what) {
  check(cudnn().finalize(d), what);
}

// ---------------------------------------------------------------------------------------------
// The operation graph of causal flash attention, in the form the backend's fused engines match.

// Unique ids of the tensors the variant pack binds (virtual tensors count up from 100).
enum : std::int64_t {
  kUidQ = 1,
  kUidK = 2,
  kUidV = 3,
  kUidO = 4,
  kUidScale = 5,
  kUidNegInf = 6,
  kUidSeqKv = 7,
  kUidSeqQ = 8,
};

using Dims = std::vector<std::int64_t>;

class GraphBuilder {
 public:
  explicit GraphBuilder(std::vector<Descriptor>& keep) : keep_(keep) {}

  cudnnBackendDescriptor_t tensor(const Dims& dims, const Dims& strides, cudnnDataType_t type,
                                  std::int64_t uid, bool is_virtual, bool by_value = false) {
    const cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    set_data_type(t, CUDNN_ATTR_TENSOR_DATA_TYPE, type);
    set_attr(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64,
             static_cast<std::int64_t>(dims.size()), dims.data());
    set_attr(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64,
             static_cast<std::int64_t>(strides.size()), strides.data());
    set_int64(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, uid);
    set_int64(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16);
    if (is_virtual) set_bool(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, true);
    if (by_value) set_bool(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, true);
    finalize(t, "tensor descriptor");
    return t;
  }
  cudnnBackendDescriptor_t intermediate(const Dims& dims, const Dims& strides,
                                        cudnnDataType_t type) {
    return tensor(dims, strides, type, next_uid_++, /*is_virtual=*/true);
  }
  // A host scalar broadcast over the graph, bound per run through the variant pack.
  cudnnBackendDescriptor_t scalar(cudnnDataType_t type, std::int64_t uid) {
    const Dims one = {1, 1, 1, 1};
    return tensor(one, one, type, uid, /*is_virtual=*/false, /*by_value=*/true);
  }

  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    const cudnnBackendDescriptor_t desc = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    set_data_type(desc, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT);
    finalize(desc, "matmul descriptor");
    const cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set_descriptor(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    set_descriptor(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    set_descriptor(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    set_descriptor(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, desc);
    finalize(op, "matmul operation");
    ops_.push_back(op);
  }

  // y = mode(x [, b [, t]]) computed in `math`; `axis` only for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t math, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t b = nullptr,
                 cudnnBackendDescriptor_t t = nullptr, std::int64_t axis = -1) {
    const cudnnBackendDescriptor_t desc = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set_attr(desc, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set_data_type(desc, CUDNN_ATTR_POINTWISE_MATH_PREC, math);
    if (mode == CUDNN_POINTWISE_GEN_INDEX) set_int64(desc, CUDNN_ATTR_POINTWISE_AXIS, axis);
    finalize(desc, "pointwise descriptor");
    const cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set_descriptor(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, desc);
    set_descriptor(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) set_descriptor(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    set_descriptor(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    if (t) set_descriptor(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    set_float(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, 1.0f);
    set_float(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, 1.0f);
    finalize(op, "pointwise operation");
    ops_.push_back(op);
  }

  // y = reduce(x) over the dimensions where y has extent 1.
  void reduction(cudnnReduceTensorOp_t reduce, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t y) {
    const cudnnBackendDescriptor_t desc = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    set_data_type(desc, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT);
    set_attr(desc, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce);
    finalize(desc, "reduction descriptor");
    const cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set_descriptor(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    set_descriptor(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    set_descriptor(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, desc);
    finalize(op, "reduction operation");
    ops_.push_back(op);
  }

  const std::vector<cudnnBackendDescriptor_t>& ops() const { return ops_; }

 private:
  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type) {
    keep_.emplace_back(type);
    return keep_.back().get();
  }

  std::vector<Descriptor>& keep_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  std::int64_t next_uid_ = 100;
};

// Appends the operations of causal attention of `a` (resolved) to `g`:
//   S = Q KT; S1 = S * scale; row = GEN_INDEX(S1, 2); col = GEN_INDEX(S1, 3);
//   [bottom right: row = row + s_kv - s_q]; keep = row >= col; S2 = keep ? S1 : -inf;
//   M = max_j S2; E = exp(S2 - M); Z = sum_j E; stats = M + log Z (virtual); P = E / Z;
//   O = P V.
void build_attention_ops(GraphBuilder& g, const AttentionArgs& a, bool bottom_right) {
  const std::int64_t b = a.batch, h = a.heads, hk = a.kv_heads, d = a.head_dim;
  const std::int64_t sq = a.q_tokens, skv = static_cast<std::int64_t>(a.q_pos0) + a.q_tokens;
  const std::int64_t cache = static_cast<std::int64_t>(a.max_context) * a.kv_stride;
  const cudnnDataType_t io = a.dtype == AttnDtype::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32;

  // Dims in (b, h, s, d) order with the row-major layouts' strides; K enters transposed
  // (b, h_kv, d, s_kv), as the first matmul's B operand.
  const auto q = g.tensor({b, h, sq, d}, {sq * a.q_stride, d, a.q_stride, 1}, io, kUidQ, false);
  const auto kt = g.tensor({b, hk, d, skv}, {cache, d, 1, a.kv_stride}, io, kUidK, false);
  const auto v = g.tensor({b, hk, skv, d}, {cache, d, a.kv_stride, 1}, io, kUidV, false);
  const auto o = g.tensor({b, h, sq, d}, {sq * h * d, d, h * d, 1}, io, kUidO, false);
  const auto scale = g.scalar(f32, kUidScale);
  const auto neg_inf = g.scalar(f32, kUidNegInf);

  const Dims score = {b, h, sq, skv}, score_strides = {h * sq * skv, sq * skv, skv, 1};
  const Dims row = {b, h, sq, 1}, row_strides = {h * sq, sq, 1, 1};

  const auto s = g.intermediate(score, score_strides, f32);
  g.matmul(q, kt, s);
  const auto s_scaled = g.intermediate(score, score_strides, f32);
  g.pointwise(CUDNN_POINTWISE_MUL, f32, s, s_scaled, scale);

  auto row_index = g.intermediate(score, score_strides, i32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, f32, s_scaled, row_index, nullptr, nullptr, 2);
  const auto col_index = g.intermediate(score, score_strides, i32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, f32, s_scaled, col_index, nullptr, nullptr, 3);
  if (bottom_right) {
    const auto seq_kv = g.scalar(i32, kUidSeqKv);
    const auto seq_q = g.scalar(i32, kUidSeqQ);
    const auto plus_kv = g.intermediate(score, score_strides, i32);
    g.pointwise(CUDNN_POINTWISE_ADD, i32, row_index, plus_kv, seq_kv);
    const auto shifted = g.intermediate(score, score_strides, i32);
    g.pointwise(CUDNN_POINTWISE_SUB, i32, plus_kv, shifted, seq_q);
    row_index = shifted;
  }
  const auto keep = g.intermediate(score, score_strides, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row_index, keep, col_index);
  const auto masked = g.intermediate(score, score_strides, f32);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, f32, s_scaled, masked, neg_inf, keep);

  const auto max = g.intermediate(row, row_strides, f32);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, max);
  const auto centered = g.intermediate(score, score_strides, f32);
  g.pointwise(CUDNN_POINTWISE_SUB, f32, masked, centered, max);
  const auto e = g.intermediate(score, score_strides, f32);
  g.pointwise(CUDNN_POINTWISE_EXP, f32, centered, e);
  const auto sum = g.intermediate(row, row_strides, f32);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  // The log-sum-exp a training step would keep: the fused pattern includes it, and leaving it
  // virtual is what makes this an inference-only run.
  const auto log_sum = g.intermediate(row, row_strides, f32);
  g.pointwise(CUDNN_POINTWISE_LOG, f32, sum, log_sum);
  const auto stats = g.intermediate(row, row_strides, f32);
  g.pointwise(CUDNN_POINTWISE_ADD, f32, max, stats, log_sum);
  // P in the storage type: the second matmul's A operand must match V's type.
  const auto p = g.intermediate(score, score_strides, io);
  g.pointwise(CUDNN_POINTWISE_DIV, f32, e, p, sum);
  g.matmul(p, v, o);
}

// Why cuDNN's fused attention cannot do `a` (resolved) here, or "".
std::string unsupported_reason(const AttentionArgs& a, std::size_t version, int sm) {
  const std::string ver = version_string(version);
  if (sm < 80)
    return fmt::format("cuDNN fused attention needs sm_80 or newer (this GPU: sm_{})", sm);
  if (version == 91000 || version == 91001)
    return fmt::format("cuDNN {} has known fused-attention bugs (9.10.2 or newer works)", ver);
  if (a.batch < 1 || a.q_tokens < 1 || a.heads < 1 || a.kv_heads < 1 || a.q_pos0 < 0)
    return "empty or negative attention shape";
  if (a.heads % a.kv_heads != 0)
    return fmt::format("heads {} not a multiple of kv_heads {}", a.heads, a.kv_heads);
  if (a.head_dim % 8 != 0 || a.head_dim < 8 || a.head_dim > 256)
    return fmt::format("head_dim {} (cuDNN needs a multiple of 8, at most 256)", a.head_dim);
  if (sm / 10 == 8 && a.head_dim > 128 && version < 91000)
    return fmt::format("head_dim {} > 128 needs cuDNN 9.10 on sm_8x (have {})", a.head_dim, ver);
  if (sm / 10 >= 10 && a.head_dim > 128 && version < 90900)
    return fmt::format("head_dim {} > 128 needs cuDNN 9.9 on sm_{} (have {})", a.head_dim, sm, ver);
  if (a.q_stride % 8 != 0 || a.kv_stride % 8 != 0)
    return fmt::format("q_stride {} / kv_stride {} not multiples of 8 elements (16 bytes)",
                       a.q_stride, a.kv_stride);
  if (a.q_stride < static_cast<std::int64_t>(a.heads) * a.head_dim ||
      a.kv_stride < static_cast<std::int64_t>(a.kv_heads) * a.head_dim)
    return "strides smaller than a row of heads";
  if (static_cast<std::int64_t>(a.q_pos0) + a.q_tokens > a.max_context)
    return fmt::format("q_pos0 + q_tokens = {} exceeds max_context {}",
                       static_cast<std::int64_t>(a.q_pos0) + a.q_tokens, a.max_context);
  if (a.q_tokens == 1 && version < 91000)
    return fmt::format("a single query row with a causal mask needs cuDNN 9.10 (have {})", ver);
  if (a.q_pos0 > 0) {
    // Bottom-right causal alignment (queries after a cached prefix).
    if (version < 90300)
      return fmt::format("q_pos0 > 0 (bottom-right causal mask) needs cuDNN 9.3 (have {})", ver);
    const std::int64_t skv = static_cast<std::int64_t>(a.q_pos0) + a.q_tokens;
    if (version < 90600 && (a.q_tokens % 64 != 0 || skv % 64 != 0))
      return fmt::format(
          "q_pos0 > 0 with q_tokens or q_pos0 + q_tokens not a multiple of 64 "
          "needs cuDNN 9.6 (have {})",
          ver);
  }
  return "";
}

// Pointers are not part of a plan: checked on every prepare() and run().
std::string misaligned_reason(const AttentionArgs& a) {
  for (const void* p : {a.q, a.k, a.v, static_cast<const void*>(a.out)})
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0)
      return "q, k, v and out must be 16-byte aligned for cuDNN";
  return "";
}

using PlanKey =
    std::tuple<int, int, int, int, int, int, int, std::int64_t, std::int64_t, int, std::uint32_t>;

PlanKey plan_key(const AttentionArgs& a) {  // `a` resolved
  std::uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &a.scale, sizeof scale_bits);
  return {a.batch,   a.q_tokens,    a.heads,    a.kv_heads,  a.head_dim,
          a.q_pos0,  a.max_context, a.q_stride, a.kv_stride, static_cast<int>(a.dtype),
          scale_bits};
}

// One finalized execution plan, everything it was built from, and the values its by-value
// scalars point at (they must outlive every variant pack that names them).
struct Plan {
  std::vector<Descriptor> graph;  // tensors, operations, the operation graph, engine configs
  std::vector<Descriptor> plan;   // the execution plan (one element once found)
  std::int64_t workspace_bytes = 0;
  std::string engine;
  bool bottom_right = false;
  float scale = 0, neg_inf = 0;
  std::int32_t seq_kv = 0, seq_q = 0;
  // The variant pack of the last run, reused while the pointers stay the same.
  std::vector<Descriptor> variant_pack;
  const void* bound[5] = {};
};

struct Entry {
  std::string reason;  // "" when `plan` is usable
  std::unique_ptr<Plan> plan;
};

// "engine 8 (runtime-compiled; knobs 17=1 24=3)" from an engine configuration.
std::string describe_engine(cudnnBackendDescriptor_t config) {
  const CudnnLibrary& lib = cudnn();
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t engine_raw = engine.get();
  std::int64_t n = 0;
  check(lib.get_attribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                          &engine_raw),
        "engine of config");
  std::int64_t index = -1;
  check(lib.get_attribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                          &index),
        "engine index");
  std::string text = fmt::format("engine {}", index);
  std::vector<std::string> notes;
  cudnnBackendBehaviorNote_t behavior[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT] = {};
  std::int64_t behavior_count = 0;
  if (lib.get_attribute(engine.get(), CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                        CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &behavior_count,
                        behavior) == CUDNN_STATUS_SUCCESS) {
    for (std::int64_t i = 0; i < behavior_count && i < CUDNN_BEHAVIOR_NOTE_TYPE_COUNT; ++i)
      if (behavior[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION)
        notes.push_back("runtime-compiled");
  }
  std::vector<Descriptor> knobs;
  std::vector<cudnnBackendDescriptor_t> knob_raw;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
    knobs.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    knob_raw.push_back(knobs.back().get());
  }
  std::int64_t knob_count = 0;
  if (lib.get_attribute(config, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                        CUDNN_KNOB_TYPE_COUNTS, &knob_count,
                        knob_raw.data()) == CUDNN_STATUS_SUCCESS) {
    std::string choices;
    for (std::int64_t i = 0; i < knob_count && i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
      cudnnBackendKnobType_t type = CUDNN_KNOB_TYPE_COUNTS;
      std::int64_t value = 0, got = 0;
      if (lib.get_attribute(knob_raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1,
                            &got, &type) != CUDNN_STATUS_SUCCESS ||
          lib.get_attribute(knob_raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1,
                            &got, &value) != CUDNN_STATUS_SUCCESS)
        continue;
      choices += fmt::format("{}{}={}", choices.empty() ? "" : " ", static_cast<int>(type), value);
    }
    if (!choices.empty()) notes.push_back("knobs " + choices);
  }
  for (std::size_t i = 0; i < notes.size(); ++i)
    text += (i == 0 ? " (" : "; ") + notes[i] + (i + 1 == notes.size() ? ")" : "");
  return text;
}

}  // namespace

struct CudnnAttention::Impl {
  int device = 0;
  cudnnHandle_t handle = nullptr;
  std::string handle_error;  // cached failure to create the handle or an unusable GPU
  int sm = 0;
  std::map<PlanKey, Entry> entries;
  DeviceBuffer workspace;
  // Smaller workspaces replaced by a larger one: kept until destruction, so CUDA graphs that
  // captured a run with them stay valid.
  std::vector<DeviceBuffer> retired;

  explicit Impl(int dev) : device(dev) {}
  ~Impl() {
    entries.clear();  // descriptors before the handle they were finalized with
    if (!handle) return;
    int previous = -1;
    const bool have_previous = cudaGetDevice(&previous) == cudaSuccess;
    if (!have_previous || previous != device) (void)cudaSetDevice(device);
    (void)cudnn().destroy(handle);
    if (have_previous && previous != device) (void)cudaSetDevice(previous);
  }

  // The handle and the GPU's compute capability, made on first use; a reason when impossible.
  std::string ensure_handle() {
    if (handle) return "";
    if (!handle_error.empty()) return handle_error;
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
      (void)cudaGetLastError();
      return fmt::format("GPU {} is not usable", device);
    }
    struct Restore {
      int device;
      ~Restore() { (void)cudaSetDevice(device); }
    } restore{previous};
    int major = 0, minor = 0;
    cudaError_t err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (err == cudaSuccess)
      err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return fmt::format("cannot query GPU {}: {}", device, cudaGetErrorString(err));
    }
    sm = 10 * major + minor;
    const cudnnStatus_t st = cudnn().create(&handle);
    if (st != CUDNN_STATUS_SUCCESS) {
      handle = nullptr;
      handle_error = fmt::format("cudnnCreate failed: {}", status_text(st));
    }
    return handle_error;
  }

  // Finds the first configuration the heuristics (mode A, then the fallback list) propose that
  // finalizes into an execution plan for the graph in `plan.graph`.
  void choose_engine(Plan& plan, cudnnBackendDescriptor_t op_graph) {
    const CudnnLibrary& lib = cudnn();
    std::string first_failure;
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      Descriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
      set_descriptor(heur.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, op_graph);
      set_attr(heur.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
      if (const cudnnStatus_t st = lib.finalize(heur.get()); st != CUDNN_STATUS_SUCCESS) {
        if (first_failure.empty()) first_failure = "heuristics: " + status_text(st);
        continue;
      }
      std::int64_t count = 0;
      check(lib.get_attribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
            "heuristic result count");
      if (count <= 0) continue;
      std::vector<Descriptor> configs;
      std::vector<cudnnBackendDescriptor_t> raw;
      for (std::int64_t i = 0; i < count; ++i) {
        configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        raw.push_back(configs.back().get());
      }
      std::int64_t returned = 0;
      check(lib.get_attribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned, raw.data()),
            "heuristic results");
      for (std::int64_t i = 0; i < returned && i < count; ++i) {
        Descriptor exec(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        set_handle(exec.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, handle);
        set_descriptor(exec.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, raw[i]);
        if (const cudnnStatus_t st = lib.finalize(exec.get()); st != CUDNN_STATUS_SUCCESS) {
          if (first_failure.empty()) first_failure = "execution plan: " + status_text(st);
          continue;
        }
        std::int64_t got = 0;
        check(lib.get_attribute(exec.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                CUDNN_TYPE_INT64, 1, &got, &plan.workspace_bytes),
              "workspace size");
        try {
          plan.engine = describe_engine(raw[i]);
        } catch (const CudnnFailure&) {
          plan.engine = "engine ?";
        }
        plan.engine += fmt::format(", heuristics {} candidate {} of {}",
                                   mode == CUDNN_HEUR_MODE_A ? "A" : "fallback", i + 1, count);
        plan.plan.push_back(std::move(exec));
        for (Descriptor& c : configs) plan.graph.push_back(std::move(c));
        return;
      }
    }
    throw CudnnFailure(first_failure.empty()
                           ? std::string("no engine supports the graph")
                           : "no engine supports the graph; first failure: " + first_failure);
  }

  std::unique_ptr<Plan> build(const AttentionArgs& a) {
    auto plan = std::make_unique<Plan>();
    plan->bottom_right = a.q_pos0 > 0;  // with q_pos0 == 0 both alignments are the same mask
    plan->scale = a.scale;
    plan->neg_inf = cudnn().version < 91000 ? std::numeric_limits<float>::lowest()
                                            : -std::numeric_limits<float>::infinity();
    plan->seq_kv = a.q_pos0 + a.q_tokens;
    plan->seq_q = a.q_tokens;

    GraphBuilder g(plan->graph);
    build_attention_ops(g, a, plan->bottom_right);
    plan->graph.emplace_back(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    const cudnnBackendDescriptor_t op_graph = plan->graph.back().get();
    set_handle(op_graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, handle);
    set_attr(op_graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
             static_cast<std::int64_t>(g.ops().size()), g.ops().data());
    finalize(op_graph, "operation graph");
    choose_engine(*plan, op_graph);
    return plan;
  }

  // Grows the shared workspace to `bytes`; a reason when the GPU has no room.
  std::string reserve_workspace(std::int64_t bytes) {
    if (bytes <= 0 || static_cast<std::size_t>(bytes) <= workspace.bytes()) return "";
    try {
      DeviceBuffer grown(device, static_cast<std::size_t>(bytes));
      if (workspace) retired.push_back(std::move(workspace));
      workspace = std::move(grown);
    } catch (const GpuError& e) {
      return fmt::format("cuDNN workspace of {} bytes: {}", bytes, e.what());
    }
    return "";
  }
};

CudnnAttention::CudnnAttention(int device) : impl_(std::make_unique<Impl>(device)) {}
CudnnAttention::~CudnnAttention() = default;

std::string CudnnAttention::library_status() {
  const CudnnLibrary& lib = cudnn();
  if (!lib.error.empty()) return lib.error;
  return "cuDNN " + version_string(lib.version);
}

bool CudnnAttention::library_available() {
  return cudnn().error.empty();
}

std::string CudnnAttention::prepare(const AttentionArgs& args) {
  if (!cudnn().error.empty()) return cudnn().error;
  const AttentionArgs a = resolved_attention_args(args);
  const PlanKey key = plan_key(a);
  if (auto it = impl_->entries.find(key); it != impl_->entries.end())
    return it->second.reason.empty() ? misaligned_reason(a) : it->second.reason;
  if (std::string why = impl_->ensure_handle(); !why.empty()) return why;
  DeviceGuard guard(impl_->device);
  if (std::string why = unsupported_reason(a, cudnn().version, impl_->sm); !why.empty()) {
    impl_->entries[key].reason = why;
    return why;
  }
  if (std::string why = misaligned_reason(a); !why.empty()) return why;
  Entry entry;
  try {
    entry.plan = impl_->build(a);
    entry.reason = impl_->reserve_workspace(entry.plan->workspace_bytes);
    if (!entry.reason.empty()) return entry.reason;  // not cached: memory may free up later
  } catch (const CudnnFailure& e) {
    entry.plan.reset();
    entry.reason = fmt::format("cuDNN {} cannot build this attention graph: {}",
                               version_string(cudnn().version), e.what());
  }
  std::string reason = entry.reason;
  impl_->entries.emplace(key, std::move(entry));
  return reason;
}

void CudnnAttention::run(const AttentionArgs& args, cudaStream_t stream) {
  const AttentionArgs a = resolved_attention_args(args);
  auto it = impl_->entries.find(plan_key(a));
  if (it == impl_->entries.end() || !it->second.plan)
    throw GpuError("CudnnAttention::run: this attention shape was not prepared successfully");
  Plan& plan = *it->second.plan;
  const void* bound[5] = {a.q, a.k, a.v, a.out, impl_->workspace.get()};
  if (!a.q || !a.k || !a.v || !a.out)
    throw GpuError("CudnnAttention::run: q, k, v and out must be set");
  if (std::string why = misaligned_reason(a); !why.empty())
    throw GpuError("CudnnAttention::run: " + why);
  const CudnnLibrary& lib = cudnn();
  DeviceGuard guard(impl_->device);
  try {
    if (plan.variant_pack.empty() || std::memcmp(bound, plan.bound, sizeof bound) != 0) {
      plan.variant_pack.clear();
      std::vector<std::int64_t> uids = {kUidQ, kUidK, kUidV, kUidO, kUidScale, kUidNegInf};
      std::vector<void*> pointers = {const_cast<void*>(a.q),
                                     const_cast<void*>(a.k),
                                     const_cast<void*>(a.v),
                                     a.out,
                                     &plan.scale,
                                     &plan.neg_inf};
      if (plan.bottom_right) {
        uids.insert(uids.end(), {kUidSeqKv, kUidSeqQ});
        pointers.insert(pointers.end(), {&plan.seq_kv, &plan.seq_q});
      }
      Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
      set_attr(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
               static_cast<std::int64_t>(uids.size()), uids.data());
      set_attr(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
               static_cast<std::int64_t>(pointers.size()), pointers.data());
      void* workspace = impl_->workspace.get();
      set_attr(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
      finalize(pack.get(), "variant pack");
      plan.variant_pack.push_back(std::move(pack));
      std::memcpy(plan.bound, bound, sizeof bound);
    }
    check(lib.set_stream(impl_->handle, stream), "cudnnSetStream");
    check(lib.execute(impl_->handle, plan.plan.front().get(), plan.variant_pack.front().get()),
          "cudnnBackendExecute");
  } catch (const CudnnFailure& e) {
    plan.variant_pack.clear();
    throw GpuError(
        fmt::format("cuDNN attention ({}) on GPU {}: {}", plan.engine, impl_->device, e.what()));
  }
}

std::string CudnnAttention::describe(const AttentionArgs& args) const {
  const auto it = impl_->entries.find(plan_key(resolved_attention_args(args)));
  if (it == impl_->entries.end() || !it->second.plan) return "";
  const Plan& plan = *it->second.plan;
  return fmt::format("cuDNN {} {}, workspace {} B{}", version_string(cudnn().version), plan.engine,
                     plan.workspace_bytes, plan.bottom_right ? ", bottom-right causal" : "");
}

#else  // no cuDNN headers at build time

struct CudnnAttention::Impl {};

namespace {
constexpr const char* kNoHeaders = "gpubench was built without the cuDNN headers";
}

CudnnAttention::CudnnAttention(int) {}
CudnnAttention::~CudnnAttention() = default;
std::string CudnnAttention::library_status() {
  return kNoHeaders;
}
bool CudnnAttention::library_available() {
  return false;
}
std::string CudnnAttention::prepare(const AttentionArgs&) {
  return kNoHeaders;
}
void CudnnAttention::run(const AttentionArgs&, cudaStream_t) {
  throw GpuError(std::string("CudnnAttention::run: ") + kNoHeaders);
}
std::string CudnnAttention::describe(const AttentionArgs&) const {
  return "";
}

#endif

}  // namespace gpubench
