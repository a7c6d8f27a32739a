// `gpubench pp` on the GPUs, inference: a batch of prompts in microbatches through p pipeline
// stages (one GPU and one thread each, or one process each under MPI), stage to stage over NCCL
// send/recv.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/gemm.hpp"
#include "gpubench/core/stats.hpp"
#include "gpubench/model/cost.hpp"
#include "gpubench/model/observe.hpp"
#include "gpubench/model/transformer.hpp"
#include "gpubench/modules/pp/pp.hpp"
#include "gpubench/parallel/collectives.hpp"
#include "gpubench/parallel/stage_links.hpp"

namespace gpubench::pp {

namespace {

// Pipeline logits against the whole model's, relative L2: stages run the same kernels on the
// same weights, so only the handing over of bf16 hidden states could differ (it must not).
constexpr double kCheckLimit = 0.05;
constexpr std::uint64_t kTokenSeed = 31;   // microbatch mb's prompts: seed kTokenSeed + mb
constexpr std::uint64_t kDecodeSeed = 71;  // microbatch mb's decoded token: kDecodeSeed + mb

ActDtype dtype_of(const Settings& s) {
  return s.dtype == "fp16" ? ActDtype::F16 : ActDtype::BF16;
}

model::EngineOptions engine_options(const Settings& s, std::int64_t sequences) {
  model::EngineOptions eo;
  eo.dtype = dtype_of(s);
  eo.max_batch = static_cast<int>(sequences);
  eo.max_tokens = static_cast<int>(s.seq_len);
  eo.max_context = static_cast<int>(s.seq_len) + 1;  // the prompt and one decoded token
  return eo;
}

}  // namespace

StageCosts inference_flop_costs(const Settings& s) {
  // Every decoder layer costs the same; the last stage also runs the final norm and the LM head
  // (for the last position of each sequence), the first the embedding (a lookup: nothing).
  const model::ModelCost cost =
      model::model_cost(s.model, model::Phase::Prefill, 1, s.seq_len, 0, 2);
  StageCosts c;
  for (const auto& op : cost.outside_layers) c.head += op.flops;
  c.layer = cost.total.flops > 0 ? (cost.total.flops - c.head) / cost.num_layers : 1.0;
  return c;
}

std::vector<int> inference_stage_layers(const Settings& s, int p) {
  return stages_from_costs(inference_flop_costs(s), s.layers, p);
}

StageCosts measure_inference_costs(const Settings& s, int device, cudaStream_t stream) {
  // Not through the core's measurement: the parts are the engine's own op spans of one prefill.
  constexpr int kRuns = 5;
  model::EngineOptions eo = engine_options(s, 1);
  eo.layers = std::min(2, s.layers);
  model::Transformer engine(s.model, eo, device);
  const int n = static_cast<int>(s.seq_len);
  const std::int32_t* ids = engine.tokens(1, n, kTokenSeed, stream);
  engine.prefill(ids, 1, n, stream);  // warm: plans and kernels
  model::OpSpans spans(device);
  std::vector<double> layer, embed, head;
  for (int r = 0; r < kRuns; ++r) {
    engine.set_observer(&spans);
    engine.prefill(ids, 1, n, stream);
    engine.set_observer(nullptr);
    double l = 0, e = 0, h = 0;
    for (const model::OpSpan& sp : spans.collect()) {
      if (sp.layer >= 0)
        l += sp.seconds;
      else if (sp.op == "embedding")
        e += sp.seconds;
      else
        h += sp.seconds;  // final norm and LM head
    }
    layer.push_back(l / eo.layers);
    embed.push_back(e);
    head.push_back(h);
  }
  StageCosts c;
  c.layer = compute_stats(layer).median;
  c.embed = compute_stats(embed).median;
  c.head = compute_stats(head).median;
  c.measured = true;
  return c;
}

void share_reference(RankGroup& group, int rank, ReferenceLogits& reference,
                     const std::vector<ReferenceKey>& keys, std::size_t elems) {
  if (!group.is_mpi()) return;
  for (const ReferenceKey& key : keys) {
    std::vector<double> values = rank == 0 ? reference.at(key) : std::vector<double>(elems);
    group.broadcast(rank, values.data(), values.size() * sizeof(double));
    reference[key] = std::move(values);
  }
}

namespace {

// What the stages of an inference run share.
struct InferenceRun {
  const Settings& s;
  int p = 1;
  ActDtype dtype = ActDtype::BF16;
  MeasureOptions mo;
  RankGroup& group;
  ReferenceLogits& reference;
};

// A stage of the run: its layers, what they were balanced by, its link to its neighbours.
struct StageSetup {
  StageCosts balance;
  std::vector<int> layers;
  int first_layer = 0;
  std::unique_ptr<parallel::StagePipe> pipe;
};

// Stages balanced by measured time: rank 0 times a layer, the embedding and the head on its
// GPU, and every rank splits the model by those same figures.
StageSetup set_up_stage(const InferenceRun& run, Rank& self) {
  StageSetup su;
  su.pipe = std::make_unique<parallel::StagePipe>(run.group, self.rank, run.s.nccl_ctas);
  su.balance =
      run.p > 1
          ? agreed_stage_costs(
                run.group, self.rank,
                [&] { return measure_inference_costs(run.s, self.device, self.stream->get()); })
          : inference_flop_costs(run.s);
  su.layers = stages_from_costs(su.balance, run.s.layers, run.p);
  if (self.rank == 0 && run.p > 1)
    spdlog::info("pp: inference stages {} by {}", fmt::join(su.layers, "/"), su.balance.describe());
  for (int j = 0; j < self.rank; ++j) su.first_layer += su.layers[static_cast<std::size_t>(j)];
  return su;
}

bool has_reference(const InferenceRun& run, std::int64_t seqs) {
  return run.reference.count(std::make_tuple(seqs, run.s.seq_len, 0)) > 0;
}

// What this stage is about to allocate: its engine with every microbatch's KV cache, the last
// stage's logits of every microbatch, the first stage's prompts, and on rank 0 first the whole
// model for the reference (built and freed before).
std::uint64_t stage_need(const InferenceRun& run, Rank& self, const model::EngineOptions& eo,
                         std::int64_t seqs, int m) {
  const Settings& s = run.s;
  const std::size_t logit_bytes =
      static_cast<std::size_t>(seqs) * s.model.vocab_size * act_bytes(run.dtype);
  const std::size_t ws = gemm_workspace_bytes(compute_capability_major(self.device));
  std::uint64_t need = model::engine_memory(s.model, eo, ws).total() +
                       (self.rank == run.p - 1 ? logit_bytes * m : 0) +
                       (self.rank == 0 ? static_cast<std::uint64_t>(s.batch) * s.seq_len * 4 : 0);
  if (self.rank == 0 && !has_reference(run, seqs)) {
    model::EngineOptions whole = engine_options(s, seqs);
    whole.layers = s.layers;
    need = std::max<std::uint64_t>(need, model::engine_memory(s.model, whole, ws).total());
  }
  return need;
}

// The whole model's logits of every microbatch, prefill and the decode step after it, once per
// microbatch size (they are made together), on rank 0's GPU, built and freed before the stages
// take their memory; then shared with every rank.
void make_reference(const InferenceRun& run, Rank& self, std::int64_t seqs, int m) {
  const Settings& s = run.s;
  const cudaStream_t st = self.stream->get();
  const int b = static_cast<int>(seqs), n = static_cast<int>(s.seq_len);
  const std::size_t logit_elems = static_cast<std::size_t>(seqs) * s.model.vocab_size;
  if (self.rank == 0 && !has_reference(run, seqs)) {
    model::EngineOptions whole_eo = engine_options(s, seqs);
    whole_eo.layers = s.layers;
    model::Transformer whole(s.model, whole_eo, self.device);
    for (int mb = 0; mb < m; ++mb) {
      whole.prefill(whole.tokens(b, n, kTokenSeed + mb, st), b, n, st);
      self.group->sync(self);
      run.reference[std::make_tuple(seqs, s.seq_len, mb)] =
          model::to_host_values(whole.logits(), logit_elems, run.dtype);
      // The decode step after it: the logits of the prompt plus one token (key seq_len + 1).
      whole.decode(whole.tokens(b, 1, kDecodeSeed + mb, st), b, n, st);
      self.group->sync(self);
      run.reference[std::make_tuple(seqs, s.seq_len + 1, mb)] =
          model::to_host_values(whole.logits(), logit_elems, run.dtype);
    }
  }
  run.group.barrier();
  std::vector<ReferenceKey> keys;
  for (int mb = 0; mb < m; ++mb)
    for (std::int64_t len : {s.seq_len, s.seq_len + 1}) keys.emplace_back(seqs, len, mb);
  share_reference(run.group, self.rank, run.reference, keys, logit_elems);
}

// One stage's engine (holding every microbatch's KV cache, microbatch mb's from sequence
// mb x seqs on, so that decode can follow the prefill microbatch by microbatch), its inputs
// (the first stage's prompts and decoded tokens, a buffer per microbatch) and the last stage's
// logits of every microbatch, and the steps through it.
class StageSteps {
 public:
  StageSteps(const InferenceRun& run, Rank& self, StageSetup& su, const model::EngineOptions& eo,
             std::int64_t seqs, int m);
  model::Transformer& engine() { return engine_; }
  // Every microbatch in order: receive, prefill, send; with `marks` (3 per microbatch), events
  // at each one's receive end, forward end and send end.
  void prefill(cudaStream_t s2, bool keep_logits, std::vector<Event>* marks);
  // One token for every sequence at context seq_len, microbatch by microbatch.
  void decode(cudaStream_t s2, bool keep_logits);
  // The last stage's kept logits against the whole model's (reference key: the sequence length
  // they follow), the worst relative error; 0 on the other stages.
  double worst_error(std::int64_t key_len) const;

 private:
  // Stage 0's `per` tokens of every microbatch from seeds seed + mb, a buffer each (the
  // engine's token buffer is reused).
  void keep_tokens(std::vector<DeviceBuffer>& bufs, std::vector<const std::int32_t*>& ptrs, int per,
                   std::uint64_t seed, cudaStream_t st);
  void keep_logits(int mb, cudaStream_t s2);

  const InferenceRun& run_;
  StageSetup& su_;
  int stage_, device_, m_, b_, n_;
  std::int64_t seqs_;
  std::size_t logit_elems_, logit_bytes_;
  model::Transformer engine_;
  std::vector<DeviceBuffer> id_bufs_, next_bufs_;
  std::vector<const std::int32_t*> ids_, next_;
  DeviceBuffer logits_;
};

StageSteps::StageSteps(const InferenceRun& run, Rank& self, StageSetup& su,
                       const model::EngineOptions& eo, std::int64_t seqs, int m)
    : run_(run),
      su_(su),
      stage_(self.rank),
      device_(self.device),
      m_(m),
      b_(static_cast<int>(seqs)),
      n_(static_cast<int>(run.s.seq_len)),
      seqs_(seqs),
      logit_elems_(static_cast<std::size_t>(seqs) * run.s.model.vocab_size),
      logit_bytes_(logit_elems_ * act_bytes(run.dtype)),
      engine_(run.s.model, eo, self.device),
      ids_(static_cast<std::size_t>(m), nullptr),
      next_(static_cast<std::size_t>(m), nullptr),
      logits_(self.device, stage_ == run.p - 1 ? logit_bytes_ * m : 16) {
  parallel::wait_with_group(engine_, run.group);  // behind the transfers: ends if a peer failed
  if (stage_ != 0) return;
  keep_tokens(id_bufs_, ids_, n_, kTokenSeed, self.stream->get());
  keep_tokens(next_bufs_, next_, 1, kDecodeSeed, self.stream->get());
}

void StageSteps::keep_tokens(std::vector<DeviceBuffer>& bufs,
                             std::vector<const std::int32_t*>& ptrs, int per, std::uint64_t seed,
                             cudaStream_t st) {
  const std::size_t bytes = static_cast<std::size_t>(b_) * per * sizeof(std::int32_t);
  for (int mb = 0; mb < m_; ++mb) {
    const std::int32_t* t = engine_.tokens(b_, per, seed + mb, st);
    bufs.emplace_back(device_, bytes);
    GPB_CUDA_CHECK(cudaMemcpyAsync(bufs.back().get(), t, bytes, cudaMemcpyDeviceToDevice, st));
    ptrs[static_cast<std::size_t>(mb)] = bufs.back().as<std::int32_t>();
  }
}

void StageSteps::keep_logits(int mb, cudaStream_t s2) {
  GPB_CUDA_CHECK(cudaMemcpyAsync(logits_.as<unsigned char>() + mb * logit_bytes_, engine_.logits(),
                                 logit_bytes_, cudaMemcpyDeviceToDevice, s2));
}

void StageSteps::prefill(cudaStream_t s2, bool keep_logits, std::vector<Event>* marks) {
  const std::size_t elems =
      static_cast<std::size_t>(seqs_ * run_.s.seq_len * run_.s.model.hidden_size);
  const int p = run_.p;
  for (int mb = 0; mb < m_; ++mb) {
    if (stage_ > 0) su_.pipe->recv_from_previous(engine_.input_hidden(), elems, run_.dtype, s2);
    if (marks) (*marks)[static_cast<std::size_t>(3 * mb)].record(s2);
    engine_.prefill(ids_[static_cast<std::size_t>(mb)], b_, n_, s2, mb * b_);
    if (marks) (*marks)[static_cast<std::size_t>(3 * mb + 1)].record(s2);
    if (stage_ < p - 1) su_.pipe->send_to_next(engine_.hidden(), elems, run_.dtype, s2);
    if (marks) (*marks)[static_cast<std::size_t>(3 * mb + 2)].record(s2);
    if (keep_logits && stage_ == p - 1) this->keep_logits(mb, s2);
  }
}

void StageSteps::decode(cudaStream_t s2, bool keep_logits) {
  const std::size_t elems = static_cast<std::size_t>(seqs_ * run_.s.model.hidden_size);
  const int p = run_.p;
  for (int mb = 0; mb < m_; ++mb) {
    if (stage_ > 0) su_.pipe->recv_from_previous(engine_.input_hidden(), elems, run_.dtype, s2);
    engine_.decode(next_[static_cast<std::size_t>(mb)], b_, n_, s2, mb * b_);
    if (stage_ < p - 1) su_.pipe->send_to_next(engine_.hidden(), elems, run_.dtype, s2);
    if (keep_logits && stage_ == p - 1) this->keep_logits(mb, s2);
  }
}

double StageSteps::worst_error(std::int64_t key_len) const {
  double worst = 0;
  if (stage_ != run_.p - 1) return worst;
  for (int mb = 0; mb < m_; ++mb) {
    const auto got = model::to_host_values(logits_.as<unsigned char>() + mb * logit_bytes_,
                                           logit_elems_, run_.dtype);
    worst = std::max(
        worst, model::relative_l2(got, run_.reference.at(std::make_tuple(seqs_, key_len, mb))));
  }
  return worst;
}

// One more prefill step with events: each stage's timeline from its own start, the stages
// released together by a barrier; every stage's marks gathered in stage order.
void trace_prefill(const InferenceRun& run, Rank& self, StageSteps& steps, InferenceOutcome& o) {
  const int p = run.p, m = o.m;
  const cudaStream_t st = self.stream->get();
  std::vector<Event> marks;
  for (int k = 0; k < 3 * m; ++k) marks.emplace_back(self.device);
  Event start(self.device);
  self.group->sync(self);
  run.group.barrier();
  start.record(st);
  steps.prefill(st, false, &marks);
  self.group->sync(self);
  Timeline t;
  t.stages.resize(static_cast<std::size_t>(p));
  double send_s = 0;
  for (int mb = 0; mb < m; ++mb) {
    const auto at = [&](int k) {
      return marks[static_cast<std::size_t>(3 * mb + k)].seconds_since(start);
    };
    const auto f0 = run.group.all_gather(self.rank, at(0));
    const auto f1 = run.group.all_gather(self.rank, at(1));
    const auto f2 = run.group.all_gather(self.rank, at(2));
    for (int j = 0; j < p; ++j) {
      const auto J = static_cast<std::size_t>(j);
      t.stages[J].push_back(Span{Op{true, mb, 0}, f0[J], f1[J]});
      t.makespan_s = std::max(t.makespan_s, f2[J]);
      t.busy_s += f1[J] - f0[J];
      if (j < p - 1) send_s += f2[J] - f1[J];
    }
  }
  t.bubble = t.makespan_s > 0 ? 1.0 - t.busy_s / (p * t.makespan_s) : 0.0;
  o.timeline = t;
  o.transfer_s = send_s;
}

// The last stage's logits against the whole model's, into `error`; the outcome fails (with
// `what`) past kCheckLimit.
void check_logits(const InferenceRun& run, Rank& self, const StageSteps& steps,
                  std::int64_t key_len, const char* what, double& error, InferenceOutcome& o) {
  error = run.group.all_gather(self.rank,
                               steps.worst_error(key_len))[static_cast<std::size_t>(run.p - 1)];
  if (error <= kCheckLimit) return;
  o.status = "failed";
  o.note = fmt::format(
      "pipeline {}logits differ from the whole model's: relative error {:.3g} "
      "(limit {})",
      what, error, kCheckLimit);
}

// One microbatch count on this stage: the outcome (complete on rank 0).
InferenceOutcome run_point(const InferenceRun& run, Rank& self, StageSetup& su, int m) {
  const Settings& s = run.s;
  const int p = run.p;
  const cudaStream_t st = self.stream->get();
  const std::int64_t seqs = s.batch / m;
  InferenceOutcome o;
  o.p = p;
  o.m = m;
  o.micro_sequences = seqs;
  o.stage_layers = su.layers;
  o.balance = su.balance;
  o.transfer_bytes =
      static_cast<double>(seqs * s.seq_len * s.model.hidden_size * act_bytes(run.dtype));
  if (self.rank == 0) spdlog::info("pp: {} stages, {} microbatches of {} sequences", p, m, seqs);
  model::EngineOptions eo = engine_options(s, seqs);  // a step: one microbatch
  eo.cache_batch = static_cast<int>(seqs * m);
  eo.first_layer = su.first_layer;
  eo.layers = su.layers[static_cast<std::size_t>(self.rank)];
  eo.embed = self.rank == 0;
  eo.head = self.rank == p - 1;
  // Memory, before anything is allocated, agreed by every stage.
  if (std::string why =
          agreed_memory_check(run.group, self.rank, stage_need(run, self, eo, seqs, m));
      !why.empty()) {
    o.status = "skipped";
    o.note = std::move(why);
    return o;
  }
  make_reference(run, self, seqs, m);
  StageSteps steps(run, self, su, eo, seqs, m);
  steps.prefill(st, true, nullptr);
  self.group->sync(self);
  check_logits(run, self, steps, s.seq_len, "", o.check_error, o);
  // Timed: the step, the slowest stage per iteration.
  o.step = run.group.measure(
      self, [&](cudaStream_t s2, int) { steps.prefill(s2, false, nullptr); }, run.mo);
  trace_prefill(run, self, steps, o);
  o.bubble_theory = theory_bubble(Schedule::GPipe, p, m, 1);
  o.memory_per_gpu = steps.engine().memory().total();
  // Decode: one token for every sequence at context seq_len, its logits checked like prefill's.
  steps.decode(st, true);
  self.group->sync(self);
  check_logits(run, self, steps, s.seq_len + 1, "decode ", o.decode_check_error, o);
  if (o.status == "ok")
    o.decode = run.group.measure(
        self, [&](cudaStream_t s2, int) { steps.decode(s2, false); }, run.mo);
  run.group.barrier();  // every stage done with its engine before the next microbatch size
  return o;
}

}  // namespace

std::vector<InferenceOutcome> run_inference(Context& ctx, const Settings& s, int p,
                                            RankGroup& group, ReferenceLogits& reference) {
  if (group.size() != p)
    throw InputError(fmt::format("--pp: {} ranks for {} stages", group.size(), p));
  const InferenceRun run{s,     p,        dtype_of(s), model::engine_step_options(ctx.common()),
                         group, reference};
  std::vector<InferenceOutcome> out;
  group.run([&](Rank& self) {
    StageSetup su = set_up_stage(run, self);
    for (int m : s.microbatches) {
      if (group.any(self.rank, Context::interrupted())) break;  // all stages stop together
      InferenceOutcome o = run_point(run, self, su, m);
      if (self.rank == 0) out.push_back(std::move(o));
    }
  });
  return out;
}

}  // namespace gpubench::pp
