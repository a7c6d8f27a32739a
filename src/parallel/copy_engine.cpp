// The engine's collectives through the copy engines, for ranks that are threads
// of one process with peer access between their GPUs.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/mpi.hpp"
#include "gpubench/core/peers.hpp"
#include "gpubench/kernels/transformer.cuh"
#include "gpubench/parallel/collectives.hpp"

namespace gpubench::parallel {

namespace {

constexpr std::int64_t kAlignElems = 8;  // 16-byte chunks for the summing kernel's wide loads

// Elements of chunk j when `elems` are cut in chunks of `chunk`.
std::int64_t chunk_elems(std::int64_t elems, std::int64_t chunk, int j) {
  return std::clamp<std::int64_t>(elems - j * chunk, 0, chunk);
}

}  // namespace

CopyEngineGroup::CopyEngineGroup(const std::vector<int>& devices, std::size_t max_chunk_bytes,
                                 RankGroup* ranks)
    : devices_(devices), ranks_(ranks), max_chunk_bytes_(max_chunk_bytes) {
  peers_ok_ = devices.size() > 1 && PeerAccess(devices).all();
  if (!peers_ok_) return;  // every collective goes to the fallback
  const std::size_t slots = devices.size() - 1;
  for (int d : devices) {
    staging_.emplace_back(d, slots * max_chunk_bytes);
    arrived_.emplace_back(d, false);
    sent_.emplace_back(d, false);
  }
  data_.assign(devices.size(), nullptr);
}

void CopyEngineGroup::barrier() {
  const unsigned gen = generation_.load(std::memory_order_acquire);
  if (waiting_.fetch_add(1, std::memory_order_acq_rel) + 1 == size()) {
    waiting_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (unsigned spins = 1; generation_.load(std::memory_order_acquire) == gen; ++spins) {
    if (spins % 4096 == 0) {
      if (ranks_) ranks_->leave_if_aborted();
      if (std::chrono::steady_clock::now() > deadline)
        throw GpuError("copy-engine collective: a rank did not arrive within 60 s");
      std::this_thread::yield();
    }
  }
}

CopyEngineCollectives::CopyEngineCollectives(CopyEngineGroup& group, int rank,
                                             model::TpCollectives& fallback, std::size_t min_bytes)
    : g_(group), rank_(rank), fallback_(fallback), min_bytes_(min_bytes) {
  if (!g_.peers_ok()) return;
  const int device = g_.devices_[static_cast<std::size_t>(rank)];
  forked_ = Event(device, false);
  for (int p = 0; p + 1 < g_.size(); ++p) {
    lanes_.emplace_back(device, true);
    landed_.emplace_back(device, false);
  }
}

std::vector<cudaStream_t> CopyEngineCollectives::lanes() const {
  std::vector<cudaStream_t> out;
  for (const Stream& l : lanes_) out.push_back(l.get());
  return out;
}

void CopyEngineCollectives::copy_to_peers(const std::vector<Copy>& copies, cudaStream_t stream) {
  // One lane per copy, so the copy engines move to every peer at once; `stream` goes on when
  // all have landed.
  forked_.record(stream);
  for (std::size_t i = 0; i < copies.size(); ++i) {
    cudaStream_t lane = lanes_[i].get();
    GPB_CUDA_CHECK(cudaStreamWaitEvent(lane, forked_.get(), 0));
    GPB_CUDA_CHECK(cudaMemcpyAsync(copies[i].dst, copies[i].src, copies[i].bytes,
                                   cudaMemcpyDeviceToDevice, lane));
    landed_[i].record(lane);
  }
  for (std::size_t i = 0; i < copies.size(); ++i)
    GPB_CUDA_CHECK(cudaStreamWaitEvent(stream, landed_[i].get(), 0));
}

bool CopyEngineCollectives::use_fallback(std::size_t chunk_bytes, std::size_t total_bytes,
                                         cudaStream_t stream) {
  // The same answer on every rank: the sizes, the capture (all ranks capture the same step)
  // and the group are the same everywhere.
  const bool fall = !g_.peers_ok() || stream_capturing(stream) || total_bytes < min_bytes_ ||
                    chunk_bytes > g_.max_chunk_bytes_;
  (fall ? fell_back_ : copied_) += 1;
  return fall;
}

void CopyEngineCollectives::exchange(std::vector<Event>& events, cudaStream_t stream,
                                     void* publish) {
  events[static_cast<std::size_t>(rank_)].record(stream);
  if (publish) g_.data_[static_cast<std::size_t>(rank_)] = publish;
  g_.barrier();
  for (int p = 0; p < g_.size(); ++p)
    if (p != rank_)
      GPB_CUDA_CHECK(cudaStreamWaitEvent(stream, events[static_cast<std::size_t>(p)].get(), 0));
}

void CopyEngineCollectives::scatter_and_sum(void* data, std::int64_t chunk, std::int64_t elems,
                                            ActDtype dtype, cudaStream_t stream) {
  const std::int64_t e = act_bytes(dtype);
  auto* mine = static_cast<unsigned char*>(data);
  // Every stream has reached the collective (the staging is free, `data` is ready), and every
  // rank's buffer is known (for the all-gather that may follow).
  exchange(g_.arrived_, stream, data);
  std::vector<Copy> copies;
  for (int p = 0; p < g_.size(); ++p) {
    const std::int64_t n = chunk_elems(elems, chunk, p);
    if (p == rank_ || n == 0) continue;
    const int slot = rank_ < p ? rank_ : rank_ - 1;  // p's slots: every other rank in order
    copies.push_back(
        {g_.staging_[static_cast<std::size_t>(p)].as<unsigned char>() + slot * chunk * e,
         mine + p * chunk * e, static_cast<std::size_t>(n * e)});
  }
  copy_to_peers(copies, stream);
  exchange(g_.sent_, stream, nullptr);
  sum_slots(mine + rank_ * chunk * e, g_.staging_[static_cast<std::size_t>(rank_)].get(),
            g_.size() - 1, chunk, chunk_elems(elems, chunk, rank_), dtype, stream);
}

void CopyEngineCollectives::gather(void* data, std::int64_t chunk, std::int64_t elems,
                                   ActDtype dtype, cudaStream_t stream) {
  const std::int64_t e = act_bytes(dtype);
  const std::int64_t n = chunk_elems(elems, chunk, rank_);
  const auto* mine = static_cast<const unsigned char*>(data) + rank_ * chunk * e;
  std::vector<Copy> copies;
  for (int p = 0; p < g_.size() && n > 0; ++p)
    if (p != rank_)
      copies.push_back(
          {static_cast<unsigned char*>(g_.data_[static_cast<std::size_t>(p)]) + rank_ * chunk * e,
           mine, static_cast<std::size_t>(n * e)});
  copy_to_peers(copies, stream);
  exchange(g_.sent_, stream, nullptr);
}

void CopyEngineCollectives::all_reduce(void* data, std::int64_t elems, ActDtype dtype,
                                       cudaStream_t stream) {
  const std::int64_t t = g_.size(), e = act_bytes(dtype);
  const std::int64_t chunk = (elems + t * kAlignElems - 1) / (t * kAlignElems) * kAlignElems;
  if (use_fallback(static_cast<std::size_t>(chunk * e), static_cast<std::size_t>(elems * e),
                   stream)) {
    fallback_.all_reduce(data, elems, dtype, stream);
    return;
  }
  scatter_and_sum(data, chunk, elems, dtype, stream);
  // No second arrival: each peer read its copy of my chunk before its `sent` record, which
  // this rank's stream has waited for, and the buffers are known from the first.
  gather(data, chunk, elems, dtype, stream);
}

void CopyEngineCollectives::reduce_scatter(void* data, std::int64_t chunk, ActDtype dtype,
                                           cudaStream_t stream) {
  const std::int64_t e = act_bytes(dtype);
  if (chunk % kAlignElems != 0 ||
      use_fallback(static_cast<std::size_t>(chunk * e),
                   static_cast<std::size_t>(chunk * e * g_.size()), stream)) {
    fallback_.reduce_scatter(data, chunk, dtype, stream);
    return;
  }
  scatter_and_sum(data, chunk, chunk * g_.size(), dtype, stream);
}

void CopyEngineCollectives::all_gather(void* data, std::int64_t chunk, ActDtype dtype,
                                       cudaStream_t stream) {
  const std::int64_t e = act_bytes(dtype);
  if (use_fallback(static_cast<std::size_t>(chunk * e),
                   static_cast<std::size_t>(chunk * e * g_.size()), stream)) {
    fallback_.all_gather(data, chunk, dtype, stream);
    return;
  }
  exchange(g_.arrived_, stream, data);  // the peers' buffers are free to write into
  gather(data, chunk, chunk * g_.size(), dtype, stream);
}

}  // namespace gpubench::parallel
