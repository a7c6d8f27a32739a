// stress's run: the loads set up on every GPU, held on threads of their own for the duration,
// sampled about once a second (rates, clocks, power, temperature, errors) into the time series
// and the live view; health read before and after, XID events watched in between.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <thread>

#include "gpubench/core/context.hpp"
#include "gpubench/core/monitor.hpp"
#include "gpubench/core/nvml.hpp"
#include "gpubench/core/peers.hpp"
#include "gpubench/core/progress.hpp"
#include "gpubench/core/system.hpp"
#include "gpubench/core/watchdog.hpp"
#include "gpubench/modules/stress/loads.hpp"

namespace gpubench::stress {

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kSamplePeriod = 1.0;  // seconds between samples
constexpr double kLogPeriod = 10.0;    // seconds between plain status lines off a terminal

// The loads of one GPU, set up in turn: GEMM and links first, the memory test last (it takes
// its share of what they left free).
struct GpuLoads {
  std::unique_ptr<GemmLoad> gemm;
  std::unique_ptr<LinkLoad> link;
  std::unique_ptr<MemoryLoad> memory;
};

// The GEMM algorithms are chosen on the first GPU of each model and taken by the others.
void set_up(const System& sys, const Settings& s, const Faults& f, const std::vector<int>& gpus,
            std::vector<GpuLoads>& loads, Outcome& o) {
  std::unique_ptr<PeerAccess> peers;
  if (s.link && gpus.size() > 1) peers = std::make_unique<PeerAccess>(gpus);
  const auto model = [&](int g) { return sys.gpu(g) ? sys.gpu(g)->name : std::string(); };
  std::map<std::string, const GemmLoad*> first_of_model;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    const int g = gpus[i];
    try {
      if (s.gemm) {
        const auto like = first_of_model.find(model(g));
        loads[i].gemm =
            std::make_unique<GemmLoad>(g, s.dtypes, f.gemm_gpu == g, f.hang_gpu == g,
                                       like == first_of_model.end() ? nullptr : like->second);
        first_of_model.emplace(model(g), loads[i].gemm.get());
      }
      if (s.link) {
        std::vector<int> to;
        for (int p : gpus)
          if (p != g && peers && peers->pair(g, p)) to.push_back(p);
        loads[i].link = std::make_unique<LinkLoad>(g, to, std::make_pair(f.link_src, f.link_dst));
      }
    } catch (const std::exception& e) {
      o.gpus[i].error = e.what();
    }
  }
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    if (!s.memory || !o.gpus[i].error.empty()) continue;
    try {
      loads[i].memory =
          std::make_unique<MemoryLoad>(gpus[i], s.memory_share, f.memory_gpu == gpus[i]);
    } catch (const std::exception& e) {
      o.gpus[i].error = e.what();
    }
  }
}

Sample sample_of(int gpu, double t, const Progress::Totals& now, const Progress::Totals& was) {
  Sample s;
  s.t = t;
  const auto rate = [](double amount, double seconds, double scale) {
    return seconds > 0 ? amount / seconds / scale : std::nan("");
  };
  s.tflops = rate(now.flops - was.flops, now.gemm_s - was.gemm_s, 1e12);
  s.memory_GBps = rate(now.memory_bytes - was.memory_bytes, now.memory_s - was.memory_s, 1e9);
  s.link_GBps = rate(now.link_bytes - was.link_bytes, now.link_s - was.link_s, 1e9);
  s.errors = now.errors;
  const Nvml& nvml = Nvml::get();
  if (const auto d = nvml.available() ? nvml.device_for_cuda(gpu) : std::nullopt) {
    s.sm_MHz = nvml.clock_MHz(*d, nvml::Clock::Sm);
    s.mem_MHz = nvml.clock_MHz(*d, nvml::Clock::Memory);
    s.power_W = nvml.power_W(*d);
    s.temperature_C = nvml.temperature_C(*d);
    s.reasons = nvml.clocks_event_reasons(*d).value_or(0);
  }
  return s;
}

// One load's thread and what shows it alive: the field of its GPU's progress its work adds to.
struct LoadRun {
  std::size_t gpu = 0;  // index into the run's GPUs
  const char* what = "";
  double Progress::Totals::*clock = nullptr;
  std::atomic<bool> done{false};
  double last = -1;  // the clock when last seen to move
  Clock::time_point moved;
  bool hung = false;
};

// What the load threads share. On a hang it is never freed: the stuck threads still hold it.
struct RunState {
  std::deque<Progress> progress;
  std::deque<LoadRun> loads;
  std::vector<std::string> errors;  // per GPU, under error_mu
  std::mutex error_mu;
  std::atomic<bool> failed{false};
  Clock::time_point deadline;
  bool stop() const { return Context::interrupted() || failed.load() || Clock::now() >= deadline; }
  // Loads not done whose clocks stood still for hang_s become hung (and stop the run); true once
  // every load is done or hung.
  bool settle(double hang_s) {
    const Clock::time_point now = Clock::now();
    bool waiting = false;
    for (LoadRun& l : loads) {
      if (l.done.load() || l.hung) continue;
      const double c = progress[l.gpu].totals().*l.clock;
      if (c != l.last) {
        l.last = c;
        l.moved = now;
      } else if (std::chrono::duration<double>(now - l.moved).count() > hang_s) {
        l.hung = true;
        failed = true;
        continue;
      }
      waiting = true;
    }
    return !waiting;
  }
};

// Samples every GPU each period until every load has ended or hung; draws the live view.
void sample_until_done(const std::vector<int>& gpus, RunState& run, const Settings& s,
                       Clock::time_point t0, Outcome& o) {
  std::vector<Progress::Totals> last(gpus.size());
  double next_log = kLogPeriod;
  for (LoadRun& l : run.loads) l.moved = t0;
  bool ended = false;
  while (!ended) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ended = run.settle(s.hang_s);
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    const double last_t = o.gpus.front().series.empty() ? 0 : o.gpus.front().series.back().t;
    if (t - last_t < kSamplePeriod && !ended) continue;
    std::vector<std::string> lines;
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      const Progress::Totals now = run.progress[i].totals();
      Sample sample = sample_of(gpus[i], t, now, last[i]);
      last[i] = now;
      lines.push_back(live_line(gpus[i], sample, s.duration_s));
      o.gpus[i].series.push_back(std::move(sample));
    }
    if (!progress::board(lines) && t >= next_log) {
      for (const std::string& l : lines) spdlog::info("stress: {}", l);
      next_log += kLogPeriod;
    }
  }
  progress::clear_line();
}

// What the loads saw, into the outcome: a hung load's outcome stays as set-up left it (its
// thread may still write its own).
void collect(const std::vector<GpuLoads>& loads, const RunState& run, Outcome& o) {
  for (const LoadRun& l : run.loads)
    if (l.hung) o.gpus[l.gpu].hung.push_back(l.what);
  const auto hung = [&](std::size_t i, const char* what) {
    const std::vector<std::string>& h = o.gpus[i].hung;
    return std::find(h.begin(), h.end(), what) != h.end();
  };
  for (std::size_t i = 0; i < loads.size(); ++i) {
    if (!run.errors[i].empty())
      o.gpus[i].error += (o.gpus[i].error.empty() ? "" : "; ") + run.errors[i];
    if (loads[i].gemm && !hung(i, "GEMM")) {
      std::vector<GemmOutcome> now = loads[i].gemm->outcomes();
      for (std::size_t k = 0; k < now.size() && k < o.gpus[i].gemm.size(); ++k)
        now[k].agrees = o.gpus[i].gemm[k].agrees;
      o.gpus[i].gemm = std::move(now);
    }
    if (loads[i].memory && !hung(i, "memory")) o.gpus[i].memory = loads[i].memory->outcome();
    if (loads[i].link && !hung(i, "link"))
      for (LinkOutcome& l : loads[i].link->outcomes()) o.links.push_back(std::move(l));
  }
}

}  // namespace

void Progress::add(const Totals& m) {
  std::lock_guard<std::mutex> lock(mu_);
  t_.flops += m.flops;
  t_.gemm_s += m.gemm_s;
  t_.memory_bytes += m.memory_bytes;
  t_.memory_s += m.memory_s;
  t_.link_bytes += m.link_bytes;
  t_.link_s += m.link_s;
  t_.errors += m.errors;
}

Progress::Totals Progress::totals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return t_;
}

Outcome run(Context& ctx, const Settings& s, const Faults& f) {
  Outcome o;
  o.settings = s;
  const std::vector<int>& gpus = ctx.gpus();
  for (int g : gpus) o.gpus.push_back(GpuOutcome{g, {}, {}, {}, {}, {}});
  o.before = read_health(ctx.system(), gpus);
  // The loads and what their threads share live on the heap: on a hang they are never freed.
  auto loads = std::make_unique<std::vector<GpuLoads>>(gpus.size());
  auto run = std::make_unique<RunState>();
  spdlog::info("stress: setting up {} on {} GPU(s)", s.to_json()["workloads"].dump(), gpus.size());
  set_up(ctx.system(), s, f, gpus, *loads, o);
  for (std::size_t i = 0; i < gpus.size(); ++i)
    if ((*loads)[i].gemm) o.gpus[i].gemm = (*loads)[i].gemm->outcomes();
  compare_first_outputs(o);

  XidWatcher xids(ctx.system(), gpus);
  run->progress.resize(gpus.size());
  run->errors.resize(gpus.size());
  const Clock::time_point t0 = Clock::now();
  run->deadline =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s.duration_s));
  std::vector<std::thread> threads;
  const auto launch = [&](std::size_t i, auto* load, const char* what,
                          double Progress::Totals::*clock) {
    if (!load) return;
    LoadRun& l = run->loads.emplace_back();
    l.gpu = i;
    l.what = what;
    l.clock = clock;
    threads.emplace_back([state = run.get(), &l, i, load] {
      try {
        load->run([state] { return state->stop(); }, state->progress[i]);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(state->error_mu);
        std::string& error = state->errors[i];
        error += (error.empty() ? "" : "; ") + std::string(e.what());
        state->failed = true;  // a CUDA error may have left the context unusable: stop all
      }
      l.done = true;
    });
  };
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    launch(i, (*loads)[i].gemm.get(), "GEMM", &Progress::Totals::gemm_s);
    launch(i, (*loads)[i].memory.get(), "memory", &Progress::Totals::memory_s);
    launch(i, (*loads)[i].link.get(), "link", &Progress::Totals::link_s);
  }
  sample_until_done(gpus, *run, s, t0, o);
  for (std::size_t k = 0; k < threads.size(); ++k)
    if (run->loads[k].hung)
      threads[k].detach();
    else
      threads[k].join();
  o.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
  o.interrupted = Context::interrupted();
  o.after = read_health(ctx.system(), gpus);
  o.xids = xids.stop();
  o.xid_unavailable = xids.unavailable();
  std::lock_guard<std::mutex> lock(run->error_mu);
  collect(*loads, *run, o);
  if (!o.any_hung()) return o;
  // A thread stuck in the driver cannot be joined and its GPU's memory cannot be freed under it:
  // the report goes out now and the process ends.
  Report r = stress_report(o);
  r.warn("a load hung: gpubench ended without waiting for it (its GPU may need a reset)");
  (void)loads.release();
  (void)run.release();
  int code = 1;
  try {
    code = ctx.stall(r);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpubench: error: the report of the hung run failed: %s\n", e.what());
  }
  end_stuck_process(code);
}

}  // namespace gpubench::stress
