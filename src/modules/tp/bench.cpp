// `gpubench tp` on the GPUs: the engine split over t ranks (a thread and a GPU each), every point
// checked against the TP=1 logits, then prefill and decode steps timed (the slowest rank per
// iteration), one eager step split by operation kind, and the layer's all-reduce timed alone on
// the same communicator for the prediction and the bus-bandwidth comparison.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <set>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/mpi.hpp"
#include "gpubench/core/nccl.hpp"
#include "gpubench/core/progress.hpp"
#include "gpubench/core/ranks.hpp"
#include "gpubench/model/observe.hpp"
#include "gpubench/modules/tp/tp.hpp"

namespace gpubench::tp {

namespace {

// One eager step's spans summed by kind.
OpSplit split_by_kind(const std::vector<model::OpSpan>& spans) {
  OpSplit split;
  for (const auto& sp : spans) {
    const std::string kind = op_kind(sp.op);
    if (kind == "gemm") {
      split.gemm_s += sp.seconds;
    } else if (kind == "attention") {
      split.attention_s += sp.seconds;
    } else if (kind == "communication") {
      split.comm_s += sp.seconds;
    } else {
      split.other_s += sp.seconds;
    }
  }
  return split;
}

// TP=t against TP=1 on the same tokens: only the summation order differs (the partial products
// of a row-parallel GEMM are added by the all-reduce); a wrong shard or a missing sum gives
// errors of order 1.
constexpr double kCheckLimit = 0.05;

MeasureOptions collective_options(const Context& ctx) {
  MeasureOptions m = ctx.measure_options();
  m.l2 = L2Policy::Hot;
  if (m.fixed_iters == 0) {
    m.warmup = 5;
    m.min_iters = 20;
    m.min_time_s = ctx.quick() ? 0.02 : 0.1;
    m.max_time_s = ctx.quick() ? 0.5 : 1.0;
  }
  return m;
}

}  // namespace

std::string op_kind(const std::string& op) {
  static const std::set<std::string> gemms = {"qkv",    "attn_out", "mlp_gate_up",
                                              "mlp_up", "mlp_down", "lm_head"};
  for (const char* c : {"all_reduce", "reduce_scatter", "all_gather"})
    if (op.find(c) != std::string::npos) return "communication";
  if (op == "attention") return "attention";
  return gemms.count(op) ? "gemm" : "other";
}

namespace {

// One rank's collectives for the engine: NCCL's, the one-shot kernel's for the small
// all-reduces (when asked for and possible), the copy engines' in front with the rest behind
// them (--collectives copy-engine). `prefill` and `decode` are what the engine's steps call
// (decode's: what its graphs capture, never the copy engines); `shots` the one-shot group in use
// (null: none).
struct RankCollectives {
  NcclComm comm;
  std::unique_ptr<parallel::NcclCollectives> nccl;
  std::unique_ptr<parallel::OneShotGroup> ipc;  // under MPI: this rank's, peers mapped
  std::unique_ptr<parallel::OneShotCollectives> shot;
  std::unique_ptr<parallel::CopyEngineCollectives> copied;
  const parallel::OneShotGroup* shots = nullptr;
  model::TpCollectives* prefill = nullptr;
  model::TpCollectives* decode = nullptr;  // also what the copy engines fall back to
};

void make_rank_collectives(const Settings& s, int t, RankGroup& group, Rank& self,
                           parallel::CopyEngineGroup* copies, const parallel::OneShotGroup* shots,
                           RankCollectives& rc) {
  if (t > 1) {
    ncclUniqueId id{};
    if (self.rank == 0) GPB_NCCL_CHECK(ncclGetUniqueId(&id));
    group.broadcast(self.rank, &id, sizeof(id));
    rc.comm = NcclComm(id, t, self.rank);
    rc.nccl = std::make_unique<parallel::NcclCollectives>(rc.comm.get());
  }
  if (t > 1 && group.is_mpi() && s.small_collectives != "nccl") {
    rc.ipc = parallel::OneShotGroup::over_ipc(group, self.rank, self.device,
                                              parallel::OneShotCollectives::kMaxBytes);
    if (!rc.ipc && self.rank == 0)
      spdlog::log(s.small_collectives == "one-shot" ? spdlog::level::warn : spdlog::level::info,
                  "tp: the ranks span hosts, some pair of their GPUs lacks peer access, or "
                  "CUDA IPC was refused; the small all-reduces run over NCCL");
  }
  rc.shots = shots ? shots : rc.ipc.get();
  if (rc.shots)
    rc.shot = std::make_unique<parallel::OneShotCollectives>(*rc.shots, self.rank, *rc.nccl);
  rc.decode = rc.shot ? static_cast<model::TpCollectives*>(rc.shot.get()) : rc.nccl.get();
  if (copies)
    rc.copied = std::make_unique<parallel::CopyEngineCollectives>(*copies, self.rank, *rc.decode);
  rc.prefill = rc.copied ? static_cast<model::TpCollectives*>(rc.copied.get()) : rc.decode;
}

// Everything a point of one batch needs: the rank, its engine and collectives, the settings.
struct PointRun {
  const Settings& s;
  int t;
  RankGroup& group;
  Rank& self;
  model::Transformer& engine;
  const model::EngineOptions& eo;
  RankCollectives& rc;
  ReferenceLogits& reference;
  const MeasureOptions& step_mo;
  const MeasureOptions& comm_mo;
  DeviceBuffer& scratch;  // the standalone all-reduce's buffer
  std::int64_t batch;
};

// Rank 0's logits against the reference (TP=1's, else the first degree's): the error in
// *error, and `o` failed beyond the limit; the first degree to run a point becomes its
// reference.
void check_logits(const PointRun& p, Outcome& o, std::int64_t len, double* error,
                  const char* what) {
  if (p.self.rank != 0) return;
  const int b = static_cast<int>(p.batch);
  auto logits = model::to_host_values(
      p.engine.logits(), static_cast<std::size_t>(b) * p.engine.model().vocab_size, p.eo.dtype);
  const auto key = std::make_tuple(static_cast<int>(o.phase), p.batch, len);
  const auto it = p.reference.find(key);
  if (it == p.reference.end()) {
    p.reference[key] = ReferenceRun{p.t, std::move(logits)};
    if (p.t > 1 && o.status == "ok") {
      o.status = "unchecked";
      o.note = "TP=1 did not run this point: checked only if a later degree agrees";
    }
    return;
  }
  *error = model::relative_l2(logits, it->second.logits);
  if (it->second.t != p.t) o.checked_against = it->second.t;  // else: overlap vs whole
  if (!(*error <= kCheckLimit)) {
    o.status = "failed";
    o.note = fmt::format("{}logits differ from TP={}: relative error {:.3g} (limit {})", what,
                         it->second.t, *error, kCheckLimit);
  }
}

// The layer's all-reduce alone, same size, same GPUs, through the step's own collectives, in
// place (with sequence parallelism in prefill: its reduce-scatter and all-gather, which carry
// the same bus bytes); decode's as its graph runs them, 2 a layer back to back.
void time_collective_alone(const PointRun& p, Outcome& o, bool prefill, std::int64_t len) {
  const std::int64_t rows = prefill ? p.batch * len : p.batch;
  const std::size_t elems = static_cast<std::size_t>(rows * p.s.model.hidden_size);
  o.allreduce_bytes = static_cast<double>(elems) * 2;
  void* buf = p.scratch.get();
  const auto chunk = static_cast<std::int64_t>(elems) / p.t;
  const bool split_rows = p.s.sequence_parallel && prefill;
  model::TpCollectives* active = p.engine.collectives(o.phase);
  const ActDtype dtype = p.eo.dtype;
  auto collective = [&](cudaStream_t s2) {
    if (split_rows) {
      active->reduce_scatter(buf, chunk, dtype, s2);
      active->all_gather(buf, chunk, dtype, s2);
    } else {
      active->all_reduce(buf, static_cast<std::int64_t>(elems), dtype, s2);
    }
  };
  if (prefill) {
    o.allreduce_alone_s = p.group
                              .measure(
                                  p.self, [&](cudaStream_t s2, int) { collective(s2); }, p.comm_mo)
                              .median_s();
    return;
  }
  const int k = 2 * p.engine.layers();
  CudaGraph burst;
  burst.capture(p.self.stream->get(), [&](cudaStream_t s2) {
    for (int i = 0; i < k; ++i) collective(s2);
  });
  o.allreduce_alone_s = p.group
                            .measure(
                                p.self, [&](cudaStream_t s2, int) { burst.launch(s2); }, p.comm_mo)
                            .median_s() /
                        k;
}

// One eager step with events around every operation, split by kind; for decode over several
// GPUs also the step's graph without its collectives (the step minus what communication adds).
void time_parts(const PointRun& p, Outcome& o, bool prefill, const std::int32_t* ids,
                const std::int32_t* next, int n) {
  cudaStream_t st = p.self.stream->get();
  const int b = static_cast<int>(p.batch);
  model::OpSpans timer(p.self.device);
  p.engine.set_observer(&timer);
  if (prefill)
    p.engine.prefill(ids, b, n, st);
  else
    p.engine.decode(next, b, n, st);
  p.self.group->sync(p.self);
  p.engine.set_observer(nullptr);
  o.ops = split_by_kind(timer.collect());
  if (prefill || p.t == 1) return;
  parallel::SkippedCollectives none;
  p.engine.set_collectives(&none);
  CudaGraph bare;
  bare.capture(st, [&](cudaStream_t s2) { p.engine.decode(next, b, n, s2); });
  p.engine.set_collectives(p.rc.prefill, p.rc.decode);
  o.no_comm_s = p.group
                    .measure(
                        p.self, [&](cudaStream_t s2, int) { bare.launch(s2); }, p.step_mo)
                    .median_s();
}

// One point: the step checked, then timed (the slowest rank per iteration; decode from a CUDA
// graph; prefill also in overlap chunks when asked), its parts, the collective alone. The
// engine's decode runs the collectives its graph captures in its eager steps too, so what is
// checked is what is timed.
void run_point(const PointRun& p, Outcome& o) {
  cudaStream_t st = p.self.stream->get();
  const int b = static_cast<int>(p.batch), n = static_cast<int>(o.length);
  const bool prefill = o.phase == model::Phase::Prefill;
  model::Transformer& engine = p.engine;
  const auto copies = [&] { return p.rc.copied ? p.rc.copied->copied() : std::int64_t{0}; };
  std::int64_t copied = copies();
  if (p.self.rank == 0)
    progress::next(fmt::format("t={} {} batch {} {} {}", p.t, model::to_string(o.phase), p.batch,
                               prefill ? "prompt" : "context", o.length));
  // Prefill of `len` tokens; a decode step needs them in the cache first.
  const std::int32_t* ids = engine.tokens(b, n, 7, st);
  engine.prefill(ids, b, n, st);
  const std::int32_t* next = nullptr;
  if (!prefill) {
    copied = copies();  // what the decode step copies, not the prefill before it
    next = engine.tokens(b, 1, 8, st);
    engine.decode(next, b, n, st);
  }
  p.self.group->sync(p.self);
  // The row names the collectives its checked step went through.
  if (p.rc.copied && copies() == copied) o.collectives = "nccl";
  check_logits(p, o, o.length, &o.check_error, "");
  if (prefill) {
    o.attention_path = engine.attention_path();
    o.attention_why = engine.attention_note();
  }
  CudaGraph graph;
  Launch launch;
  if (prefill) {
    ids = engine.tokens(b, n, 7, st);
    launch = [&](cudaStream_t s2, int) { engine.prefill(ids, b, n, s2); };
  } else {
    graph.capture(st, [&](cudaStream_t s2) { engine.decode(next, b, n, s2); });
    launch = [&](cudaStream_t s2, int) { graph.launch(s2); };
  }
  o.step = p.group.measure(p.self, launch, p.step_mo);
  if (prefill && p.eo.overlap_chunks > 1) {
    // The same prefill in overlap chunks, checked, then timed.
    engine.set_overlap_chunks(p.eo.overlap_chunks);
    engine.prefill(ids, b, n, st);
    p.self.group->sync(p.self);
    if (engine.last_chunks() > 1) {
      o.overlap_chunks = engine.last_chunks();
      check_logits(p, o, o.length, &o.overlap_check_error, "overlapped: ");
      o.overlap_s = p.group.measure(p.self, launch, p.step_mo).median_s();
    }
    engine.set_overlap_chunks(1);
  }
  time_parts(p, o, prefill, ids, next, n);
  if (p.t > 1) time_collective_alone(p, o, prefill, o.length);
  o.memory_per_gpu = engine.memory().total();
  // A one-shot all-reduce whose wait for a peer gave up leaves wrong sums behind (and times
  // that say nothing): the point fails.
  if (p.rc.shots) {
    p.self.group->sync(p.self);
    if (p.group.any(p.self.rank, p.rc.shots->timed_out(p.self.rank))) {
      o.status = "failed";
      o.note =
          "one-shot all-reduce: a rank waited for a peer past the time limit (here or at an "
          "earlier point: the ranks' flags are out of step since)";
    }
  }
}

// This rank's engine for a batch and the standalone collective's buffer (`scratch_bytes`, into
// `scratch`); null on every rank when any rank could not build its own (out of memory, say):
// all skip the batch together rather than wait in a collective for the one that stopped, and
// `why` says why (on rank 0).
std::unique_ptr<model::Transformer> build_engine(const Settings& s, const model::EngineOptions& eo,
                                                 RankGroup& group, Rank& self, std::string& why,
                                                 std::size_t scratch_bytes, DeviceBuffer& scratch) {
  std::unique_ptr<model::Transformer> built;
  try {
    built = std::make_unique<model::Transformer>(s.model, eo, self.device);
    parallel::wait_with_group(*built, group);  // behind the all-reduces: ends if a peer failed
    scratch = DeviceBuffer(self.device, scratch_bytes);
  } catch (const GpuError& e) {
    why = e.what();
  } catch (const InputError& e) {
    why = e.what();
  }
  const auto ready = group.all_gather(self.rank, why.empty() ? 1.0 : 0.0);
  const auto first = std::find(ready.begin(), ready.end(), 0.0);
  if (first == ready.end()) return built;
  if (why.empty())
    why = fmt::format("rank {} could not build its engine", first - ready.begin());
  else
    why = fmt::format("the engine could not be built: {}", why);
  return nullptr;
}

}  // namespace

std::vector<Outcome> run_degree(Context& ctx, const Settings& s, int t, RankGroup& group,
                                ReferenceLogits& reference) {
  if (group.size() != t) throw InputError(fmt::format("--tp: {} ranks for TP={}", group.size(), t));
  const std::int64_t H = s.model.hidden_size;
  const std::int64_t max_prompt = std::max(s.seq_lens.back(), s.contexts.back());
  const MeasureOptions step_mo = model::engine_step_options(ctx.common()),
                       comm_mo = collective_options(ctx);
  std::vector<Outcome> out;
  // --collectives copy-engine: the ranks' shared staging, sized for the largest chunk of the
  // largest prefill's all-reduce.
  const std::unique_ptr<parallel::CopyEngineGroup> copies = copy_engine_group(
      s, t, group, static_cast<std::size_t>(s.batch_sizes.back() * max_prompt * H * 2 / t + 64));
  // --small-collectives one-shot (or auto): every rank's receive slots and flags; ranks in
  // several processes set theirs up inside the run (over_ipc).
  const std::unique_ptr<parallel::OneShotGroup> shots = one_shot_group(s, t, group);
  group.run([&](Rank& self) {
    RankCollectives rc;
    make_rank_collectives(s, t, group, self, copies.get(), shots.get(), rc);
    const auto outcome = [&](model::Phase phase, std::int64_t batch, std::int64_t len) {
      Outcome o;
      o.t = t;
      if (copies) o.collectives = "copy-engine";
      if (rc.shots) o.small_collectives = "one-shot";
      o.phase = phase;
      o.batch = batch;
      o.length = len;
      return o;
    };
    // Every rank must run the same sequence of collectives: stop only where all agree.
    auto stop = [&] { return group.any(self.rank, Context::interrupted()); };
    for (std::int64_t batch : s.batch_sizes) {
      if (stop()) break;
      model::EngineOptions eo;
      eo.dtype = s.dtype == "fp16" ? ActDtype::F16 : ActDtype::BF16;
      eo.layers = s.layers;
      eo.max_batch = static_cast<int>(batch);
      eo.max_tokens = static_cast<int>(max_prompt);
      eo.max_context = static_cast<int>(max_prompt + 1);
      eo.tp_size = t;
      eo.tp_rank = self.rank;
      eo.sequence_parallel = s.sequence_parallel;
      eo.overlap_chunks = s.overlap && !s.sequence_parallel && t > 1 ? s.overlap_chunks : 1;
      std::string why;
      DeviceBuffer scratch;
      const std::unique_ptr<model::Transformer> built = build_engine(
          s, eo, group, self, why,
          t > 1 ? static_cast<std::size_t>(batch * max_prompt * H * 2) : std::size_t{16}, scratch);
      if (!built) {
        if (self.rank == 0) {
          auto skip = [&](model::Phase phase, std::int64_t len) {
            Outcome o = outcome(phase, batch, len);
            o.status = "skipped";
            o.note = why;
            out.push_back(o);
          };
          for (std::int64_t len : s.seq_lens) skip(model::Phase::Prefill, len);
          for (std::int64_t c : s.contexts) skip(model::Phase::Decode, c);
        }
        continue;
      }
      built->set_overlap_chunks(1);  // built for overlap chunks, but each point runs whole first
      if (rc.prefill) built->set_collectives(rc.prefill, rc.decode);
      const PointRun p{s,  t,         group,   self,    *built,  eo,
                       rc, reference, step_mo, comm_mo, scratch, batch};
      const auto point = [&](model::Phase phase, std::int64_t len) {
        Outcome o = outcome(phase, batch, len);
        run_point(p, o);
        if (self.rank == 0) out.push_back(o);
      };
      for (std::int64_t len : s.seq_lens) {
        if (stop()) break;
        point(model::Phase::Prefill, len);
      }
      for (std::int64_t c : s.contexts) {
        if (stop()) break;
        point(model::Phase::Decode, c);
      }
    }
    if (rc.ipc) {  // no peer may still write into this rank's buffers when they are freed
      group.sync(self);
      group.barrier();
    }
  });
  return out;
}

}  // namespace gpubench::tp
