// dp under mpirun, a process per GPU: every strategy's checked step, with one GPU's reference made
// in rank 0's process and broadcast to the others. On 2 and 4 GPUs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "gpubench/core/cuda.hpp"
#include "mpi_run.hpp"

namespace {

// gpubench dp under `mpirun -np np` (llama-2-7b's shapes, 2 layers, short sequences).
nlohmann::json run_dp_mpi(int np, std::string& why) {
  return gpubench::testing::run_under_mpirun(
      np,
      "dp --gpu-counts " + std::to_string(np) +
          " --layers 2 --seq-len 256 --batch-sizes 2 --bucket-size 40MB --quick --no-files"
          " --log-level warn",
      why);
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
