// Host-only tests of system discovery's formulas, topology, warnings and JSON, and of the monitor.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "gpubench/core/monitor.hpp"
#include "gpubench/core/nvml.hpp"
#include "gpubench/core/system.hpp"
#include "gpubench/core/system_detail.hpp"

using namespace gpubench;

namespace {

PcieInfo pcie(int gen, int width, int gen_max, int width_max) {
  PcieInfo p;
  p.gen_current = gen;
  p.width_current = width;
  p.gen_max = gen_max;
  p.width_max = width_max;
  return p;
}

GpuInfo h200(int index) {
  GpuInfo g;
  g.index = index;
  g.name = "NVIDIA H200";
  g.uuid = "GPU-00000000-0000-0000-0000-00000000000" + std::to_string(index);
  g.pci_bus_id = "0000:1" + std::to_string(index) + ":00.0";
  g.cc_major = 9;
  g.cc_minor = 0;
  g.sm_count = 132;
  g.memory_bytes = 150754820096ULL;
  g.memory_free_bytes = 150000000000ULL;
  g.l2_bytes = 50331648;
  g.memory_bus_width_bits = 6144;
  g.memory_clock_max_MHz = 3201;
  g.sm_clock_max_MHz = 1980;
  g.ecc_enabled = true;
  g.ecc_errors_corrected = 0;
  g.ecc_errors_uncorrected = 0;
  g.power_limit_W = 700;
  g.persistence_mode = true;
  g.mig_enabled = false;
  g.pcie = pcie(5, 16, 5, 16);
  g.nvlink_links_up = 18;
  g.nvlink_version = 4;
  g.nvlink_GBps_per_link = 26.5625;
  g.numa_node = "0";
  g.cpu_affinity = "0-47";
  return g;
}

System two_gpu_system() {
  System s;
  s.hostname = "node1";
  s.driver_version = "580.159.04";
  s.cuda_driver_version = "13.0";
  s.cuda_runtime_version = "13.0";
  s.nccl_version = "2.28.3";
  s.cublas_version = "13.1.0";
  s.nvml_available = true;
  s.gpus = {h200(0), h200(1)};
  Link l;
  l.a = 0;
  l.b = 1;
  l.type = "NVLink";
  l.count = 18;
  l.GBps_theoretical = 478.125;
  l.p2p_access = true;
  s.links = {l};
  s.shm_bytes = 64ULL << 30;
  return s;
}

bool contains(const std::vector<std::string>& texts, const std::string& part) {
  for (const auto& t : texts)
    if (t.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(Pcie, TheoreticalPerGenerationAndWidth) {
  EXPECT_NEAR(pcie(0, 0, 5, 16).GBps_theoretical(), 63.02, 0.01);  // 32 GT/s x 128/130 x 16 / 8
  EXPECT_NEAR(pcie(0, 0, 4, 16).GBps_theoretical(), 31.51, 0.01);
  EXPECT_NEAR(pcie(0, 0, 3, 16).GBps_theoretical(), 15.75, 0.01);
  EXPECT_NEAR(pcie(0, 0, 2, 16).GBps_theoretical(), 8.0, 1e-9);  // 5 GT/s x 8/10 x 16 / 8
  EXPECT_NEAR(pcie(0, 0, 1, 16).GBps_theoretical(), 4.0, 1e-9);
  EXPECT_NEAR(pcie(0, 0, 6, 16).GBps_theoretical(), 121.0, 1e-9);  // FLIT: 242/256
  EXPECT_NEAR(pcie(0, 0, 5, 8).GBps_theoretical(), 31.51, 0.01);
  EXPECT_EQ(pcie(0, 0, 0, 16).GBps_theoretical(), 0);
  EXPECT_EQ(pcie(0, 0, 7, 16).GBps_theoretical(), 0);
  EXPECT_EQ(pcie(0, 0, 5, 0).GBps_theoretical(), 0);
}

TEST(Pcie, CurrentUsesTheCurrentLink) {
  const PcieInfo p = pcie(1, 16, 5, 16);  // an idle Gen5 link drops to Gen1
  EXPECT_NEAR(p.GBps_current(), 4.0, 1e-9);
  EXPECT_NEAR(p.GBps_theoretical(), 63.02, 0.01);
}

TEST(Hbm, ClockTimesBusWidthTimesTwo) {
  GpuInfo h100;
  h100.memory_clock_max_MHz = 2619;
  h100.memory_bus_width_bits = 5120;
  EXPECT_NEAR(h100.hbm_GBps_theoretical(), 3352.32, 0.01);
  GpuInfo h200;
  h200.memory_clock_max_MHz = 3201;
  h200.memory_bus_width_bits = 6144;
  EXPECT_NEAR(h200.hbm_GBps_theoretical(), 4916.74, 0.01);
  GpuInfo unknown;
  EXPECT_EQ(unknown.hbm_GBps_theoretical(), 0);
}

TEST(Throttle, NamesFollowNvmlBits) {
  EXPECT_EQ(throttle_reason_names(0x1), std::vector<std::string>{"gpu_idle"});
  EXPECT_EQ(throttle_reason_names(0x2), std::vector<std::string>{"applications_clocks_setting"});
  EXPECT_EQ(throttle_reason_names(0x4), std::vector<std::string>{"sw_power_cap"});
  EXPECT_EQ(throttle_reason_names(0x8), std::vector<std::string>{"hw_slowdown"});
  EXPECT_EQ(throttle_reason_names(0x10), std::vector<std::string>{"sync_boost"});
  EXPECT_EQ(throttle_reason_names(0x20), std::vector<std::string>{"sw_thermal_slowdown"});
  EXPECT_EQ(throttle_reason_names(0x40), std::vector<std::string>{"hw_thermal_slowdown"});
  EXPECT_EQ(throttle_reason_names(0x80), std::vector<std::string>{"hw_power_brake_slowdown"});
  EXPECT_EQ(throttle_reason_names(0x100), std::vector<std::string>{"display_clock_setting"});
  EXPECT_TRUE(throttle_reason_names(0).empty());
  EXPECT_EQ(throttle_reason_names(0x5), (std::vector<std::string>{"gpu_idle", "sw_power_cap"}));
  EXPECT_EQ(throttle_reason_names(0x200), std::vector<std::string>{"other_0x200"});
}

TEST(Throttle, OnlyReasonsThatLowerClocksUnderLoadCount) {
  EXPECT_EQ(throttling_reasons(0x1ff), 0x4u | 0x8u | 0x20u | 0x40u | 0x80u);
  EXPECT_EQ(throttling_reasons(0x1 | 0x2 | 0x10 | 0x100), 0u);
  GpuMonitorSummary g;
  g.throttle_reasons = 0x1;
  EXPECT_FALSE(g.throttled());
  g.throttle_reasons |= 0x40;
  EXPECT_TRUE(g.throttled());
  // Named in reports: idle and the other reasons that do not lower clocks are left out.
  EXPECT_EQ(throttling_list(0x1 | 0x4), "sw_power_cap");
  EXPECT_EQ(throttling_list(0x1 | 0x2), "");
  EXPECT_EQ(throttling_list(0x4 | 0x40, ", "), "sw_power_cap, hw_thermal_slowdown");
}

TEST(MonitorSummary, SampledFindsAGpuWithSamples) {
  MonitorSummary m;
  GpuMonitorSummary a, b;
  a.gpu = 0;
  a.samples = 0;  // selected, never sampled
  b.gpu = 1;
  b.samples = 3;
  m.gpus = {a, b};
  EXPECT_EQ(m.sampled(0), nullptr);
  ASSERT_NE(m.sampled(1), nullptr);
  EXPECT_EQ(m.sampled(1)->samples, 3);
  EXPECT_EQ(m.sampled(2), nullptr);
}

TEST(MonitorSummary, MergeWidensPerGpu) {
  MonitorSummary a;
  a.available = true;
  GpuMonitorSummary a0;
  a0.gpu = 0;
  a0.samples = 3;
  a0.sm_clock_min_MHz = 1900;
  a0.sm_clock_max_MHz = 1980;
  a0.mem_clock_min_MHz = 3201;
  a0.mem_clock_max_MHz = 3201;
  a0.temperature_max_C = 50;
  a0.power_max_W = 500;
  a0.throttle_reasons = 0x1;
  a.gpus = {a0};

  MonitorSummary b;
  b.available = true;
  GpuMonitorSummary b0 = a0;
  b0.samples = 2;
  b0.sm_clock_min_MHz = 1500;
  b0.sm_clock_max_MHz = 1800;
  b0.temperature_max_C = 70;
  b0.power_max_W = 690.5;
  b0.throttle_reasons = 0x4;
  GpuMonitorSummary b1;
  b1.gpu = 1;
  b1.samples = 1;
  b1.sm_clock_min_MHz = b1.sm_clock_max_MHz = 1980;
  b.gpus = {b0, b1};

  a.merge(b);
  ASSERT_EQ(a.gpus.size(), 2u);
  EXPECT_EQ(a.gpus[0].samples, 5);
  EXPECT_EQ(a.gpus[0].sm_clock_min_MHz, 1500u);
  EXPECT_EQ(a.gpus[0].sm_clock_max_MHz, 1980u);
  EXPECT_EQ(a.gpus[0].temperature_max_C, 70u);
  EXPECT_DOUBLE_EQ(a.gpus[0].power_max_W, 690.5);
  EXPECT_EQ(a.gpus[0].throttle_reasons, 0x5u);
  EXPECT_TRUE(a.gpus[0].throttled());
  EXPECT_EQ(a.gpus[1].gpu, 1);
  EXPECT_TRUE(a.throttled());

  // An empty (unavailable) summary changes nothing; a summary without readings keeps the mins.
  MonitorSummary none;
  a.merge(none);
  EXPECT_EQ(a.gpus[0].samples, 5);
  MonitorSummary unread;
  GpuMonitorSummary u;
  u.gpu = 0;
  unread.gpus = {u};
  a.merge(unread);
  EXPECT_EQ(a.gpus[0].sm_clock_min_MHz, 1500u);
}

TEST(MonitorSummary, JsonShape) {
  MonitorSummary s;
  s.available = true;
  GpuMonitorSummary g;
  g.gpu = 2;
  g.samples = 4;
  g.sm_clock_min_MHz = 1755;
  g.sm_clock_max_MHz = 1980;
  g.mem_clock_min_MHz = g.mem_clock_max_MHz = 2619;
  g.temperature_max_C = 61;
  g.power_max_W = 655.25;
  g.throttle_reasons = 0x4 | 0x1;
  GpuMonitorSummary empty;
  empty.gpu = 3;
  s.gpus = {g, empty};

  const nlohmann::ordered_json j = s.to_json();
  EXPECT_TRUE(j.at("available").is_boolean());
  ASSERT_EQ(j.at("gpus").size(), 2u);
  const auto& e = j["gpus"][0];
  EXPECT_EQ(e.at("gpu"), 2);
  EXPECT_EQ(e.at("samples"), 4);
  EXPECT_EQ(e.at("sm_clock_MHz").at("min"), 1755);
  EXPECT_EQ(e.at("sm_clock_MHz").at("max"), 1980);
  EXPECT_EQ(e.at("mem_clock_MHz").at("min"), 2619);
  EXPECT_TRUE(e.at("temperature_max_C").is_number());
  EXPECT_DOUBLE_EQ(e.at("power_max_W").get<double>(), 655.25);
  EXPECT_EQ(e.at("throttle_reasons"), nlohmann::ordered_json({"gpu_idle", "sw_power_cap"}));
  EXPECT_EQ(e.at("throttled"), true);
  const auto& u = j["gpus"][1];
  EXPECT_FALSE(u.at("sm_clock_MHz").contains("min"));  // never read: left out
  EXPECT_FALSE(u.contains("power_max_W"));
  EXPECT_EQ(u.at("throttled"), false);
}

TEST(Monitor, WithoutNvmlDoesNotCrash) {
  Monitor m({0, 1}, std::chrono::milliseconds(1));
  m.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const MonitorSummary s = m.stop();
  if (!Nvml::get().available()) {
    EXPECT_FALSE(s.available);
    EXPECT_FALSE(s.throttled());
  }
  (void)m.stop();  // stopping twice is harmless
  m.start();       // and a monitor can be restarted
}

TEST(Nvml, UnavailableSaysWhy) {
  const Nvml& nvml = Nvml::get();
  if (nvml.available()) GTEST_SKIP() << "NVML is present on this machine";
  EXPECT_FALSE(nvml.error().empty());
  EXPECT_FALSE(nvml.driver_version().has_value());
  EXPECT_FALSE(nvml.device_for_cuda(0).has_value());
}

TEST(PciBusId, CanonicalForm) {
  EXPECT_EQ(canonical_pci_bus_id("00000000:1B:00.0"), "0000:1b:00.0");  // NVML
  EXPECT_EQ(canonical_pci_bus_id("0000:3B:00.0"), "0000:3b:00.0");      // CUDA
  EXPECT_EQ(canonical_pci_bus_id("0000:3b:00.0"), "0000:3b:00.0");      // sysfs
  EXPECT_EQ(canonical_pci_bus_id("1b:00.0"), "0000:1b:00.0");
  EXPECT_EQ(canonical_pci_bus_id("0001:c1:1f.7"), "0001:c1:1f.7");
  EXPECT_EQ(canonical_pci_bus_id(""), "");
  EXPECT_EQ(canonical_pci_bus_id("GPU-1234"), "");
  EXPECT_EQ(canonical_pci_bus_id("0000:1g:00.0"), "");
  EXPECT_EQ(canonical_pci_bus_id("0000:1b:20.0"), "");  // device > 31
}

TEST(GpuUuid, NvidiaSmiSpelling) {
  const unsigned char raw[16] = {0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0x00, 0x01,
                                 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0xff};
  char bytes[16];
  std::memcpy(bytes, raw, sizeof bytes);
  EXPECT_EQ(format_gpu_uuid(bytes), "GPU-12345678-9abc-0001-0203-0405060708ff");
}

TEST(Nvlink, GenerationPrefersTheArchitecture) {
  EXPECT_EQ(detail::nvlink_generation(9, 0, 7u), 4);  // Hopper misreported as 5.0
  EXPECT_EQ(detail::nvlink_generation(8, 0, 5u), 3);
  EXPECT_EQ(detail::nvlink_generation(10, 0, std::nullopt), 5);
  EXPECT_EQ(detail::nvlink_generation(11, 0, 8u), 6);  // unknown architecture: NVML's enum
  EXPECT_EQ(detail::nvlink_generation(11, 0, 6u), 4);
  EXPECT_EQ(detail::nvlink_generation(11, 0, std::nullopt), 0);
}

TEST(Nvlink, PerLinkSpeed) {
  EXPECT_DOUBLE_EQ(detail::nvlink_GBps_per_link(4, std::nullopt), 26.5625);
  EXPECT_DOUBLE_EQ(detail::nvlink_GBps_per_link(4, 26.562), 26.562);    // NVML's figure
  EXPECT_DOUBLE_EQ(detail::nvlink_GBps_per_link(4, 26562.0), 26.5625);  // implausible: nominal
  EXPECT_DOUBLE_EQ(detail::nvlink_GBps_per_link(3, std::nullopt), 25.0);
  EXPECT_DOUBLE_EQ(detail::nvlink_GBps_per_link(5, std::nullopt), 50.0);
  EXPECT_DOUBLE_EQ(detail::nvlink_GBps_per_link(0, 40.0), 40.0);
  EXPECT_DOUBLE_EQ(detail::nvlink_GBps_per_link(0, std::nullopt), 0.0);
}

TEST(Links, NvswitchGivesEveryPairAllLinks) {
  std::vector<GpuInfo> gpus = {h200(0), h200(1), h200(2), h200(3)};
  std::vector<detail::NvlinkEnds> ends(4);
  for (auto& e : ends) e.to_switch = 18;
  const std::vector<std::vector<bool>> access(4, std::vector<bool>(4, true));
  const std::vector<Link> links = detail::build_links(gpus, ends, access);
  ASSERT_EQ(links.size(), 6u);
  for (const Link& l : links) {
    EXPECT_LT(l.a, l.b);
    EXPECT_EQ(l.type, "NVLink");
    EXPECT_EQ(l.count, 18);
    EXPECT_NEAR(l.GBps_theoretical, 478.125, 1e-9);
    EXPECT_TRUE(l.p2p_access);
  }
}

TEST(Links, SwitchLinksNeedPeerAccess) {
  std::vector<GpuInfo> gpus = {h200(0), h200(1)};
  std::vector<detail::NvlinkEnds> ends(2);
  for (auto& e : ends) e.to_switch = 18;
  const std::vector<std::vector<bool>> no_access(2, std::vector<bool>(2, false));
  const std::vector<Link> links = detail::build_links(gpus, ends, no_access);
  ASSERT_EQ(links.size(), 1u);
  EXPECT_EQ(links[0].type, "PCIe");  // the fabric is down: traffic goes through the host
  EXPECT_EQ(links[0].count, 0);
}

TEST(Links, DirectLinksPcieAndOneWayAccess) {
  std::vector<GpuInfo> gpus = {h200(0), h200(1), h200(2)};
  gpus[2].pcie = pcie(4, 16, 4, 16);  // the weaker end caps a PCIe pair
  std::vector<detail::NvlinkEnds> ends(3);
  ends[0].to_gpu[1] = 4;
  ends[1].to_gpu[0] = 4;
  std::vector<std::vector<bool>> access(3, std::vector<bool>(3, false));
  access[0][1] = access[1][0] = true;
  access[0][2] = true;  // one way only: not peer access
  const std::vector<Link> links = detail::build_links(gpus, ends, access);
  ASSERT_EQ(links.size(), 3u);
  EXPECT_EQ(links[0].type, "NVLink");
  EXPECT_EQ(links[0].count, 4);
  EXPECT_NEAR(links[0].GBps_theoretical, 4 * 26.5625, 1e-9);
  EXPECT_TRUE(links[0].p2p_access);
  EXPECT_EQ(links[1].a, 0);
  EXPECT_EQ(links[1].b, 2);
  EXPECT_EQ(links[1].type, "PCIe");
  EXPECT_EQ(links[1].count, 0);
  EXPECT_NEAR(links[1].GBps_theoretical, 31.51, 0.01);
  EXPECT_FALSE(links[1].p2p_access);
}

TEST(System, LinkLookupIgnoresOrder) {
  const System s = two_gpu_system();
  ASSERT_NE(s.link(0, 1), nullptr);
  EXPECT_EQ(s.link(0, 1), s.link(1, 0));
  EXPECT_EQ(s.link(1, 1), nullptr);
  EXPECT_EQ(s.link(0, 5), nullptr);
  ASSERT_NE(s.gpu(1), nullptr);
  EXPECT_EQ(s.gpu(1)->index, 1);
  EXPECT_EQ(s.gpu(7), nullptr);
}

TEST(System, JsonShapeAndNumbers) {
  System s = two_gpu_system();
  s.gpus[1].memory_clock_max_MHz = 0;  // unknown -> null
  s.gpus[1].persistence_mode.reset();
  const nlohmann::ordered_json j = s.to_json();
  for (const char* key : {"hostname", "driver", "cuda_driver", "cuda_runtime", "nccl", "cublas",
                          "gpus", "links", "shm_bytes"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["driver"], "580.159.04");
  EXPECT_FALSE(j.contains("mpi"));  // unknown: left out
  EXPECT_EQ(j["gpu_count"], 2);
  EXPECT_TRUE(j["shm_bytes"].is_number_unsigned());

  const auto& g = j["gpus"][0];
  EXPECT_EQ(g["index"], 0);
  EXPECT_EQ(g["cc"], "9.0");
  EXPECT_EQ(g["sm_count"], 132);
  EXPECT_TRUE(g["memory_bytes"].is_number_unsigned());
  EXPECT_EQ(g["memory_bytes"].get<std::uint64_t>(), 150754820096ULL);
  EXPECT_EQ(g["memory_bus_width_bits"], 6144);
  EXPECT_EQ(g["memory_clock_max_MHz"], 3201);
  EXPECT_NEAR(g["hbm_GBps_theoretical"].get<double>(), 4916.74, 0.01);
  EXPECT_TRUE(g["pcie"]["gen_max"].is_number());
  EXPECT_NEAR(g["pcie"]["GBps_theoretical"].get<double>(), 63.02, 0.01);
  EXPECT_EQ(g["nvlink"]["links_up"], 18);
  EXPECT_NEAR(g["nvlink"]["GBps"].get<double>(), 478.13, 0.01);
  EXPECT_EQ(g["numa_node"], 0);
  EXPECT_EQ(g["ecc"]["errors_uncorrected"], 0);
  EXPECT_EQ(g["persistence_mode"], true);
  EXPECT_TRUE(g["clocks_event_reasons"].is_array());

  const auto& g1 = j["gpus"][1];
  EXPECT_FALSE(g1.contains("memory_clock_max_MHz"));
  EXPECT_FALSE(g1.contains("hbm_GBps_theoretical"));
  EXPECT_FALSE(g1.contains("persistence_mode"));
  EXPECT_TRUE(g1.contains("ecc"));  // objects stay, with only their known members

  ASSERT_EQ(j["links"].size(), 1u);
  const auto& l = j["links"][0];
  EXPECT_EQ(l["a"], 0);
  EXPECT_EQ(l["b"], 1);
  EXPECT_EQ(l["type"], "NVLink");
  EXPECT_EQ(l["count"], 18);
  EXPECT_TRUE(l["GBps_theoretical"].is_number());
  EXPECT_EQ(l["p2p_access"], true);
}

TEST(System, HealthyMachineHasNoWarnings) {
  EXPECT_TRUE(detail::system_warnings(two_gpu_system(), true).empty());
}

TEST(System, WarningsNameTheGpuAndTheProblem) {
  System s = two_gpu_system();
  s.gpus[0].pcie = pcie(1, 16, 5, 16);
  s.gpus[1].pcie = pcie(5, 8, 5, 16);
  s.gpus[1].ecc_errors_uncorrected = 2;
  s.gpus[1].clocks_event_reasons = 0x1 | 0x40;
  s.gpus[0].mig_enabled = true;
  s.gpus[0].persistence_mode = false;
  s.links[0].p2p_access = false;
  s.shm_bytes = 64ULL << 20;

  const auto w = detail::system_warnings(s, true);
  EXPECT_TRUE(contains(w, "GPU 0 (NVIDIA H200, 0000:10:00.0): PCIe link runs at Gen1 x16"));
  EXPECT_TRUE(contains(w, "GPU 1 (NVIDIA H200, 0000:11:00.0): PCIe link runs at Gen5 x8"));
  EXPECT_TRUE(contains(w, "2 uncorrected ECC errors"));
  EXPECT_TRUE(contains(w, "throttled now (hw_thermal_slowdown)"));
  EXPECT_TRUE(contains(w, "MIG is enabled"));
  EXPECT_TRUE(contains(w, "Persistence mode is off on GPU 0"));
  EXPECT_TRUE(contains(w, "No peer-to-peer access between GPUs 0-1"));
  EXPECT_TRUE(contains(w, "/dev/shm is only 64 MiB"));

  // Links read at idle sit at Gen1 on purpose: only the width can be judged then.
  const auto idle = detail::system_warnings(s, false);
  EXPECT_FALSE(contains(idle, "Gen1 x16"));
  EXPECT_TRUE(contains(idle, "Gen5 x8"));

  s.nvml_available = false;
  s.nvml_error = "libnvidia-ml.so.1 not found";
  EXPECT_TRUE(contains(detail::system_warnings(s, true), "NVML is unavailable (libnvidia-ml.so.1"));
}

TEST(System, DiscoverNeverThrows) {
  System s;
  ASSERT_NO_THROW(s = System::discover(false));
  EXPECT_TRUE(!s.gpus.empty() || !s.no_gpu_reason.empty());
  EXPECT_FALSE(s.cuda_runtime_version.empty());
  EXPECT_FALSE(s.nccl_version.empty());
  EXPECT_FALSE(s.cublas_version.empty());
  const nlohmann::ordered_json j = s.to_json();
  EXPECT_EQ(j["gpu_count"].get<std::size_t>(), s.gpus.size());
  EXPECT_EQ(j.dump().find("null"), std::string::npos);
  const std::size_t n = s.gpus.size();
  EXPECT_EQ(s.links.size(), n < 2 ? 0 : n * (n - 1) / 2);
}

// The report's environment: only what changes CUDA, NCCL, cuBLAS or cuDNN, sorted, values kept
// as given (empty and '=' inside included); other variables and malformed entries left out.
TEST(SystemEnvironment, KeepsOnlyRelevantVariablesSorted) {
  const char* envp[] = {"PATH=/usr/bin",
                        "NCCL_ALGO=Ring",
                        "CUDA_DEVICE_MAX_CONNECTIONS=32",
                        "CUBLASLT_LOG_LEVEL=0",
                        "NCCL_DEBUG=",
                        "CUDNN_LOGLEVEL_DBG=x=y",
                        "NCCL_NO_EQUALS",
                        "=NCCL_EMPTY_NAME",
                        "MY_NCCL_ALGO=Tree",
                        "HOME=/root",
                        nullptr};
  const auto env = System::relevant_environment(envp);
  const std::vector<std::pair<std::string, std::string>> want = {
      {"CUBLASLT_LOG_LEVEL", "0"},
      {"CUDA_DEVICE_MAX_CONNECTIONS", "32"},
      {"CUDNN_LOGLEVEL_DBG", "x=y"},
      {"NCCL_ALGO", "Ring"},
      {"NCCL_DEBUG", ""}};
  EXPECT_EQ(env, want);
  EXPECT_TRUE(System::relevant_environment(nullptr).empty());
}

// System::to_json writes them as one object under "environment".
TEST(SystemEnvironment, WrittenToTheReport) {
  System s;
  s.environment = {{"CUDA_DEVICE_MAX_CONNECTIONS", "32"}, {"NCCL_ALGO", "Ring"}};
  const auto j = s.to_json();
  ASSERT_TRUE(j.contains("environment"));
  EXPECT_EQ(j["environment"]["CUDA_DEVICE_MAX_CONNECTIONS"], "32");
  EXPECT_EQ(j["environment"]["NCCL_ALGO"], "Ring");
}
