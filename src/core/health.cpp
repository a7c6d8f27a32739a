// GPU health through NVML: the snapshot of every counter, its JSON, and the XID event watcher.
#include "gpubench/core/health.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <utility>

#include "gpubench/core/mpi.hpp"
#include "gpubench/core/nvml.hpp"
#include "gpubench/core/runner.hpp"
#include "gpubench/core/system.hpp"

namespace gpubench {

namespace {

using ojson = nlohmann::ordered_json;

// The JSON fields of each struct, in output order: one list serves to_json and from_json, so
// whatever is written is read back under the same name.
#define GPB_LINK_HEALTH_FIELDS(X) \
  X(link)                         \
  X(active)                       \
  X(remote_bus_id)                \
  X(crc_flit)                     \
  X(crc_data)                     \
  X(replay)                       \
  X(recovery)

#define GPB_GPU_HEALTH_FIELDS(X) \
  X(gpu)                         \
  X(bus_id)                      \
  X(ecc_enabled)                 \
  X(ecc_corrected_volatile)      \
  X(ecc_uncorrected_volatile)    \
  X(ecc_corrected_total)         \
  X(ecc_uncorrected_total)       \
  X(retired_pages_sbe)           \
  X(retired_pages_dbe)           \
  X(retirement_pending)          \
  X(remapped_rows_corrected)     \
  X(remapped_rows_uncorrected)   \
  X(remap_pending)               \
  X(remap_failed)                \
  X(pcie_replays)                \
  X(pcie_gen)                    \
  X(pcie_gen_max)                \
  X(pcie_width)                  \
  X(pcie_width_max)              \
  X(temperature_C)               \
  X(slowdown_temperature_C)      \
  X(clocks_event_reasons)        \
  X(persistence_mode)            \
  X(mig_enabled)                 \
  X(other_processes)

// A value as JSON; an empty optional as null ("not available", never zero).
template <class T>
ojson value_json(const T& v) {
  return ojson(v);
}
template <class T>
ojson value_json(const std::optional<T>& v) {
  return v ? ojson(*v) : ojson(nullptr);
}

// Reads `key` of `j` into `out`; a missing key (or null) leaves a plain value as it is and an
// optional empty. A value of the wrong type throws nlohmann::json's type_error.
template <class T>
void read_value(const ojson& j, const char* key, T& out) {
  const auto it = j.find(key);
  if (it != j.end() && !it->is_null()) out = it->template get<T>();
}
template <class T>
void read_value(const ojson& j, const char* key, std::optional<T>& out) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    out.reset();
  } else {
    out = it->template get<T>();
  }
}

ojson link_json(const LinkHealth& l) {
  ojson j = ojson::object();
#define GPB_WRITE(name) j[#name] = value_json(l.name);
  GPB_LINK_HEALTH_FIELDS(GPB_WRITE)
#undef GPB_WRITE
  return j;
}

LinkHealth link_from_json(const ojson& j) {
  LinkHealth l;
#define GPB_READ(name) read_value(j, #name, l.name);
  GPB_LINK_HEALTH_FIELDS(GPB_READ)
#undef GPB_READ
  return l;
}

ojson gpu_json(const GpuHealth& g) {
  ojson j = ojson::object();
#define GPB_WRITE(name) j[#name] = value_json(g.name);
  GPB_GPU_HEALTH_FIELDS(GPB_WRITE)
#undef GPB_WRITE
  ojson links = ojson::array();
  for (const LinkHealth& l : g.links) links.push_back(link_json(l));
  j["links"] = std::move(links);
  return j;
}

GpuHealth gpu_from_json(const ojson& j) {
  GpuHealth g;
#define GPB_READ(name) read_value(j, #name, g.name);
  GPB_GPU_HEALTH_FIELDS(GPB_READ)
#undef GPB_READ
  if (const auto it = j.find("links"); it != j.end() && it->is_array())
    for (const ojson& l : *it) g.links.push_back(link_from_json(l));
  return g;
}

// The NVLinks of `d`: links 0..count-1 when NVML gives the count, else the links that answer a
// state query, probed from 0 up to nvml::kDefaultMaxLinks.
std::vector<LinkHealth> read_links(const Nvml& nvml, nvml::Device d) {
  const std::optional<unsigned> count = nvml.nvlink_link_count(d);
  const unsigned probe = count.value_or(nvml::kDefaultMaxLinks);
  std::vector<LinkHealth> links;
  for (unsigned link = 0; link < probe; ++link) {
    LinkHealth l;
    l.link = link;
    l.active = nvml.nvlink_active(d, link);
    if (!count && !l.active) break;  // past the GPU's last link (or it has none)
    l.remote_bus_id = nvml.nvlink_remote_pci_bus_id(d, link);
    l.crc_flit = nvml.nvlink_error_count(d, link, nvml::LinkCounter::CrcFlit);
    l.crc_data = nvml.nvlink_error_count(d, link, nvml::LinkCounter::CrcData);
    l.replay = nvml.nvlink_error_count(d, link, nvml::LinkCounter::Replay);
    l.recovery = nvml.nvlink_error_count(d, link, nvml::LinkCounter::Recovery);
    links.push_back(std::move(l));
  }
  return links;
}

// Every counter of `h` but its identity and links, read from `d`.
void read_counters(const Nvml& nvml, nvml::Device d, GpuHealth& h) {
  h.ecc_enabled = nvml.ecc_enabled(d);
  h.ecc_corrected_volatile = nvml.ecc_errors(d, false);
  h.ecc_uncorrected_volatile = nvml.ecc_errors(d, true);
  h.ecc_corrected_total = nvml.ecc_errors(d, false, true);
  h.ecc_uncorrected_total = nvml.ecc_errors(d, true, true);
  h.retired_pages_sbe = nvml.retired_pages(d, nvml::RetirementCause::MultipleSingleBitEcc);
  h.retired_pages_dbe = nvml.retired_pages(d, nvml::RetirementCause::DoubleBitEcc);
  h.retirement_pending = nvml.retired_pages_pending(d);
  if (const auto rows = nvml.remapped_rows(d)) {
    h.remapped_rows_corrected = rows->corrected;
    h.remapped_rows_uncorrected = rows->uncorrected;
    h.remap_pending = rows->pending;
    h.remap_failed = rows->failed;
  }
  h.pcie_replays = nvml.pcie_replay_count(d);
  h.pcie_gen = nvml.pcie_gen_current(d);
  h.pcie_gen_max = nvml.pcie_gen_max(d);
  h.pcie_width = nvml.pcie_width_current(d);
  h.pcie_width_max = nvml.pcie_width_max(d);
  h.temperature_C = nvml.temperature_C(d);
  h.slowdown_temperature_C = nvml.slowdown_temperature_C(d);
  h.clocks_event_reasons = nvml.clocks_event_reasons(d);
  h.persistence_mode = nvml.persistence_mode(d);
  h.mig_enabled = nvml.mig_enabled(d);
  if (auto pids = nvml.compute_process_pids(d)) {
    // This process and, under mpirun/srun, the job's others on this node are not "other".
    std::vector<unsigned> ours = process_info().node_pids;
    ours.push_back(static_cast<unsigned>(getpid()));
    pids->erase(std::remove_if(pids->begin(), pids->end(),
                               [&](unsigned p) {
                                 return std::find(ours.begin(), ours.end(), p) != ours.end();
                               }),
                pids->end());
    h.other_processes = std::move(*pids);
  }
}

// "0, 2, 3"
std::string joined(const std::vector<int>& values) {
  std::string out;
  for (int v : values) out += (out.empty() ? "" : ", ") + std::to_string(v);
  return out;
}

}  // namespace

nlohmann::ordered_json HealthSnapshot::to_json() const {
  ojson j = ojson::object();
  j["taken_at"] = taken_at;
  j["driver"] = value_json(driver);
  j["unavailable"] = unavailable;
  ojson list = ojson::array();
  for (const GpuHealth& g : gpus) list.push_back(gpu_json(g));
  j["gpus"] = std::move(list);
  return j;
}

HealthSnapshot HealthSnapshot::from_json(const nlohmann::ordered_json& j) {
  HealthSnapshot s;
  read_value(j, "taken_at", s.taken_at);
  read_value(j, "driver", s.driver);
  read_value(j, "unavailable", s.unavailable);
  if (const auto it = j.find("gpus"); it != j.end() && it->is_array())
    for (const ojson& g : *it) s.gpus.push_back(gpu_from_json(g));
  return s;
}

const GpuHealth* HealthSnapshot::find(int gpu) const {
  for (const GpuHealth& g : gpus)
    if (g.gpu == gpu) return &g;
  return nullptr;
}

HealthSnapshot read_health(const System& system, const std::vector<int>& gpus) {
  HealthSnapshot s;
  s.taken_at = utc_now();
  const Nvml& nvml = Nvml::get();
  if (!nvml.available()) {
    s.unavailable = nvml.error();
    return s;
  }
  s.driver = nvml.driver_version();
  std::vector<int> unmapped;  // GPUs NVML has no handle for: listed, every counter empty
  for (int gpu : gpus) {
    GpuHealth h;
    h.gpu = gpu;
    if (const GpuInfo* info = system.gpu(gpu)) h.bus_id = info->pci_bus_id;
    const std::optional<nvml::Device> d = nvml.device_for_cuda(gpu);
    if (d) {
      if (h.bus_id.empty()) h.bus_id = nvml.pci_bus_id(*d).value_or("");
      read_counters(nvml, *d, h);
      h.links = read_links(nvml, *d);
    } else {
      unmapped.push_back(gpu);
    }
    s.gpus.push_back(std::move(h));
  }
  if (!unmapped.empty()) s.unavailable = "NVML has no device for GPU " + joined(unmapped);
  return s;
}

// ---- XidWatcher ----

// `unavailable` and `events` are shared with the watch thread (under `mutex`); the event set
// and the device list are written before the thread starts and read-only while it runs.
struct XidWatcher::State {
  std::optional<nvml::EventSet> set;
  std::vector<std::pair<nvml::Device, int>> devices;  // registered: NVML handle, CUDA index
  std::atomic<bool> stopping{false};
  std::thread thread;
  std::mutex stop_mutex;  // serialises stop(): one join, one free
  bool stopped = false;   // under stop_mutex
  std::mutex mutex;
  std::string unavailable;
  std::vector<Event> events;

  void note(const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex);
    unavailable += (unavailable.empty() ? "XID events: " : "; ") + why;
  }

  // Waits in slices of 200 ms so that stop() is seen within one slice; ends on the first NVML
  // error (a wait that fails once would otherwise fail in a tight loop), saying why.
  void watch() {
    const Nvml& nvml = Nvml::get();
    while (!stopping.load()) {
      const nvml::EventWait w = nvml.wait_event(*set, 200);
      if (w.status == nvml::EventWait::Status::Timeout) continue;
      if (w.status == nvml::EventWait::Status::Error) {
        note("waiting failed (" + w.error + "); watching stopped");
        return;
      }
      if ((w.type & nvml::kEventXidCriticalError) == 0) continue;
      int gpu = -1;
      for (const auto& [device, index] : devices)
        if (device == w.device) gpu = index;
      std::lock_guard<std::mutex> lock(mutex);
      events.push_back(Event{gpu, w.data, utc_now()});
    }
  }

  // Ends the thread and frees the set, once; never throws (the destructor calls it).
  void halt() noexcept {
    std::lock_guard<std::mutex> lock(stop_mutex);
    if (stopped) return;
    stopping.store(true);
    if (thread.joinable()) thread.join();
    if (set) Nvml::get().event_set_free(*set);
    stopped = true;
  }
};

XidWatcher::XidWatcher(const System& system, const std::vector<int>& gpus)
    : state_(std::make_unique<State>()) {
  State& st = *state_;
  if (gpus.empty()) return;
  const Nvml& nvml = Nvml::get();
  if (!nvml.available()) {
    st.note(nvml.error());
    return;
  }
  st.set = nvml.event_set_create();
  if (!st.set) {
    st.note("NVML could not create an event set");
    return;
  }
  for (int gpu : gpus) {
    const std::string on = " on GPU " + std::to_string(gpu);
    if (!system.gpu(gpu)) {
      st.note("no GPU " + std::to_string(gpu) + " in this system");
      continue;
    }
    const std::optional<nvml::Device> d = nvml.device_for_cuda(gpu);
    if (!d) {
      st.note("no NVML device" + on);
      continue;
    }
    const bool seen = std::any_of(st.devices.begin(), st.devices.end(),
                                  [&](const auto& entry) { return entry.first == *d; });
    if (seen) continue;  // listed twice: registered once
    const std::string why = nvml.register_events(*d, nvml::kEventXidCriticalError, *st.set);
    if (!why.empty()) {
      st.note("not watched" + on + " (" + why + ")");
      continue;
    }
    st.devices.emplace_back(*d, gpu);
  }
  if (st.devices.empty()) return;  // nothing to wait on: halt() just frees the set
  st.thread = std::thread([&st] { st.watch(); });
}

XidWatcher::~XidWatcher() {
  state_->halt();
}

std::string XidWatcher::unavailable() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->unavailable;
}

std::vector<XidWatcher::Event> XidWatcher::stop() {
  state_->halt();
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->events;
}

}  // namespace gpubench
