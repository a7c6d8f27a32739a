// The watchdog: quiet while progress is marked, and a stuck run ended with one line on stderr
// and the exit code it was given.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "gpubench/core/watchdog.hpp"

using namespace gpubench;

TEST(Watchdog, ProgressMarksResetTheClock) {
  note_progress();
  EXPECT_LT(seconds_since_progress(), 0.5);
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  EXPECT_GE(seconds_since_progress(), 0.1);
  note_progress();
  EXPECT_LT(seconds_since_progress(), 0.1);
}

TEST(Watchdog, QuietWhileProgressIsMarked) {
  {
    Watchdog w("test", 0.4);
    for (int i = 0; i < 12; ++i) {  // 0.6 s in all, a mark every 50 ms
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      note_progress();
    }
  }
  SUCCEED();  // still here: the watchdog stopped with its owner
}

TEST(WatchdogDeathTest, EndsAStuckRunWithOneLine) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Watchdog w("stuck", 0.2, 1);
        std::this_thread::sleep_for(std::chrono::seconds(10));
      },
      ::testing::ExitedWithCode(1),
      "gpubench: stuck: no progress for 0.2 s: a rank is stuck .*stopping without a report");
}
