// `gpubench pp` on the GPUs, training: one step of s.batch sequences in m microbatches through p
// pipeline stages (one GPU and one thread each, or one process each under MPI), in the order a
// schedule gives each stage (stage_order). Each stage's part of the model is a TrainStage
// (train_stage.hpp); activations go forward and gradients back through the parallel layer's
// StageLinks (NCCL send/recv, or the copy engines), each direction on streams of its own.
// The parts of a run, in order: the stage's setup (balance, blocks, communicators), per
// microbatch count the stage and its links, one checked step, the timed steps (the core's
// measurement through the group), one step with events for the timeline, and the stage-to-
// stage transfer timed alone.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/peers.hpp"
#include "gpubench/kernels/gemm_check.cuh"
#include "gpubench/model/observe.hpp"
#include "gpubench/model/train_stage.hpp"
#include "gpubench/modules/pp/pp.hpp"
#include "gpubench/parallel/stage_links.hpp"

namespace gpubench::pp {

namespace {

using model::TrainStage;
using parallel::StageLinks;
using parallel::TransferMarks;
using parallel::Way;

// Saved activations a stage holds at once along its `order`: each forward adds its chunk's slab,
// each backward frees it.
std::uint64_t peak_slab_bytes(const TrainStage& ts, const std::vector<Op>& order) {
  std::uint64_t held = 0, peak = 0;
  for (const Op& op : order) {
    held = op.forward ? held + ts.slab_bytes(op.chunk) : held - ts.slab_bytes(op.chunk);
    peak = std::max(peak, held);
  }
  return peak;
}

// What the stages of one schedule's run share.
struct TrainingRun {
  const Settings& s;
  Schedule sch;
  int p = 1, v = 1;
  ActDtype dtype = ActDtype::BF16;
  MeasureOptions mo;
  RankGroup& group;
  // The copy engines carry the transfers (their table), and stage 0 may peer-copy to stage 1
  // (the transfer's peer copy is timed alone).
  std::unique_ptr<parallel::CopyEngineTable> table;
  bool peer_copy = false;
};

// --transfers copy-engine: one process with peer access between all the GPUs, two stages only
// (more can stall, docs/DECISIONS.md; they run over NCCL, with a warning).
std::unique_ptr<parallel::CopyEngineTable> copy_engine_table(const Settings& s, int p,
                                                             const RankGroup& group) {
  if (s.transfers != "copy-engine" || p < 2) return nullptr;
  if (p > 2) {
    spdlog::warn("pp: --transfers copy-engine runs 2 stages only; {} stages run over NCCL", p);
    return nullptr;
  }
  if (!parallel::CopyEngineTable::usable(group)) {
    spdlog::warn(
        "pp: --transfers copy-engine needs one process and peer access between all "
        "the GPUs; running over NCCL");
    return nullptr;
  }
  return std::make_unique<parallel::CopyEngineTable>(p);
}

// What a stage of the run is: its blocks, what they were balanced by, its communicators.
struct StageSetup {
  StageCosts balance;
  std::vector<int> stage_blocks;
  std::unique_ptr<parallel::StageEdges> edges;
};

// Stages balanced by measured time (not interleaved, whose chunks are equal): rank 0 times a
// layer (and its attention half), the embedding and the head on its GPU, and every rank splits
// by those figures.
StageSetup set_up_stage(const TrainingRun& run, Rank& self) {
  const bool timed = run.p > 1 && run.v == 1;
  StageSetup su;
  su.balance =
      timed ? agreed_stage_costs(
                  run.group, self.rank,
                  [&] { return measure_training_costs(run.s, self.device, self.stream->get()); })
            : training_flop_costs(run.s);
  su.stage_blocks = training_stage_blocks(run.s, run.p, run.sch, su.balance);
  if (self.rank == 0 && timed)
    spdlog::info("pp: training stages {} layers by {}", stage_layers_text(su.stage_blocks),
                 su.balance.describe());
  su.edges =
      std::make_unique<parallel::StageEdges>(run.group, self.rank, run.v > 1, run.s.nccl_ctas);
  return su;
}

// This stage's chunks: their first global block and their blocks.
void stage_chunks(const TrainingRun& run, int stage, const std::vector<int>& stage_blocks,
                  std::vector<int>& first, std::vector<int>& count) {
  if (run.v > 1) {
    const int per = 2 * (run.s.layers / (run.p * run.v));
    for (int c = 0; c < run.v; ++c) {
      first.push_back((c * run.p + stage) * per);
      count.push_back(per);
    }
    return;
  }
  int f = 0;
  for (int j = 0; j < stage; ++j) f += stage_blocks[static_cast<std::size_t>(j)];
  first.push_back(f);
  count.push_back(stage_blocks[static_cast<std::size_t>(stage)]);
}

// One stage's step along its order: per operation, the receive posted, the input taken, the
// forward or backward, the send; saved activations from the stage's pool, freed by the
// backward. With `mark`, events at each operation's moments (armed by arm_marks()).
class StepExecutor {
 public:
  StepExecutor(TrainStage& ts, StageLinks& links, std::vector<Op> order, const TrainingRun& run,
               int stage, int device)
      : ts_(ts),
        links_(links),
        order_(std::move(order)),
        p_(run.p),
        v_(run.v),
        stage_(stage),
        device_(device),
        bfirst_(device, ts.transfer_bytes()),
        tally_(device, sizeof(GemmCheckTally)),
        slabs_(static_cast<std::size_t>(run.v) * order_.size(), nullptr) {}

  const std::vector<Op>& order() const { return order_; }
  // One step on `cs`; with `check`, the stage's last backward checks its gradient GEMMs into
  // the tally (zeroed first).
  void run(cudaStream_t cs, bool mark, bool check);
  GemmCheckTally tally() const {
    GemmCheckTally t{};
    GPB_CUDA_CHECK(cudaMemcpy(&t, tally_.get(), sizeof t, cudaMemcpyDeviceToHost));
    return t;
  }
  // Events for every operation's marks (before a marked step).
  void arm_marks() {
    marks_.clear();
    for (std::size_t k = 0; k < order_.size() * kMarks; ++k) marks_.emplace_back(device_);
  }
  // The marked step's moments, seconds from `start`.
  std::vector<OpMarks> read_marks(const Event& start) const;

 private:
  enum Mark { kReady, kUsable, kEnd, kRecvBegin, kRecvEnd, kSendBegin, kSendEnd, kMarks };
  bool receives(const Op& op) const {
    const int k = op.chunk * p_ + stage_;
    return op.forward ? k > 0 : k < p_ * v_ - 1;
  }
  bool sends(const Op& op) const {
    const int k = op.chunk * p_ + stage_;
    return op.forward ? k < p_ * v_ - 1 : k > 0;
  }
  cudaEvent_t mark_event(std::size_t i, Mark k, bool mark) const {
    return mark ? marks_[i * kMarks + k].get() : nullptr;
  }
  void run_op(std::size_t i, cudaStream_t cs, bool mark, bool accumulate, GemmCheckTally* tally);

  TrainStage& ts_;
  StageLinks& links_;
  std::vector<Op> order_;
  int p_, v_, stage_, device_;
  // The gradient of the model's first chunk goes nowhere: its own buffer, so that the send
  // ring holds only what was sent.
  DeviceBuffer bfirst_, tally_;
  std::vector<unsigned char*> slabs_;  // per microbatch and chunk: its saved activations
  std::vector<Event> marks_;
};

void StepExecutor::run(cudaStream_t cs, bool mark, bool check) {
  if (check) GPB_CUDA_CHECK(cudaMemsetAsync(tally_.get(), 0, sizeof(GemmCheckTally), cs));
  std::size_t last_b = 0;
  for (std::size_t i = 0; i < order_.size(); ++i)
    if (!order_[i].forward) last_b = i;
  std::vector<bool> seen(static_cast<std::size_t>(v_), false);  // a backward of the chunk ran
  for (std::size_t i = 0; i < order_.size(); ++i) {
    const Op& op = order_[i];
    const bool accumulate = !op.forward && seen[static_cast<std::size_t>(op.chunk)];
    if (!op.forward) seen[static_cast<std::size_t>(op.chunk)] = true;
    run_op(i, cs, mark, accumulate, check && i == last_b ? tally_.as<GemmCheckTally>() : nullptr);
  }
  links_.join(cs);
}

void StepExecutor::run_op(std::size_t i, cudaStream_t cs, bool mark, bool accumulate,
                          GemmCheckTally* tally) {
  const Op& op = order_[i];
  const Way way = op.forward ? Way::Forward : Way::Backward;
  const std::size_t slot_id = static_cast<std::size_t>(op.mb * v_ + op.chunk);
  const bool in = receives(op), out = sends(op);
  TransferMarks tm;
  tm.usable = mark_event(i, kUsable, mark);
  tm.recv_begin = mark_event(i, kRecvBegin, mark);
  tm.recv_end = mark_event(i, kRecvEnd, mark);
  tm.send_begin = mark_event(i, kSendBegin, mark);
  tm.send_end = mark_event(i, kSendEnd, mark);
  unsigned char* slab = op.forward ? ts_.allocate(op.chunk, cs) : slabs_[slot_id];
  if (op.forward) slabs_[slot_id] = slab;
  const int in_slot = in ? links_.post_recv(way, tm) : -1;
  if (mark) marks_[i * kMarks + kReady].record(cs);
  const int out_slot = out ? links_.claim(way, cs) : -1;
  // The operation's input: received into the slab (forward) or into the gradient it works on
  // (backward: the send buffer it goes on from, or the first chunk's own).
  void* grad =
      op.forward ? nullptr : (out ? links_.send_buffer(Way::Backward, out_slot) : bfirst_.get());
  if (in)
    links_.take(way, in_slot, op.forward ? ts_.input_of(slab) : grad, cs, tm);
  else if (mark)
    marks_[i * kMarks + kUsable].record(cs);
  // Where a copy-engine send's link-waking copy may start.
  const cudaEvent_t near = out ? links_.near(way) : nullptr;
  if (op.forward) {
    ts_.forward(op.chunk, op.mb, slab, out ? links_.send_buffer(Way::Forward, out_slot) : nullptr,
                cs, near);
  } else {
    ts_.backward(op.chunk, slab, grad, cs, accumulate, tally, near);
    TrainStage::release(slab, cs);
    slabs_[slot_id] = nullptr;
  }
  if (mark) marks_[i * kMarks + kEnd].record(cs);
  if (out) links_.post_send(way, out_slot, cs, tm);
}

std::vector<OpMarks> StepExecutor::read_marks(const Event& start) const {
  std::vector<OpMarks> out(order_.size());
  for (std::size_t i = 0; i < order_.size(); ++i) {
    auto at = [&](Mark k) { return marks_[i * kMarks + k].seconds_since(start); };
    OpMarks& o = out[i];
    o.ready = at(kReady);
    o.usable = at(kUsable);
    o.end = at(kEnd);
    if (receives(order_[i])) {
      o.recv_begin = at(kRecvBegin);
      o.recv_end = at(kRecvEnd);
    }
    if (sends(order_[i])) {
      o.send_begin = at(kSendBegin);
      o.send_end = at(kSendEnd);
    }
  }
  return out;
}

// The checked step's verdict on every stage: the gradient GEMMs of the input linear of the
// first block of each stage's last backward against a reference, the weight gradients finite,
// and the last transfer each way equal on both sides of every edge.
void check_step(const TrainingRun& run, Rank& self, StepExecutor& ex, StageLinks& links,
                const TrainStage& ts, int edges, TrainingOutcome& o) {
  RankGroup& group = run.group;
  const int p = run.p, stage = self.rank;
  const cudaStream_t st = self.stream->get();
  ex.run(st, false, true);
  self.group->sync(self);
  const GemmCheckTally t = ex.tally();
  float ratio = 0;
  std::memcpy(&ratio, &t.max_error_ratio_bits, sizeof ratio);
  std::string why;
  if (t.checked == 0 || t.wrong > 0)
    why = fmt::format("stage {}: {} of {} gradient GEMM entries outside tolerance", stage, t.wrong,
                      t.checked);
  else if (!ts.gradients_finite())
    why = fmt::format("stage {}: a weight gradient is not finite", stage);
  const auto sent_f = group.all_gather(self.rank, links.last_digest(Way::Forward, true));
  const auto got_f = group.all_gather(self.rank, links.last_digest(Way::Forward, false));
  const auto sent_b = group.all_gather(self.rank, links.last_digest(Way::Backward, true));
  const auto got_b = group.all_gather(self.rank, links.last_digest(Way::Backward, false));
  for (int e = 0; e < edges && why.empty(); ++e) {
    const auto a = static_cast<std::size_t>(e), b = static_cast<std::size_t>((e + 1) % p);
    if (sent_f[a] != got_f[b])
      why = fmt::format("activations stage {} sent differ from what stage {} received", e,
                        (e + 1) % p);
    else if (sent_b[b] != got_b[a])
      why =
          fmt::format("gradients stage {} sent differ from what stage {} received", (e + 1) % p, e);
  }
  const auto bad = group.all_gather(self.rank, why.empty() ? 0.0 : 1.0);
  const auto worst_ratio = group.all_gather(self.rank, static_cast<double>(ratio));
  o.check_error = *std::max_element(worst_ratio.begin(), worst_ratio.end());
  if (std::any_of(bad.begin(), bad.end(), [](double b) { return b > 0; })) o.status = "failed";
  if (!why.empty()) o.note = why;
  if (o.status != "ok" && o.note.empty()) o.note = "a stage's checks failed (see its log)";
  if (!why.empty()) spdlog::error("pp: {}", why);
}

// One more step with events: every stage's marks gathered to rank 0, which builds the timeline,
// the transfers and the memory (saved activations' measured and expected peaks, fixed bytes).
void trace_step(const TrainingRun& run, Rank& self, StepExecutor& ex, TrainStage& ts,
                TrainingOutcome& o) {
  RankGroup& group = run.group;
  const cudaStream_t st = self.stream->get();
  ex.arm_marks();
  Event start(self.device);
  self.group->sync(self);
  ts.reset_pool_high();
  group.barrier();
  start.record(st);
  ex.run(st, true, false);
  self.group->sync(self);
  const std::vector<OpMarks> mine = ex.read_marks(start);
  // Every stage's marks (the same number of operations on every stage), in stage order.
  std::vector<std::vector<OpMarks>> all(static_cast<std::size_t>(run.p),
                                        std::vector<OpMarks>(mine.size()));
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const OpMarks& a = mine[i];
    for (double OpMarks::*f :
         {&OpMarks::ready, &OpMarks::usable, &OpMarks::end, &OpMarks::recv_begin,
          &OpMarks::recv_end, &OpMarks::send_begin, &OpMarks::send_end}) {
      const auto g = group.all_gather(self.rank, a.*f);
      for (std::size_t r = 0; r < all.size(); ++r) all[r][i].*f = g[r];
    }
  }
  const auto highs = group.all_gather(self.rank, static_cast<double>(ts.pool_high()));
  const auto expected =
      group.all_gather(self.rank, static_cast<double>(peak_slab_bytes(ts, ex.order())));
  const auto fixed = group.all_gather(self.rank, static_cast<double>(ts.fixed_bytes()));
  if (self.rank != 0) return;
  TransferTotals totals;
  o.timeline = measured_timeline(run.sch, run.p, o.m, run.v, all, run.table != nullptr, totals);
  o.transfer_s = totals.transfer_s;
  o.transfer_exposed_s = totals.exposed_s;
  o.transfers = totals.hops;
  for (std::size_t j = 0; j < highs.size(); ++j) {
    o.peak_saved.push_back(static_cast<std::uint64_t>(highs[j]));
    o.expected_saved.push_back(static_cast<std::uint64_t>(expected[j]));
    o.memory_per_gpu = std::max(o.memory_per_gpu, static_cast<std::uint64_t>(fixed[j] + highs[j]));
  }
}

// The same transfer alone, stage 0 to 1, through the core's measurement: an NCCL send/recv
// (the slower side's time), and where the GPUs allow it the copy engines' peer copy (stage 0's).
void time_transfer_alone(const TrainingRun& run, Rank& self, StageLinks& links,
                         TrainingOutcome& o) {
  if (run.p < 2) return;
  const int stage = self.rank;
  o.transfer_alone_s = run.group
                           .measure(
                               self,
                               [&](cudaStream_t s2, int) {
                                 if (stage == 0) links.nccl_send(Way::Forward, 0, s2);
                                 if (stage == 1) links.nccl_recv(Way::Forward, 0, s2);
                               },
                               run.mo)
                           .median_s();
  if (!run.peer_copy) return;
  // Stage 1's receive buffer, to stage 0.
  auto peer = stage == 1 ? reinterpret_cast<std::uintptr_t>(links.recv_buffer(Way::Forward, 0))
                         : std::uintptr_t{0};
  run.group.broadcast(self.rank, &peer, sizeof peer, 1);
  MeasureOptions first = run.mo;
  first.rank_time = MeasureOptions::RankTime::First;
  const int dev1 = run.group.devices()[1];
  o.p2p_copy_s =
      run.group
          .measure(
              self,
              [&](cudaStream_t s2, int) {
                if (stage == 0)
                  GPB_CUDA_CHECK(cudaMemcpyPeerAsync(
                      reinterpret_cast<void*>(peer), dev1, links.send_buffer(Way::Forward, 0),
                      self.device, static_cast<std::size_t>(o.transfer_bytes), s2));
              },
              first)
          .median_s();
}

// The step's FLOPs over every stage (interleaved chunks are whole layers: where they start does
// not change their work).
double step_flops(const TrainingRun& run, const std::vector<int>& stage_blocks, int m,
                  std::int64_t seqs) {
  double flops = 0;
  for (int j = 0, first = 0; j < run.p; ++j) {
    const int blocks = stage_blocks[static_cast<std::size_t>(j)];
    const StageWork w =
        stage_work_blocks(run.s.model, run.v > 1 ? 0 : first, blocks, j == run.p - 1, seqs,
                          run.s.seq_len, static_cast<int>(act_bytes(run.dtype)));
    flops += m * (w.forward_flops + w.backward_flops);
    first += blocks;
  }
  return flops;
}

// A first step over NCCL before the copy engines carry any. Kernels load on first launch, and
// loading one may wait for the whole GPU: over the copy engines that GPU may be waiting on a
// flag that only the other stage's next peer copy raises, while that stage's thread waits on
// this one's context, a deadlock. Over NCCL the step also builds the attention plans, and as a
// checked step it loads the check's kernels. Then the rings start again on both sides.
void warm_over_nccl(const TrainingRun& run, Rank& self, StepExecutor& ex, StageLinks& links) {
  links.set_copy_engines(false);
  ex.run(self.stream->get(), false, true);
  run.group.sync(self);
  run.group.barrier();  // every stage done with its rings before the copy engines fill them
  links.restart();
  links.set_copy_engines(true);
}

// One microbatch count on this stage: the outcome (complete on rank 0).
TrainingOutcome run_point(const TrainingRun& run, Rank& self, StageSetup& su, int m) {
  const int p = run.p, stage = self.rank;
  const cudaStream_t st = self.stream->get();
  const std::int64_t seqs = run.s.batch / m;
  TrainingOutcome o;
  o.schedule = run.sch;
  o.p = p;
  o.m = m;
  o.v = run.v;
  o.micro_sequences = seqs;
  o.stage_blocks = su.stage_blocks;
  o.nccl_ctas = run.s.nccl_ctas;
  o.balance = su.balance;
  o.bubble_theory = theory_bubble(run.sch, p, m, run.v);
  if (self.rank == 0)
    spdlog::info("pp: training, {}, {} stages, {} microbatches of {} sequences", to_string(run.sch),
                 p, m, seqs);
  std::vector<int> first, count;
  stage_chunks(run, stage, su.stage_blocks, first, count);
  TrainStage ts(train_shape(run.s), self.device, first, count, stage == 0, stage == p - 1, seqs);
  std::vector<Op> order = stage_order(run.sch, p, m, run.v, stage);
  // Memory, before anything is allocated, agreed by every stage: the stage, its links' rings
  // and the executor's copy of a received gradient.
  const std::uint64_t need = ts.planned_bytes(m, peak_slab_bytes(ts, order)) +
                             StageLinks::planned_bytes(ts.transfer_bytes(), run.table != nullptr) +
                             ts.transfer_bytes();
  if (std::string why = agreed_memory_check(run.group, self.rank, need); !why.empty()) {
    o.status = "skipped";
    o.note = std::move(why);
    return o;
  }
  ts.build(m, st);
  o.transfer_bytes = static_cast<double>(ts.transfer_bytes());
  StageLinks links(*su.edges, stage, (stage + p - 1) % p, (stage + 1) % p, self.device,
                   ts.transfer_bytes(), run.dtype, run.table.get(), run.group);
  o.transport = links.transport();
  StepExecutor ex(ts, links, std::move(order), run, stage, self.device);
  if (run.table) warm_over_nccl(run, self, ex, links);
  check_step(run, self, ex, links, ts, su.edges->edges(), o);
  if (o.status == "ok")
    o.step = run.group.measure(
        self, [&](cudaStream_t s2, int) { ex.run(s2, false, false); }, run.mo);
  spdlog::debug("pp: stage {}, m {}: timed ({} steps)", stage, m, o.step.samples.size());
  trace_step(run, self, ex, ts, o);
  if (self.rank == 0) o.flops = step_flops(run, su.stage_blocks, m, seqs);
  time_transfer_alone(run, self, links, o);
  self.group->sync(self);
  run.group.barrier();  // every stage done with its buffers before the next microbatch count
  return o;
}

}  // namespace

std::vector<TrainingOutcome> run_training(Context& ctx, const Settings& s, int p, Schedule sch,
                                          RankGroup& group) {
  if (group.size() != p)
    throw InputError(fmt::format("--pp: {} ranks for {} stages", group.size(), p));
  const bool peer_copy = p > 1 && !group.is_mpi() &&
                         PeerAccess(group.devices()).pair(group.devices()[0], group.devices()[1]);
  const TrainingRun run{s,
                        sch,
                        p,
                        sch == Schedule::Interleaved ? s.chunks : 1,
                        s.dtype == "fp16" ? ActDtype::F16 : ActDtype::BF16,
                        model::engine_step_options(ctx.common()),
                        group,
                        copy_engine_table(s, p, group),
                        peer_copy};
  std::vector<TrainingOutcome> out;
  group.run([&](Rank& self) {
    StageSetup su = set_up_stage(run, self);
    for (int m : s.microbatches) {
      if (group.any(self.rank, Context::interrupted())) break;  // all stages stop together
      TrainingOutcome o = run_point(run, self, su, m);
      if (self.rank == 0) out.push_back(std::move(o));
    }
  });
  return out;
}

}  // namespace gpubench::pp
