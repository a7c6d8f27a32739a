// The prefill attention path of the engine and of `seqlen`'s attention-alone timing: cuDNN's
// fused attention where it can run the shape, else gpubench's own kernel.
#include <fmt/format.h>

#include <map>
#include <mutex>
#include <tuple>

#include "gpubench/core/cudnn_attention.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/model/transformer.hpp"

namespace gpubench::model {

namespace {

// One cuDNN object per GPU for the whole process: its plans (compiled at first use of a shape,
// which takes a moment) then serve every engine built on that GPU, point after point. Engines of
// several threads can share a GPU (tensor-parallel ranks in one process on one GPU), and the
// object's plan cache and handle are not thread-safe: every call on it holds its GPU's lock.
struct SharedCudnn {
  explicit SharedCudnn(int device) : attention(device) {}
  std::mutex mutex;
  CudnnAttention attention;
};
SharedCudnn& shared_cudnn(int device) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<SharedCudnn>> by_device;
  std::lock_guard<std::mutex> lock(mutex);
  auto& p = by_device[device];
  if (!p) p = std::make_unique<SharedCudnn>(device);
  return *p;
}

// The fields a plan depends on (not the pointers).
using ShapeKey = std::tuple<int, int, int, int, int, int, int, std::int64_t, std::int64_t, int>;
ShapeKey key_of(const AttentionArgs& a) {
  return {a.batch,  a.q_tokens,    a.heads,    a.kv_heads,  a.head_dim,
          a.q_pos0, a.max_context, a.q_stride, a.kv_stride, static_cast<int>(a.dtype)};
}

}  // namespace

struct AttentionRunner::Impl {
  int device = 0;
  std::map<ShapeKey, bool> use_cudnn;  // per prepared shape
};

AttentionRunner::AttentionRunner(int device, AttentionPath path)
    : impl_(std::make_unique<Impl>()), path_(path) {
  impl_->device = device;
}

AttentionRunner::~AttentionRunner() = default;

std::string AttentionRunner::prepare(const AttentionArgs& raw) {
  const AttentionArgs a = resolved_attention_args(raw);
  note_.clear();
  if (path_ == AttentionPath::Own) {
    impl_->use_cudnn[key_of(a)] = false;
    return "own";
  }
  SharedCudnn& cudnn = shared_cudnn(impl_->device);
  std::string why;
  {
    std::lock_guard<std::mutex> lock(cudnn.mutex);
    why = cudnn.attention.prepare(a);
  }
  impl_->use_cudnn[key_of(a)] = why.empty();
  if (why.empty()) return "cudnn";
  note_ = why;
  return path_ == AttentionPath::Cudnn ? "" : "own";
}

void AttentionRunner::run(const AttentionArgs& raw, cudaStream_t stream) {
  const AttentionArgs a = resolved_attention_args(raw);
  auto it = impl_->use_cudnn.find(key_of(a));
  if (it == impl_->use_cudnn.end()) {
    if (prepare(a).empty()) throw InputError("--attention cudnn: " + note_);
    it = impl_->use_cudnn.find(key_of(a));
  }
  if (it->second) {
    SharedCudnn& cudnn = shared_cudnn(impl_->device);
    std::lock_guard<std::mutex> lock(cudnn.mutex);
    cudnn.attention.run(a, stream);
  } else {
    prefill_attention(a, stream);
  }
}

}  // namespace gpubench::model
