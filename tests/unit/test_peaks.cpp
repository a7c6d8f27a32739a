// Dense peak table and derivation: the right part is found from real device names, no figure is
// a sparsity one, and unknown parts get a derived peak or none (never a guess).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "gpubench/core/peaks.hpp"
#include "gpubench/core/system.hpp"

using namespace gpubench;

namespace {

// A device as CUDA reports it, with the table entry it must find and one figure to check.
struct KnownPart {
  const char* name;
  int cc_major, cc_minor, sm_count;
  int sm_clock_max_MHz;  // the part's max SM clock (nvidia-smi "Max Clocks")
  const char* model;
  const char* dtype;
  double tflops;
};

const std::vector<KnownPart> kKnownParts = {
    {"NVIDIA H100 80GB HBM3", 9, 0, 132, 1980, "H100 SXM", "bf16", 989.4},
    {"NVIDIA H100 PCIe", 9, 0, 114, 1755, "H100 PCIe", "bf16", 756},
    {"NVIDIA H100 NVL", 9, 0, 132, 1785, "H100 NVL", "bf16", 835.5},
    {"NVIDIA H200", 9, 0, 132, 1980, "H200", "fp8_e4m3", 1978.9},
    {"NVIDIA H200 NVL", 9, 0, 132, 1785, "H200 NVL", "fp8_e4m3", 1670.5},
    {"NVIDIA GH200 480GB", 9, 0, 132, 1980, "GH200", "fp16", 989.4},
    {"NVIDIA H800", 9, 0, 132, 1980, "H800 SXM", "bf16", 989.4},
    {"NVIDIA H800 PCIe", 9, 0, 114, 1755, "H800 PCIe", "bf16", 756},
    {"NVIDIA B200", 10, 0, 148, 1965, "B200", "bf16", 2250},
    {"NVIDIA A100-SXM4-80GB", 8, 0, 108, 1410, "A100", "bf16", 312},
    {"NVIDIA A100-SXM4-40GB", 8, 0, 108, 1410, "A100", "tf32", 156},
    {"NVIDIA A100-PCIE-40GB", 8, 0, 108, 1410, "A100", "fp64", 19.5},
    {"NVIDIA A100 80GB PCIe", 8, 0, 108, 1410, "A100", "int8", 624},
    {"NVIDIA A800-SXM4-80GB", 8, 0, 108, 1410, "A800", "bf16", 312},
    {"NVIDIA A30", 8, 0, 56, 1440, "A30", "bf16", 165},
    {"NVIDIA A10", 8, 6, 72, 1695, "A10", "fp16", 125},
    {"NVIDIA A40", 8, 6, 84, 1740, "A40", "fp16", 149.7},
    {"NVIDIA L40S", 8, 9, 142, 2520, "L40S", "bf16", 362.05},
    {"NVIDIA L4", 8, 9, 58, 2040, "L4", "fp8_e5m2", 242.5},
    {"NVIDIA RTX 6000 Ada Generation", 8, 9, 142, 2505, "RTX 6000 Ada", "bf16", 364.2},
    {"NVIDIA GeForce RTX 4090", 8, 9, 128, 2520, "GeForce RTX 4090", "fp16", 165.2},
    {"Tesla V100-SXM2-32GB", 7, 0, 80, 1530, "V100 SXM2", "fp16", 125},
    {"Tesla V100-PCIE-16GB", 7, 0, 80, 1380, "V100 PCIe", "fp32", 14},
    {"Tesla V100S-PCIE-32GB", 7, 0, 80, 1597, "V100S PCIe", "fp16", 130},
};

std::optional<PeakSpec> find(const KnownPart& p) {
  return find_peak_spec(p.name, p.cc_major, p.cc_minor, p.sm_count, p.sm_clock_max_MHz);
}

std::string model_of(const char* name, int cc_major, int cc_minor, int sm_count) {
  const auto spec = find_peak_spec(name, cc_major, cc_minor, sm_count, 1500);
  return spec ? spec->model : std::string("<none>");
}

}  // namespace

TEST(PeakTable, EveryPartFoundFromItsDeviceName) {
  for (const auto& p : kKnownParts) {
    SCOPED_TRACE(p.name);
    const auto spec = find(p);
    ASSERT_TRUE(spec.has_value());
    EXPECT_EQ(spec->model, p.model);
    EXPECT_EQ(spec->source.rfind("table: ", 0), 0u) << spec->source;
    ASSERT_TRUE(spec->peak(p.dtype).has_value()) << p.dtype;
    EXPECT_DOUBLE_EQ(*spec->peak(p.dtype), p.tflops) << p.dtype;
  }
}

TEST(PeakTable, OnlyKnownKeysAndPositiveFigures) {
  const auto& keys = peak_dtype_keys();
  const std::set<std::string> known(keys.begin(), keys.end());
  EXPECT_EQ(known.size(), 8u);
  for (const auto& p : kKnownParts) {
    SCOPED_TRACE(p.name);
    const auto spec = find(p);
    ASSERT_TRUE(spec.has_value());
    EXPECT_FALSE(spec->tflops.empty());
    for (const auto& [key, value] : spec->tflops) {
      EXPECT_EQ(known.count(key), 1u) << key;
      EXPECT_GT(value, 0.0) << key;
    }
  }
}

// Dense tensor rates double each time the operand width halves (tf32 -> fp16 -> fp8) and bf16
// equals fp16; a sparsity figure slipped in for one type breaks that (ratio 1 or 4, not 2).
TEST(PeakTable, TensorRatesConsistentSoNoSparseFigure) {
  for (const auto& p : kKnownParts) {
    SCOPED_TRACE(p.name);
    const auto spec = find(p);
    ASSERT_TRUE(spec.has_value());
    const auto tf32 = spec->peak("tf32"), fp16 = spec->peak("fp16"), bf16 = spec->peak("bf16");
    const auto fp8 = spec->peak("fp8_e4m3"), fp8b = spec->peak("fp8_e5m2");
    ASSERT_TRUE(fp16.has_value());
    if (bf16) {
      EXPECT_DOUBLE_EQ(*bf16, *fp16);
    }
    if (tf32) {
      EXPECT_GT(*fp16 / *tf32, 1.95);
      EXPECT_LT(*fp16 / *tf32, 2.05);
    }
    EXPECT_EQ(fp8.has_value(), fp8b.has_value());
    if (fp8) {
      EXPECT_DOUBLE_EQ(*fp8, *fp8b);
      EXPECT_GT(*fp8 / *fp16, 1.95);
      EXPECT_LT(*fp8 / *fp16, 2.05);
    }
  }
}

TEST(PeakTable, H100SxmPcieNvlDistinguished) {
  EXPECT_EQ(model_of("NVIDIA H100 80GB HBM3", 9, 0, 132), "H100 SXM");
  EXPECT_EQ(model_of("NVIDIA H100 PCIe", 9, 0, 114), "H100 PCIe");
  EXPECT_EQ(model_of("NVIDIA H100 NVL", 9, 0, 132), "H100 NVL");
  // A bare name: the SM count decides.
  EXPECT_EQ(model_of("NVIDIA H100", 9, 0, 132), "H100 SXM");
  EXPECT_EQ(model_of("NVIDIA H100", 9, 0, 114), "H100 PCIe");
  // Case does not matter.
  EXPECT_EQ(model_of("nvidia h100 pcie", 9, 0, 114), "H100 PCIe");
  const auto sxm = find_peak_spec("NVIDIA H100 80GB HBM3", 9, 0, 132, 1980);
  const auto pcie = find_peak_spec("NVIDIA H100 PCIe", 9, 0, 114, 1755);
  const auto nvl = find_peak_spec("NVIDIA H100 NVL", 9, 0, 132, 1785);
  ASSERT_TRUE(sxm && pcie && nvl);
  EXPECT_GT(*sxm->peak("bf16"), *nvl->peak("bf16"));
  EXPECT_GT(*nvl->peak("bf16"), *pcie->peak("bf16"));
  EXPECT_DOUBLE_EQ(*sxm->peak("fp64"), 66.9);
  EXPECT_DOUBLE_EQ(*pcie->peak("fp64"), 51.2);
  EXPECT_DOUBLE_EQ(*nvl->peak("fp64"), 60);
}

TEST(PeakTable, H200VersusH200NvlAndGh200) {
  EXPECT_EQ(model_of("NVIDIA H200", 9, 0, 132), "H200");
  EXPECT_EQ(model_of("NVIDIA H200 NVL", 9, 0, 132), "H200 NVL");
  EXPECT_EQ(model_of("NVIDIA GH200 480GB", 9, 0, 132), "GH200");
  EXPECT_EQ(model_of("NVIDIA GH200 144G HBM3e", 9, 0, 132), "GH200");
  const auto h200 = find_peak_spec("NVIDIA H200", 9, 0, 132, 1980);
  const auto h200_nvl = find_peak_spec("NVIDIA H200 NVL", 9, 0, 132, 1785);
  ASSERT_TRUE(h200 && h200_nvl);
  EXPECT_DOUBLE_EQ(*h200->peak("bf16"), 989.4);
  EXPECT_DOUBLE_EQ(*h200_nvl->peak("bf16"), 835.5);
}

TEST(PeakTable, WholeTokensOnly) {
  // A10G (80 SMs), RTX 4090 D (114 SMs), Turing Quadro RTX 6000, L40 (not L40S): not in the
  // table and not derivable -> nothing, never a neighbour's figure.
  EXPECT_EQ(model_of("NVIDIA A10G", 8, 6, 80), "<none>");
  EXPECT_EQ(model_of("NVIDIA GeForce RTX 4090 D", 8, 9, 114), "<none>");
  EXPECT_EQ(model_of("Quadro RTX 6000", 7, 5, 72), "<none>");
  EXPECT_EQ(model_of("NVIDIA L40", 8, 9, 142), "<none>");
  // "H20" is not "H200", "L4" is not "L40S".
  EXPECT_EQ(model_of("NVIDIA H200", 9, 0, 132), "H200");
  EXPECT_EQ(model_of("NVIDIA L4", 8, 9, 58), "L4");
}

TEST(PeakTable, Fp8AbsentBeforeHopperAndAda) {
  const auto a100 = find_peak_spec("NVIDIA A100-SXM4-80GB", 8, 0, 108, 1410);
  ASSERT_TRUE(a100.has_value());
  EXPECT_FALSE(a100->peak("fp8_e4m3").has_value());
  EXPECT_FALSE(a100->peak("fp8_e5m2").has_value());
  EXPECT_TRUE(a100->peak("int8").has_value());
  const auto v100 = find_peak_spec("Tesla V100-SXM2-16GB", 7, 0, 80, 1530);
  ASSERT_TRUE(v100.has_value());
  EXPECT_FALSE(v100->peak("bf16").has_value());
  EXPECT_FALSE(v100->peak("tf32").has_value());
  EXPECT_FALSE(v100->peak("fp8_e4m3").has_value());
  EXPECT_DOUBLE_EQ(*v100->peak("fp64"), 7.8);
  // A derived A100-class peak has no fp8 either.
  const auto derived = derived_peak_spec(8, 0, 108, 1410);
  ASSERT_TRUE(derived.has_value());
  EXPECT_FALSE(derived->peak("fp8_e4m3").has_value());
}

// The datasheet quotes each part at its boost clock, never above the max SM clock, so the
// derivation at the max clock bounds every derivable table figure (1% for datasheet rounding:
// A100 312 vs 311.9, B200 fp32 75 vs 74.4 at 1965 MHz).
TEST(PeakTable, NeverAboveDerivedAtMaxClock) {
  int checked_parts = 0;
  for (const auto& p : kKnownParts) {
    const auto derived = derived_peak_spec(p.cc_major, p.cc_minor, p.sm_count, p.sm_clock_max_MHz);
    if (!derived) continue;
    SCOPED_TRACE(p.name);
    ++checked_parts;
    const auto spec = find(p);
    ASSERT_TRUE(spec.has_value());
    for (const auto& [key, table_value] : spec->tflops) {
      const auto bound = derived->peak(key);
      ASSERT_TRUE(bound.has_value()) << key;
      EXPECT_LE(table_value, *bound * 1.01) << key;
    }
  }
  EXPECT_EQ(checked_parts, 15);  // the Hopper, Blackwell and GA100 parts
  // The H100 SXM case the derivation exists for: 132 SMs x 1980 MHz.
  const auto h100 = find_peak_spec("NVIDIA H100 80GB HBM3", 9, 0, 132, 1980);
  const auto h100_derived = derived_peak_spec(9, 0, 132, 1980);
  ASSERT_TRUE(h100 && h100_derived);
  for (const auto& [key, value] : h100->tflops) {
    EXPECT_GE(*h100_derived->peak(key), value) << key;
  }
}

// The per-SM rates reproduce the datasheets at the clocks the datasheets use.
TEST(PeakDerived, PerSmRatesReproduceDatasheets) {
  const auto h100_tensor = derived_peak_spec(9, 0, 132, 1830);  // H100 SXM tensor boost clock
  ASSERT_TRUE(h100_tensor.has_value());
  EXPECT_NEAR(*h100_tensor->peak("tf32"), 494.7, 0.5);
  EXPECT_NEAR(*h100_tensor->peak("bf16"), 989.4, 0.5);
  EXPECT_NEAR(*h100_tensor->peak("fp8_e4m3"), 1978.9, 0.5);
  EXPECT_NEAR(*h100_tensor->peak("int8"), 1978.9, 0.5);
  const auto h100_cores = derived_peak_spec(9, 0, 132, 1980);
  ASSERT_TRUE(h100_cores.has_value());
  EXPECT_NEAR(*h100_cores->peak("fp32"), 66.9, 0.1);
  EXPECT_NEAR(*h100_cores->peak("fp64"), 66.9, 0.1);
  const auto a100 = derived_peak_spec(8, 0, 108, 1410);
  ASSERT_TRUE(a100.has_value());
  EXPECT_NEAR(*a100->peak("fp64"), 19.5, 0.1);
  EXPECT_NEAR(*a100->peak("fp32"), 19.5, 0.1);
  EXPECT_NEAR(*a100->peak("tf32"), 156, 0.5);
  EXPECT_NEAR(*a100->peak("bf16"), 312, 0.5);
  EXPECT_NEAR(*a100->peak("int8"), 624, 0.5);
}

TEST(PeakDerived, UnknownHopperNameDerives) {
  const auto spec = find_peak_spec("NVIDIA Graphics Device", 9, 0, 132, 1980);
  ASSERT_TRUE(spec.has_value());
  EXPECT_EQ(spec->model, "");
  EXPECT_EQ(spec->source.rfind("derived: sm_90, 132 SMs x 1980 MHz x 4096 FLOP/clock/SM", 0), 0u)
      << spec->source;
  EXPECT_DOUBLE_EQ(*spec->peak("bf16"), 132.0 * 1980 * 4096 / 1e6);
  EXPECT_DOUBLE_EQ(*spec->peak("fp8_e5m2"), 132.0 * 1980 * 8192 / 1e6);
  EXPECT_DOUBLE_EQ(*spec->peak("fp32"), 132.0 * 1980 * 256 / 1e6);
  EXPECT_EQ(spec->tflops.size(), 8u);
  // A discovered GPU is looked up by the same four facts and its clock.
  GpuInfo gpu;
  gpu.name = "NVIDIA Graphics Device";
  gpu.cc_major = 9;
  gpu.sm_count = 132;
  gpu.sm_clock_max_MHz = 1980;
  const auto same = find_peak_spec(gpu);
  ASSERT_TRUE(same.has_value());
  EXPECT_EQ(same->source, spec->source);
  gpu.name = "NVIDIA H200";
  EXPECT_EQ(find_peak_spec(gpu)->model, find_peak_spec("NVIDIA H200", 9, 0, 132, 1980)->model);
}

TEST(PeakDerived, MigSliceDerivesFromItsOwnSms) {
  // A MIG slice reports the full part's name with its own SM count: never the full-GPU figure.
  const auto spec = find_peak_spec("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 9, 0, 16, 1980);
  ASSERT_TRUE(spec.has_value());
  EXPECT_EQ(spec->model, "");
  EXPECT_DOUBLE_EQ(*spec->peak("bf16"), 16.0 * 1980 * 4096 / 1e6);
}

TEST(PeakDerived, BlackwellDatacenterDerivesOthersDoNot) {
  const auto b = find_peak_spec("NVIDIA Blackwell engineering sample", 10, 0, 148, 1965);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->source.rfind("derived: sm_100, 148 SMs x 1965 MHz x 8192 FLOP/clock/SM", 0), 0u)
      << b->source;
  EXPECT_DOUBLE_EQ(*b->peak("fp64"), 148.0 * 1965 * 128 / 1e6);
  // sm_103 (B300-class rates differ), sm_86, sm_89, sm_120, sm_70: no fixed per-SM rate.
  EXPECT_FALSE(find_peak_spec("NVIDIA B300", 10, 3, 148, 2032).has_value());
  EXPECT_FALSE(find_peak_spec("NVIDIA GeForce RTX 3090", 8, 6, 82, 1695).has_value());
  EXPECT_FALSE(find_peak_spec("NVIDIA GeForce RTX 4080", 8, 9, 76, 2505).has_value());
  EXPECT_FALSE(find_peak_spec("NVIDIA GeForce RTX 5090", 12, 0, 170, 2407).has_value());
  EXPECT_FALSE(find_peak_spec("Tesla V100-SXM3-32GB", 7, 0, 80, 1597).has_value());
}

TEST(PeakDerived, UnknownAda89GivesNothing) {
  EXPECT_FALSE(find_peak_spec("NVIDIA Some Ada Part", 8, 9, 142, 2520).has_value());
  EXPECT_FALSE(derived_peak_spec(8, 9, 142, 2520).has_value());
}

TEST(PeakDerived, UnknownClockOrSmCountGivesNothing) {
  EXPECT_FALSE(find_peak_spec("NVIDIA Graphics Device", 9, 0, 132, 0).has_value());
  EXPECT_FALSE(find_peak_spec("NVIDIA Graphics Device", 9, 0, 0, 1980).has_value());
  EXPECT_FALSE(derived_peak_spec(9, 0, 132, -1).has_value());
  // A table part does not need the clock.
  const auto h100 = find_peak_spec("NVIDIA H100 80GB HBM3", 9, 0, 132, 0);
  ASSERT_TRUE(h100.has_value());
  EXPECT_EQ(h100->model, "H100 SXM");
}

TEST(PeakDerived, RateLimitedPartsNeverDerived) {
  // H20 tensor and H800 fp64 rates are cut below Hopper's per-SM rate.
  EXPECT_FALSE(find_peak_spec("NVIDIA H20", 9, 0, 78, 1980).has_value());
  EXPECT_FALSE(find_peak_spec("NVIDIA H800", 9, 0, 100, 1980).has_value());
  const auto h800 = find_peak_spec("NVIDIA H800", 9, 0, 132, 1980);
  ASSERT_TRUE(h800.has_value());
  EXPECT_FALSE(h800->peak("fp64").has_value());
}

TEST(PeakSpec, PeakLooksUpKeys) {
  PeakSpec spec;
  spec.tflops["bf16"] = 100.0;
  ASSERT_TRUE(spec.peak("bf16").has_value());
  EXPECT_DOUBLE_EQ(*spec.peak("bf16"), 100.0);
  EXPECT_FALSE(spec.peak("fp16").has_value());
  EXPECT_FALSE(spec.peak("BF16").has_value());
}

TEST(Mfu, PercentOfPeak) {
  EXPECT_DOUBLE_EQ(mfu_pct(494.7, 989.4), 50.0);
  EXPECT_DOUBLE_EQ(mfu_pct(989.4, 989.4), 100.0);
  EXPECT_DOUBLE_EQ(mfu_pct(0.0, 312.0), 0.0);
  EXPECT_NEAR(mfu_pct(700.0, 989.4), 70.74995, 1e-5);
  // Not clamped: a figure over 100% exposes a wrong peak instead of hiding it.
  EXPECT_DOUBLE_EQ(mfu_pct(150.0, 120.0), 125.0);
}

TEST(Mfu, NanWithoutPositivePeak) {
  EXPECT_TRUE(std::isnan(mfu_pct(100.0, 0.0)));
  EXPECT_TRUE(std::isnan(mfu_pct(100.0, -5.0)));
  EXPECT_TRUE(std::isnan(mfu_pct(100.0, std::nan(""))));
}
