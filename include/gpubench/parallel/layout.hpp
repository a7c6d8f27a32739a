#pragma once
// Parallel layouts of data, tensor and pipeline parallelism over a group of GPUs, shared by pp's
// layouts and advise: what a layout is, which layouts a model allows, how a pipeline's layers
// are split into stages, where a rank sits in a layout and the communicators it joins there.
#include <cstdint>
#include <string>
#include <vector>

#include "gpubench/core/nccl.hpp"
#include "gpubench/core/ranks.hpp"
#include "gpubench/model/presets.hpp"

namespace gpubench::parallel {

struct Layout {
  int dp = 1, tp = 1, pp = 1;
  int gpus() const { return dp * tp * pp; }
  std::string name() const;  // "dp=4", "tp=2xdp=2", "tp=2xpp=2": non-1 factors, tp, pp, dp order
  bool operator==(const Layout& o) const { return dp == o.dp && tp == o.tp && pp == o.pp; }
};

// Every layout of exactly `gpus` GPUs that `m` splits evenly (tp dividing the attention heads,
// the KV heads and the intermediate size; pp at most the layers), ordered by tp, then pp
// (dp = gpus / (tp x pp)). InputError when gpus < 1.
std::vector<Layout> every_layout(int gpus, const model::ModelConfig& m);

// "dp=4,tp=2xdp=2,pp=2xdp=2,tp=2xpp=2,tp=4" (factors joined by x, layouts by commas) or "all"
// (every_layout's whose factors are powers of two). Each layout's product must be `gpus`; with
// gpus 0 (not known yet: before any GPU is looked at) only one product shared by every item, and
// "all" gives none. InputError naming --layouts on a malformed item, an unknown or repeated
// factor, a factor < 1, a product other than gpus (or than the others'), or a layout `m` does
// not split.
std::vector<Layout> parse_layouts(const std::string& text, int gpus, const model::ModelConfig& m);

// Contiguous stages over `layer_s` (one cost per decoder layer) with `first_extra_s` (the
// embedding) on stage 0 and `last_extra_s` (final norm and LM head) on the last: a split that
// minimizes the slowest stage (among equal ones, always the same: a linear-partition dynamic
// program that takes the earliest cut on ties). Returns the number of layers per stage, each at
// least 1. InputError when p < 1 or p > layers.
std::vector<int> balance_stages(const std::vector<double>& layer_s, int p, double first_extra_s,
                                double last_extra_s);

// Where rank `rank` of a layout's group sits: rank = ((replica x pp) + stage) x tp + tensor rank.
struct Place {
  int replica = 0, stage = 0, trank = 0;
  static Place of(const Layout& l, int rank);
};

// One rank's communicators in a layout: its stage's tensor-parallel group (tp > 1), its
// replica's pipeline (pp > 1: the stages of its tensor rank, stage = rank in it) and, for
// generation, the same pipeline's ring (the last stage hands each step's next tokens back to
// the first) on a communicator of its own, so that a ring transfer never queues behind the
// hidden states. Construct on every rank of the group inside group.run(): the ids are made on
// rank 0 and broadcast. max_ctas > 0 caps the pipeline communicators' CTAs. Destroyed while an
// exception unwinds, the communicators are aborted (NcclComm).
struct LayoutComms {
  LayoutComms(RankGroup& group, int rank, const Layout& l, bool ring = false, int max_ctas = 0);
  NcclComm tp, pp, ring;
};

// Room on every rank's GPU for what it is about to allocate (`need` bytes on this rank, beside
// kMemoryReserve for NCCL, the driver and fragmentation), decided before anything is allocated
// so that no rank runs out in the middle while the others wait for it. Every rank calls it
// inside group.run() and gets the same answer: "" when every rank fits, else why not (the first
// rank short of memory, what it needs, what is free).
constexpr std::uint64_t kMemoryReserve = 1ull << 30;
std::string agreed_memory_check(RankGroup& group, int rank, std::uint64_t need);

}  // namespace gpubench::parallel
