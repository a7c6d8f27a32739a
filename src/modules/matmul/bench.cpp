// One GEMM case on one GPU: operand sets, the heuristic's candidates each timed briefly, verified
// against the fp64 reference fastest first until one passes, that one measured; and the same case
// on every GPU at once.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/kernels/gemm_check.cuh"
#include "gpubench/modules/matmul/matmul.hpp"

namespace gpubench::matmul {

namespace {

const GpuInfo* gpu_info(const System& system, int gpu) {
  for (const auto& g : system.gpus)
    if (g.index == gpu) return &g;
  return nullptr;
}

float float_from_bits(unsigned int bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// The rotating operand sets of one case in one allocation, each set filled with its own seed.
struct OperandSets {
  DeviceBuffer memory;
  std::vector<void*> a, b, d;
  int count() const { return static_cast<int>(a.size()); }
};

std::uint64_t aligned(std::uint64_t bytes) {
  return (bytes + 255) / 256 * 256;
}

OperandSets make_sets(int gpu, GemmDtype dtype, const GemmShape& shape, int sets,
                      cudaStream_t stream) {
  const GemmTypeInfo& info = gemm_type_info(dtype);
  const GemmOperandBytes bytes = gemm_operand_bytes(dtype, shape);
  const std::uint64_t per_set = aligned(bytes.a) + aligned(bytes.b) + aligned(bytes.d);
  OperandSets s;
  s.memory = DeviceBuffer(gpu, per_set * static_cast<std::uint64_t>(sets));
  auto* base = s.memory.as<unsigned char>();
  for (int i = 0; i < sets; ++i) {
    unsigned char* p = base + per_set * static_cast<std::uint64_t>(i);
    s.a.push_back(p);
    s.b.push_back(p + aligned(bytes.a));
    s.d.push_back(p + aligned(bytes.a) + aligned(bytes.b));
    const auto seed = static_cast<std::uint64_t>(1000 + 2 * i);
    fill_gemm_operand(s.a.back(), info.a, bytes.a / element_bytes(info.a), seed, stream);
    fill_gemm_operand(s.b.back(), info.b, bytes.b / element_bytes(info.b), seed + 1, stream);
  }
  return s;
}

// One algorithm of one layout's plan, and its brief time per GEMM (infinite: it did not run).
struct Candidate {
  const GemmPlan* plan;
  GemmAlgo algo;
  double brief_s = std::numeric_limits<double>::infinity();
  std::string name() const { return plan->shape().layout() + " " + algo.describe(); }
};

// What the fp64 reference check of one candidate found.
struct CheckResult {
  std::uint64_t checked = 0, wrong = 0;
  double max_error_ratio = 0, max_rel_error = 0;
  std::string why;  // why it failed; "" when it passed
};

}  // namespace

struct GpuBench::Impl {
  Impl(Context& c, int g)
      : ctx(c),
        gpu(g),
        guard(g),
        handle(),
        stream(g),
        tally(g, sizeof(GemmCheckTally)),
        measurer(&c.measurer(g)) {
    const GpuInfo* info = gpu_info(c.system(), g);
    cc_major = info ? info->cc_major : 0;
    cc_minor = info ? info->cc_minor : 0;
    l2_bytes = info ? info->l2_bytes : (50u << 20);
    workspace = DeviceBuffer(g, gemm_workspace_bytes(cc_major));
  }
  Context& ctx;
  int gpu;
  DeviceGuard guard;  // the handle is made on this GPU
  CublasLtHandle handle;
  Stream stream;
  DeviceBuffer tally;
  Measurer* measurer;  // made here, on the main thread: Context's map is not thread-safe
  DeviceBuffer workspace;
  int cc_major = 0, cc_minor = 0;
  std::uint64_t l2_bytes = 0;
  double idle_before_s = 0;

  CaseOutcome run(const CaseSpec& spec, int algos, const MeasureOptions& opts, Monitor* monitor);
  void time_briefly(std::vector<Candidate>& candidates, const OperandSets& sets,
                    const MeasureOptions& opts, int& reps);
  const Candidate* first_verified(const std::vector<Candidate>& candidates, const OperandSets& sets,
                                  CaseOutcome& out);
  CheckResult verify(const GemmPlan& plan, const GemmAlgo& algo, const OperandSets& sets);
};

GpuBench::GpuBench(Context& ctx, int gpu) : impl_(new Impl(ctx, gpu)) {}
GpuBench::~GpuBench() {
  delete impl_;
}

void GpuBench::set_idle_before(double seconds) {
  impl_->idle_before_s = seconds;
}

CaseOutcome GpuBench::run_case(const CaseSpec& spec, int algos, const MeasureOptions& opts,
                               Monitor* monitor) {
  CaseOutcome out;
  out.gpu = impl_->gpu;
  out.spec = spec;
  try {
    return impl_->run(spec, algos, opts, monitor);
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    out.status = "failed";
    out.note = e.what();
    spdlog::error("matmul: GPU {} {} {}: {}", out.gpu, to_string(spec.dtype),
                  spec.shape.to_string(), e.what());
  }
  return out;
}

CaseOutcome GpuBench::Impl::run(const CaseSpec& spec, int algos, const MeasureOptions& opts,
                                Monitor* monitor) {
  DeviceGuard g(gpu);
  CaseOutcome out;
  out.gpu = gpu;
  out.spec = spec;
  if (auto why = gemm_dtype_unsupported(spec.dtype, cc_major, cc_minor)) {
    out.status = "skipped";
    out.note = *why;
    return out;
  }
  const GemmShape& shape = spec.shape;
  const std::uint64_t set_bytes = gemm_operand_bytes(spec.dtype, shape).total();
  std::size_t free_bytes = 0, total_bytes = 0;
  GPB_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (set_bytes > free_bytes * 9 / 10)
    throw InputError(fmt::format("matmul: {} {} needs {} of GPU memory; GPU {} has {} free",
                                 to_string(spec.dtype), shape.to_string(), format_bytes(set_bytes),
                                 gpu, format_bytes(free_bytes)));
  const bool hot = opts.l2 == L2Policy::Hot;
  out.sets = rotation_sets(set_bytes, l2_bytes, free_bytes / 2, hot);
  const OperandSets sets = make_sets(gpu, spec.dtype, shape, out.sets, stream.get());

  // The plans to try: the requested layout, and with any_layout the other three (the operand
  // sets hold the same bytes whichever way A and B are read). The heuristic's first
  // `algos` candidates of the requested layout, and its first few of each other layout.
  std::vector<GemmPlan> plans;
  plans.reserve(4);
  plans.emplace_back(handle, spec.dtype, shape, workspace.bytes(), spec.reduction);
  if (spec.any_layout)
    for (bool ta : {true, false})
      for (bool tb : {false, true}) {
        if (ta == shape.trans_a && tb == shape.trans_b) continue;
        GemmShape other = shape;
        other.trans_a = ta;
        other.trans_b = tb;
        plans.emplace_back(handle, spec.dtype, other, workspace.bytes(), spec.reduction);
      }
  std::vector<Candidate> candidates;
  for (std::size_t p = 0; p < plans.size(); ++p) {
    try {
      for (const auto& a : plans[p].candidates(p == 0 ? algos : std::min(algos, kOtherLayoutAlgos)))
        candidates.push_back({&plans[p], a});
    } catch (const GpuError& e) {
      if (p == 0) throw;
      spdlog::debug("matmul: no {} candidates: {}", plans[p].shape().layout(), e.what());
    }
  }
  int reps = 1;
  time_briefly(candidates, sets, opts, reps);
  for (const auto& c : candidates) out.candidates_timed += std::isfinite(c.brief_s) ? 1 : 0;
  if (out.candidates_timed == 0)
    throw GpuError(fmt::format("no cuBLASLt candidate ran for {} {}", to_string(spec.dtype),
                               shape.to_string()));
  if (std::isfinite(candidates[0].brief_s))
    out.first_pick_tflops = TFLOPs(gemm_flops(shape), candidates[0].brief_s);

  const Candidate* chosen = first_verified(candidates, sets, out);
  if (!chosen) return out;
  out.spec.shape = chosen->plan->shape();  // the layout that won
  out.algo = chosen->algo;
  out.repeats = reps;
  // The gain over the heuristic's first pick (requested layout), both timed briefly alike.
  const double chosen_brief_tflops = TFLOPs(gemm_flops(shape), chosen->brief_s);
  out.first_pick_gain_pct =
      out.first_pick_tflops > 0 ? 100.0 * (chosen_brief_tflops / out.first_pick_tflops - 1.0) : 0.0;

  if (idle_before_s > 0) {  // let the power limiter's budget refill before a burst
    stream.synchronize();
    std::this_thread::sleep_for(std::chrono::duration<double>(idle_before_s));
  }
  const Launch launch = [&](cudaStream_t s, int iteration) {
    for (int r = 0; r < reps; ++r) {
      const int i = (iteration * reps + r) % sets.count();
      chosen->plan->run(chosen->algo, sets.a[i], sets.b[i], sets.d[i], workspace.get(), s);
    }
  };
  const Measurement m = measurer->run(stream.get(), launch, opts, monitor);
  if (monitor) ctx.merge_monitor(m.monitor);
  const double flops = gemm_flops(shape) * reps;
  out.median_s = m.median_s() / reps;
  out.tflops = TFLOPs(flops, m.median_s());
  out.mean_tflops = TFLOPs(flops, m.stats.mean);
  out.max_tflops = TFLOPs(flops, m.stats.min);
  out.measurement = m;
  out.ok = true;
  return out;
}

// Each candidate briefly, at the same repeats (sized on the first that runs): its brief_s is the
// median time per GEMM; one that throws keeps an infinite brief_s.
void GpuBench::Impl::time_briefly(std::vector<Candidate>& candidates, const OperandSets& sets,
                                  const MeasureOptions& opts, int& reps) {
  const Candidate* current = nullptr;
  const Launch launch = [&](cudaStream_t s, int iteration) {
    for (int r = 0; r < reps; ++r) {
      const int i = (iteration * reps + r) % sets.count();
      current->plan->run(current->algo, sets.a[i], sets.b[i], sets.d[i], workspace.get(), s);
    }
  };
  MeasureOptions quick_opts = opts;
  quick_opts.fixed_iters = 0;
  quick_opts.warmup = 1;
  quick_opts.min_iters = 5;
  // Long enough that a power-capped GPU's clock settles into each candidate's rate.
  quick_opts.min_time_s = std::min(0.05, std::max(0.02, opts.min_time_s));
  quick_opts.max_noise = 0.02;
  quick_opts.max_time_s = 0.3;
  bool calibrated = false;
  for (Candidate& c : candidates) {
    current = &c;
    try {
      if (!calibrated) {
        const Measurement calib = measurer->run(stream.get(), launch, quick_opts, nullptr);
        reps = repeats_for(calib.median_s());
        if (calib.median_s() > 5e-3) quick_opts.min_iters = 3;
        calibrated = true;
      }
      c.brief_s = measurer->run(stream.get(), launch, quick_opts, nullptr).median_s() / reps;
    } catch (const GpuError& e) {
      spdlog::debug("matmul: candidate {} failed: {}", c.name(), e.what());
      (void)cudaGetLastError();
    }
  }
}

// The candidates verified fastest first until one passes: that one, its check in `out`, and the
// faster ones that failed in out.rejected. None passing: nullptr, `out` failed with every
// rejection named. Only a candidate that passed may give the case its figure.
const Candidate* GpuBench::Impl::first_verified(const std::vector<Candidate>& candidates,
                                                const OperandSets& sets, CaseOutcome& out) {
  std::vector<double> brief;
  for (const auto& c : candidates) brief.push_back(c.brief_s);
  for (std::size_t i : verification_order(brief)) {
    const Candidate& c = candidates[i];
    CheckResult r;
    try {
      r = verify(*c.plan, c.algo, sets);
    } catch (const TimeoutError&) {
      throw;
    } catch (const GpuError& e) {
      (void)cudaGetLastError();
      r.why = e.what();
    }
    if (r.why.empty()) {
      out.checked = r.checked;
      out.max_error_ratio = r.max_error_ratio;
      out.max_rel_error = r.max_rel_error;
      out.note = rejection_note(out.rejected, true);
      return &c;
    }
    spdlog::warn("matmul: GPU {} {} {}: {} failed verification ({}); the next fastest is checked",
                 gpu, to_string(c.plan->dtype()), c.plan->shape().to_string(), c.name(), r.why);
    out.rejected.push_back({c.name(), r.why});
  }
  out.status = "failed";
  out.note = rejection_note(out.rejected, false);
  return nullptr;
}

// Runs `algo` once on set 0 and recomputes entries of D in fp64 against gemm_tolerance.
CheckResult GpuBench::Impl::verify(const GemmPlan& plan, const GemmAlgo& algo,
                                   const OperandSets& sets) {
  const GemmShape& shape = plan.shape();
  plan.run(algo, sets.a[0], sets.b[0], sets.d[0], workspace.get(), stream.get());
  const GemmCheckArgs args = gemm_check_args(plan.dtype(), shape, sets.a[0], sets.b[0], sets.d[0]);
  const GemmCheckTally got = check_gemm_now(args, tally.as<GemmCheckTally>(), stream.get());
  CheckResult r;
  r.checked = got.checked;
  r.wrong = got.wrong;
  r.max_error_ratio = float_from_bits(got.max_error_ratio_bits);
  r.max_rel_error = float_from_bits(got.max_rel_error_bits);
  if (got.checked != args.entries)
    r.why = fmt::format("the check covered {} of {} entries", got.checked, args.entries);
  else if (got.wrong > 0)
    r.why = check_failure_text(got.wrong, got.checked, r.max_error_ratio, got.first_wrong % shape.m,
                               got.first_wrong / shape.m);
  return r;
}

std::vector<CaseOutcome> run_on_all(Context& ctx, std::vector<std::unique_ptr<GpuBench>>& benches,
                                    const CaseSpec& spec, int algos, const MeasureOptions& opts) {
  if (benches.size() == 1) return {benches[0]->run_case(spec, algos, opts, ctx.monitor())};
  // Several GPUs at once: one thread each, the monitor around all of them.
  std::vector<CaseOutcome> outs(benches.size());
  std::vector<std::exception_ptr> errors(benches.size());
  Monitor* monitor = ctx.monitor();
  if (monitor) monitor->start();
  {
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < benches.size(); ++i)
      threads.emplace_back([&, i] {
        try {
          outs[i] = benches[i]->run_case(spec, algos, opts, nullptr);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    for (auto& t : threads) t.join();
  }
  if (monitor) {
    const MonitorSummary seen = monitor->stop();
    ctx.merge_monitor(seen);
    for (auto& o : outs) o.measurement.monitor = seen;
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return outs;
}

}  // namespace gpubench::matmul
