#pragma once
// Progress, and a watchdog for runs whose ranks can block where no exception reaches them
// (inside the CUDA driver, NCCL or MPI: a GPU or process waiting on another that never comes):
// note_progress() marks that the work moved on (RankGroup marks every barrier, broadcast and
// gather that all its ranks passed); a Watchdog ends a run that made none for its limit, after
// letting its owner write what the run finished.
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace gpubench {

// Marks progress now (any thread).
void note_progress() noexcept;
// Seconds since the last mark (or since the program started).
double seconds_since_progress() noexcept;
// The limit of the watchdog alive now (or the last one), 0 before any: how long a rank may
// wait on the others before it takes them for stuck.
double stall_limit() noexcept;

// The watchdog's limit for a run whose waits give up after timeout_s (--timeout): twice that,
// at least 30 s (NCCL's set-up passes no barrier and takes seconds), so a wait that polls ends
// its own case first and the watchdog catches only ranks stuck where no wait polls.
inline double watchdog_limit_s(double timeout_s) {
  return timeout_s * 2 > 30 ? timeout_s * 2 : 30;
}

// Ends the process now with `code`, streams flushed: under mpirun/srun every process of the job
// (MPI_Abort), else this one alone (_Exit: threads stuck in the driver cannot be joined, so no
// destructor runs).
[[noreturn]] void end_stuck_process(int code);

// While it lives, a thread that checks the marks about ten times a second. When the last one is
// older than limit_s it writes "gpubench: WHAT: no progress for LIMIT s: ..." to stderr, calls
// on_stall with that reason (the caller writes the report of what finished; its return value is
// the exit code, 1 without one) and ends the process there: under mpirun/srun every process of
// the job (MPI_Abort), else this one alone (_Exit: threads stuck in the driver cannot be joined,
// so no destructor runs). Constructing it marks progress.
class Watchdog {
 public:
  using OnStall = std::function<int(const std::string& reason)>;
  Watchdog(std::string what, double limit_s, OnStall on_stall = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  [[noreturn]] void stall();
  std::string what_;
  double limit_s_;
  OnStall on_stall_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gpubench
