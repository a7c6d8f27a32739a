// The progress line: its text (case i of N, elapsed, what is left) and, off a terminal (as under
// ctest), one log line per case through the log, with the module's count.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <sstream>
#include <string>

#include "gpubench/core/progress.hpp"

using namespace gpubench;

TEST(Progress, Describe) {
  EXPECT_EQ(progress::describe(1, 96, 0.2), "1/96, 0:00");  // nothing done: no estimate yet
  // Case 12 starts 41 s in with 11 done: 41 / 11 x 85 = 316.8 s left.
  EXPECT_EQ(progress::describe(12, 96, 41), "12/96, 0:41, about 5:17 left");
  EXPECT_EQ(progress::describe(2, 2, 3725), "2/2, 1:02:05, about 1:02:05 left");
  EXPECT_EQ(progress::describe(5, 0, 61), "5, 1:01");  // total unknown: the count alone
}

TEST(Progress, OneLogLinePerCaseOffATerminal) {
  std::ostringstream out;
  const auto before = spdlog::default_logger();
  auto logger = std::make_shared<spdlog::logger>(
      "progress_test", std::make_shared<spdlog::sinks::ostream_sink_st>(out));
  logger->set_pattern("%v");
  logger->set_level(spdlog::level::info);
  spdlog::set_default_logger(logger);
  progress::begin("allreduce");
  progress::expect(3);
  progress::next("all_reduce 8 B fp32 sum");
  progress::next("all_reduce 16 B fp32 sum");
  progress::next("all_reduce 32 B fp32 sum");
  progress::next("one more than expected");  // the total grows with the count
  progress::end();
  // Below info (MPI ranks other than 0): nothing.
  logger->set_level(spdlog::level::warn);
  progress::begin("tp");
  progress::next("t=2 prefill batch 1 prompt 512");
  spdlog::set_default_logger(before);

  const std::string text = out.str();
  EXPECT_NE(text.find("allreduce [1/3, 0:00] all_reduce 8 B fp32 sum\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("allreduce [2/3, 0:00, about 0:00 left] all_reduce 16 B fp32 sum"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("allreduce [4/4, 0:00, about 0:00 left] one more than expected"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("tp ["), std::string::npos) << text;
}
