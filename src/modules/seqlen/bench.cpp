// `gpubench seqlen` on the GPU: one (batch, length) point on an engine built for exactly that
// point (checked, then prefill, decode and the generation loop timed, with per-op breakdowns), and
// prefill attention timed alone against the reference kernel.
#include <cuda_fp16.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/gemm.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/kernels/attention.cuh"
#include "gpubench/kernels/gemm_check.cuh"
#include "gpubench/model/observe.hpp"
#include "gpubench/modules/seqlen/seqlen.hpp"

namespace gpubench::seqlen {

namespace {

// The spans of one step summed by op and kind; `profiled` layer's ops also on their own.
OpTimes summarize(const std::vector<model::OpSpan>& spans, int profiled) {
  OpTimes t;
  for (const auto& sp : spans) {
    t.by_op_s[sp.op] += sp.seconds;
    t.by_kind_s[op_kind(sp.op)] += sp.seconds;
    if (sp.layer == profiled) t.layer_s[sp.op] += sp.seconds;
    t.total_s += sp.seconds;
  }
  return t;
}

using model::relative_l2;
using model::to_host_values;

// Limit of the decode-after-prefill check: the two paths round differently (GEMM vs GEMV
// accumulation order, the prefill vs decode attention kernels) and the differences grow through
// the layers; a wrong cache, position or mask gives errors of order 1.
constexpr double kCheckLimit = 0.1;

// The decode-after-prefill identity at the point's own length: prefill of L tokens vs prefill of
// the first L-1 and a decode of the L-th, compared on the last position's logits.
double check_decode_after_prefill(model::Transformer& t, std::int64_t batch, std::int64_t len,
                                  int gpu, cudaStream_t s) {
  const int b = static_cast<int>(batch), n = static_cast<int>(len);
  const int vocab = t.model().vocab_size;
  const std::size_t nl = static_cast<std::size_t>(b) * vocab;
  const std::int32_t* ids = t.tokens(b, n, 11, s);
  DeviceBuffer full(gpu, static_cast<std::size_t>(b) * n * 4), head(gpu, static_cast<std::size_t>(b) * n * 4),
      next(gpu, static_cast<std::size_t>(b) * 4);
  GPB_CUDA_CHECK(cudaMemcpyAsync(full.get(), ids, static_cast<std::size_t>(b) * n * 4,
                                 cudaMemcpyDeviceToDevice, s));
  t.prefill(full.as<std::int32_t>(), b, n, s);
  GPB_CUDA_CHECK(cudaStreamSynchronize(s));
  const auto want = to_host_values(t.logits(), nl, t.options().dtype);
  if (n < 2) return relative_l2(want, want);  // only finiteness can be checked
  GPB_CUDA_CHECK(cudaMemcpy2DAsync(head.get(), (n - 1) * 4, full.get(), n * 4, (n - 1) * 4, b,
                                   cudaMemcpyDeviceToDevice, s));
  GPB_CUDA_CHECK(cudaMemcpy2DAsync(next.get(), 4, full.as<char>() + (n - 1) * 4, n * 4, 4, b,
                                   cudaMemcpyDeviceToDevice, s));
  t.prefill(head.as<std::int32_t>(), b, n - 1, s);
  t.decode(next.as<std::int32_t>(), b, n - 1, s);
  GPB_CUDA_CHECK(cudaStreamSynchronize(s));
  return relative_l2(to_host_values(t.logits(), nl, t.options().dtype), want);
}

std::uint64_t free_bytes(int gpu) {
  DeviceGuard g(gpu);
  std::size_t free = 0, total = 0;
  GPB_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

}  // namespace

PointOutcome run_point(Context& ctx, int gpu, const Settings& s, std::int64_t batch,
                       std::int64_t length) {
  PointOutcome o;
  o.batch = batch;
  o.length = length;
  const std::int64_t generate = s.output_lens.back();
  const model::EngineOptions eo = point_engine_options(s, batch, length);
  DeviceGuard guard(gpu);
  // What the engine will allocate, exactly (model::engine_memory), checked against the free memory
  // before anything is allocated.
  o.plan = point_memory_plan(s, batch, length, compute_capability_major(gpu));
  const std::uint64_t free0 = free_bytes(gpu);
  if (const std::string why = model::why_not(o.plan, free0); !why.empty()) {
    o.status = "skipped";
    o.note = why;
    return o;
  }
  std::unique_ptr<model::Transformer> engine;
  try {
    engine = std::make_unique<model::Transformer>(s.model, eo, gpu);
  } catch (const OutOfMemoryError& e) {
    o.status = "skipped";
    o.note = fmt::format("out of GPU memory building the engine ({} planned, {} free): {}",
                         format_bytes(o.plan.total_bytes), format_bytes(free0), e.what());
    return o;
  }
  model::Transformer& t = *engine;
  o.engine = t.memory();
  Stream stream(gpu);
  cudaStream_t st = stream.get();
  const int b = static_cast<int>(batch), n = static_cast<int>(length);

  o.check_error = check_decode_after_prefill(t, batch, length, gpu, st);
  o.attention_path = t.attention_path();
  o.attention_why = t.attention_note();
  if (!(o.check_error <= kCheckLimit)) {
    o.status = "failed";
    o.note = fmt::format(
        "decode after prefill differs from the longer prefill: relative error {:.3g} (limit {})",
        o.check_error, kCheckLimit);
    return o;
  }

  const MeasureOptions mo = model::engine_step_options(ctx.common());
  const std::int32_t* ids = t.tokens(b, n, 7, st);
  o.prefill = ctx.measure(gpu, st, [&](cudaStream_t s2, int) { t.prefill(ids, b, n, s2); }, mo);

  // One decode step at context `length` (the prompt in the cache), captured once.
  t.decode(ids, b, n, st);  // plans made outside the capture
  CudaGraph step;
  step.capture(st, [&](cudaStream_t s2) { t.decode(ids, b, n, s2); });
  o.decode = ctx.measure(gpu, st, [&](cudaStream_t s2, int) { step.launch(s2); }, mo);

  // Breakdowns: one eager step each with events around every op.
  {
    model::OpSpans timer(gpu);
    t.set_observer(&timer);
    t.prefill(ids, b, n, st);
    o.prefill_ops = summarize(timer.collect(), s.layers / 2);
    t.decode(ids, b, n, st);
    o.decode_ops = summarize(timer.collect(), s.layers / 2);
    t.set_observer(nullptr);
  }

  // Generation: the prefill makes the first token, then one graph per decode step (context
  // length, length+1, ...), replayed back to back; events mark each output length.
  std::vector<CudaGraph> steps(static_cast<std::size_t>(generate - 1));
  for (std::int64_t i = 0; i + 1 < generate; ++i) {
    steps[static_cast<std::size_t>(i)].capture(
        st, [&](cudaStream_t s2) { t.decode(ids, b, n + static_cast<int>(i), s2); });
  }
  const int reps = ctx.quick() ? 1 : 3;
  std::map<std::int64_t, std::vector<double>> runs;
  Event start(gpu);
  std::map<std::int64_t, Event> marks;
  for (std::int64_t g : s.output_lens) marks.emplace(g, Event(gpu));
  for (int r = 0; r < reps && !Context::interrupted(); ++r) {
    start.record(st);
    t.prefill(ids, b, n, st);
    if (marks.count(1)) marks.at(1).record(st);
    for (std::int64_t i = 0; i + 1 < generate; ++i) {
      steps[static_cast<std::size_t>(i)].launch(st);
      if (auto it = marks.find(i + 2); it != marks.end()) it->second.record(st);
    }
    GPB_CUDA_CHECK(cudaStreamSynchronize(st));
    for (auto& [g, ev] : marks) runs[g].push_back(ev.seconds_since(start));
  }
  for (auto& [g, v] : runs) {
    std::sort(v.begin(), v.end());
    o.e2e_s[g] = v[v.size() / 2];
  }
  steps.clear();
  o.measured_bytes = free0 - std::min(free0, free_bytes(gpu));
  return o;
}

AttentionOutcome run_attention_alone(Context& ctx, int gpu, const Settings& s,
                                     std::int64_t length, model::AttentionPath path) {
  AttentionOutcome o;
  o.length = length;
  const model::ModelConfig& m = s.model;
  DeviceGuard guard(gpu);
  Stream stream(gpu);
  cudaStream_t st = stream.get();
  const std::int64_t qn = length * m.q_dim(), kvn = length * m.kv_dim();
  const std::size_t e = act_bytes(s.dtype);
  DeviceBuffer q(gpu, qn * e), k(gpu, kvn * e), v(gpu, kvn * e), out(gpu, qn * e),
      ref(gpu, qn * e);
  const GemmElement ge = s.dtype == ActDtype::BF16 ? GemmElement::BF16 : GemmElement::F16;
  fill_gemm_operand(q.get(), ge, qn, 21, st);
  fill_gemm_operand(k.get(), ge, kvn, 22, st);
  fill_gemm_operand(v.get(), ge, kvn, 23, st);
  AttentionArgs a;
  a.q = q.get();
  a.k = k.get();
  a.v = v.get();
  a.dtype = s.dtype == ActDtype::BF16 ? AttnDtype::BF16 : AttnDtype::F16;
  a.batch = 1;
  a.q_tokens = static_cast<int>(length);
  a.heads = m.num_heads;
  a.kv_heads = m.num_kv_heads;
  a.head_dim = m.head_dim;
  a.max_context = static_cast<int>(length);
  a.out = ref.get();
  attention_reference(a, st);
  a.out = out.get();
  model::AttentionRunner runner(gpu, path);
  o.path = runner.prepare(a);
  if (o.path.empty()) {
    o.status = "skipped";
    o.note = runner.note();
    return o;
  }
  runner.run(a, st);
  GPB_CUDA_CHECK(cudaStreamSynchronize(st));
  const auto got = to_host_values(out.get(), static_cast<std::size_t>(qn), s.dtype);
  const auto want = to_host_values(ref.get(), static_cast<std::size_t>(qn), s.dtype);
  double scale = 0, err = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    err = std::max(err, std::isfinite(got[i]) ? std::fabs(got[i] - want[i]) : INFINITY);
  }
  o.max_error = scale > 0 ? err / scale : INFINITY;
  const double limit = s.dtype == ActDtype::BF16 ? 2e-2 : 5e-3;
  if (!(o.max_error <= limit)) {
    o.status = "failed";
    o.note = fmt::format("output differs from the reference kernel: max error {:.3g} of max |value| "
                         "(limit {})",
                         o.max_error, limit);
    return o;
  }
  MeasureOptions mo = ctx.measure_options();
  mo.l2 = L2Policy::Hot;
  if (mo.fixed_iters == 0) {
    mo.min_iters = 10;
    mo.min_time_s = ctx.quick() ? 0.05 : 0.2;
    mo.max_time_s = ctx.quick() ? 1.0 : 3.0;
  }
  o.m = ctx.measure(gpu, st, [&](cudaStream_t s2, int) { runner.run(a, s2); }, mo);
  // Causal: query t attends to keys 0..t: L(L+1)/2 pairs per head, 4*d FLOPs each (QK^T and PV).
  o.flops = 4.0 * m.head_dim * m.num_heads * (static_cast<double>(length) * (length + 1) / 2);
  o.tflops = TFLOPs(o.flops, o.m.median_s());
  return o;
}

}  // namespace gpubench::seqlen
