#pragma once
// What a module runs with: the selected GPUs, the run settings, the machine, and the shared
// measurement core (one Measurer per GPU, the NVML monitor).
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpubench/core/measure.hpp"
#include "gpubench/core/options.hpp"
#include "gpubench/core/result.hpp"
#include "gpubench/core/system.hpp"
#include "gpubench/core/watchdog.hpp"

namespace gpubench {

class Context {
 public:
  Context(const System& system, std::vector<int> gpus, const CommonOptions& common);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const System& system() const noexcept { return system_; }
  const std::vector<int>& gpus() const noexcept { return gpus_; }
  const CommonOptions& common() const noexcept { return common_; }
  bool quick() const noexcept { return common_.quick; }
  const MeasureOptions& measure_options() const noexcept { return measure_; }

  // Times `launch` on `stream` of `gpu` with the run's options (or `opts`), the monitor
  // sampling every selected GPU meanwhile.
  Measurement measure(int gpu, cudaStream_t stream, const Launch& launch);
  Measurement measure(int gpu, cudaStream_t stream, const Launch& launch,
                      const MeasureOptions& opts);
  Measurer& measurer(int gpu);

  // The run's monitor (nullptr without NVML samples), for work timed outside measure(): the
  // caller starts and stops it around that work and passes what it saw to merge_monitor().
  Monitor* monitor() noexcept { return monitor_.get(); }
  void merge_monitor(const MonitorSummary& seen) { monitor_total_.merge(seen); }

  // Everything the monitor saw in this run (merged over measurements), for the report.
  const MonitorSummary& monitor_summary() const noexcept { return monitor_total_; }

  // A run over several GPUs or processes can stall where no exception reaches it (a rank
  // waiting on one that never comes). Such a module publishes the report of what it finished
  // after each case (its lead rank; thread-safe) and runs under watchdog(): when no rank group
  // passes a barrier for limit_s, the published report, failed with the reason, goes to the
  // stall sink (the harness writes and prints it) and the run ends with the sink's exit code.
  void publish(const Report& partial);
  Report published() const;
  std::unique_ptr<Watchdog> watchdog(const std::string& what, double limit_s);
  using StallSink = std::function<int(Report&)>;
  void on_stall(StallSink sink) { stall_sink_ = std::move(sink); }
  // Hands a stalled report to the stall sink, as a watchdog does; returns the exit code.
  int stall(Report& stalled) const;

  // Does this run take one rank per process (a module that supports mpirun/srun, launched so)?
  // Else it runs in this process alone, on its selected GPUs, even where MPI is up (a module of
  // `gpubench all` that runs on rank 0 alone): its rank groups are threads.
  bool over_processes() const noexcept { return over_processes_; }
  void set_over_processes(bool over) noexcept { over_processes_ = over; }

  // The run this context belongs to: its id and command line, for the runs a module makes
  // inside its own (check's battery, run_nested).
  void set_run(std::string run_id, std::vector<std::string> command);
  const std::string& run_id() const noexcept { return run_id_; }
  const std::vector<std::string>& command() const noexcept { return command_; }

  // Set by SIGINT or SIGTERM: modules stop between cases and report what was finished.
  static bool interrupted() noexcept;
  // The signal that asked to stop (SIGINT, SIGTERM), 0 when none; async-signal-safe.
  static int interrupt_signal() noexcept;
  static void request_interrupt(int signal) noexcept;

 private:
  const System& system_;
  std::vector<int> gpus_;
  CommonOptions common_;
  MeasureOptions measure_;
  std::map<int, std::unique_ptr<Measurer>> measurers_;
  std::unique_ptr<Monitor> monitor_;
  MonitorSummary monitor_total_;
  mutable std::mutex published_mu_;
  Report published_;
  StallSink stall_sink_;
  std::string run_id_;
  std::vector<std::string> command_;
  bool over_processes_ = false;
};

}  // namespace gpubench
