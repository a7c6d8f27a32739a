#pragma once
// Options of `gpubench allreduce` (long names = INI keys) and the settings resolved from them.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpubench/modules/allreduce/allreduce.hpp"

namespace gpubench::allreduce {

struct Options {
  std::string collective = "all_reduce";  // list or "all"
  std::string type = "fp32";              // list or "all"
  std::string op = "sum";                 // list or "all"
  std::string root = "0";  // a rank, or "all" (nccl-tests' -r -1): every rank in turn
  double skew = 1;  // alltoallv's uneven split (nccl-tests' NCCL_TESTS_ALLTOALLV_SPREAD)
  std::string min_bytes, max_bytes;  // defaults depend on --quick
  double step_factor = 2.0;
  std::string step_bytes;      // "" -> multiply by step_factor
  int agg_iters = 0;           // ops per timed iteration; 0: by size
  std::string place = "both";  // both | out | in
  int check = 1;               // verified runs per size
  bool cuda_graph = false;
  int split = 1;                   // groups running at once
  double timeout = 120;            // seconds before a hung collective is aborted
  bool allow_shared_gpus = false;  // MPI: more processes than GPUs on a node
  std::string impl = "nccl";       // nccl | one-shot
  // nccl-tests' flags, each with its meaning (-1: not given). See nccl_flags() in settings.cpp.
  int nthreads = -1, ngpus = -1;            // -t, -g: t x g GPUs in this process
  int iters = -1, warmup_iters = -1;        // -n, -w: timed and untimed iterations per size
  int run_cycles = -1, parallel_init = -1;  // -N, -p
  int blocking_mode = -1;                   // -z 0..3
  int stream_null = -1, cudagraph = -1;     // -y, -G N
  int report_cputime = -1, report_timestamps = -1, average = -1;            // -C, -S, -a
  int local_register = -1, cta_policy = -1;                                 // -R, -x
  int device_implementation = -1, device_cta_count = -1;                    // -D, -V
  int memory = -1, unalign = -1, per_iter_timing = -1, per_iter_skip = -1;  // -M -u -I -K
};

struct Settings {
  std::vector<Collective> collectives;
  std::vector<DataType> types;
  std::vector<ReduceOp> ops;
  int root = 0;
  bool all_roots = false;  // -r all / -r -1
  std::uint64_t min_bytes = 0, max_bytes = 0, step_bytes = 0;
  double step_factor = 2;
  int agg_iters = 0;
  bool out_of_place = true, in_place = true;
  int check = 1;
  bool cuda_graph = false, blocking = false;
  int split = 1;
  double timeout_s = 120;
  bool allow_shared_gpus = false;
  bool barrier_each_op = false;    // -z 1: wait and barrier after each op
  int gpus_per_process = 0;        // -t x -g: the first this many selected GPUs (0: all)
  int iters = 0, warmup = -1;      // -n, -w (and -K): 0 / -1 the run's stopping rule
  int registration = 0;            // -R: 0 none, 1 ncclCommRegister, 2 symmetric windows
  int cta_policy = -1;             // -x: ncclConfig_t::CTAPolicy (-1: NCCL's choice)
  int unalign = 0;                 // -u: buffers start this many elements past an alignment
  int rank_time = 3;               // -a: 0 rank 0's time, 1 mean, 2 fastest, 3 slowest rank's
  int cycles = 1;                  // -N: sweeps, each its own curves (0: until stopped)
  bool timestamps = false;         // -S: each row's finishing time
  bool memory_report = false;      // -M: device memory used by NCCL, the buffers, the run
  bool one_shot = false;           // --impl one-shot: all_reduce through the one-shot kernel
  std::vector<std::string> notes;  // nccl-tests flags taken with another meaning, and why
  nlohmann::ordered_json to_json() const;
};

// Defaults (quick or full) applied and every value checked: InputError with one clear line.
// nccl-tests' flags are taken with their meaning where gpubench has it; one that gpubench does
// not do (yet) is refused naming the flag, one that does not apply is a note.
Settings resolve_settings(const Options& o, bool quick);

// --impl one-shot: messages up to this size (larger ones are left out of the sweep).
inline constexpr std::uint64_t kOneShotMaxBytes = 4ull << 20;

// Ops per timed iteration for a message of `size` bytes: enough back-to-back ops that launch
// and event overheads are amortised at small sizes (as nccl-tests times 20 ops), one at large.
int agg_for(std::uint64_t size, int requested);

}  // namespace gpubench::allreduce
