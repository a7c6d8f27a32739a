// The measurement core: warm-up, batches of event-timed iterations behind a spin gate, the
// stopping rule (min iterations, min time, relative noise, time cap) and L2 flushing.
#include "gpubench/core/measure.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <functional>
#include <numeric>
#include <thread>

#include "gpubench/core/context.hpp"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/watchdog.hpp"
#include "gpubench/kernels/spin.cuh"

namespace gpubench {

const char* to_string(L2Policy p) {
  switch (p) {
    case L2Policy::Cold:
      return "cold";
    case L2Policy::Rotate:
      return "rotate";
    case L2Policy::Hot:
      return "hot";
  }
  return "cold";
}

L2Policy parse_l2_policy(const std::string& text) {
  if (text == "cold") return L2Policy::Cold;
  if (text == "rotate") return L2Policy::Rotate;
  if (text == "hot") return L2Policy::Hot;
  throw InputError(fmt::format("--l2: '{}' is not one of cold, rotate, hot", text));
}

void wait_for(const Event& event, double timeout_s, const char* what,
              const std::function<void()>& between) {
  if (!(timeout_s > 0) && !between) {
    event.synchronize();
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    const cudaError_t st = cudaEventQuery(event.get());
    if (st == cudaSuccess) return;
    if (st != cudaErrorNotReady) GPB_CUDA_CHECK(st);
    if (between) between();
    if (timeout_s > 0 && std::chrono::steady_clock::now() > deadline) {
      mark_device_stuck(event.device());
      throw TimeoutError(fmt::format("{} did not finish within --timeout {} s", what, timeout_s));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

bool drain_and_unmark(int device, const std::vector<cudaStream_t>& streams,
                      double timeout_s) noexcept {
  try {
    const DeviceGuard on(device);
    std::vector<Event> done;
    for (cudaStream_t s : streams) {
      done.emplace_back(device, /*timing=*/false);
      done.back().record(s);
    }
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (const Event& e : done) {
      const double left =
          std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
      wait_for(e, std::max(left, 1e-9), "a failed rank's work");
    }
  } catch (...) {  // still running, or the context failed: the mark stays
    (void)cudaGetLastError();
    return false;
  }
  unmark_device_stuck(device);
  return true;
}

// ---------------------------------------------------------------------------------------------
// SpinGate

namespace {
constexpr std::uint64_t kSpinTimeoutNs = 2'000'000'000ull;  // a lost release never hangs a stream
constexpr int kMaxBatch = 64;                               // iterations queued behind one spin
constexpr double kBatchTargetSeconds = 0.05;  // queue about this much GPU work per batch
}  // namespace

struct SpinGate::Impl {
  int device;
  PinnedBuffer flag{sizeof(int), /*mapped=*/true};
  volatile int* host_flag() { return static_cast<volatile int*>(flag.get()); }
};

SpinGate::SpinGate(int device) : impl_(new Impl{device}) {
  *impl_->host_flag() = 1;
}

// Unwinding (a measurement past --timeout, say), the flag is left allocated: freeing pinned
// memory waits for the device, where the work that timed out may be stuck for ever.
SpinGate::~SpinGate() {
  if (!impl_) return;
  *impl_->host_flag() = 1;  // release anything still spinning
  if (std::uncaught_exceptions() == 0) delete impl_;
}

void SpinGate::hold(cudaStream_t stream) {
  *impl_->host_flag() = 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  launch_spin_wait(static_cast<const volatile int*>(impl_->flag.device_ptr()), kSpinTimeoutNs,
                   stream);
}

void SpinGate::release() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  *impl_->host_flag() = 1;
}

// ---------------------------------------------------------------------------------------------
// Measurer

struct Measurer::Impl {
  int device;
  std::vector<Event> starts, stops;
  DeviceBuffer l2_flush;
  std::unique_ptr<SpinGate> gate;

  explicit Impl(int dev) : device(dev) {
    DeviceGuard guard(dev);
    starts.reserve(kMaxBatch);
    stops.reserve(kMaxBatch);
    for (int i = 0; i < kMaxBatch; ++i) {
      starts.emplace_back(dev);
      stops.emplace_back(dev);
    }
  }
};

Measurer::Measurer(int device) : impl_(new Impl(device)) {}
Measurer::~Measurer() {
  delete impl_;
}
int Measurer::device() const noexcept {
  return impl_->device;
}

void Measurer::flush_l2(cudaStream_t stream) {
  if (!impl_->l2_flush) {
    int l2 = 0;
    GPB_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, impl_->device));
    // Twice the L2 so no line of the measured data survives the flush.
    impl_->l2_flush = DeviceBuffer(impl_->device,
                                   std::max<std::size_t>(2u * static_cast<unsigned>(l2), 1u << 20));
  }
  GPB_CUDA_CHECK(cudaMemsetAsync(impl_->l2_flush.get(), 0, impl_->l2_flush.bytes(), stream));
}

namespace {

// How many iterations to queue in the next batch.
int next_batch(const MeasureOptions& o, std::size_t done, double est_seconds) {
  if (o.fixed_iters > 0) return std::min<int>(kMaxBatch, o.fixed_iters - static_cast<int>(done));
  int by_time =
      est_seconds > 0 ? static_cast<int>(std::ceil(kBatchTargetSeconds / est_seconds)) : 1;
  by_time = std::clamp(by_time, 1, kMaxBatch);
  const int to_min = o.min_iters - static_cast<int>(done);
  int batch = std::max(by_time, std::min(to_min, kMaxBatch));
  const int left = o.max_iters - static_cast<int>(done);
  return std::max(1, std::min(batch, left));
}

}  // namespace

Measurement Measurer::run(cudaStream_t stream, const Launch& launch, const MeasureOptions& o,
                          Monitor* monitor) {
  if (o.fixed_iters <= 0 && o.min_iters < 1) throw InputError("minimum iterations must be >= 1");
  DeviceGuard guard(impl_->device);
  if (o.spin && !impl_->gate) impl_->gate = std::make_unique<SpinGate>(impl_->device);
  const bool cold = o.l2 == L2Policy::Cold;

  int iteration = 0;
  double est = 0;
  // Warm-up: untimed for the report, but the last one sizes the first batch.
  for (int w = 0; w < o.warmup; ++w) {
    if (cold) flush_l2(stream);
    impl_->starts[0].record(stream);
    launch(stream, iteration++);
    impl_->stops[0].record(stream);
  }
  if (o.warmup > 0) {
    wait_for(impl_->stops[0], o.timeout_s, "the warm-up GPU work");
    est = impl_->stops[0].seconds_since(impl_->starts[0]);
  }

  Measurement m;
  if (monitor) monitor->start();
  const auto t0 = std::chrono::steady_clock::now();
  double total = 0;
  try {
    while (true) {
      const int batch = next_batch(o, m.samples.size(), est);
      if (o.spin) impl_->gate->hold(stream);
      try {
        for (int b = 0; b < batch; ++b) {
          if (cold) flush_l2(stream);
          impl_->starts[b].record(stream);
          launch(stream, iteration++);
          impl_->stops[b].record(stream);
        }
      } catch (...) {
        if (o.spin) impl_->gate->release();
        throw;
      }
      if (o.spin) impl_->gate->release();
      wait_for(impl_->stops[batch - 1], o.timeout_s, "the measured GPU work");
      note_progress();  // finished GPU work: this thread is not the stuck one
      double batch_total = 0;
      for (int b = 0; b < batch; ++b) {
        const double s = impl_->stops[b].seconds_since(impl_->starts[b]);
        m.samples.push_back(s);
        batch_total += s;
      }
      total += batch_total;
      est = batch_total / batch;

      const auto n = static_cast<int>(m.samples.size());
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (o.interruptible && Context::interrupted()) {
        m.stop_reason = "interrupted";
        break;
      }
      if (o.fixed_iters > 0) {
        if (n >= o.fixed_iters) {
          m.converged = true;
          m.stop_reason = "iters";
          break;
        }
        continue;
      }
      if (n >= o.min_iters && total >= o.min_time_s && relative_noise(m.samples) <= o.max_noise) {
        m.converged = true;
        m.stop_reason = "noise";
        break;
      }
      if (n >= o.max_iters) {
        m.stop_reason = "max_iters";
        break;
      }
      if (elapsed >= o.max_time_s && n >= std::min(o.min_iters, 3)) {
        m.stop_reason = "time_cap";
        break;
      }
    }
  } catch (...) {
    if (monitor) (void)monitor->stop();
    throw;
  }
  if (monitor) m.monitor = monitor->stop();
  m.stats = compute_stats(m.samples);
  spdlog::debug("measured GPU {}: n={} median={:.3f} us cv={:.4f} stop={}", impl_->device,
                m.stats.n, m.stats.median * 1e6, m.stats.cv, m.stop_reason);
  return m;
}

}  // namespace gpubench
