// `gpubench advise` on the GPUs: the building blocks its predictions rest on. Compute is timed on
// one GPU, a tensor-parallel shard without its communication (parallel::SkippedCollectives):
// what every rank of that degree computes. Collectives and stage-to-stage sends are timed alone
// on the GPUs that run them.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <optional>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/nccl.hpp"
#include "gpubench/model/observe.hpp"
#include "gpubench/modules/advise/advise.hpp"
#include "gpubench/parallel/collectives.hpp"

namespace gpubench::advise {

namespace {

// All-reduces back to back in one graph, as a decode step's graph runs them.
constexpr int kGraphRepeats = 16;

// One engine's step times for every microbatch size of a degree: decode steps at the first and
// the last context of the generation (graphs, back to back as a generation runs them), and
// prefill (prefill_as_generated).
struct StepTimes {
  double prefill = 0, decode_first = 0, decode_last = 0;
  double prefill_overlap = 0;  // in kOverlapChunks chunks, where asked
};

// A prefill as a generation meets it: after decode steps (about 50 ms of them), and as long as
// the whole model's (`chain` prefills of this engine back to back, the time of one returned). A
// GPU at its power cap runs a short burst of work at higher clocks than a long one: timed back to
// back, prefills ran at the capped clocks (one H100, llama-2-70b cut to 16 layers: TTFT
// predicted 12% long), timed alone after decode steps at the burst's (llama-2-7b, 8 sequences:
// 8% short). The median of 7; of 3 in quick mode and where the first timed prefills took over
// kLongPrefillS (a long run is held at the capped clocks and varies little: llama-2-70b's
// prefills of many sequences take seconds each).
constexpr double kLongPrefillS = 0.5;
double prefill_as_generated(Context& ctx, model::Transformer& engine, const CudaGraph& decode,
                            double decode_s, int chain, const std::int32_t* ids, int b, int n,
                            int gpu, cudaStream_t st) {
  const int lead = static_cast<int>(std::clamp(0.05 / std::max(decode_s, 1e-6), 8.0, 512.0));
  Event begin(gpu), end(gpu);
  std::vector<double> times;
  int reps = ctx.quick() ? 3 : 7;
  for (int r = 0; r <= reps; ++r) {  // the first is a warm-up
    for (int k = 0; k < lead; ++k) decode.launch(st);
    begin.record(st);
    for (int k = 0; k < chain; ++k) engine.prefill(ids, b, n, st);
    end.record(st);
    end.synchronize();
    if (r == 1 && end.seconds_since(begin) > kLongPrefillS) reps = 3;
    if (r > 0) times.push_back(end.seconds_since(begin) / chain);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The engine of `layers` (with the head or not) at degree t, timed at each microbatch size; the
// sizes in `overlapped` also with their prefill in kOverlapChunks chunks.
std::map<std::int64_t, StepTimes> time_engine(Context& ctx, const Settings& s, int t, int layers,
                                              bool head, const std::vector<std::int64_t>& micros,
                                              const std::vector<std::int64_t>& overlapped, int gpu,
                                              cudaStream_t st) {
  model::EngineOptions eo;
  eo.dtype = s.dtype;
  eo.max_batch = static_cast<int>(*std::max_element(micros.begin(), micros.end()));
  eo.max_tokens = static_cast<int>(s.prompt);
  eo.max_context = static_cast<int>(s.prompt + s.output_len - 1);
  eo.tp_size = t;
  eo.layers = layers;
  eo.head = head;
  eo.overlap_chunks = overlapped.empty() ? 1 : kOverlapChunks;
  model::Transformer engine(s.model, eo, gpu);
  engine.set_overlap_chunks(1);
  parallel::SkippedCollectives none;
  engine.set_collectives(&none);
  const MeasureOptions mo = model::engine_step_options(ctx.common());
  const int n = static_cast<int>(s.prompt);
  const int last = static_cast<int>(s.prompt + s.output_len - 2);
  std::map<std::int64_t, StepTimes> out;
  for (std::int64_t micro : micros) {
    const int b = static_cast<int>(micro);
    const std::int32_t* ids = engine.tokens(b, n, 7, st);
    StepTimes& o = out[micro];
    engine.prefill(ids, b, n, st);  // the cache filled, plans made outside the captures
    CudaGraph first;
    for (auto [context, into] : {std::pair{n, &o.decode_first}, std::pair{last, &o.decode_last}}) {
      engine.decode(ids, b, context, st);
      CudaGraph step;
      step.capture(st, [&](cudaStream_t s2) { engine.decode(ids, b, context, s2); });
      *into = ctx.measure(
                     gpu, st, [&](cudaStream_t s2, int) { step.launch(s2); }, mo)
                  .median_s();
      if (context == n) first = std::move(step);
    }
    const int chain = std::max(1, (s.layers + layers / 2) / layers);
    o.prefill = prefill_as_generated(ctx, engine, first, o.decode_first, chain, ids, b, n, gpu, st);
    if (std::find(overlapped.begin(), overlapped.end(), micro) != overlapped.end()) {
      engine.set_overlap_chunks(kOverlapChunks);
      o.prefill_overlap =
          prefill_as_generated(ctx, engine, first, o.decode_first, chain, ids, b, n, gpu, st);
      engine.set_overlap_chunks(1);
    }
  }
  return out;
}

// The parts of degree t from three engines: a layers with the head, b layers with it, a without:
// the head is what the first has over the third, the embedding and the step's fixed cost what
// the first has beyond a layers (a layer from the first two's difference), a layer the rest of
// the second's step over its b layers.
void compute_parts(Context& ctx, const Settings& s, int t, const std::vector<std::int64_t>& micros,
                   const std::vector<std::int64_t>& overlapped, Blocks& blocks) {
  const int gpu = ctx.gpus().front();
  DeviceGuard guard(gpu);
  Stream stream(gpu);
  const auto [a, b] = calibration_layers(s.model.num_layers);
  std::map<std::int64_t, StepTimes> small, big, headless;
  try {
    small = time_engine(ctx, s, t, a, true, micros, overlapped, gpu, stream.get());
    big = a == b ? small : time_engine(ctx, s, t, b, true, micros, overlapped, gpu, stream.get());
    headless = time_engine(ctx, s, t, a, false, micros, overlapped, gpu, stream.get());
  } catch (const OutOfMemoryError& e) {
    spdlog::warn("advise: tp={} shard engines do not fit one GPU: {}", t, e.what());
    return;
  }
  const auto parts = [&](double StepTimes::*f, std::int64_t micro) {
    return parts_of_steps(a, b, small.at(micro).*f, big.at(micro).*f, headless.at(micro).*f);
  };
  for (std::int64_t micro : micros) {
    blocks.prefill[{t, micro}] = parts(&StepTimes::prefill, micro);
    blocks.decode_first[{t, micro}] = parts(&StepTimes::decode_first, micro);
    blocks.decode_last[{t, micro}] = parts(&StepTimes::decode_last, micro);
    if (std::find(overlapped.begin(), overlapped.end(), micro) != overlapped.end())
      blocks.prefill_overlap[{t, micro}] = parts(&StepTimes::prefill_overlap, micro);
  }
}

// What is timed: an all-reduce as a decode graph makes it (small ones through the one-shot
// kernel where s.one_shot()), one through the copy engines as an overlapped prefill makes it
// (eager, each chunk's; small ones to the former), NCCL's all-reduce (training's buckets, as dp
// runs them), reduce-scatter and all-gather, a send.
enum class Op { AllReduce, CopyAllReduce, BucketAllReduce, ReduceScatter, AllGather, Send };

// One collective over `bytes` of the whole buffer, in place (rank r's chunk at r x bytes / ranks);
// all-reduces through `engines`, the collectives a generation's engine is given.
void collective(Op kind, void* buf, std::uint64_t bytes, ncclDataType_t type, int rank, int ranks,
                ncclComm_t comm, model::TpCollectives& engines, ActDtype dtype, cudaStream_t st) {
  char* base = static_cast<char*>(buf);
  const std::size_t elems = bytes / 2, chunk = elems / static_cast<std::size_t>(ranks);
  char* mine = base + static_cast<std::size_t>(rank) * chunk * 2;
  switch (kind) {
    case Op::AllReduce:
    case Op::CopyAllReduce:
      engines.all_reduce(buf, static_cast<std::int64_t>(elems), dtype, st);
      break;
    case Op::BucketAllReduce:
      GPB_NCCL_CHECK(ncclAllReduce(buf, buf, elems, type, ncclSum, comm, st));
      break;
    case Op::ReduceScatter:
      GPB_NCCL_CHECK(ncclReduceScatter(buf, mine, chunk, type, ncclSum, comm, st));
      break;
    case Op::AllGather:
      GPB_NCCL_CHECK(ncclAllGather(mine, buf, chunk, type, comm, st));
      break;
    case Op::Send:
      break;
  }
}

// Collectives on the first `ranks` GPUs, each size's in place (kGraphRepeats in a graph; copy
// engines' eagerly), or (ranks 2, Send) rank 0's NCCL send to rank 1. Empty where the copy
// engines lack peer access.
std::map<std::uint64_t, double> time_ops(Context& ctx, const Settings& s, int ranks,
                                         const std::vector<std::uint64_t>& sizes, Op kind) {
  const bool sends = kind == Op::Send, copy = kind == Op::CopyAllReduce;
  std::map<std::uint64_t, double> out;
  auto group = leading_ranks(ctx, ranks, "--workload");
  if (!group) return out;
  const MeasureOptions mo = model::engine_step_options(ctx.common());
  const ncclDataType_t type = s.dtype == ActDtype::BF16 ? ncclBfloat16 : ncclFloat16;
  const std::uint64_t largest =
      std::max<std::uint64_t>(sizes.empty() ? 0 : *std::max_element(sizes.begin(), sizes.end()), 4);
  const std::unique_ptr<parallel::OneShotGroup> shots =
      (kind == Op::AllReduce || copy) && s.one_shot()
          ? std::make_unique<parallel::OneShotGroup>(group->devices(),
                                                     parallel::OneShotCollectives::kMaxBytes)
          : nullptr;
  const std::unique_ptr<parallel::CopyEngineGroup> copies =
      copy ? std::make_unique<parallel::CopyEngineGroup>(
                 group->devices(), copy_slot_bytes(largest, ranks), group.get())
           : nullptr;
  if (copies && !copies->peers_ok()) {
    spdlog::warn("advise: GPUs without peer access: no all-reduce through the copy engines");
    return out;
  }
  group->run([&](Rank& self) {
    ncclUniqueId id{};
    if (self.rank == 0) GPB_NCCL_CHECK(ncclGetUniqueId(&id));
    group->broadcast(self.rank, &id, sizeof id);
    NcclComm comm(id, ranks, self.rank);
    parallel::NcclCollectives nccl(comm.get());
    std::optional<parallel::OneShotCollectives> shot;
    if (shots) shot.emplace(*shots, self.rank, nccl);
    model::TpCollectives& small = shot ? static_cast<model::TpCollectives&>(*shot) : nccl;
    std::optional<parallel::CopyEngineCollectives> copied;
    if (copies) copied.emplace(*copies, self.rank, small);
    model::TpCollectives& engines = copied ? static_cast<model::TpCollectives&>(*copied) : small;
    DeviceBuffer buf(self.device, largest);
    cudaStream_t st = self.stream->get();
    GPB_CUDA_CHECK(cudaMemsetAsync(buf.get(), 0, largest, st));
    for (std::uint64_t bytes : sizes) {
      const auto once = [&](cudaStream_t s2) {
        if (!sends)
          collective(kind, buf.get(), bytes, type, self.rank, ranks, comm.get(), engines, s.dtype,
                     s2);
        else if (self.rank == 0)
          GPB_NCCL_CHECK(ncclSend(buf.get(), bytes, ncclChar, 1, comm.get(), s2));
        else
          GPB_NCCL_CHECK(ncclRecv(buf.get(), bytes, ncclChar, 0, comm.get(), s2));
      };
      const auto repeated = [&](cudaStream_t s2) {
        for (int i = 0; i < kGraphRepeats; ++i) once(s2);
      };
      // Once eagerly first: NCCL sets up its connections, and CUDA loads the kernels, outside
      // the capture and the measurement (whose spin gate a kernel's loading may wait for).
      once(st);
      self.group->sync(self);
      Measurement m;
      if (sends) {
        m = group->measure(
            self, [&](cudaStream_t s2, int) { once(s2); }, mo);
      } else if (copy) {  // not captured (they would go to the fallback): as many eagerly
        m = group->measure(
            self, [&](cudaStream_t s2, int) { repeated(s2); }, mo);
      } else {
        CudaGraph graph;
        graph.capture(st, repeated);
        m = group->measure(
            self, [&](cudaStream_t s2, int) { graph.launch(s2); }, mo);
      }
      if (self.rank == 0) out[bytes] = m.median_s() / (sends ? 1 : kGraphRepeats);
    }
    self.group->sync(self);
    // A one-shot wait that gave up timed nothing worth keeping: no block, its plans dropped.
    if (group->any(self.rank, shots && shots->timed_out(self.rank))) {
      if (self.rank == 0) {
        spdlog::warn("advise: a one-shot all-reduce waited for a peer past the time limit");
        out.clear();
      }
    }
    group->barrier();
  });
  return out;
}

}  // namespace

Blocks calibrate(Context& ctx, const Settings& s, const Needs& needs) {
  Blocks blocks;
  std::map<int, std::vector<std::int64_t>> micros, overlapped;
  for (const auto& [t, micro] : needs.compute) micros[t].push_back(micro);
  for (const auto& [t, micro] : needs.overlap_compute) overlapped[t].push_back(micro);
  for (const auto& [t, list] : micros) {
    if (Context::interrupted()) return blocks;
    spdlog::info("advise: compute at tp={} for {} microbatch size(s)", t, list.size());
    compute_parts(ctx, s, t, list, overlapped[t], blocks);
  }
  if (!needs.train.empty() && !Context::interrupted()) {
    spdlog::info("advise: training steps for {} batch size(s)", needs.train.size());
    train_parts(ctx, s, needs.train, needs.adamw, ctx.gpus().front(), blocks);
  }
  using Sizes = std::vector<std::pair<int, std::uint64_t>>;
  using Into = std::map<std::pair<int, std::uint64_t>, double>;
  for (auto [kind, list, into, what] :
       {std::tuple<Op, const Sizes*, Into*, const char*>{Op::AllReduce, &needs.all_reduces,
                                                         &blocks.all_reduce_s, "all-reduces"},
        {Op::CopyAllReduce, &needs.copy_all_reduces, &blocks.copy_all_reduce_s,
         "all-reduces through the copy engines"},
        {Op::BucketAllReduce, &needs.bucket_all_reduces, &blocks.bucket_all_reduce_s,
         "gradient buckets' all-reduces"},
        {Op::ReduceScatter, &needs.reduce_scatters, &blocks.reduce_scatter_s, "reduce-scatters"},
        {Op::AllGather, &needs.all_gathers, &blocks.all_gather_s, "all-gathers"}}) {
    std::map<int, std::vector<std::uint64_t>> by_ranks;
    for (const auto& [t, bytes] : *list) by_ranks[t].push_back(bytes);
    for (const auto& [t, sizes] : by_ranks) {
      if (Context::interrupted()) return blocks;
      spdlog::info("advise: {} on {} GPUs", what, t);
      for (const auto& [bytes, sec] : time_ops(ctx, s, t, sizes, kind)) (*into)[{t, bytes}] = sec;
    }
  }
  if (!needs.transfers.empty() && !Context::interrupted()) {
    spdlog::info("advise: stage-to-stage sends");
    blocks.transfer_s = time_ops(ctx, s, 2, needs.transfers, Op::Send);
  }
  return blocks;
}

}  // namespace gpubench::advise
