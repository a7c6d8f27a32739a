// stress's link load (see loads.hpp): copies over every link of one GPU with the copy engines,
// each arrival checked against the pattern it was sent with.
#include <fmt/format.h>

#include <cstring>

#include "gpubench/core/errors.hpp"
#include "gpubench/kernels/memory.cuh"
#include "gpubench/modules/stress/loads.hpp"

namespace gpubench::stress {

namespace {

constexpr std::size_t kBytes = 64u << 20;  // each copy: long enough to hold a link at its rate

// A new seed per round and link, so a copy that did not happen shows as wrong data.
std::uint64_t seed_of(std::uint64_t round, int src, int dst) {
  return mix64(round * 1315423911u + static_cast<std::uint64_t>(src + 2) * 131 +
               static_cast<std::uint64_t>(dst + 2));
}

struct Peer {
  int gpu;
  Stream stream;        // on the peer: its check runs there
  DeviceBuffer buffer;  // on the peer: what arrives
  DeviceBuffer tally;
  LinkOutcome out;
  double seconds = 0;
};

}  // namespace

struct LinkLoad::Impl {
  int gpu;
  std::pair<int, int> fault;
  Stream stream;
  DeviceBuffer send, receive, tally;
  PinnedBuffer host_send, host_receive;  // mapped: checked in place by the GPU
  Event start, stop;
  std::vector<std::unique_ptr<Peer>> peers;
  LinkOutcome to_gpu, to_host;
  double to_gpu_s = 0, to_host_s = 0;
  std::uint64_t round = 0;

  Impl(int g, const std::vector<int>& peer_gpus, std::pair<int, int> f)
      : gpu(g),
        fault(f),
        stream(g),
        send(g, kBytes),
        receive(g, kBytes),
        tally(g, sizeof(unsigned long long)),
        host_send(kBytes, true),
        host_receive(kBytes, true),
        start(g),
        stop(g) {
    to_gpu = {-1, g, 0, kBytes, 0, 0, {}};
    to_host = {g, -1, 0, kBytes, 0, 0, {}};
    for (int p : peer_gpus) {
      auto peer = std::make_unique<Peer>(Peer{p, Stream(p), DeviceBuffer(p, kBytes),
                                              DeviceBuffer(p, sizeof(unsigned long long)),
                                              LinkOutcome{g, p, 0, kBytes, 0, 0, {}}});
      peers.push_back(std::move(peer));
    }
  }

  // Copies `src` to `dst` on `stream`, timed; flips a byte of the arrival when the test hook
  // names this link (once).
  double copy(void* dst, const void* src, const LinkOutcome& link, bool dst_on_host) {
    start.record(stream);
    GPB_CUDA_CHECK(cudaMemcpyAsync(dst, src, kBytes, cudaMemcpyDefault, stream));
    stop.record(stream);
    stream.synchronize();
    if (fault.first == link.src && fault.second == link.dst) {
      fault = {-2, -2};
      auto* at = static_cast<unsigned char*>(dst) + kBytes / 2 + 3;
      if (dst_on_host) {
        *at ^= 0x10;
      } else {
        unsigned char b = 0;
        GPB_CUDA_CHECK(cudaMemcpy(&b, at, 1, cudaMemcpyDeviceToHost));
        b ^= 0x10;
        GPB_CUDA_CHECK(cudaMemcpy(at, &b, 1, cudaMemcpyHostToDevice));
        // From pageable memory cudaMemcpy may return before the byte lands; the check reads
        // it on another GPU's stream. Either GPU may have run the copy.
        GPB_CUDA_CHECK(cudaDeviceSynchronize());
        DeviceGuard on_dst(link.dst);
        GPB_CUDA_CHECK(cudaDeviceSynchronize());
      }
    }
    return stop.seconds_since(start);
  }

  // Words of `buf` (readable from the current device) not matching the pattern of `seed`.
  static std::uint64_t wrong_words(const void* buf, std::uint64_t seed, const DeviceBuffer& tally,
                                   const Stream& on) {
    GPB_CUDA_CHECK(cudaMemsetAsync(tally.get(), 0, sizeof(unsigned long long), on));
    launch_pattern_check(buf, kBytes, seed, tally.as<unsigned long long>(), on);
    unsigned long long got = 0;
    GPB_CUDA_CHECK(cudaMemcpyAsync(&got, tally.get(), sizeof got, cudaMemcpyDeviceToHost, on));
    on.synchronize();
    return got;
  }

  void one_round(Progress& progress);
};

void LinkLoad::Impl::one_round(Progress& progress) {
  Progress::Totals t;
  const auto account = [&](LinkOutcome& link, double& total_s, double seconds,
                           std::uint64_t wrong) {
    ++link.copies;
    link.wrong_words += wrong;
    total_s += seconds;
    link.GBps = static_cast<double>(link.copies * kBytes) / total_s / 1e9;
    t.link_bytes += kBytes;
    t.link_s += seconds;
    t.errors += wrong;
  };
  // host -> GPU: the pattern written into pinned memory by this GPU, then copied back in.
  std::uint64_t seed = seed_of(round, -1, gpu);
  launch_pattern_fill(host_send.device_ptr(), kBytes, seed, stream);
  stream.synchronize();
  double s = copy(receive.get(), host_send.get(), to_gpu, false);
  account(to_gpu, to_gpu_s, s, wrong_words(receive.get(), seed, tally, stream));
  // GPU -> host, checked by this GPU reading the pinned memory in place.
  seed = seed_of(round, gpu, -1);
  launch_pattern_fill(send.get(), kBytes, seed, stream);
  s = copy(host_receive.get(), send.get(), to_host, true);
  account(to_host, to_host_s, s, wrong_words(host_receive.device_ptr(), seed, tally, stream));
  // GPU -> each peer, checked on the peer. An error there (the peer's GPU failing, say) ends
  // that link's load and is the link's; this GPU's own errors end its load.
  for (auto& p : peers) {
    if (!p->out.error.empty()) continue;
    seed = seed_of(round, gpu, p->gpu);
    launch_pattern_fill(send.get(), kBytes, seed, stream);
    stream.synchronize();
    try {
      s = copy(p->buffer.get(), send.get(), p->out, false);
      std::uint64_t wrong = 0;
      {
        DeviceGuard on_peer(p->gpu);
        wrong = wrong_words(p->buffer.get(), seed, p->tally, p->stream);
      }
      account(p->out, p->seconds, s, wrong);
    } catch (const GpuError& e) {
      p->out.error = e.what();
    }
  }
  ++round;
  progress.add(t);
}

LinkLoad::LinkLoad(int gpu, const std::vector<int>& peers, std::pair<int, int> fault)
    : impl_(std::make_unique<Impl>(gpu, peers, fault)) {}

LinkLoad::~LinkLoad() = default;

void LinkLoad::run(const StopFn& stop, Progress& progress) {
  DeviceGuard guard(impl_->gpu);
  while (!stop()) impl_->one_round(progress);
}

std::vector<LinkOutcome> LinkLoad::outcomes() const {
  std::vector<LinkOutcome> out{impl_->to_gpu, impl_->to_host};
  for (const auto& p : impl_->peers) out.push_back(p->out);
  return out;
}

}  // namespace gpubench::stress
