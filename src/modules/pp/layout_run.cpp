// `gpubench pp --layouts`: the same inference workload (a batch of prompts, prefill) under a
// parallel layout of data, tensor and pipeline parallelism over the same GPUs. Rank
// ((d x pp) + stage) x tp + r is tensor rank r of pipeline stage `stage` of replica d; each
// (replica, stage) has a tensor-parallel communicator, each (replica, tensor rank) a pipeline
// one, and each stage's tensor rank r sends its (replicated) hidden states to tensor rank r of
// the next stage.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/gemm.hpp"
#include "gpubench/core/nccl.hpp"
#include "gpubench/model/observe.hpp"
#include "gpubench/model/transformer.hpp"
#include "gpubench/modules/pp/pp.hpp"
#include "gpubench/parallel/collectives.hpp"

namespace gpubench::pp {

namespace {

constexpr double kCheckLimit = 0.05;      // as inference.cpp: logits against the whole model
constexpr std::uint64_t kTokenSeed = 31;  // microbatch mb's prompts, as inference.cpp

}  // namespace

int layout_microbatches(const Settings& s, const Layout& l, int batch) {
  if (l.pp == 1 || batch % l.dp != 0) return 1;
  const int per_replica = batch / l.dp;
  int best = 1;
  for (int m : s.microbatches)
    if (per_replica % m == 0) best = std::max(best, m);
  return best;
}

LayoutOutcome run_layout(Context& ctx, const Settings& s, const Layout& l, int batch,
                         RankGroup& group, ReferenceLogits& reference) {
  if (group.size() != l.gpus())
    throw InputError(fmt::format("--layouts: {} needs {} GPUs, the group has {}", l.name(),
                                 l.gpus(), group.size()));
  LayoutOutcome out;
  out.layout = l;
  out.batch = batch;
  if (batch % l.dp != 0) {
    out.status = "skipped";
    out.note = fmt::format("{} replicas do not split a batch of {}", l.dp, batch);
    return out;
  }
  const int m = layout_microbatches(s, l, batch);
  out.m = m;
  const std::int64_t seqs = batch / l.dp / m;
  const int b = static_cast<int>(seqs), n = static_cast<int>(s.seq_len);
  const ActDtype dtype = s.dtype == "fp16" ? ActDtype::F16 : ActDtype::BF16;
  const ncclDataType_t type = dtype == ActDtype::BF16 ? ncclBfloat16 : ncclFloat16;
  const std::int64_t H = s.model.hidden_size;
  const std::vector<int> stage_layers = inference_stage_layers(s, l.pp);
  const MeasureOptions mo = model::engine_step_options(ctx.common());
  const std::size_t logit_elems = static_cast<std::size_t>(seqs) * s.model.vocab_size;
  spdlog::info("pp: layout {}, batch {}: {} microbatches of {} sequences", l.name(), batch, m,
               seqs);

  group.run([&](Rank& self) {
    const parallel::Place at = parallel::Place::of(l, self.rank);
    const int trank = at.trank, stage = at.stage;
    cudaStream_t st = self.stream->get();
    model::EngineOptions eo;
    eo.dtype = dtype;
    eo.max_batch = b;
    eo.max_tokens = n;
    eo.max_context = n;
    eo.tp_size = l.tp;
    eo.tp_rank = trank;
    for (int j = 0; j < stage; ++j) eo.first_layer += stage_layers[static_cast<std::size_t>(j)];
    eo.layers = stage_layers[static_cast<std::size_t>(stage)];
    eo.embed = stage == 0;
    eo.head = stage == l.pp - 1;
    model::EngineOptions whole_eo = eo;
    whole_eo.tp_size = 1;
    whole_eo.tp_rank = 0;
    whole_eo.first_layer = 0;
    whole_eo.layers = s.layers;
    whole_eo.embed = whole_eo.head = true;
    // Memory, before anything is allocated: this rank's engine and prompts, and on rank 0
    // first the whole model for the reference (built and freed before).
    const auto key = std::make_tuple(seqs, s.seq_len, 0);
    const std::size_t ws = gemm_workspace_bytes(compute_capability_major(self.device));
    std::uint64_t need = model::engine_memory(s.model, eo, ws).total() +
                         static_cast<std::uint64_t>(m) * b * n * sizeof(std::int32_t);
    if (self.rank == 0 && !reference.count(key))
      need = std::max<std::uint64_t>(need, model::engine_memory(s.model, whole_eo, ws).total());
    if (const std::string why = agreed_memory_check(group, self.rank, need); !why.empty()) {
      if (self.rank == 0) {
        out.status = "skipped";
        out.note = why;
      }
      return;
    }
    // The whole model's logits of microbatch 0 (every replica's check), on the first GPU
    // before the engines take their memory.
    if (self.rank == 0 && !reference.count(key)) {
      model::Transformer whole(s.model, whole_eo, self.device);
      whole.prefill(whole.tokens(b, n, kTokenSeed, st), b, n, st);
      self.group->sync(self);
      reference[key] = model::to_host_values(whole.logits(), logit_elems, dtype);
    }
    group.barrier();
    share_reference(group, self.rank, reference, {key}, logit_elems);

    const parallel::LayoutComms comms(group, self.rank, l, /*ring=*/false, s.nccl_ctas);
    const ncclComm_t tp_comm = comms.tp.get(), pp_comm = comms.pp.get();
    std::unique_ptr<parallel::NcclCollectives> collectives;
    if (l.tp > 1) collectives = std::make_unique<parallel::NcclCollectives>(tp_comm);

    model::Transformer engine(s.model, eo, self.device);
    if (collectives) engine.set_collectives(collectives.get());
    parallel::wait_with_group(engine, group);  // behind the transfers: ends if a peer failed
    const std::size_t hidden = static_cast<std::size_t>(seqs * s.seq_len * H);
    // Stage 0's prompts, one buffer per microbatch (the engine's token buffer is reused).
    DeviceBuffer ids_buf(self.device, static_cast<std::size_t>(m) * b * n * sizeof(std::int32_t));
    if (stage == 0)
      for (int mb = 0; mb < m; ++mb)
        GPB_CUDA_CHECK(cudaMemcpyAsync(
            ids_buf.as<std::int32_t>() + mb * b * n, engine.tokens(b, n, kTokenSeed + mb, st),
            static_cast<std::size_t>(b) * n * sizeof(std::int32_t), cudaMemcpyDeviceToDevice, st));
    // Microbatch mb through this stage: receive, prefill, send on.
    auto through = [&](int mb, cudaStream_t s2) {
      if (stage > 0)
        GPB_NCCL_CHECK(ncclRecv(engine.input_hidden(), hidden, type, stage - 1, pp_comm, s2));
      engine.prefill(stage == 0 ? ids_buf.as<std::int32_t>() + mb * b * n : nullptr, b, n, s2);
      if (stage < l.pp - 1)
        GPB_NCCL_CHECK(ncclSend(engine.hidden(), hidden, type, stage + 1, pp_comm, s2));
    };
    auto step = [&](cudaStream_t s2) {
      for (int mb = 0; mb < m; ++mb) through(mb, s2);
    };
    // Checked once: microbatch 0 alone through the pipeline, its logits on every replica's
    // last stage (tensor rank 0) against the whole model's.
    double error = 0;
    through(0, st);
    self.group->sync(self);
    if (stage == l.pp - 1 && trank == 0)
      error = model::relative_l2(model::to_host_values(engine.logits(), logit_elems, dtype),
                                 reference.at(key));
    const auto errors = group.all_gather(self.rank, error);
    const double worst = *std::max_element(errors.begin(), errors.end());
    const Measurement step_m = group.measure(
        self, [&](cudaStream_t s2, int) { step(s2); }, mo);
    const auto memory = group.all_gather(self.rank, static_cast<double>(engine.memory().total()));
    if (self.rank == 0) {
      out.check_error = worst;
      if (!(worst <= kCheckLimit)) {
        out.status = "failed";
        out.note = fmt::format(
            "logits differ from the whole model's: relative error {:.3g} "
            "(limit {})",
            worst, kCheckLimit);
      }
      out.step = step_m;
      out.memory_per_gpu =
          static_cast<std::uint64_t>(*std::max_element(memory.begin(), memory.end()));
    }
    group.barrier();
  });
  return out;
}

}  // namespace gpubench::pp
