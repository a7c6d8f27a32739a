// `gpubench advise` on the GPUs: one layout's generation, end to end, checked and timed. Every
// rank holds its stage's layers of its tensor shard; the hidden states go from stage to stage
// over NCCL (sends on a side stream of their own, so a stage's compute never waits behind its
// send; NCCL still orders a middle stage's next receive after its send, on one communicator),
// and the last stage hands each step's next tokens back to the first over the pipeline's ring.
// Advise runs in one process (a thread per GPU), also in `gpubench all` under mpirun. Token ids are
// seeded, not sampled: every step's work and its dependence on the step before are a real
// generation's, and the result can be held against a reference.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/gemm.hpp"
#include "gpubench/core/measure.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/model/observe.hpp"
#include "gpubench/modules/advise/advise.hpp"
#include "gpubench/parallel/collectives.hpp"

namespace gpubench::advise {

Tokens token_ids(const Settings& s, const Plan& p) {
  Tokens t;
  const std::int64_t n = s.prompt, steps = s.output_len - 1, vocab = s.model.vocab_size;
  const std::int64_t sequences = p.m * p.micro;
  t.prompts.resize(static_cast<std::size_t>(sequences * n));
  t.steps.resize(static_cast<std::size_t>(steps * sequences));
  for (std::int64_t q = 0; q < sequences; ++q) {
    std::uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(q + 1);
    const auto next = [&] {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      return static_cast<std::int32_t>(x % static_cast<std::uint64_t>(vocab));
    };
    for (std::int64_t i = 0; i < n; ++i) t.prompts[static_cast<std::size_t>(q * n + i)] = next();
    for (std::int64_t i = 0; i < steps; ++i)
      t.steps[static_cast<std::size_t>(i * sequences + q)] = next();
  }
  return t;
}

namespace {

// The last step's logits against the reference: the paths round differently (GEMM against GEMV
// accumulation, tensor-parallel sums in another order) and differences grow through the layers;
// a wrong cache, position or shard gives errors of order 1.
constexpr double kCheckLimit = 0.1;

// The reference of a replica's microbatches: a prefill of each one's whole stream (prompt, then
// every fed token) on one GPU, whose last logits a generation's last step must give.
model::EngineOptions whole_options(const Settings& s, std::int64_t micro) {
  model::EngineOptions eo;
  eo.dtype = s.dtype;
  eo.layers = s.layers;
  eo.max_batch = static_cast<int>(micro);
  eo.max_tokens = eo.max_context = static_cast<int>(s.prompt + s.output_len - 1);
  return eo;
}

// Every microbatch's in turn (one engine of a microbatch's size), concatenated.
std::vector<double> whole_stream_logits(const Settings& s, const Plan& p, const Tokens& t,
                                        int device, cudaStream_t st) {
  const model::EngineOptions eo = whole_options(s, p.micro);
  const std::int64_t n = s.prompt, len = eo.max_tokens, steps = s.output_len - 1;
  const std::int64_t sequences = p.m * p.micro;
  model::Transformer whole(s.model, eo, device);
  std::vector<std::int32_t> stream(static_cast<std::size_t>(p.micro * len));
  DeviceBuffer ids(device, stream.size() * sizeof(std::int32_t));
  std::vector<double> out;
  for (std::int64_t mb = 0; mb < p.m; ++mb) {
    for (std::int64_t q = 0; q < p.micro; ++q) {
      const std::int64_t seq = mb * p.micro + q;
      for (std::int64_t i = 0; i < n; ++i) stream[q * len + i] = t.prompts[seq * n + i];
      for (std::int64_t i = 0; i < steps; ++i)
        stream[q * len + n + i] = t.steps[i * sequences + seq];
    }
    GPB_CUDA_CHECK(cudaMemcpyAsync(ids.get(), stream.data(), stream.size() * sizeof(std::int32_t),
                                   cudaMemcpyHostToDevice, st));
    whole.prefill(ids.as<std::int32_t>(), static_cast<int>(p.micro), static_cast<int>(len), st);
    GPB_CUDA_CHECK(cudaStreamSynchronize(st));  // the host stream is refilled next
    const auto logits = model::to_host_values(
        whole.logits(), static_cast<std::size_t>(p.micro) * s.model.vocab_size, s.dtype);
    out.insert(out.end(), logits.begin(), logits.end());
  }
  return out;
}

// The worst microbatch's relative error of `got` against `ref` (the same sequences, in
// microbatches of `per` values each); infinity where they do not hold the same number.
double worst_microbatch_error(const std::vector<double>& got, const std::vector<double>& ref,
                              std::size_t per) {
  if (per == 0 || got.empty() || got.size() != ref.size() || got.size() % per != 0)
    return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (std::size_t at = 0; at < got.size(); at += per) {
    const std::vector<double> a(got.begin() + static_cast<std::ptrdiff_t>(at),
                                got.begin() + static_cast<std::ptrdiff_t>(at + per));
    const std::vector<double> b(ref.begin() + static_cast<std::ptrdiff_t>(at),
                                ref.begin() + static_cast<std::ptrdiff_t>(at + per));
    const double e = model::relative_l2(a, b);
    worst = std::isnan(e) || e > worst ? e : worst;
  }
  return worst;
}

// The ranks of a failed layout let their memory go together: a peer's copies (the copy
// engines' gather writes into this rank's engine) may still land until that peer has drained.
// A rank joins once its RankRun is built (one whose construction failed wrote to no peer);
// unwinding, it arrives with whether its own streams drained, and learns whether every rank
// that joined arrived drained before the deadline. One serves one set of RankRuns (a layout's
// cut-down run has its own): a rank whose RankRun ended well never arrives.
class DrainRendezvous {
 public:
  void join() {
    const std::lock_guard<std::mutex> lock(mu_);
    ++joined_;
  }
  bool arrive(bool drained, std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    ++arrived_;
    all_drained_ = all_drained_ && drained;
    cv_.notify_all();
    return cv_.wait_until(lock, deadline, [&] { return arrived_ >= joined_; }) && all_drained_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int joined_ = 0, arrived_ = 0;
  bool all_drained_ = true;
};

// What the ranks of each tensor-parallel group of plan p share (rank r's group is r / tp): a
// one-shot group where s.one_shot(), copy engines' staging for an overlapped prefill (none
// where the engines' all-reduces go over NCCL alone).
struct TpGroups {
  std::vector<std::unique_ptr<parallel::OneShotGroup>> shots;
  std::vector<std::unique_ptr<parallel::CopyEngineGroup>> copies;
};
TpGroups tp_groups(const Settings& s, const Plan& p, RankGroup& group) {
  TpGroups out;
  const int t = p.layout.tp;
  if (t < 2) return out;
  const std::vector<int>& devices = group.devices();
  for (std::size_t first = 0; first + static_cast<std::size_t>(t) <= devices.size(); first += t) {
    const std::vector<int> mine(devices.begin() + static_cast<std::ptrdiff_t>(first),
                                devices.begin() + static_cast<std::ptrdiff_t>(first + t));
    if (s.one_shot())
      out.shots.push_back(
          std::make_unique<parallel::OneShotGroup>(mine, parallel::OneShotCollectives::kMaxBytes));
    if (p.overlap)
      out.copies.push_back(std::make_unique<parallel::CopyEngineGroup>(
          mine, copy_slot_bytes(overlap_chunk_bytes(s, p.micro), t), &group));
  }
  return out;
}

// One rank's part of the generation.
class RankRun {
 public:
  RankRun(const Settings& s, const Plan& p, Rank& self, RankGroup& group, const Tokens& t,
          const TpGroups& tp_share, DrainRendezvous& drain)
      : s_(s),
        p_(p),
        self_(self),
        group_(group),
        drain_(drain),
        at_(parallel::Place::of(p.layout, self.rank)),
        first_(at_.stage == 0),
        last_(at_.stage == p.layout.pp - 1),
        comms_(group, self.rank, p.layout, /*ring=*/true),
        engine_(s.model, rank_engine_options(s, p, at_.stage, at_.trank), self.device),
        side_(self.device),
        start_(self.device),
        ttft_(self.device),
        end_(self.device),
        hidden_sent_(self.device, false),
        computed_(self.device, false) {
    if (p.layout.tp > 1) {
      const auto mine = static_cast<std::size_t>(self.rank / p.layout.tp);
      nccl_ = std::make_unique<parallel::NcclCollectives>(comms_.tp.get());
      model::TpCollectives* decode = nccl_.get();
      if (!tp_share.shots.empty()) {
        shot_ = std::make_unique<parallel::OneShotCollectives>(*tp_share.shots.at(mine), at_.trank,
                                                               *decode);
        decode = shot_.get();
      }
      if (!tp_share.copies.empty())
        copied_ = std::make_unique<parallel::CopyEngineCollectives>(*tp_share.copies.at(mine),
                                                                    at_.trank, *decode);
      engine_.set_collectives(copied_ ? copied_.get() : decode, decode);
    }
    const auto upload = [&](const std::vector<std::int32_t>& v) {
      DeviceBuffer b(self.device, std::max<std::size_t>(v.size(), 1) * sizeof(std::int32_t));
      GPB_CUDA_CHECK(
          cudaMemcpy(b.get(), v.data(), v.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice));
      return b;
    };
    if (first_) prompts_ = upload(t.prompts);
    if (first_ || last_) steps_ = upload(t.steps);
    ring_ids_ = DeviceBuffer(self.device, static_cast<std::size_t>(p.m * p.micro) * 4);
    GPB_CUDA_CHECK(cudaMemset(ring_ids_.get(), 0, ring_ids_.bytes()));  // valid ids to capture
    saved_ = DeviceBuffer(self.device, logits_elems() * static_cast<std::size_t>(p.m) * 2);
    // The uploads and the zeroing ran on the legacy stream, which the rank's non-blocking streams
    // do not wait for.
    GPB_CUDA_CHECK(cudaDeviceSynchronize());
    // A new GEMM shape is timed behind this stage's receives and all-reduces: a peer that failed
    // ends the wait (and this rank) instead of leaving it behind a transfer that never comes.
    parallel::wait_with_group(engine_, group_, s_.timeout_s);
    drain_.join();
  }
  RankRun(const RankRun&) = delete;
  RankRun& operator=(const RankRun&) = delete;

  // Unwinding (this rank failed, or a peer did and the group ended this one), before any member
  // goes: the communicators aborted (their kernels end), then every stream the rank's work runs
  // on given kDrainS to drain (a cudaFree waits for all of them); once every rank of the layout
  // drained (DrainRendezvous), the GPU is no longer stuck and the engine's memory comes back for
  // the next layout, else it stays allocated until the process ends.
  ~RankRun() {
    if (std::uncaught_exceptions() <= uncaught_) return;
    // The decode graphs first: NCCL's abort waits for every graph that captured its
    // collectives to be destroyed (one still running is freed once the abort lets it end).
    graphs_.clear();
    comms_.ring.abort();
    comms_.pp.abort();
    comms_.tp.abort();
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(kDrainS + 1));
    bool drained = true;
    if (device_stuck(self_.device)) {
      try {
        std::vector<cudaStream_t> streams = {self_.stream->get(), side_.get()};
        if (engine_.comm_stream()) streams.push_back(engine_.comm_stream());
        if (copied_)
          for (cudaStream_t lane : copied_->lanes()) streams.push_back(lane);
        drained = drain_and_unmark(self_.device, streams, kDrainS);
      } catch (...) {  // no memory for the list: the device stays marked
        drained = false;
      }
    }
    // Every rank's work drained, or this GPU keeps its buffers (marked: later layouts skip it).
    if (!drain_.arrive(drained, deadline)) mark_device_stuck(self_.device);
  }

  // One generation; with `save`, every microbatch's last logits kept (saved()). Returns this
  // rank's (first tokens, whole) seconds: the first is the last stage's.
  std::pair<double, double> generate(bool save) {
    cudaStream_t st = self_.stream->get();
    start_.record(st);
    for (int mb = 0; mb < p_.m; ++mb) prefill(mb);
    ttft_.record(st);
    for (std::int64_t i = 0; i + 1 < s_.output_len; ++i)
      for (int mb = 0; mb < p_.m; ++mb) decode(i, mb, save);
    GPB_CUDA_CHECK(cudaEventRecord(computed_, side_.get()));
    GPB_CUDA_CHECK(cudaStreamWaitEvent(st, computed_, 0));
    end_.record(st);
    group_.wait(end_, s_.timeout_s, "the generation");
    return {last_ ? ttft_.seconds_since(start_) : 0.0, end_.seconds_since(start_)};
  }

  // Every decode step of every microbatch as a graph of its own (its context, its cache rows):
  // once, after construction, so that a failure in its eager steps (a peer's) unwinds through
  // the destructor and its drain.
  void capture_steps() {
    cudaStream_t st = self_.stream->get();
    const int n = static_cast<int>(s_.prompt);
    for (std::int64_t i = 0; i + 1 < s_.output_len; ++i)
      for (int mb = 0; mb < p_.m; ++mb) {
        const std::int32_t* ids = !first_            ? nullptr
                                  : p_.layout.pp > 1 ? ring_ids(mb)
                                                     : step_ids(i, mb);
        const int context = n + static_cast<int>(i);
        if (i == 0 && mb == 0) engine_.decode(ids, b(), context, st, 0);  // plans made first
        graphs_.emplace_back();
        graphs_.back().capture(
            st, [&](cudaStream_t s2) { engine_.decode(ids, b(), context, s2, mb * b()); });
      }
  }

  // Every microbatch's last logits, in order (micro x vocab each).
  std::vector<double> saved() const {
    return model::to_host_values(saved_.get(), logits_elems() * static_cast<std::size_t>(p_.m),
                                 s_.dtype);
  }
  std::size_t logits_elems() const {
    return static_cast<std::size_t>(p_.micro) * static_cast<std::size_t>(s_.model.vocab_size);
  }
  // Every replica's last stage (its first tensor rank): the replicas run the same sequences.
  bool checks() const { return last_ && at_.trank == 0; }
  std::uint64_t memory() const { return engine_.memory().total(); }

 private:
  int b() const { return static_cast<int>(p_.micro); }
  std::size_t hidden_elems(int rows) const {
    return static_cast<std::size_t>(rows) * s_.model.hidden_size;
  }
  ncclDataType_t type() const { return s_.dtype == ActDtype::BF16 ? ncclBfloat16 : ncclFloat16; }
  std::int32_t* step_ids(std::int64_t i, int mb) const {
    return steps_.as<std::int32_t>() + (i * p_.m + mb) * p_.micro;
  }
  std::int32_t* ring_ids(int mb) const { return ring_ids_.as<std::int32_t>() + mb * p_.micro; }

  // The hidden states arrive (or the step starts from tokens); the engine's residual stream is
  // both what arrives and what leaves, so nothing lands there before the last send of it left.
  void receive(int rows) {
    cudaStream_t st = self_.stream->get();
    GPB_CUDA_CHECK(cudaStreamWaitEvent(st, hidden_sent_, 0));
    if (!first_)
      GPB_NCCL_CHECK(ncclRecv(engine_.input_hidden(), hidden_elems(rows), type(), at_.stage - 1,
                              comms_.pp.get(), st));
  }
  void send_on(const void* data, std::size_t elems, ncclDataType_t t, int peer, ncclComm_t comm,
               bool hidden) {
    GPB_CUDA_CHECK(cudaEventRecord(computed_, self_.stream->get()));
    GPB_CUDA_CHECK(cudaStreamWaitEvent(side_.get(), computed_, 0));
    GPB_NCCL_CHECK(ncclSend(data, elems, t, peer, comm, side_.get()));
    if (hidden) GPB_CUDA_CHECK(cudaEventRecord(hidden_sent_, side_.get()));
  }
  // After a stage's step: the hidden states on, or (last stage) step i's tokens back around.
  void pass_on(int rows, std::int64_t next_step, int mb) {
    if (!last_)
      send_on(engine_.hidden(), hidden_elems(rows), type(), at_.stage + 1, comms_.pp.get(), true);
    else if (p_.layout.pp > 1 && next_step + 1 < s_.output_len)
      send_on(step_ids(next_step, mb), static_cast<std::size_t>(p_.micro), ncclInt32, 0,
              comms_.ring.get(), false);
  }

  void prefill(int mb) {
    cudaStream_t st = self_.stream->get();
    const int n = static_cast<int>(s_.prompt);
    receive(b() * n);
    engine_.prefill(
        first_ ? prompts_.as<std::int32_t>() + static_cast<std::int64_t>(mb) * b() * n : nullptr,
        b(), n, st, mb * b());
    pass_on(b() * n, 0, mb);
  }

  void decode(std::int64_t i, int mb, bool save) {
    cudaStream_t st = self_.stream->get();
    receive(b());
    if (first_ && p_.layout.pp > 1)
      GPB_NCCL_CHECK(ncclRecv(ring_ids(mb), static_cast<std::size_t>(p_.micro), ncclInt32,
                              p_.layout.pp - 1, comms_.ring.get(), st));
    graphs_[static_cast<std::size_t>(i * p_.m + mb)].launch(st);
    if (save && last_ && i + 2 == s_.output_len)
      GPB_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(saved_.get()) + mb * logits_elems() * 2,
                                     engine_.logits(), logits_elems() * 2, cudaMemcpyDeviceToDevice,
                                     st));
    pass_on(b(), i + 1, mb);
  }

  const Settings& s_;
  const Plan& p_;
  Rank& self_;
  RankGroup& group_;
  DrainRendezvous& drain_;
  parallel::Place at_;
  bool first_, last_;
  parallel::LayoutComms comms_;
  std::unique_ptr<parallel::NcclCollectives> nccl_;
  std::unique_ptr<parallel::OneShotCollectives> shot_;  // small all-reduces, the rest to nccl_
  std::unique_ptr<parallel::CopyEngineCollectives> copied_;  // overlapped prefill's
  model::Transformer engine_;
  Stream side_;
  Event start_, ttft_, end_, hidden_sent_, computed_;
  DeviceBuffer prompts_, steps_, ring_ids_, saved_;
  std::vector<CudaGraph> graphs_;
  int uncaught_ = std::uncaught_exceptions();
  static constexpr double kDrainS = 10;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// What rank 0's GPU may hold for a one-GPU reference: its free memory, within --memory.
std::uint64_t reference_room(const Settings& s) {
  std::size_t free_b = 0, total_b = 0;
  GPB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return s.memory_bytes > 0 ? std::min<std::uint64_t>(free_b, s.memory_bytes) : free_b;
}

bool reference_fits(const Settings& s, std::int64_t micro, std::size_t ws, std::uint64_t room) {
  return model::engine_memory(s.model, whole_options(s, micro), ws).total() +
             parallel::kMemoryReserve <=
         room;
}

// The check's verdict: a cut-down run off its one-GPU reference fails; so does the full run off
// its reference; a full run with no reference is ok when its cut-down one passed (its shards and
// stages were checked against one GPU), else unchecked until a later layout agrees with it.
void settle_check(Measured& out) {
  const bool cut_ok = out.cut_layers > 0 && out.cut_error <= kCheckLimit;
  if (out.cut_layers > 0 && !cut_ok) {
    out.status = "failed";
    out.note = fmt::format(
        "cut to {} layers, last logits differ from one GPU's: relative error "
        "{:.3g} (limit {})",
        out.cut_layers, out.cut_error, kCheckLimit);
  } else if (!out.checked_by.empty() && !(out.check_error <= kCheckLimit)) {
    out.status = "failed";
    out.note = fmt::format("last logits differ from {}: relative error {:.3g} (limit {})",
                           out.checked_by, out.check_error, kCheckLimit);
  } else if (out.checked_by.empty() && cut_ok) {
    out.checked_by = fmt::format("one GPU, cut to {} layers", out.cut_layers);
    out.check_error = out.cut_error;
  } else if (out.checked_by.empty()) {
    out.status = "unchecked";
    out.note =
        "no reference: the model does not fit one GPU; the layouts after it are held "
        "against this one";
  }
}

// The layout cut to the most layers whose one-GPU reference fits (at least one a stage), one
// generation against that reference: a model too large for one GPU still has its shards and
// stages checked against one GPU. Every rank calls it; rank 0 decides the cut and makes the
// reference (`shared`, read by the checking rank). Returns (cut layers, relative error on the
// checking rank, 0 elsewhere); (0, 0) when no cut fits.
std::pair<int, double> check_cut_down(const Settings& s, const Plan& p, const Tokens& t, Rank& self,
                                      RankGroup& group, const TpGroups& tp_share,
                                      DrainRendezvous& drain, std::size_t ws,
                                      std::vector<double>& shared) {
  int cut = 0;
  if (self.rank == 0) {
    const std::uint64_t room = reference_room(s);
    for (int l = s.layers - 1; l >= p.layout.pp && cut == 0; --l) {
      Settings c = s;
      c.layers = l;
      if (reference_fits(c, p.micro, ws, room)) cut = l;
    }
  }
  group.broadcast(self.rank, &cut, sizeof cut);
  if (cut == 0) return {0, 0.0};
  Settings c = s;
  c.layers = cut;
  Plan q = p;
  q.stage_layers = parallel::balance_stages(std::vector<double>(static_cast<std::size_t>(cut), 1.0),
                                            p.layout.pp, 0, 0);
  if (self.rank == 0) shared = whole_stream_logits(c, q, t, self.device, self.stream->get());
  group.barrier();
  RankRun run(c, q, self, group, t, tp_share, drain);
  run.capture_steps();
  group.barrier();
  (void)run.generate(true);
  const double error =
      run.checks() ? worst_microbatch_error(run.saved(), shared, run.logits_elems()) : 0.0;
  group.barrier();
  return {cut, error};
}

}  // namespace

Measured run_generation(Context& ctx, const Settings& s, const Plan& p, RankGroup& group,
                        References& refs) {
  Measured out;
  const auto key = std::make_tuple(p.sequences, s.prompt, s.output_len);
  const Tokens tokens = token_ids(s, p);
  const int reps = ctx.quick() ? 1 : 3;
  std::vector<double> cut_reference;  // rank 0's, read by the checking rank
  const TpGroups tp_share = tp_groups(s, p, group);
  DrainRendezvous cut_drain, drain;  // the cut-down run's ranks, the layout's
  if (std::any_of(tp_share.copies.begin(), tp_share.copies.end(),
                  [](const auto& g) { return !g->peers_ok(); })) {
    out.status = "skipped";
    out.note =
        "an overlapped prefill needs peer access between the GPUs of a tensor-parallel group";
    return out;
  }
  group.run([&](Rank& self) {
    cudaStream_t st = self.stream->get();
    const std::size_t ws = gemm_workspace_bytes(compute_capability_major(self.device));
    const model::EngineOptions eo =
        rank_engine_options(s, p, parallel::Place::of(p.layout, self.rank).stage,
                            parallel::Place::of(p.layout, self.rank).trank);
    std::uint64_t need = model::engine_memory(s.model, eo, ws).total();
    const bool fits = self.rank == 0 && reference_fits(s, p.micro, ws, reference_room(s));
    // One GPU's reference is made where none is held, or over a layout's (a layout of smaller
    // microbatches may fit one where the one before did not).
    const bool make_ref = fits && (!refs.count(key) || refs.at(key).from_layout);
    const bool too_big = group.any(self.rank, self.rank == 0 && !fits);
    if (make_ref)
      need = std::max(need, model::engine_memory(s.model, whole_options(s, p.micro), ws).total());
    if (const std::string why = parallel::agreed_memory_check(group, self.rank, need);
        !why.empty()) {
      if (self.rank == 0) {
        out.status = "skipped";
        out.note = why;
      }
      return;
    }
    if (make_ref)
      refs[key] = {whole_stream_logits(s, p, tokens, self.device, st),
                   "a prefill of the whole stream on one GPU", false};
    bool cut_failed = false;  // on every rank: its logits must not become a reference
    if (too_big) {
      const auto [cut, cut_error] =
          check_cut_down(s, p, tokens, self, group, tp_share, cut_drain, ws, cut_reference);
      const auto cut_errors = group.all_gather(self.rank, cut_error);
      const double worst = *std::max_element(cut_errors.begin(), cut_errors.end());
      cut_failed = cut > 0 && !(worst <= kCheckLimit);
      if (self.rank == 0) {
        out.cut_layers = cut;
        out.cut_error = worst;
      }
    }
    // A one-shot all-reduce whose wait for a peer gave up leaves wrong sums and times that say
    // nothing behind (every rank asks alike).
    const auto gave_up = [&] {
      const bool mine =
          !tp_share.shots.empty() &&
          tp_share.shots[static_cast<std::size_t>(self.rank / p.layout.tp)]->timed_out(self.rank %
                                                                                       p.layout.tp);
      return group.any(self.rank, mine);
    };
    group.barrier();  // rank 0's reference is in
    // Looked up here, by every rank; a layout's own logits are added only after every rank
    // compared (the errors' all_gather).
    const auto found = refs.find(key);
    const Reference* ref = found == refs.end() ? nullptr : &found->second;
    RankRun run(s, p, self, group, tokens, tp_share, drain);
    run.capture_steps();
    group.barrier();
    (void)run.generate(true);
    bool failed = cut_failed || gave_up();
    double error = 0;
    const bool replica0 = parallel::Place::of(p.layout, self.rank).replica == 0;
    std::vector<double> got;  // the checking rank's: without a reference, the next layouts'
    if (run.checks()) {
      got = run.saved();
      if (ref) {
        error = worst_microbatch_error(got, ref->logits, run.logits_elems());
        if (replica0) out.checked_by = ref->source;
      }
    }
    const auto errors = group.all_gather(self.rank, error);
    std::vector<double> firsts, wholes;
    for (int r = 0; r < reps && !failed; ++r) {
      // Every rank stops at the same repetition: one that went on alone would wait in NCCL.
      if (group.any(self.rank, Context::interrupted())) break;
      const auto [first, all] = run.generate(false);
      const auto f = group.all_gather(self.rank, first);
      const auto w = group.all_gather(self.rank, all);
      firsts.push_back(*std::max_element(f.begin(), f.end()));
      wholes.push_back(*std::max_element(w.begin(), w.end()));
    }
    const auto memory = group.all_gather(self.rank, static_cast<double>(run.memory()));
    const bool any_gave_up = gave_up();
    // A layout that ran through (checked cut down, or not at all) holds the next ones.
    if (!ref && replica0 && !got.empty() && !failed && !any_gave_up && !wholes.empty())
      refs[key] = {std::move(got), fmt::format("layout {}", p.name()), true};
    if (self.rank != 0) return;
    out.check_error = *std::max_element(errors.begin(), errors.end());
    out.memory_per_gpu =
        static_cast<std::uint64_t>(*std::max_element(memory.begin(), memory.end()));
    settle_check(out);
    if (any_gave_up) {
      out.status = "failed";
      out.note = "one-shot all-reduce: a rank waited for a peer past the time limit";
      return;
    }
    if (cut_failed) return;  // failed its cut-down check: not timed
    if (wholes.empty()) {
      out.status = "skipped";
      out.note = "stopped before it was timed";
      return;
    }
    out.ttft_s = median(firsts);
    out.e2e_s = median(wholes);
    out.tpot_s =
        s.output_len > 1 ? (out.e2e_s - out.ttft_s) / static_cast<double>(s.output_len - 1) : 0.0;
    out.tokens_per_s = static_cast<double>(p.batch * s.output_len) / out.e2e_s;
  });
  return out;
}

}  // namespace gpubench::advise
