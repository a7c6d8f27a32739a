#pragma once
// NVML monitor: samples SM/memory clocks, power, temperature and throttle reasons of the
// selected GPUs while a measurement runs, so a throttled figure is flagged in the report.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gpubench {

struct GpuMonitorSummary {
  int gpu = -1;  // CUDA device index
  int samples = 0;
  unsigned sm_clock_min_MHz = 0, sm_clock_max_MHz = 0;
  unsigned mem_clock_min_MHz = 0, mem_clock_max_MHz = 0;
  unsigned temperature_max_C = 0;
  double power_max_W = 0;
  std::uint64_t throttle_reasons = 0;  // OR of NVML clocks-event reasons seen while measuring
  // True when a reason that lowers clocks under load was seen (power cap, thermal, HW slowdown);
  // idle, application-clock and sync-boost reasons do not count.
  bool throttled() const;
  std::vector<std::string> throttle_names() const;
};

struct MonitorSummary {
  bool available = false;  // false when NVML could not be loaded (no samples)
  std::vector<GpuMonitorSummary> gpus;
  bool throttled() const;
  // `gpu`'s summary, or nullptr when it was not sampled (no NVML, not selected, no samples).
  const GpuMonitorSummary* sampled(int gpu) const;
  void merge(const MonitorSummary& other);  // widen min/max, OR reasons, add samples
  nlohmann::ordered_json to_json() const;
};

// Names of the NVML clocks-event reason bits in `mask` ("sw_power_cap", "hw_slowdown", ...).
std::vector<std::string> throttle_reason_names(std::uint64_t mask);
// The bits of `mask` that mean the GPU ran below its clocks under load.
std::uint64_t throttling_reasons(std::uint64_t mask);
// The names of those bits of `mask` joined by `sep` ("sw_power_cap,hw_slowdown"); "" when none.
std::string throttling_list(std::uint64_t mask, const char* sep = ",");

// Samples in a background thread between start() and stop(). Without NVML it returns an
// unavailable summary and costs nothing.
class Monitor {
 public:
  explicit Monitor(std::vector<int> gpus,
                   std::chrono::milliseconds period = std::chrono::milliseconds(20));
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  void start();
  MonitorSummary stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpubench
