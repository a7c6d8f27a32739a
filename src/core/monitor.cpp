// NVML monitor: a background thread samples clocks, temperature, power and clocks-event reasons
// of the measured GPUs, so a figure taken while throttled is flagged in the report.
#include "gpubench/core/monitor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "gpubench/core/nvml.hpp"

namespace gpubench {

namespace {

struct ReasonName {
  std::uint64_t bit;
  const char* name;
  bool lowers_clocks_under_load;
};

// Idle, application-clock, sync-boost and display reasons are normal operation; the others
// mean the GPU ran slower than it could.
constexpr ReasonName kReasons[] = {
    {nvml::kReasonGpuIdle, "gpu_idle", false},
    {nvml::kReasonApplicationsClocksSetting, "applications_clocks_setting", false},
    {nvml::kReasonSwPowerCap, "sw_power_cap", true},
    {nvml::kReasonHwSlowdown, "hw_slowdown", true},
    {nvml::kReasonSyncBoost, "sync_boost", false},
    {nvml::kReasonSwThermalSlowdown, "sw_thermal_slowdown", true},
    {nvml::kReasonHwThermalSlowdown, "hw_thermal_slowdown", true},
    {nvml::kReasonHwPowerBrakeSlowdown, "hw_power_brake_slowdown", true},
    {nvml::kReasonDisplayClockSetting, "display_clock_setting", false},
};

// 0 stands for "not read": the smaller of the known values.
unsigned min_known(unsigned a, unsigned b) {
  if (a == 0) return b;
  if (b == 0) return a;
  return std::min(a, b);
}

// Values never read are left out, as everywhere in the reports.
nlohmann::ordered_json range_json(unsigned lo, unsigned hi) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (lo > 0) j["min"] = lo;
  if (hi > 0) j["max"] = hi;
  return j;
}

}  // namespace

std::vector<std::string> throttle_reason_names(std::uint64_t mask) {
  std::vector<std::string> names;
  std::uint64_t known = 0;
  for (const ReasonName& r : kReasons) {
    known |= r.bit;
    if (mask & r.bit) names.emplace_back(r.name);
  }
  if (const std::uint64_t rest = mask & ~known) names.push_back(fmt::format("other_0x{:x}", rest));
  return names;
}

std::uint64_t throttling_reasons(std::uint64_t mask) {
  std::uint64_t lowering = 0;
  for (const ReasonName& r : kReasons)
    if (r.lowers_clocks_under_load) lowering |= r.bit;
  return mask & lowering;
}

std::string throttling_list(std::uint64_t mask, const char* sep) {
  std::string list;
  for (const std::string& n : throttle_reason_names(throttling_reasons(mask)))
    list += (list.empty() ? "" : sep) + n;
  return list;
}

bool GpuMonitorSummary::throttled() const {
  return throttling_reasons(throttle_reasons) != 0;
}

std::vector<std::string> GpuMonitorSummary::throttle_names() const {
  return throttle_reason_names(throttle_reasons);
}

bool MonitorSummary::throttled() const {
  return std::any_of(gpus.begin(), gpus.end(),
                     [](const GpuMonitorSummary& g) { return g.throttled(); });
}

const GpuMonitorSummary* MonitorSummary::sampled(int gpu) const {
  for (const GpuMonitorSummary& g : gpus)
    if (g.gpu == gpu && g.samples > 0) return &g;
  return nullptr;
}

void MonitorSummary::merge(const MonitorSummary& other) {
  available = available || other.available;
  for (const GpuMonitorSummary& o : other.gpus) {
    auto mine = std::find_if(gpus.begin(), gpus.end(),
                             [&](const GpuMonitorSummary& g) { return g.gpu == o.gpu; });
    if (mine == gpus.end()) {
      gpus.push_back(o);
      continue;
    }
    mine->samples += o.samples;
    mine->sm_clock_min_MHz = min_known(mine->sm_clock_min_MHz, o.sm_clock_min_MHz);
    mine->sm_clock_max_MHz = std::max(mine->sm_clock_max_MHz, o.sm_clock_max_MHz);
    mine->mem_clock_min_MHz = min_known(mine->mem_clock_min_MHz, o.mem_clock_min_MHz);
    mine->mem_clock_max_MHz = std::max(mine->mem_clock_max_MHz, o.mem_clock_max_MHz);
    mine->temperature_max_C = std::max(mine->temperature_max_C, o.temperature_max_C);
    mine->power_max_W = std::max(mine->power_max_W, o.power_max_W);
    mine->throttle_reasons |= o.throttle_reasons;
  }
}

nlohmann::ordered_json MonitorSummary::to_json() const {
  using ojson = nlohmann::ordered_json;
  ojson j;
  j["available"] = available;
  j["gpus"] = ojson::array();
  for (const GpuMonitorSummary& g : gpus) {
    ojson e;
    e["gpu"] = g.gpu;
    e["samples"] = g.samples;
    e["sm_clock_MHz"] = range_json(g.sm_clock_min_MHz, g.sm_clock_max_MHz);
    e["mem_clock_MHz"] = range_json(g.mem_clock_min_MHz, g.mem_clock_max_MHz);
    if (g.temperature_max_C > 0) e["temperature_max_C"] = g.temperature_max_C;
    if (g.power_max_W > 0) e["power_max_W"] = g.power_max_W;
    e["throttle_reasons"] = g.throttle_names();
    e["throttled"] = g.throttled();
    j["gpus"].push_back(std::move(e));
  }
  return j;
}

struct Monitor::Impl {
  std::vector<int> gpus;
  std::vector<std::optional<nvml::Device>> handles;  // per entry of `gpus`
  std::chrono::milliseconds period;
  bool available = false;

  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  bool running = false;
  std::thread sampler;
  MonitorSummary summary;  // guarded by `mutex` while the sampler runs

  void reset() {
    summary = MonitorSummary{};
    summary.available = available;
    for (int gpu : gpus) {
      GpuMonitorSummary g;
      g.gpu = gpu;
      summary.gpus.push_back(g);
    }
  }

  // Reads every GPU (NVML calls outside the lock), then folds the readings in.
  void sample() {
    const Nvml& nvml = Nvml::get();
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      if (!handles[i]) continue;
      const nvml::Device d = *handles[i];
      const auto sm = nvml.clock_MHz(d, nvml::Clock::Sm);
      const auto mem = nvml.clock_MHz(d, nvml::Clock::Memory);
      const auto temperature = nvml.temperature_C(d);
      const auto power = nvml.power_W(d);
      const auto reasons = nvml.clocks_event_reasons(d);

      std::lock_guard<std::mutex> lock(mutex);
      GpuMonitorSummary& g = summary.gpus[i];
      ++g.samples;
      if (sm) {
        g.sm_clock_min_MHz = min_known(g.sm_clock_min_MHz, *sm);
        g.sm_clock_max_MHz = std::max(g.sm_clock_max_MHz, *sm);
      }
      if (mem) {
        g.mem_clock_min_MHz = min_known(g.mem_clock_min_MHz, *mem);
        g.mem_clock_max_MHz = std::max(g.mem_clock_max_MHz, *mem);
      }
      if (temperature) g.temperature_max_C = std::max(g.temperature_max_C, *temperature);
      if (power) g.power_max_W = std::max(g.power_max_W, *power);
      if (reasons) g.throttle_reasons |= *reasons;
    }
  }

  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!wake.wait_for(lock, period, [this] { return stopping; })) {
      lock.unlock();
      sample();
      lock.lock();
    }
  }
};

Monitor::Monitor(std::vector<int> gpus, std::chrono::milliseconds period)
    : impl_(std::make_unique<Impl>()) {
  impl_->gpus = std::move(gpus);
  impl_->period = std::max(period, std::chrono::milliseconds(1));
  const Nvml& nvml = Nvml::get();
  impl_->available = nvml.available();
  for (int gpu : impl_->gpus)
    impl_->handles.push_back(impl_->available ? nvml.device_for_cuda(gpu) : std::nullopt);
  impl_->reset();
}

Monitor::~Monitor() {
  if (impl_ && impl_->running) (void)stop();
}

void Monitor::start() {
  Impl& m = *impl_;
  if (m.running) return;
  m.reset();
  if (!m.available) return;
  m.sample();  // a sample before the work starts, however short the work is
  m.stopping = false;
  m.sampler = std::thread([&m] { m.run(); });
  m.running = true;
}

MonitorSummary Monitor::stop() {
  Impl& m = *impl_;
  if (!m.running) return m.summary;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    m.stopping = true;
  }
  m.wake.notify_all();
  m.sampler.join();
  m.running = false;
  m.sample();  // and one at the end
  return m.summary;
}

}  // namespace gpubench
