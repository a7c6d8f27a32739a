// Statistics over samples: percentiles, spread, noise.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <random>

#include "gpubench/core/stats.hpp"

using namespace gpubench;

TEST(Stats, KnownSample) {
  const Stats s = compute_stats({5, 1, 4, 2, 3});
  EXPECT_EQ(s.n, 5u);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 5);
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.mean, 3);
  EXPECT_NEAR(s.stdev, std::sqrt(2.5), 1e-12);
  EXPECT_NEAR(s.cv, std::sqrt(2.5) / 3, 1e-12);
  EXPECT_DOUBLE_EQ(s.p5, 1.2);
  EXPECT_DOUBLE_EQ(s.p95, 4.8);
}

TEST(Stats, EvenCountMedianInterpolates) {
  EXPECT_DOUBLE_EQ(compute_stats({1, 2, 3, 4}).median, 2.5);
}

TEST(Stats, SingleSample) {
  const Stats s = compute_stats({7});
  EXPECT_DOUBLE_EQ(s.median, 7);
  EXPECT_DOUBLE_EQ(s.p99, 7);
  EXPECT_DOUBLE_EQ(s.stdev, 0);
}

TEST(Stats, EmptyThrows) {
  EXPECT_THROW(compute_stats({}), std::invalid_argument);
}

TEST(Stats, PercentilesOrdered) {
  std::mt19937 rng(42);
  std::lognormal_distribution<double> d(0, 0.5);
  std::vector<double> v(1001);
  for (auto& x : v) x = d(rng);
  const Stats s = compute_stats(v);
  EXPECT_LE(s.min, s.p5);
  EXPECT_LE(s.p5, s.median);
  EXPECT_LE(s.median, s.p95);
  EXPECT_LE(s.p95, s.p99);
  EXPECT_LE(s.p99, s.max);
}

TEST(Stats, RelativeNoise) {
  EXPECT_DOUBLE_EQ(relative_noise({}), 0);
  EXPECT_DOUBLE_EQ(relative_noise({1}), 0);
  EXPECT_DOUBLE_EQ(relative_noise({2, 2, 2}), 0);
  EXPECT_NEAR(relative_noise({1, 3}), std::sqrt(2.0) / 2.0, 1e-12);
}

TEST(Stats, JsonScalesTimesNotCv) {
  const Stats s = compute_stats({1e-6, 3e-6});
  const auto j = stats_to_json(s, 1e6, "us");
  EXPECT_EQ(j["unit"], "us");
  EXPECT_NEAR(j["median"].get<double>(), 2.0, 1e-9);
  EXPECT_NEAR(j["cv"].get<double>(), s.cv, 1e-12);
  EXPECT_EQ(j["n"].get<int>(), 2);
}
