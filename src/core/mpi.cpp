// Launch detection and the MPI session behind the process-per-GPU model.
#include "gpubench/core/mpi.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "gpubench/core/errors.hpp"

#ifdef GPUBENCH_HAVE_MPI
#include <mpi.h>
#include <unistd.h>
#endif

namespace gpubench {

namespace {

ProcessInfo g_info;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  try {
    return std::stoi(v);
  } catch (...) {
    return fallback;
  }
}

}  // namespace

ProcessInfo detect_launch() {
  ProcessInfo p;
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) {
    p.launcher = "mpirun";
    p.size = env_int("OMPI_COMM_WORLD_SIZE", 1);
    p.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    p.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    p.local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  } else if (std::getenv("SLURM_STEP_NUM_TASKS") || std::getenv("SLURM_NTASKS")) {
    p.launcher = "srun";
    p.size = env_int("SLURM_STEP_NUM_TASKS", env_int("SLURM_NTASKS", 1));
    p.rank = env_int("SLURM_PROCID", 0);
    p.local_rank = env_int("SLURM_LOCALID", 0);
    p.local_size = env_int("SLURM_STEP_TASKS_PER_NODE", env_int("SLURM_NTASKS_PER_NODE", p.size));
  } else if (std::getenv("PMI_SIZE")) {
    p.launcher = "mpirun";
    p.size = env_int("PMI_SIZE", 1);
    p.rank = env_int("PMI_RANK", 0);
    p.local_rank = env_int("MPI_LOCALRANKID", 0);
    p.local_size = env_int("MPI_LOCALNRANKS", 1);
  }
  if (p.size <= 1) return ProcessInfo{};
  return p;
}

MpiSession::MpiSession() : info_(detect_launch()) {
  if (info_.size <= 1) {
    info_ = ProcessInfo{};
    return;
  }
#ifdef GPUBENCH_HAVE_MPI
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  initialised_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &info_.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &info_.size);
  // Local rank from the shared-memory split: right on every launcher.
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, info_.rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &info_.local_rank);
  MPI_Comm_size(local, &info_.local_size);
  const auto pid = static_cast<unsigned>(getpid());
  info_.node_pids.resize(static_cast<std::size_t>(info_.local_size));
  MPI_Allgather(&pid, 1, MPI_UNSIGNED, info_.node_pids.data(), 1, MPI_UNSIGNED, local);
  MPI_Comm_free(&local);
  info_.mpi = true;
  g_info = info_;
#else
  throw InputError(fmt::format(
      "started by {} with {} processes, but this gpubench was built without MPI (install an MPI "
      "and rebuild, or run one process)",
      info_.launcher, info_.size));
#endif
}

MpiSession::~MpiSession() {
#ifdef GPUBENCH_HAVE_MPI
  if (initialised_) MPI_Finalize();
#endif
  g_info = ProcessInfo{};
}

const ProcessInfo& process_info() {
  return g_info;
}

int rank_count(const std::vector<int>& gpus) {
  const ProcessInfo& p = process_info();
  return p.mpi ? p.size : static_cast<int>(gpus.size());
}

int process_gpu(const std::vector<int>& gpus, bool allow_shared, const std::string& remedy) {
  const ProcessInfo& p = process_info();
  if (gpus.empty()) throw InputError("no GPU selected");
  if (p.local_size > static_cast<int>(gpus.size()) && !allow_shared)
    throw InputError(fmt::format(
        "{} processes on this node but {} GPU(s) selected: one GPU per process{}", p.local_size,
        gpus.size(), remedy));
  return gpus[static_cast<std::size_t>(p.local_rank) % gpus.size()];
}

bool any_process(bool value) {
#ifdef GPUBENCH_HAVE_MPI
  if (g_info.mpi) {
    int mine = value ? 1 : 0, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any != 0;
  }
#endif
  return value;
}

void abort_job(int code) {
#ifdef GPUBENCH_HAVE_MPI
  if (g_info.mpi) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::exit(code);
}

}  // namespace gpubench
