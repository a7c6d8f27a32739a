#pragma once
// Progress, and a watchdog for runs whose ranks can block where no exception reaches them
// (inside the CUDA driver or NCCL, a GPU waiting on another that never comes):
// note_progress() marks that the work moved on (RankGroup marks every barrier, broadcast and
// gather that all its ranks passed); a Watchdog ends the process with one line on stderr when
// nothing was marked for its limit, instead of letting it hang.
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace gpubench {

// Marks progress now (any thread).
void note_progress() noexcept;
// Seconds since the last mark (or since the program started).
double seconds_since_progress() noexcept;

// While it lives, a thread that checks the marks about ten times a second; when the last one
// is older than limit_s it writes "gpubench: WHAT: no progress for LIMIT s: ..." to stderr and
// ends the process with `code`, writing no report. Constructing it marks progress.
class Watchdog {
 public:
  Watchdog(std::string what, double limit_s, int code = 1);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::string what_;
  double limit_s_;
  int code_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gpubench
