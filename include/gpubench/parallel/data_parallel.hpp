#pragma once
// Data parallelism's host arithmetic, shared by dp (which runs it) and advise (which predicts
// it): the strategies, how the parameters are laid out in one flat buffer of buckets and shards,
// and what each strategy holds on a GPU.
//   ddp    gradients all-reduced in buckets as backward produces them; every rank holds and
//          updates everything.
//   zero1  gradients reduce-scattered in the same buckets; each rank holds the optimizer state of
//          its shard (chunk `rank` of every bucket) and updates it; weights all-gathered after.
//   zero2  as zero1, and the gradients sharded too (two staging buckets).
//   fsdp   (ZeRO-3) weights sharded as well: each layer's gathered before its forward and its
//          backward, gradients reduce-scattered as zero2.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpubench/model/training.hpp"

namespace gpubench::parallel {

enum class Strategy { Ddp, Zero1, Zero2, Fsdp };
const char* to_string(Strategy s);  // "ddp", "zero1", "zero2", "fsdp"
// Every strategy, in that order.
std::vector<Strategy> every_strategy();

// ---------------------------------------------------------------------------------------------
// The flat parameter buffer

// Parameters are laid out in one flat buffer in forward order, grouped into buckets of whole
// units (half-layers, the head its own): bucket 0 holds the last units (backward produces their
// gradients first), each bucket at least the bucket size unless it ends the model; fsdp's
// buckets are a decoder layer each (its two halves) and the head. Every parameter starts on a
// multiple of kAlign elements and every bucket's length is a multiple of ranks x kAlign, so that
// rank r's shard of bucket b, [begin + r len / ranks, begin + (r + 1) len / ranks), is aligned
// and the shards of a bucket are equal.
inline constexpr std::int64_t kAlign = 128;  // elements (256 bytes of bf16)

struct Bucket {
  int first_unit = 0, last_unit = 0;  // inclusive, forward order
  std::int64_t begin = 0, elems = 0;  // in the flat buffer, padded
};

struct ParamPlan {
  int ranks = 1;
  std::vector<std::int64_t> offset;  // per parameter (TrainStage::params order)
  std::vector<Bucket> buckets;       // backward order: bucket 0 holds the head
  std::vector<int> bucket_of_unit;
  std::int64_t total = 0;    // elements of the flat buffer, padding included
  std::int64_t params = 0;   // elements that are parameters
  std::int64_t largest = 0;  // the largest bucket's elements
  std::int64_t shard_elems() const { return total / ranks; }
  // Where rank r's chunk of bucket b starts in the flat buffer, and in the rank's shard.
  std::int64_t chunk_begin(int b, int r) const;
  std::int64_t shard_offset(int b) const;
  std::int64_t chunk_elems(int b) const;
  // The rank whose shard holds flat element e.
  int owner(std::int64_t e) const;
};

// Buckets of at least bucket_elems (0: one a decoder layer, the head its own), in backward
// order. InputError when params is empty, a unit index goes backwards, ranks < 1 or
// bucket_elems < 0.
ParamPlan plan_params(const std::vector<model::TrainParam>& params, std::int64_t bucket_elems,
                      int ranks);

// ---------------------------------------------------------------------------------------------
// Memory per GPU

struct MemoryPlan {
  std::uint64_t params = 0;       // weights the model computes with (and fsdp's gather buffers)
  std::uint64_t grads = 0;        // gradients (and zero2/fsdp's staging buffers)
  std::uint64_t optimizer = 0;    // fp32 master weights, AdamW's m and v
  std::uint64_t activations = 0;  // the rest of the step: saved activations, scratch, embedding
  std::uint64_t total() const { return params + grads + optimizer + activations; }
  nlohmann::ordered_json to_json() const;
};

// What strategy s holds on each GPU for plan p (elem_bytes a weight or gradient element) with
// `activations` bytes of the rest (TrainStage::planned_bytes without parameters):
//   ddp:   weights P, gradients P, optimizer 12 P      (P: p.total elements)
//   zero1: weights P, gradients P, optimizer 12 P / N
//   zero2: weights P, gradients P / N + 2 buckets, optimizer 12 P / N
//   fsdp:  weights P / N + 2 buckets, gradients P / N + 2 buckets, optimizer 12 P / N.
MemoryPlan memory_plan(Strategy s, const ParamPlan& p, int elem_bytes, std::uint64_t activations);

}  // namespace gpubench::parallel
