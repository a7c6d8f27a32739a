// The collective groups a tp run's settings ask for (the collectives themselves are the parallel
// layer's): copy engines under --collectives copy-engine, the one-shot kernel for small
// all-reduces, or none (NCCL alone) with the reason on the log.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "gpubench/core/mpi.hpp"
#include "gpubench/modules/tp/tp.hpp"

namespace gpubench::tp {

std::unique_ptr<parallel::CopyEngineGroup> copy_engine_group(const Settings& s, int t,
                                                             RankGroup& group,
                                                             std::size_t max_chunk_bytes) {
  if (t < 2 || s.collectives != "copy-engine") return nullptr;
  if (group.is_mpi()) {
    if (process_info().rank == 0)
      spdlog::warn(
          "tp: --collectives copy-engine needs the ranks in one process; under {} it "
          "runs over NCCL",
          process_info().launcher);
    return nullptr;
  }
  auto copies =
      std::make_unique<parallel::CopyEngineGroup>(group.devices(), max_chunk_bytes, &group);
  if (copies->peers_ok()) return copies;
  spdlog::warn(
      "tp: GPUs {} lack peer access between some pair; --collectives copy-engine runs "
      "over NCCL",
      fmt::join(group.devices(), ","));
  return nullptr;
}

std::unique_ptr<parallel::OneShotGroup> one_shot_group(const Settings& s, int t, RankGroup& group) {
  if (t < 2 || s.small_collectives == "nccl") return nullptr;
  // Asked for by name, a fallback to NCCL is a warning; under "auto" it is the expected path.
  const auto level = s.small_collectives == "one-shot" ? spdlog::level::warn : spdlog::level::info;
  if (group.is_mpi()) return nullptr;  // each rank sets up its part in the run (over_ipc)
  if (t > kOneShotMaxRanks) {
    spdlog::log(level, "tp: one-shot small all-reduces take at most {} ranks; TP={} runs over NCCL",
                kOneShotMaxRanks, t);
    return nullptr;
  }
  auto shots = std::make_unique<parallel::OneShotGroup>(group.devices(),
                                                        parallel::OneShotCollectives::kMaxBytes);
  if (shots->peers_ok()) return shots;
  spdlog::log(level,
              "tp: GPUs {} lack peer access between some pair; the small all-reduces run over "
              "NCCL",
              fmt::join(group.devices(), ","));
  return nullptr;
}

}  // namespace gpubench::tp
