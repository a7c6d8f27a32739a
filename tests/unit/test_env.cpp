// env_is: an environment switch matches only its exact value.
#include <gtest/gtest.h>

#include <cstdlib>

#include "gpubench/core/env.hpp"

using gpubench::env_is;

TEST(Env, IsExactValueOnly) {
  const char* name = "GPUBENCH_TEST_ENV_IS";
  ::unsetenv(name);
  EXPECT_FALSE(env_is(name, "1"));
  ::setenv(name, "1", 1);
  EXPECT_TRUE(env_is(name, "1"));
  EXPECT_FALSE(env_is(name, "10"));
  ::setenv(name, "narrow", 1);
  EXPECT_TRUE(env_is(name, "narrow"));
  EXPECT_FALSE(env_is(name, "narro"));
  EXPECT_FALSE(env_is(name, "Narrow"));
  ::setenv(name, "", 1);
  EXPECT_FALSE(env_is(name, "1"));
  EXPECT_TRUE(env_is(name, ""));
  ::unsetenv(name);
}
