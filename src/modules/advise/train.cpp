// `gpubench advise` for training: a replica's footprint and its building blocks timed on one GPU
// (model::TrainStage's forward and backward, AdamW), and the layouts run by `dp` through the core,
// so that what is verified is exactly what `gpubench dp` measures and checks.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "gpubench/core/cli.hpp"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/module.hpp"
#include "gpubench/core/runner.hpp"
#include "gpubench/kernels/optimizer.cuh"
#include "gpubench/model/observe.hpp"
#include "gpubench/model/train_stage.hpp"
#include "gpubench/modules/advise/advise.hpp"

namespace gpubench::advise {

namespace {

// AdamW is timed over this many parameters: its fp32 state alone is 768 MB, far past any L2.
constexpr std::int64_t kAdamWParams = std::int64_t{1} << 26;

// A replica's forward alone, and its forward and backward, over `seqs` sequences through `layers`
// decoder layers (with or without the head), on `device`.
struct Pass {
  double forward = 0, both = 0;
};
Pass time_pass(Context& ctx, const Settings& s, int layers, bool head, std::int64_t seqs,
               int device, cudaStream_t st) {
  model::TrainStage ts(s.train_shape(), device, {0}, {2 * layers}, true, head, seqs);
  ts.build(1, st);
  // Without the head, the forward's output comes back as the backward's incoming gradient.
  DeviceBuffer hand(device, ts.transfer_bytes());
  const MeasureOptions mo = model::engine_step_options(ctx.common());
  const auto forward = [&](cudaStream_t s2) {
    unsigned char* slab = ts.allocate(0, s2);
    ts.forward(0, 0, slab, hand.get(), s2);
    return slab;
  };
  Pass p;
  p.forward = ctx.measure(
                     device, st,
                     [&](cudaStream_t s2, int) { model::TrainStage::release(forward(s2), s2); }, mo)
                  .median_s();
  p.both = ctx.measure(
                  device, st,
                  [&](cudaStream_t s2, int) {
                    unsigned char* slab = forward(s2);
                    ts.backward(0, slab, hand.get(), s2, false, nullptr);
                    model::TrainStage::release(slab, s2);
                  },
                  mo)
               .median_s();
  return p;
}

double time_adamw(Context& ctx, const Settings& s, int device, cudaStream_t st) {
  const auto n = static_cast<std::size_t>(kAdamWParams);
  DeviceBuffer master(device, n * 4), m(device, n * 4), v(device, n * 4),
      grad(device, n * s.elem_bytes), weight(device, n * s.elem_bytes);
  for (DeviceBuffer* b : {&master, &m, &v, &grad, &weight})
    GPB_CUDA_CHECK(cudaMemsetAsync(b->get(), 0, b->bytes(), st));
  const AdamW h;
  const MeasureOptions mo = model::engine_step_options(ctx.common());
  const Measurement t = ctx.measure(
      device, st,
      [&](cudaStream_t s2, int) {
        adamw_step(master.as<float>(), m.as<float>(), v.as<float>(), grad.get(), weight.get(),
                   kAdamWParams, h, 1, 1.0f, s.dtype, s2);
      },
      mo);
  return t.median_s() / static_cast<double>(kAdamWParams);
}

// The dp row of plan p in dp's report (its memory table's rows carry no bucket size).
const CaseResult* dp_row(const Report& r, const Plan& p) {
  for (const CaseResult& c : r.results)
    if (c.params.contains("bucket_bytes") &&
        c.params.value("strategy", "") == parallel::to_string(p.strategy) &&
        c.params.value("gpus", 0) == p.layout.gpus() && c.params.value("batch", 0) == p.micro)
      return &c;
  return nullptr;
}

}  // namespace

TrainFootprint train_footprint(const Settings& s, int device) {
  DeviceGuard guard(device);
  const model::TrainStage probe(s.train_shape(), device, {0}, {2 * s.layers}, true, true,
                                s.train_batch);
  return {probe.params(), probe.replica_bytes()};
}

void train_parts(Context& ctx, const Settings& s, const std::vector<std::int64_t>& seqs, bool adamw,
                 int device, Blocks& blocks) {
  DeviceGuard guard(device);
  Stream stream(device);
  const auto [a, big] = calibration_layers(s.model.num_layers);
  for (std::int64_t n : seqs) {
    Pass small, large, headless;
    try {
      small = time_pass(ctx, s, a, true, n, device, stream.get());
      large = a == big ? small : time_pass(ctx, s, big, true, n, device, stream.get());
      headless = time_pass(ctx, s, a, false, n, device, stream.get());
    } catch (const OutOfMemoryError& e) {
      spdlog::warn("advise: a training replica of {} sequences does not fit one GPU: {}", n,
                   e.what());
      continue;
    }
    blocks.train_forward[n] =
        parts_of_steps(a, big, small.forward, large.forward, headless.forward);
    blocks.train_backward[n] =
        parts_of_steps(a, big, small.both - small.forward, large.both - large.forward,
                       headless.both - headless.forward);
  }
  if (adamw) blocks.adamw_s = time_adamw(ctx, s, device, stream.get());
}

Measured run_training(Context& ctx, const Settings& s, const Plan& p) {
  std::vector<std::string> args = s.model_config.empty()
                                      ? std::vector<std::string>{"--model", s.model_preset}
                                      : std::vector<std::string>{"--model-config", s.model_config};
  const std::vector<std::string> rest{"--layers",       std::to_string(s.layers),
                                      "--strategy",     parallel::to_string(p.strategy),
                                      "--gpu-counts",   std::to_string(p.layout.gpus()),
                                      "--batch-sizes",  std::to_string(p.micro),
                                      "--seq-len",      std::to_string(s.seq_len),
                                      "--bucket-size",  std::to_string(s.bucket_bytes),
                                      "--bucket-sweep", "none",
                                      "--dtype",        s.dtype == ActDtype::BF16 ? "bf16" : "fp16",
                                      "--timeout",      fmt::format("{}", s.timeout_s)};
  args.insert(args.end(), rest.begin(), rest.end());
  ModulePtr dp = make_module("dp");
  configure_module(*dp, args);
  const Report r = run_nested(*dp, ctx);
  Measured out;
  const CaseResult* row = dp_row(r, p);
  if (!row) {
    out.status = "failed";
    out.note = r.error.empty() ? "dp reported no step for this layout" : "dp: " + r.error;
    return out;
  }
  out.status = row->status;
  out.note = row->note;
  const auto figure = [&](const char* key) {
    const Metric* m = row->find_metric(key);
    return m ? m->value : 0.0;
  };
  out.e2e_s = figure("step_ms") / 1e3;
  out.tokens_per_s = figure("tokens_per_s");
  out.memory_per_gpu = static_cast<std::uint64_t>(figure("memory_GiB") * (1ull << 30));
  out.check_error = figure("grad_error");
  if (row->status == "ok") out.checked_by = "one GPU's step over the whole batch (dp)";
  return out;
}

}  // namespace gpubench::advise
