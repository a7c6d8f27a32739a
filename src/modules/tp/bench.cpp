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
#include "tp.hpp"

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

std::vector<Outcome> run_degree(Context& ctx, const Settings& s, int t, RankGroup& group,
                                ReferenceLogits& reference) {
  if (group.size() != t)
    throw InputError(fmt::format("--tp: {} ranks for TP={}", group.size(), t));
  const ActDtype dtype = s.dtype == "fp16" ? ActDtype::F16 : ActDtype::BF16;
  const std::int64_t H = s.model.hidden_size;
  const std::int64_t max_prompt = std::max(s.seq_lens.back(), s.contexts.back());
  const MeasureOptions step_mo = model::engine_step_options(ctx), comm_mo = collective_options(ctx);
  std::vector<Outcome> out;
  // --collectives copy-engine: the ranks' shared staging, sized for the largest chunk of the
  // largest prefill's all-reduce.
  const std::unique_ptr<parallel::CopyEngineGroup> copies = copy_engine_group(
      s, t, group, static_cast<std::size_t>(s.batch_sizes.back() * max_prompt * H * 2 / t + 64));
  // --small-collectives one-shot (or auto): every rank's receive slots and flags; ranks in
  // several processes set theirs up inside the run (over_ipc).
  const std::unique_ptr<parallel::OneShotGroup> shots = one_shot_group(s, t, group);
  auto new_outcome = [&](model::Phase phase, std::int64_t batch, std::int64_t len,
                         bool one_shot) {
    Outcome o;
    o.t = t;
    if (copies) o.collectives = "copy-engine";
    if (one_shot) o.small_collectives = "one-shot";
    o.phase = phase;
    o.batch = batch;
    o.length = len;
    return o;
  };
  group.run([&](Rank& self) {
    ncclUniqueId id{};
    NcclComm comm;
    std::unique_ptr<parallel::NcclCollectives> collectives;
    if (t > 1) {
      if (self.rank == 0) GPB_NCCL_CHECK(ncclGetUniqueId(&id));
      group.broadcast(self.rank, &id, sizeof(id));
      comm = NcclComm(id, t, self.rank);
      collectives = std::make_unique<parallel::NcclCollectives>(comm.get());
    }
    // The step's collectives: NCCL's, or the copy engines' with NCCL for what they leave; the
    // small all-reduces NCCL's or the one-shot kernel's.
    std::unique_ptr<parallel::OneShotGroup> ipc;
    if (t > 1 && group.is_mpi() && s.small_collectives != "nccl") {
      ipc = parallel::OneShotGroup::over_ipc(group, self.rank, self.device,
                                             parallel::OneShotCollectives::kMaxBytes);
      if (!ipc && self.rank == 0)
        spdlog::log(s.small_collectives == "one-shot" ? spdlog::level::warn : spdlog::level::info,
                    "tp: the ranks span hosts, some pair of their GPUs lacks peer access, or "
                    "CUDA IPC was refused; the small all-reduces run over NCCL");
    }
    const parallel::OneShotGroup* mine = shots ? shots.get() : ipc.get();
    std::unique_ptr<parallel::OneShotCollectives> shot;
    if (mine) shot = std::make_unique<parallel::OneShotCollectives>(*mine, self.rank, *collectives);
    model::TpCollectives* small =
        shot ? static_cast<model::TpCollectives*>(shot.get()) : collectives.get();
    std::unique_ptr<parallel::CopyEngineCollectives> copied;
    if (copies)
      copied = std::make_unique<parallel::CopyEngineCollectives>(*copies, self.rank, *small);
    model::TpCollectives* active =
        copied ? static_cast<model::TpCollectives*>(copied.get()) : small;
    cudaStream_t st = self.stream->get();
    // Every rank must run the same sequence of collectives: stop only where all agree.
    auto stop = [&] { return group.any(self.rank, Context::interrupted()); };
    for (std::int64_t batch : s.batch_sizes) {
      if (stop()) break;
      model::EngineOptions eo;
      eo.dtype = dtype;
      eo.layers = s.layers;
      eo.max_batch = static_cast<int>(batch);
      eo.max_tokens = static_cast<int>(max_prompt);
      eo.max_context = static_cast<int>(max_prompt + 1);
      eo.tp_size = t;
      eo.tp_rank = self.rank;
      eo.sequence_parallel = s.sequence_parallel;
      eo.overlap_chunks = s.overlap && !s.sequence_parallel && t > 1 ? s.overlap_chunks : 1;
      // Every rank builds its engine; if any cannot (out of memory, say), all skip this batch
      // together rather than wait in a collective for the one that stopped.
      std::unique_ptr<model::Transformer> built;
      std::string why;
      try {
        built = std::make_unique<model::Transformer>(s.model, eo, self.device);
      } catch (const GpuError& e) {
        why = e.what();
      } catch (const InputError& e) {
        why = e.what();
      }
      const auto ready = group.all_gather(self.rank, why.empty() ? 1.0 : 0.0);
      if (std::any_of(ready.begin(), ready.end(), [](double v) { return v == 0; })) {
        if (self.rank == 0) {
          const auto first = std::find(ready.begin(), ready.end(), 0.0) - ready.begin();
          const std::string note = why.empty()
                                       ? fmt::format("rank {} could not build its engine", first)
                                       : fmt::format("the engine could not be built: {}", why);
          auto skip = [&](model::Phase phase, std::int64_t len) {
            Outcome o = new_outcome(phase, batch, len, mine != nullptr);
            o.status = "skipped";
            o.note = note;
            out.push_back(o);
          };
          for (std::int64_t len : s.seq_lens) skip(model::Phase::Prefill, len);
          for (std::int64_t c : s.contexts) skip(model::Phase::Decode, c);
        }
        continue;
      }
      model::Transformer& engine = *built;
      // Built for overlap chunks, but each point runs whole first.
      engine.set_overlap_chunks(1);
      if (active) engine.set_collectives(active);
      // The standalone all-reduce's buffer: the largest message of this batch.
      DeviceBuffer scratch(self.device, t > 1 ? static_cast<std::size_t>(batch * max_prompt * H * 2)
                                              : std::size_t{16});
      const int b = static_cast<int>(batch);

      auto point = [&](model::Phase phase, std::int64_t len) {
        Outcome o = new_outcome(phase, batch, len, mine != nullptr);
        const int n = static_cast<int>(len);
        const bool prefill = phase == model::Phase::Prefill;
        if (self.rank == 0)
          progress::next(fmt::format("t={} {} batch {} {} {}", t, model::to_string(phase), batch,
                                     prefill ? "prompt" : "context", len));
        // Prefill of `len` tokens; a decode step needs them in the cache first.
        const std::int32_t* ids = engine.tokens(b, n, 7, st);
        engine.prefill(ids, b, n, st);
        CudaGraph graph;
        const std::int32_t* next = nullptr;
        if (!prefill) {
          next = engine.tokens(b, 1, 8, st);
          engine.decode(next, b, n, st);
        }
        GPB_CUDA_CHECK(cudaStreamSynchronize(st));
        const auto key = std::make_tuple(static_cast<int>(phase), batch, len);
        // Rank 0's logits against the reference (TP=1's, else the first degree's): the error,
        // and "failed" beyond the limit.
        auto check = [&](double* error, const char* what) {
          if (self.rank != 0) return;
          auto logits = model::to_host_values(
              engine.logits(), static_cast<std::size_t>(b) * engine.model().vocab_size, dtype);
          const auto it = reference.find(key);
          if (it == reference.end()) {
            reference[key] = ReferenceRun{t, std::move(logits)};
            if (t > 1 && o.status == "ok") {
              o.status = "unchecked";
              o.note = "TP=1 did not run this point: checked only if a later degree agrees";
            }
            return;
          }
          *error = model::relative_l2(logits, it->second.logits);
          if (it->second.t != t) o.checked_against = it->second.t;  // else: overlap vs whole
          if (!(*error <= kCheckLimit)) {
            o.status = "failed";
            o.note = fmt::format("{}logits differ from TP={}: relative error {:.3g} (limit {})",
                                 what, it->second.t, *error, kCheckLimit);
          }
        };
        check(&o.check_error, "");
        if (prefill) {
          o.attention_path = engine.attention_path();
          o.attention_why = engine.attention_note();
        }
        // Timed: the step (the slowest rank per iteration); a decode step from a CUDA graph.
        Launch launch;
        if (prefill) {
          ids = engine.tokens(b, n, 7, st);
          launch = [&](cudaStream_t s2, int) { engine.prefill(ids, b, n, s2); };
        } else {
          graph.capture(st, [&](cudaStream_t s2) { engine.decode(next, b, n, s2); });
          launch = [&](cudaStream_t s2, int) { graph.launch(s2); };
        }
        o.step = group.measure(self, launch, step_mo);
        if (prefill && eo.overlap_chunks > 1) {
          // The same prefill in overlap chunks, checked, then timed.
          engine.set_overlap_chunks(eo.overlap_chunks);
          engine.prefill(ids, b, n, st);
          GPB_CUDA_CHECK(cudaStreamSynchronize(st));
          if (engine.last_chunks() > 1) {
            o.overlap_chunks = engine.last_chunks();
            check(&o.overlap_check_error, "overlapped: ");
            o.overlap_s = group.measure(self, launch, step_mo).median_s();
          }
          engine.set_overlap_chunks(1);
        }
        // One eager step with events around every operation.
        model::OpSpans timer(self.device);
        engine.set_observer(&timer);
        if (prefill)
          engine.prefill(ids, b, n, st);
        else
          engine.decode(next, b, n, st);
        GPB_CUDA_CHECK(cudaStreamSynchronize(st));
        engine.set_observer(nullptr);
        o.ops = split_by_kind(timer.collect());
        if (!prefill && t > 1) {
          // The decode graph without its collectives: the step minus what communication adds.
          parallel::SkippedCollectives none;
          engine.set_collectives(&none);
          CudaGraph bare;
          bare.capture(st, [&](cudaStream_t s2) { engine.decode(next, b, n, s2); });
          engine.set_collectives(active);
          o.no_comm_s =
              group.measure(self, [&](cudaStream_t s2, int) { bare.launch(s2); }, step_mo)
                  .median_s();
        }
        // The layer's all-reduce alone, same size, same GPUs (with sequence parallelism in
        // prefill: its reduce-scatter and all-gather, which carry the same bus bytes).
        if (t > 1) {
          const std::int64_t rows = prefill ? batch * len : batch;
          const std::size_t elems = static_cast<std::size_t>(rows * H);
          o.allreduce_bytes = static_cast<double>(elems) * 2;
          void* buf = scratch.get();
          const auto chunk = static_cast<std::int64_t>(elems) / t;
          const bool split_rows = s.sequence_parallel && prefill;
          // Through the step's own collectives (NCCL's, or the copy engines'), in place.
          auto collective = [&](cudaStream_t s2) {
            if (split_rows) {
              active->reduce_scatter(buf, chunk, dtype, s2);
              active->all_gather(buf, chunk, dtype, s2);
            } else {
              active->all_reduce(buf, static_cast<std::int64_t>(elems), dtype, s2);
            }
          };
          if (prefill) {
            o.allreduce_alone_s =
                group.measure(self, [&](cudaStream_t s2, int) { collective(s2); }, comm_mo)
                    .median_s();
          } else {
            // Decode's small all-reduces as its graph runs them: 2 per layer, back to back.
            const int k = 2 * engine.layers();
            CudaGraph burst;
            burst.capture(st, [&](cudaStream_t s2) {
              for (int i = 0; i < k; ++i) collective(s2);
            });
            o.allreduce_alone_s =
                group.measure(self, [&](cudaStream_t s2, int) { burst.launch(s2); }, comm_mo)
                    .median_s() /
                k;
          }
        }
        o.memory_per_gpu = engine.memory().total();
        // A one-shot all-reduce whose wait for a peer gave up leaves wrong sums behind (and
        // times that say nothing): the point fails.
        if (mine) {
          GPB_CUDA_CHECK(cudaStreamSynchronize(st));
          if (group.any(self.rank, mine->timed_out(self.rank))) {
            o.status = "failed";
            o.note = "one-shot all-reduce: a rank waited for a peer past the time limit";
          }
        }
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
    if (ipc) {  // no peer may still write into this rank's buffers when they are freed
      GPB_CUDA_CHECK(cudaStreamSynchronize(st));
      group.barrier();
    }
  });
  return out;
}

}  // namespace gpubench::tp
