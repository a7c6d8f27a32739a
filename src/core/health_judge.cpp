// The judgement of health (see health.hpp): NVML's counters before and after some work (their
// deltas), XID events during it, and the throttling its monitors saw. A counter the driver does
// not expose is N/A, never PASS.
#include <fmt/format.h>

#include <limits>

#include "gpubench/core/health.hpp"
#include "gpubench/core/nvml.hpp"

namespace gpubench {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// NVLink CRC errors in one battery that fail a link (fewer WARN: replays correct them).
constexpr std::uint64_t kCrcFail = 100;
// Degrees below the slowdown threshold that WARN.
constexpr unsigned kHotMargin = 5;

struct Sink {
  std::vector<Check>& out;
  std::string subject;
  std::string during;
  void add(const char* level, const std::string& what, double value, const std::string& reason,
           const std::string& group = "Health") {
    out.push_back({level, group, subject, what, value, kNaN, "", reason});
  }
  void na(const std::string& what) { add("N/A", what, kNaN, "not available from this driver"); }
};

// A counter that should not grow: `bad` when it did during the battery (or, with one snapshot,
// when it is above zero since the driver loaded).
void counter(Sink& s, const std::string& what, const std::optional<std::uint64_t>& now,
             const std::optional<std::uint64_t>& before, const char* bad) {
  if (!now) return s.na(what);
  if (before) {
    const std::uint64_t delta = *now >= *before ? *now - *before : *now;
    s.add(delta > 0 ? bad : "PASS", what, static_cast<double>(delta),
          fmt::format("+{} {} ({} since the driver loaded)", delta, s.during, *now));
  } else {
    s.add(*now > 0 ? bad : "PASS", what, static_cast<double>(*now),
          fmt::format("{} since the driver loaded", *now));
  }
}

void flag(Sink& s, const std::string& what, const std::optional<bool>& v, bool bad_when,
          const char* bad, const std::string& bad_reason, const std::string& good_reason) {
  if (!v) return s.na(what);
  s.add(*v == bad_when ? bad : "PASS", what, kNaN, *v == bad_when ? bad_reason : good_reason);
}

void memory_checks(Sink& s, const GpuHealth& g, const GpuHealth* was) {
  flag(s, "ECC mode", g.ecc_enabled, false, "WARN", "ECC is off: memory errors go unseen", "on");
  counter(s, "ECC uncorrected errors", g.ecc_uncorrected_volatile,
          was ? was->ecc_uncorrected_volatile : std::nullopt, "FAIL");
  counter(s, "ECC corrected errors", g.ecc_corrected_volatile,
          was ? was->ecc_corrected_volatile : std::nullopt, "WARN");
  if (g.ecc_uncorrected_total)
    s.add(*g.ecc_uncorrected_total > 0 ? "WARN" : "PASS", "ECC uncorrected errors, lifetime",
          static_cast<double>(*g.ecc_uncorrected_total),
          fmt::format("{} over the GPU's life", *g.ecc_uncorrected_total));
  else
    s.na("ECC uncorrected errors, lifetime");
  flag(s, "Row remapping failed", g.remap_failed, true, "FAIL",
       "a row could not be remapped: the GPU needs service", "no failure");
  flag(s, "Row remapping pending", g.remap_pending, true, "WARN", "a remap waits for a GPU reset",
       "none pending");
  // Row remapping replaced page retirement (Ampere on): where remapping answers, retirement's
  // silence is not a missing counter.
  if (g.retirement_pending || !g.remap_failed)
    flag(s, "Page retirement pending", g.retirement_pending, true, "FAIL",
         "a page waits for retirement: reset the GPU", "none pending");
  if (g.retired_pages_dbe)
    s.add(*g.retired_pages_dbe > 0 ? "WARN" : "PASS", "Retired pages (double-bit)",
          static_cast<double>(*g.retired_pages_dbe),
          fmt::format("{} retired", *g.retired_pages_dbe));
}

void pcie_checks(Sink& s, const GpuHealth& g, const GpuHealth* was) {
  counter(s, "PCIe replays", g.pcie_replays, was ? was->pcie_replays : std::nullopt, "WARN");
  if (!g.pcie_width || !g.pcie_width_max) return s.na("PCIe link width");
  const bool narrow = *g.pcie_width < *g.pcie_width_max;
  s.add(narrow ? "WARN" : "PASS", "PCIe link width", *g.pcie_width,
        fmt::format("x{} of x{}{}", *g.pcie_width, *g.pcie_width_max,
                    g.pcie_gen && g.pcie_gen_max
                        ? fmt::format(" (Gen{} now, Gen{} at most: idle links slow down; the "
                                      "pinned copies judge the link under load)",
                                      *g.pcie_gen, *g.pcie_gen_max)
                        : ""));
}

void state_checks(Sink& s, const GpuHealth& g, const GpuHealth* was) {
  if (g.temperature_C) {
    const bool hot =
        g.slowdown_temperature_C && *g.temperature_C + kHotMargin >= *g.slowdown_temperature_C;
    s.add(hot ? "WARN" : "PASS", "Temperature", *g.temperature_C,
          g.slowdown_temperature_C
              ? fmt::format("{} C; slowdown at {} C", *g.temperature_C, *g.slowdown_temperature_C)
              : fmt::format("{} C", *g.temperature_C));
  } else {
    s.na("Temperature");
  }
  std::set<unsigned> others;
  for (const GpuHealth* h : {&g, was})
    if (h && h->other_processes)
      others.insert(h->other_processes->begin(), h->other_processes->end());
  if (!g.other_processes) {
    s.na("Other compute processes");
  } else {
    std::string pids;
    for (unsigned p : others) pids += (pids.empty() ? "" : ", ") + std::to_string(p);
    s.add(others.empty() ? "PASS" : "WARN", "Other compute processes",
          static_cast<double>(others.size()),
          others.empty() ? "none" : "the GPU is shared with PID " + pids);
  }
  flag(s, "Persistence mode", g.persistence_mode, false, "WARN",
       "off: the driver reloads between jobs and the first CUDA call is slow", "on");
  flag(s, "MIG mode", g.mig_enabled, true, "WARN", "on: CUDA sees MIG instances, not the whole GPU",
       "off");
}

// The GPU at the far end of a link, when it is one of the snapshot's.
std::string far_end(const HealthSnapshot& snap, const LinkHealth& l) {
  if (!l.remote_bus_id) return "";
  for (const GpuHealth& other : snap.gpus)
    if (!other.bus_id.empty() && canonical_pci_bus_id(other.bus_id) == *l.remote_bus_id)
      return fmt::format(" (to GPU {})", other.gpu);
  return "";
}

void nvlink_checks(Sink& s, const GpuHealth& g, const GpuHealth* was, const HealthSnapshot& snap) {
  const auto active_of = [](const GpuHealth& h) {
    int n = 0;
    for (const LinkHealth& l : h.links) n += l.active.value_or(false);
    return n;
  };
  const int active = active_of(g);
  if (g.links.empty()) return;
  if (active == 0) {
    // No NVLink in use is a PCIe-only GPU, unless its links were up before or another GPU of
    // the node uses its own: then every link of this one is down.
    const bool was_up = was && active_of(*was) > 0;
    const GpuHealth* peer = nullptr;
    for (const GpuHealth& other : snap.gpus)
      if (other.gpu != g.gpu && active_of(other) > 0) peer = &other;
    if (!was_up && !peer) return;
    s.add("FAIL", "NVLink links up", 0,
          fmt::format(
              "0 of {} active: every link down{}", g.links.size(),
              was_up ? " since the run began" : fmt::format(" while GPU {}'s are up", peer->gpu)),
          "NVLink");
    return;
  }
  const std::string subject = s.subject;
  std::string down;
  for (const LinkHealth& l : g.links)
    if (!l.active.value_or(false)) down += fmt::format("{}{}", down.empty() ? "" : ", ", l.link);
  s.add(down.empty() ? "PASS" : "FAIL", "NVLink links up", active,
        down.empty() ? fmt::format("{} of {} active", active, g.links.size())
                     : fmt::format("{} of {} active; down: link {}", active, g.links.size(), down),
        "NVLink");
  for (const LinkHealth& l : g.links) {
    if (!l.active.value_or(false)) continue;
    const LinkHealth* before = nullptr;
    if (was)
      for (const LinkHealth& b : was->links)
        if (b.link == l.link) before = &b;
    const auto delta =
        [&](const std::optional<std::uint64_t> LinkHealth::*field) -> std::optional<std::uint64_t> {
      if (!(l.*field)) return std::nullopt;
      if (!before || !(before->*field)) return l.*field;
      return *(l.*field) >= *(before->*field) ? *(l.*field) - *(before->*field) : *(l.*field);
    };
    const auto crc_flit = delta(&LinkHealth::crc_flit), crc_data = delta(&LinkHealth::crc_data);
    const auto replay = delta(&LinkHealth::replay), recovery = delta(&LinkHealth::recovery);
    s.subject = fmt::format("{} link {}{}", subject, l.link, far_end(snap, l));
    if (!crc_flit && !crc_data && !replay && !recovery) {
      s.add("N/A", "NVLink error counters", kNaN, "not available from this driver", "NVLink");
      continue;
    }
    const std::uint64_t crc = crc_flit.value_or(0) + crc_data.value_or(0);
    const char* level = recovery.value_or(0) > 0 || crc >= kCrcFail ? "FAIL"
                        : crc > 0 || replay.value_or(0) > 0         ? "WARN"
                                                                    : "PASS";
    s.add(level, "NVLink error counters", static_cast<double>(crc),
          fmt::format("CRC errors +{}, replays +{}, recoveries +{} {}", crc, replay.value_or(0),
                      recovery.value_or(0), before ? s.during : "since the driver loaded"),
          "NVLink");
  }
  s.subject = subject;
}

void xid_checks(const HealthEvidence& e, std::vector<Check>& out) {
  if (!e.after) return;  // no work watched (a judged run without snapshots)
  if (!e.xid_unavailable.empty() && e.xids.empty()) {
    out.push_back({"N/A", "Health", "node", "XID events", kNaN, kNaN, "", e.xid_unavailable});
    return;
  }
  for (const XidWatcher::Event& x : e.xids)
    out.push_back({"FAIL", "Health", fmt::format("GPU {}", x.gpu), "XID event",
                   static_cast<double>(x.xid), kNaN, "", fmt::format("XID {} at {}", x.xid, x.at)});
  if (e.xids.empty())
    out.push_back({"PASS", "Health", "node", "XID events", 0, kNaN, "", "none " + e.during});
}

// Throttling the monitors saw: hardware slowdowns FAIL, software thermal WARNs (FAILs with
// `thermal_fails`); the software power cap is how a GPU runs at full load, and passes.
void throttle_checks(const std::map<int, std::set<std::string>>& seen, bool thermal_fails,
                     std::vector<Check>& out) {
  for (const auto& [gpu, names] : seen) {
    const char* level = "PASS";
    std::string list;
    for (const std::string& n : names) {
      if (n == "gpu_idle" || n == "applications_clocks_setting" || n == "sync_boost" ||
          n == "display_clock_setting")
        continue;
      list += (list.empty() ? "" : ", ") + n;
      if (n.rfind("hw_", 0) == 0 || (n == "sw_thermal_slowdown" && thermal_fails))
        level = "FAIL";
      else if (n == "sw_thermal_slowdown" && std::string(level) == "PASS")
        level = "WARN";
    }
    out.push_back({level, "Health", fmt::format("GPU {}", gpu), "Clock slowdowns", kNaN, kNaN, "",
                   list.empty() ? "none while measuring" : list + " while measuring"});
  }
}

}  // namespace

std::vector<Check> judge_health(const HealthEvidence& e) {
  std::vector<Check> out;
  const HealthSnapshot* now = e.after ? e.after : e.before;
  if (!now || !now->unavailable.empty()) {
    out.push_back({"N/A", "Health", "node", "NVML counters", kNaN, kNaN, "",
                   now ? "NVML: " + now->unavailable : "the run holds no health snapshot"});
  } else {
    for (const GpuHealth& g : now->gpus) {
      const GpuHealth* was = e.before && e.after ? e.before->find(g.gpu) : nullptr;
      Sink s{out, fmt::format("GPU {}", g.gpu), e.during};
      memory_checks(s, g, was);
      pcie_checks(s, g, was);
      state_checks(s, g, was);
      nvlink_checks(s, g, was, *now);
    }
  }
  xid_checks(e, out);
  throttle_checks(e.throttles, e.thermal_fails, out);
  return out;
}

HealthEvidence HealthEvidence::of(const std::optional<HealthSnapshot>& before,
                                  const std::optional<HealthSnapshot>& after,
                                  std::vector<XidWatcher::Event> xids,
                                  std::string xid_unavailable) {
  HealthEvidence h;
  h.before = before ? &*before : nullptr;
  h.after = after ? &*after : nullptr;
  h.xids = std::move(xids);
  h.xid_unavailable = std::move(xid_unavailable);
  return h;
}

void write_health_evidence(const HealthEvidence& e, nlohmann::ordered_json& extra) {
  if (e.before) extra["health_before"] = e.before->to_json();
  if (e.after) extra["health_after"] = e.after->to_json();
  nlohmann::ordered_json xids = nlohmann::ordered_json::array();
  for (const XidWatcher::Event& x : e.xids)
    xids.push_back({{"gpu", x.gpu}, {"xid", x.xid}, {"at", x.at}});
  extra["xid_events"] = xids;
  if (!e.xid_unavailable.empty()) extra["xid_unavailable"] = e.xid_unavailable;
}

}  // namespace gpubench
