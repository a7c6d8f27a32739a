// The core's runner: whether a run takes one rank per process. A module runs over processes only
// when it supports them and its caller's run is one over processes: a module that `gpubench all`
// runs on rank 0 alone under mpirun (advise) runs there alone, and so does what it nests (dp).
// And the devices a run marked stuck are unmarked when it ends.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "gpubench/core/context.hpp"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/module.hpp"
#include "gpubench/core/options.hpp"
#include "gpubench/core/ranks.hpp"
#include "gpubench/core/runner.hpp"
#include "gpubench/core/system.hpp"

using namespace gpubench;

namespace {

// Records what its run was given; needs no GPU.
class Probe final : public Module {
 public:
  explicit Probe(bool mpi) : mpi_(mpi) {}
  std::string name() const override { return "probe"; }
  std::string help() const override { return "records its context"; }
  void add_options(CLI::App&) override {}
  nlohmann::ordered_json config(bool) const override { return nlohmann::ordered_json::object(); }
  bool needs_gpu() const override { return false; }
  bool supports_mpi() const override { return mpi_; }
  std::optional<std::string> unsupported(const System&, const std::vector<int>&) const override {
    return std::nullopt;
  }
  Report run(Context& ctx) override {
    over = ctx.over_processes();
    ranks = rank_count(ctx);
    if (stuck_device >= 0) {  // as wait_for does when GPU work outlives --timeout
      mark_device_stuck(stuck_device);
      marked = device_stuck(stuck_device) && !device_stuck(stuck_device + 1) && any_device_stuck();
      throw TimeoutError("the measured GPU work did not finish within --timeout 1 s");
    }
    return Report{};
  }
  std::optional<bool> over;
  int ranks = -1;
  int stuck_device = -1;
  bool marked = false;

 private:
  bool mpi_;
};

}  // namespace

TEST(Runner, OneProcessRunsAreNotOverProcesses) {
  const System system;
  Probe probe(true);
  (void)run_module(probe, CommonOptions{}, system, "r", {});
  ASSERT_TRUE(probe.over.has_value());
  EXPECT_FALSE(*probe.over);  // no mpirun: one process
  EXPECT_EQ(probe.ranks, 0);  // its selected GPUs: none here
}

// A run that timed out marks its device stuck (its buffers are left allocated rather than freed
// under the stuck work); the marks end with the run, so the next run frees again.
TEST(Runner, StuckDeviceMarksEndWithTheRun) {
  const System system;
  Probe probe(false);
  probe.stuck_device = 1;
  const Report r = run_module(probe, CommonOptions{}, system, "r", {});
  EXPECT_EQ(r.status, "failed");
  EXPECT_TRUE(probe.marked);
  EXPECT_FALSE(any_device_stuck());
}

TEST(Runner, NestedRunsInheritTheParentsProcessModel) {
  const System system;
  Context parent(system, {0, 1, 2, 3}, CommonOptions{});
  EXPECT_FALSE(parent.over_processes());
  EXPECT_EQ(rank_count(parent), 4);  // in one process: the selected GPUs
  for (const bool parent_over : {false, true})
    for (const bool supports : {false, true}) {
      parent.set_over_processes(parent_over);
      Probe probe(supports);
      (void)run_nested(probe, parent);
      ASSERT_TRUE(probe.over.has_value());
      EXPECT_EQ(*probe.over, parent_over && supports) << parent_over << supports;
    }
}
