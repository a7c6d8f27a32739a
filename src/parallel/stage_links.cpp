#include "gpubench/parallel/stage_links.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cuda.h>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/peers.hpp"

namespace gpubench::parallel {

namespace {

ncclDataType_t nccl_type_of(ActDtype d) {
  return d == ActDtype::BF16 ? ncclBfloat16 : ncclFloat16;
}

void record(cudaEvent_t event, cudaStream_t stream) {
  if (event) GPB_CUDA_CHECK(cudaEventRecord(event, stream));
}

// The driver's stream memory operations (a 32-bit write, and a wait for a cyclic >=), found
// at run time so that nothing links the driver library.
struct StreamMemOps {
  CUresult (*write)(CUstream, CUdeviceptr, cuuint32_t, unsigned int) = nullptr;
  CUresult (*wait)(CUstream, CUdeviceptr, cuuint32_t, unsigned int) = nullptr;
};
const StreamMemOps& stream_mem_ops() {
  static const StreamMemOps ops = [] {
    StreamMemOps o;
    auto find = [](const char* name) {
      void* fn = nullptr;
      cudaDriverEntryPointQueryResult q{};
      GPB_CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q));
      if (q != cudaDriverEntryPointSuccess || fn == nullptr)
        throw GpuError(fmt::format("the driver has no {}", name));
      return fn;
    };
    o.write = reinterpret_cast<decltype(o.write)>(find("cuStreamWriteValue32"));
    o.wait = reinterpret_cast<decltype(o.wait)>(find("cuStreamWaitValue32"));
    return o;
  }();
  return ops;
}
// `stream` writes `value` to `flag` (on this GPU or a peer's) after what it ran before.
void write_flag(cudaStream_t stream, std::uint32_t* flag, std::uint32_t value) {
  const CUresult r = stream_mem_ops().write(reinterpret_cast<CUstream>(stream),
                                            reinterpret_cast<CUdeviceptr>(flag), value,
                                            CU_STREAM_WRITE_VALUE_DEFAULT);
  if (r != CUDA_SUCCESS)
    throw GpuError(fmt::format("cuStreamWriteValue32 failed: CUresult {}", static_cast<int>(r)));
}
// `stream` waits until `flag` (on this GPU) reaches `value` (cyclic >=).
void wait_flag(cudaStream_t stream, std::uint32_t* flag, std::uint32_t value) {
  const CUresult r =
      stream_mem_ops().wait(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(flag),
                            value, CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS)
    throw GpuError(fmt::format("cuStreamWaitValue32 failed: CUresult {}", static_cast<int>(r)));
}

// A copy of this many bytes wakes an idle link before a transfer (see StageLinks).
constexpr std::size_t kWakeBytes = std::size_t{2} << 20;

// Flags of a stage, by what they count.
constexpr int kForwardArrived = 0, kForwardReleased = 1, kBackwardArrived = 2,
              kBackwardReleased = 3;

}  // namespace

// ---------------------------------------------------------------------------------------------

StagePipe::StagePipe(RankGroup& group, int rank, int max_ctas) : rank_(rank) {
  if (group.size() < 2) return;
  ncclUniqueId id{};
  if (rank == 0) GPB_NCCL_CHECK(ncclGetUniqueId(&id));
  group.broadcast(rank, &id, sizeof(id));
  comm_ = NcclComm(id, group.size(), rank, max_ctas);
}

void StagePipe::recv_from_previous(void* data, std::size_t elems, ActDtype dtype,
                                   cudaStream_t stream) {
  GPB_NCCL_CHECK(ncclRecv(data, elems, nccl_type_of(dtype), rank_ - 1, comm_.get(), stream));
}

void StagePipe::send_to_next(const void* data, std::size_t elems, ActDtype dtype,
                             cudaStream_t stream) {
  GPB_NCCL_CHECK(ncclSend(data, elems, nccl_type_of(dtype), rank_ + 1, comm_.get(), stream));
}

StageEdges::StageEdges(RankGroup& group, int rank, bool ring, int max_ctas) {
  const int p = group.size();
  edges_ = p < 2 ? 0 : (ring ? p : p - 1);
  std::vector<ncclUniqueId> ids(static_cast<std::size_t>(2 * edges_));
  if (rank == 0)
    for (auto& id : ids) GPB_NCCL_CHECK(ncclGetUniqueId(&id));
  if (edges_ > 0) group.broadcast(rank, ids.data(), ids.size() * sizeof(ncclUniqueId));
  // This stage's edge in (from the previous stage) and out (to the next), joined in edge order
  // so that the pairs' initializations cannot wait on each other in a cycle.
  const int in_edge = ring ? (rank + p - 1) % p : rank - 1;
  const int out_edge = ring || rank < p - 1 ? rank : -1;
  for (int e = 0; e < edges_; ++e) {
    const auto E = static_cast<std::size_t>(e);
    if (e == out_edge) {
      forward_out = NcclComm(ids[2 * E], 2, 0, max_ctas);
      backward_out = NcclComm(ids[2 * E + 1], 2, 0, max_ctas);
    }
    if (e == in_edge) {
      forward_in = NcclComm(ids[2 * E], 2, 1, max_ctas);
      backward_in = NcclComm(ids[2 * E + 1], 2, 1, max_ctas);
    }
  }
}

// ---------------------------------------------------------------------------------------------

struct CopyEnginePeer {
  std::array<void*, StageLinks::kRing> frecv{}, brecv{};
  std::uint32_t* flags = nullptr;
  void* wake = nullptr;  // kWakeBytes a sender's link-waking copy lands in
  int device = -1;
};

CopyEngineTable::CopyEngineTable(int stages) : peers_(static_cast<std::size_t>(stages)) {}
CopyEngineTable::~CopyEngineTable() = default;

bool CopyEngineTable::usable(const RankGroup& group) {
  if (group.is_mpi() || group.size() < 2) return false;
  if (!PeerAccess(group.devices()).all()) return false;
  (void)stream_mem_ops();  // fail here, not inside a rank
  return true;
}

// ---------------------------------------------------------------------------------------------

int StageLinks::Ring::advance() {
  const int slot = next;
  next = (next + 1) % kRing;
  return slot;
}

StageLinks::StageLinks(StageEdges& edges, int rank, int prev, int next, int device,
                       std::size_t bytes, ActDtype dtype, CopyEngineTable* table, RankGroup& group)
    : edges_(edges),
      rank_(rank),
      prev_(prev),
      next_(next),
      device_(device),
      bytes_(bytes),
      elems_(bytes / act_bytes(dtype)),
      type_(nccl_type_of(dtype)),
      table_(table),
      s_frecv_(device, true),
      s_fsend_(device, true),
      s_brecv_(device, true),
      s_bsend_(device, true),
      joined_(device, false),
      near_f_(device, false),
      near_b_(device, false) {
  for (Ring* r : {&frecv_, &fsend_, &brecv_, &bsend_})
    for (int k = 0; k < kRing; ++k) {
      const auto K = static_cast<std::size_t>(k);
      r->buf[K] = DeviceBuffer(device, bytes);
      r->ready[K] = Event(device, false);
      r->free[K] = Event(device, false);
    }
  if (table_) publish(group);
}

std::uint64_t StageLinks::planned_bytes(std::size_t bytes, bool copy_engines) {
  const std::uint64_t rings = 4ull * kRing * bytes;  // both ways, receive and send sides
  return copy_engines ? rings + 2 * kWakeBytes + 4 * sizeof(std::uint32_t) : rings;
}

// Flags zeroed, this stage's rings, flags and wake buffer in the table, then a barrier: every
// stage's published before any transfer.
void StageLinks::publish(RankGroup& group) {
  flags_ = DeviceBuffer(device_, 4 * sizeof(std::uint32_t));
  wake_from_ = DeviceBuffer(device_, kWakeBytes);
  wake_into_ = DeviceBuffer(device_, kWakeBytes);
  // On a stream of the stage's own: the legacy stream would also wait for NCCL's streams.
  const cudaStream_t st = s_frecv_.get();
  GPB_CUDA_CHECK(cudaMemsetAsync(flags_.get(), 0, flags_.bytes(), st));
  GPB_CUDA_CHECK(cudaMemsetAsync(wake_from_.get(), 0, kWakeBytes, st));
  GPB_CUDA_CHECK(cudaStreamSynchronize(st));
  CopyEnginePeer& me = table_->peers_.at(static_cast<std::size_t>(rank_));
  for (int k = 0; k < kRing; ++k) {
    const auto K = static_cast<std::size_t>(k);
    me.frecv[K] = frecv_.buf[K].get();
    me.brecv[K] = brecv_.buf[K].get();
  }
  me.flags = flags_.as<std::uint32_t>();
  me.wake = wake_into_.get();
  me.device = device_;
  group.barrier();
  spdlog::debug("pp: stage {}: copy-engine peers published", rank_);
}

void StageLinks::set_copy_engines(bool on) {
  if (on && !table_) throw std::logic_error("StageLinks: copy engines without a table");
  over_ce_ = on;
}

cudaStream_t StageLinks::recv_stream(Way way) const {
  return way == Way::Forward ? s_frecv_.get() : s_brecv_.get();
}
cudaStream_t StageLinks::send_stream(Way way) const {
  return way == Way::Forward ? s_fsend_.get() : s_bsend_.get();
}
// Activations come in on the edge from the previous stage and go out on the edge to the next;
// gradients come back on the edge to the next and go back on the edge from the previous.
ncclComm_t StageLinks::recv_comm(Way way) const {
  return way == Way::Forward ? edges_.forward_in.get() : edges_.backward_out.get();
}
ncclComm_t StageLinks::send_comm(Way way) const {
  return way == Way::Forward ? edges_.forward_out.get() : edges_.backward_in.get();
}
void* StageLinks::send_buffer(Way way, int slot) const {
  const Ring& r = way == Way::Forward ? fsend_ : bsend_;
  return r.buf.at(static_cast<std::size_t>(slot)).get();
}
void* StageLinks::recv_buffer(Way way, int slot) const {
  const Ring& r = way == Way::Forward ? frecv_ : brecv_;
  return r.buf.at(static_cast<std::size_t>(slot)).get();
}
cudaEvent_t StageLinks::near(Way way) const {
  if (!over_ce_) return nullptr;
  return way == Way::Forward ? near_f_.get() : near_b_.get();
}

int StageLinks::post_recv(Way way, const TransferMarks& m) {
  Ring& r = recv_ring(way);
  const int slot = r.advance();
  r.last = slot;
  if (over_ce_) return slot;  // the sender copies into it
  // NCCL, on the side stream, once the buffer is free.
  const auto S = static_cast<std::size_t>(slot);
  const cudaStream_t side = recv_stream(way);
  GPB_CUDA_CHECK(cudaStreamWaitEvent(side, r.free[S].get(), 0));
  record(m.recv_begin, side);
  nccl_recv(way, slot, side);
  record(m.recv_end, side);
  r.ready[S].record(side);
  return slot;
}

void StageLinks::take(Way way, int slot, void* dst, cudaStream_t cs, const TransferMarks& m) {
  if (over_ce_) return ce_take(way, slot, dst, cs, m);
  Ring& r = recv_ring(way);
  const auto S = static_cast<std::size_t>(slot);
  GPB_CUDA_CHECK(cudaStreamWaitEvent(cs, r.ready[S].get(), 0));
  record(m.usable, cs);
  GPB_CUDA_CHECK(cudaMemcpyAsync(dst, r.buf[S].get(), bytes_, cudaMemcpyDeviceToDevice, cs));
  r.free[S].record(cs);
}

int StageLinks::claim(Way way, cudaStream_t cs) {
  Ring& r = send_ring(way);
  const int slot = r.advance();
  GPB_CUDA_CHECK(cudaStreamWaitEvent(cs, r.free[static_cast<std::size_t>(slot)].get(), 0));
  return slot;
}

void StageLinks::post_send(Way way, int slot, cudaStream_t cs, const TransferMarks& m) {
  if (over_ce_) return ce_send(way, slot, cs, m);
  Ring& r = send_ring(way);
  const auto S = static_cast<std::size_t>(slot);
  const cudaStream_t side = send_stream(way);
  r.ready[S].record(cs);
  GPB_CUDA_CHECK(cudaStreamWaitEvent(side, r.ready[S].get(), 0));
  record(m.send_begin, side);
  nccl_send(way, slot, side);
  record(m.send_end, side);
  r.free[S].record(side);
  r.last = slot;
}

void StageLinks::ce_take(Way way, int slot, void* dst, cudaStream_t cs, const TransferMarks& m) {
  const bool forward = way == Way::Forward;
  const std::uint32_t n = forward ? ++f_got_ : ++b_got_;
  record(m.recv_begin, cs);
  wait_flag(cs, flags_.as<std::uint32_t>() + (forward ? kForwardArrived : kBackwardArrived), n);
  record(m.usable, cs);
  record(m.recv_end, cs);
  GPB_CUDA_CHECK(cudaMemcpyAsync(dst, recv_ring(way).buf[static_cast<std::size_t>(slot)].get(),
                                 bytes_, cudaMemcpyDeviceToDevice, cs));
  const CopyEnginePeer& sender = table_->peers_[static_cast<std::size_t>(forward ? prev_ : next_)];
  write_flag(cs, sender.flags + (forward ? kForwardReleased : kBackwardReleased), n);
}

void StageLinks::ce_send(Way way, int slot, cudaStream_t cs, const TransferMarks& m) {
  const bool forward = way == Way::Forward;
  Ring& r = send_ring(way);
  const auto S = static_cast<std::size_t>(slot);
  const cudaStream_t side = send_stream(way);
  const std::uint32_t n = forward ? ++f_sent_ : ++b_sent_;
  const CopyEnginePeer& to = table_->peers_[static_cast<std::size_t>(forward ? next_ : prev_)];
  GPB_CUDA_CHECK(cudaStreamWaitEvent(side, near(way), 0));
  GPB_CUDA_CHECK(
      cudaMemcpyPeerAsync(to.wake, to.device, wake_from_.get(), device_, kWakeBytes, side));
  r.ready[S].record(cs);
  GPB_CUDA_CHECK(cudaStreamWaitEvent(side, r.ready[S].get(), 0));
  std::uint32_t* flags = flags_.as<std::uint32_t>();
  if (n > static_cast<std::uint32_t>(kRing))
    wait_flag(side, flags + (forward ? kForwardReleased : kBackwardReleased), n - kRing);
  record(m.send_begin, side);
  const std::size_t dst_slot = (n - 1) % kRing;
  GPB_CUDA_CHECK(cudaMemcpyPeerAsync(forward ? to.frecv[dst_slot] : to.brecv[dst_slot], to.device,
                                     r.buf[S].get(), device_, bytes_, side));
  write_flag(side, to.flags + (forward ? kForwardArrived : kBackwardArrived), n);
  record(m.send_end, side);
  r.free[S].record(side);
  r.last = slot;
}

void StageLinks::join(cudaStream_t cs) {
  for (const Stream* side : {&s_frecv_, &s_fsend_, &s_brecv_, &s_bsend_})
    stream_wait(cs, side->get(), joined_);
}

void StageLinks::restart() {
  for (Ring* r : {&frecv_, &fsend_, &brecv_, &bsend_}) {
    r->next = 0;
    r->last = -1;
  }
}

double StageLinks::last_digest(Way way, bool sent) const {
  const Ring& r =
      sent ? (way == Way::Forward ? fsend_ : bsend_) : (way == Way::Forward ? frecv_ : brecv_);
  if (r.last < 0) return -1.0;
  std::vector<std::uint64_t> h(bytes_ / 8);
  GPB_CUDA_CHECK(cudaMemcpy(h.data(), r.buf[static_cast<std::size_t>(r.last)].get(), h.size() * 8,
                            cudaMemcpyDeviceToHost));
  std::uint64_t x = 1469598103934665603ull;  // FNV-1a over 64-bit words
  for (std::uint64_t w : h) x = (x ^ w) * 1099511628211ull;
  return static_cast<double>(x >> 12);  // exact in a double
}

// In an edge's communicators the earlier stage is rank 0: activations go from it to rank 1,
// gradients from rank 1 back to it.
void StageLinks::nccl_send(Way way, int slot, cudaStream_t stream) {
  GPB_NCCL_CHECK(ncclSend(send_buffer(way, slot), elems_, type_, way == Way::Forward ? 1 : 0,
                          send_comm(way), stream));
}

void StageLinks::nccl_recv(Way way, int slot, cudaStream_t stream) {
  GPB_NCCL_CHECK(ncclRecv(recv_buffer(way, slot), elems_, type_, way == Way::Forward ? 0 : 1,
                          recv_comm(way), stream));
}

}  // namespace gpubench::parallel
