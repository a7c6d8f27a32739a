#pragma once
// The collectives of a tensor-parallel step (model::TpCollectives) that tp, pp's layouts and what
// comes next share: over NCCL, through the copy engines, through the one-shot kernel, or none.
// Each object is one rank's; the groups hold what the ranks share.
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/ranks.hpp"
#include "gpubench/kernels/one_shot.cuh"
#include "gpubench/model/transformer.hpp"

namespace gpubench::parallel {

// Gives a rank's engine the group's wait for its host waits (Transformer::set_host_wait): one
// behind a peer that failed ends this rank (RankGroup::wait) instead of blocking in the driver;
// timeout_s > 0 also limits it (TimeoutError), 0 leaves a stuck one to the watchdog. The group
// must outlive the engine's steps.
void wait_with_group(model::Transformer& engine, RankGroup& group, double timeout_s = 0);

// The engine's collectives over an NCCL communicator, in place, bf16 / fp16 sums on the step's
// stream (capturable in a CUDA graph): the all-reduce of the row-parallel outputs, and with
// sequence parallelism the reduce-scatter and all-gather (NCCL's in-place layouts: rank r's
// chunk at data + r * chunk). The communicator is owned by the caller and must outlive this.
class NcclCollectives : public model::TpCollectives {
 public:
  explicit NcclCollectives(ncclComm_t comm);
  void all_reduce(void* data, std::int64_t elems, ActDtype dtype, cudaStream_t stream) override;
  void reduce_scatter(void* data, std::int64_t chunk, ActDtype dtype, cudaStream_t stream) override;
  void all_gather(void* data, std::int64_t chunk, ActDtype dtype, cudaStream_t stream) override;

 private:
  ncclComm_t comm_;
  int rank_ = 0;
};

// The ranks' shared part of CopyEngineCollectives: threads of one process, a GPU each.
// Enables peer access between every pair (peers_ok() says whether all pairs have it), holds
// each rank's staging (t - 1 slots of max_chunk_bytes each: what its peers send it in a
// reduce-scatter) and its events, and the spinning barrier that keeps the ranks' event records
// and waits in step on the host. A rank that does not reach a barrier within 60 s makes the
// others throw GpuError instead of waiting for ever; with `ranks` (the RankGroup whose threads
// these are), a rank of it that failed ends the waiting ones at once, as its own barrier does,
// so that the failure reported is the one that happened.
class CopyEngineGroup {
 public:
  CopyEngineGroup(const std::vector<int>& devices, std::size_t max_chunk_bytes,
                  RankGroup* ranks = nullptr);
  int size() const noexcept { return static_cast<int>(devices_.size()); }
  bool peers_ok() const noexcept { return peers_ok_; }

 private:
  friend class CopyEngineCollectives;
  void barrier();
  std::vector<int> devices_;
  RankGroup* ranks_ = nullptr;
  bool peers_ok_ = false;
  std::size_t max_chunk_bytes_ = 0;
  std::vector<DeviceBuffer> staging_;
  std::vector<Event> arrived_, sent_;  // per rank: its stream reached a collective; its copies
  std::vector<void*> data_;            // per rank: the buffer of the collective under way
  std::atomic<int> waiting_{0};
  std::atomic<unsigned> generation_{0};
};

// A TP step's collectives through the copy engines (cudaMemcpyAsync between peers), so that
// they take no SMs and a collective on a second stream does not slow the GEMMs it overlaps:
//   reduce-scatter: rank r copies its chunk j into slot r of rank j's staging, then each rank
//     adds its slots into its own chunk (one small kernel);
//   all-gather: rank r copies its chunk r into chunk r of every peer;
//   all-reduce: the two.
// Each phase ends with an event per rank that the peers' streams wait on (cross-device waits),
// recorded and waited between host barriers. Messages under min_bytes, and every call while
// the stream is being captured (decode's graph), go to `fallback` (NCCL, lower latency).
class CopyEngineCollectives : public model::TpCollectives {
 public:
  static constexpr std::size_t kMinBytes = std::size_t{2} << 20;
  CopyEngineCollectives(CopyEngineGroup& group, int rank, model::TpCollectives& fallback,
                        std::size_t min_bytes = kMinBytes);
  void all_reduce(void* data, std::int64_t elems, ActDtype dtype, cudaStream_t stream) override;
  void reduce_scatter(void* data, std::int64_t chunk, ActDtype dtype, cudaStream_t stream) override;
  void all_gather(void* data, std::int64_t chunk, ActDtype dtype, cudaStream_t stream) override;
  // Collectives that went through the copy engines, and to the fallback.
  std::int64_t copied() const noexcept { return copied_; }
  std::int64_t fell_back() const noexcept { return fell_back_; }
  // The streams its copies run on (forked from and joined to the caller's).
  std::vector<cudaStream_t> lanes() const;

 private:
  // Whether this collective goes to the fallback (and counts it).
  bool use_fallback(std::size_t chunk_bytes, std::size_t total_bytes, cudaStream_t stream);
  // This rank records its event of `events` (and publishes `publish` as its buffer, if not
  // null), then after a barrier its stream waits for every peer's.
  void exchange(std::vector<Event>& events, cudaStream_t stream, void* publish);
  // The phases on chunks [r * chunk, ...) of `elems` in all (the last chunk may be shorter).
  void scatter_and_sum(void* data, std::int64_t chunk, std::int64_t elems, ActDtype dtype,
                       cudaStream_t stream);
  void gather(void* data, std::int64_t chunk, std::int64_t elems, ActDtype dtype,
              cudaStream_t stream);
  struct Copy {
    void* dst;
    const void* src;
    std::size_t bytes;
  };
  // The copies at once, each on a lane of its own forked from `stream`, joined back to it.
  void copy_to_peers(const std::vector<Copy>& copies, cudaStream_t stream);
  CopyEngineGroup& g_;
  int rank_;
  std::vector<Stream> lanes_;  // t - 1 of them
  std::vector<Event> landed_;
  Event forked_;
  model::TpCollectives& fallback_;
  std::size_t min_bytes_;
  std::int64_t copied_ = 0, fell_back_ = 0;
};

// The ranks' shared part of OneShotCollectives: threads of one process, a GPU each, peer
// access between every pair (peers_ok() says whether all pairs have it). Holds each rank's
// receive buffer (2 x t slots of slot_bytes), flags, call counter and error word, zeroed, and
// each rank's view of them (OneShotPeers, kernels/one_shot.cuh).
class OneShotGroup {
 public:
  OneShotGroup(const std::vector<int>& devices, std::size_t slot_bytes);
  // Ranks that are processes of one host (mpirun/srun, a GPU each; call from inside
  // group.run(), every rank): this rank's buffers, the peers' mapped through CUDA IPC. Null,
  // on every rank alike, when the ranks span hosts, some pair of their GPUs lacks peer access or
  // some rank could not export or map the buffers.
  // Before it is destroyed every rank must be done with it (a group barrier).
  static std::unique_ptr<OneShotGroup> over_ipc(RankGroup& group, int rank, int device,
                                                std::size_t slot_bytes);
  ~OneShotGroup();
  OneShotGroup(const OneShotGroup&) = delete;
  OneShotGroup& operator=(const OneShotGroup&) = delete;
  int size() const noexcept { return static_cast<int>(devices_.size()); }
  bool peers_ok() const noexcept { return peers_ok_; }
  std::size_t slot_bytes() const noexcept { return slot_bytes_; }
  const OneShotPeers& peers(int rank) const { return peers_.at(static_cast<std::size_t>(rank)); }
  // Whether a wait of `rank`'s for a peer timed out in any all-reduce so far (a synchronous read
  // of its error word). Sticky: after a timeout the ranks' flags and counters are out of step,
  // so no later sum through the group can be trusted.
  bool timed_out(int rank) const;

 private:
  OneShotGroup() = default;
  std::vector<int> devices_;
  bool peers_ok_ = false;
  std::size_t slot_bytes_ = 0;
  std::vector<DeviceBuffer> recv_, words_;
  std::vector<OneShotPeers> peers_;
  std::vector<void*> opened_;  // the peers' buffers mapped through IPC (over_ipc)
};

// A TP step's all-reduces of up to kMaxBytes through the one-shot kernel (each rank pushes its
// data to every peer over NVLink, then sums; one kernel, capturable, so decode's graph takes it
// too); larger ones, reduce-scatters and all-gathers go to `fallback`.
class OneShotCollectives : public model::TpCollectives {
 public:
  static constexpr std::size_t kMaxBytes = std::size_t{256} << 10;
  OneShotCollectives(const OneShotGroup& group, int rank, model::TpCollectives& fallback);
  void all_reduce(void* data, std::int64_t elems, ActDtype dtype, cudaStream_t stream) override;
  void reduce_scatter(void* data, std::int64_t chunk, ActDtype dtype, cudaStream_t stream) override;
  void all_gather(void* data, std::int64_t chunk, ActDtype dtype, cudaStream_t stream) override;
  std::int64_t one_shot() const noexcept { return one_shot_; }
  std::int64_t fell_back() const noexcept { return fell_back_; }

 private:
  const OneShotGroup& g_;
  int rank_;
  model::TpCollectives& fallback_;
  std::int64_t one_shot_ = 0, fell_back_ = 0;
};

// Collectives that do nothing: a decode step captured with them runs every kernel of the TP
// step but no communication (wrong logits, never checked), which timed against the real step
// gives the communication the step exposes.
class SkippedCollectives : public model::TpCollectives {
 public:
  void all_reduce(void*, std::int64_t, ActDtype, cudaStream_t) override {}
  void reduce_scatter(void*, std::int64_t, ActDtype, cudaStream_t) override {}
  void all_gather(void*, std::int64_t, ActDtype, cudaStream_t) override {}
};

}  // namespace gpubench::parallel
