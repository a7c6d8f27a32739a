// Progress marks and the watchdog that ends a run that stopped making any.
#include "gpubench/core/watchdog.hpp"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/mpi.hpp"
#include "gpubench/core/progress.hpp"

namespace gpubench {

namespace {
using Clock = std::chrono::steady_clock;
std::atomic<Clock::rep> last_mark{Clock::now().time_since_epoch().count()};
std::atomic<double> g_limit{0.0};
}  // namespace

void note_progress() noexcept {
  last_mark.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
}

double seconds_since_progress() noexcept {
  const Clock::duration since =
      Clock::now().time_since_epoch() - Clock::duration(last_mark.load(std::memory_order_relaxed));
  return std::chrono::duration<double>(since).count();
}

double stall_limit() noexcept {
  return g_limit.load();
}

Watchdog::Watchdog(std::string what, double limit_s, OnStall on_stall)
    : what_(std::move(what)), limit_s_(limit_s), on_stall_(std::move(on_stall)) {
  g_limit.store(limit_s);
  note_progress();
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; }))
      if (seconds_since_progress() > limit_s_) stall();
  });
}

void Watchdog::stall() {
  const ProcessInfo& p = process_info();
  const std::string reason = fmt::format(
      "no progress for {:g} s in {}: a rank is stuck (a GPU or process waiting on another, in "
      "NCCL, MPI or the driver)",
      limit_s_, what_);
  const std::string rank = p.mpi ? fmt::format("[rank {}] ", p.rank) : std::string();
  progress::clear_line();
  std::fprintf(stderr, "gpubench: error: %s%s\n", rank.c_str(), reason.c_str());
  std::fflush(stderr);
  int code = kExitFailed;
  if (on_stall_) {
    try {
      code = on_stall_(reason);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpubench: error: the report of the stalled run failed: %s\n", e.what());
    }
  }
  end_stuck_process(code);
}

void end_stuck_process(int code) {
  std::cout.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  if (process_info().mpi) abort_job(code);
  std::_Exit(code);
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

}  // namespace gpubench
