#pragma once
// Measured rows of `gpubench allreduce` and how they become the report: one table per
// collective in nccl-tests' columns, the busbw-vs-size curves, the fits and the headline.
#include <cstdint>
#include <string>
#include <vector>

#include "gpubench/core/result.hpp"
#include "gpubench/core/stats.hpp"
#include "gpubench/modules/allreduce/allreduce.hpp"

namespace gpubench::allreduce {

// One placement (out-of-place or in-place) of one size.
struct PlaceResult {
  bool measured = false;
  Stats per_op;  // seconds per op (iteration time / ops per iteration, max over ranks)
  int agg = 1;   // ops per iteration
  std::string stop_reason;
  bool converged = true;
  std::uint64_t wrong = 0;  // wrong elements over every rank and check run
  bool checked = false;     // false: --check 0, the figure is not verified
  bool not_run = false;     // a placement whose output is undefined (alltoall in place)
  // Checked and right: only such a figure feeds curves, fits, knees and the headline.
  bool verified() const noexcept { return measured && checked && wrong == 0; }
};

struct Row {
  const Collective* collective = nullptr;
  std::string type, op;
  int type_bytes = 0;
  int root = -1;           // -1: not rooted
  std::uint64_t size = 0;  // nccl-tests "size", bytes
  std::size_t count = 0;
  PlaceResult out_of_place, in_place;
  bool sweep_end = false;  // the sweep's largest size: its curve ran to the end
  std::string timestamp;   // -S: when the row finished (UTC, ISO 8601), else empty
  int cycle = 0;           // -N: which sweep (from 1), 0 when there is one
};

// Everything the report needs besides the rows.
struct RunFacts {
  int nranks = 0;             // ranks in one communicator
  int groups = 1;             // --split
  double link_peak_GBps = 0;  // per GPU and direction (NVLink links x rate, else PCIe), 0 unknown
  std::string link_name;      // "NVLink x18", "PCIe", ...
  bool all_roots = false;     // -r all: a curve per root of the rooted collectives
};

// Fills tables, sweeps, the comparison, headline keys and the failure status into `r`.
void build_report(Report& r, const std::vector<Row>& rows, const RunFacts& facts);

}  // namespace gpubench::allreduce
