// One data-parallel rank (replica.hpp): its buffers as its strategy holds them, the collectives
// it runs between the model's units and after backward, its optimizer step.
#include "gpubench/modules/dp/replica.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/nccl.hpp"
#include "gpubench/kernels/memtest.cuh"
#include "gpubench/kernels/optimizer.cuh"
#include "gpubench/model/observe.hpp"

namespace gpubench::dp {

// ---------------------------------------------------------------------------------------------
// Collectives

Collectives::Collectives(ncclComm_t comm, int rank, int ranks, ActDtype dtype)
    : comm_(comm),
      rank_(rank),
      ranks_(ranks),
      type_(dtype == ActDtype::BF16 ? ncclBfloat16 : ncclFloat16) {}

void Collectives::all_reduce(void* data, std::int64_t elems, cudaStream_t st) {
  if (skip || elems == 0) return;
  GPB_NCCL_CHECK(
      ncclAllReduce(data, data, static_cast<std::size_t>(elems), type_, ncclSum, comm_, st));
}

void Collectives::reduce_scatter(const void* send, void* recv, std::int64_t chunk,
                                 cudaStream_t st) {
  if (skip || chunk == 0) return;
  GPB_NCCL_CHECK(
      ncclReduceScatter(send, recv, static_cast<std::size_t>(chunk), type_, ncclSum, comm_, st));
}

void Collectives::all_gather(const void* send, void* recv, std::int64_t chunk, cudaStream_t st) {
  if (skip || chunk == 0) return;
  GPB_NCCL_CHECK(ncclAllGather(send, recv, static_cast<std::size_t>(chunk), type_, comm_, st));
}

void Collectives::warm(RankGroup& group, Rank& self, std::int64_t largest) {
  const std::int64_t small = std::int64_t{1} << 16;
  const cudaStream_t st = self.stream->get();
  DeviceBuffer b(self.device, static_cast<std::size_t>(std::max(small * ranks_, largest)) * 2);
  GPB_CUDA_CHECK(cudaMemsetAsync(b.get(), 0, b.bytes(), st));
  for (const std::int64_t chunk : {small, largest / ranks_}) {
    if (chunk <= 0) continue;
    auto* at = static_cast<char*>(b.get()) + chunk * rank_ * 2;
    all_reduce(b.get(), chunk * ranks_, st);
    reduce_scatter(b.get(), at, chunk, st);
    all_gather(at, b.get(), chunk, st);
  }
  group.sync(self);
}

// ---------------------------------------------------------------------------------------------
// Replica

namespace {

DeviceBuffer zeroed(int device, std::int64_t bytes, cudaStream_t st) {
  DeviceBuffer b(device, static_cast<std::size_t>(bytes));
  GPB_CUDA_CHECK(cudaMemsetAsync(b.get(), 0, b.bytes(), st));
  return b;
}

// Element i (>= 0) of a device array, as a double.
double read_one(const void* base, std::int64_t i, std::int64_t eb, bool fp32, ActDtype dtype) {
  const auto* p = static_cast<const char*>(base) + i * eb;
  if (fp32) {
    float v = 0;
    GPB_CUDA_CHECK(cudaMemcpy(&v, p, sizeof v, cudaMemcpyDeviceToHost));
    return v;
  }
  return model::to_host_values(p, 1, dtype).front();
}

}  // namespace

MemoryPlan Replica::plan_memory(const Settings& s, Strategy strategy, const ParamPlan& plan,
                                const model::TrainStage& ts) {
  return memory_plan(strategy, plan, static_cast<int>(act_bytes(s.dtype)), ts.replica_bytes());
}

Replica::Replica(const Settings& s, Strategy strategy, const ParamPlan& plan, std::int64_t batch,
                 Collectives& comm, int device, cudaStream_t st, const Faults& faults)
    : s_(s),
      k_(strategy),
      plan_(plan),
      comm_(comm),
      faults_(faults),
      device_(device),
      rank_(comm.rank()),
      eb_(static_cast<std::int64_t>(act_bytes(s.dtype))),
      comm_stream_(device, true),
      started_(device, false),
      ready_(device, false),
      synced_(device, false),
      staging_free_{Event(device, false), Event(device, false)},
      slot_free_{Event(device, false), Event(device, false)},
      slot_full_{Event(device, false), Event(device, false)} {
  ts_ = std::make_unique<model::TrainStage>(s.shape(), device, std::vector<int>{0},
                                            std::vector<int>{2 * s.layers}, true, true, batch);
  params_ = ts_->params();
  const std::int64_t all = plan.total, shard = plan.shard_elems();
  weights_ = zeroed(device, (k_ == Strategy::Fsdp ? shard : all) * eb_, st);
  grads_ = zeroed(device, (sharded_grads() ? shard : all) * eb_, st);
  for (int i = 0; i < 2; ++i) {
    if (sharded_grads()) staging_[i] = zeroed(device, plan.largest * eb_, st);
    if (k_ == Strategy::Fsdp) slots_[i] = zeroed(device, plan.largest * eb_, st);
  }
  const std::int64_t state = k_ == Strategy::Ddp ? all : shard;
  master_ = DeviceBuffer(device, static_cast<std::size_t>(state) * 4);
  m_ = zeroed(device, state * 4, st);
  v_ = zeroed(device, state * 4, st);
  dgrad_ = DeviceBuffer(device, ts_->transfer_bytes());
  ts_->build(1, st, false, comm.rank() * batch);
  init_weights(st);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const std::int64_t off = plan.offset[i];
    if (k_ == Strategy::Ddp || k_ == Strategy::Zero1)
      ts_->place(static_cast<int>(i), ptr(weights_, off), ptr(grads_, off));
    else if (k_ == Strategy::Zero2)
      ts_->place(static_cast<int>(i), ptr(weights_, off), nullptr);
  }
  ts_->set_hooks(this);
  GPB_CUDA_CHECK(cudaStreamSynchronize(st));
}

void Replica::init_weights(cudaStream_t st) {
  const int r = rank_;
  auto* master = master_.as<float>();
  if (k_ != Strategy::Fsdp) {
    for (std::size_t i = 0; i < params_.size(); ++i)
      ts_->init_param(static_cast<int>(i), ptr(weights_, plan_.offset[i]), st);
    if (k_ == Strategy::Ddp) {
      widen_to_fp32(master, weights_.get(), plan_.total, s_.dtype, st);
      return;
    }
    for (int b = 0; b < static_cast<int>(plan_.buckets.size()); ++b)
      widen_to_fp32(master + plan_.shard_offset(b), ptr(weights_, plan_.chunk_begin(b, r)),
                    plan_.chunk_elems(b), s_.dtype, st);
    return;
  }
  // fsdp: each bucket made whole in a slot, this rank's chunk kept.
  for (int b = 0; b < static_cast<int>(plan_.buckets.size()); ++b) {
    const Bucket& k = plan_.buckets[static_cast<std::size_t>(b)];
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (plan_.bucket_of_unit[static_cast<std::size_t>(params_[i].unit)] == b)
        ts_->init_param(static_cast<int>(i), ptr(slots_[0], plan_.offset[i] - k.begin), st);
    GPB_CUDA_CHECK(cudaMemcpyAsync(
        ptr(weights_, plan_.shard_offset(b)), ptr(slots_[0], plan_.chunk_begin(b, r) - k.begin),
        static_cast<std::size_t>(plan_.chunk_elems(b) * eb_), cudaMemcpyDeviceToDevice, st));
  }
  widen_to_fp32(master, weights_.get(), plan_.shard_elems(), s_.dtype, st);
}

void Replica::place_bucket(int b, char* w, char* g) {
  const Bucket& k = plan_.buckets[static_cast<std::size_t>(b)];
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (plan_.bucket_of_unit[static_cast<std::size_t>(params_[i].unit)] != b) continue;
    const model::TrainLinear& t = ts_->param(static_cast<int>(i));
    const std::int64_t at = (plan_.offset[i] - k.begin) * eb_;
    ts_->place(static_cast<int>(i), w ? w + at : t.w, g ? g + at : t.grad);
  }
}

std::int64_t Replica::shard_index(std::int64_t e) const {
  for (int b = 0; b < static_cast<int>(plan_.buckets.size()); ++b) {
    const Bucket& k = plan_.buckets[static_cast<std::size_t>(b)];
    if (e < k.begin || e >= k.begin + k.elems) continue;
    const std::int64_t c = plan_.chunk_begin(b, rank_);
    return e >= c && e < c + plan_.chunk_elems(b) ? plan_.shard_offset(b) + (e - c) : -1;
  }
  throw InputError(fmt::format("dp: element {} is outside the parameters", e));
}

// ---------------------------------------------------------------------------------------------
// Hooks: fsdp's gathers, every strategy's gradient collectives

// A unit's compute span begins once its waits are queued (what it waited for stays outside it).
void Replica::before_forward(int unit, cudaStream_t st) {
  const int b = plan_.bucket_of_unit[static_cast<std::size_t>(unit)];
  if (k_ == Strategy::Fsdp && unit == plan_.buckets[static_cast<std::size_t>(b)].first_unit) {
    gathered(b, b - 1, st);
    place_bucket(b, static_cast<char*>(slots_[b % 2].get()), nullptr);
  }
  mark_begin("F " + unit_name(unit), 0, st);
}

void Replica::after_forward(int unit, cudaStream_t st) {
  mark_end(0, st);
  if (k_ != Strategy::Fsdp) return;
  const int b = plan_.bucket_of_unit[static_cast<std::size_t>(unit)];
  if (unit == plan_.buckets[static_cast<std::size_t>(b)].last_unit) slot_free_[b % 2].record(st);
}

void Replica::before_backward(int unit, cudaStream_t st) {
  const int b = plan_.bucket_of_unit[static_cast<std::size_t>(unit)];
  if (unit == plan_.buckets[static_cast<std::size_t>(b)].last_unit) {
    if (k_ == Strategy::Fsdp) {
      const int next = b + 1 < static_cast<int>(plan_.buckets.size()) ? b + 1 : -1;
      gathered(b, next, st);
      place_bucket(b, static_cast<char*>(slots_[b % 2].get()), nullptr);
    }
    if (sharded_grads()) {
      GPB_CUDA_CHECK(cudaStreamWaitEvent(st, staging_free_[b % 2], 0));
      place_bucket(b, nullptr, static_cast<char*>(staging_[b % 2].get()));
    }
  }
  mark_begin("B " + unit_name(unit), 0, st);
}

void Replica::after_backward(int unit, cudaStream_t st) {
  mark_end(0, st);
  const int b = plan_.bucket_of_unit[static_cast<std::size_t>(unit)];
  if (unit != plan_.buckets[static_cast<std::size_t>(b)].first_unit) return;
  reduce_bucket(b, st);
  if (k_ == Strategy::Fsdp) slot_free_[b % 2].record(st);
}

void Replica::gathered(int b, int next, cudaStream_t st) {
  if (slot_holds_[b % 2] != b) gather(b);
  GPB_CUDA_CHECK(cudaStreamWaitEvent(st, slot_full_[b % 2], 0));
  if (next >= 0 && slot_holds_[next % 2] != next) gather(next);
}

void Replica::gather(int b) {
  const cudaStream_t cs = comm_stream_.get();
  GPB_CUDA_CHECK(cudaStreamWaitEvent(cs, slot_free_[b % 2], 0));
  mark_begin(fmt::format("all-gather bucket {}", b), 1, cs);
  comm_.all_gather(ptr(weights_, plan_.shard_offset(b)), slots_[b % 2].get(), plan_.chunk_elems(b),
                   cs);
  mark_end(1, cs);
  slot_full_[b % 2].record(cs);
  slot_holds_[b % 2] = b;
}

void Replica::reduce_bucket(int b, cudaStream_t st) {
  const cudaStream_t cs = comm_stream_.get();
  const Bucket& k = plan_.buckets[static_cast<std::size_t>(b)];
  ready_.record(st);
  GPB_CUDA_CHECK(cudaStreamWaitEvent(cs, ready_, 0));
  mark_begin(fmt::format("{} bucket {}", k_ == Strategy::Ddp ? "all-reduce" : "reduce-scatter", b),
             1, cs);
  switch (k_) {
    case Strategy::Ddp:
      comm_.all_reduce(ptr(grads_, k.begin), k.elems, cs);
      break;
    case Strategy::Zero1:
      comm_.reduce_scatter(ptr(grads_, k.begin), ptr(grads_, plan_.chunk_begin(b, rank_)),
                           plan_.chunk_elems(b), cs);
      break;
    case Strategy::Zero2:
    case Strategy::Fsdp:
      comm_.reduce_scatter(staging_[b % 2].get(), ptr(grads_, plan_.shard_offset(b)),
                           plan_.chunk_elems(b), cs);
      staging_free_[b % 2].record(cs);
      break;
  }
  mark_end(1, cs);
  if (b == faults_.zero_bucket) {
    const bool whole = k_ == Strategy::Ddp;
    const std::int64_t at = whole                   ? k.begin
                            : k_ == Strategy::Zero1 ? plan_.chunk_begin(b, rank_)
                                                    : plan_.shard_offset(b);
    GPB_CUDA_CHECK(cudaMemsetAsync(
        ptr(grads_, at), 0,
        static_cast<std::size_t>((whole ? k.elems : plan_.chunk_elems(b)) * eb_), cs));
  }
}

// ---------------------------------------------------------------------------------------------
// The step

void Replica::step(cudaStream_t st, GemmCheckTally* tally) {
  ++step_;
  slot_holds_ = {-1, -1};  // the weights changed: every bucket is gathered again
  // The communication stream starts the step with the compute stream: fsdp's first gathers read
  // the weights the last step's optimizer wrote there, and belong to this step's time.
  started_.record(st);
  GPB_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_.get(), started_, 0));
  unsigned char* slab = ts_->allocate(0, st);
  ts_->forward(0, 0, slab, nullptr, st);
  ts_->backward(0, slab, dgrad_.get(), st, false, tally);
  model::TrainStage::release(slab, st);
  synced_.record(comm_stream_.get());
  GPB_CUDA_CHECK(cudaStreamWaitEvent(st, synced_, 0));
  mark_begin(k_ == Strategy::Zero1 || k_ == Strategy::Zero2 ? "optimizer, weights all-gathered"
                                                            : "optimizer",
             0, st);
  optimizer(st);
  mark_end(0, st);
  tracing_ = false;
  if (faults_.flip_rank == rank_ && step_ == 1) {  // one bit of the first weight, whatever it is
    unsigned char byte = 0;
    GPB_CUDA_CHECK(cudaMemcpyAsync(&byte, weights_.get(), 1, cudaMemcpyDeviceToHost, st));
    GPB_CUDA_CHECK(cudaStreamSynchronize(st));
    byte ^= 0x40;
    GPB_CUDA_CHECK(cudaMemcpyAsync(weights_.get(), &byte, 1, cudaMemcpyHostToDevice, st));
    GPB_CUDA_CHECK(cudaStreamSynchronize(st));
  }
}

std::uint64_t Replica::state_hash(cudaStream_t st) const {
  if (k_ == Strategy::Fsdp) return 0;
  DeviceBuffer sum(device_, sizeof(unsigned long long));
  GPB_CUDA_CHECK(cudaMemsetAsync(sum.get(), 0, sum.bytes(), st));
  auto* h = sum.as<unsigned long long>();
  launch_buffer_hash(weights_.get(), weights_.bytes(), h, st);
  if (k_ == Strategy::Ddp) launch_buffer_hash(master_.get(), master_.bytes(), h, st);
  unsigned long long out = 0;
  GPB_CUDA_CHECK(cudaMemcpyAsync(&out, h, sizeof out, cudaMemcpyDeviceToHost, st));
  GPB_CUDA_CHECK(cudaStreamSynchronize(st));
  return out;
}

std::string Replica::unit_name(int unit) const {
  if (unit == ts_->units() - 1) return "head";
  return fmt::format("layer {} {}", unit / 2, unit % 2 == 0 ? "attention" : "MLP");
}

void Replica::mark_begin(std::string name, int lane, cudaStream_t st) {
  if (!tracing_) return;
  marks_.push_back({std::move(name), lane, Event(device_), Event(device_)});
  marks_.back().begin.record(st);
  open_[static_cast<std::size_t>(lane)] = static_cast<int>(marks_.size()) - 1;
}

void Replica::mark_end(int lane, cudaStream_t st) {
  if (!tracing_) return;
  const int i = open_[static_cast<std::size_t>(lane)];
  if (i >= 0) marks_[static_cast<std::size_t>(i)].end.record(st);
  open_[static_cast<std::size_t>(lane)] = -1;
}

std::vector<TraceSpan> Replica::trace(const Event& start) {
  std::vector<TraceSpan> out;
  for (const Mark& m : marks_) {
    float a = 0, b = 0;
    GPB_CUDA_CHECK(cudaEventElapsedTime(&a, start, m.begin));
    GPB_CUDA_CHECK(cudaEventElapsedTime(&b, start, m.end));
    out.push_back({m.name, m.lane, a * 1e-3, b * 1e-3});
  }
  marks_.clear();
  return out;
}

void Replica::optimizer(cudaStream_t st) {
  const float scale = faults_.unscaled ? 1.0f : 1.0f / static_cast<float>(comm_.ranks());
  auto* master = master_.as<float>();
  auto* m = m_.as<float>();
  auto* v = v_.as<float>();
  if (k_ == Strategy::Ddp || k_ == Strategy::Fsdp) {
    const std::int64_t n = k_ == Strategy::Ddp ? plan_.total : plan_.shard_elems();
    adamw_step(master, m, v, grads_.get(), weights_.get(), n, s_.adamw, step_, scale, s_.dtype, st);
    return;
  }
  const int buckets = static_cast<int>(plan_.buckets.size());
  for (int b = 0; b < buckets; ++b) {
    const std::int64_t so = plan_.shard_offset(b), c = plan_.chunk_begin(b, rank_);
    const char* g = k_ == Strategy::Zero1 ? ptr(grads_, c) : ptr(grads_, so);
    adamw_step(master + so, m + so, v + so, g, ptr(weights_, c), plan_.chunk_elems(b), s_.adamw,
               step_, scale, s_.dtype, st);
  }
  gather_updated(st);
}

void Replica::gather_updated(cudaStream_t st) {
  GPB_NCCL_CHECK(ncclGroupStart());
  for (int b = 0; b < static_cast<int>(plan_.buckets.size()); ++b)
    comm_.all_gather(ptr(weights_, plan_.chunk_begin(b, rank_)),
                     ptr(weights_, plan_.buckets[static_cast<std::size_t>(b)].begin),
                     plan_.chunk_elems(b), st);
  GPB_NCCL_CHECK(ncclGroupEnd());
}

void Replica::collectives_alone(cudaStream_t st) {
  const int buckets = static_cast<int>(plan_.buckets.size());
  if (k_ == Strategy::Fsdp)  // the forward's gathers (the last two are the backward's first)
    for (int b = buckets - 1; b >= 0; --b)
      comm_.all_gather(ptr(weights_, plan_.shard_offset(b)), slots_[b % 2].get(),
                       plan_.chunk_elems(b), st);
  for (int b = 0; b < buckets; ++b) {
    const Bucket& k = plan_.buckets[static_cast<std::size_t>(b)];
    if (k_ == Strategy::Fsdp && b > 1)
      comm_.all_gather(ptr(weights_, plan_.shard_offset(b)), slots_[b % 2].get(),
                       plan_.chunk_elems(b), st);
    if (k_ == Strategy::Ddp)
      comm_.all_reduce(ptr(grads_, k.begin), k.elems, st);
    else if (k_ == Strategy::Zero1)
      comm_.reduce_scatter(ptr(grads_, k.begin), ptr(grads_, plan_.chunk_begin(b, rank_)),
                           plan_.chunk_elems(b), st);
    else
      comm_.reduce_scatter(staging_[b % 2].get(), ptr(grads_, plan_.shard_offset(b)),
                           plan_.chunk_elems(b), st);
  }
  if (k_ == Strategy::Zero1 || k_ == Strategy::Zero2) gather_updated(st);
}

Replica::Sample Replica::sample(std::int64_t e) const {
  const std::int64_t si = shard_index(e);
  // zero1 keeps the whole gradient buffer, its own chunks reduced in place.
  const std::int64_t gi = k_ == Strategy::Ddp ? e : k_ == Strategy::Zero1 ? (si >= 0 ? e : -1) : si;
  Sample out;
  out.mine = k_ == Strategy::Ddp || si >= 0;
  if (!out.mine) return out;
  out.grad = read_one(grads_.get(), gi, eb_, false, s_.dtype);
  out.master = read_one(master_.get(), k_ == Strategy::Ddp ? e : si, 4, true, s_.dtype);
  out.moment = read_one(m_.get(), k_ == Strategy::Ddp ? e : si, 4, true, s_.dtype);
  out.weight = read_one(weights_.get(), k_ == Strategy::Fsdp ? si : e, eb_, false, s_.dtype);
  return out;
}

}  // namespace gpubench::dp
