// SIGINT (Ctrl-C) or SIGTERM (kill, Slurm's time limit) during a benchmark: gpubench stops
// between cases, writes the report of what it finished (status partial, a warning naming the
// signal) and exits 130 or 143, never leaving a half-written file.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

extern char** environ;

namespace {

// The binary under test: $GPUBENCH_BINARY (a build copied to another machine) or the build's.
std::string binary() {
  const char* env = std::getenv("GPUBENCH_BINARY");
  return env && *env ? env : GPUBENCH_BINARY;
}

// Starts the binary with `args` (after its name); 0 when it could not.
pid_t spawn(std::vector<std::string> args) {
  args.insert(args.begin(), binary());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  return posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) == 0 ? pid : 0;
}

// Waits up to `seconds` for `pid` to end, its status in `status`; false (and the process
// killed) when it did not.
bool ended_within(pid_t pid, int seconds, int& status) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  pid_t done = 0;
  while ((done = waitpid(pid, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (done != 0) return true;
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return false;
}

}  // namespace

// Runs bandwidth's HBM cases on GPU 0, sends `sig` after about two cases and checks the report.
static void stop_and_check(int sig, int expected_code, const char* signal_name) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("gpubench_signal_" + std::to_string(sig) + "_" +
                                                    std::to_string(::getpid()));
  fs::remove_all(dir);
  const pid_t pid =
      spawn({"bandwidth", "--tests", "hbm", "--gpus", "0", "--hbm-size", "256M", "--min-time",
             "0.3", "--max-noise", "0", "--output-dir", dir.string(), "--log-level", "warn"});
  ASSERT_NE(pid, 0) << binary();
  // Each case runs into the 2 s cap (the noise target 0 is never met): interrupt after about two.
  std::this_thread::sleep_for(std::chrono::milliseconds(4500));
  ASSERT_EQ(kill(pid, sig), 0);
  int status = 0;
  if (!ended_within(pid, 60, status))
    FAIL() << "gpubench did not stop within 60 s of " << signal_name;
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), expected_code);
  std::ifstream f(dir / "bandwidth.json");
  ASSERT_TRUE(f.good());
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["status"], "partial");
  bool warned = false;
  for (const auto& w : j["warnings"])
    warned = warned || w.get<std::string>().find(std::string("interrupted by ") + signal_name) !=
                           std::string::npos;
  EXPECT_TRUE(warned);
  int ok_cases = 0;
  for (const auto& c : j["results"]) ok_cases += c["status"] == "ok";
  EXPECT_GE(ok_cases, 1);
  EXPECT_LT(j["results"].size(), 14u);  // stopped before all 14 HBM cases
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
  fs::remove_all(dir);
}

TEST(Interrupt, SigintKeepsFinishedCasesAndExits130) {
  stop_and_check(SIGINT, 130, "SIGINT");
}

TEST(Interrupt, SigtermKeepsFinishedCasesAndExits143) {
  stop_and_check(SIGTERM, 143, "SIGTERM");
}

// matmul --sustained holds one measurement for minutes: SIGTERM (Slurm's time limit) ends the
// hold itself, and the report keeps the row of what was held.
TEST(Interrupt, SigtermEndsASustainedHold) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("gpubench_sustained_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const pid_t pid = spawn({"matmul", "--dtypes", "bf16", "--shapes", "4096x4096x4096", "--layout",
                           "tn", "--algos", "2", "--sustained", "120", "--gpus", "0",
                           "--output-dir", dir.string(), "--log-level", "warn"});
  ASSERT_NE(pid, 0) << binary();
  std::this_thread::sleep_for(std::chrono::seconds(12));  // the shape timed, the hold under way
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  if (!ended_within(pid, 20, status)) FAIL() << "the sustained hold outlasted SIGTERM by 20 s";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 143);
  std::ifstream f(dir / "matmul.json");
  ASSERT_TRUE(f.good());
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["status"], "partial");
  bool held = false;
  for (const auto& c : j["results"])
    if (c.value("group", "").find("sustained") != std::string::npos) {
      held = true;
      EXPECT_NE(c.value("note", "").find("stopped by a signal"), std::string::npos) << c.dump();
      EXPECT_LT(c["params"]["held_s"].get<double>(), 60.0);
    }
  EXPECT_TRUE(held);
  fs::remove_all(dir);
}
