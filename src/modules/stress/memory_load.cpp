// stress's memory load (see loads.hpp): one region over most of a GPU's free memory, each
// pattern of memtest.cuh written and read back in turn, bit errors counted.
#include <fmt/format.h>

#include <algorithm>

#include "gpubench/kernels/memtest.cuh"
#include "gpubench/modules/stress/loads.hpp"

namespace gpubench::stress {

namespace {

constexpr std::uint64_t kSeed = 0x3E3;
constexpr std::size_t kAlign = 2u << 20;  // whole 2 MiB pages

}  // namespace

struct MemoryLoad::Impl {
  int gpu;
  bool fault;
  Stream stream;
  DeviceBuffer region, tally;
  Event start, stop;
  std::size_t words = 0;
  std::uint64_t pass = 0;
  MemoryOutcome out;
  double moved_bytes = 0, moved_s = 0;

  Impl(int g, double share, bool inject) : gpu(g), fault(inject), stream(g), start(g), stop(g) {
    DeviceGuard guard(g);
    std::size_t free_bytes = 0, total = 0;
    GPB_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    const auto bytes =
        static_cast<std::size_t>(static_cast<double>(free_bytes) * share) / kAlign * kAlign;
    if (bytes < kAlign)
      throw std::runtime_error(
          fmt::format("GPU {}: too little free memory for the memory test "
                      "({} free)",
                      g, free_bytes));
    region = DeviceBuffer(g, bytes);
    tally = DeviceBuffer(g, sizeof(MemtestTally));
    words = bytes / 8;
    out.bytes = bytes;
  }

  std::uint64_t* base() const { return region.as<std::uint64_t>(); }
  void corrupt_once();
  void one_pass(Progress& progress);
};

// Test hook: one bit of one word of the region flipped after it was written.
void MemoryLoad::Impl::corrupt_once() {
  fault = false;
  stream.synchronize();
  std::uint64_t* at = base() + words / 2 + 5;
  std::uint64_t v = 0;
  GPB_CUDA_CHECK(cudaMemcpy(&v, at, sizeof v, cudaMemcpyDeviceToHost));
  v ^= 1ull << 17;
  GPB_CUDA_CHECK(cudaMemcpy(at, &v, sizeof v, cudaMemcpyHostToDevice));
}

// One pattern over the whole region: written, then read back (moving inversions: read while
// writing the complements, then the complements read back).
void MemoryLoad::Impl::one_pass(Progress& progress) {
  const MemPattern p = kMemPatterns[pass % kMemPatternCount];
  GPB_CUDA_CHECK(cudaMemsetAsync(tally.get(), 0, sizeof(MemtestTally), stream));
  start.record(stream);
  launch_memtest_fill(base(), words, p, pass, kSeed, stream);
  if (fault) corrupt_once();
  const bool inversions = p == MemPattern::MovingInversions;
  launch_memtest_check(base(), words, p, pass, kSeed, false, inversions, tally.as<MemtestTally>(),
                       stream);
  if (inversions)
    launch_memtest_check(base(), words, p, pass, kSeed, true, false, tally.as<MemtestTally>(),
                         stream);
  stop.record(stream);
  MemtestTally got{};
  GPB_CUDA_CHECK(cudaMemcpyAsync(&got, tally.get(), sizeof got, cudaMemcpyDeviceToHost, stream));
  stream.synchronize();
  const double seconds = stop.seconds_since(start);
  // Every word written once and read once; moving inversions writes and reads each twice.
  const double bytes = static_cast<double>(out.bytes) * (inversions ? 4 : 2);
  ++out.passes;
  ++pass;
  out.words_wrong += got.words_wrong;
  out.bit_errors += got.bit_errors;
  const auto base_address = reinterpret_cast<std::uint64_t>(base());
  for (unsigned i = 0; i < std::min(got.recorded, kMemtestRecorded); ++i)
    if (out.first_wrong.size() < kMemtestRecorded)
      out.first_wrong.push_back(
          {base_address + 8 * got.wrong[i].index, got.wrong[i].expected, got.wrong[i].got});
  moved_bytes += bytes;
  moved_s += seconds;
  out.GBps = moved_bytes / moved_s / 1e9;
  Progress::Totals t;
  t.memory_bytes = bytes;
  t.memory_s = seconds;
  t.errors = got.words_wrong;
  progress.add(t);
}

MemoryLoad::MemoryLoad(int gpu, double share, bool inject_fault)
    : impl_(std::make_unique<Impl>(gpu, share, inject_fault)) {}

MemoryLoad::~MemoryLoad() = default;

void MemoryLoad::run(const StopFn& stop, Progress& progress) {
  DeviceGuard guard(impl_->gpu);
  while (!stop()) impl_->one_pass(progress);
}

MemoryOutcome MemoryLoad::outcome() const {
  return impl_->out;
}

}  // namespace gpubench::stress
