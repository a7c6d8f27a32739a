// What the bandwidth parts share on the GPUs: a lane of streams and events per GPU, the fork/join
// of concurrent transfers, peer access, and the up-front check that every buffer fits.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <thread>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/modules/bandwidth/bandwidth.hpp"

namespace gpubench::bandwidth {

Lane::Lane(int dev)
    : device(dev),
      main(dev),
      side(dev),
      main_signal(dev, /*timing=*/false),
      side_signal(dev, /*timing=*/false),
      scratch(dev, 2 * sizeof(double)) {}

Lanes::Lanes(const std::vector<int>& devices) {
  for (int d : devices) lanes_.push_back(std::make_unique<Lane>(d));
}

Lane& Lanes::of(int device) {
  for (auto& l : lanes_)
    if (l->device == device) return *l;
  throw std::logic_error(fmt::format("bandwidth: GPU {} has no lane", device));
}

void run_legs(int primary_device, cudaStream_t primary, const Event& primary_signal,
              const std::vector<Leg>& legs, bool host_threads) {
  {
    DeviceGuard guard(primary_device);
    GPB_CUDA_CHECK(cudaEventRecord(primary_signal, primary));
  }
  for (const Leg& leg : legs) {
    if (leg.stream == primary) continue;
    DeviceGuard guard(leg.device);
    GPB_CUDA_CHECK(cudaStreamWaitEvent(leg.stream, primary_signal, 0));
  }
  if (host_threads) {
    std::vector<std::thread> threads;
    const ThreadJoiner joiner{threads};
    std::vector<std::exception_ptr> errors(legs.size());
    for (std::size_t i = 0; i < legs.size(); ++i) {
      threads.emplace_back([&legs, &errors, i] {
        try {
          DeviceGuard guard(legs[i].device);
          legs[i].work(legs[i].stream);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    }
    joiner.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  } else {
    for (const Leg& leg : legs) {
      DeviceGuard guard(leg.device);
      leg.work(leg.stream);
    }
  }
  for (const Leg& leg : legs) {
    if (leg.stream == primary) continue;
    {
      DeviceGuard guard(leg.device);
      GPB_CUDA_CHECK(cudaEventRecord(*leg.signal, leg.stream));
    }
    DeviceGuard guard(primary_device);
    GPB_CUDA_CHECK(cudaStreamWaitEvent(primary, *leg.signal, 0));
  }
}

// ---------------------------------------------------------------------------------------------
// Memory check

namespace {

struct Need {
  std::uint64_t bytes = 0;
  std::string option, what;
};

std::uint64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0
             ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page)
             : 0;
}

}  // namespace

void check_memory_fits(Context& ctx, const Settings& s) {
  const auto n = static_cast<std::uint64_t>(ctx.gpus().size());
  const std::uint64_t sweep_max = s.sweep_sizes.empty() ? 0 : s.sweep_sizes.back();
  // Per GPU, the largest set of buffers any selected part holds at once.
  std::vector<Need> device_needs;
  if (s.has(Part::Hbm))
    device_needs.push_back(
        {3 * s.hbm_bytes, "--hbm-size", fmt::format("3 arrays of {}", format_bytes(s.hbm_bytes))});
  if (s.has(Part::Host))
    device_needs.push_back({2 * s.host_bytes, "--host-size",
                            fmt::format("2 buffers of {}", format_bytes(s.host_bytes))});
  if (s.has(Part::P2p) && n >= 2) {
    const std::uint64_t buffers = n >= 3 ? n + 1 : 2;  // all-to-one adds one per other GPU
    device_needs.push_back({buffers * s.p2p_bytes, "--p2p-size",
                            fmt::format("{} buffers of {}", buffers, format_bytes(s.p2p_bytes))});
  }
  if (s.has(Part::Sweep))
    device_needs.push_back(
        {2 * sweep_max, "--sweep-sizes", fmt::format("2 buffers of {}", format_bytes(sweep_max))});
  // Room for the context, the L2 flush buffer and the small workspaces.
  constexpr std::uint64_t kReserve = 512 * kMiB;
  for (int gpu : ctx.gpus()) {
    std::size_t free_bytes = 0, total_bytes = 0;
    {
      DeviceGuard guard(gpu);
      GPB_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    }
    for (const Need& need : device_needs) {
      if (need.bytes + kReserve > free_bytes)
        throw InputError(fmt::format("{}: {} need {} on GPU {}, which has {} free", need.option,
                                     need.what, format_bytes(need.bytes), gpu,
                                     format_bytes(free_bytes)));
    }
  }

  // Pinned host memory: keep it under half of the machine's memory.
  std::vector<Need> host_needs;
  if (s.has(Part::Host)) {
    const std::uint64_t buffers = n >= 2 ? 2 * n : 2;  // all GPUs at once, both directions
    host_needs.push_back({buffers * s.host_bytes + 2 * s.pageable_bytes, "--host-size",
                          fmt::format("{} pinned buffers of {} and 2 pageable of {}", buffers,
                                      format_bytes(s.host_bytes), format_bytes(s.pageable_bytes))});
  }
  if (s.has(Part::Sweep))
    host_needs.push_back({sweep_max, "--sweep-sizes",
                          fmt::format("a pinned buffer of {}", format_bytes(sweep_max))});
  const std::uint64_t host = host_memory_bytes();
  for (const Need& need : host_needs) {
    if (host > 0 && need.bytes > host / 2)
      throw InputError(fmt::format("{}: {} need {} of host memory, more than half of the {} here",
                                   need.option, need.what, format_bytes(need.bytes),
                                   format_bytes(host)));
  }
}

}  // namespace gpubench::bandwidth
