// stress's host logic: durations and options, the memory-test patterns, the judgement of
// synthetic outcomes (a GEMM mismatch, a bit error, a bad link, a slow GPU, a first output that
// disagrees), which GPUs that makes FAULTY, the report's headline and verdict, the live line.
#include <gtest/gtest.h>

#include <bitset>
#include <set>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/nvml.hpp"
#include "gpubench/core/progress.hpp"
#include "gpubench/kernels/memtest.cuh"
#include "gpubench/modules/stress/stress.hpp"

using namespace gpubench;
using namespace gpubench::stress;

namespace {

GpuOutcome clean_gpu(int gpu, double tflops = 700) {
  GpuOutcome g;
  g.gpu = gpu;
  GemmOutcome m;
  m.dtype = GemmDtype::Bf16;
  m.reference_ok = true;
  m.iterations = 400;
  m.tflops = tflops;
  m.tflops_low = tflops * 0.97;
  m.golden_hash = 0xABCD;
  g.gemm.push_back(m);
  MemoryOutcome mem;
  mem.bytes = 100ull << 30;
  mem.passes = 40;
  mem.GBps = 2800;
  g.memory = mem;
  Sample s;
  s.t = 1;
  s.tflops = tflops;
  g.series.push_back(s);
  return g;
}

Outcome clean(int gpus) {
  Outcome o;
  o.settings = resolve_settings(Options{}, true);
  o.elapsed_s = 60;
  for (int i = 0; i < gpus; ++i) o.gpus.push_back(clean_gpu(i));
  for (int i = 0; i < gpus; ++i) {
    o.links.push_back({-1, i, 50, 64u << 20, 0, 55, {}});
    o.links.push_back({i, -1, 50, 64u << 20, 0, 55, {}});
    for (int j = 0; j < gpus; ++j)
      if (i != j) o.links.push_back({i, j, 50, 64u << 20, 0, 390, {}});
  }
  return o;
}

std::vector<Check> fails_of(const std::vector<Check>& checks) {
  std::vector<Check> out;
  for (const Check& c : checks)
    if (c.level == "FAIL") out.push_back(c);
  return out;
}

std::set<int> faulty_set(const Outcome& o) {
  std::vector<int> gpus;
  for (const GpuOutcome& g : o.gpus) gpus.push_back(g.gpu);
  std::set<int> s;
  for (const auto& [gpu, why] : faulty_gpus(judge(o), gpus)) s.insert(gpu);
  return s;
}

}  // namespace

TEST(StressDuration, AcceptsUnitsAndSeconds) {
  EXPECT_DOUBLE_EQ(parse_duration("90s"), 90);
  EXPECT_DOUBLE_EQ(parse_duration("15m"), 900);
  EXPECT_DOUBLE_EQ(parse_duration("1h30m"), 5400);
  EXPECT_DOUBLE_EQ(parse_duration("1h0m30s"), 3630);
  EXPECT_DOUBLE_EQ(parse_duration("600"), 600);
  EXPECT_DOUBLE_EQ(parse_duration(" 2.5m "), 150);
  EXPECT_DOUBLE_EQ(parse_duration("10M"), 600);
}

TEST(StressDuration, RefusesWhatIsNotOne) {
  for (const char* bad : {"", "0", "0s", "-5", "5x", "m", "1m30", "30s1m", "1h1h", "1..5s", "8d",
                          "200h", "nan", "inf", "1e3"})
    EXPECT_THROW(parse_duration(bad), InputError) << bad;
}

TEST(StressDuration, ClockText) {
  EXPECT_EQ(progress::clock_text(0), "0:00");
  EXPECT_EQ(progress::clock_text(-3), "0:00");
  EXPECT_EQ(progress::clock_text(42.4), "0:42");
  EXPECT_EQ(progress::clock_text(900), "15:00");
  EXPECT_EQ(progress::clock_text(3900), "1:05:00");
}

TEST(StressSettings, DefaultsQuickAndWorkloads) {
  Options o;
  EXPECT_DOUBLE_EQ(resolve_settings(o, false).duration_s, 900);
  EXPECT_DOUBLE_EQ(resolve_settings(o, true).duration_s, 60);
  o.duration = "5m";
  EXPECT_DOUBLE_EQ(resolve_settings(o, true).duration_s, 300);
  o.workload = "memory, link";
  const Settings s = resolve_settings(o, false);
  EXPECT_FALSE(s.gemm);
  EXPECT_TRUE(s.memory);
  EXPECT_TRUE(s.link);
  EXPECT_TRUE(s.dtypes.empty());
  o.workload = "gemm";
  o.dtypes = "bf16,fp8,bf16,tf32";
  EXPECT_EQ(resolve_settings(o, false).dtypes,
            (std::vector<GemmDtype>{GemmDtype::Bf16, GemmDtype::Fp8E4M3, GemmDtype::Tf32}));
  EXPECT_EQ(resolve_settings(o, false).to_json()["workloads"].size(), 1u);
}

TEST(StressSettings, RefusesBadInput) {
  const auto refused = [](auto change) {
    Options o;
    change(o);
    EXPECT_THROW(resolve_settings(o, false), InputError);
  };
  refused([](Options& o) { o.workload = "gemm,disk"; });
  refused([](Options& o) { o.workload = ""; });
  refused([](Options& o) { o.dtypes = "bf16,fp7"; });
  refused([](Options& o) { o.memory = 0; });
  refused([](Options& o) { o.memory = 96; });
  refused([](Options& o) { o.memory = std::nan(""); });
  refused([](Options& o) { o.outlier = 100; });
  refused([](Options& o) { o.outlier = -1; });
  refused([](Options& o) { o.duration = "forever"; });
}

TEST(StressPatterns, WalkingBitsMoveEachPass) {
  for (std::uint64_t pass = 0; pass < 70; ++pass)
    for (std::uint64_t i = 0; i < 130; ++i) {
      const std::uint64_t one = mem_pattern_word(MemPattern::WalkingOnes, pass, 1, 0, i);
      EXPECT_EQ(std::bitset<64>(one).count(), 1u);
      EXPECT_EQ(one, 1ull << ((i + pass) % 64));
      EXPECT_EQ(mem_pattern_word(MemPattern::WalkingZeros, pass, 1, 0, i), ~one);
    }
  // Over 64 consecutive passes every bit of a word is set once.
  std::uint64_t seen = 0;
  for (std::uint64_t pass = 0; pass < 64; ++pass)
    seen |= mem_pattern_word(MemPattern::WalkingOnes, pass, 1, 0, 5);
  EXPECT_EQ(seen, ~0ull);
}

TEST(StressPatterns, OwnAddressAndRandom) {
  const std::uint64_t base = 0x7f0000000000ull;
  EXPECT_EQ(mem_pattern_word(MemPattern::OwnAddress, 3, 9, base, 0), base);
  EXPECT_EQ(mem_pattern_word(MemPattern::OwnAddress, 3, 9, base, 10), base + 80);
  const auto r = [](std::uint64_t pass, std::uint64_t seed, std::uint64_t i) {
    return mem_pattern_word(MemPattern::Random, pass, seed, 0, i);
  };
  EXPECT_EQ(r(1, 2, 3), r(1, 2, 3));  // deterministic
  EXPECT_NE(r(1, 2, 3), r(2, 2, 3));  // a new pass, new data
  EXPECT_NE(r(1, 2, 3), r(1, 3, 3));
  EXPECT_NE(r(1, 2, 3), r(1, 2, 4));
  EXPECT_EQ(mem_pattern_word(MemPattern::MovingInversions, 1, 2, 0, 3), r(1, 2, 3));
  // Random words are balanced: about half their bits set.
  std::size_t bits = 0;
  for (std::uint64_t i = 0; i < 1000; ++i) bits += std::bitset<64>(r(0, 7, i)).count();
  EXPECT_NEAR(static_cast<double>(bits) / 1000, 32, 1);
  std::set<std::string> names;
  for (MemPattern p : kMemPatterns) names.insert(to_string(p));
  EXPECT_EQ(names.size(), static_cast<std::size_t>(kMemPatternCount));
}

TEST(StressJudge, CleanNodePasses) {
  const Outcome o = clean(4);
  const auto checks = judge(o);
  EXPECT_TRUE(fails_of(checks).empty());
  EXPECT_TRUE(faulty_set(o).empty());
  const Report r = stress_report(o);
  ASSERT_TRUE(r.verdict.has_value());
  EXPECT_EQ(r.verdict->level, "PASS");
  EXPECT_NE(r.verdict->line.find("4 GPUs OK over 1:00"), std::string::npos) << r.verdict->line;
  EXPECT_EQ(r.find_headline("sustained_bf16_tflops")->value, 700);
  EXPECT_EQ(r.find_headline("gpus_faulty")->value, 0);
}

TEST(StressJudge, GemmMismatchMakesOneGpuFaulty) {
  Outcome o = clean(4);
  o.gpus[2].gemm[0].mismatched = 3;
  o.gpus[2].gemm[0].first_mismatch = 12345;
  o.gpus[2].gemm[0].mismatch_at = {{12345 % 8192, 12345 / 8192}};
  EXPECT_EQ(faulty_set(o), std::set<int>{2});
  const Report r = stress_report(o);
  EXPECT_EQ(r.verdict->level, "FAIL");
  EXPECT_NE(r.verdict->line.find("GPU 2 FAULTY (GEMM bf16 outputs: 3 elements differed over 400 "
                                 "outputs (first seen at row 4153, column 1)"),
            std::string::npos)
      << r.verdict->line;
  EXPECT_EQ(r.find_headline("gemm_mismatches")->value, 3);
  EXPECT_EQ(r.find_headline("gpus_faulty")->value, 1);
}

TEST(StressJudge, UnverifiedRatesStayOutOfTheHeadline) {
  Outcome o = clean(2);
  o.gpus[1].gemm[0].tflops = 500;
  o.gpus[1].gemm[0].reference_ok = false;
  o.gpus[1].gemm[0].reference_note = "wrong";
  const Report r = stress_report(o);
  EXPECT_EQ(r.find_headline("sustained_bf16_tflops")->value, 700);
}

TEST(StressJudge, MemoryErrorsAndWrongFirstOutput) {
  Outcome o = clean(2);
  o.gpus[0].memory->words_wrong = 1;
  o.gpus[0].memory->bit_errors = 2;
  o.gpus[0].memory->first_wrong.push_back({0x7f00001000, 0xff, 0xfc});
  o.gpus[1].gemm[0].reference_ok = false;
  o.gpus[1].gemm[0].reference_note = "3 of 16384 sampled entries outside the tolerance";
  const auto fails = fails_of(judge(o));
  ASSERT_EQ(fails.size(), 2u);
  EXPECT_EQ(fails[0].subject, "GPU 0");
  EXPECT_EQ(fails[0].group, "Memory");
  EXPECT_NE(fails[0].reason.find("0x7f00001000"), std::string::npos) << fails[0].reason;
  EXPECT_EQ(fails[1].subject, "GPU 1");
  EXPECT_EQ(fails[1].what, "first output");
  EXPECT_EQ(faulty_set(o), (std::set<int>{0, 1}));
}

TEST(StressJudge, LinkErrorsCountAgainstBothEnds) {
  Outcome o = clean(4);
  for (LinkOutcome& l : o.links)
    if (l.src == 1 && l.dst == 3) l.wrong_words = 5;
  EXPECT_EQ(faulty_set(o), (std::set<int>{1, 3}));
  Outcome host = clean(4);
  for (LinkOutcome& l : host.links)
    if (l.src == -1 && l.dst == 2) l.wrong_words = 1;
  EXPECT_EQ(faulty_set(host), std::set<int>{2});
  const auto fails = fails_of(judge(host));
  ASSERT_EQ(fails.size(), 1u);
  EXPECT_EQ(fails[0].subject, "host -> GPU 2");
}

// A peer link's error (a GPU at either end failing mid-copy) fails that link, both its ends and
// nothing else: the sending GPU's own load goes on.
TEST(StressJudge, APeerLinkErrorFailsTheLinkNotTheSender) {
  Outcome o = clean(4);
  for (LinkOutcome& l : o.links)
    if (l.src == 0 && l.dst == 2) l.error = "CUDA error: unspecified launch failure";
  EXPECT_EQ(faulty_set(o), (std::set<int>{0, 2}));
  const auto fails = fails_of(judge(o));
  ASSERT_EQ(fails.size(), 1u);
  EXPECT_EQ(fails[0].subject, "GPU 0 -> GPU 2");
  EXPECT_NE(fails[0].reason.find("ended by an error after 50 copies"), std::string::npos)
      << fails[0].reason;
}

// A hung load (its thread never came back: its outcome is what set-up left) makes its GPU
// FAULTY, named in the verdict with the hang limit; the report's details list it.
TEST(StressJudge, AHungLoadMakesItsGpuFaulty) {
  Outcome o = clean(2);
  EXPECT_FALSE(o.any_hung());
  o.gpus[1].hung = {"GEMM"};
  o.gpus[1].gemm[0].iterations = 0;
  o.gpus[1].gemm[0].tflops = 0;
  o.settings.hang_s = 60;
  EXPECT_TRUE(o.any_hung());
  EXPECT_EQ(faulty_set(o), std::set<int>{1});
  const auto fails = fails_of(judge(o));
  ASSERT_EQ(fails.size(), 1u);
  EXPECT_EQ(fails[0].subject, "GPU 1");
  EXPECT_EQ(fails[0].what, "hung");
  const Report r = stress_report(o);
  EXPECT_EQ(r.verdict->level, "FAIL");
  EXPECT_NE(
      r.verdict->line.find("GPU 1 FAULTY (Runs hung: its GEMM load made no progress for 60 s"),
      std::string::npos)
      << r.verdict->line;
  EXPECT_EQ(r.extra["gpus"][1]["hung"], nlohmann::ordered_json::array({"GEMM"}));
  EXPECT_FALSE(r.extra["gpus"][0].contains("hung"));
  EXPECT_EQ(r.extra["settings"]["hang_limit_s"], 60);
}

// A link load that hung beside a GPU whose own load hung waits on that GPU: a WARN for it, the
// hung GPU FAULTY. Alone, a hung link load is its GPU's fault.
TEST(StressJudge, AHungLinkLoadWaitingOnAHungPeerIsNotItsFault) {
  Outcome o = clean(3);
  o.gpus[2].hung = {"GEMM", "link"};
  o.gpus[0].hung = {"link"};
  EXPECT_EQ(faulty_set(o), std::set<int>{2});
  bool warned = false;
  for (const Check& c : judge(o))
    if (c.subject == "GPU 0" && c.what == "hung") {
      EXPECT_EQ(c.level, "WARN");
      EXPECT_NE(c.reason.find("GPU 2 hung: it waits on it"), std::string::npos) << c.reason;
      warned = true;
    }
  EXPECT_TRUE(warned);
  o.gpus[2].hung.clear();
  EXPECT_EQ(faulty_set(o), std::set<int>{0});
}

TEST(StressJudge, SlowGpuAgainstTheMedian) {
  Outcome o = clean(4);
  o.gpus[3].gemm[0].tflops = 700 * 0.88;  // 12% below the others: beyond the 10% allowed
  o.gpus[1].gemm[0].tflops = 700 * 0.93;  // 7% below: within it
  EXPECT_EQ(faulty_set(o), std::set<int>{3});
  // One GPU has no others to be held against.
  Outcome one = clean(1);
  one.gpus[0].gemm[0].tflops = 100;
  EXPECT_TRUE(faulty_set(one).empty());
}

TEST(StressJudge, FirstOutputsComparedByMajorityWithinOneAlgorithm) {
  Outcome o = clean(4);
  for (GpuOutcome& g : o.gpus) g.gemm[0].algo = "id 66";
  o.gpus[2].gemm[0].golden_hash = 0x1234;
  compare_first_outputs(o);
  for (const GpuOutcome& g : o.gpus) EXPECT_EQ(g.gemm[0].agrees, g.gpu != 2) << g.gpu;
  EXPECT_EQ(faulty_set(o), std::set<int>{2});
  // Two GPUs that differ: neither can be told right.
  Outcome two = clean(2);
  two.gpus[1].gemm[0].golden_hash = 0x1234;
  compare_first_outputs(two);
  EXPECT_EQ(two.gpus[0].gemm[0].agrees, false);
  EXPECT_EQ(two.gpus[1].gemm[0].agrees, false);
  // Another algorithm (another GPU model) is not compared; one GPU alone is not either.
  Outcome mixed = clean(3);
  mixed.gpus[2].gemm[0].algo = "id 31";
  mixed.gpus[2].gemm[0].golden_hash = 0x1234;
  compare_first_outputs(mixed);
  EXPECT_EQ(mixed.gpus[0].gemm[0].agrees, true);
  EXPECT_FALSE(mixed.gpus[2].gemm[0].agrees.has_value());
  Outcome one = clean(1);
  compare_first_outputs(one);
  EXPECT_FALSE(one.gpus[0].gemm[0].agrees.has_value());
}

TEST(StressJudge, DisagreeingFirstOutputFails) {
  Outcome o = clean(3);
  for (GpuOutcome& g : o.gpus) g.gemm[0].agrees = true;
  o.gpus[0].gemm[0].agrees = false;
  EXPECT_EQ(faulty_set(o), std::set<int>{0});
}

TEST(StressJudge, NothingFinishedWarnsAndANodeFailureNamesEveryGpu) {
  Outcome o = clean(2);
  o.gpus[0].memory->passes = 0;
  o.gpus[1].gemm[0].iterations = 0;
  const auto checks = judge(o);
  EXPECT_TRUE(fails_of(checks).empty());
  EXPECT_EQ(
      std::count_if(checks.begin(), checks.end(), [](const Check& c) { return c.level == "WARN"; }),
      2);
  std::vector<Check> node{{"FAIL", "Health", "node", "XID events", 1, std::nan(""), "", "x"}};
  EXPECT_EQ(faulty_gpus(node, {0, 1}).size(), 2u);
  o.gpus[1].error = "out of memory";
  EXPECT_EQ(faulty_set(o), std::set<int>{1});
}

TEST(StressJudge, HardwareSlowdownFails) {
  Outcome o = clean(2);
  o.gpus[1].series[0].reasons = nvml::kReasonSwPowerCap | nvml::kReasonHwSlowdown;
  o.gpus[0].series[0].reasons = nvml::kReasonSwPowerCap;
  EXPECT_EQ(faulty_set(o), std::set<int>{1});
}

TEST(StressJudge, ThermalSlowdownFailsABurnIn) {
  Outcome o = clean(2);
  o.gpus[1].series[0].reasons = nvml::kReasonSwThermalSlowdown;  // check WARNs it
  EXPECT_EQ(faulty_set(o), std::set<int>{1});
  const auto checks = judge(o);
  const auto it = std::find_if(checks.begin(), checks.end(), [](const Check& c) {
    return c.subject == "GPU 1" && c.what == "Clock slowdowns";
  });
  ASSERT_NE(it, checks.end());
  EXPECT_EQ(it->level, "FAIL");
  EXPECT_EQ(it->reason, "sw_thermal_slowdown while measuring");
}

TEST(StressReport, SeriesBecomeChartsAndLinksRows) {
  Outcome o = clean(2);
  for (GpuOutcome& g : o.gpus) {
    Sample s;
    s.t = 2;
    s.tflops = 690;
    s.sm_MHz = 1980;
    s.power_W = 700;
    s.temperature_C = 60;
    g.series.push_back(s);
  }
  const Report r = stress_report(o);
  std::set<std::string> sweeps;
  for (const Sweep& s : r.sweeps) {
    sweeps.insert(s.name);
    EXPECT_FALSE(s.log_x);
    EXPECT_EQ(s.series.size(), 2u);
  }
  EXPECT_EQ(sweeps, (std::set<std::string>{"stress_tflops", "stress_sm_clock", "stress_power",
                                           "stress_temperature"}));
  int link_rows = 0;
  for (const CaseResult& c : r.results) link_rows += c.group == "Link copies";
  EXPECT_EQ(link_rows, 6);
  EXPECT_EQ(r.extra["gpus"][1]["series"].size(), 2u);
}

TEST(StressLive, LineShowsWhatIsKnown) {
  Sample s;
  s.t = 192;
  s.tflops = 702.44;
  s.memory_GBps = 2840.2;
  s.sm_MHz = 1980;
  s.power_W = 690.4;
  s.temperature_C = 61;
  s.errors = 0;
  EXPECT_EQ(live_line(0, s, 900),
            "GPU 0  3:12 / 15:00  702.4 TFLOP/s  mem 2840 GB/s  1980 MHz  690 W  61 C  errors 0");
  Sample bare;
  bare.t = 5;
  bare.errors = 3;
  EXPECT_EQ(live_line(3, bare, 60), "GPU 3  0:05 / 1:00  errors 3");
}
