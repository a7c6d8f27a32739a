// RankGroup in one process: a thread per GPU, a host barrier that can be aborted, gather, and
// the multi-rank measurement (barrier before each iteration, time = max over ranks).
#include "gpubench/core/ranks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

#include "gpubench/core/context.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/mpi.hpp"
#include "gpubench/core/watchdog.hpp"

#ifdef GPUBENCH_HAVE_MPI
#include <mpi.h>
#endif

namespace gpubench {

namespace {
// Thrown inside ranks blocked in barrier() or wait() when another rank failed: ends them quietly.
// Work still queued on this rank's stream may wait for the failed one for ever, so its device is
// then marked stuck first (its buffers are left allocated rather than freed behind that work); a
// rank whose stream is done frees as usual.
struct GroupAborted {};
thread_local cudaStream_t t_rank_stream = nullptr;  // this thread's rank's stream, inside run()
[[noreturn]] void end_aborted_rank() {
  const bool busy = !t_rank_stream || cudaStreamQuery(t_rank_stream) == cudaErrorNotReady;
  int device = 0;
  if (busy && cudaGetDevice(&device) == cudaSuccess) mark_device_stuck(device);
  throw GroupAborted{};
}
}  // namespace

struct RankGroup::Impl {
  std::vector<int> devices;
  bool mpi = false;  // one process per GPU: this process is rank mpi_rank of mpi_size
  int mpi_rank = 0, mpi_size = 1;
#ifdef GPUBENCH_HAVE_MPI
  MPI_Comm comm = MPI_COMM_NULL;  // the group's communicator (MPI_COMM_WORLD or a split of it)
  bool own_comm = false;          // a split, freed with the group
  ~Impl() {
    if (own_comm) MPI_Comm_free(&comm);
  }
#endif
  std::vector<unsigned char> shared_bytes;  // broadcast staging (threads)
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  long generation = 0;
  bool aborted = false;
  std::vector<double> slots;
  std::vector<double> gathered;

  void abort() {
    std::lock_guard<std::mutex> lock(mu);
    aborted = true;
    cv.notify_all();
  }

  bool is_aborted() {
    std::lock_guard<std::mutex> lock(mu);
    return aborted;
  }

  void barrier() {
    std::unique_lock<std::mutex> lock(mu);
    if (aborted) end_aborted_rank();
    const long gen = generation;
    if (++arrived == static_cast<int>(devices.size())) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return generation != gen || aborted; });
    if (aborted) end_aborted_rank();
  }
};

RankGroup::RankGroup(std::vector<int> devices) : impl_(std::make_unique<Impl>()) {
  if (devices.empty()) throw InputError("a rank group needs at least one GPU");
  impl_->devices = std::move(devices);
  impl_->slots.assign(impl_->devices.size(), 0.0);
}

RankGroup::RankGroup() : impl_(std::make_unique<Impl>()) {}

std::unique_ptr<RankGroup> RankGroup::over_mpi(int device) {
  const ProcessInfo& p = process_info();
  if (!p.mpi) throw InputError("a process-per-GPU rank group needs an MPI launch (mpirun or srun)");
  std::unique_ptr<RankGroup> g(new RankGroup());
  g->impl_->devices = {device};
  g->impl_->mpi = true;
  g->impl_->mpi_rank = p.rank;
  g->impl_->mpi_size = p.size;
#ifdef GPUBENCH_HAVE_MPI
  g->impl_->comm = MPI_COMM_WORLD;
#endif
  return g;
}

std::unique_ptr<RankGroup> RankGroup::over_mpi(int device, int ranks) {
  const ProcessInfo& p = process_info();
  if (!p.mpi) throw InputError("a process-per-GPU rank group needs an MPI launch (mpirun or srun)");
  if (ranks < 1 || ranks > p.size)
    throw InputError(fmt::format("a group of {} ranks out of {} MPI processes", ranks, p.size));
#ifdef GPUBENCH_HAVE_MPI
  const bool member = p.rank < ranks;
  MPI_Comm split = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, p.rank, &split);
  if (!member) return nullptr;
  auto g = over_mpi(device);  // the first `ranks` processes keep their ranks
  g->impl_->mpi_size = ranks;
  g->impl_->comm = split;
  g->impl_->own_comm = true;
  return g;
#else
  (void)device;
  throw InputError("this gpubench was built without MPI");
#endif
}

RankGroup::~RankGroup() = default;

int RankGroup::size() const noexcept {
  return impl_->mpi ? impl_->mpi_size : static_cast<int>(impl_->devices.size());
}
const std::vector<int>& RankGroup::devices() const noexcept {
  return impl_->devices;
}
bool RankGroup::is_mpi() const noexcept {
  return impl_->mpi;
}

void RankGroup::run(const std::function<void(Rank&)>& body) {
  if (impl_->mpi) {
    // One rank in this process: run the body here; MPI carries the group operations.
    const int device = impl_->devices.front();
    GPB_CUDA_CHECK(cudaSetDevice(device));
    Stream stream(device);
    Rank self{impl_->mpi_rank, impl_->mpi_size, device, &stream, this};
    try {
      body(self);
      stream.synchronize();
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      throw GpuError(fmt::format("rank {} (GPU {}): {}", impl_->mpi_rank, device, e.what()));
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->aborted = false;
    impl_->arrived = 0;
  }
  const int n = size();
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        GPB_CUDA_CHECK(cudaSetDevice(impl_->devices[r]));
        Stream stream(impl_->devices[r]);
        t_rank_stream = stream.get();
        Rank self{r, n, impl_->devices[r], &stream, this};
        body(self);
        stream.synchronize();
      } catch (const GroupAborted&) {
        // another rank failed first; its error is the one reported
      } catch (...) {
        errors[r] = std::current_exception();
        impl_->abort();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      throw GpuError(fmt::format("rank {} (GPU {}): {}", r, impl_->devices[r], e.what()));
    }
  }
}

void RankGroup::barrier() {
#ifdef GPUBENCH_HAVE_MPI
  if (impl_->mpi) {
    MPI_Barrier(impl_->comm);
    note_progress();
    return;
  }
#endif
  impl_->barrier();
  note_progress();  // every rank got here
}

bool RankGroup::any(int rank, bool value) {
  const std::vector<double> all = all_gather(rank, value ? 1.0 : 0.0);
  return std::any_of(all.begin(), all.end(), [](double v) { return v != 0; });
}

bool RankGroup::stop_requested() {
  if (!impl_->mpi) return Context::interrupted();
  return any(impl_->mpi_rank, Context::interrupted());
}

void RankGroup::broadcast(int rank, void* data, std::size_t bytes, int root) {
#ifdef GPUBENCH_HAVE_MPI
  if (impl_->mpi) {
    MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, impl_->comm);
    note_progress();
    return;
  }
#endif
  if (rank == root) {
    const auto* p = static_cast<const unsigned char*>(data);
    impl_->shared_bytes.assign(p, p + bytes);
  }
  impl_->barrier();  // the root has staged the bytes
  if (rank != root) std::memcpy(data, impl_->shared_bytes.data(), bytes);
  impl_->barrier();  // everyone has copied before the staging is reused
  note_progress();
}

std::vector<double> RankGroup::all_gather(int rank, double value) {
#ifdef GPUBENCH_HAVE_MPI
  if (impl_->mpi) {
    std::vector<double> out(static_cast<std::size_t>(impl_->mpi_size));
    MPI_Allgather(&value, 1, MPI_DOUBLE, out.data(), 1, MPI_DOUBLE, impl_->comm);
    note_progress();
    return out;
  }
#endif
  impl_->slots[rank] = value;
  impl_->barrier();  // every slot written
  if (rank == 0) impl_->gathered = impl_->slots;
  impl_->barrier();  // rank 0 has copied
  std::vector<double> out = impl_->gathered;
  impl_->barrier();  // everyone has read before slots are reused
  note_progress();
  return out;
}

void RankGroup::wait(const Event& done, double timeout_s, const char* what) {
  if (impl_->mpi) {
    wait_for(done, timeout_s, what);
    return;
  }
  wait_for(done, timeout_s, what, [this] {
    if (impl_->is_aborted()) end_aborted_rank();
  });
}

void RankGroup::leave_if_aborted() {
  if (!impl_->mpi && impl_->is_aborted()) end_aborted_rank();
}

void RankGroup::sync(Rank& self) {
  Event done(self.device, /*timing=*/false);
  done.record(self.stream->get());
  wait(done, 0, "the rank's GPU work");
}

Measurement RankGroup::measure(Rank& self, const Launch& launch, const MeasureOptions& o) {
  cudaStream_t stream = self.stream->get();
  Event start(self.device), stop(self.device);
  std::unique_ptr<SpinGate> gate;
  if (o.spin) gate = std::make_unique<SpinGate>(self.device);
  int iteration = 0;

  // One iteration on every rank: queue behind the gate, meet, release together, time.
  auto one = [&]() -> double {
    if (gate) gate->hold(stream);
    start.record(stream);
    launch(stream, iteration++);
    stop.record(stream);
    barrier();
    if (gate) gate->release();
    wait(stop, o.timeout_s, "the measured GPU work");
    const std::vector<double> all = all_gather(self.rank, stop.seconds_since(start));
    switch (o.rank_time) {
      case MeasureOptions::RankTime::First:
        return all.front();
      case MeasureOptions::RankTime::Mean:
        return std::accumulate(all.begin(), all.end(), 0.0) / static_cast<double>(all.size());
      case MeasureOptions::RankTime::Min:
        return *std::min_element(all.begin(), all.end());
      case MeasureOptions::RankTime::Max:
        break;
    }
    return *std::max_element(all.begin(), all.end());
  };

  for (int w = 0; w < o.warmup; ++w) (void)one();
  Measurement m;
  const auto t0 = std::chrono::steady_clock::now();
  double total = 0;
  while (true) {
    const double t = one();
    m.samples.push_back(t);
    total += t;
    const auto n = static_cast<int>(m.samples.size());
    // Rank 0 decides (its host clock bounds the loop); every rank follows its decision.
    double decision = 0;  // 0 go on, 1 converged (noise or fixed count), 2 max iters, 3 time cap
    if (self.rank == 0) {
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (o.fixed_iters > 0) {
        decision = n >= o.fixed_iters ? 1 : 0;
      } else if (n >= o.min_iters && total >= o.min_time_s &&
                 relative_noise(m.samples) <= o.max_noise) {
        decision = 1;
      } else if (n >= o.max_iters) {
        decision = 2;
      } else if (elapsed >= o.max_time_s && n >= std::min(o.min_iters, 3)) {
        decision = 3;
      }
    }
    decision = all_gather(self.rank, decision)[0];
    if (decision == 0) continue;
    m.converged = decision == 1;
    m.stop_reason = decision == 1 ? (o.fixed_iters > 0 ? "iters" : "noise")
                                  : (decision == 2 ? "max_iters" : "time_cap");
    break;
  }
  m.stats = compute_stats(m.samples);
  return m;
}

int rank_count(const Context& ctx) {
  return ctx.over_processes() ? rank_count(ctx.gpus()) : static_cast<int>(ctx.gpus().size());
}

std::unique_ptr<RankGroup> leading_ranks(Context& ctx, int n, const std::string& option) {
  const bool processes = ctx.over_processes() && process_info().mpi;
  const int have = rank_count(ctx);
  if (n < 1 || n > have)
    throw InputError(fmt::format("{}: {} needs {} GPUs, {} {}", option, n, n, have,
                                 processes ? "processes" : "selected"));
  if (processes) return RankGroup::over_mpi(process_gpu(ctx.gpus(), false), n);
  return std::make_unique<RankGroup>(
      std::vector<int>(ctx.gpus().begin(), ctx.gpus().begin() + n));
}

}  // namespace gpubench
