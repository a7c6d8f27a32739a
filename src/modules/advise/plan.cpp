// `gpubench advise`: what a layout runs for a workload and batch, and the memory it holds.
#include <fmt/format.h>

#include <algorithm>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/gemm.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/model/cost.hpp"
#include "gpubench/modules/advise/advise.hpp"
#include "gpubench/parallel/collectives.hpp"

namespace gpubench::advise {

int microbatches(std::int64_t sequences, int pp) {
  if (sequences < 1 || pp < 1)
    throw InputError(fmt::format("{} sequences over {} stages", sequences, pp));
  int m = 1;
  for (int k = 1; k <= pp && k <= sequences; ++k)
    if (sequences % k == 0) m = k;
  return m;
}

model::EngineOptions rank_engine_options(const Settings& s, const Plan& p, int stage, int trank) {
  model::EngineOptions eo;
  eo.dtype = s.dtype;
  eo.max_batch = static_cast<int>(p.micro);  // a step: one microbatch
  eo.cache_batch = static_cast<int>(p.sequences);
  eo.max_tokens = static_cast<int>(s.prompt);
  eo.max_context = static_cast<int>(s.prompt + s.output_len - 1);
  eo.tp_size = p.layout.tp;
  eo.tp_rank = trank;
  for (int j = 0; j < stage; ++j) eo.first_layer += p.stage_layers[static_cast<std::size_t>(j)];
  eo.layers = p.stage_layers[static_cast<std::size_t>(stage)];
  eo.embed = stage == 0;
  eo.head = stage == p.layout.pp - 1;
  eo.overlap_chunks = p.overlap ? kOverlapChunks : 1;
  return eo;
}

bool overlap_applies(const Settings& s, const Layout& l, std::int64_t micro) {
  return l.tp > 1 &&
         (micro % kOverlapChunks == 0 || (micro == 1 && s.prompt % kOverlapChunks == 0)) &&
         overlap_chunk_bytes(s, micro) >= parallel::CopyEngineCollectives::kMinBytes;
}

std::size_t copy_slot_bytes(std::uint64_t bytes, int ranks) {
  return static_cast<std::size_t>(bytes / static_cast<std::uint64_t>(ranks)) + 256;
}

std::uint64_t overlap_chunk_bytes(const Settings& s, std::int64_t micro) {
  return static_cast<std::uint64_t>(micro * s.prompt / kOverlapChunks) *
         static_cast<std::uint64_t>(s.model.hidden_size) * static_cast<std::uint64_t>(s.elem_bytes);
}

Plan make_plan(const Settings& s, const Layout& l, Workload w, std::int64_t batch,
               const Parts& parts, int cc_major, std::uint64_t gpu_bytes, bool overlap) {
  Plan p;
  p.layout = l;
  p.overlap = overlap;
  p.workload = w;
  p.batch = w == Workload::Latency ? l.dp : batch;
  if (p.batch % l.dp != 0) {
    p.why_not = fmt::format("{} replicas do not split a batch of {}", l.dp, p.batch);
    return p;
  }
  p.sequences = p.batch / l.dp;
  p.m = microbatches(p.sequences, l.pp);
  p.micro = p.sequences / p.m;
  if (overlap && !overlap_applies(s, l, p.micro)) {
    p.why_not = fmt::format(
        "an overlapped prefill needs tp > 1 and a microbatch of a multiple of {} sequences, or of "
        "one whose prompt divides into {} chunks, each chunk's all-reduce at least {} (smaller "
        "ones do not go through the copy engines)",
        kOverlapChunks, kOverlapChunks, format_bytes(parallel::CopyEngineCollectives::kMinBytes));
    return p;
  }
  if (l.pp > s.layers) {  // --layers cut the model below the layout's stages
    p.why_not = fmt::format("{} stages for {} layers", l.pp, s.layers);
    return p;
  }
  p.stage_layers = parallel::balance_stages(
      std::vector<double>(static_cast<std::size_t>(s.layers), parts.layer > 0 ? parts.layer : 1.0),
      l.pp, std::max(parts.embed, 0.0), std::max(parts.head, 0.0));
  const std::size_t ws = gemm_workspace_bytes(cc_major);
  std::uint64_t largest = 0;
  for (int stage = 0; stage < l.pp; ++stage)
    largest = std::max(
        largest, model::engine_memory(s.model, rank_engine_options(s, p, stage, 0), ws).total());
  p.memory_per_gpu = largest + parallel::kMemoryReserve;
  // The copy engines' staging: a slot a peer.
  if (overlap)
    p.memory_per_gpu += static_cast<std::uint64_t>(l.tp - 1) *
                        copy_slot_bytes(overlap_chunk_bytes(s, p.micro), l.tp);
  if (gpu_bytes > 0 && p.memory_per_gpu > gpu_bytes)
    p.why_not = fmt::format(
        "does not fit in GPU memory: a GPU needs {} ({} spare included), {} "
        "available",
        format_bytes(p.memory_per_gpu), format_bytes(parallel::kMemoryReserve),
        format_bytes(gpu_bytes));
  return p;
}

std::string Plan::name() const {
  if (workload != Workload::Train || layout.gpus() == 1)
    return overlap ? layout.name() + " overlap" : layout.name();
  return fmt::format("{} {}", layout.name(), parallel::to_string(strategy));
}

double attention_share(const Settings& s, std::int64_t sequences, std::int64_t tokens,
                       bool forward) {
  const auto work = [&](int blocks) {
    return model::stage_work_blocks(s.model, 0, blocks, false, sequences, tokens, s.elem_bytes);
  };
  const model::StageWork attention = work(1), layer = work(2);
  return forward ? attention.forward_flops / layer.forward_flops
                 : attention.backward_flops / layer.backward_flops;
}

namespace {

// The buckets of a training plan with their units' compute: a half-layer's share of its layer's
// forward and backward FLOPs (attention's and the MLP's differ), the head apart.
std::vector<TrainBucket> train_buckets(const Settings& s, const std::vector<model::TrainParam>& f,
                                       const parallel::ParamPlan& plan) {
  const double attention_forward = attention_share(s, s.train_batch, s.seq_len, true);
  const double attention_backward = attention_share(s, s.train_batch, s.seq_len, false);
  // A half-layer's share of its layer: attention's (even units), or the MLP's, the rest.
  const auto share = [&](int unit, bool forward) {
    const double a = forward ? attention_forward : attention_backward;
    return unit % 2 == 0 ? a : 1.0 - a;
  };
  const int head_unit = f.back().unit;
  std::vector<TrainBucket> out;
  for (const parallel::Bucket& b : plan.buckets) {
    TrainBucket t;
    t.elems = b.elems;
    for (int u = b.first_unit; u <= b.last_unit; ++u) {
      if (u == head_unit) {
        t.head = true;
        continue;
      }
      t.forward_layers += share(u, true);
      t.backward_layers += share(u, false);
    }
    out.push_back(t);
  }
  return out;
}

// Why a training plan does not fit, with its parts and the sequences a GPU could train instead.
// The rest of the step is taken as --train-batch equal shares: it also holds what does not grow
// with the batch, so the count given is one that fits.
std::string train_misfit(const Settings& s, const parallel::MemoryPlan& m,
                         std::uint64_t gpu_bytes) {
  const std::uint64_t states = m.params + m.grads + m.optimizer;
  const std::uint64_t fixed = states + parallel::kMemoryReserve;  // whatever the batch
  const std::uint64_t per_sequence = m.activations / static_cast<std::uint64_t>(s.train_batch);
  std::string instead = fmt::format("; the weights, gradients and optimizer states alone take {}",
                                    format_bytes(states));
  if (fixed < gpu_bytes) {
    const std::uint64_t fit = per_sequence > 0 ? (gpu_bytes - fixed) / per_sequence : 0;
    instead = fit > 0 ? fmt::format("; {} a GPU fit (--train-batch)",
                                    sequences(static_cast<std::int64_t>(fit)))
                      : fmt::format("; one sequence needs {}", format_bytes(fixed + per_sequence));
  }
  return fmt::format(
      "does not fit in GPU memory: a GPU needs {} (weights, gradients and optimizer states {}, "
      "activations of {} {}, {} spare), {} available{}",
      format_bytes(fixed + m.activations), format_bytes(states), sequences(s.train_batch),
      format_bytes(m.activations), format_bytes(parallel::kMemoryReserve), format_bytes(gpu_bytes),
      instead);
}

}  // namespace

Plan make_train_plan(const Settings& s, int gpus, parallel::Strategy k, const TrainFootprint& f,
                     std::uint64_t gpu_bytes) {
  if (gpus < 1 || f.params.empty())
    throw InputError(
        fmt::format("a training plan of {} GPUs and {} parameters", gpus, f.params.size()));
  Plan p;
  p.layout.dp = gpus;
  p.workload = Workload::Train;
  p.strategy = gpus == 1 ? parallel::Strategy::Ddp : k;
  p.sequences = p.micro = s.train_batch;
  p.batch = gpus * s.train_batch;
  p.stage_layers = {s.layers};
  const bool fsdp = p.strategy == parallel::Strategy::Fsdp;
  const parallel::ParamPlan plan = parallel::plan_params(
      f.params, fsdp ? 0 : static_cast<std::int64_t>(s.bucket_bytes) / s.elem_bytes, gpus);
  p.buckets = train_buckets(s, f.params, plan);
  p.flat = plan.total;
  const parallel::MemoryPlan memory = parallel::memory_plan(p.strategy, plan, s.elem_bytes, f.rest);
  p.memory_per_gpu = memory.total() + parallel::kMemoryReserve;
  if (gpu_bytes > 0 && p.memory_per_gpu > gpu_bytes) p.why_not = train_misfit(s, memory, gpu_bytes);
  return p;
}

Parts parts_by_bytes(const Settings& s) {
  const model::ModelCost c =
      model::model_cost(s.model, model::Phase::Decode, 1, 1, s.prompt, s.elem_bytes);
  Parts p;
  p.layer = model::totals(c.layer).bytes;
  for (const model::OpCost& op : c.outside_layers)
    (op.name == "final_norm" || op.name == "lm_head" ? p.head : p.embed) += op.bytes;
  return p;
}

}  // namespace gpubench::advise
