// Main for GPU tests: exit 77 (CTest's SKIP_RETURN_CODE) when no GPU is visible, so a machine
// without one reports these tests as skipped, never as passed.
#include <gtest/gtest.h>

#include <cstdio>

#include "gpubench/core/cuda.hpp"

int main(int argc, char** argv) {
  if (gpubench::visible_device_count() == 0) {
    std::fprintf(stderr, "skipped: %s\n", gpubench::no_gpu_reason().c_str());
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
