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
#include "gpubench/core/ranks.hpp"
#include "gpubench/model/observe.hpp"
#include "tp.hpp"
#include "transformer.cuh"

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

std::vector<MicroOutcome> run_micro(Context& ctx, const Settings& s, int t, RankGroup& group) {
  if (group.size() != t)
    throw InputError(fmt::format("--tp: {} ranks for TP={}", group.size(), t));
  const ActDtype dtype = s.dtype == "fp16" ? ActDtype::F16 : ActDtype::BF16;
  const GemmDtype gdt = dtype == ActDtype::BF16 ? GemmDtype::Bf16 : GemmDtype::Fp16;
  const ncclDataType_t ntype = dtype == ActDtype::BF16 ? ncclBfloat16 : ncclFloat16;
  const std::int64_t S = s.micro_size;
  const MeasureOptions mo = micro_options(ctx);
  std::vector<MicroOutcome> out;
  const std::int64_t max_tokens = s.micro_tokens.back();
  // --collectives copy-engine (ranks in one process): the row-parallel all-reduces, alone and
  // overlapped, as peer copies; the column-parallel all-gather stays on NCCL.
  const std::unique_ptr<parallel::CopyEngineGroup> copies =
      copy_engine_group(s, t, group, static_cast<std::size_t>(max_tokens * S * 2 / t + 64));
  group.run([&](Rank& self) {
    ncclUniqueId id{};
    NcclComm comm;
    std::unique_ptr<parallel::NcclCollectives> nccl;
    std::unique_ptr<parallel::CopyEngineCollectives> copied;
    if (t > 1) {
      if (self.rank == 0) GPB_NCCL_CHECK(ncclGetUniqueId(&id));
      group.broadcast(self.rank, &id, sizeof(id));
      comm = NcclComm(id, t, self.rank);
      nccl = std::make_unique<parallel::NcclCollectives>(comm.get());
      if (copies)
        copied = std::make_unique<parallel::CopyEngineCollectives>(*copies, self.rank, *nccl);
    }
    model::TpCollectives* reduce =
        copied ? static_cast<model::TpCollectives*>(copied.get()) : nccl.get();
    cudaStream_t st = self.stream->get();
    Stream side(self.device);  // the overlapped all-reduces
    CublasLtHandle handle;
    DeviceBuffer workspace(self.device, gemm_workspace_bytes(compute_capability_major(self.device)));
    // Buffers for the largest point: the local X and W, Y, the gathered outputs and (rank 0) the
    // full problem for the check.
    DeviceBuffer x(self.device, static_cast<std::size_t>(max_tokens * S * 2));
    DeviceBuffer w(self.device, static_cast<std::size_t>(S * S * 2 / t + 16));
    DeviceBuffer y(self.device, static_cast<std::size_t>(max_tokens * S * 2));
    DeviceBuffer gathered(self.device, static_cast<std::size_t>(max_tokens * S * 2));
    std::unique_ptr<DeviceBuffer> xf, wf, yf;
    if (self.rank == 0) {
      xf =
          std::make_unique<DeviceBuffer>(self.device, static_cast<std::size_t>(max_tokens * S * 2));
      wf = std::make_unique<DeviceBuffer>(self.device, static_cast<std::size_t>(S * S * 2));
      yf =
          std::make_unique<DeviceBuffer>(self.device, static_cast<std::size_t>(max_tokens * S * 2));
    }
    // Plans by (n, tokens, k), the heuristic's first algorithm.
    std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>,
             std::pair<std::unique_ptr<GemmPlan>, GemmAlgo>>
        plans;
    auto gemm = [&](const void* wp, const void* xp, void* yp, std::int64_t n, std::int64_t rows,
                    std::int64_t k, cudaStream_t stream) {
      const auto key = std::make_tuple(n, rows, k);
      auto it = plans.find(key);
      if (it == plans.end()) {
        auto plan = std::make_unique<GemmPlan>(handle, gdt, GemmShape{n, rows, k, true, false},
                                               workspace.bytes());
        const GemmAlgo algo = plan->candidates(1).front();
        it = plans.emplace(key, std::make_pair(std::move(plan), algo)).first;
      }
      it->second.first->run(it->second.second, wp, xp, yp, workspace.get(), stream);
    };

    for (MicroKind kind : s.micro) {
      for (std::int64_t tokens : s.micro_tokens) {
        const MicroShape shape = micro_shape(kind, S, tokens, t, 2);
        MicroOutcome o;
        o.kind = kind;
        o.t = t;
        o.tokens = tokens;
        o.collective = shape.collective;
        if (copies) o.collectives = "copy-engine";
        o.comm_bytes = static_cast<double>(shape.comm_bytes);
        o.flops_per_rank = shape.flops_per_rank;
        if (self.rank == 0) spdlog::info("tp micro: {} t={} tokens {}", to_string(kind), t, tokens);
        // This rank's slices of the full seeded X [tokens, S] and W [S, S].
        const std::int64_t slice = S / t, r0 = self.rank * slice;
        if (kind == MicroKind::Row) {
          fill_weight(x.get(), tokens, static_cast<int>(slice), 0, r0, S, kSeed, kXId, 1.0f, dtype,
                      st);
          fill_weight(w.get(), S, static_cast<int>(slice), 0, r0, S, kSeed, kWId,
                      1.0f / std::sqrt(static_cast<float>(S)), dtype, st);
        } else {
          fill_weight(x.get(), tokens, static_cast<int>(S), 0, 0, S, kSeed, kXId, 1.0f, dtype, st);
          fill_weight(w.get(), slice, static_cast<int>(S), r0, 0, S, kSeed, kWId,
                      1.0f / std::sqrt(static_cast<float>(S)), dtype, st);
        }
        const std::size_t y_elems = static_cast<std::size_t>(tokens * shape.n);
        auto compute = [&](cudaStream_t s2) {
          gemm(w.get(), x.get(), y.get(), shape.n, tokens, shape.k, s2);
        };
        auto collective = [&](cudaStream_t s2) {
          if (t == 1) return;
          if (kind == MicroKind::Row)
            reduce->all_reduce(y.get(), static_cast<std::int64_t>(y_elems), dtype, s2);
          else
            GPB_NCCL_CHECK(ncclAllGather(y.get(), gathered.get(), y_elems, ntype, comm.get(), s2));
        };
        // Checked once, before timing.
        compute(st);
        collective(st);
        GPB_CUDA_CHECK(cudaStreamSynchronize(st));
        group.barrier();
        std::vector<double> want;  // rank 0: the full product
        if (self.rank == 0) {
          fill_weight(xf->get(), tokens, static_cast<int>(S), 0, 0, S, kSeed, kXId, 1.0f, dtype,
                      st);
          fill_weight(wf->get(), S, static_cast<int>(S), 0, 0, S, kSeed, kWId,
                      1.0f / std::sqrt(static_cast<float>(S)), dtype, st);
          gemm(wf->get(), xf->get(), yf->get(), S, tokens, S, st);
          GPB_CUDA_CHECK(cudaStreamSynchronize(st));
          want = model::to_host_values(yf->get(), static_cast<std::size_t>(tokens * S), dtype);
          double err = 0;
          if (kind == MicroKind::Row || t == 1) {
            err =
                relative_l2(model::to_host_values(y.get(), y_elems, dtype), want, tokens, S, 0, S);
          } else {  // block b of the gathered outputs: columns b * slice of the full product
            const auto all = model::to_host_values(gathered.get(), y_elems * t, dtype);
            for (int b = 0; b < t; ++b) {
              const std::vector<double> block(
                  all.begin() + static_cast<std::ptrdiff_t>(b * y_elems),
                  all.begin() + static_cast<std::ptrdiff_t>((b + 1) * y_elems));
              err = std::max(err, relative_l2(block, want, tokens, slice, b * slice, S));
            }
          }
          o.check_error = err;
          if (!(err <= kCheckLimit)) {
            o.status = "failed";
            o.note = fmt::format(
                "result differs from the full GEMM: relative error {:.3g} "
                "(limit {})",
                err, kCheckLimit);
          }
        }
        o.compute_s = group
                          .measure(
                              self, [&](cudaStream_t s2, int) { compute(s2); }, mo)
                          .median_s();
        if (t > 1) {
          o.comm_s = group
                         .measure(
                             self, [&](cudaStream_t s2, int) { collective(s2); }, mo)
                         .median_s();
          o.total_s = group
                          .measure(
                              self,
                              [&](cudaStream_t s2, int) {
                                compute(s2);
                                collective(s2);
                              },
                              mo)
                          .median_s();
        } else {
          o.total_s = o.compute_s;
        }
        if (t > 1 && kind == MicroKind::Row && s.overlap && tokens >= s.overlap_chunks) {
          // Chunks of whole token rows: chunk i's GEMM on the main stream, its all-reduce on the
          // side stream once the GEMM is done, so it overlaps chunk i+1's GEMM.
          const int c = s.overlap_chunks;
          const std::int64_t per = (tokens + c - 1) / c;
          std::vector<Event> done;
          for (int i = 0; i < c; ++i) done.emplace_back(self.device);
          Event comm_done(self.device);
          auto overlapped = [&](cudaStream_t s2, int) {
            for (int i = 0; i < c; ++i) {
              const std::int64_t t0 = i * per, rows = std::min(per, tokens - t0);
              if (rows <= 0) break;
              const auto* xi = x.as<unsigned char>() + t0 * shape.k * 2;
              auto* yi = y.as<unsigned char>() + t0 * shape.n * 2;
              gemm(w.get(), xi, yi, shape.n, rows, shape.k, s2);
              done[static_cast<std::size_t>(i)].record(s2);
              GPB_CUDA_CHECK(
                  cudaStreamWaitEvent(side.get(), done[static_cast<std::size_t>(i)].get(), 0));
              reduce->all_reduce(yi, rows * shape.n, dtype, side.get());
            }
            comm_done.record(side.get());
            GPB_CUDA_CHECK(cudaStreamWaitEvent(s2, comm_done.get(), 0));
          };
          // Checked once (each run recomputes the chunks from X and W), then timed.
          overlapped(st, 0);
          GPB_CUDA_CHECK(cudaStreamSynchronize(st));
          group.barrier();
          if (self.rank == 0) {
            o.overlap_check_error =
                relative_l2(model::to_host_values(y.get(), y_elems, dtype), want, tokens, S, 0, S);
            if (!(o.overlap_check_error <= kCheckLimit)) {
              o.status = "failed";
              o.note = fmt::format("overlapped result differs from the full GEMM: relative "
                                   "error {:.3g} (limit {})",
                                   o.overlap_check_error, kCheckLimit);
            }
          }
          o.overlap_s = group.measure(self, overlapped, mo).median_s();
        }
        if (self.rank == 0) out.push_back(o);
      }
    }
  });
  return out;
}

}  // namespace gpubench::tp
