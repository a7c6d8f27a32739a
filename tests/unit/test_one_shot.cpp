// The one-shot all-reduce's host side (kernels/one_shot.cuh): blocks per call, the layout of a
// rank's words and receive buffer, and the arguments it refuses before launching anything.
#include <gtest/gtest.h>

#include <cstddef>

#include "gpubench/core/errors.hpp"
#include "gpubench/kernels/one_shot.cuh"

using namespace gpubench;

TEST(OneShot, OneBlockPer512AccessesUpTo16) {
  EXPECT_EQ(one_shot_blocks(0), 1);
  EXPECT_EQ(one_shot_blocks(1), 1);
  EXPECT_EQ(one_shot_blocks(512), 1);  // 8 KiB: a batch-1 llama-2-7b all-reduce
  EXPECT_EQ(one_shot_blocks(513), 2);
  EXPECT_EQ(one_shot_blocks(4096), 8);  // 64 KiB: batch 8
  EXPECT_EQ(one_shot_blocks(8192), 16);
  EXPECT_EQ(one_shot_blocks(16384), kOneShotMaxBlocks);  // 256 KiB: capped
  EXPECT_EQ(one_shot_blocks(1 << 30), kOneShotMaxBlocks);
}

TEST(OneShot, WordsHoldFlagsPerParityBlockAndRankThenCountsThenTheErrorWord) {
  for (int t : {2, 4, 8}) {
    EXPECT_EQ(one_shot_counter_index(t), 2 * kOneShotMaxBlocks * t) << t;
    EXPECT_EQ(one_shot_error_index(t), one_shot_counter_index(t) + kOneShotMaxBlocks) << t;
    EXPECT_EQ(one_shot_word_bytes(t),
              static_cast<std::size_t>(one_shot_error_index(t) + 1) * sizeof(unsigned int))
        << t;
    // Two sets (parities) of t slots.
    EXPECT_EQ(one_shot_recv_bytes(t, 1024), static_cast<std::size_t>(2 * t) * 1024) << t;
  }
}

TEST(OneShot, RefusesBadRanksAndOversizedCallsBeforeLaunching) {
  alignas(16) unsigned short data[16] = {};
  OneShotPeers p;
  p.size = 0;  // no ranks
  EXPECT_THROW(one_shot_all_reduce(data, 8, p, ActDtype::BF16, nullptr), GpuError);
  p.size = kOneShotMaxRanks + 1;
  EXPECT_THROW(one_shot_all_reduce(data, 8, p, ActDtype::BF16, nullptr), GpuError);
  p.size = 2;
  p.rank = 2;  // not below size
  EXPECT_THROW(one_shot_all_reduce(data, 8, p, ActDtype::BF16, nullptr), GpuError);
  p.rank = 0;
  p.slot_bytes = 8;  // 8 elements of 2 bytes need 16
  EXPECT_THROW(one_shot_all_reduce(data, 8, p, ActDtype::BF16, nullptr), GpuError);
  // Nothing to sum: nothing launched, nothing checked.
  EXPECT_NO_THROW(one_shot_all_reduce(data, 0, p, ActDtype::BF16, nullptr));
}
