// Data parallelism's host arithmetic: the flat parameter buffer's buckets and shards, and what
// each strategy holds on a GPU.
#include <fmt/format.h>

#include <algorithm>

#include "gpubench/core/errors.hpp"
#include "gpubench/parallel/data_parallel.hpp"

namespace gpubench::parallel {

namespace {

std::int64_t align_up(std::int64_t n, std::int64_t a) {
  return (n + a - 1) / a * a;
}

// Units grouped backwards into buckets (first and last unit each, backward order).
std::vector<std::pair<int, int>> group_units(const std::vector<std::int64_t>& unit_elems,
                                             const std::vector<int>& unit_params,
                                             std::int64_t bucket_elems) {
  std::vector<std::pair<int, int>> out;
  const int n = static_cast<int>(unit_elems.size());
  int last = n - 1;
  std::int64_t held = 0;
  for (int u = n - 1; u >= 0; --u) {
    held += unit_elems[static_cast<std::size_t>(u)];
    bool close = u == 0;
    if (bucket_elems > 0) {
      close = close || held >= bucket_elems;
    } else {
      // A decoder layer is units 2l and 2l + 1; a unit of one parameter (the LM head) alone.
      close = close || unit_params[static_cast<std::size_t>(u)] == 1 || u % 2 == 0;
    }
    if (close) {
      out.emplace_back(u, last);
      last = u - 1;
      held = 0;
    }
  }
  return out;
}

}  // namespace

const char* to_string(Strategy s) {
  switch (s) {
    case Strategy::Ddp:
      return "ddp";
    case Strategy::Zero1:
      return "zero1";
    case Strategy::Zero2:
      return "zero2";
    case Strategy::Fsdp:
      return "fsdp";
  }
  return "?";
}

std::vector<Strategy> every_strategy() {
  return {Strategy::Ddp, Strategy::Zero1, Strategy::Zero2, Strategy::Fsdp};
}

std::int64_t ParamPlan::chunk_elems(int b) const {
  return buckets.at(static_cast<std::size_t>(b)).elems / ranks;
}
std::int64_t ParamPlan::chunk_begin(int b, int r) const {
  return buckets.at(static_cast<std::size_t>(b)).begin + r * chunk_elems(b);
}
std::int64_t ParamPlan::shard_offset(int b) const {
  return buckets.at(static_cast<std::size_t>(b)).begin / ranks;
}
int ParamPlan::owner(std::int64_t e) const {
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const Bucket& k = buckets[b];
    if (e >= k.begin && e < k.begin + k.elems)
      return static_cast<int>((e - k.begin) / chunk_elems(static_cast<int>(b)));
  }
  throw InputError(fmt::format("parameter plan: element {} is outside the buffer", e));
}

ParamPlan plan_params(const std::vector<model::TrainParam>& params, std::int64_t bucket_elems,
                      int ranks) {
  if (params.empty() || ranks < 1 || bucket_elems < 0)
    throw InputError(fmt::format("parameter plan: {} parameters, {} ranks, buckets of {}",
                                 params.size(), ranks, bucket_elems));
  std::vector<std::int64_t> unit_elems;
  std::vector<int> unit_params;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const int u = params[i].unit;
    if (u < static_cast<int>(unit_elems.size()) - 1 || u > static_cast<int>(unit_elems.size()) ||
        params[i].elems() < 1)
      throw InputError(fmt::format("parameter plan: parameter {} of unit {} out of order", i, u));
    if (u == static_cast<int>(unit_elems.size())) {
      unit_elems.push_back(0);
      unit_params.push_back(0);
    }
    unit_elems.back() += align_up(params[i].elems(), kAlign);
    ++unit_params.back();
  }
  ParamPlan p;
  p.ranks = ranks;
  p.offset.assign(params.size(), 0);
  p.bucket_of_unit.assign(unit_elems.size(), 0);
  const auto groups = group_units(unit_elems, unit_params, bucket_elems);
  p.buckets.resize(groups.size());
  std::int64_t cursor = 0;
  std::size_t i = 0;  // parameters are placed in forward order: the last bucket first
  for (int b = static_cast<int>(groups.size()) - 1; b >= 0; --b) {
    Bucket& k = p.buckets[static_cast<std::size_t>(b)];
    k.first_unit = groups[static_cast<std::size_t>(b)].first;
    k.last_unit = groups[static_cast<std::size_t>(b)].second;
    k.begin = cursor;
    for (int u = k.first_unit; u <= k.last_unit; ++u)
      p.bucket_of_unit[static_cast<std::size_t>(u)] = b;
    for (; i < params.size() && params[i].unit <= k.last_unit; ++i) {
      p.offset[i] = cursor;
      cursor += align_up(params[i].elems(), kAlign);
      p.params += params[i].elems();
    }
    k.elems = align_up(cursor - k.begin, ranks * kAlign);
    cursor = k.begin + k.elems;
    p.largest = std::max(p.largest, k.elems);
  }
  p.total = cursor;
  return p;
}

nlohmann::ordered_json MemoryPlan::to_json() const {
  return {{"params", params},
          {"grads", grads},
          {"optimizer", optimizer},
          {"activations", activations},
          {"total", total()}};
}

MemoryPlan memory_plan(Strategy s, const ParamPlan& p, int elem_bytes, std::uint64_t activations) {
  const auto e = static_cast<std::uint64_t>(elem_bytes);
  const auto all = static_cast<std::uint64_t>(p.total);
  const auto shard = static_cast<std::uint64_t>(p.shard_elems());
  const auto staging = 2 * static_cast<std::uint64_t>(p.largest) * e;
  MemoryPlan m;
  m.activations = activations;
  m.optimizer = 12 * (s == Strategy::Ddp ? all : shard);
  m.params = s == Strategy::Fsdp ? shard * e + staging : all * e;
  m.grads = s == Strategy::Ddp || s == Strategy::Zero1 ? all * e : shard * e + staging;
  return m;
}

}  // namespace gpubench::parallel
