// How gpubench reads its launch from the launchers' environment: mpirun's and srun's process
// counts and ranks, and a batch script's allocation (SLURM_NTASKS alone) taken as one process;
// the node's GPUs compared by id when processes may each see their own.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "gpubench/core/mpi.hpp"

using namespace gpubench;

namespace {

// Sets the given variables for the test and clears every launcher variable around it.
class LaunchEnv {
 public:
  explicit LaunchEnv(const std::vector<std::pair<const char*, const char*>>& vars) {
    clear();
    for (const auto& [k, v] : vars) setenv(k, v, 1);
  }
  ~LaunchEnv() { clear(); }

 private:
  static void clear() {
    for (const char* k :
         {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
          "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_PROCID",
          "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "PMI_SIZE",
          "PMI_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"})
      unsetenv(k);
  }
};

}  // namespace

TEST(Launch, MpirunAndSrunStepsAreSeveralProcesses) {
  {
    LaunchEnv e({{"OMPI_COMM_WORLD_SIZE", "4"},
                 {"OMPI_COMM_WORLD_RANK", "3"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
    const ProcessInfo p = detect_launch();
    EXPECT_EQ(p.launcher, "mpirun");
    EXPECT_EQ(p.size, 4);
    EXPECT_EQ(p.rank, 3);
    EXPECT_EQ(p.local_rank, 1);
    EXPECT_EQ(p.local_size, 2);
  }
  {
    LaunchEnv e({{"SLURM_STEP_NUM_TASKS", "2"},
                 {"SLURM_NTASKS", "2"},
                 {"SLURM_PROCID", "1"},
                 {"SLURM_LOCALID", "1"}});
    const ProcessInfo p = detect_launch();
    EXPECT_EQ(p.launcher, "srun");
    EXPECT_EQ(p.size, 2);
    EXPECT_EQ(p.rank, 1);
  }
}

// A batch script or salloc shell has the allocation's task count but no step: gpubench run there
// directly is one process, not one rank of a job whose other ranks never come.
TEST(Launch, AnAllocationWithoutAStepIsOneProcess) {
  LaunchEnv e({{"SLURM_NTASKS", "8"}, {"SLURM_NTASKS_PER_NODE", "8"}});
  const ProcessInfo p = detect_launch();
  EXPECT_EQ(p.size, 1);
  EXPECT_EQ(p.launcher, "");
  EXPECT_FALSE(p.mpi);
}

TEST(Launch, OneProcessWithoutALauncher) {
  LaunchEnv e({});
  EXPECT_EQ(detect_launch().size, 1);
}

TEST(Launch, GpusAreSharedOnlyWhenAnIdRepeats) {
  EXPECT_FALSE(repeats({}));
  EXPECT_FALSE(repeats({"0000:18:00.0", "0000:2A:00.0", "0000:3A:00.0"}));
  EXPECT_TRUE(repeats({"0000:18:00.0", "0000:2A:00.0", "0000:18:00.0"}));
}
