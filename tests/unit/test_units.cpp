// Sizes, byte formatting and GPU lists.
#include <gtest/gtest.h>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"

using namespace gpubench;

TEST(ParseSize, PlainAndBinarySuffixes) {
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_EQ(parse_size("4K"), 4096u);
  EXPECT_EQ(parse_size("4k"), 4096u);
  EXPECT_EQ(parse_size("64M"), 64ull << 20);
  EXPECT_EQ(parse_size("2G"), 2ull << 30);
  EXPECT_EQ(parse_size("1T"), 1ull << 40);
  EXPECT_EQ(parse_size("1KiB"), 1024u);
  EXPECT_EQ(parse_size("3 MiB"), 3ull << 20);
  EXPECT_EQ(parse_size("1.5GiB"), 3ull << 29);
  EXPECT_EQ(parse_size(" 8B "), 8u);
}

TEST(ParseSize, DecimalSuffixes) {
  EXPECT_EQ(parse_size("1kB"), 1000u);
  EXPECT_EQ(parse_size("100MB"), 100'000'000u);
  EXPECT_EQ(parse_size("2GB"), 2'000'000'000u);
}

TEST(ParseSize, RejectsBadInput) {
  for (const char* bad :
       {"", "0", "0K", "-1", "-4M", "abc", "12Q", "1.2.3M", "0.5", "1e3", "M", "4 MX"})
    EXPECT_THROW(parse_size(bad), InputError) << bad;
  EXPECT_THROW(parse_size("99999999999T"), InputError);
}

TEST(ParseSize, Lists) {
  const auto v = parse_size_list("1M, 16M,256M");
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[2], 256ull << 20);
  EXPECT_THROW(parse_size_list("1M,,2M"), InputError);
}

TEST(FormatBytes, BinaryUnits) {
  EXPECT_EQ(format_bytes(100), "100 B");
  EXPECT_EQ(format_bytes(1024), "1 KiB");
  EXPECT_EQ(format_bytes(64ull << 20), "64 MiB");
  EXPECT_EQ(format_bytes(3ull << 29), "1.50 GiB");
  EXPECT_EQ(format_bytes_short(1ull << 20), "1M");
  EXPECT_EQ(format_bytes_short(2ull << 30), "2G");
  EXPECT_EQ(format_bytes_short(512), "512");
}

TEST(GpuList, AllListsRangesAndErrors) {
  EXPECT_EQ(parse_gpu_list("all", 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(parse_gpu_list("ALL", 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(parse_gpu_list("2,0", 4), (std::vector<int>{2, 0}));
  EXPECT_EQ(parse_gpu_list("1-3", 4), (std::vector<int>{1, 2, 3}));
  EXPECT_THROW(parse_gpu_list("4", 4), InputError);
  EXPECT_THROW(parse_gpu_list("0,0", 4), InputError);
  EXPECT_THROW(parse_gpu_list("0-1,1", 4), InputError);
  EXPECT_THROW(parse_gpu_list("-1", 4), InputError);
  EXPECT_THROW(parse_gpu_list("x", 4), InputError);
  EXPECT_THROW(parse_gpu_list("3-1", 4), InputError);
  EXPECT_THROW(parse_gpu_list("", 4), InputError);
  EXPECT_TRUE(parse_gpu_list("all", 0).empty());
}

TEST(Rates, FromBytesAndSeconds) {
  EXPECT_DOUBLE_EQ(GBps(4e9, 2.0), 2.0);
  EXPECT_DOUBLE_EQ(TFLOPs(2e12, 0.5), 4.0);
}
