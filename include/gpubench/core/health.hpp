#pragma once
// A GPU's health as the driver counts it, read through NVML: memory errors and what the driver
// did about them, NVLink and PCIe link state and error counters, what may slow the GPU or share
// it. `check` reads a snapshot before and after its battery and judges the two; XID events in
// between are caught by an XidWatcher. A counter the driver does not expose is empty (null in
// JSON): "not available", never zero.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpubench/core/result.hpp"

namespace gpubench {

struct System;

// One NVLink of a GPU: its state and its data-link error counters (since the driver loaded).
struct LinkHealth {
  unsigned link = 0;
  std::optional<bool> active;
  std::optional<std::string> remote_bus_id;  // canonical PCI bus id of the far end
  std::optional<std::uint64_t> crc_flit, crc_data, replay, recovery;
};

struct GpuHealth {
  int gpu = -1;  // CUDA index in the System
  std::string bus_id;
  std::optional<bool> ecc_enabled;
  // ECC errors, all memory locations: since the driver loaded and over the GPU's life.
  std::optional<std::uint64_t> ecc_corrected_volatile, ecc_uncorrected_volatile;
  std::optional<std::uint64_t> ecc_corrected_total, ecc_uncorrected_total;
  // Page retirement (pre-Ampere) and row remapping (Ampere and later).
  std::optional<std::uint64_t> retired_pages_sbe, retired_pages_dbe;
  std::optional<bool> retirement_pending;
  std::optional<std::uint64_t> remapped_rows_corrected, remapped_rows_uncorrected;
  std::optional<bool> remap_pending, remap_failed;
  // PCIe: replays since the driver loaded; the link now against the most this GPU and slot do.
  std::optional<std::uint64_t> pcie_replays;
  std::optional<int> pcie_gen, pcie_gen_max, pcie_width, pcie_width_max;
  std::optional<unsigned> temperature_C, slowdown_temperature_C;
  std::optional<std::uint64_t> clocks_event_reasons;  // nvml::kReason* bits, now
  std::optional<bool> persistence_mode, mig_enabled;
  // Compute processes on the GPU other than this one (their PIDs).
  std::optional<std::vector<unsigned>> other_processes;
  std::vector<LinkHealth> links;  // the links the GPU has, active or not
};

struct HealthSnapshot {
  std::string taken_at;  // ISO 8601 UTC
  std::optional<std::string> driver;
  std::string unavailable;  // why NVML could not be read ("" when it could)
  std::vector<GpuHealth> gpus;
  nlohmann::ordered_json to_json() const;  // empty counters as null
  static HealthSnapshot from_json(const nlohmann::ordered_json& j);
  const GpuHealth* find(int gpu) const;
};

// Reads every counter of `gpus` (CUDA indices of `system`); never throws for a missing counter
// or a machine without NVML (the snapshot then says why in `unavailable`).
HealthSnapshot read_health(const System& system, const std::vector<int>& gpus);

// XID events (NVML's critical-error events: the driver's reports of GPU faults) on `gpus`, caught
// from construction to stop() by a thread waiting on an NVML event set.
class XidWatcher {
 public:
  struct Event {
    int gpu = -1;
    std::uint64_t xid = 0;
    std::string at;  // ISO 8601 UTC
  };
  XidWatcher(const System& system, const std::vector<int>& gpus);
  ~XidWatcher();
  XidWatcher(const XidWatcher&) = delete;
  XidWatcher& operator=(const XidWatcher&) = delete;
  // Why events cannot be watched here, on some of `gpus` or from some point on ("" when they
  // can be on all of them). A copy: the watch thread adds to it when waiting fails.
  std::string unavailable() const;
  // Stops watching (idempotent) and returns the events seen, in order.
  std::vector<Event> stop();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// What a judgement of health reads: snapshots before and after some work (either may be
// missing), the XID events seen in between, and the clocks-event reasons the work's monitors saw
// per GPU (throttle_reason_names spellings).
struct HealthEvidence {
  const HealthSnapshot* before = nullptr;
  const HealthSnapshot* after = nullptr;
  std::vector<XidWatcher::Event> xids;
  std::string xid_unavailable;  // why XID events were not watched ("" when they were)
  std::map<int, std::set<std::string>> throttles;
  std::string during = "during the battery";  // how reasons name the span between snapshots
  // A software thermal slowdown FAILs (a burn-in: cooling that cannot hold a GPU at full load)
  // instead of WARNing (a short battery).
  bool thermal_fails = false;

  // Evidence over `before` and `after` (either may be empty) and the XID events between.
  static HealthEvidence of(const std::optional<HealthSnapshot>& before,
                           const std::optional<HealthSnapshot>& after,
                           std::vector<XidWatcher::Event> xids, std::string xid_unavailable);
};

// Every health check of the evidence: memory errors and their repair (ECC, retired pages,
// remapped rows), PCIe replays and width, temperature, other processes, persistence and MIG,
// NVLink state and error counters (their deltas), XID events (FAIL), and the slowdowns seen (a
// hardware slowdown FAILs, software thermal WARNs or FAILs, the software power cap passes). A
// counter the driver does not expose is N/A.
std::vector<Check> judge_health(const HealthEvidence& evidence);
// Writes the snapshots and XID events of `evidence` into a report's `extra` (health_before,
// health_after, xid_events, xid_unavailable), where `check --from` reads them back.
void write_health_evidence(const HealthEvidence& evidence, nlohmann::ordered_json& extra);

}  // namespace gpubench
