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

// pp plans each stage's memory before it allocates any: with about 20 GB of GPU 0 left to it,
// a training step of 64 x 1024 tokens in one microbatch (about 40 GB of saved activations and
// logits over 4 layers) is skipped with the figures, and the same step in 16 microbatches (one in
// flight on one GPU, under 8 GB) runs. This process holds the rest of the GPU meanwhile.
TEST(OutOfMemory, PpChecksStageMemoryBeforeItAllocates) {
  namespace fs = std::filesystem;
  const char* env = std::getenv("GPUBENCH_BINARY");
  const std::string bin = env && *env ? env : GPUBENCH_BINARY;
  const fs::path dir =
      fs::temp_directory_path() / ("gpubench_pp_oom_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::size_t free_b = 0, total_b = 0;
  {
    DeviceGuard guard(0);
    GPB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  }
  constexpr std::size_t kLeft = std::size_t{20} << 30;
  if (free_b < kLeft + (std::size_t{8} << 30)) GTEST_SKIP() << "GPU 0 has too little memory";
  DeviceBuffer held(0, free_b - kLeft);
  const std::string cmd = "timeout 300 " + bin +
                          " pp --pp 1 --gpus 0 --workload training --layers 4 --batch 64"
                          " --seq-len 1024 --microbatches 1,16 --quick --log-level warn"
                          " --output-dir " +
                          dir.string() + " > " + dir.string() + ".log 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  std::ifstream f(dir / "pp.json");
  ASSERT_TRUE(f.good()) << "exit " << WEXITSTATUS(status);
  const auto j = nlohmann::json::parse(f);
  EXPECT_NE(j["status"], "failed") << j.value("error", "");
  bool skipped_m1 = false, ok_m16 = false;
  for (const auto& c : j["results"]) {
    const std::string name = c.value("case", ""), st = c.value("status", "");
    if (name == "p1 m1") {
      skipped_m1 = st == "skipped";
      EXPECT_NE(c.value("note", "").find("does not fit in GPU memory"), std::string::npos)
          << c.dump();
    }
    if (name == "p1 m16") ok_m16 = st == "ok";
  }
  EXPECT_TRUE(skipped_m1) << j["results"].dump().substr(0, 800);
  EXPECT_TRUE(ok_m16) << j["results"].dump().substr(0, 800);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  fs::remove_all(dir);
  fs::remove(dir.string() + ".log");
}
