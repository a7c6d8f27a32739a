#pragma once
// What advise's unit tests share: llama-2-7b with a short generation, its plans, and a relative
// comparison for hand-computed figures.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "gpubench/modules/advise/advise.hpp"

namespace gpubench::testing {

inline constexpr std::uint64_t kGiB = 1ull << 30;

// llama-2-7b (hidden 4096, 32 layers, bf16) with a short generation: prompt 16, 5 tokens.
inline advise::Settings small_settings() {
  advise::Settings s = advise::resolve_settings(advise::Options{}, false);
  s.prompt = 16;
  s.output_len = 5;
  return s;
}

// A plan with stages of equal layers, for compute capability 9 and 80 GiB a GPU.
inline advise::Plan plan_of(const advise::Settings& s, const advise::Layout& l, advise::Workload w,
                            std::int64_t batch, bool overlap = false) {
  return advise::make_plan(s, l, w, batch, advise::Parts{1, 0, 0}, 9, 80 * kGiB, overlap);
}

inline void expect_rel(double actual, double expected) {
  EXPECT_NEAR(actual, expected, 1e-12 * std::abs(expected));
}

}  // namespace gpubench::testing
