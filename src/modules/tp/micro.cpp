// `gpubench tp --micro`: Megatron's two linear layers in isolation on t GPUs. Column-parallel
// splits W's rows (no communication, an optional all-gather of the outputs); row-parallel splits
// W's columns and the input's, and sums the partial outputs with an all-reduce. Times the GEMM,
// the collective, both in a row and (row-parallel, --overlap) the GEMM in chunks with each
// chunk's all-reduce overlapping the next chunk's GEMM on a second stream.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "gpubench/core/cublaslt.hpp"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/gemm.hpp"
#include "gpubench/core/nccl.hpp"
#include "gpubench/core/progress.hpp"
#include "gpubench/core/ranks.hpp"
#include "gpubench/kernels/transformer.cuh"
#include "gpubench/model/observe.hpp"
#include "gpubench/modules/tp/tp.hpp"

namespace gpubench::tp {

namespace {

constexpr std::uint64_t kSeed = 5;
constexpr std::uint64_t kXId = 1, kWId = 2;
constexpr double kCheckLimit = 1e-2;  // bf16 outputs, another summation order

// Relative L2 of `got` [tokens, cols] against columns [col0, col0 + cols) of `want` [tokens, S].
double relative_l2(const std::vector<double>& got, const std::vector<double>& want,
                   std::int64_t tokens, std::int64_t cols, std::int64_t col0, std::int64_t S) {
  double num = 0, den = 0;
  for (std::int64_t i = 0; i < tokens; ++i)
    for (std::int64_t j = 0; j < cols; ++j) {
      const double g = got[static_cast<std::size_t>(i * cols + j)];
      const double w = want[static_cast<std::size_t>(i * S + col0 + j)];
      if (!std::isfinite(g)) return INFINITY;
      num += (g - w) * (g - w);
      den += w * w;
    }
  return den > 0 ? std::sqrt(num / den) : INFINITY;
}

MeasureOptions micro_options(const Context& ctx) {
  MeasureOptions m = ctx.measure_options();
  m.l2 = L2Policy::Hot;
  if (m.fixed_iters == 0) {
    m.warmup = 3;
    m.min_iters = 10;
    m.min_time_s = ctx.quick() ? 0.05 : 0.2;
    m.max_time_s = ctx.quick() ? 0.5 : 2.0;
  }
  return m;
}

}  // namespace

namespace {

// One rank's micro-benchmark state: its communicator and collectives, buffers for the largest
// point (the local X and W, Y, the gathered outputs and on rank 0 the full problem for the
// check), and cuBLASLt plans by (n, tokens, k) with the heuristic's first algorithm.
struct MicroRank {
  MicroRank(const Settings& s, int t, RankGroup& group, Rank& self,
            parallel::CopyEngineGroup* copies)
      : self(self), side(self.device) {
    const std::int64_t S = s.micro_size, max_tokens = s.micro_tokens.back();
    if (t > 1) {
      ncclUniqueId id{};
      if (self.rank == 0) GPB_NCCL_CHECK(ncclGetUniqueId(&id));
      group.broadcast(self.rank, &id, sizeof(id));
      comm = NcclComm(id, t, self.rank);
      nccl = std::make_unique<parallel::NcclCollectives>(comm.get());
      if (copies)
        copied = std::make_unique<parallel::CopyEngineCollectives>(*copies, self.rank, *nccl);
    }
    reduce = copied ? static_cast<model::TpCollectives*>(copied.get()) : nccl.get();
    workspace =
        DeviceBuffer(self.device, gemm_workspace_bytes(compute_capability_major(self.device)));
    const auto bytes = [](std::int64_t elems) { return static_cast<std::size_t>(elems * 2); };
    x = DeviceBuffer(self.device, bytes(max_tokens * S));
    w = DeviceBuffer(self.device, static_cast<std::size_t>(S * S * 2 / t + 16));
    y = DeviceBuffer(self.device, bytes(max_tokens * S));
    gathered = DeviceBuffer(self.device, bytes(max_tokens * S));
    if (self.rank == 0) {
      xf = DeviceBuffer(self.device, bytes(max_tokens * S));
      wf = DeviceBuffer(self.device, bytes(S * S));
      yf = DeviceBuffer(self.device, bytes(max_tokens * S));
    }
  }

  // Y = X W^T on `stream` through the plan of this shape (made on first use).
  void gemm(GemmDtype dtype, const void* wp, const void* xp, void* yp, std::int64_t n,
            std::int64_t rows, std::int64_t k, cudaStream_t stream) {
    const auto key = std::make_tuple(n, rows, k);
    auto it = plans.find(key);
    if (it == plans.end()) {
      auto plan = std::make_unique<GemmPlan>(handle, dtype, GemmShape{n, rows, k, true, false},
                                             workspace.bytes());
      const GemmAlgo algo = plan->candidates(1).front();
      it = plans.emplace(key, std::make_pair(std::move(plan), algo)).first;
    }
    it->second.first->run(it->second.second, wp, xp, yp, workspace.get(), stream);
  }

  Rank& self;
  NcclComm comm;
  std::unique_ptr<parallel::NcclCollectives> nccl;
  std::unique_ptr<parallel::CopyEngineCollectives> copied;
  model::TpCollectives* reduce = nullptr;  // the row-parallel all-reduces
  Stream side;                             // the overlapped all-reduces
  CublasLtHandle handle;
  DeviceBuffer workspace, x, w, y, gathered, xf, wf, yf;
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>,
           std::pair<std::unique_ptr<GemmPlan>, GemmAlgo>>
      plans;
};

// One point of the micro-benchmark on this rank: its slices filled, checked once against the
// full GEMM (rank 0), then timed.
struct MicroPoint {
  const Settings& s;
  int t;
  RankGroup& group;
  MicroRank& r;
  const MeasureOptions& mo;
  MicroKind kind;
  std::int64_t tokens;
  MicroShape shape;
  ActDtype dtype;
  GemmDtype gdt;
  std::size_t y_elems;

  void compute(cudaStream_t st) {
    r.gemm(gdt, r.w.get(), r.x.get(), r.y.get(), shape.n, tokens, shape.k, st);
  }
  void collective(cudaStream_t st) {
    if (t == 1) return;
    if (kind == MicroKind::Row) {
      r.reduce->all_reduce(r.y.get(), static_cast<std::int64_t>(y_elems), dtype, st);
      return;
    }
    const ncclDataType_t ntype = dtype == ActDtype::BF16 ? ncclBfloat16 : ncclFloat16;
    GPB_NCCL_CHECK(ncclAllGather(r.y.get(), r.gathered.get(), y_elems, ntype, r.comm.get(), st));
  }
};

// This rank's slices of the full seeded X [tokens, S] and W [S, S].
void fill_slices(MicroPoint& p, cudaStream_t st) {
  const std::int64_t S = p.s.micro_size, slice = S / p.t, r0 = p.r.self.rank * slice;
  const float w_scale = 1.0f / std::sqrt(static_cast<float>(S));
  if (p.kind == MicroKind::Row) {
    fill_weight(p.r.x.get(), p.tokens, static_cast<int>(slice), 0, r0, S, kSeed, kXId, 1.0f,
                p.dtype, st);
    fill_weight(p.r.w.get(), S, static_cast<int>(slice), 0, r0, S, kSeed, kWId, w_scale, p.dtype,
                st);
  } else {
    fill_weight(p.r.x.get(), p.tokens, static_cast<int>(S), 0, 0, S, kSeed, kXId, 1.0f, p.dtype,
                st);
    fill_weight(p.r.w.get(), slice, static_cast<int>(S), r0, 0, S, kSeed, kWId, w_scale, p.dtype,
                st);
  }
}

// Rank 0: the full product (returned, for the overlapped check) and this rank's result against
// it; `o` failed beyond the limit. Other ranks return nothing.
std::vector<double> check_point(MicroPoint& p, MicroOutcome& o, cudaStream_t st) {
  if (p.r.self.rank != 0) return {};
  const std::int64_t S = p.s.micro_size, slice = S / p.t;
  fill_weight(p.r.xf.get(), p.tokens, static_cast<int>(S), 0, 0, S, kSeed, kXId, 1.0f, p.dtype, st);
  fill_weight(p.r.wf.get(), S, static_cast<int>(S), 0, 0, S, kSeed, kWId,
              1.0f / std::sqrt(static_cast<float>(S)), p.dtype, st);
  p.r.gemm(p.gdt, p.r.wf.get(), p.r.xf.get(), p.r.yf.get(), S, p.tokens, S, st);
  GPB_CUDA_CHECK(cudaStreamSynchronize(st));
  std::vector<double> want =
      model::to_host_values(p.r.yf.get(), static_cast<std::size_t>(p.tokens * S), p.dtype);
  double err = 0;
  if (p.kind == MicroKind::Row || p.t == 1) {
    err = relative_l2(model::to_host_values(p.r.y.get(), p.y_elems, p.dtype), want, p.tokens, S, 0,
                      S);
  } else {  // block b of the gathered outputs: columns b * slice of the full product
    const auto all = model::to_host_values(p.r.gathered.get(), p.y_elems * p.t, p.dtype);
    for (int b = 0; b < p.t; ++b) {
      const std::vector<double> block(
          all.begin() + static_cast<std::ptrdiff_t>(b * p.y_elems),
          all.begin() + static_cast<std::ptrdiff_t>((b + 1) * p.y_elems));
      err = std::max(err, relative_l2(block, want, p.tokens, slice, b * slice, S));
    }
  }
  o.check_error = err;
  if (!(err <= kCheckLimit)) {
    o.status = "failed";
    o.note = fmt::format("result differs from the full GEMM: relative error {:.3g} (limit {})", err,
                         kCheckLimit);
  }
  return want;
}

// Row-parallel with --overlap: chunks of whole token rows, chunk i's GEMM on the main stream,
// its all-reduce on the side stream once the GEMM is done, so it overlaps chunk i+1's GEMM.
// Checked once (each run recomputes the chunks from X and W) against `want`, then timed.
void time_overlap(MicroPoint& p, MicroOutcome& o, const std::vector<double>& want,
                  cudaStream_t st) {
  MicroRank& r = p.r;
  const int c = p.s.overlap_chunks;
  const std::int64_t per = (p.tokens + c - 1) / c;
  std::vector<Event> done;
  for (int i = 0; i < c; ++i) done.emplace_back(r.self.device);
  Event comm_done(r.self.device);
  auto overlapped = [&](cudaStream_t s2, int) {
    for (int i = 0; i < c; ++i) {
      const std::int64_t t0 = i * per, rows = std::min(per, p.tokens - t0);
      if (rows <= 0) break;
      const auto* xi = r.x.as<unsigned char>() + t0 * p.shape.k * 2;
      auto* yi = r.y.as<unsigned char>() + t0 * p.shape.n * 2;
      r.gemm(p.gdt, r.w.get(), xi, yi, p.shape.n, rows, p.shape.k, s2);
      done[static_cast<std::size_t>(i)].record(s2);
      GPB_CUDA_CHECK(cudaStreamWaitEvent(r.side.get(), done[static_cast<std::size_t>(i)].get(), 0));
      r.reduce->all_reduce(yi, rows * p.shape.n, p.dtype, r.side.get());
    }
    comm_done.record(r.side.get());
    GPB_CUDA_CHECK(cudaStreamWaitEvent(s2, comm_done.get(), 0));
  };
  overlapped(st, 0);
  p.group.sync(r.self);
  p.group.barrier();
  if (r.self.rank == 0) {
    const std::int64_t S = p.s.micro_size;
    o.overlap_check_error =
        relative_l2(model::to_host_values(r.y.get(), p.y_elems, p.dtype), want, p.tokens, S, 0, S);
    if (!(o.overlap_check_error <= kCheckLimit)) {
      o.status = "failed";
      o.note = fmt::format(
          "overlapped result differs from the full GEMM: relative error {:.3g} (limit {})",
          o.overlap_check_error, kCheckLimit);
    }
  }
  o.overlap_s = p.group.measure(r.self, overlapped, p.mo).median_s();
}

// One point: filled, checked, then the GEMM, the collective, both and (row-parallel,
// --overlap) the chunked overlap timed.
void run_micro_point(MicroPoint& p, MicroOutcome& o) {
  Rank& self = p.r.self;
  cudaStream_t st = self.stream->get();
  fill_slices(p, st);
  // Checked once, before timing.
  p.compute(st);
  p.collective(st);
  p.group.sync(self);
  p.group.barrier();
  const std::vector<double> want = check_point(p, o, st);
  const auto timed = [&](const Launch& launch) {
    return p.group.measure(self, launch, p.mo).median_s();
  };
  o.compute_s = timed([&](cudaStream_t s2, int) { p.compute(s2); });
  if (p.t > 1) {
    o.comm_s = timed([&](cudaStream_t s2, int) { p.collective(s2); });
    o.total_s = timed([&](cudaStream_t s2, int) {
      p.compute(s2);
      p.collective(s2);
    });
  } else {
    o.total_s = o.compute_s;
  }
  if (p.t > 1 && p.kind == MicroKind::Row && p.s.overlap && p.tokens >= p.s.overlap_chunks)
    time_overlap(p, o, want, st);
}

}  // namespace

std::vector<MicroOutcome> run_micro(Context& ctx, const Settings& s, int t, RankGroup& group) {
  if (group.size() != t) throw InputError(fmt::format("--tp: {} ranks for TP={}", group.size(), t));
  const ActDtype dtype = s.dtype == "fp16" ? ActDtype::F16 : ActDtype::BF16;
  const GemmDtype gdt = dtype == ActDtype::BF16 ? GemmDtype::Bf16 : GemmDtype::Fp16;
  const MeasureOptions mo = micro_options(ctx);
  std::vector<MicroOutcome> out;
  // --collectives copy-engine (ranks in one process): the row-parallel all-reduces, alone and
  // overlapped, as peer copies; the column-parallel all-gather stays on NCCL.
  const std::unique_ptr<parallel::CopyEngineGroup> copies = copy_engine_group(
      s, t, group, static_cast<std::size_t>(s.micro_tokens.back() * s.micro_size * 2 / t + 64));
  group.run([&](Rank& self) {
    MicroRank r(s, t, group, self, copies.get());
    for (MicroKind kind : s.micro) {
      for (std::int64_t tokens : s.micro_tokens) {
        const MicroShape shape = micro_shape(kind, s.micro_size, tokens, t, 2);
        MicroOutcome o;
        o.kind = kind;
        o.t = t;
        o.tokens = tokens;
        o.collective = shape.collective;
        if (copies) o.collectives = "copy-engine";
        o.comm_bytes = static_cast<double>(shape.comm_bytes);
        o.flops_per_rank = shape.flops_per_rank;
        if (self.rank == 0)
          progress::next(fmt::format("micro {} t={} tokens {}", to_string(kind), t, tokens));
        MicroPoint p{s,
                     t,
                     group,
                     r,
                     mo,
                     kind,
                     tokens,
                     shape,
                     dtype,
                     gdt,
                     static_cast<std::size_t>(tokens * shape.n)};
        run_micro_point(p, o);
        if (self.rank == 0) out.push_back(o);
      }
    }
  });
  return out;
}

}  // namespace gpubench::tp
