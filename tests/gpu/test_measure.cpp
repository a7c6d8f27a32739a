// The measurement core on a real GPU: a kernel of known duration is timed right, the stopping
// rule holds, launch gaps stay out, and RankGroup times the slowest rank.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/measure.hpp"
#include "gpubench/core/ranks.hpp"
#include "gpubench/kernels/spin.cuh"

using namespace gpubench;

namespace {
MeasureOptions fast_options() {
  MeasureOptions o;
  o.warmup = 1;
  o.min_iters = 10;
  o.min_time_s = 0.01;
  o.max_noise = 0.02;
  o.max_time_s = 2;
  return o;
}
}  // namespace

TEST(Measure, KnownDurationKernel) {
  Stream s(0);
  Measurer m(0);
  for (double us : {20.0, 200.0, 2000.0}) {
    const auto ns = static_cast<std::uint64_t>(us * 1e3);
    const Measurement r = m.run(
        s, [&](cudaStream_t st, int) { launch_busy_wait(ns, 1, st); }, fast_options());
    EXPECT_GE(r.stats.n, 10u);
    // The kernel spins at least `ns`; event timing adds at most a few microseconds.
    EXPECT_GE(r.stats.median, us * 1e-6 * 0.99) << us;
    EXPECT_LE(r.stats.median, us * 1e-6 * 1.10 + 5e-6) << us;
  }
}

TEST(Measure, FixedIterationsAndIterationIndex) {
  Stream s(0);
  Measurer m(0);
  MeasureOptions o = fast_options();
  o.warmup = 3;
  o.fixed_iters = 37;
  std::vector<int> seen;
  const Measurement r = m.run(
      s,
      [&](cudaStream_t st, int it) {
        seen.push_back(it);
        launch_busy_wait(1000, 1, st);
      },
      o);
  EXPECT_EQ(r.samples.size(), 37u);
  EXPECT_EQ(r.stop_reason, "iters");
  ASSERT_EQ(seen.size(), 40u);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(seen[i], i);
}

TEST(Measure, SpinGateKeepsLaunchGapsOut) {
  // 2 us kernels: without the gate, host launch overhead would show between the events.
  Stream s(0);
  Measurer m(0);
  MeasureOptions o = fast_options();
  o.l2 = L2Policy::Hot;
  o.fixed_iters = 64;
  const Measurement r = m.run(
      s, [&](cudaStream_t st, int) { launch_busy_wait(2000, 1, st); }, o);
  EXPECT_LT(r.stats.median, 12e-6);
}

TEST(Measure, TimeCapStopsANoisyMeasurement) {
  Stream s(0);
  Measurer m(0);
  MeasureOptions o = fast_options();
  o.max_noise = 0;  // never met
  o.max_time_s = 0.2;
  const Measurement r = m.run(
      s, [&](cudaStream_t st, int it) { launch_busy_wait(1000 + 500 * (it % 3), 1, st); }, o);
  EXPECT_EQ(r.stop_reason, "time_cap");
  EXPECT_FALSE(r.converged);
}

TEST(Measure, ColdFlushRuns) {
  Stream s(0);
  Measurer m(0);
  MeasureOptions o = fast_options();
  o.l2 = L2Policy::Cold;
  const Measurement r = m.run(
      s, [&](cudaStream_t st, int) { launch_busy_wait(5000, 1, st); }, o);
  EXPECT_GE(r.stats.median, 5e-6);
}

TEST(Measure, ExceptionInLaunchReleasesTheGate) {
  Stream s(0);
  Measurer m(0);
  EXPECT_THROW(m.run(
                   s,
                   [&](cudaStream_t, int it) {
                     if (it == 2) throw std::runtime_error("boom");
                   },
                   fast_options()),
               std::runtime_error);
  // The stream must not stay held by the spin kernel.
  s.synchronize();
}

// Work past its timeout marks its device stuck: a buffer destroyed while that work still runs is
// left allocated instead of waiting for it; unmarked, the free waits for the work.
TEST(Measure, ATimeoutLeavesBuffersToTheStuckWork) {
  Stream s(0);
  Event done(0);
  std::optional<DeviceBuffer> leaked(std::in_place, 0, std::size_t{1} << 20);
  std::optional<DeviceBuffer> freed(std::in_place, 0, std::size_t{1} << 20);
  std::optional<PinnedBuffer> pinned(std::in_place, 4096);
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
  launch_busy_wait(3'000'000'000ull, 1, s.get());  // 3 s
  done.record(s.get());
  const auto t0 = std::chrono::steady_clock::now();
  const auto since = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  EXPECT_THROW(wait_for(done, 0.1, "the busy kernel"), TimeoutError);
  EXPECT_TRUE(device_stuck(0));
  leaked.reset();
  pinned.reset();
  EXPECT_LT(since(), 1.0) << "a free waited for the stuck kernel";
  clear_stuck_devices();
  freed.reset();
  EXPECT_GT(since(), 2.5) << "cudaFree returned before the kernel ended: nothing to guard";
  s.synchronize();
}

// A marked device whose streams drain within the limit is unmarked (its memory comes back); one
// whose work outlasts it stays marked.
TEST(Measure, ADrainedDeviceIsNoLongerStuck) {
  Stream busy(0), idle(0);
  launch_busy_wait(1'500'000'000ull, 1, busy.get());  // 1.5 s
  mark_device_stuck(0);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(drain_and_unmark(0, {idle.get(), busy.get()}, 0.1));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  EXPECT_TRUE(device_stuck(0));
  EXPECT_TRUE(drain_and_unmark(0, {idle.get(), busy.get()}, 10));
  EXPECT_FALSE(device_stuck(0));
  EXPECT_GT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.2)
      << "unmarked before the busy kernel ended";
  EXPECT_TRUE(drain_and_unmark(0, {idle.get()}, 0.1));  // nothing queued: at once
  clear_stuck_devices();
}

// A rank waiting for its GPU work ends as soon as another rank fails, not when the work ends (it
// could wait for the failed rank for ever): its device marked stuck, the failure rethrown.
TEST(RankGroup, AWaitEndsWhenAnotherRankFails) {
  RankGroup group({0, 0});  // two ranks on one GPU
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(group.run([&](Rank& self) {
    if (self.rank == 1) {
      group.barrier();
      throw std::runtime_error("rank 1 failed");
    }
    Event done(self.device);
    launch_busy_wait(3'000'000'000ull, 1, self.stream->get());  // 3 s
    done.record(self.stream->get());
    group.barrier();
    group.wait(done, 0, "the busy kernel");  // no time limit
  }),
               GpuError);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 1.5) << "the wait outlasted the failed rank";
  EXPECT_TRUE(device_stuck(0));
  clear_stuck_devices();
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
}

// A rank's own host-side wait (a spin barrier between the threads, as the copy engines' is)
// ends once another rank failed, its stream idle so its device stays unmarked; the failure is
// the one rethrown. Without the abort the spin below would run into its 10 s limit.
TEST(RankGroup, AHostSideSpinLeavesWhenAnotherRankFails) {
  RankGroup group({0, 0});  // two ranks on one GPU
  std::atomic<bool> reached_limit{false};
  const auto t0 = std::chrono::steady_clock::now();
  try {
    group.run([&](Rank& self) {
      if (self.rank == 1) {
        group.barrier();
        throw std::runtime_error("rank 1 failed");
      }
      group.barrier();
      const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (std::chrono::steady_clock::now() < limit) group.leave_if_aborted();
      reached_limit = true;
    });
    ADD_FAILURE() << "the failure was not rethrown";
  } catch (const GpuError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 failed"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(reached_limit.load());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  EXPECT_FALSE(device_stuck(0));
}

TEST(RankGroup, BarrierGatherAndMaxOverRanks) {
  const int n = visible_device_count();
  std::vector<int> devices;
  for (int i = 0; i < n; ++i) devices.push_back(i);
  RankGroup group(devices);
  std::atomic<int> ran{0};
  std::vector<Measurement> results(n);
  group.run([&](Rank& self) {
    ++ran;
    group.barrier();
    const auto all = group.all_gather(self.rank, self.rank * 10.0);
    ASSERT_EQ(static_cast<int>(all.size()), n);
    for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], r * 10.0);
    EXPECT_TRUE(group.any(self.rank, self.rank == n - 1));  // one rank says yes
    EXPECT_FALSE(group.any(self.rank, false));
    // The last rank is slowest: every rank must report its time.
    const std::uint64_t ns = self.rank == n - 1 ? 300000 : 50000;
    results[self.rank] = group.measure(
        self, [&](cudaStream_t st, int) { launch_busy_wait(ns, 1, st); }, fast_options());
  });
  EXPECT_EQ(ran.load(), n);
  for (int r = 0; r < n; ++r) {
    EXPECT_GE(results[r].stats.median, 300e-6 * 0.99);
    EXPECT_EQ(results[r].samples, results[0].samples);
  }
}

TEST(RankGroup, FailureOnOneRankEndsAllWithoutHanging) {
  const int n = visible_device_count();
  std::vector<int> devices;
  for (int i = 0; i < n; ++i) devices.push_back(i);
  RankGroup group(devices);
  EXPECT_THROW(group.run([&](Rank& self) {
    if (self.rank == 0) throw std::runtime_error("rank 0 fails");
    group.barrier();  // would wait forever without the abort
    group.barrier();
  }),
               GpuError);
}
