#pragma once
// Options of `gpubench allreduce` (long names = INI keys) and the settings resolved from them.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "allreduce.hpp"

namespace gpubench::allreduce {

struct Options {
  std::string collective = "all_reduce";  // list or "all"
  std::string type = "fp32";              // list or "all"
  std::string op = "sum";                 // list or "all"
  int root = 0;
  std::string min_bytes, max_bytes;  // defaults depend on --quick
  double step_factor = 2.0;
  std::string step_bytes;      // "" -> multiply by step_factor
  int agg_iters = 0;           // ops per timed iteration; 0: by size
  std::string place = "both";  // both | out | in
  int check = 1;               // verified runs per size
  bool cuda_graph = false;
  bool blocking = false;           // wait for each op before the next
  int split = 1;                   // groups running at once
  double timeout = 120;            // seconds before a hung collective is aborted
  bool allow_shared_gpus = false;  // MPI: more processes than GPUs on a node
};

struct Settings {
  std::vector<Collective> collectives;
  std::vector<DataType> types;
  std::vector<ReduceOp> ops;
  int root = 0;
  std::uint64_t min_bytes = 0, max_bytes = 0, step_bytes = 0;
  double step_factor = 2;
  int agg_iters = 0;
  bool out_of_place = true, in_place = true;
  int check = 1;
  bool cuda_graph = false, blocking = false;
  int split = 1;
  double timeout_s = 120;
  bool allow_shared_gpus = false;
  nlohmann::ordered_json to_json() const;
};

// Defaults (quick or full) applied and every value checked: InputError with one clear line.
Settings resolve_settings(const Options& o, bool quick);

// Ops per timed iteration for a message of `size` bytes: enough back-to-back ops that launch
// and event overheads are amortised at small sizes (as nccl-tests times 20 ops), one at large.
int agg_for(std::uint64_t size, int requested);

}  // namespace gpubench::allreduce
