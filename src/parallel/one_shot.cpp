// The engine's small all-reduces through the one-shot kernel
// (kernels/one_shot.cuh), for ranks that are threads of one process, or processes of one host
// (buffers shared through CUDA IPC), with peer access between their GPUs.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <functional>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/peers.hpp"
#include "gpubench/parallel/collectives.hpp"

namespace gpubench::parallel {

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
    use_own_words(p);
    peers_.push_back(p);
  }
  for (int d : devices) {  // the zeroed words in place before any rank's kernel reads them
    DeviceGuard guard(d);
    GPB_CUDA_CHECK(cudaDeviceSynchronize());
  }
}

std::unique_ptr<OneShotGroup> OneShotGroup::over_ipc(RankGroup& group, int rank, int device,
                                                     std::size_t slot_bytes) {
  const int t = group.size();
  // Every rank decides alike: one host (the same host-name hash), distinct GPUs, peer access
  // from this rank's GPU to every other's.
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) name[0] = '\0';
  const auto host = static_cast<double>(std::hash<std::string>{}(name.data()) & 0xffffffffu);
  const std::vector<double> hosts = group.all_gather(rank, host);
  const std::vector<double> devs = group.all_gather(rank, device);
  bool ok = t > 1 && t <= kOneShotMaxRanks &&
            std::all_of(hosts.begin(), hosts.end(), [&](double h) { return h == hosts[0]; });
  std::vector<int> devices;
  for (double d : devs) devices.push_back(static_cast<int>(d));
  for (int j = 0; ok && j < t; ++j) {
    const int d = devices[static_cast<std::size_t>(j)];
    if (j == rank) continue;
    int can = 0;
    ok = d != device && cudaDeviceCanAccessPeer(&can, device, d) == cudaSuccess && can != 0;
  }
  (void)cudaGetLastError();  // a peer GPU this process cannot see is a "no", not an error
  if (group.any(rank, !ok)) return nullptr;

  std::unique_ptr<OneShotGroup> g(new OneShotGroup());
  g->devices_ = devices;
  g->slot_bytes_ = slot_bytes;
  g->recv_.emplace_back(device, one_shot_recv_bytes(t, slot_bytes));
  g->words_.emplace_back(device, one_shot_word_bytes(t));
  GPB_CUDA_CHECK(cudaMemset(g->words_.back().get(), 0, g->words_.back().bytes()));
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
  // Every rank's two handles to every rank; the peers' buffers mapped into this process. A rank
  // that cannot export or map them (IPC refused, as in some containers) must not leave the
  // others waiting: every rank says how it went, and any failure sends them all to NCCL.
  struct Handles {
    cudaIpcMemHandle_t recv, words;
  };
  std::vector<Handles> all(static_cast<std::size_t>(t));
  Handles& own = all[static_cast<std::size_t>(rank)];
  bool mapped = cudaIpcGetMemHandle(&own.recv, g->recv_.back().get()) == cudaSuccess &&
                cudaIpcGetMemHandle(&own.words, g->words_.back().get()) == cudaSuccess;
  for (int r = 0; r < t; ++r)
    group.broadcast(rank, &all[static_cast<std::size_t>(r)], sizeof(Handles), r);
  OneShotPeers p;
  p.rank = rank;
  p.size = t;
  p.slot_bytes = slot_bytes;
  for (int j = 0; j < t; ++j) {
    if (j == rank) {
      p.recv[j] = g->recv_.back().get();
      p.flags[j] = g->words_.back().as<unsigned int>();
      continue;
    }
    void* recv = nullptr;
    void* words = nullptr;
    const Handles& h = all[static_cast<std::size_t>(j)];
    if (mapped &&
        cudaIpcOpenMemHandle(&recv, h.recv, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess)
      g->opened_.push_back(recv);
    else
      mapped = false;
    if (mapped &&
        cudaIpcOpenMemHandle(&words, h.words, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess)
      g->opened_.push_back(words);
    else
      mapped = false;
    p.recv[j] = recv;
    p.flags[j] = static_cast<unsigned int*>(words);
  }
  (void)cudaGetLastError();
  if (group.any(rank, !mapped)) return nullptr;  // what was mapped is closed by the destructor
  use_own_words(p);
  g->peers_.assign(static_cast<std::size_t>(t), OneShotPeers{});
  g->peers_[static_cast<std::size_t>(rank)] = p;
  g->peers_ok_ = true;
  group.barrier();  // every rank's zeroed words mapped before any rank's kernel writes a flag
  return g;
}

OneShotGroup::~OneShotGroup() {
  for (void* p : opened_) (void)cudaIpcCloseMemHandle(p);
}

bool OneShotGroup::timed_out(int rank) const {
  if (!peers_ok_) return false;
  unsigned int e = 0;
  GPB_CUDA_CHECK(cudaMemcpy(&e, peers(rank).error, sizeof e, cudaMemcpyDeviceToHost));
  return e != 0;
}

OneShotCollectives::OneShotCollectives(const OneShotGroup& group, int rank,
                                       model::TpCollectives& fallback)
    : g_(group), rank_(rank), fallback_(fallback) {}

void OneShotCollectives::all_reduce(void* data, std::int64_t elems, ActDtype dtype,
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

void OneShotCollectives::reduce_scatter(void* data, std::int64_t chunk, ActDtype dtype,
                                        cudaStream_t stream) {
  ++fell_back_;
  fallback_.reduce_scatter(data, chunk, dtype, stream);
}

void OneShotCollectives::all_gather(void* data, std::int64_t chunk, ActDtype dtype,
                                    cudaStream_t stream) {
  ++fell_back_;
  fallback_.all_gather(data, chunk, dtype, stream);
}

}  // namespace gpubench::parallel
