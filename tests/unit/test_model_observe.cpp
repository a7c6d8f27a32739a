// Host side of model/observe.hpp: stored bf16 / fp16 bits to exact doubles, the relative L2
// error the engine checks compare logits with, and the measurement options of an engine step.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "gpubench/model/observe.hpp"

using namespace gpubench;
using namespace gpubench::model;

TEST(HalfBits, Bfloat16) {
  EXPECT_EQ(half_bits_to_double(0x3F80, ActDtype::BF16), 1.0);
  EXPECT_EQ(half_bits_to_double(0xC000, ActDtype::BF16), -2.0);
  EXPECT_EQ(half_bits_to_double(0x3E80, ActDtype::BF16), 0.25);
  EXPECT_EQ(half_bits_to_double(0x0000, ActDtype::BF16), 0.0);
  EXPECT_EQ(half_bits_to_double(0x0001, ActDtype::BF16), std::ldexp(1.0, -133));  // subnormal
  EXPECT_TRUE(std::isinf(half_bits_to_double(0x7F80, ActDtype::BF16)));
  EXPECT_TRUE(std::isnan(half_bits_to_double(0x7FC0, ActDtype::BF16)));
}

TEST(HalfBits, Float16) {
  EXPECT_EQ(half_bits_to_double(0x3C00, ActDtype::F16), 1.0);
  EXPECT_EQ(half_bits_to_double(0xC000, ActDtype::F16), -2.0);
  EXPECT_EQ(half_bits_to_double(0x3555, ActDtype::F16), 0x1.554p-2);            // 0.333251953125
  EXPECT_EQ(half_bits_to_double(0x7BFF, ActDtype::F16), 65504.0);               // largest finite
  EXPECT_EQ(half_bits_to_double(0x0001, ActDtype::F16), std::ldexp(1.0, -24));  // smallest
  EXPECT_EQ(half_bits_to_double(0x0400, ActDtype::F16), std::ldexp(1.0, -14));  // smallest normal
  EXPECT_EQ(half_bits_to_double(0x8000, ActDtype::F16), 0.0);
  EXPECT_TRUE(std::signbit(half_bits_to_double(0x8000, ActDtype::F16)));
  EXPECT_EQ(half_bits_to_double(0x7C00, ActDtype::F16), std::numeric_limits<double>::infinity());
  EXPECT_EQ(half_bits_to_double(0xFC00, ActDtype::F16), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(half_bits_to_double(0x7E00, ActDtype::F16)));
}

TEST(RelativeL2, ErrorsAndRefusals) {
  EXPECT_EQ(relative_l2({1, 2, 2}, {1, 2, 2}), 0.0);
  EXPECT_DOUBLE_EQ(relative_l2({3, 0}, {3, 4}), 4.0 / 5.0);
  EXPECT_TRUE(std::isinf(relative_l2({1, 2}, {1, 2, 3})));  // sizes differ
  EXPECT_TRUE(std::isinf(relative_l2({1, NAN}, {1, 2})));
  EXPECT_TRUE(std::isinf(relative_l2({1, 2}, {INFINITY, 2})));
  EXPECT_TRUE(std::isinf(relative_l2({1, 2}, {0, 0})));  // nothing to compare against
}

// An engine step's own defaults (few long iterations) hold only where the run did not choose:
// --min-time 4 must measure a decode step for 4 s, not the default 0.2.
TEST(EngineStepOptions, TheRunsChoicesWinOverTheStepDefaults) {
  CommonOptions c;
  MeasureOptions d = engine_step_options(c);
  EXPECT_EQ(d.l2, L2Policy::Hot);
  EXPECT_EQ(d.fixed_iters, 0);
  EXPECT_EQ(d.warmup, 1);
  EXPECT_EQ(d.min_iters, 5);
  EXPECT_DOUBLE_EQ(d.min_time_s, 0.2);
  EXPECT_DOUBLE_EQ(d.max_noise, 0.01);
  EXPECT_DOUBLE_EQ(d.max_time_s, 3.0);
  c.quick = true;
  d = engine_step_options(c);
  EXPECT_EQ(d.min_iters, 3);
  EXPECT_DOUBLE_EQ(d.min_time_s, 0.05);
  EXPECT_DOUBLE_EQ(d.max_time_s, 1.0);

  c.l2 = "cold";  // the weights dwarf the L2: never flushed between steps
  c.warmup = 0;
  c.min_time = 4;
  c.max_noise = 0.2;  // percent
  c.max_time = 6;
  d = engine_step_options(c);
  EXPECT_EQ(d.l2, L2Policy::Hot);
  EXPECT_EQ(d.warmup, 0);
  EXPECT_DOUBLE_EQ(d.min_time_s, 4.0);
  EXPECT_DOUBLE_EQ(d.max_noise, 0.002);
  EXPECT_DOUBLE_EQ(d.max_time_s, 6.0);

  c.iters = 7;  // a fixed count: no noise rule, the run's warmup
  d = engine_step_options(c);
  EXPECT_EQ(d.fixed_iters, 7);
  EXPECT_EQ(d.warmup, 0);
}
