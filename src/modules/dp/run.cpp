// `gpubench dp` on the GPUs: one strategy on a group of ranks (a thread per GPU, or a process
// per GPU under mpirun/srun). In order: the flat buffer's plan and the memory it needs (agreed
// by every rank before anything is allocated), one GPU's reference step over the concatenated
// batch (on the first GPU, sampled), the replicas, one checked step against it, the timed steps,
// the same step without communication, and the collectives alone.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/nccl.hpp"
#include "gpubench/model/observe.hpp"
#include "gpubench/modules/dp/replica.hpp"
#include "gpubench/parallel/layout.hpp"

namespace gpubench::dp {

namespace {

constexpr int kSamples = 64;  // per parameter, evenly spread

// The flat elements the checks read: kSamples of every parameter.
std::vector<std::int64_t> sample_positions(const ParamPlan& plan,
                                           const std::vector<model::TrainParam>& params,
                                           std::vector<std::int64_t>* within = nullptr) {
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < params.size(); ++i)
    for (int j = 0; j < kSamples; ++j) {
      const std::int64_t at = (2 * j + 1) * params[i].elems() / (2 * kSamples);
      out.push_back(plan.offset[i] + at);
      if (within) within->push_back(at);
    }
  return out;
}

// One GPU's step over the whole batch (every rank's sequences as microbatches, the gradients
// accumulated): its summed gradient and the initial weight at every sample, [grad, weight] per
// sample; empty when the GPU cannot hold it. Made on rank 0's GPU, handed to every rank.
std::vector<double> reference_samples(const Settings& s, const ParamPlan& plan,
                                      const std::vector<model::TrainParam>& params,
                                      std::int64_t batch, Rank& self, RankGroup& group) {
  const int n = group.size();
  std::vector<std::int64_t> within;
  const std::size_t count = sample_positions(plan, params, &within).size();
  std::vector<double> out(2 * count + 1, 0.0);  // out[0]: 1 when made
  // Rank 0 always reaches the broadcast: the others wait in it.
  if (self.rank == 0) {
    try {
      model::TrainStage ref(s.shape(), self.device, {0}, {2 * s.layers}, true, true, batch);
      std::size_t free_b = 0, total_b = 0;
      GPB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
      const std::uint64_t need = ref.planned_bytes(n, ref.slab_bytes(0)) + ref.transfer_bytes();
      if (need + parallel::kMemoryReserve <= free_b) {
        const cudaStream_t st = self.stream->get();
        ref.build(n, st);
        DeviceBuffer dgrad(self.device, ref.transfer_bytes());
        for (int mb = 0; mb < n; ++mb) {
          unsigned char* slab = ref.allocate(0, st);
          ref.forward(0, mb, slab, nullptr, st);
          ref.backward(0, slab, dgrad.get(), st, mb > 0, nullptr);
          model::TrainStage::release(slab, st);
        }
        self.group->sync(self);
        const std::int64_t eb = static_cast<std::int64_t>(act_bytes(s.dtype));
        for (std::size_t k = 0; k < count; ++k) {
          const model::TrainLinear& t = ref.param(static_cast<int>(k / kSamples));
          const std::int64_t off = within[k] * eb;
          out[1 + 2 * k] =
              model::to_host_values(static_cast<const char*>(t.grad) + off, 1, s.dtype).front();
          out[2 + 2 * k] =
              model::to_host_values(static_cast<const char*>(t.w) + off, 1, s.dtype).front();
        }
        out[0] = 1;
      }
    } catch (const GpuError& e) {
      spdlog::warn("dp: no one-GPU reference step ({}): the ranks are checked against each other",
                   e.what());
      out.assign(out.size(), 0.0);
    }
  }
  group.broadcast(self.rank, out.data(), out.size() * sizeof(double));
  if (out[0] == 0) return {};
  out.erase(out.begin());
  return out;
}

// What a rank's samples say against the reference.
struct Tallies {
  double grad_err2 = 0, grad_ref2 = 0, moment_err2 = 0, moment_ref2 = 0, mismatched = 0,
         compared = 0;
  double weights_off = 0;  // sampled weights that are not their master weight, rounded
  bool finite = true;
};

Tallies compare_samples(const Settings& s, const Replica& rep,
                        const std::vector<std::int64_t>& positions, const std::vector<double>& ref,
                        int ranks) {
  Tallies t;
  const AdamWTerms terms = adamw_terms(s.adamw, 1);
  for (std::size_t k = 0; k < positions.size(); ++k) {
    const Replica::Sample got = rep.sample(positions[k]);
    if (!got.mine) continue;  // another rank's shard
    if (!std::isfinite(got.grad) || !std::isfinite(got.master)) t.finite = false;
    // The weight the next step computes with (zero1/zero2: all-gathered from its owner) is the
    // master rounded to nearest in the activations' type: within half an ulp, at most 2^-8 of
    // it for bf16 (fp16 finer), or half of fp16's subnormal spacing (2^-25) near zero.
    if (std::fabs(got.weight - got.master) >
        std::max(std::ldexp(std::fabs(got.master), -8), std::ldexp(1.0, -25)))
      t.weights_off += 1;
    if (ref.empty()) continue;
    const double g = ref[2 * k], w0 = ref[2 * k + 1];
    t.grad_err2 += (got.grad - g) * (got.grad - g);
    t.grad_ref2 += g * g;
    float w = static_cast<float>(w0), m = 0, v = 0;
    adamw_update(w, m, v, static_cast<float>(g / ranks), s.adamw, terms);
    // Step 1's update is about lr x sign(g) whatever the gradient's scale; the first moment,
    // (1 - beta1) x g / ranks, is not: it shows the gradient reached AdamW averaged.
    t.moment_err2 += (got.moment - m) * (got.moment - m);
    t.moment_ref2 += static_cast<double>(m) * m;
    t.mismatched += std::fabs((got.master - w0) - (w - w0)) > kUpdateSlack * s.adamw.lr ? 1 : 0;
    t.compared += 1;
  }
  return t;
}

double sum(const std::vector<double>& v) {
  double total = 0;
  for (double x : v) total += x;
  return total;
}

// Step 1 from the shared initial weights, checked: the gradient GEMMs on the way, every sampled
// gradient and master weight finite, each sample's weight (all-gathered where sharded) its
// master rounded, every sample compared by its owner(s), the reduced gradients against the
// reference, AdamW's first moments and updates against those from the reference gradient, the
// weights alike on every rank (not fsdp, whose ranks hold their shards only).
void checked_step(const Settings& s, Strategy k, Replica& rep, const std::vector<double>& ref,
                  const std::vector<std::int64_t>& positions, Rank& self, RankGroup& group,
                  Outcome& o) {
  const cudaStream_t st = self.stream->get();
  DeviceBuffer tally(self.device, sizeof(GemmCheckTally));
  GPB_CUDA_CHECK(cudaMemsetAsync(tally.get(), 0, tally.bytes(), st));
  rep.step(st, tally.as<GemmCheckTally>());
  self.group->sync(self);
  GemmCheckTally gt{};
  GPB_CUDA_CHECK(cudaMemcpy(&gt, tally.get(), sizeof gt, cudaMemcpyDeviceToHost));
  const Tallies t = compare_samples(s, rep, positions, ref, group.size());
  const double gemm_bad = gt.checked == 0 || gt.wrong > 0 ? 1 : 0;
  const double grad_err2 = sum(group.all_gather(self.rank, t.grad_err2));
  const double grad_ref2 = sum(group.all_gather(self.rank, t.grad_ref2));
  const double moment_err2 = sum(group.all_gather(self.rank, t.moment_err2));
  const double moment_ref2 = sum(group.all_gather(self.rank, t.moment_ref2));
  const double mismatched = sum(group.all_gather(self.rank, t.mismatched));
  const double compared = sum(group.all_gather(self.rank, t.compared));
  const double not_finite = sum(group.all_gather(self.rank, t.finite ? 0.0 : 1.0));
  const double weights_off = sum(group.all_gather(self.rank, t.weights_off));
  const double gemm = sum(group.all_gather(self.rank, gemm_bad));
  // Every bit of the state every rank holds whole (the halves of a 64-bit hash are exact in a
  // double).
  const std::uint64_t hash = rep.state_hash(st);
  const auto high = group.all_gather(self.rank, static_cast<double>(hash >> 32));
  const auto low = group.all_gather(self.rank, static_cast<double>(hash & 0xffffffffull));
  o.ranks_agree = true;
  for (std::size_t r = 1; r < high.size(); ++r)
    o.ranks_agree = o.ranks_agree && high[r] == high[0] && low[r] == low[0];
  o.grad_error = grad_ref2 > 0 ? std::sqrt(grad_err2 / grad_ref2) : 0;
  o.update_mismatch = compared > 0 ? mismatched / compared : 0;
  o.moment_error = moment_ref2 > 0 ? std::sqrt(moment_err2 / moment_ref2) : 0;
  std::string why;
  if (gemm > 0)
    why = "a gradient GEMM's entries were outside tolerance";
  else if (not_finite > 0)
    why = "a gradient or master weight is not finite";
  else if (weights_off > 0)
    why = fmt::format(
        "{:.0f} sampled weights differ from their master weights after the step (the update "
        "or its all-gather put them elsewhere)",
        weights_off);
  else if (const double want =
               static_cast<double>(positions.size()) * (k == Strategy::Ddp ? group.size() : 1);
           !ref.empty() && compared != want)
    // ddp: every rank holds every sample; else each sample's owner alone.
    why = fmt::format(
        "{:.0f} sampled elements were compared with one GPU's step, not {:.0f}: a shard no rank "
        "holds, or one that two do",
        compared, want);
  else if (!o.ranks_agree)
    why = k == Strategy::Ddp ? "the ranks' weights or master weights differ after the step"
                             : "the ranks' weights differ after the step";
  else if (!ref.empty() && o.grad_error > kGradTolerance)
    why = fmt::format("reduced gradients differ from one GPU's by {:.3g} (relative L2 > {})",
                      o.grad_error, kGradTolerance);
  else if (!ref.empty() && o.moment_error > kGradTolerance)
    why = fmt::format(
        "AdamW's first moments differ from one GPU's step by {:.3g} (relative L2 > {}): the "
        "gradient reached the optimizer at another scale",
        o.moment_error, kGradTolerance);
  else if (!ref.empty() && o.update_mismatch > kUpdateTolerance)
    why = fmt::format("{:.2f}% of the updates differ from one GPU's step (more than {}% allowed)",
                      100 * o.update_mismatch, 100 * kUpdateTolerance);
  if (!why.empty()) {
    o.status = "failed";
    o.note = why;
  } else if (ref.empty()) {
    o.status = "unchecked";
    o.note = "one GPU cannot hold the reference step; ranks checked against each other only";
  }
}

std::uint64_t used_bytes() {
  std::size_t free_b = 0, total_b = 0;
  GPB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return total_b - free_b;
}

// One rank's part of run_strategy, into its own outcome.
// `known`: the reference when an earlier point made it; else it is made and, where this thread
// is the process's first rank, left in `made`.
void run_rank(const Settings& s, Strategy k, std::int64_t batch, std::int64_t eb,
              const MeasureOptions& mo, const Faults& faults, const std::vector<double>* known,
              std::vector<double>& made, Rank& self, RankGroup& group, Outcome& o) {
  const cudaStream_t st = self.stream->get();
  const model::StageWork w = model::stage_work_blocks(s.model, 0, 2 * s.layers, true, batch,
                                                      s.seq_len, static_cast<int>(eb));
  o.flops = w.forward_flops + w.backward_flops;
  std::vector<model::TrainParam> params;
  ParamPlan plan;
  {
    // The replica's model before anything is allocated: its parameters, what it will hold.
    const model::TrainStage probe(s.shape(), self.device, {0}, {2 * s.layers}, true, true, batch);
    params = probe.params();
    plan = plan_params(params, static_cast<std::int64_t>(o.bucket_bytes) / eb, group.size());
    o.planned = Replica::plan_memory(s, k, plan, probe);
  }
  o.buckets = static_cast<int>(plan.buckets.size());
  const std::vector<double> ref =
      known ? *known : reference_samples(s, plan, params, batch, self, group);
  if (!known && (self.rank == 0 || group.is_mpi())) made = ref;
  if (std::string why = parallel::agreed_memory_check(group, self.rank, o.planned.total());
      !why.empty()) {
    o.status = "skipped";
    o.note = std::move(why);
    return;
  }
  ncclUniqueId id{};
  if (self.rank == 0) GPB_NCCL_CHECK(ncclGetUniqueId(&id));
  group.broadcast(self.rank, &id, sizeof id);
  NcclComm nccl(id, group.size(), self.rank);
  Collectives comm(nccl.get(), self.rank, group.size(), s.dtype);
  std::int64_t largest = 0;
  for (const Bucket& b : plan.buckets) largest = std::max(largest, b.elems);
  comm.warm(group, self, largest);  // NCCL's buffers set up before the memory is counted
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
  const std::uint64_t before = used_bytes();
  Replica rep(s, k, plan, batch, comm, self.device, st, faults);
  const NcclAbortOnThrow abort_first(nccl);  // a failure aborts before the replica's buffers go
  checked_step(s, k, rep, ref, sample_positions(plan, params), self, group, o);
  if (o.status == "failed") return;
  o.step = group.measure(
      self, [&](cudaStream_t s2, int) { rep.step(s2); }, mo);
  const std::uint64_t after = used_bytes();
  comm.skip = true;
  o.compute_only = group.measure(
      self, [&](cudaStream_t s2, int) { rep.step(s2); }, mo);
  comm.skip = false;
  o.comm_alone = group.measure(
      self, [&](cudaStream_t s2, int) { rep.collectives_alone(s2); }, mo);
  // One more step, traced on every rank, read on rank 0.
  rep.arm_trace();
  Event start(self.device);
  self.group->sync(self);
  group.barrier();
  start.record(st);
  rep.step(st);
  self.group->sync(self);
  std::vector<TraceSpan> spans = rep.trace(start);
  if (self.rank == 0) o.trace = std::move(spans);
  const auto used = group.all_gather(self.rank, static_cast<double>(after - before));
  o.measured_bytes = static_cast<std::uint64_t>(*std::max_element(used.begin(), used.end()));
  self.group->sync(self);
  group.barrier();  // every rank done with its buffers before the communicator goes
}

}  // namespace

Outcome run_strategy(Context& ctx, const Settings& s, Strategy k, std::int64_t batch,
                     std::uint64_t bucket_bytes, RankGroup& group, const Faults& faults,
                     References* refs) {
  Outcome first;
  first.strategy = k;
  first.gpus = group.size();
  first.batch = batch;
  first.bucket_bytes = k == Strategy::Fsdp ? 0 : bucket_bytes;
  const MeasureOptions mo = model::engine_step_options(ctx.common());
  const std::int64_t eb = static_cast<std::int64_t>(act_bytes(s.dtype));
  const auto key = std::make_pair(group.size(), batch);
  const std::vector<double>* known = refs && refs->count(key) ? &refs->at(key) : nullptr;
  std::vector<double> made;
  group.run([&](Rank& self) {
    Outcome o = first;  // every rank's own; rank 0's is returned
    run_rank(s, k, batch, eb, mo, faults, known, made, self, group, o);
    if (self.rank == 0) first = o;
  });
  if (refs && !known) (*refs)[key] = std::move(made);
  return first;
}

}  // namespace gpubench::dp
