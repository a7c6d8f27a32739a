// `gpubench allreduce`: NCCL collectives over a RankGroup (a thread per GPU, or a process per GPU
// under mpirun/srun), swept over message sizes, timed by the measurement core, verified.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>

#include "gpubench/core/context.hpp"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/module.hpp"
#include "gpubench/core/mpi.hpp"
#include "gpubench/core/nccl.hpp"
#include "gpubench/core/progress.hpp"
#include "gpubench/core/ranks.hpp"
#include "gpubench/core/runner.hpp"  // utc_now
#include "gpubench/core/units.hpp"
#include "gpubench/core/watchdog.hpp"
#include "gpubench/modules/allreduce/allreduce.hpp"
#include "gpubench/modules/allreduce/results.hpp"
#include "gpubench/modules/allreduce/settings.hpp"
#include "gpubench/parallel/collectives.hpp"

extern char** environ;

namespace gpubench {

namespace {

using namespace allreduce;

// Leaves room for NCCL's own buffers and the context when sizing the sweep's top.
constexpr std::uint64_t kReserveBytes = 2ull << 30;

// The NCCL_* variables of this process, recorded with the results.
ojson nccl_environment() {
  ojson env = ojson::object();
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    if (kv.rfind("NCCL_", 0) != 0) continue;
    const auto eq = kv.find('=');
    env[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
  }
  return env;
}

// The per-GPU, per-direction peak of the links between the ranks' GPUs (the slowest pair).
void link_peak(const System& sys, const std::vector<int>& gpus, RunFacts& facts) {
  double peak = 0;
  std::string name;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    for (std::size_t j = i + 1; j < gpus.size(); ++j) {
      const Link* l = sys.link(gpus[i], gpus[j]);
      if (!l) continue;
      const GpuInfo* g = sys.gpu(gpus[i]);
      // A ring uses each GPU's links in one direction: NVLink total per GPU, else the pair's.
      double p = l->type == "NVLink" && g && g->nvlink_GBps_per_link > 0
                     ? g->nvlink_links_up * g->nvlink_GBps_per_link
                     : l->GBps_theoretical;
      if (peak == 0 || p < peak) {
        peak = p;
        name = l->type == "NVLink" ? fmt::format("NVLink x{}", l->count) : l->type;
      }
    }
  }
  facts.link_peak_GBps = peak;
  facts.link_name = name;
}

class AllreduceModule final : public ResolvingModule<Options, Settings> {
 public:
  std::string name() const override { return "allreduce"; }
  std::string help() const override {
    return "NCCL collectives: algbw/busbw sweeps, verified (nccl-tests columns and more)";
  }
  bool supports_mpi() const override { return true; }

  std::vector<std::string> examples() const override {
    return {"gpubench allreduce -b 8 -e 8G -f 2",
            "gpubench allreduce --collective all -d bf16 -b 1M -e 1G",
            "mpirun -np 4 gpubench allreduce -b 64M -e 8G"};
  }

  void add_options(CLI::App& app) override {
    opts_ = Options{};  // a fresh parse starts from the defaults
    effective_.reset();
    app.add_option("--collective", opts_.collective,
                   "all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall, sendrecv, "
                   "gather, scatter, alltoallv, hypercube (a list) or all")
        ->capture_default_str();
    app.add_option("--impl", opts_.impl,
                   "nccl, or one-shot: gpubench's one-kernel all-reduce for small messages (bf16 "
                   "or fp16 sums in place, up to 8 GPUs with peer access)")
        ->capture_default_str();
    app.add_option("--skew", opts_.skew,
                   "alltoallv: 0 splits each rank's data evenly, 1 sends nothing to itself and "
                   "more the farther the peer (MoE-like, nccl-tests' default)")
        ->capture_default_str();
    app.add_option("-d,--type,--datatype", opts_.type,
                   "int8, uint8, int32, uint32, int64, uint64, fp16, bf16, fp32, fp64, fp8_e4m3, "
                   "fp8_e5m2 (a list, nccl-tests' names too) or all")
        ->capture_default_str();
    app.add_option(
           "-o,--op", opts_.op,
           "sum, prod, min, max, avg, mulsum (PreMulSum, scalar 1 or 2 by rank) (a list) or all")
        ->capture_default_str();
    app.add_option("-r,--root", opts_.root,
                   "Root rank of broadcast, reduce, gather, scatter, or all (-1): each in turn")
        ->capture_default_str();
    app.add_option("-b,--min-bytes,--minbytes", opts_.min_bytes, "Smallest message (default 8)");
    app.add_option("-e,--max-bytes,--maxbytes", opts_.max_bytes,
                   "Largest message (default 8G; 256M with --quick)");
    app.add_option("-f,--step-factor,--stepfactor", opts_.step_factor,
                   "Multiply the size by this (default 2; 4 with --quick)");
    app.add_option("-i,--step-bytes,--stepbytes", opts_.step_bytes,
                   "Add this to the size instead of multiplying");
    app.add_option("-m,--agg-iters,--agg_iters", opts_.agg_iters,
                   "Ops per timed iteration (0: 20 below 1 MiB, down to 4 from 16 MiB)")
        ->capture_default_str();
    app.add_option("--place", opts_.place, "both, out (out-of-place only), in (in-place only)")
        ->capture_default_str();
    app.add_option("-c,--check", opts_.check, "Verified runs per size (0: none)")
        ->capture_default_str();
    app.add_flag("--cuda-graph", opts_.cuda_graph, "Capture each iteration's ops in a CUDA graph");
    app.add_option("--split", opts_.split, "Run this many groups of GPUs at once")
        ->capture_default_str();
    app.add_option("-T,--timeout", opts_.timeout, "Seconds before a hung collective is aborted")
        ->capture_default_str();
    add_nccl_tests_options(app);
    app.add_flag("--allow-shared-gpus", opts_.allow_shared_gpus,
                 "Under MPI, allow more processes than GPUs on a node");
  }

  // nccl-tests' flags under their names, with their meaning (resolve_settings maps, notes or
  // refuses each).
  void add_nccl_tests_options(CLI::App& app) {
    const auto flag = [&](const char* names, int& field, const char* help) {
      app.add_option(names, field, help)->group("nccl-tests' flags");
    };
    flag("-t,--nthreads", opts_.nthreads, "Threads per process: -t x -g GPUs of this process");
    flag("-g,--ngpus", opts_.ngpus, "GPUs per thread: -t x -g GPUs of this process");
    flag("-n", opts_.iters, "Timed iterations per size (instead of the noise rule)");
    flag("-w,--warmup_iters", opts_.warmup_iters, "Untimed iterations per size");
    flag("-N,--run_cycles", opts_.run_cycles,
         "Sweeps, each reported as its own curves (default 1; 0: until Ctrl-C or SIGTERM)");
    flag("-p,--parallel_init", opts_.parallel_init, "0/1 (ranks are always set up in parallel)");
    flag("-z,--blocking", opts_.blocking_mode,
         "0 none, 1 wait and barrier after each op, 2 wait after each op, 3 per iteration");
    flag("-y,--stream_null", opts_.stream_null, "0 (NULL stream: not done)");
    flag("-G,--cudagraph", opts_.cudagraph, "N > 0: each iteration's ops as a CUDA graph");
    flag("-C,--report_cputime", opts_.report_cputime, "0 (gpubench reports GPU event time)");
    flag("-S,--report_timestamps", opts_.report_timestamps, "1: each row's finishing time");
    flag("-a,--average", opts_.average,
         "Time of an iteration: 0 rank 0's, 1 mean, 2 fastest, 3 slowest rank's (default 3)");
    flag("-R,--local_register", opts_.local_register,
         "1: buffers from ncclMemAlloc registered (ncclCommRegister); 2: symmetric windows");
    flag("-x,--cta_policy", opts_.cta_policy, "NCCL's CTA policy: 0 default, 1 efficiency, 2 zero");
    flag("-D,--device_implementation", opts_.device_implementation,
         "0 (nccl-tests' own kernels: do not apply)");
    flag("-V,--device_cta_count", opts_.device_cta_count, "With -D only (ignored)");
    flag("-M,--memory", opts_.memory, "1: device memory used by NCCL, the buffers and the run");
    flag("-u,--unalign", opts_.unalign, "Buffers start this many elements past an alignment");
    flag("-I,--per_iter_timing", opts_.per_iter_timing, "0/1 (always on: the stats columns)");
    flag("-K,--per_iter_skip", opts_.per_iter_skip, "Leading samples left out (as warm-up)");
  }

  std::optional<std::string> unsupported(const System&,
                                         const std::vector<int>& gpus) const override {
    const int n = rank_count(gpus);
    if (n < 2)
      return fmt::format(
          "needs at least 2 GPUs (got {}): use --gpus with 2 or more, or mpirun -np 2+", n);
    return std::nullopt;
  }

  Report run(Context& ctx) override {
    Settings s = resolve_settings(opts_, ctx.quick());
    const ProcessInfo& proc = process_info();
    Report pre;
    for (const auto& n : s.notes) pre.warn(n);
    fit_to_machine(ctx, s, pre);
    std::vector<int> world_gpus = ctx.gpus();
    const std::unique_ptr<RankGroup> group = make_group(ctx, s, world_gpus);
    const int world = group->size();
    if (world % s.split != 0)
      throw InputError(
          fmt::format("--split {}: {} ranks do not divide into equal groups", s.split, world));
    const int n = world / s.split;
    if (n < 2)
      throw InputError(
          fmt::format("--split {} leaves groups of 1 rank ({} ranks)", s.split, world));
    if (!s.all_roots && s.root >= n)
      throw InputError(fmt::format("--root {} is outside the group of {} ranks", s.root, n));
    for (auto it = s.collectives.begin(); it != s.collectives.end();) {
      const std::string why = cannot_run(*it, n);
      if (why.empty()) {
        ++it;
        continue;
      }
      if (s.collectives.size() == 1) throw InputError(why);
      pre.warn(why + ": left out");
      it = s.collectives.erase(it);
    }
    effective_ = s;  // the report's config: what runs (fp8, -R 2, collectives fitted to here)

    // Message sizes: whole elements per rank for every type, cut to what fits.
    std::vector<std::uint64_t> sizes =
        sweep_sizes(s.min_bytes, s.max_bytes, s.step_factor, s.step_bytes, 1);
    Report r = std::move(pre);
    const std::uint64_t fits = agreed(*group, max_fitting_size(s, world_gpus, n));
    if (!sizes.empty() && sizes.back() > fits) {
      r.warn(fmt::format("sizes above {} do not fit in GPU memory and were left out",
                         format_bytes(fits)));
      sizes.erase(
          std::remove_if(sizes.begin(), sizes.end(), [&](std::uint64_t x) { return x > fits; }),
          sizes.end());
    }
    if (sizes.empty()) throw InputError("no message size of the sweep fits in GPU memory");
    std::unique_ptr<parallel::OneShotGroup> shots;  // --impl one-shot in one process
    if (s.one_shot) one_shot_setup(world_gpus, n, proc.mpi, sizes, r, shots);
    std::uint64_t buffer_bytes = 0;
    for (const auto& c : s.collectives)
      for (const auto& t : s.types) {
        const std::size_t count = c.count_for(sizes.back(), t.bytes, n);
        buffer_bytes = std::max<std::uint64_t>(
            buffer_bytes, std::max(c.send_elems(count, n), c.recv_elems(count, n)) *
                              static_cast<std::uint64_t>(t.bytes));
      }

    const MeasureOptions mo = sweep_options(ctx, s);

    RunFacts facts;
    facts.nranks = n;
    facts.groups = s.split;
    facts.all_roots = s.all_roots;
    link_peak(ctx.system(), proc.mpi ? node_gpus(ctx, proc) : world_gpus, facts);
    r.extra["process_model"] = proc.mpi ? fmt::format("{} (one process per GPU)", proc.launcher)
                                        : std::string("one process, a thread per GPU");
    r.extra["ranks"] = world;
    r.extra["groups"] = s.split;
    r.extra["nccl"] = {{"version", nccl_library_version()}, {"env", nccl_environment()}};

    std::vector<Row> rows;
    ojson memory;  // -M
    // After each size, the report so far: what a stalled run ends with.
    const auto publish = [&] {
      Report partial = r;
      build_report(partial, rows, facts);
      ctx.publish(partial);
    };
    // A failure (a collective past --timeout, a GPU error) ends the sweep; the sizes that
    // finished before it are still reported, beside the error. A rank stuck where --timeout
    // does not reach (NCCL's set-up, an MPI call, the driver) ends the run with that report
    // once no rank has passed a barrier for watchdog_limit_s (twice --timeout, at least 30 s).
    std::string failure;
    try {
      const auto watchdog = ctx.watchdog("allreduce", watchdog_limit_s(s.timeout_s));
      group->run([&](Rank& self) {
        // One communicator per group; rank 0 makes every group's id and shares them.
        std::vector<ncclUniqueId> ids(static_cast<std::size_t>(s.split));
        if (self.rank == 0)
          for (auto& id : ids) GPB_NCCL_CHECK(ncclGetUniqueId(&id));
        group->broadcast(self.rank, ids.data(), ids.size() * sizeof(ncclUniqueId));
        const int color = self.rank / n, grank = self.rank % n;
        const std::uint64_t before_init = s.memory_report ? used_bytes() : 0;
        NcclComm comm(ids[static_cast<std::size_t>(color)], n, grank, 0, s.cta_policy);
        // --impl one-shot: the ranks' buffers and flags, shared in this process or over IPC.
        std::unique_ptr<parallel::OneShotGroup> ipc;
        if (s.one_shot && proc.mpi) {
          ipc = parallel::OneShotGroup::over_ipc(*group, self.rank, self.device, sizes.back());
          if (!ipc) throw GpuError(kNoOneShot);
        }
        try {
          run_rank(self, *group, comm, s, sizes, buffer_bytes, mo, n, grank, before_init,
                   shots ? shots.get() : ipc.get(), rows, memory, publish);
        } catch (...) {
          comm.abort();  // a hung or failed collective must not hang the others
          throw;
        }
      });
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      failure = e.what();
      spdlog::error("allreduce: {}", failure);
    }

    build_report(r, rows, facts);
    if (!memory.is_null()) r.extra["memory"] = memory;
    r.error = failure;  // the runner marks the report failed; the finished sizes stand
    return r;
  }

 private:
  // What the machine allows: fp8 only where every selected GPU reduces it (sm_90+), -R 2 only
  // with an NCCL that has symmetric windows (else -R 1), each change a warning in `pre`.
  static void fit_to_machine(Context& ctx, Settings& s, Report& pre) {
    bool fp8_ok = true;
    for (int g : ctx.gpus()) {
      const GpuInfo* info = ctx.system().gpu(g);
      fp8_ok = fp8_ok && info && info->cc_major >= 9;
    }
    if (s.registration == 2 && !nccl_has_symmetric_windows()) {
      pre.warn(fmt::format("-R 2: symmetric windows need NCCL 2.27 or later (running {}): -R 1",
                           nccl_library_version()));
      s.registration = 1;
    }
    if (fp8_ok) return;
    const auto before = s.types.size();
    s.types.erase(std::remove_if(s.types.begin(), s.types.end(),
                                 [](const DataType& t) { return t.name.rfind("fp8", 0) == 0; }),
                  s.types.end());
    if (s.types.size() != before)
      pre.warn("fp8 types left out: they need compute capability 9.0 or newer");
    if (s.types.empty())
      throw InputError("--type: fp8 needs GPUs of compute capability 9.0 or newer");
  }

  // The ranks: this process's GPU under MPI, every selected GPU otherwise (the first -t x -g of
  // them when given); world_gpus is cut to the GPUs of this process's ranks (under MPI its one).
  static std::unique_ptr<RankGroup> make_group(Context& ctx, const Settings& s,
                                               std::vector<int>& world_gpus) {
    const bool mpi = process_info().mpi;
    if (s.gpus_per_process > 0) {  // nccl-tests' -t x -g
      if (mpi && s.gpus_per_process > 1)
        throw InputError("-t x -g: one GPU per process under mpirun or srun");
      if (!mpi && s.gpus_per_process > static_cast<int>(world_gpus.size()))
        throw InputError(fmt::format("-t x -g = {} GPUs, but {} are selected", s.gpus_per_process,
                                     world_gpus.size()));
      if (!mpi) world_gpus.resize(static_cast<std::size_t>(s.gpus_per_process));
    }
    if (mpi) {
      const int gpu = process_gpu(ctx.gpus(), s.allow_shared_gpus, " (or --allow-shared-gpus)");
      world_gpus = {gpu};  // this process touches its own GPU only
      return RankGroup::over_mpi(gpu);
    }
    return std::make_unique<RankGroup>(world_gpus);
  }

  // The measurement options of the sweep. A full sweep of every collective is hundreds of
  // measurements: small messages are held to 1% noise and at most 0.3 s each (0.15 s quick)
  // unless the command line says otherwise.
  static MeasureOptions sweep_options(Context& ctx, const Settings& s) {
    MeasureOptions mo = ctx.measure_options();
    mo.timeout_s = s.timeout_s;
    if (ctx.common().max_time < 0)
      mo.max_time_s = std::min(mo.max_time_s, ctx.quick() ? 0.15 : 0.3);
    if (ctx.common().max_noise < 0) mo.max_noise = std::max(mo.max_noise, 0.01);
    if (ctx.common().min_time < 0)
      mo.min_time_s = std::min(mo.min_time_s, ctx.quick() ? 0.01 : 0.05);
    mo.l2 = L2Policy::Hot;  // messages are the data; NCCL reads them once per op
    mo.spin = !s.blocking;
    if (s.iters > 0) mo.fixed_iters = s.iters;                          // nccl-tests' -n
    if (s.warmup >= 0) mo.warmup = s.warmup;                            // -w (and -K)
    mo.rank_time = static_cast<MeasureOptions::RankTime>(s.rank_time);  // -a
    return mo;
  }

  static constexpr const char* kNoOneShot =
      "--impl one-shot needs the GPUs of one host with peer access between every pair";

  // --impl one-shot: at most kOneShotMaxRanks ranks, sizes up to kOneShotMaxBytes (a warning for
  // the rest), and in one process the group of buffers (under MPI each rank maps its peers').
  static void one_shot_setup(const std::vector<int>& gpus, int n, bool mpi,
                             std::vector<std::uint64_t>& sizes, Report& r,
                             std::unique_ptr<parallel::OneShotGroup>& shots) {
    if (n > kOneShotMaxRanks)
      throw InputError(
          fmt::format("--impl one-shot: at most {} GPUs, not {}", kOneShotMaxRanks, n));
    if (sizes.back() > kOneShotMaxBytes) {
      r.warn(
          fmt::format("--impl one-shot: sizes above {} left out", format_bytes(kOneShotMaxBytes)));
      sizes.erase(std::remove_if(sizes.begin(), sizes.end(),
                                 [](std::uint64_t x) { return x > kOneShotMaxBytes; }),
                  sizes.end());
    }
    if (sizes.empty()) throw InputError("--impl one-shot: no size of the sweep is small enough");
    if (mpi) return;
    shots = std::make_unique<parallel::OneShotGroup>(gpus, sizes.back());
    if (!shots->peers_ok()) throw GpuError(kNoOneShot);
  }

  // The least of every rank's `value` (every process calls it under MPI: the sweep's sizes must
  // be the same on every rank, or their collectives would not pair up).
  static std::uint64_t agreed(RankGroup& group, std::uint64_t value) {
    if (!group.is_mpi()) return value;
    std::uint64_t least = value;
    group.run([&](Rank& self) {
      const auto all = group.all_gather(self.rank, static_cast<double>(value));
      least = static_cast<std::uint64_t>(*std::min_element(all.begin(), all.end()));
    });
    return least;
  }

  // Under MPI, the GPUs the ranks use when the job is on one node (the first of its selected
  // GPUs, a process each), for the link peak; none across nodes (the network is not known).
  static std::vector<int> node_gpus(Context& ctx, const ProcessInfo& proc) {
    if (proc.size != proc.local_size) return {};
    std::vector<int> g = ctx.gpus();
    g.resize(std::min(g.size(), static_cast<std::size_t>(proc.local_size)));
    return g;
  }

  // Largest size whose buffers fit on every selected GPU next to NCCL's own.
  static std::uint64_t max_fitting_size(const Settings& s, const std::vector<int>& gpus, int n) {
    std::size_t free_min = ~std::size_t{0};
    for (int g : gpus) {
      DeviceGuard guard(g);
      std::size_t free_b = 0, total_b = 0;
      GPB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
      free_min = std::min(free_min, free_b);
    }
    const std::uint64_t room = free_min > kReserveBytes ? free_min - kReserveBytes : 0;
    // Two buffers of max(send, recv) elements; the worst collective decides.
    double worst_ratio = 1;
    for (const auto& c : s.collectives) {
      for (const auto& t : s.types) {
        const std::size_t count = c.count_for(1ull << 30, t.bytes, n);
        const double elems =
            static_cast<double>(std::max(c.send_elems(count, n), c.recv_elems(count, n)));
        worst_ratio = std::max(worst_ratio, elems * t.bytes / static_cast<double>(1ull << 30));
      }
    }
    return static_cast<std::uint64_t>(static_cast<double>(room) / (2.0 * worst_ratio));
  }

  // One rank's two message buffers (send a, receive b): cudaMalloc'd, or with -R from
  // ncclMemAlloc and registered with the communicator. -u moves both starts past the alignment.
  class Buffers {
   public:
    Buffers(int device, std::uint64_t bytes, const Settings& s, const NcclComm& comm)
        : unalign_(static_cast<std::size_t>(s.unalign)) {
      const std::size_t total = bytes + 8 * unalign_;  // room for -u at the widest type
      if (s.registration == 0) {
        plain_a_ = DeviceBuffer(device, total);
        plain_b_ = DeviceBuffer(device, total);
        a_ = plain_a_.get();
        b_ = plain_b_.get();
        return;
      }
      const auto how = s.registration == 1 ? NcclRegistration::Local : NcclRegistration::Symmetric;
      nccl_a_.emplace(total);
      nccl_b_.emplace(total);
      a_ = nccl_a_->get();
      b_ = nccl_b_->get();
      reg_a_.emplace(comm, a_, total, how);
      reg_b_.emplace(comm, b_, total, how);
    }
    void* a(int type_bytes) const { return static_cast<char*>(a_) + unalign_ * type_bytes; }
    void* b(int type_bytes) const { return static_cast<char*>(b_) + unalign_ * type_bytes; }

   private:
    std::size_t unalign_;
    DeviceBuffer plain_a_, plain_b_;
    std::optional<NcclMemory> nccl_a_, nccl_b_;  // before the registrations: freed after
    std::optional<NcclRegistered> reg_a_, reg_b_;
    void* a_ = nullptr;
    void* b_ = nullptr;
  };

  // Device memory in use on this rank's GPU (cudaMemGetInfo), for -M.
  static std::uint64_t used_bytes() {
    std::size_t free_b = 0, total_b = 0;
    GPB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return total_b - free_b;
  }

  // What one rank does for one size: time the out-of-place and in-place forms, then verify each.
  struct SizeRun {
    Rank& self;
    RankGroup& group;
    NcclComm& comm;
    const Settings& s;
    const MeasureOptions& mo;
    const Buffers& buffers;
    int n, grank;
    const parallel::OneShotGroup* shots;  // --impl one-shot, else null
  };

  static void run_place(const SizeRun& z, const Collective& c, const DataType& t,
                        const ReduceOp& op, Row& row, bool in_place) {
    const Settings& s = z.s;
    PlaceResult& pr = in_place ? row.in_place : row.out_of_place;
    const int root = std::max(row.root, 0);
    // In place, alltoall(v) and sendrecv overwrite input not yet sent (each rank's buffer is
    // another's source): the output is undefined and cannot be checked, so they are not run.
    if (in_place && !in_place_defined(c)) {
      pr.not_run = true;
      return;
    }
    cudaStream_t stream = z.self.stream->get();
    const std::size_t count = row.count;
    // In place: reduce_scatter and scatter write their slice of the send buffer, the others use
    // one buffer for both (all_gather's send is its slice of the output).
    void* recv = z.buffers.b(t.bytes);
    if (in_place && output_in_input(c))
      recv = static_cast<char*>(recv) + static_cast<std::size_t>(z.grank) * count * t.bytes;
    const void* send = in_place ? in_place_send(c, recv, count, t, z.grank) : z.buffers.a(t.bytes);
    const std::string what = fmt::format("{} {} {} {} ({})", c.name, format_bytes(row.size), t.name,
                                         row.op, in_place ? "in-place" : "out-of-place");
    const int agg = agg_for(row.size, s.agg_iters);
    try {
      init_send(c, const_cast<void*>(send), count, t, op, z.grank, z.n, 0x5eed + row.size, stream);
      auto one_op = [&](cudaStream_t st) {
        if (z.shots)  // in place, a bf16 or fp16 sum (resolve_settings)
          one_shot_all_reduce(recv, static_cast<std::int64_t>(count), z.shots->peers(z.grank),
                              t.name == "bf16" ? ActDtype::BF16 : ActDtype::F16, st);
        else
          issue(c, send, recv, count, t, op, root, z.comm.get(), z.grank, z.n, st);
      };
      CudaGraph graph;
      if (s.cuda_graph) {
        // NCCL connects peers at a communicator's first op of a kind, which a capture may not
        // contain: run one op outside the graph first.
        one_op(stream);
        GPB_CUDA_CHECK(cudaStreamSynchronize(stream));
        graph.capture(stream, [&](cudaStream_t st) {
          for (int k = 0; k < agg; ++k) one_op(st);
        });
      }
      const Measurement m = z.group.measure(
          z.self,
          [&](cudaStream_t st, int) {
            if (s.cuda_graph) {
              graph.launch(st);
              return;
            }
            for (int k = 0; k < agg; ++k) {
              one_op(st);
              if (s.blocking) GPB_CUDA_CHECK(cudaStreamSynchronize(st));
              if (s.barrier_each_op) z.group.barrier();  // -z 1
            }
          },
          z.mo);
      pr.measured = true;
      pr.agg = agg;
      std::vector<double> per_op = m.samples;
      for (double& x : per_op) x /= agg;
      pr.per_op = compute_stats(per_op);
      pr.stop_reason = m.stop_reason;
      pr.converged = m.converged;
      // Verify: fresh data, a poisoned output, one op, every element checked.
      Event done(z.self.device);
      std::uint64_t wrong = 0;
      for (int k = 0; k < s.check; ++k) {
        const std::uint64_t seed = 0xc0ffee + 7919ull * k + row.size;
        init_send(c, const_cast<void*>(send), count, t, op, z.grank, z.n, seed, stream);
        // In place the output overlays the input, so only a separate output is poisoned.
        if (!in_place) poison_recv(recv, c.recv_elems(count, z.n), t, stream);
        z.group.barrier();
        one_op(stream);
        done.record(stream);
        wait_for(done, s.timeout_s, what.c_str());
        wrong += count_wrong(c, recv, count, t, op, root, z.grank, z.n, seed, stream);
      }
      const auto all = z.group.all_gather(z.self.rank, static_cast<double>(wrong));
      double total = 0;
      for (double w : all) total += w;
      pr.wrong = static_cast<std::uint64_t>(total);
      pr.checked = s.check > 0;
    } catch (const TimeoutError& e) {
      throw TimeoutError(fmt::format("{}: {}", what, e.what()));
    }
  }

  // A rooted collective runs from its root, or (-r all) from each rank in turn; -1: no root.
  static std::vector<int> roots_of(const Collective& c, const Settings& s, int n) {
    std::vector<int> roots;
    for (int r = 0; r < (c.rooted && s.all_roots ? n : 1); ++r)
      roots.push_back(!c.rooted ? -1 : (s.all_roots ? r : s.root));
    return roots;
  }

  // One rank's sweep over every collective, type, op, root and size (cycle: -N's count, 0 when
  // there is one sweep). Rank 0 records the rows (the measurement is the same on every rank) and
  // publishes the report so far after each. False when the run was asked to stop.
  static bool run_sweep(const SizeRun& z, const std::vector<std::uint64_t>& sizes, int cycle,
                        std::vector<Row>& rows, std::uint64_t& peak,
                        const std::function<void()>& publish) {
    const Settings& s = z.s;
    const bool lead = z.self.rank == 0;
    for (const Collective& c : s.collectives) {
      for (const DataType& t : s.types) {
        const std::vector<ReduceOp> ops = c.reduces ? s.ops : std::vector<ReduceOp>{s.ops.front()};
        for (const ReduceOp& op : ops) {
          for (const int root : roots_of(c, s, z.n)) {
            for (std::uint64_t size : sizes) {
              // Every rank stops at the same size: one that stopped alone would leave the
              // others waiting in the collective.
              if (z.group.any(z.self.rank, Context::interrupted())) return false;
              const std::size_t count = c.count_for(size, t.bytes, z.n);
              if (lead)
                progress::next(fmt::format("{} {} {} {}{}{}", c.name, format_bytes(size), t.name,
                                           c.reduces ? op.name : "",
                                           root >= 0 ? fmt::format(" root {}", root) : "",
                                           cycle > 0 ? fmt::format(" (cycle {})", cycle) : ""));
              if (count == 0) continue;
              Row row;
              row.collective = &c;
              row.type = t.name;
              row.op = c.reduces ? op.name : "none";
              row.type_bytes = t.bytes;
              row.root = root;
              row.size = c.size_for(count, t.bytes, z.n);
              row.count = count;
              row.sweep_end = size == sizes.back();
              row.cycle = cycle;
              for (bool in_place : {false, true})
                if (in_place ? s.in_place : s.out_of_place) run_place(z, c, t, op, row, in_place);
              if (s.timestamps) row.timestamp = utc_now();
              if (s.memory_report) peak = std::max(peak, used_bytes());
              if (!lead) continue;
              spdlog::debug("allreduce: {} {} {} {}: {:.2f} us", c.name, format_bytes(row.size),
                            t.name, row.op,
                            row.out_of_place.measured ? row.out_of_place.per_op.median * 1e6
                                                      : row.in_place.per_op.median * 1e6);
              rows.push_back(row);
              publish();
            }
          }
        }
      }
    }
    return true;
  }

  // Everything one rank does: its buffers, then -N sweeps (0: until stopped). -M: the memory
  // each stage took, max over ranks.
  static void run_rank(Rank& self, RankGroup& group, NcclComm& comm, const Settings& s,
                       const std::vector<std::uint64_t>& sizes, std::uint64_t buffer_bytes,
                       const MeasureOptions& mo, int n, int grank, std::uint64_t before_init,
                       const parallel::OneShotGroup* shots, std::vector<Row>& rows, ojson& memory,
                       const std::function<void()>& publish) {
    const std::uint64_t after_init = s.memory_report ? used_bytes() : 0;
    const Buffers buffers(self.device, buffer_bytes, s, comm);
    const NcclAbortOnThrow abort_first(comm);  // a failure aborts before the buffers go
    const std::uint64_t after_buffers = s.memory_report ? used_bytes() : 0;
    std::uint64_t peak = after_buffers;
    const SizeRun z{self, group, comm, s, mo, buffers, n, grank, shots};
    std::size_t cases = 0;
    for (const Collective& c : s.collectives)
      cases +=
          s.types.size() * (c.reduces ? s.ops.size() : 1) * roots_of(c, s, n).size() * sizes.size();
    if (self.rank == 0) progress::expect(cases * static_cast<std::size_t>(s.cycles));
    for (int cycle = 1; s.cycles == 0 || cycle <= s.cycles; ++cycle)
      if (!run_sweep(z, sizes, s.cycles == 1 ? 0 : cycle, rows, peak, publish)) break;
    if (!s.memory_report) return;
    const auto most = [&](std::uint64_t to, std::uint64_t from) {
      const double grew = std::max(0.0, static_cast<double>(to) - static_cast<double>(from));
      const auto all = group.all_gather(self.rank, grew);
      return *std::max_element(all.begin(), all.end());
    };
    const double nccl_init = most(after_init, before_init);
    const double user = most(after_buffers, after_init);
    const double collective = most(peak, after_buffers);
    if (self.rank == 0)
      memory = {{"nccl_init_bytes", nccl_init},
                {"buffers_bytes", user},
                {"during_collectives_bytes", collective},
                {"note",
                 "device memory in use (cudaMemGetInfo) taken by each stage, most of "
                 "any rank; other processes on the GPU count too"}};
  }

  Settings resolve(const Options& o, bool quick) const override {
    return resolve_settings(o, quick);
  }
};

}  // namespace

ModulePtr make_allreduce_module() {
  return std::make_unique<AllreduceModule>();
}

}  // namespace gpubench
