// Verification of transfers: the pattern written into a source and checked at the destination,
// on the GPU for device memory and on a few host threads for host memory.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <functional>
#include <thread>

#include "gpubench/modules/bandwidth/bandwidth.hpp"

namespace gpubench::bandwidth {

void device_pattern_fill(Lane& lane, void* buf, std::size_t bytes, std::uint64_t seed) {
  DeviceGuard guard(lane.device);
  launch_pattern_fill(buf, bytes, seed, lane.main);
  lane.main.synchronize();
}

void device_clear(Lane& lane, void* buf, std::size_t bytes) {
  DeviceGuard guard(lane.device);
  GPB_CUDA_CHECK(cudaMemsetAsync(buf, 0, bytes, lane.main));
  lane.main.synchronize();
}

std::uint64_t device_pattern_mismatches(Lane& lane, const void* buf, std::size_t bytes,
                                        std::uint64_t seed) {
  DeviceGuard guard(lane.device);
  unsigned long long bad = 0;
  GPB_CUDA_CHECK(cudaMemsetAsync(lane.counter(), 0, sizeof(bad), lane.main));
  launch_pattern_check(buf, bytes, seed, lane.counter(), lane.main);
  GPB_CUDA_CHECK(
      cudaMemcpyAsync(&bad, lane.counter(), sizeof(bad), cudaMemcpyDeviceToHost, lane.main));
  lane.main.synchronize();
  return bad;
}

namespace {

// Splits [0, bytes) into word-aligned ranges, runs `body(lo, hi)` on each from its own thread,
// and rethrows the first exception after all have finished.
void for_ranges(std::size_t bytes, const std::function<void(std::size_t, std::size_t)>& body) {
  constexpr std::size_t kMinPerThread = 16u << 20;
  const std::size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t threads =
      std::clamp<std::size_t>(bytes / kMinPerThread, 1, std::min<std::size_t>(hw, 16));
  if (threads == 1) {
    body(0, bytes);
    return;
  }
  const std::size_t chunk = ((bytes + threads - 1) / threads + 3) & ~std::size_t{3};
  std::vector<std::thread> pool;
  const ThreadJoiner joiner{pool};
  std::vector<std::exception_ptr> errors(threads);
  for (std::size_t t = 0; t < threads; ++t) {
    const std::size_t lo = std::min(bytes, t * chunk), hi = std::min(bytes, lo + chunk);
    pool.emplace_back([&, t, lo, hi] {
      try {
        body(lo, hi);
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  }
  joiner.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

void host_pattern_fill(void* buf, std::size_t bytes, std::uint64_t seed) {
  auto* p = static_cast<unsigned char*>(buf);
  for_ranges(bytes, [&](std::size_t lo, std::size_t hi) {
    std::size_t b = lo;
    for (; b + 4 <= hi; b += 4) {
      const std::uint32_t w = pattern_word(seed, b / 4);
      std::memcpy(p + b, &w, 4);  // little-endian, as the GPU writes it
    }
    if (b < hi) {
      const std::uint32_t w = pattern_word(seed, b / 4);
      std::memcpy(p + b, &w, hi - b);
    }
  });
}

std::uint64_t host_pattern_mismatches(const void* buf, std::size_t bytes, std::uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(buf);
  std::atomic<std::uint64_t> total{0};
  for_ranges(bytes, [&](std::size_t lo, std::size_t hi) {
    std::uint64_t bad = 0;
    std::size_t b = lo;
    for (; b + 4 <= hi; b += 4) {
      std::uint32_t got;
      std::memcpy(&got, p + b, 4);
      bad += got != pattern_word(seed, b / 4);
    }
    if (b < hi) {
      const std::uint32_t w = pattern_word(seed, b / 4);
      bad += std::memcmp(p + b, &w, hi - b) != 0;
    }
    total += bad;
  });
  return total.load();
}

std::uint64_t seed_for(const std::string& what, int index) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the name, then the index mixed in
  for (unsigned char c : what) h = (h ^ c) * 1099511628211ull;
  return mix64(h ^ static_cast<std::uint64_t>(index + 1));
}

std::string mismatch_note(std::uint64_t bad, std::uint64_t bytes) {
  return fmt::format("verification failed: {} of {} words differ from the pattern", bad,
                     (bytes + 3) / 4);
}

}  // namespace gpubench::bandwidth
