// The health snapshot and the XID watcher on a real GPU: what NVML gives, what it does not, and
// that watching starts and stops promptly.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <thread>

#include "gpubench/core/health.hpp"
#include "gpubench/core/nvml.hpp"
#include "gpubench/core/system.hpp"

using namespace gpubench;

namespace {

const System& discovered() {
  static const System system = System::discover(false);
  return system;
}

// A GPU that NVML is expected to answer fully for: ECC, PCIe, thresholds.
bool is_datacenter(const GpuInfo& g) {
  for (const char* model : {"A100", "A800", "H100", "H200", "H800", "H20", "B100", "B200", "B300"})
    if (g.name.find(model) != std::string::npos) return true;
  return false;
}

// The names of the counters of `h` that NVML did not give.
std::vector<std::string> not_available(const GpuHealth& h) {
  std::vector<std::string> names;
  auto note = [&](const char* name, bool has) {
    if (!has) names.push_back(name);
  };
  note("ecc_enabled", h.ecc_enabled.has_value());
  note("ecc_corrected_volatile", h.ecc_corrected_volatile.has_value());
  note("ecc_uncorrected_volatile", h.ecc_uncorrected_volatile.has_value());
  note("ecc_corrected_total", h.ecc_corrected_total.has_value());
  note("ecc_uncorrected_total", h.ecc_uncorrected_total.has_value());
  note("retired_pages_sbe", h.retired_pages_sbe.has_value());
  note("retired_pages_dbe", h.retired_pages_dbe.has_value());
  note("retirement_pending", h.retirement_pending.has_value());
  note("remapped_rows_corrected", h.remapped_rows_corrected.has_value());
  note("remapped_rows_uncorrected", h.remapped_rows_uncorrected.has_value());
  note("remap_pending", h.remap_pending.has_value());
  note("remap_failed", h.remap_failed.has_value());
  note("pcie_replays", h.pcie_replays.has_value());
  note("pcie_gen", h.pcie_gen.has_value());
  note("pcie_gen_max", h.pcie_gen_max.has_value());
  note("pcie_width", h.pcie_width.has_value());
  note("pcie_width_max", h.pcie_width_max.has_value());
  note("temperature_C", h.temperature_C.has_value());
  note("slowdown_temperature_C", h.slowdown_temperature_C.has_value());
  note("clocks_event_reasons", h.clocks_event_reasons.has_value());
  note("persistence_mode", h.persistence_mode.has_value());
  note("mig_enabled", h.mig_enabled.has_value());
  note("other_processes", h.other_processes.has_value());
  for (const LinkHealth& l : h.links) {
    const std::string at = "links[" + std::to_string(l.link) + "].";
    if (!l.active) names.push_back(at + "active");
    if (!l.remote_bus_id) names.push_back(at + "remote_bus_id");
    if (!l.crc_flit) names.push_back(at + "crc_flit");
    if (!l.crc_data) names.push_back(at + "crc_data");
    if (!l.replay) names.push_back(at + "replay");
    if (!l.recovery) names.push_back(at + "recovery");
  }
  return names;
}

// The snapshot of GPU 0, skipping the test where NVML cannot be read.
GpuHealth gpu0_health() {
  const HealthSnapshot s = read_health(discovered(), {0});
  if (!Nvml::get().available()) {
    EXPECT_EQ(s.unavailable, Nvml::get().error());
    EXPECT_TRUE(s.gpus.empty());
    return {};
  }
  EXPECT_EQ(s.unavailable, "");
  EXPECT_EQ(s.gpus.size(), 1u);
  return s.gpus.empty() ? GpuHealth{} : s.gpus[0];
}

// `later` >= `earlier` wherever both were read.
void expect_not_down(const char* name, const std::optional<std::uint64_t>& earlier,
                     const std::optional<std::uint64_t>& later) {
  if (earlier && later) {
    EXPECT_GE(*later, *earlier) << name << " went down";
  }
}

}  // namespace

TEST(HealthGpu, ReadsEveryCounterOrSaysNotAvailable) {
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // a context: this process is now a GPU process
  const HealthSnapshot s = read_health(discovered(), {0});
  EXPECT_FALSE(s.taken_at.empty());
  if (!Nvml::get().available()) GTEST_SKIP() << "NVML unavailable: " << s.unavailable;
  EXPECT_TRUE(s.driver.has_value());
  EXPECT_EQ(s.unavailable, "");
  ASSERT_EQ(s.gpus.size(), 1u);
  const GpuHealth& h = s.gpus[0];
  EXPECT_EQ(h.gpu, 0);
  EXPECT_EQ(h.bus_id, discovered().gpus.at(0).pci_bus_id);
  EXPECT_EQ(s.find(0), &s.gpus[0]);

  const std::vector<std::string> missing = not_available(h);
  std::cout << "GPU 0 (" << discovered().gpus.at(0).name << "): " << h.links.size()
            << " NVLinks; not available: ";
  for (const std::string& name : missing) std::cout << name << " ";
  std::cout << (missing.empty() ? "none" : "") << "\n";

  // What was read is plausible.
  EXPECT_LT(h.temperature_C.value_or(0), 150u);
  EXPECT_GE(h.pcie_gen.value_or(1), 1);
  EXPECT_GE(h.pcie_width.value_or(1), 1);
  if (h.other_processes) {
    const auto self = static_cast<unsigned>(getpid());
    EXPECT_EQ(std::count(h.other_processes->begin(), h.other_processes->end(), self), 0)
        << "this process is not another process";
  }
  for (std::size_t i = 0; i < h.links.size(); ++i) EXPECT_EQ(h.links[i].link, i);
  // The snapshot survives its JSON.
  EXPECT_EQ(HealthSnapshot::from_json(s.to_json()).to_json(), s.to_json());
}

TEST(HealthGpu, DatacenterGpuHasTheCoreCounters) {
  const GpuInfo& info = discovered().gpus.at(0);
  if (!is_datacenter(info)) GTEST_SKIP() << info.name << " is not a datacenter GPU";
  if (!Nvml::get().available()) GTEST_SKIP() << "NVML unavailable: " << Nvml::get().error();
  const GpuHealth h = gpu0_health();
  EXPECT_TRUE(h.temperature_C.has_value());
  EXPECT_TRUE(h.ecc_enabled.has_value());
  ASSERT_TRUE(h.pcie_gen.has_value());
  ASSERT_TRUE(h.pcie_gen_max.has_value());
  EXPECT_TRUE(h.pcie_width.has_value());
  EXPECT_LE(*h.pcie_gen, *h.pcie_gen_max);
}

TEST(HealthGpu, CountersNeverGoDown) {
  if (!Nvml::get().available()) GTEST_SKIP() << "NVML unavailable: " << Nvml::get().error();
  const GpuHealth a = gpu0_health();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const GpuHealth b = gpu0_health();
  expect_not_down("ecc_corrected_volatile", a.ecc_corrected_volatile, b.ecc_corrected_volatile);
  expect_not_down("ecc_uncorrected_volatile", a.ecc_uncorrected_volatile,
                  b.ecc_uncorrected_volatile);
  expect_not_down("ecc_corrected_total", a.ecc_corrected_total, b.ecc_corrected_total);
  expect_not_down("ecc_uncorrected_total", a.ecc_uncorrected_total, b.ecc_uncorrected_total);
  expect_not_down("retired_pages_sbe", a.retired_pages_sbe, b.retired_pages_sbe);
  expect_not_down("retired_pages_dbe", a.retired_pages_dbe, b.retired_pages_dbe);
  expect_not_down("remapped_rows_corrected", a.remapped_rows_corrected, b.remapped_rows_corrected);
  expect_not_down("remapped_rows_uncorrected", a.remapped_rows_uncorrected,
                  b.remapped_rows_uncorrected);
  expect_not_down("pcie_replays", a.pcie_replays, b.pcie_replays);
  ASSERT_EQ(a.links.size(), b.links.size());
  for (std::size_t i = 0; i < a.links.size(); ++i) {
    SCOPED_TRACE("link " + std::to_string(i));
    expect_not_down("crc_flit", a.links[i].crc_flit, b.links[i].crc_flit);
    expect_not_down("crc_data", a.links[i].crc_data, b.links[i].crc_data);
    expect_not_down("replay", a.links[i].replay, b.links[i].replay);
    expect_not_down("recovery", a.links[i].recovery, b.links[i].recovery);
  }
}

TEST(HealthGpu, XidWatcherStopsPromptly) {
  XidWatcher watcher(discovered(), {0});
  const std::string why = watcher.unavailable();
  std::cout << "XID watcher: " << (why.empty() ? "watching GPU 0" : why) << "\n";
  EXPECT_TRUE(why.empty() || why.rfind("XID events: ", 0) == 0) << why;
  EXPECT_TRUE(Nvml::get().available() || !why.empty()) << "without NVML the watcher says why";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // at least one wait slice

  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<XidWatcher::Event> events = watcher.stop();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 1.0) << "stop() must return within a second";
  for (const XidWatcher::Event& e : events) {
    std::cout << "XID " << e.xid << " on GPU " << e.gpu << " at " << e.at << "\n";
    EXPECT_EQ(e.gpu, 0);
    EXPECT_FALSE(e.at.empty());
  }
  // Stopping again is harmless and returns the same events.
  EXPECT_EQ(watcher.stop().size(), events.size());
}
