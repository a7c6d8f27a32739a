// stress's fault detectors on real GPUs: each short run with one injected fault (a flipped bit
// in one GPU's GEMM output, a corrupted word in one GPU's memory-test region, a corrupted copy
// on one link) must make exactly that GPU or link FAIL, and the clean run must pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "gpubench/core/context.hpp"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/system.hpp"
#include "gpubench/kernels/memtest.cuh"
#include "gpubench/modules/stress/stress.hpp"

using namespace gpubench;

namespace {

const System& discovered() {
  static const System system = System::discover(false);
  return system;
}

std::vector<int> first_gpus(int n) {
  std::vector<int> g;
  for (int i = 0; i < std::min(n, visible_device_count()); ++i) g.push_back(i);
  return g;
}

stress::Settings short_settings() {
  stress::Options o;
  o.duration = "6s";
  o.memory = 25;  // a quarter of free memory: a pass takes milliseconds
  return stress::resolve_settings(o, false);
}

struct StressRun {
  stress::Outcome outcome;
  std::vector<Check> checks;
  std::map<int, std::vector<std::string>> faulty;
};

StressRun run_with(const std::vector<int>& gpus, const stress::Faults& faults) {
  CommonOptions common;
  Context ctx(discovered(), gpus, common);
  StressRun r;
  r.outcome = stress::run(ctx, short_settings(), faults);
  r.checks = stress::judge(r.outcome);
  r.faulty = stress::faulty_gpus(r.checks, gpus);
  return r;
}

// The FAIL checks of `r` other than health's (a real fault of the machine is not the test's).
std::vector<Check> load_failures(const StressRun& r) {
  std::vector<Check> out;
  for (const Check& c : r.checks)
    if (c.level == "FAIL" && c.group != "Health" && c.group != "NVLink") out.push_back(c);
  return out;
}

std::string describe(const std::vector<Check>& checks) {
  std::string s;
  for (const Check& c : checks)
    s += c.subject + " " + c.group + " " + c.what + ": " + c.reason + "\n";
  return s;
}

// The one load failure a run with one fault must have: its subject and group.
void expect_one_failure(const StressRun& r, const std::string& subject, const std::string& group) {
  const auto fails = load_failures(r);
  ASSERT_EQ(fails.size(), 1u) << describe(fails);
  EXPECT_EQ(fails[0].subject, subject);
  EXPECT_EQ(fails[0].group, group);
}

const stress::GemmOutcome& gemm_of(const StressRun& r, int gpu) {
  for (const auto& g : r.outcome.gpus)
    if (g.gpu == gpu && !g.gemm.empty()) return g.gemm.front();
  throw std::runtime_error("no GEMM outcome");
}

}  // namespace

TEST(Stress, CleanRunPasses) {
  const std::vector<int> gpus = first_gpus(8);
  const StressRun r = run_with(gpus, {});
  EXPECT_TRUE(load_failures(r).empty()) << describe(load_failures(r));
  for (const auto& g : r.outcome.gpus) {
    SCOPED_TRACE("GPU " + std::to_string(g.gpu));
    EXPECT_TRUE(g.error.empty()) << g.error;
    ASSERT_EQ(g.gemm.size(), 1u);
    EXPECT_TRUE(g.gemm[0].reference_ok) << g.gemm[0].reference_note;
    EXPECT_GT(g.gemm[0].iterations, 8u);
    EXPECT_EQ(g.gemm[0].mismatched, 0u);
    EXPECT_GT(g.gemm[0].tflops, 0);
    if (gpus.size() > 1) EXPECT_EQ(g.gemm[0].agrees, std::optional<bool>(true));
    ASSERT_TRUE(g.memory.has_value());
    EXPECT_GE(g.memory->passes, static_cast<std::uint64_t>(kMemPatternCount));
    EXPECT_EQ(g.memory->bit_errors, 0u);
    EXPECT_GE(g.series.size(), 3u);
  }
  // host -> GPU and GPU -> host per GPU, and every ordered pair with peer access.
  EXPECT_GE(r.outcome.links.size(), 2 * gpus.size());
  for (const auto& l : r.outcome.links) {
    EXPECT_GT(l.copies, 0u) << l.name();
    EXPECT_EQ(l.wrong_words, 0u) << l.name();
  }
  const Report rep = stress::stress_report(r.outcome);
  ASSERT_TRUE(rep.verdict.has_value());
  EXPECT_NE(rep.verdict->line.find(" OK over "), std::string::npos) << rep.verdict->line;
}

TEST(Stress, FlippedGemmBitMakesThatGpuFaulty) {
  const std::vector<int> gpus = first_gpus(2);
  const int bad = gpus.back();
  stress::Faults f;
  f.gemm_gpu = bad;
  const StressRun r = run_with(gpus, f);
  EXPECT_EQ(gemm_of(r, bad).mismatched, 1u);
  // The flipped element: a third of the way into the output, as the test hook places it.
  const std::int64_t at = 8192ll * 8192 / 3;
  EXPECT_EQ(gemm_of(r, bad).first_mismatch, at);
  ASSERT_EQ(gemm_of(r, bad).mismatch_at.size(), 1u);
  EXPECT_EQ(gemm_of(r, bad).mismatch_at[0], std::make_pair(at % 8192, at / 8192));
  expect_one_failure(r, "GPU " + std::to_string(bad), "GEMM bf16");
  ASSERT_EQ(r.faulty.count(bad), 1u);
  for (int g : gpus)
    if (g != bad) EXPECT_EQ(gemm_of(r, g).mismatched, 0u);
}

TEST(Stress, CorruptedMemoryWordMakesThatGpuFaulty) {
  const std::vector<int> gpus = first_gpus(2);
  const int bad = gpus.back();
  stress::Faults f;
  f.memory_gpu = bad;
  const StressRun r = run_with(gpus, f);
  expect_one_failure(r, "GPU " + std::to_string(bad), "Memory");
  for (const auto& g : r.outcome.gpus) {
    ASSERT_TRUE(g.memory.has_value());
    EXPECT_EQ(g.memory->bit_errors, g.gpu == bad ? 1u : 0u);
    if (g.gpu == bad) {
      ASSERT_EQ(g.memory->first_wrong.size(), 1u);
      EXPECT_EQ(g.memory->first_wrong[0].expected ^ g.memory->first_wrong[0].got, 1ull << 17);
    }
  }
}

TEST(Stress, CorruptedHostCopyMakesThatLinkFail) {
  const std::vector<int> gpus = first_gpus(2);
  const int bad = gpus.back();
  stress::Faults f;
  f.link_src = -1;
  f.link_dst = bad;
  const StressRun r = run_with(gpus, f);
  expect_one_failure(r, "host -> GPU " + std::to_string(bad), "Links");
  EXPECT_EQ(r.faulty.count(bad), 1u);
  for (const auto& l : r.outcome.links)
    EXPECT_EQ(l.wrong_words, l.src == -1 && l.dst == bad ? 1u : 0u) << l.name();
}

TEST(Stress, CorruptedPeerCopyMakesThatLinkFail) {
  const std::vector<int> gpus = first_gpus(4);
  if (gpus.size() < 2) GTEST_SKIP() << "needs 2 GPUs";
  stress::Faults f;
  f.link_src = gpus[0];
  f.link_dst = gpus[1];
  const StressRun r = run_with(gpus, f);
  expect_one_failure(r, "GPU 0 -> GPU 1", "Links");
  for (const auto& l : r.outcome.links)
    EXPECT_EQ(l.wrong_words, l.src == gpus[0] && l.dst == gpus[1] ? 1u : 0u) << l.name();
  const auto faulty = stress::faulty_gpus(load_failures(r), gpus);  // the machine's own aside
  for (int g : gpus)
    EXPECT_EQ(faulty.count(g), g == gpus[0] || g == gpus[1] ? 1u : 0u) << "GPU " << g;
}

// A GPU whose GEMM load never comes back (a 10-minute kernel) is FAULTY "hung" once its load
// has made no progress for the hang limit: the other loads stop, the report goes to the stall
// sink and the process ends with the sink's code; stress never waits on a stuck GPU. The run is
// a child process (it ends); its sink checks the report and answers 42 when it is right.
TEST(StressDeathTest, AHungGpuIsFaultyAndTheRunEnds) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::vector<int> gpus = first_gpus(2);
  const int bad = gpus.back();
  EXPECT_EXIT(
      {
        const auto t0 = std::chrono::steady_clock::now();
        CommonOptions common;
        Context ctx(discovered(), gpus, common);
        ctx.on_stall([&](Report& r) {
          const double s =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          bool ok = r.verdict && r.verdict->level == "FAIL" && s < 60;
          for (const CaseResult& c : r.results) {
            if (c.group != "GPUs") continue;
            const bool faulty = c.params.value("verdict", "") == "FAULTY";
            const bool hung = c.note.find("Runs hung: its GEMM load made no progress for 3 s") !=
                              std::string::npos;
            ok = ok && (c.name == "GPU " + std::to_string(bad) ? faulty && hung : !faulty);
            std::fprintf(stderr, "%s: %s %s\n", c.name.c_str(),
                         c.params.value("verdict", "").c_str(), c.note.c_str());
          }
          std::fprintf(stderr, "verdict: %s after %.1f s\n",
                       r.verdict ? r.verdict->line.c_str() : "none", s);
          return ok ? 42 : 43;
        });
        stress::Settings s = short_settings();
        s.duration_s = 300;
        s.hang_s = 3;
        stress::Faults f;
        f.hang_gpu = bad;
        (void)stress::run(ctx, s, f);
        std::fprintf(stderr, "stress::run returned: the hang went unnoticed\n");
        std::_Exit(44);
      },
      ::testing::ExitedWithCode(42), "verdict: stress FAIL");
}
