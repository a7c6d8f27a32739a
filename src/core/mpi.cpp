// Launch detection and the MPI session behind the process-per-GPU model.
#include "gpubench/core/mpi.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "gpubench/core/errors.hpp"

#ifdef GPUBENCH_HAVE_MPI
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <array>
#include <thread>
#endif

namespace gpubench {

namespace {

ProcessInfo g_info;
#ifdef GPUBENCH_HAVE_MPI
MPI_Comm g_local = MPI_COMM_NULL;  // this node's processes
// any_process's own: a process that agrees while the others are still inside a module's
// collective on MPI_COMM_WORLD waits for them, never matching one of theirs.
MPI_Comm g_agree = MPI_COMM_NULL;
// Whether another thread (the watchdog's) may call MPI_Abort while the main thread is inside
// MPI: only where MPI provides MPI_THREAD_MULTIPLE.
bool g_thread_multiple = false;
std::thread::id g_main_thread;
#endif

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
  } else if (std::getenv("SLURM_STEP_NUM_TASKS")) {
    // srun's step; SLURM_NTASKS alone is the allocation's (a batch script or salloc shell
    // running gpubench directly: one process).
    p.launcher = "srun";
    p.size = env_int("SLURM_STEP_NUM_TASKS", 1);
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
  g_thread_multiple = provided >= MPI_THREAD_MULTIPLE;
  g_main_thread = std::this_thread::get_id();
  MPI_Comm_rank(MPI_COMM_WORLD, &info_.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &info_.size);
  if (info_.size <= 1) {  // each process would run alone on every GPU, all at once
    MPI_Finalize();
    initialised_ = false;
    throw InputError(fmt::format(
        "started by {} with {} processes, but MPI sees each as alone (an MPI built without "
        "this launcher's support, e.g. srun's PMI): launch with mpirun, or run one process",
        info_.launcher, detect_launch().size));
  }
  // Local rank from the shared-memory split: right on every launcher.
  MPI_Comm_dup(MPI_COMM_WORLD, &g_agree);
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, info_.rank, MPI_INFO_NULL, &g_local);
  MPI_Comm_rank(g_local, &info_.local_rank);
  MPI_Comm_size(g_local, &info_.local_size);
  const auto pid = static_cast<unsigned>(getpid());
  info_.node_pids.resize(static_cast<std::size_t>(info_.local_size));
  MPI_Allgather(&pid, 1, MPI_UNSIGNED, info_.node_pids.data(), 1, MPI_UNSIGNED, g_local);
  info_.mpi = true;
  g_info = info_;
  if (!g_thread_multiple && info_.rank == 0)
    spdlog::warn(
        "this MPI does not provide MPI_THREAD_MULTIPLE: a hung rank ends the job by exiting, "
        "not by MPI_Abort (the launcher then ends the other processes)");
#else
  throw InputError(fmt::format(
      "started by {} with {} processes, but this gpubench was built without MPI (install an MPI "
      "and rebuild, or run one process)",
      info_.launcher, info_.size));
#endif
}

MpiSession::~MpiSession() {
#ifdef GPUBENCH_HAVE_MPI
  if (g_local != MPI_COMM_NULL) MPI_Comm_free(&g_local);
  if (g_agree != MPI_COMM_NULL) MPI_Comm_free(&g_agree);
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

bool repeats(const std::vector<std::string>& ids) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::size_t j = i + 1; j < ids.size(); ++j)
      if (ids[i] == ids[j]) return true;
  return false;
}

namespace {

// Whether two of this node's processes drive one physical GPU: each gives its GPU's PCI bus id
// (processes may see different GPUs under one index: srun --gpus-per-task, CUDA_VISIBLE_DEVICES
// set per rank). Without an id to compare, more processes than selected GPUs share.
bool shared_on_node(int gpu, std::size_t selected) {
  const ProcessInfo& p = process_info();
#ifdef GPUBENCH_HAVE_MPI
  if (p.mpi && g_local != MPI_COMM_NULL) {
    constexpr int kLen = 32;
    std::array<char, kLen> mine{};
    if (cudaDeviceGetPCIBusId(mine.data(), kLen - 1, gpu) != cudaSuccess) mine.fill('\0');
    std::vector<char> all(static_cast<std::size_t>(kLen) * p.local_size);
    MPI_Allgather(mine.data(), kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, g_local);
    std::vector<std::string> ids;
    bool known = true;
    for (int r = 0; r < p.local_size; ++r) {
      ids.emplace_back(all.data() + static_cast<std::size_t>(r) * kLen);
      known = known && !ids.back().empty();
    }
    if (known) return repeats(ids);
  }
#endif
  (void)gpu;
  return p.local_size > static_cast<int>(selected);
}

}  // namespace

int process_gpu(const std::vector<int>& gpus, bool allow_shared, const std::string& remedy) {
  const ProcessInfo& p = process_info();
  if (gpus.empty()) throw InputError("no GPU selected");
  const int gpu = gpus[static_cast<std::size_t>(p.local_rank) % gpus.size()];
  if (shared_on_node(gpu, gpus.size()) && !allow_shared)
    throw InputError(fmt::format(
        "{} processes on this node but {} GPU(s) selected: one GPU per process{}", p.local_size,
        gpus.size(), remedy));
  return gpu;
}

bool any_process(bool value) {
#ifdef GPUBENCH_HAVE_MPI
  if (g_info.mpi) {
    int mine = value ? 1 : 0, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, g_agree);
    return any != 0;
  }
#endif
  return value;
}

void abort_job(int code) {
#ifdef GPUBENCH_HAVE_MPI
  if (g_info.mpi) {
    if (g_thread_multiple || std::this_thread::get_id() == g_main_thread)
      MPI_Abort(MPI_COMM_WORLD, code);
    // No MPI call is allowed here (nor a flush: the main thread may hold a stream's lock); exiting
    // without MPI_Finalize makes the launcher end the job (srun: with --kill-on-bad-exit).
    std::_Exit(code);
  }
#endif
  std::exit(code);
}

}  // namespace gpubench
