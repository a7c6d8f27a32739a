// System discovery, the NVML mapping, the monitor and the env module on a real GPU machine.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "gpubench/core/context.hpp"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/module.hpp"
#include "gpubench/core/monitor.hpp"
#include "gpubench/core/nvml.hpp"
#include "gpubench/core/system.hpp"

namespace gpubench {
ModulePtr make_env_module();
}

using namespace gpubench;

namespace {

// Discovered once: the same inventory every test reads (and its wall time).
const System& discovered(double* seconds = nullptr) {
  static double took = 0;
  static const System system = [] {
    const auto t0 = std::chrono::steady_clock::now();
    System s = System::discover(true);
    took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return s;
  }();
  if (seconds) *seconds = took;
  return system;
}

}  // namespace

TEST(Discover, FindsGpusWithSaneFields) {
  double seconds = 0;
  const System& s = discovered(&seconds);
  EXPECT_LT(seconds, 3.0) << "discovery must keep `gpubench env` within 3 s";
  ASSERT_GE(s.gpus.size(), 1u);
  EXPECT_TRUE(s.no_gpu_reason.empty());
  EXPECT_FALSE(s.cuda_driver_version.empty());
  EXPECT_FALSE(s.cuda_runtime_version.empty());
  EXPECT_FALSE(s.nccl_version.empty());
  EXPECT_FALSE(s.cublas_version.empty());
  for (std::size_t i = 0; i < s.gpus.size(); ++i) {
    const GpuInfo& g = s.gpus[i];
    SCOPED_TRACE("GPU " + std::to_string(g.index));
    EXPECT_EQ(g.index, static_cast<int>(i));
    EXPECT_FALSE(g.name.empty());
    EXPECT_EQ(g.uuid.rfind("GPU-", 0), 0u);
    EXPECT_EQ(canonical_pci_bus_id(g.pci_bus_id), g.pci_bus_id);
    EXPECT_GE(g.cc_major, 6);
    EXPECT_GT(g.sm_count, 0);
    EXPECT_GT(g.memory_bytes, 1ULL << 30);
    EXPECT_GT(g.memory_free_bytes, 0u);
    EXPECT_LE(g.memory_free_bytes, g.memory_bytes);
    EXPECT_GT(g.l2_bytes, 0u);
    EXPECT_GT(g.memory_bus_width_bits, 0);
    EXPECT_GT(g.memory_clock_max_MHz, 0);
    EXPECT_GT(g.hbm_GBps_theoretical(), 100.0);
    EXPECT_GT(g.sm_clock_max_MHz, 0);
    if (s.nvml_available) {
      EXPECT_GT(g.pcie.gen_max, 0);
      EXPECT_GT(g.pcie.width_max, 0);
      EXPECT_GT(g.pcie.gen_current, 0);  // read under the warm-up copy
      EXPECT_LE(g.pcie.gen_current, g.pcie.gen_max);
      EXPECT_GT(g.pcie.GBps_theoretical(), 0.0);
      EXPECT_GT(g.power_limit_W, 0.0);
      if (g.nvlink_links_up > 0) {
        EXPECT_GT(g.nvlink_version, 0);
        EXPECT_GT(g.nvlink_GBps_per_link, 0.0);
      }
    }
  }
}

TEST(Discover, NvmlMapsCudaDevicesByBusId) {
  const System& s = discovered();
  const Nvml& nvml = Nvml::get();
  if (!nvml.available()) GTEST_SKIP() << "NVML unavailable: " << nvml.error();
  EXPECT_FALSE(s.driver_version.empty());
  for (const GpuInfo& g : s.gpus) {
    const auto d = nvml.device_for_cuda(g.index);
    ASSERT_TRUE(d.has_value()) << "GPU " << g.index;
    EXPECT_EQ(nvml.pci_bus_id(*d).value_or(""), g.pci_bus_id);
  }
}

TEST(Discover, LinksCoverEveryPairSymmetrically) {
  const System& s = discovered();
  const int n = static_cast<int>(s.gpus.size());
  EXPECT_EQ(static_cast<int>(s.links.size()), n * (n - 1) / 2);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) {
        EXPECT_EQ(s.link(a, b), nullptr);
        continue;
      }
      const Link* l = s.link(a, b);
      ASSERT_NE(l, nullptr);
      EXPECT_EQ(l, s.link(b, a));
      int ab = 0, ba = 0;
      ASSERT_EQ(cudaDeviceCanAccessPeer(&ab, a, b), cudaSuccess);
      ASSERT_EQ(cudaDeviceCanAccessPeer(&ba, b, a), cudaSuccess);
      EXPECT_EQ(l->p2p_access, ab != 0 && ba != 0);
      if (l->type == "NVLink") {
        EXPECT_EQ(ab, ba) << "NVLink pair " << a << "-" << b << " with one-way peer access";
        EXPECT_GT(l->count, 0);
        EXPECT_GT(l->GBps_theoretical, 0.0);
      } else {
        EXPECT_EQ(l->type, "PCIe");
        EXPECT_EQ(l->count, 0);
      }
    }
  }
}

TEST(Monitor, SamplesWhileTheGpuIsBusy) {
  if (!Nvml::get().available()) GTEST_SKIP() << "NVML unavailable";
  Monitor monitor({0}, std::chrono::milliseconds(5));
  DeviceBuffer buffer(0, std::size_t(256) << 20);
  Stream stream(0);
  monitor.start();
  // Keep the GPU busy for ~0.2 s with memsets (no kernel needed in a host-compiled test).
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < 8; ++i)
      GPB_CUDA_CHECK(cudaMemsetAsync(buffer.get(), i, buffer.bytes(), stream));
    stream.synchronize();
  }
  const MonitorSummary summary = monitor.stop();
  ASSERT_TRUE(summary.available);
  ASSERT_EQ(summary.gpus.size(), 1u);
  const GpuMonitorSummary& g = summary.gpus[0];
  EXPECT_EQ(g.gpu, 0);
  EXPECT_GE(g.samples, 3);  // start + stop + the sampler thread
  EXPECT_GT(g.sm_clock_max_MHz, 0u);
  EXPECT_GT(g.sm_clock_min_MHz, 0u);
  EXPECT_LE(g.sm_clock_min_MHz, g.sm_clock_max_MHz);
  EXPECT_GT(g.mem_clock_max_MHz, 0u);
  EXPECT_GT(g.temperature_max_C, 0u);
  EXPECT_GT(g.power_max_W, 0.0);
}

TEST(Monitor, ShortMeasurementStillHasSamples) {
  if (!Nvml::get().available()) GTEST_SKIP() << "NVML unavailable";
  Monitor monitor({0});
  monitor.start();
  const MonitorSummary summary = monitor.stop();
  ASSERT_EQ(summary.gpus.size(), 1u);
  EXPECT_GE(summary.gpus[0].samples, 2);
}

TEST(EnvModule, ReportsEveryGpuAndPair) {
  const System& s = discovered();
  std::vector<int> gpus;
  for (const GpuInfo& g : s.gpus) gpus.push_back(g.index);
  Context ctx(s, gpus, CommonOptions{});
  ModulePtr env = make_env_module();
  ASSERT_FALSE(env->unsupported(s, gpus).has_value());
  const Report r = env->run(ctx);
  const Metric* count = r.find_headline("gpu_count");
  ASSERT_NE(count, nullptr);
  EXPECT_EQ(count->value, static_cast<double>(s.gpus.size()));
  ASSERT_NE(r.find_headline("hbm_GBps_theoretical"), nullptr);
  std::size_t gpu_rows = 0, pair_rows = 0;
  for (const CaseResult& c : r.results) {
    gpu_rows += c.group == "GPUs";
    pair_rows += c.group == "Links";
  }
  EXPECT_EQ(gpu_rows, s.gpus.size());
  EXPECT_EQ(pair_rows, s.links.size());
  EXPECT_EQ(r.extra.value("gpu_count", 0u), s.gpus.size());
  if (s.gpus.size() >= 2) {
    ASSERT_FALSE(r.matrices.empty());
    for (const Matrix& m : r.matrices) {
      for (std::size_t i = 0; i < m.values.size(); ++i) {
        EXPECT_TRUE(std::isnan(m.values[i][i]));
        for (std::size_t j = 0; j < m.values.size(); ++j)
          if (!std::isnan(m.values[i][j])) EXPECT_EQ(m.values[i][j], m.values[j][i]) << m.name;
      }
    }
  }
}
