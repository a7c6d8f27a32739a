#pragma once
// Sizes, rates and lists: parsing user input (throws InputError) and formatting for reports.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gpubench {

// "4K", "64M", "2G", "1.5GiB", "100MB", "4096": K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024,
// kB/MB/GB/TB powers of 1000. Rejects 0, negatives, fractions of a byte, malformed text and
// overflow.
std::uint64_t parse_size(const std::string& text);
// "1M,64M,1G", or a range of sizes as parse_range: "1M:1G:x2", "1M:8M:+1M".
std::vector<std::uint64_t> parse_size_list(const std::string& text);
// The size given for `option` ("--hbm-size"), or `fallback` when `text` is empty; errors name
// the option ("--hbm-size: size '0' must be greater than 0").
std::uint64_t parse_size_option(const std::string& option, const std::string& text,
                                std::uint64_t fallback);  // "1M,64M,1G"

// "1 KiB", "64 MiB", "2 GiB", "1.5 GiB", "100 B": binary units, shortest exact-ish form.
std::string format_bytes(std::uint64_t bytes);
// "1K", "64M", "2G": compact labels for tables and charts.
std::string format_bytes_short(std::uint64_t bytes);

// GPU selection: "all" (every visible GPU), "0,1,3", "0-3". Rejects ids >= visible,
// repeats, negatives and malformed text. visible < 0: the GPUs are not known yet (the input is
// checked before any hardware is touched): "all" is empty, ids up to kMaxGpuId pass.
inline constexpr int kMaxGpuId = 1023;
std::vector<int> parse_gpu_list(const std::string& text, int visible);

// `text` without leading and trailing white space.
std::string trim(const std::string& text);

// Splits "a, b ,c" into {"a","b","c"} (empty items, or more than kMaxListItems, are an error).
inline constexpr std::size_t kMaxListItems = 1024;
std::vector<std::string> split_list(const std::string& text, char sep = ',');

// A range for `option`, the one syntax of every list of sizes, lengths and counts:
// "start:stop:xF" (start, start x F, ... up to stop; F a whole number >= 2) or "start:stop:+S"
// ("start:stop:S" too; start, start + S, ... up to stop). `value` reads a bound or S (a count,
// a size with its unit). At most `max_values` values; InputError naming `option` otherwise.
std::vector<std::int64_t> parse_range(const std::string& text, const std::string& option,
                                      std::size_t max_values,
                                      const std::function<std::int64_t(const std::string&)>& value);

// Counts for `option`: "128,256" or a range ("128:8192:x2", "128:1024:+128"), ascending, unique,
// each in [1, max]. Throws InputError naming `option`.
std::vector<std::int64_t> parse_counts(const std::string& text, const std::string& option,
                                       std::int64_t max);

// Data type names: the canonical spelling (fp64, fp32, tf32, fp16, bf16, fp8_e4m3, fp8_e5m2,
// int8, uint8, int32, uint32, int64, uint64) of `text` or of one of its common aliases, any case
// (double, float, half, bfloat16, fp8e4m3, f8e4m3, e4m3, fp8 for e4m3, char, int, ...: the names
// of nccl-tests, PyTorch and NumPy); `text` lowercased and trimmed when it names none, for the
// caller to refuse with what it supports.
std::string canonical_dtype(const std::string& text);

// Rates: bytes over seconds in GB/s (1e9), flops over seconds in TFLOP/s (1e12).
inline double GBps(double bytes, double seconds) {
  return bytes / seconds / 1e9;
}
inline double TFLOPs(double flops, double seconds) {
  return flops / seconds / 1e12;
}

// Report units: bytes in a GiB, and seconds as milliseconds.
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
inline double ms(double seconds) {
  return seconds * 1e3;
}

}  // namespace gpubench
