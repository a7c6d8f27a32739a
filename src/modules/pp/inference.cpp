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
#include "gpubench/core/nccl.hpp"
#include "gpubench/core/stats.hpp"
#include "gpubench/model/cost.hpp"
#include "gpubench/model/observe.hpp"
#include "gpubench/model/transformer.hpp"
#include "pp.hpp"

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

std::vector<InferenceOutcome> run_inference(Context& ctx, const Settings& s, int p,
                                            RankGroup& group, ReferenceLogits& reference) {
  if (group.size() != p)
    throw InputError(fmt::format("--pp: {} ranks for {} stages", group.size(), p));
  const ActDtype dtype = dtype_of(s);
  const MeasureOptions step_mo = model::engine_step_options(ctx);
  const std::int64_t H = s.model.hidden_size;
  std::vector<InferenceOutcome> out;

  group.run([&](Rank& self) {
    const int stage = self.rank;
    cudaStream_t st = self.stream->get();
    ncclUniqueId id{};
    NcclComm comm;
    if (p > 1) {
      if (self.rank == 0) GPB_NCCL_CHECK(ncclGetUniqueId(&id));
      group.broadcast(self.rank, &id, sizeof(id));
      comm = NcclComm(id, p, self.rank, s.nccl_ctas);
    }
    const ncclDataType_t type = dtype == ActDtype::BF16 ? ncclBfloat16 : ncclFloat16;
    // Stages balanced by measured time: rank 0 times a layer, the embedding and the head on its
    // GPU, and every rank splits the model by those same figures.
    const StageCosts balance =
        p > 1 ? agreed_stage_costs(group, self.rank,
                                   [&] { return measure_inference_costs(s, self.device, st); })
              : inference_flop_costs(s);
    const std::vector<int> layers = stages_from_costs(balance, s.layers, p);
    if (self.rank == 0 && p > 1)
      spdlog::info("pp: inference stages {} by {}", fmt::join(layers, "/"), balance.describe());
    int first_layer = 0;
    for (int j = 0; j < stage; ++j) first_layer += layers[static_cast<std::size_t>(j)];

    for (int m : s.microbatches) {
      const std::int64_t seqs = s.batch / m;
      const int b = static_cast<int>(seqs), n = static_cast<int>(s.seq_len);
      const std::size_t logit_elems = static_cast<std::size_t>(seqs) * s.model.vocab_size;
      InferenceOutcome o;
      o.p = p;
      o.m = m;
      o.micro_sequences = seqs;
      o.stage_layers = layers;
      o.balance = balance;
      o.transfer_bytes = static_cast<double>(seqs * s.seq_len * H * act_bytes(dtype));
      if (self.rank == 0)
        spdlog::info("pp: {} stages, {} microbatches of {} sequences", p, m, seqs);

      // Memory, before anything is allocated: the stage's engine with every microbatch's KV
      // cache, and on rank 0 first the whole model for the reference (built and freed before).
      model::EngineOptions eo = engine_options(s, s.batch);
      eo.first_layer = first_layer;
      eo.layers = layers[static_cast<std::size_t>(stage)];
      eo.embed = stage == 0;
      eo.head = stage == p - 1;
      const std::size_t logit_bytes = logit_elems * act_bytes(dtype);
      const std::size_t ws = gemm_workspace_bytes(compute_capability_major(self.device));
      std::uint64_t need = model::engine_memory(s.model, eo, ws).total() +
                           (stage == p - 1 ? logit_bytes * m : 0) +
                           (stage == 0 ? static_cast<std::uint64_t>(s.batch) * n * 4 : 0);
      if (self.rank == 0 && !reference.count(std::make_tuple(seqs, s.seq_len, 0))) {
        model::EngineOptions whole = engine_options(s, seqs);
        whole.layers = s.layers;
        need = std::max<std::uint64_t>(need, model::engine_memory(s.model, whole, ws).total());
      }
      if (const std::string why = agreed_memory_check(group, self.rank, need); !why.empty()) {
        o.status = "skipped";
        o.note = why;
        if (self.rank == 0) out.push_back(o);
        continue;
      }

      // The whole model's logits of every microbatch, once per microbatch size (they are made
      // together), on rank 0's GPU, built and freed before the stages take their memory.
      if (self.rank == 0 && !reference.count(std::make_tuple(seqs, s.seq_len, 0))) {
        model::EngineOptions whole_eo = engine_options(s, seqs);
        whole_eo.layers = s.layers;
        model::Transformer whole(s.model, whole_eo, self.device);
        for (int mb = 0; mb < m; ++mb) {
          whole.prefill(whole.tokens(b, n, kTokenSeed + mb, st), b, n, st);
          GPB_CUDA_CHECK(cudaStreamSynchronize(st));
          reference[std::make_tuple(seqs, s.seq_len, mb)] =
              model::to_host_values(whole.logits(), logit_elems, dtype);
          // The decode step after it: the logits of the prompt plus one token (key seq_len + 1).
          whole.decode(whole.tokens(b, 1, kDecodeSeed + mb, st), b, n, st);
          GPB_CUDA_CHECK(cudaStreamSynchronize(st));
          reference[std::make_tuple(seqs, s.seq_len + 1, mb)] =
              model::to_host_values(whole.logits(), logit_elems, dtype);
        }
      }
      group.barrier();
      std::vector<ReferenceKey> keys;
      for (int mb = 0; mb < m; ++mb)
        for (std::int64_t len : {s.seq_len, s.seq_len + 1}) keys.emplace_back(seqs, len, mb);
      share_reference(group, self.rank, reference, keys, logit_elems);

      // The stage's engine holds every microbatch's KV cache (microbatch mb's from sequence
      // mb x seqs on), so that decode can follow the prefill microbatch by microbatch.
      model::Transformer engine(s.model, eo, self.device);
      const std::size_t hidden_elems = static_cast<std::size_t>(seqs * s.seq_len * H);
      std::vector<const std::int32_t*> ids(static_cast<std::size_t>(m), nullptr);
      // Stage 0's prompts, one buffer per microbatch (the engine's token buffer is reused).
      std::vector<DeviceBuffer> id_bufs;
      if (stage == 0)
        for (int mb = 0; mb < m; ++mb) {
          const std::int32_t* t = engine.tokens(b, n, kTokenSeed + mb, st);
          id_bufs.emplace_back(self.device, static_cast<std::size_t>(b) * n * sizeof(std::int32_t));
          GPB_CUDA_CHECK(cudaMemcpyAsync(id_bufs.back().get(), t,
                                         static_cast<std::size_t>(b) * n * sizeof(std::int32_t),
                                         cudaMemcpyDeviceToDevice, st));
          ids[static_cast<std::size_t>(mb)] = id_bufs.back().as<std::int32_t>();
        }
      // The last stage keeps every microbatch's logits for the check.
      DeviceBuffer logits(self.device, stage == p - 1 ? logit_bytes * m : 16);

      // One step: every microbatch in order, receive, forward, send; with `mark`, events at each
      // microbatch's receive end, forward end and send end.
      std::vector<Event> marks;
      auto step = [&](cudaStream_t s2, bool keep_logits, bool mark) {
        for (int mb = 0; mb < m; ++mb) {
          if (stage > 0)
            GPB_NCCL_CHECK(
                ncclRecv(engine.input_hidden(), hidden_elems, type, stage - 1, comm.get(), s2));
          if (mark) marks[static_cast<std::size_t>(3 * mb)].record(s2);
          engine.prefill(ids[static_cast<std::size_t>(mb)], b, n, s2, mb * b);
          if (mark) marks[static_cast<std::size_t>(3 * mb + 1)].record(s2);
          if (stage < p - 1)
            GPB_NCCL_CHECK(
                ncclSend(engine.hidden(), hidden_elems, type, stage + 1, comm.get(), s2));
          if (mark) marks[static_cast<std::size_t>(3 * mb + 2)].record(s2);
          if (keep_logits && stage == p - 1)
            GPB_CUDA_CHECK(cudaMemcpyAsync(logits.as<unsigned char>() + mb * logit_bytes,
                                           engine.logits(), logit_bytes, cudaMemcpyDeviceToDevice,
                                           s2));
        }
      };

      // The last stage's logits of every microbatch against the whole model's (reference key:
      // the sequence length they follow); 0 on the other stages.
      auto worst_error = [&](std::int64_t key_len) {
        double worst = 0;
        if (stage == p - 1)
          for (int mb = 0; mb < m; ++mb) {
            const auto got = model::to_host_values(logits.as<unsigned char>() + mb * logit_bytes,
                                                   logit_elems, dtype);
            worst = std::max(
                worst, model::relative_l2(got, reference.at(std::make_tuple(seqs, key_len, mb))));
          }
        return worst;
      };

      // Checked once.
      step(st, true, false);
      GPB_CUDA_CHECK(cudaStreamSynchronize(st));
      const double worst = worst_error(s.seq_len);
      o.check_error = group.all_gather(self.rank, worst)[static_cast<std::size_t>(p - 1)];
      if (!(o.check_error <= kCheckLimit)) {
        o.status = "failed";
        o.note = fmt::format(
            "pipeline logits differ from the whole model's: relative error "
            "{:.3g} (limit {})",
            o.check_error, kCheckLimit);
      }

      // Timed: the step, the slowest stage per iteration.
      o.step = group.measure(
          self, [&](cudaStream_t s2, int) { step(s2, false, false); }, step_mo);

      // One more step with events: each stage's timeline from its own start, the stages
      // released together by a barrier.
      for (int k = 0; k < 3 * m; ++k) marks.emplace_back(self.device);
      Event start(self.device);
      GPB_CUDA_CHECK(cudaStreamSynchronize(st));
      group.barrier();
      start.record(st);
      step(st, false, true);
      GPB_CUDA_CHECK(cudaStreamSynchronize(st));
      Timeline t;
      t.stages.resize(static_cast<std::size_t>(p));
      double send_s = 0;
      for (int mb = 0; mb < m; ++mb) {
        const auto at = [&](int k) {
          return marks[static_cast<std::size_t>(3 * mb + k)].seconds_since(start);
        };
        // Every stage's three marks of this microbatch, gathered in stage order.
        const auto f0 = group.all_gather(self.rank, at(0));
        const auto f1 = group.all_gather(self.rank, at(1));
        const auto f2 = group.all_gather(self.rank, at(2));
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
      o.bubble_theory = theory_bubble(Schedule::GPipe, p, m, 1);
      o.memory_per_gpu = engine.memory().total();

      // Decode: one token for every sequence at context seq_len, microbatch by microbatch
      // through the stages (each over its own cache rows), its logits checked like prefill's.
      std::vector<DeviceBuffer> next_bufs;
      std::vector<const std::int32_t*> next(static_cast<std::size_t>(m), nullptr);
      if (stage == 0)
        for (int mb = 0; mb < m; ++mb) {
          next_bufs.emplace_back(self.device, static_cast<std::size_t>(b) * sizeof(std::int32_t));
          GPB_CUDA_CHECK(cudaMemcpyAsync(
              next_bufs.back().get(), engine.tokens(b, 1, kDecodeSeed + mb, st),
              static_cast<std::size_t>(b) * sizeof(std::int32_t), cudaMemcpyDeviceToDevice, st));
          next[static_cast<std::size_t>(mb)] = next_bufs.back().as<std::int32_t>();
        }
      const std::size_t token_elems = static_cast<std::size_t>(seqs * H);
      auto decode_step = [&](cudaStream_t s2, bool keep_logits) {
        for (int mb = 0; mb < m; ++mb) {
          if (stage > 0)
            GPB_NCCL_CHECK(
                ncclRecv(engine.input_hidden(), token_elems, type, stage - 1, comm.get(), s2));
          engine.decode(next[static_cast<std::size_t>(mb)], b, n, s2, mb * b);
          if (stage < p - 1)
            GPB_NCCL_CHECK(ncclSend(engine.hidden(), token_elems, type, stage + 1, comm.get(), s2));
          if (keep_logits && stage == p - 1)
            GPB_CUDA_CHECK(cudaMemcpyAsync(logits.as<unsigned char>() + mb * logit_bytes,
                                           engine.logits(), logit_bytes, cudaMemcpyDeviceToDevice,
                                           s2));
        }
      };
      decode_step(st, true);
      GPB_CUDA_CHECK(cudaStreamSynchronize(st));
      const double dworst = worst_error(s.seq_len + 1);
      o.decode_check_error = group.all_gather(self.rank, dworst)[static_cast<std::size_t>(p - 1)];
      if (!(o.decode_check_error <= kCheckLimit)) {
        o.status = "failed";
        o.note = fmt::format(
            "pipeline decode logits differ from the whole model's: relative "
            "error {:.3g} (limit {})",
            o.decode_check_error, kCheckLimit);
      } else if (o.status == "ok") {
        o.decode = group.measure(
            self, [&](cudaStream_t s2, int) { decode_step(s2, false); }, step_mo);
      }
      if (self.rank == 0) out.push_back(o);
      group.barrier();  // every stage done with its engine before the next microbatch size
    }
  });
  return out;
}

}  // namespace gpubench::pp
