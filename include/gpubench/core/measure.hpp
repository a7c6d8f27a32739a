#pragma once
// The measurement core: the one place that times. CUDA events around each iteration, warm-up
// first, then iterations until min iterations AND min time AND relative noise <= target, or a
// time cap. A spin kernel holds the stream while a batch of iterations is queued, so launch
// overhead stays out of the events. Every per-iteration sample is kept.
#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

#include "gpubench/core/monitor.hpp"
#include "gpubench/core/stats.hpp"

namespace gpubench {

// L2 handling between iterations: Cold flushes L2 (a memset of an L2-sized buffer) before each
// iteration, outside the timed region; Rotate leaves it to the launch (which receives the
// iteration index to pick its buffer set); Hot does nothing.
enum class L2Policy { Cold, Rotate, Hot };
const char* to_string(L2Policy p);
L2Policy parse_l2_policy(const std::string& text);  // "cold" | "rotate" | "hot"; throws InputError

struct MeasureOptions {
  int warmup = 2;            // untimed iterations first
  int min_iters = 10;        // at least this many timed iterations
  int max_iters = 100000;    // never more
  double min_time_s = 0.25;  // at least this much GPU time in timed iterations
  double max_noise = 0.005;  // stop when stdev/mean <= this (0.5%)
  double max_time_s = 5.0;   // wall-clock cap for one measurement (host clock bounds the loop only)
  int fixed_iters = 0;       // > 0: exactly this many timed iterations, no noise rule (--iters)
  L2Policy l2 = L2Policy::Cold;
  bool spin = true;  // hold the stream with the spin kernel while a batch is queued
  // A long hold (matmul --sustained) ends at SIGINT or SIGTERM with the iterations it timed
  // (stop_reason "interrupted"); any other measurement runs to its rule, the module stopping
  // after it.
  bool interruptible = false;
  double timeout_s =
      0;  // > 0: GPU work unfinished this long after it was queued throws TimeoutError
  // Several ranks (RankGroup::measure): which of the ranks' times is an iteration's time.
  // nccl-tests' -a: 0 rank 0's, 1 the mean, 2 the fastest, 3 the slowest (the default: a
  // collective is done when its last rank is).
  enum class RankTime { First, Mean, Min, Max } rank_time = RankTime::Max;
};

struct Measurement {
  std::vector<double> samples;  // seconds per iteration, in order
  Stats stats;                  // over samples
  bool converged = false;       // noise target met (or fixed iteration count done)
  std::string stop_reason;      // "noise", "iters", "max_iters", "time_cap"
  MonitorSummary monitor;       // clocks/power/throttle seen while measuring
  double median_s() const { return stats.median; }
};

// Enqueues one iteration's work on `stream`. `iteration` counts from 0 (warm-up included) so
// Rotate launches can pick a buffer set. A launch may fork to other streams or GPUs, as long as
// it joins them back into `stream` before returning (see stream_wait in cuda.hpp).
using Launch = std::function<void(cudaStream_t stream, int iteration)>;

// Waits for `event` to complete; with timeout_s > 0, polls and throws TimeoutError (naming
// `what`) once that many seconds have passed, its device marked stuck (mark_device_stuck). A
// timeout never leaves the host blocked. `between`, when given, is called between polls (with
// or without a timeout) and may end the wait by throwing.
class Event;
void wait_for(const Event& event, double timeout_s, const char* what,
              const std::function<void()>& between = {});

// For a rank unwinding from a failure once it has aborted its communicators: when the work
// queued so far on each of `streams` (of `device`; every stream with work there, as a cudaFree
// waits for them all) ends within timeout_s (wait_for), `device` is no longer marked stuck (its
// buffers are freed again, and the memory is there for the next run) and true; else (still
// running, or the context has failed) the mark stays and false. Never throws.
bool drain_and_unmark(int device, const std::vector<cudaStream_t>& streams,
                      double timeout_s) noexcept;

// Holds the stream until release() (or a 2 s safety timeout), so queued work starts together.
class SpinGate {
 public:
  explicit SpinGate(int device);
  ~SpinGate();
  SpinGate(const SpinGate&) = delete;
  SpinGate& operator=(const SpinGate&) = delete;
  void hold(cudaStream_t stream);  // enqueue the spin kernel
  void release();                  // let it finish
 private:
  struct Impl;
  Impl* impl_;
};

// Reusable per-GPU state for measurements on one device (events, flush buffer, spin gate).
class Measurer {
 public:
  explicit Measurer(int device);
  ~Measurer();
  Measurer(const Measurer&) = delete;
  Measurer& operator=(const Measurer&) = delete;

  int device() const noexcept;
  // Times `launch` on `stream` (which must belong to device()) under `opts`; `monitor`, when
  // given, is started and stopped around the timed iterations.
  Measurement run(cudaStream_t stream, const Launch& launch, const MeasureOptions& opts,
                  Monitor* monitor = nullptr);
  // Flushes L2 on `stream` (a memset of an L2-sized buffer), outside any timed region.
  void flush_l2(cudaStream_t stream);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace gpubench
