// A collective that outlives --timeout is aborted (ncclCommAbort) and reported with its
// collective and size; gpubench exits 1 instead of hanging. A 1 GiB all_reduce takes
// milliseconds, so a 1 ms timeout must trip.
#include <gtest/gtest.h>
#include <sys/wait.h>

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
}  // namespace

TEST(AllreduceTimeout, HungCollectiveIsAbortedAndReported) {
  if (gpubench::visible_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("gpubench_timeout_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string cmd =
      "NCCL_NVLS_ENABLE=0 timeout 120 " + binary() +
      " allreduce --gpus 0,1 -b 1G -e 1G --timeout 0.001 --log-level off --output-dir " +
      dir.string() + " > " + (dir.string() + ".out") + " 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1) << "124 would mean it hung";
  std::ifstream f(dir / "allreduce.json");
  ASSERT_TRUE(f.good());
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["status"], "failed");
  const std::string error = j.value("error", "");
  EXPECT_NE(error.find("all_reduce 1 GiB"), std::string::npos) << error;
  EXPECT_NE(error.find("--timeout"), std::string::npos) << error;
  fs::remove_all(dir);
  fs::remove(dir.string() + ".out");
}
