// A run that stops making progress (a rank stuck in NCCL, MPI or the driver, where no exception
// reaches it) ends with the report of what it finished: status failed, the reason, the cases
// before the stall, exit 1, within the watchdog's limit; never a hang, never a lost run.
// - One process, one GPU: tp under a --timeout shorter than its set-up (the watchdog checks every
//   0.1 s), so it trips in the middle of real work.
// - Under mpirun on 2+ GPUs: the last rank is frozen (SIGSTOP, as a process stuck in the kernel
//   would be) in the middle of an all_reduce sweep and of a pp run; rank 0 must write the sizes
//   and pieces finished before, and the job must end on its own.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "gpubench/core/cuda.hpp"

namespace fs = std::filesystem;

namespace {

std::string binary() {
  const char* env = std::getenv("GPUBENCH_BINARY");
  return env && *env ? env : GPUBENCH_BINARY;
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The pid of MPI rank `rank` among the processes whose environment holds `tag`, or 0.
pid_t rank_pid(const std::string& tag, int rank) {
  const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    bool tagged = false, ranked = false;
    for (std::size_t at = 0; at < env.size();) {
      const std::size_t end = env.find('\0', at);
      const std::string var = env.substr(at, end - at);
      tagged = tagged || var == tag;
      ranked = ranked || var == want;
      if (end == std::string::npos) break;
      at = end + 1;
    }
    if (tagged && ranked) return static_cast<pid_t>(std::stol(name));
  }
  return 0;
}

struct Stalled {
  int exit_code = -1;
  double seconds = 0;  // from the freeze to the end of the job
  nlohmann::json report;
  std::string log;
};

// Runs `args` under mpirun -np np in the background; once `ready` appears `ready_count` times in
// its output, freezes the last rank and waits (at most `limit_s`) for the job to end.
Stalled freeze_last_rank(int np, const std::string& args, const std::string& ready, int ready_count,
                         double limit_s) {
  Stalled out;
  const fs::path dir = fs::temp_directory_path() / ("gpubench_stall_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path log = dir / "log.txt";
  const std::string tag = "GPUBENCH_STALL_TEST=" + std::to_string(::getpid());
  const std::string cmd = tag + " NCCL_NVLS_ENABLE=0 timeout " +
                          std::to_string(static_cast<int>(limit_s) + 120) +
                          " mpirun --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE -x " +
                          "GPUBENCH_STALL_TEST -np " + std::to_string(np) + " " + binary() + " " +
                          args + " --output-dir " + (dir / "report").string() + " > " +
                          log.string() + " 2>&1; echo $? > " + (dir / "rc").string();
  std::thread job([cmd] { (void)std::system(cmd.c_str()); });
  pid_t frozen = 0;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(200)) {
    if (fs::exists(dir / "rc")) break;  // ended before the freeze
    if (count_of(read_text(log), ready) >= ready_count) {
      frozen = rank_pid(tag, np - 1);
      if (frozen && kill(frozen, SIGSTOP) == 0) break;
      frozen = 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const auto froze = std::chrono::steady_clock::now();
  job.join();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - froze).count();
  if (frozen) kill(frozen, SIGKILL);  // in case the job left it behind
  out.log = read_text(log);
  std::istringstream(read_text(dir / "rc")) >> out.exit_code;
  if (!frozen) out.exit_code = -2;  // never froze: the test cannot judge
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().extension() == ".json") out.report = nlohmann::json::parse(read_text(e.path()));
  fs::remove_all(dir);
  return out;
}

bool has_mpirun() {
  return std::system("command -v mpirun >/dev/null 2>&1") == 0;
}

}  // namespace

TEST(Stall, OneProcessRunEndsWithItsReport) {
  if (gpubench::visible_device_count() < 1) GTEST_SKIP() << "needs a GPU";
  const fs::path dir =
      fs::temp_directory_path() / ("gpubench_stall_tp_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string cmd = "timeout 120 " + binary() +
                          " tp --gpus 0 --tp 1 --layers 2 --seq-lens 128,512 --contexts 128 "
                          "--timeout 0.001 --log-level warn --output-dir " +
                          dir.string() + " > " + dir.string() + ".log 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1) << read_text(dir.string() + ".log");
  const std::string log = read_text(dir.string() + ".log");
  EXPECT_NE(log.find("no progress for 0.001 s in tp 1"), std::string::npos) << log;
  std::ifstream f(dir / "tp.json");
  ASSERT_TRUE(f.good()) << log;
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["status"], "failed");
  EXPECT_NE(j.value("error", "").find("no progress"), std::string::npos);
  EXPECT_EQ(j["module"], "tp");
  EXPECT_FALSE(j["system"].empty());  // the report's metadata is there
  EXPECT_EQ(j["config"].value("timeout_s", 0.0), 0.001);
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
  fs::remove_all(dir);
  fs::remove(dir.string() + ".log");
}

TEST(Stall, HungRankInAllreduceSweep) {
  const int np = gpubench::visible_device_count();
  if (np < 2) GTEST_SKIP() << "needs 2 GPUs";
  if (!has_mpirun()) GTEST_SKIP() << "no mpirun";
  // The watchdog's limit is 30 s (twice --timeout, at least 30): the job must end within it and
  // the grace of the other ranks (10 s more); --timeout itself ends a hung collective in 5.
  // The fifth size's progress line: four sizes finished.
  const Stalled s = freeze_last_rank(np, "allreduce -b 1K -e 1G -f 2 --timeout 5 --max-time 0.05",
                                     "] all_reduce ", 5, 60);
  ASSERT_NE(s.exit_code, -2) << "the last rank was never frozen\n" << s.log;
  EXPECT_NE(s.exit_code, 0) << s.log;
  EXPECT_NE(s.exit_code, 124) << "the job hung\n" << s.log;
  EXPECT_LT(s.seconds, 45) << s.log;
  ASSERT_TRUE(s.report.is_object()) << s.log;
  EXPECT_EQ(s.report["status"], "failed");
  const std::string error = s.report.value("error", "");
  EXPECT_TRUE(error.find("--timeout") != std::string::npos ||
              error.find("no progress") != std::string::npos)
      << error;
  int ok = 0;
  for (const auto& c : s.report["results"]) ok += c.value("status", "") == "ok";
  EXPECT_GE(ok, 3) << "the sizes finished before the freeze";
}

TEST(Stall, HungRankInPipeline) {
  const int np = std::min(gpubench::visible_device_count(), 4);  // 4 layers: at most 4 stages
  if (np < 2) GTEST_SKIP() << "needs 2 GPUs";
  if (!has_mpirun()) GTEST_SKIP() << "no mpirun";
  // Training on np stages after the one-GPU base: freeze the last stage once the base is done.
  const Stalled s = freeze_last_rank(np,
                                     "pp --pp " + std::to_string(np) +
                                         " --layers 4 --batch 4 --seq-len 128 --microbatches 2,4 "
                                         "--workload training --quick --timeout 10",
                                     std::to_string(np) + " stages, ", 1, 60);
  ASSERT_NE(s.exit_code, -2) << "the last rank was never frozen\n" << s.log;
  EXPECT_NE(s.exit_code, 0) << s.log;
  EXPECT_NE(s.exit_code, 124) << "the job hung\n" << s.log;
  EXPECT_LT(s.seconds, 50) << s.log;
  ASSERT_TRUE(s.report.is_object()) << s.log;
  EXPECT_EQ(s.report["status"], "failed");
  EXPECT_NE(s.report.value("error", "").find("no progress for 10 s in pp"), std::string::npos)
      << s.report.value("error", "");
  bool one_gpu = false;
  for (const auto& c : s.report["results"])
    one_gpu = one_gpu || (c.value("case", "").rfind("p1 ", 0) == 0 && c["status"] == "ok");
  EXPECT_TRUE(one_gpu) << "the one-GPU base finished before the freeze";
}
