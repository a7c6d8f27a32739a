#pragma once
// The stage-to-stage transports of a pipeline, shared by pp's inference and training and what
// comes next: NCCL send/recv between neighbouring stages, and for training rings of buffers
// each way carried either by NCCL or by the copy engines (peer copies ordered by flags in GPU
// memory). Each object is one rank's (one stage's); a CopyEngineTable holds what the stages of
// one process share.
#include <nccl.h>

#include <array>
#include <cstdint>
#include <vector>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/nccl.hpp"
#include "gpubench/core/ranks.hpp"
#include "gpubench/kernels/transformer.cuh"

namespace gpubench::parallel {

// Inference's transport: every stage on one NCCL communicator, hidden states handed from a
// stage to the next in the order of the calling stream. Construct on every rank of `group`
// (inside group.run()); one stage needs no communicator.
class StagePipe {
 public:
  StagePipe(RankGroup& group, int rank, int max_ctas);
  void recv_from_previous(void* data, std::size_t elems, ActDtype dtype, cudaStream_t stream);
  void send_to_next(const void* data, std::size_t elems, ActDtype dtype, cudaStream_t stream);

 private:
  NcclComm comm_;
  int rank_ = 0;
};

// Training's communicators: each edge (stage e to e + 1; around the ring, p - 1 to 0, when
// `ring`) carries activations on one communicator and gradients back on another, so that a
// transfer never waits behind the other direction. In an edge's communicators the earlier stage
// is rank 0. Construct on every rank of `group` (inside group.run()).
class StageEdges {
 public:
  StageEdges(RankGroup& group, int rank, bool ring, int max_ctas);
  int edges() const noexcept { return edges_; }
  NcclComm forward_in, forward_out, backward_in, backward_out;

 private:
  int edges_ = 0;
};

// Which way a transfer goes: activations to the next stage, gradients to the previous.
enum class Way { Forward, Backward };

// Where one transfer's moments are recorded (a null event is not recorded): `usable`, on the
// compute stream, once it may use what arrived; `recv_begin` / `recv_end` around the receive
// (NCCL: on its side stream; copy engines: the wait for the arrival flag); `send_begin` /
// `send_end` around the send on its side stream.
struct TransferMarks {
  cudaEvent_t usable = nullptr, recv_begin = nullptr, recv_end = nullptr;
  cudaEvent_t send_begin = nullptr, send_end = nullptr;
};

struct CopyEnginePeer;  // a stage's rings and flags as its neighbours see them

// The stages' shared table of rings and flags for copy-engine transfers (threads of one
// process, peer access between every pair). usable() says whether the copy engines can carry
// a pipeline of these devices in this process model.
class CopyEngineTable {
 public:
  explicit CopyEngineTable(int stages);
  ~CopyEngineTable();
  CopyEngineTable(const CopyEngineTable&) = delete;
  CopyEngineTable& operator=(const CopyEngineTable&) = delete;
  // One process with peer access between all of `group`'s GPUs; also loads the driver's stream
  // memory operations (GpuError where the driver lacks them).
  static bool usable(const RankGroup& group);

 private:
  friend class StageLinks;
  std::vector<CopyEnginePeer> peers_;
};

// One stage's transfers in a training step: kRing buffers of `bytes` each way and side, so
// that a transfer overlaps the next operation. A receive is posted into the next ring buffer
// (once the compute stream has taken what the last one held), taken by the compute stream (a
// copy out, which frees the buffer); a send claims the next send buffer, which the compute
// stream fills, and is posted once it is full. Each direction's sends and receives run on
// high-priority side streams of their own (their NCCL kernels get SMs as soon as some free
// up), joined back into the compute stream by join().
//
// Over the copy engines (set_copy_engines(true), with a table): a send waits until the
// receiver has freed the slot it will fill (kRing sends back), peer-copies into it and raises
// the receiver's arrival flag; a take waits on that flag, copies out and raises the sender's
// release flag. Flag counts only grow (cyclic compare): no SMs, no host waits. Before its data,
// a send wakes the link with a small copy started at `near` (docs/DECISIONS.md: a peer copy
// after an idle stretch is slow, whatever its size).
class StageLinks {
 public:
  static constexpr int kRing = 2;
  // On every rank of `group` at once (it publishes and waits on a barrier when `table` is
  // given). prev / next: the neighbouring stages' ranks.
  StageLinks(StageEdges& edges, int rank, int prev, int next, int device, std::size_t bytes,
             ActDtype dtype, CopyEngineTable* table, RankGroup& group);
  // What one stage's links allocate for transfers of `bytes`: its rings and, over the copy
  // engines, its flags and wake buffers (for a memory check before they are made).
  static std::uint64_t planned_bytes(std::size_t bytes, bool copy_engines);
  StageLinks(const StageLinks&) = delete;
  StageLinks& operator=(const StageLinks&) = delete;

  // Which carries the following transfers (the copy engines only with a table).
  void set_copy_engines(bool on);
  bool copy_engines() const noexcept { return over_ce_; }
  const char* transport() const noexcept { return table_ ? "copy-engine" : "nccl"; }

  // The receive of the next transfer coming `way`; its slot.
  int post_recv(Way way, const TransferMarks& m);
  // The compute stream `cs` copies what arrived in `slot` to `dst` and frees the slot.
  void take(Way way, int slot, void* dst, cudaStream_t cs, const TransferMarks& m);
  // The next send buffer going `way`, once its last send is done (in `cs`'s order); its slot.
  int claim(Way way, cudaStream_t cs);
  void* send_buffer(Way way, int slot) const;
  void* recv_buffer(Way way, int slot) const;
  // The event a copy-engine send's link-waking copy waits for (record it as the operation that
  // fills the send buffer starts its last part); null over NCCL.
  cudaEvent_t near(Way way) const;
  // The send of `slot` once `cs` has filled it.
  void post_send(Way way, int slot, cudaStream_t cs, const TransferMarks& m);
  // `cs` waits for everything queued on the side streams.
  void join(cudaStream_t cs);
  // The rings start again from their first buffer (every stage at once, after a barrier).
  void restart();
  // A digest of what the last send went `way` (sent) or the last receive got (received); -1
  // where there was none.
  double last_digest(Way way, bool sent) const;
  // NCCL send/recv of `slot` alone, in `stream`'s order, without the rings' bookkeeping.
  void nccl_send(Way way, int slot, cudaStream_t stream);
  void nccl_recv(Way way, int slot, cudaStream_t stream);

 private:
  struct Ring {
    std::array<DeviceBuffer, kRing> buf;
    std::array<Event, kRing> ready, free;
    int next = 0, last = -1;
    int advance();
  };
  Ring& recv_ring(Way way) { return way == Way::Forward ? frecv_ : brecv_; }
  Ring& send_ring(Way way) { return way == Way::Forward ? fsend_ : bsend_; }
  cudaStream_t recv_stream(Way way) const;
  cudaStream_t send_stream(Way way) const;
  ncclComm_t recv_comm(Way way) const;
  ncclComm_t send_comm(Way way) const;
  void publish(RankGroup& group);
  void ce_take(Way way, int slot, void* dst, cudaStream_t cs, const TransferMarks& m);
  void ce_send(Way way, int slot, cudaStream_t cs, const TransferMarks& m);

  StageEdges& edges_;
  int rank_, prev_, next_, device_;
  std::size_t bytes_, elems_;
  ncclDataType_t type_;
  CopyEngineTable* table_;
  bool over_ce_ = false;
  Ring frecv_, fsend_, brecv_, bsend_;
  Stream s_frecv_, s_fsend_, s_brecv_, s_bsend_;
  Event joined_;
  // Copy engines: this stage's flags ([0] activations arrived, [1] activation sends released by
  // the next stage, [2] gradients arrived, [3] gradient sends released by the previous stage),
  // the link-waking copies' source and landing buffers, their start events, the counts.
  DeviceBuffer flags_, wake_from_, wake_into_;
  Event near_f_, near_b_;
  std::uint32_t f_sent_ = 0, f_got_ = 0, b_sent_ = 0, b_got_ = 0;
};

}  // namespace gpubench::parallel
