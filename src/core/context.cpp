// The run context: selected GPUs, measurement options, one Measurer per GPU, the monitor.
#include "gpubench/core/context.hpp"

#include <atomic>

#include "gpubench/core/errors.hpp"

namespace gpubench {

namespace {
std::atomic<int> g_interrupt_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);
}  // namespace

MeasureOptions measure_options_from(const CommonOptions& c) {
  MeasureOptions m;
  if (c.quick) {
    // Short but still noise-checked: a quick run on 4 GPUs fits in tens of seconds.
    m.warmup = 1;
    m.min_iters = 5;
    m.min_time_s = 0.02;
    m.max_noise = 0.01;
    m.max_time_s = 0.3;
  } else {
    m.warmup = 2;
    m.min_iters = 10;
    m.min_time_s = 0.1;
    m.max_noise = 0.005;
    m.max_time_s = 2.0;
  }
  if (c.warmup >= 0) m.warmup = c.warmup;
  if (c.iters > 0) m.fixed_iters = c.iters;
  if (c.min_time >= 0) m.min_time_s = c.min_time;
  if (c.max_noise >= 0) m.max_noise = c.max_noise / 100;  // given in percent, as nvbench's
  if (c.max_time >= 0) m.max_time_s = c.max_time;
  m.l2 = parse_l2_policy(c.l2);
  return m;
}

Context::Context(const System& system, std::vector<int> gpus, const CommonOptions& common)
    : system_(system),
      gpus_(std::move(gpus)),
      common_(common),
      measure_(measure_options_from(common)) {
  monitor_ = std::make_unique<Monitor>(gpus_);
}

Context::~Context() = default;

Measurer& Context::measurer(int gpu) {
  auto it = measurers_.find(gpu);
  if (it == measurers_.end()) it = measurers_.emplace(gpu, std::make_unique<Measurer>(gpu)).first;
  return *it->second;
}

Measurement Context::measure(int gpu, cudaStream_t stream, const Launch& launch) {
  return measure(gpu, stream, launch, measure_);
}

Measurement Context::measure(int gpu, cudaStream_t stream, const Launch& launch,
                             const MeasureOptions& opts) {
  Measurement m = measurer(gpu).run(stream, launch, opts, monitor_.get());
  monitor_total_.merge(m.monitor);
  return m;
}

void Context::publish(const Report& partial) {
  std::lock_guard<std::mutex> lock(published_mu_);
  published_ = partial;
}

Report Context::published() const {
  std::lock_guard<std::mutex> lock(published_mu_);
  return published_;
}

std::unique_ptr<Watchdog> Context::watchdog(const std::string& what, double limit_s) {
  return std::make_unique<Watchdog>(what, limit_s, [this](const std::string& reason) {
    Report r = published();
    r.status = "failed";
    r.error = reason;
    r.warn("the run stalled: the report holds the cases finished before it");
    return stall(r);
  });
}

int Context::stall(Report& stalled) const {
  return stall_sink_ ? stall_sink_(stalled) : kExitFailed;
}

void Context::set_run(std::string run_id, std::vector<std::string> command) {
  run_id_ = std::move(run_id);
  command_ = std::move(command);
}

bool Context::interrupted() noexcept {
  return g_interrupt_signal.load() != 0;
}
int Context::interrupt_signal() noexcept {
  return g_interrupt_signal.load();
}
void Context::request_interrupt(int signal) noexcept {
  int none = 0;
  g_interrupt_signal.compare_exchange_strong(none, signal);  // the first signal names the stop
}

}  // namespace gpubench
