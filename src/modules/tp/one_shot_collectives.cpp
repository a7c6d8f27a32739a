// The tensor-parallel engine's small all-reduces through the one-shot kernel
// (kernels/one_shot.cuh), for ranks that are threads of one process with peer access between
// their GPUs.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/mpi.hpp"
#include "gpubench/core/peers.hpp"
#include "tp.hpp"

namespace gpubench::tp {

OneShotGroup::OneShotGroup(const std::vector<int>& devices, std::size_t slot_bytes)
    : devices_(devices), slot_bytes_(slot_bytes) {
  const int t = size();
  peers_ok_ = t > 1 && t <= kOneShotMaxRanks && PeerAccess(devices).all();
  if (!peers_ok_) return;  // every all-reduce goes to the fallback
  for (int d : devices) {
    recv_.emplace_back(d, one_shot_recv_bytes(t, slot_bytes));
    words_.emplace_back(d, one_shot_word_bytes(t));
    DeviceGuard guard(d);
    GPB_CUDA_CHECK(cudaMemset(words_.back().get(), 0, words_.back().bytes()));
  }
  for (int r = 0; r < t; ++r) {
    OneShotPeers p;
    p.rank = r;
    p.size = t;
    p.slot_bytes = slot_bytes;
    for (int j = 0; j < t; ++j) {
      p.recv[j] = recv_[static_cast<std::size_t>(j)].get();
      p.flags[j] = words_[static_cast<std::size_t>(j)].as<unsigned int>();
    }
    unsigned int* mine = words_[static_cast<std::size_t>(r)].as<unsigned int>();
    p.counter = mine + one_shot_counter_index(t);
    p.error = mine + one_shot_error_index(t);
    peers_.push_back(p);
  }
  for (int d : devices) {  // the zeroed words in place before any rank's kernel reads them
    DeviceGuard guard(d);
    GPB_CUDA_CHECK(cudaDeviceSynchronize());
  }
}

bool OneShotGroup::timed_out(int rank) const {
  if (!peers_ok_) return false;
  unsigned int e = 0;
  GPB_CUDA_CHECK(cudaMemcpy(&e, peers(rank).error, sizeof e, cudaMemcpyDeviceToHost));
  return e != 0;
}

OneShotTpCollectives::OneShotTpCollectives(const OneShotGroup& group, int rank,
                                           model::TpCollectives& fallback)
    : g_(group), rank_(rank), fallback_(fallback) {}

void OneShotTpCollectives::all_reduce(void* data, std::int64_t elems, ActDtype dtype,
                                      cudaStream_t stream) {
  const std::size_t bytes = static_cast<std::size_t>(elems) * act_bytes(dtype);
  if (!g_.peers_ok() || bytes > g_.slot_bytes()) {
    ++fell_back_;
    fallback_.all_reduce(data, elems, dtype, stream);
    return;
  }
  ++one_shot_;
  one_shot_all_reduce(data, elems, g_.peers(rank_), dtype, stream);
}

void OneShotTpCollectives::reduce_scatter(void* data, std::int64_t chunk, ActDtype dtype,
                                          cudaStream_t stream) {
  ++fell_back_;
  fallback_.reduce_scatter(data, chunk, dtype, stream);
}

void OneShotTpCollectives::all_gather(void* data, std::int64_t chunk, ActDtype dtype,
                                      cudaStream_t stream) {
  ++fell_back_;
  fallback_.all_gather(data, chunk, dtype, stream);
}

std::unique_ptr<OneShotGroup> one_shot_group(const Settings& s, int t, RankGroup& group) {
  if (t < 2 || s.small_collectives == "nccl") return nullptr;
  // Asked for by name, a fallback to NCCL is a warning; under "auto" it is the expected path.
  const auto level =
      s.small_collectives == "one-shot" ? spdlog::level::warn : spdlog::level::info;
  if (group.is_mpi()) {
    if (process_info().rank == 0)
      spdlog::log(level,
                  "tp: one-shot small all-reduces need the ranks in one process; under {} they "
                  "run over NCCL",
                  process_info().launcher);
    return nullptr;
  }
  if (t > kOneShotMaxRanks) {
    spdlog::log(level, "tp: one-shot small all-reduces take at most {} ranks; TP={} runs over NCCL",
                kOneShotMaxRanks, t);
    return nullptr;
  }
  auto shots = std::make_unique<OneShotGroup>(group.devices(), OneShotTpCollectives::kMaxBytes);
  if (shots->peers_ok()) return shots;
  spdlog::log(level,
              "tp: GPUs {} lack peer access between some pair; the small all-reduces run over "
              "NCCL",
              fmt::join(group.devices(), ","));
  return nullptr;
}

}  // namespace gpubench::tp
