#pragma once
// A one-shot all-reduce for small messages between the GPUs of one process (peer access
// between every pair): each rank's kernel writes its data into its own slot of every peer's
// receive buffer over NVLink, raises a flag in each peer, waits until every peer's flag in its
// own memory says the same call, then adds all the slots (its own data at its own rank) in fp32
// in rank order and rounds once, in place: every rank gets the same bits. One kernel of up to
// kOneShotMaxBlocks blocks, each its own slice of the data with its own flags (a block waits
// only for the same slice of its peers), no host step between the ranks, launched with PDL: it
// captures into a CUDA graph and replays, because the call count that names each call lives in
// GPU memory (one per block slot, all advanced by every call; two sets of slots, by the count's
// parity, so that a call never overwrites what a peer may still read). Every rank must make the
// same calls in the same order; a peer that never arrives ends the wait after
// kOneShotTimeoutNs with the error word set (wrong sums, no hang).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpubench/kernels/transformer.cuh"  // ActDtype

namespace gpubench {

inline constexpr int kOneShotMaxRanks = 8;
inline constexpr int kOneShotMaxBlocks = 16;
inline constexpr std::uint64_t kOneShotTimeoutNs = 10'000'000'000ull;

// One rank's view: its rank, every rank's receive buffer and flags (device pointers valid in
// this process), its own call counter and error word (its GPU's memory).
struct OneShotPeers {
  int rank = 0, size = 1;
  void* recv[kOneShotMaxRanks] = {};             // 2 x size slots of slot_bytes each
  unsigned int* flags[kOneShotMaxRanks] = {};    // [parity][block][source rank]
  unsigned int* counter = nullptr;               // calls made so far, one per block slot
  unsigned int* error = nullptr;                 // set to 1 when a wait timed out
  std::size_t slot_bytes = 0;
};

// A rank's receive buffer and its words (flags, counter, error) for `size` ranks.
std::size_t one_shot_recv_bytes(int size, std::size_t slot_bytes);
std::size_t one_shot_word_bytes(int size);
// Where the counters and the error word sit in the words (after the 2 x blocks x size flags).
inline int one_shot_counter_index(int size) { return 2 * kOneShotMaxBlocks * size; }
inline int one_shot_error_index(int size) { return one_shot_counter_index(size) + kOneShotMaxBlocks; }
// Points p.counter and p.error into this rank's own words, p.flags[p.rank] (rank and size set).
inline void use_own_words(OneShotPeers& p) {
  p.counter = p.flags[p.rank] + one_shot_counter_index(p.size);
  p.error = p.flags[p.rank] + one_shot_error_index(p.size);
}
// The blocks a call of `vecs` accesses uses: one per kOneShotThreads of them, 1..kOneShotMaxBlocks.
inline constexpr int kOneShotThreads = 512;
inline int one_shot_blocks(std::int64_t vecs) {
  const std::int64_t b = (vecs + kOneShotThreads - 1) / kOneShotThreads;
  return static_cast<int>(b < 1 ? 1 : (b > kOneShotMaxBlocks ? kOneShotMaxBlocks : b));
}

// data[i] = the sum over the ranks of their data[i], i < n, in place, on `stream`. n elements
// of 2 bytes must fit a slot. Launches nothing when n <= 0.
void one_shot_all_reduce(void* data, std::int64_t n, const OneShotPeers& peers, ActDtype dtype,
                         cudaStream_t stream);

}  // namespace gpubench
