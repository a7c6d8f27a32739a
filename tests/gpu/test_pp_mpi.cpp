// pp under mpirun, a process per GPU: inference and the parallel layouts check every stage's and
// replica's logits against the whole model's, which is made in rank 0's process and shared with
// the others (before, every other process read a reference it did not have). On 2 and 4 GPUs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "gpubench/core/cuda.hpp"
#include "mpi_run.hpp"

namespace {

// gpubench pp under `mpirun -np np` (inference and layouts, 4 layers).
nlohmann::json run_pp_mpi(int np, std::string& why) {
  return gpubench::testing::run_under_mpirun(
      np,
      "pp --pp " + std::to_string(np) +
          " --layers 4 --batch 4 --seq-len 128 --microbatches 1,2 --workload inference"
          " --layouts all --layout-batches 4 --quick --no-files --log-level warn",
      why);
}

}  // namespace

TEST(PpMpi, InferenceAndLayoutsAreCheckedOnEveryRank) {
  if (gpubench::visible_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  for (int np : {2, 4}) {
    if (np > gpubench::visible_device_count()) continue;
    SCOPED_TRACE("mpirun -np " + std::to_string(np));
    std::string why;
    const auto j = run_pp_mpi(np, why);
    ASSERT_FALSE(j.is_null()) << why;
    EXPECT_EQ(j["status"], "ok") << j.value("error", "");
    int checked = 0;
    for (const auto& c : j["results"]) {
      EXPECT_EQ(c.value("status", ""), "ok") << c.dump().substr(0, 300);
      for (const auto& [k, v] : c["metrics"].items())
        if (k == "check_error" && v.is_object()) {
          EXPECT_LE(v.value("value", 1.0), 0.05) << c.value("case", "");
          ++checked;
        }
    }
    EXPECT_GE(checked, 2);  // pipeline inference rows and layouts, each checked
  }
}
