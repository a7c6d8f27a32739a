// Sizes, ranges, data type names, byte formatting and GPU lists.
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

// One range syntax for sizes and counts: start:stop:xF and start:stop:+S (or :S).
TEST(ParseRange, SizesAndCountsAlike) {
  EXPECT_EQ(parse_size_list("1M:8M:x2"),
            (std::vector<std::uint64_t>{1ull << 20, 2ull << 20, 4ull << 20, 8ull << 20}));
  EXPECT_EQ(parse_size_list("1M:3M:+1M"),
            (std::vector<std::uint64_t>{1ull << 20, 2ull << 20, 3ull << 20}));
  EXPECT_EQ(parse_size_list("3K:8K:x2"), (std::vector<std::uint64_t>{3072, 6144}));
  EXPECT_EQ(parse_counts("128:512:+128", "--seq-lens", 1 << 20),
            (std::vector<std::int64_t>{128, 256, 384, 512}));
  EXPECT_EQ(parse_counts("1:1:x2", "--batch-sizes", 8), (std::vector<std::int64_t>{1}));
  // The largest range of sizes stops before it overflows.
  EXPECT_EQ(parse_size_list("1G:4T:x4").size(), 7u);
  for (const char* bad :
       {"1M:8M", "8M:1M:x2", "1M:8M:x1", "1M:8M:+0", "1M:8M:x", "1M:1G:+1", "1M:8M:y2", "1M::x2"})
    EXPECT_THROW(parse_size_list(bad), InputError) << bad;
  try {
    parse_counts("1:5000:+1", "--seq-lens", 1 << 20);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "--seq-lens: '1:5000:+1' gives more than 1024 values");
  }
}

TEST(DtypeNames, CanonicalSpellingsAndAliases) {
  const std::pair<const char*, const char*> cases[] = {
      {"bf16", "bf16"},         {"BFloat16", "bf16"},
      {"half", "fp16"},         {"float16", "fp16"},
      {"float", "fp32"},        {"double", "fp64"},
      {"fp8", "fp8_e4m3"},      {"fp8e4m3", "fp8_e4m3"},
      {"f8e4m3", "fp8_e4m3"},   {"e5m2", "fp8_e5m2"},
      {"fp8_e5m2", "fp8_e5m2"}, {" tf32 ", "tf32"},
      {"char", "int8"},         {"int", "int32"},
      {"uint64", "uint64"},     {"float8_e4m3fn", "fp8_e4m3"},
      {"Mystery", "mystery"},
  };
  for (const auto& [text, canonical] : cases) EXPECT_EQ(canonical_dtype(text), canonical) << text;
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
  // Not known yet (checked before discovery): syntax and repeats only.
  EXPECT_EQ(parse_gpu_list("7,2-3", -1), (std::vector<int>{7, 2, 3}));
  EXPECT_TRUE(parse_gpu_list("all", -1).empty());
  EXPECT_THROW(parse_gpu_list("0,0", -1), InputError);
  EXPECT_THROW(parse_gpu_list("0-100000", -1), InputError);
}

TEST(Rates, FromBytesAndSeconds) {
  EXPECT_DOUBLE_EQ(GBps(4e9, 2.0), 2.0);
  EXPECT_DOUBLE_EQ(TFLOPs(2e12, 0.5), 4.0);
}
