// Running out of GPU memory is an OutOfMemoryError, whichever call ran out (a DeviceBuffer or a
// checked CUDA call), so a benchmark point that does not fit is skipped with its reason and the
// run goes on; and seqlen, given a point too large for the GPU between two that fit, reports
// the two and skips the one.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"

using namespace gpubench;

TEST(OutOfMemory, DeviceBufferThrowsOutOfMemoryError) {
  try {
    DeviceBuffer huge(0, std::size_t{1} << 50);  // 1 PiB
    FAIL() << "a 1 PiB allocation succeeded";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot allocate"), std::string::npos) << e.what();
  }
  DeviceBuffer fine(0, 1 << 20);  // the GPU is still usable afterwards
  EXPECT_NE(fine.get(), nullptr);
}

TEST(OutOfMemory, CheckedCudaCallThrowsOutOfMemoryError) {
  DeviceGuard guard(0);
  void* p = nullptr;
  EXPECT_THROW(GPB_CUDA_CHECK(cudaMalloc(&p, std::size_t{1} << 50)), OutOfMemoryError);
  EXPECT_THROW(GPB_CUDA_CHECK(cudaMallocHost(&p, std::size_t{1} << 60)), GpuError);
}

TEST(OutOfMemory, SeqlenSkipsThePointThatDoesNotFitAndKeepsTheRest) {
  namespace fs = std::filesystem;
  const char* env = std::getenv("GPUBENCH_BINARY");
  const std::string bin = env && *env ? env : GPUBENCH_BINARY;
  const fs::path dir = fs::temp_directory_path() / ("gpubench_oom_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  // Two layers: batch 1024 of 8192-token prompts needs about 275 GB of KV cache (skipped),
  // every other point fits. Prompts stay short enough for the attention reference.
  const std::string cmd = "timeout 300 " + bin +
                          " seqlen --gpus 0 --layers 2 --seq-lens 128,8192 --batch-sizes 1,1024"
                          " --output-lens 8 --force-length --quick --log-level warn"
                          " --output-dir " +
                          dir.string() + " > " + dir.string() + ".log 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  std::ifstream f(dir / "seqlen.json");
  ASSERT_TRUE(f.good()) << "exit " << WEXITSTATUS(status);
  const auto j = nlohmann::json::parse(f);
  int ok = 0, skipped = 0;
  for (const auto& c : j["results"]) {
    const std::string st = c.value("status", "");
    ok += st == "ok";
    skipped += st == "skipped";
  }
  EXPECT_GE(ok, 1) << j["results"].dump().substr(0, 600);
  EXPECT_GE(skipped, 1);
  EXPECT_NE(j["status"], "failed");
  fs::remove_all(dir);
  fs::remove(dir.string() + ".log");
}
