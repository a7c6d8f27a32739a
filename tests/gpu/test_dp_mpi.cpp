// dp under mpirun, a process per GPU: every strategy's checked step, with one GPU's reference made
// in rank 0's process and broadcast to the others. On 2 and 4 GPUs.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "gpubench/core/cuda.hpp"

namespace {

std::string binary() {
  const char* env = std::getenv("GPUBENCH_BINARY");
  return env && *env ? env : GPUBENCH_BINARY;
}

// gpubench dp under `mpirun -np np` (llama-2-7b's shapes, 2 layers, short sequences): its JSON
// report, or null with the reason in `why`.
nlohmann::json run_dp_mpi(int np, std::string& why) {
  namespace fs = std::filesystem;
  const fs::path json = fs::temp_directory_path() / ("gpubench_dp_mpi_" + std::to_string(np) + "_" +
                                                     std::to_string(::getpid()));
  const std::string cmd =
      "NCCL_NVLS_ENABLE=0 timeout 300 mpirun --allow-run-as-root --bind-to none -x "
      "NCCL_NVLS_ENABLE -np " +
      std::to_string(np) + " " + binary() + " dp --gpu-counts " + std::to_string(np) +
      " --layers 2 --seq-len 256 --batch-sizes 2 --bucket-size 40MB --quick --no-files"
      " --log-level warn --json " +
      json.string() + " > " + json.string() + ".log 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream f(json);
  if (!f.good()) {
    why = "no report; exit " + std::to_string(WEXITSTATUS(status)) + "; see " + json.string() +
          ".log";
    return nullptr;
  }
  auto j = nlohmann::json::parse(f);
  fs::remove(json);
  fs::remove(json.string() + ".log");
  return j;
}

}  // namespace

TEST(DpMpi, EveryStrategyIsCheckedOnEveryRank) {
  if (gpubench::visible_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  for (int np : {2, 4}) {
    if (np > gpubench::visible_device_count()) continue;
    SCOPED_TRACE("mpirun -np " + std::to_string(np));
    std::string why;
    const auto j = run_dp_mpi(np, why);
    ASSERT_FALSE(j.is_null()) << why;
    EXPECT_EQ(j["status"], "ok") << j.value("error", "");
    int checked = 0;
    for (const auto& c : j["results"]) {
      if (!c["metrics"].contains("grad_error")) continue;  // the memory table
      EXPECT_EQ(c.value("status", ""), "ok") << c.dump().substr(0, 300);
      EXPECT_LE(c["metrics"]["grad_error"].value("value", 1.0), 0.02) << c.value("case", "");
      ++checked;
    }
    EXPECT_EQ(checked, 4);  // ddp, zero1, zero2, fsdp
  }
}
