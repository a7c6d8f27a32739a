#pragma once
// What the engine's runs read back: the time of every operation of a step (an OpObserver that
// puts CUDA events around each one), logits and other bf16 / fp16 buffers as host values, and
// the relative L2 error the checks compare them with, and how a step is measured. Shared by
// seqlen, tp and pp.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/measure.hpp"
#include "gpubench/core/options.hpp"
#include "gpubench/model/transformer.hpp"

namespace gpubench::model {

struct OpSpan {
  std::string op;
  int layer = -1;
  double seconds = 0;
};

// Events around every operation of the steps run while it is the engine's observer; collect()
// waits for them and returns the spans in order (and forgets them; events are reused).
class OpSpans final : public OpObserver {
 public:
  explicit OpSpans(int device) : device_(device) {}
  void begin(const char* op, int layer, cudaStream_t stream) override;
  void end(const char* op, int layer, cudaStream_t stream) override;
  std::vector<OpSpan> collect();

 private:
  struct Pending {
    std::string op;
    int layer;
    Event* begin;
    Event* end;
  };
  Event* next_event();
  int device_;
  std::deque<Event> events_;  // stable addresses
  std::size_t used_ = 0;
  std::vector<Pending> spans_;
};

// One stored bf16 or fp16 value (its 16 bits) as a double, exactly (subnormals, infinities and
// NaN included).
double half_bits_to_double(std::uint16_t bits, ActDtype dtype);

// `n` bf16 or fp16 values on the GPU as doubles on the host (synchronous copy).
std::vector<double> to_host_values(const void* device_ptr, std::size_t n, ActDtype dtype);

// Measurement of a whole step of the engine (a prefill, or a decode step over all the weights):
// long iterations, so a few settle (3 in quick mode, else 5, noise 1%, at least 0.2 s, at most
// 3 s; 0.05 and 1 s in quick mode); the weights dwarf the L2, so it is never flushed between
// steps. The run's --iters, --warmup, --min-time, --max-noise and --max-time, where given, win
// over these defaults.
MeasureOptions engine_step_options(const CommonOptions& common);

// ||a - b|| / ||b||; infinity when the sizes differ, an entry is not finite or b is all zero.
double relative_l2(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace gpubench::model
