// The prefill attention path of the engine and of `seqlen`'s attention-alone timing.
#include <fmt/format.h>

#include "gpubench/model/transformer.hpp"

namespace gpubench::model {

struct AttentionRunner::Impl {
  int device = 0;
};

AttentionRunner::AttentionRunner(int device, AttentionPath path)
    : impl_(std::make_unique<Impl>()), path_(path) {
  impl_->device = device;
}

AttentionRunner::~AttentionRunner() = default;

std::string AttentionRunner::prepare(const AttentionArgs&) {
  note_.clear();
  if (path_ == AttentionPath::Own) return "own";
  note_ = "cuDNN fused attention is not built into this gpubench";
  return path_ == AttentionPath::Cudnn ? "" : "own";
}

void AttentionRunner::run(const AttentionArgs& a, cudaStream_t stream) {
  prefill_attention(a, stream);
}

}  // namespace gpubench::model
