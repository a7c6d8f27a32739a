#pragma once
// RankGroup: one rank per selected GPU, in either process model behind one interface: in one
// process a host thread per GPU, each with its own stream; or one process per GPU started by
// mpirun/srun (MPI carries barrier, gather and broadcast). Modules write their rank body once.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/measure.hpp"

namespace gpubench {

class Context;
class RankGroup;

// What a rank's body sees: its rank, its GPU, its stream and the group.
struct Rank {
  int rank = 0;
  int size = 1;
  int device = 0;
  Stream* stream = nullptr;
  RankGroup* group = nullptr;
};

class RankGroup {
 public:
  // One process: one rank per entry of `devices` (CUDA device indices), in that order.
  explicit RankGroup(std::vector<int> devices);
  // One process per GPU (an MpiSession is active): this process is rank MPI rank of MPI size,
  // on `device`.
  static std::unique_ptr<RankGroup> over_mpi(int device);
  // The first `ranks` MPI processes as a group of their own (1 <= ranks <= the MPI size; every
  // process must call it, it splits the communicator): this process's group, or null when this
  // process is not among them.
  static std::unique_ptr<RankGroup> over_mpi(int device, int ranks);
  ~RankGroup();
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;

  int size() const noexcept;
  // The devices driven by this process (all of them in one process, one under MPI).
  const std::vector<int>& devices() const noexcept;
  bool is_mpi() const noexcept;

  // Runs `body` on every rank at once (a thread each, its device current) and waits. An
  // exception on any rank is rethrown here (the first one, with its rank) after all ranks end;
  // ranks blocked in barrier() are released so nothing hangs.
  void run(const std::function<void(Rank&)>& body);

  // Blocks until every rank has arrived (host side; call from inside run()).
  void barrier();
  // Every rank contributes `value`; every rank gets all of them, in rank order.
  std::vector<double> all_gather(int rank, double value);
  // Whether `value` holds on any rank: every rank gives its own and gets the same answer.
  bool any(int rank, bool value);
  // Whether the run was asked to stop (SIGINT, SIGTERM), with one answer for the whole group,
  // for a loop between pieces of work: under MPI every process of the group must call it at
  // the same point (they agree, so none stops alone and leaves the others in a collective); in
  // one process it is called outside run(), where one thread decides for all.
  bool stop_requested();
  // Copies `bytes` at `data` of rank `root` into `data` of every rank (e.g. an NCCL unique id).
  void broadcast(int rank, void* data, std::size_t bytes, int root = 0);

  // Waits for `done` on this rank, as wait_for (TimeoutError past timeout_s > 0; none: no limit),
  // and in one process ends this rank as barrier() does as soon as another rank failed (its
  // device marked stuck while its stream has work queued: that work may wait for the failed
  // rank). Call from inside run().
  void wait(const Event& done, double timeout_s, const char* what);

  // In one process: ends this rank as barrier() does when another rank has failed (quietly,
  // its device marked stuck while its stream has work queued); otherwise, and under MPI,
  // nothing. For a rank's own host-side waits that barrier() and wait() do not cover (a spin
  // barrier between the group's threads). Call from inside run().
  void leave_if_aborted();

  // Waits for everything queued on `self`'s stream so far, ending this rank as wait() does when
  // another rank failed; no time limit (a stuck run is the watchdog's). Call from inside run().
  void sync(Rank& self);

  // Times `launch` on every rank: barrier before each iteration, per-iteration time = the max
  // over ranks of that rank's event time (or the one opts.rank_time names). Stopping rule as
  // Measurer::run, decided on rank 0's view of the combined samples. Call from inside run(); every
  // rank returns the same result.
  Measurement measure(Rank& self, const Launch& launch, const MeasureOptions& opts);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  RankGroup();
};

// The ranks a run has: its processes in a run over processes (Context::over_processes), else its
// selected GPUs.
int rank_count(const Context& ctx);

// The first n ranks of the run: in one process the first n selected GPUs, in a run over
// processes (Context::over_processes) the first n processes, each on its process_gpu (every
// process must call it; null on the others). InputError naming `option` when there are fewer than n
// GPUs (or processes).
std::unique_ptr<RankGroup> leading_ranks(Context& ctx, int n, const std::string& option);

}  // namespace gpubench
