#pragma once
// The process model: one process driving every selected GPU (a thread each), or one process per
// GPU started by mpirun/srun. Launch detection reads the launchers' environment variables;
// MPI itself is used only when gpubench was built with it.
#include <string>
#include <vector>

namespace gpubench {

struct ProcessInfo {
  bool mpi = false;  // started by mpirun/srun with more than one process, MPI initialised
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // among the processes of this node
  std::string launcher;                // "mpirun", "srun" or "" (one process)
  // Under MPI: the process ids of the job's processes on this node (health checks do not count
  // them as other processes sharing a GPU); empty in one process.
  std::vector<unsigned> node_pids;
};

// The launcher's view from the environment (OMPI_COMM_WORLD_*, PMI_*, SLURM_*), before MPI_Init.
ProcessInfo detect_launch();

// Initialises MPI when detect_launch() says several processes were started (and the build has
// MPI; otherwise throws InputError saying so), finalises it on destruction. One per process, made
// by the harness only where a run needs MPI (cli.cpp: a process-per-GPU subcommand on a machine
// with GPUs), so every other run ends each process on its own.
class MpiSession {
 public:
  MpiSession();
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  const ProcessInfo& info() const noexcept { return info_; }

 private:
  ProcessInfo info_;
  bool initialised_ = false;
};

// The current process model (one process unless an MpiSession set it up; detect_launch() says
// how many were started before that).
const ProcessInfo& process_info();

// The ranks a run can have: the MPI processes under mpirun/srun, else the selected GPUs.
int rank_count(const std::vector<int>& gpus);

// Under mpirun/srun: this process's GPU among the selected `gpus` (its node-local rank modulo
// their count); every process of the job must call it at the same point (the node's processes
// compare their GPUs' PCI bus ids). InputError when none is selected, or when two processes of
// the node would drive one GPU (a process may see a GPU of its own: srun --gpus-per-task=1) and
// `allow_shared` is false: "N processes on this node but M GPU(s) selected: one GPU per process"
// followed by `remedy` (e.g. " (or --allow-shared-gpus)").
int process_gpu(const std::vector<int>& gpus, bool allow_shared, const std::string& remedy = "");
// Whether any id appears twice.
bool repeats(const std::vector<std::string>& ids);

// Whether `value` holds in any process of the job (every process must call it at the same
// point); `value` itself in one process.
bool any_process(bool value);

// Ends every process of an MPI job at once (MPI_Abort; from a thread other than the main one,
// where MPI lacks MPI_THREAD_MULTIPLE, by exiting, which mpirun, and srun with
// --kill-on-bad-exit, answer by ending the others), so a failing rank never leaves the others
// waiting; in one process, std::exit.
[[noreturn]] void abort_job(int code);

}  // namespace gpubench
