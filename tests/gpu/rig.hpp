#pragma once
// What a GPU test of a multi-GPU runner needs on the first g GPUs: their Context with quick
// timing (the stopping rule shortened further) and their ids.
#include <numeric>
#include <vector>

#include "gpubench/core/context.hpp"
#include "gpubench/core/system.hpp"

namespace gpubench::testing {

struct QuickRig {
  static std::vector<int> first(int g) {
    std::vector<int> gpus(static_cast<std::size_t>(g));
    std::iota(gpus.begin(), gpus.end(), 0);
    return gpus;
  }
  static const System& system() {
    static const System s = System::discover(false);
    return s;
  }
  static CommonOptions quick() {
    CommonOptions common;
    common.quick = true;
    common.min_time = 0.005;
    return common;
  }
  explicit QuickRig(int g) : gpus(first(g)), ctx(system(), gpus, quick()) {}
  std::vector<int> gpus;
  Context ctx;
};

}  // namespace gpubench::testing
