// Progress marks and the watchdog that ends a run that stopped making any.
#include "gpubench/core/watchdog.hpp"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace gpubench {

namespace {
using Clock = std::chrono::steady_clock;
std::atomic<Clock::rep> last_mark{Clock::now().time_since_epoch().count()};
}  // namespace

void note_progress() noexcept {
  last_mark.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
}

double seconds_since_progress() noexcept {
  const Clock::duration since =
      Clock::now().time_since_epoch() - Clock::duration(last_mark.load(std::memory_order_relaxed));
  return std::chrono::duration<double>(since).count();
}

Watchdog::Watchdog(std::string what, double limit_s, int code)
    : what_(std::move(what)), limit_s_(limit_s), code_(code) {
  note_progress();
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; })) {
      if (seconds_since_progress() <= limit_s_) continue;
      const std::string line = fmt::format(
          "gpubench: {}: no progress for {:g} s: a rank is stuck (a GPU waiting on another, or "
          "NCCL); stopping without a report\n",
          what_, limit_s_);
      std::fputs(line.c_str(), stderr);
      std::fflush(stderr);
      std::_Exit(code_);
    }
  });
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
