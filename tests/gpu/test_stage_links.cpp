// The parallel layer's stage-to-stage transfers between two GPUs: activations forward and
// gradients back through the rings, over NCCL and over the copy engines, more transfers than a
// ring has buffers, each arriving intact; the digests of what was last sent and received agree,
// and a received buffer corrupted after it arrived is told apart from what was sent.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/ranks.hpp"
#include "gpubench/parallel/stage_links.hpp"

using namespace gpubench;
using namespace gpubench::parallel;

namespace {

constexpr std::size_t kBytes = std::size_t{1} << 20;
constexpr int kTransfers = 2 * StageLinks::kRing + 1;

unsigned char value_of(Way way, int k) {
  return static_cast<unsigned char>((way == Way::Forward ? 17 : 101) + 3 * k);
}

// The sending stage (0 forward, 1 backward) sends kTransfers buffers of value_of(way, k); the
// other takes each and counts those that differ.
int exchange(StageLinks& links, Rank& self, Way way) {
  const int from = way == Way::Forward ? 0 : 1;
  const cudaStream_t cs = self.stream->get();
  DeviceBuffer got(self.device, kBytes);
  std::vector<unsigned char> host(kBytes);
  int wrong = 0;
  for (int k = 0; k < kTransfers; ++k) {
    if (self.rank == from) {
      const int slot = links.claim(way, cs);
      GPB_CUDA_CHECK(cudaMemsetAsync(links.send_buffer(way, slot), value_of(way, k), kBytes, cs));
      links.post_send(way, slot, cs, TransferMarks{});
    } else {
      const int slot = links.post_recv(way, TransferMarks{});
      links.take(way, slot, got.get(), cs, TransferMarks{});
      GPB_CUDA_CHECK(cudaMemcpyAsync(host.data(), got.get(), kBytes, cudaMemcpyDeviceToHost, cs));
      GPB_CUDA_CHECK(cudaStreamSynchronize(cs));
      for (unsigned char c : host)
        if (c != value_of(way, k)) {
          ++wrong;
          break;
        }
    }
    links.join(cs);
  }
  GPB_CUDA_CHECK(cudaStreamSynchronize(cs));
  return wrong;
}

struct Round {
  int wrong = 0;
  double sent_f = 0, got_f = 0, sent_b = 0, got_b = 0;
};

}  // namespace

TEST(StageLinks, TransfersArriveIntactBothWays) {
  if (visible_device_count() < 2) GTEST_SKIP() << "needs 2 or more GPUs";
  RankGroup group({0, 1});
  const bool ce_ok = CopyEngineTable::usable(group);
  CopyEngineTable table(2);
  // Per transport (NCCL, copy engines) and rank; then the corrupted arrival's digests.
  std::array<std::array<Round, 2>, 2> rounds{};
  std::array<double, 2> corrupted{};
  group.run([&](Rank& self) {
    StageEdges edges(group, self.rank, false, 0);
    const int other = 1 - self.rank;
    StageLinks links(edges, self.rank, other, other, self.device, kBytes, ActDtype::BF16,
                     ce_ok ? &table : nullptr, group);
    for (int ce = 0; ce < 2; ++ce) {
      if (ce == 1 && !ce_ok) continue;
      group.barrier();
      links.restart();
      links.set_copy_engines(ce == 1);
      Round& r = rounds[static_cast<std::size_t>(ce)][static_cast<std::size_t>(self.rank)];
      r.wrong = exchange(links, self, Way::Forward) + exchange(links, self, Way::Backward);
      group.barrier();
      r.sent_f = links.last_digest(Way::Forward, true);
      r.got_f = links.last_digest(Way::Forward, false);
      r.sent_b = links.last_digest(Way::Backward, true);
      r.got_b = links.last_digest(Way::Backward, false);
    }
    // One byte of the last activations stage 1 received, changed after they arrived.
    group.barrier();
    if (self.rank == 1) {
      auto* last = static_cast<unsigned char*>(
          links.recv_buffer(Way::Forward, (kTransfers - 1) % StageLinks::kRing));
      GPB_CUDA_CHECK(cudaMemset(last + 12345, 0xee, 1));
      GPB_CUDA_CHECK(cudaDeviceSynchronize());
    }
    corrupted[static_cast<std::size_t>(self.rank)] =
        links.last_digest(Way::Forward, self.rank == 0);
    group.barrier();
  });
  for (int ce = 0; ce < (ce_ok ? 2 : 1); ++ce) {
    const auto& r = rounds[static_cast<std::size_t>(ce)];
    const char* what = ce == 1 ? "copy engines" : "nccl";
    EXPECT_EQ(r[0].wrong + r[1].wrong, 0) << what;
    EXPECT_GE(r[0].sent_f, 0.0) << what;
    EXPECT_EQ(r[0].sent_f, r[1].got_f) << what;
    EXPECT_EQ(r[1].sent_b, r[0].got_b) << what;
    EXPECT_NE(r[0].sent_f, r[0].sent_b) << what;  // the two ways carried different data
    EXPECT_EQ(r[0].got_f, -1.0) << what;          // stage 0 receives no activations
  }
  EXPECT_NE(corrupted[0], corrupted[1]);
  if (!ce_ok) GTEST_SKIP() << "no peer access between the GPUs: the copy engines untested";
}
