// The watchdog: quiet while progress is marked; a stuck run ended with one line on stderr, after
// its owner wrote the report of what finished, with the exit code the owner names.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "gpubench/core/context.hpp"
#include "gpubench/core/result.hpp"
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
        Watchdog w("stuck", 0.2);
        std::this_thread::sleep_for(std::chrono::seconds(10));
      },
      ::testing::ExitedWithCode(1),
      "gpubench: error: no progress for 0.2 s in stuck: a rank is stuck");
}

TEST(WatchdogDeathTest, OwnerWritesFirstAndNamesTheExitCode) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Watchdog w("stuck", 0.2, [](const std::string& reason) {
          std::fprintf(stderr, "report written: %s\n", reason.c_str());
          return 4;
        });
        std::this_thread::sleep_for(std::chrono::seconds(10));
      },
      ::testing::ExitedWithCode(4), "report written: no progress for 0.2 s in stuck");
}

TEST(WatchdogDeathTest, StalledContextHandsOverWhatWasPublished) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  namespace fs = std::filesystem;
  // The statement runs in a child of this process: it names the file by its parent's pid.
  const auto file_of = [](pid_t pid) {
    return fs::temp_directory_path() / ("gpubench_stalled_" + std::to_string(pid) + ".json");
  };
  fs::remove(file_of(::getpid()));
  EXPECT_EXIT(
      {
        const System system;
        Context ctx(system, {}, CommonOptions{});
        Report r;
        r.module = "unit";
        CaseResult finished;
        finished.name = "finished before the stall";
        r.add(finished);
        ctx.publish(r);
        ctx.on_stall([&](Report& stalled) {
          std::ofstream(file_of(::getppid())) << to_json(stalled).dump();
          return 7;
        });
        const auto w = ctx.watchdog("unit", 0.2);
        std::this_thread::sleep_for(std::chrono::seconds(10));
      },
      ::testing::ExitedWithCode(7), "no progress for 0.2 s in unit");
  std::ifstream f(file_of(::getpid()));
  ASSERT_TRUE(f.good());
  const Report back = report_from_json(ojson::parse(f));
  EXPECT_EQ(back.status, "failed");
  EXPECT_NE(back.error.find("no progress for 0.2 s in unit"), std::string::npos) << back.error;
  ASSERT_EQ(back.results.size(), 1u);
  EXPECT_EQ(back.results[0].name, "finished before the stall");
  ASSERT_FALSE(back.warnings.empty());
  EXPECT_NE(back.warnings.back().find("stalled"), std::string::npos);
  fs::remove(file_of(::getpid()));
}

TEST(Watchdog, LimitIsKnownToTheRanksThatWait) {
  const Watchdog w("limit", 42);
  EXPECT_EQ(stall_limit(), 42);
}
