#pragma once
// stress's loads, one object per GPU and kind: set up (buffers, the first output, its checks)
// on the calling thread, then run() on a thread of its own until `stop` says so, adding what it
// did to the GPU's Progress as it goes. Internal to the stress module.
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "gpubench/core/cuda.hpp"
#include "gpubench/modules/stress/stress.hpp"

namespace gpubench::stress {

// What a GPU's loads have done so far; written by their threads, read by the sampler.
struct Progress {
  struct Totals {
    double flops = 0, gemm_s = 0;  // GEMM work and the GEMM time it took
    double memory_bytes = 0, memory_s = 0;
    double link_bytes = 0, link_s = 0;
    std::uint64_t errors = 0;
  };
  void add(const Totals& more);
  Totals totals() const;

 private:
  mutable std::mutex mu_;
  Totals t_;
};

using StopFn = std::function<bool()>;

// The GEMM load of one GPU: per dtype one operand set (the same seeded data on every GPU), a
// deterministic algorithm (no split-K reduction, checked to give the same bits twice), the first
// output kept as the golden copy after an fp64 reference check; run() then computes batches of
// outputs into a ring and compares each with the golden copy bit for bit.
class GemmLoad {
 public:
  // `like`: a load of another GPU of the same model whose algorithms this one takes, so the
  // outputs of the two can be compared bit for bit. Test hooks: `inject_fault` flips a bit of
  // one output; `inject_hang` puts a 10-minute kernel before the first batch.
  GemmLoad(int gpu, const std::vector<GemmDtype>& dtypes, bool inject_fault, bool inject_hang,
           const GemmLoad* like = nullptr);
  ~GemmLoad();
  void run(const StopFn& stop, Progress& progress);
  // Per dtype; `agrees` is left for the caller (it compares the golden hashes across GPUs).
  std::vector<GemmOutcome> outcomes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The memory test of one GPU over `share` of its free memory, pattern after pattern.
class MemoryLoad {
 public:
  MemoryLoad(int gpu, double share, bool inject_fault);
  ~MemoryLoad();
  void run(const StopFn& stop, Progress& progress);
  MemoryOutcome outcome() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Verified copies from one GPU: host -> GPU, GPU -> host, and to every peer in `peers` (peer
// access enabled), round after round with a new pattern each time; the receiving side checks.
class LinkLoad {
 public:
  // `fault`: the link (src, dst; -1 the host) of a copy to corrupt once on arrival, when it is
  // one of this load's.
  LinkLoad(int gpu, const std::vector<int>& peers, std::pair<int, int> fault);
  ~LinkLoad();
  void run(const StopFn& stop, Progress& progress);
  std::vector<LinkOutcome> outcomes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpubench::stress
