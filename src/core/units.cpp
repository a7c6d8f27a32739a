// Parsing of sizes and GPU lists (user input -> InputError) and byte formatting.
#include "gpubench/core/units.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>

#include "gpubench/core/errors.hpp"

namespace gpubench {

std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Multiplier for a size suffix; 0 when unknown. Single letters and "iB" forms are binary,
// "kB/MB/GB/TB" decimal, "B" or nothing bytes.
double suffix_multiplier(const std::string& suffix_raw) {
  const std::string s = suffix_raw;
  if (s.empty() || s == "B" || s == "b") return 1;
  const std::string l = lower(s);
  static const char* letters = "kmgt";
  for (int i = 0; i < 4; ++i) {
    const char c = letters[i];
    const double bin = std::pow(1024.0, i + 1), dec = std::pow(1000.0, i + 1);
    if (l == std::string(1, c)) return bin;
    if (l == std::string(1, c) + "ib") return bin;
    if (l == std::string(1, c) + "b") return dec;
  }
  return 0;
}

}  // namespace

std::uint64_t parse_size(const std::string& text_raw) {
  const std::string text = trim(text_raw);
  if (text.empty()) throw InputError("empty size (expected e.g. 4K, 64M, 2G)");
  std::size_t pos = 0;
  while (pos < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.'))
    ++pos;
  if (text[0] == '-') throw InputError(fmt::format("size '{}' is negative", text));
  if (pos == 0)
    throw InputError(fmt::format("size '{}' is not a number (expected e.g. 4K, 64M, 2G)", text));
  const std::string number = text.substr(0, pos);
  if (std::count(number.begin(), number.end(), '.') > 1)
    throw InputError(fmt::format("size '{}' is malformed", text));
  const std::string suffix = trim(text.substr(pos));
  const double mult = suffix_multiplier(suffix);
  if (mult == 0)
    throw InputError(fmt::format("size '{}' has an unknown unit '{}' (use K, M, G, T, KiB.., kB..)",
                                 text, suffix));
  double value = 0;
  try {
    value = std::stod(number);
  } catch (...) {
    throw InputError(fmt::format("size '{}' is malformed", text));
  }
  const long double bytes = static_cast<long double>(value) * mult;
  if (bytes <= 0) throw InputError(fmt::format("size '{}' must be greater than 0", text));
  if (bytes > static_cast<long double>(std::numeric_limits<std::uint64_t>::max() / 2))
    throw InputError(fmt::format("size '{}' is too large", text));
  if (bytes != std::floor(bytes))
    throw InputError(fmt::format("size '{}' is not a whole number of bytes", text));
  return static_cast<std::uint64_t>(bytes);
}

std::uint64_t parse_size_option(const std::string& option, const std::string& text,
                                std::uint64_t fallback) {
  if (text.empty()) return fallback;
  try {
    return parse_size(text);
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", option, e.what()));
  }
}

std::vector<std::uint64_t> parse_size_list(const std::string& text) {
  std::vector<std::uint64_t> out;
  if (text.find(':') != std::string::npos) {
    for (std::int64_t v : parse_range(text, "sizes", kMaxListItems, [](const std::string& s) {
           return static_cast<std::int64_t>(parse_size(s));
         }))
      out.push_back(static_cast<std::uint64_t>(v));
    return out;
  }
  for (const auto& item : split_list(text)) out.push_back(parse_size(item));
  return out;
}

std::string canonical_dtype(const std::string& text) {
  static const std::pair<const char*, const char*> kAliases[] = {
      {"double", "fp64"},
      {"float64", "fp64"},
      {"f64", "fp64"},
      {"float", "fp32"},
      {"float32", "fp32"},
      {"f32", "fp32"},
      {"half", "fp16"},
      {"float16", "fp16"},
      {"f16", "fp16"},
      {"bfloat16", "bf16"},
      {"fp8", "fp8_e4m3"},
      {"fp8e4m3", "fp8_e4m3"},
      {"f8e4m3", "fp8_e4m3"},
      {"e4m3", "fp8_e4m3"},
      {"float8_e4m3fn", "fp8_e4m3"},
      {"fp8e5m2", "fp8_e5m2"},
      {"f8e5m2", "fp8_e5m2"},
      {"e5m2", "fp8_e5m2"},
      {"float8_e5m2", "fp8_e5m2"},
      {"char", "int8"},
      {"i8", "int8"},
      {"u8", "uint8"},
      {"int", "int32"},
      {"i32", "int32"},
      {"u32", "uint32"},
      {"i64", "int64"},
      {"u64", "uint64"},
      {"tensorfloat32", "tf32"},
  };
  const std::string key = lower(trim(text));
  for (const auto& [alias, canonical] : kAliases)
    if (key == alias) return canonical;
  return key;
}

namespace {
// `bytes` scaled to the largest power of 1024 (up to TiB) that keeps it >= 1; the power in `u`.
double scale_binary(std::uint64_t bytes, int& u) {
  double v = static_cast<double>(bytes);
  u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return v;
}
}  // namespace

std::string format_bytes(std::uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  const double v = scale_binary(bytes, u);
  if (u == 0) return fmt::format("{} B", bytes);
  if (v == std::floor(v)) return fmt::format("{:.0f} {}", v, units[u]);
  return fmt::format("{:.2f} {}", v, units[u]);
}

std::string format_bytes_short(std::uint64_t bytes) {
  static const char* units[] = {"", "K", "M", "G", "T"};
  int u = 0;
  const double v = scale_binary(bytes, u);
  if (v == std::floor(v)) return fmt::format("{:.0f}{}", v, units[u]);
  return fmt::format("{:.1f}{}", v, units[u]);
}

std::vector<std::string> split_list(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  const std::string t = trim(text);
  if (t.empty()) throw InputError("empty list");
  while (true) {
    const std::size_t end = t.find(sep, start);
    std::string item =
        trim(t.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (item.empty()) throw InputError(fmt::format("list '{}' has an empty item", text));
    if (out.size() == kMaxListItems)
      throw InputError(
          fmt::format("list '{}...' has more than {} items", text.substr(0, 40), kMaxListItems));
    out.push_back(item);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

std::vector<int> parse_gpu_list(const std::string& text, int visible) {
  const std::string t = lower(trim(text));
  std::vector<int> out;
  if (t == "all") {
    for (int i = 0; i < visible; ++i) out.push_back(i);
    return out;
  }
  std::set<int> seen;
  auto parse_id = [&](const std::string& s) {
    if (s.empty() ||
        !std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); }))
      throw InputError(
          fmt::format("--gpus: '{}' is not a GPU index (use e.g. 0,1 or 0-3 or all)", s));
    long v = 0;
    try {
      v = std::stol(s);
    } catch (...) {
      throw InputError(fmt::format("--gpus: '{}' is not a GPU index", s));
    }
    if (visible < 0 && v > kMaxGpuId)
      throw InputError(fmt::format("--gpus: GPU {} is beyond any machine (0-{})", v, kMaxGpuId));
    if (visible >= 0 && v >= visible)
      throw InputError(
          fmt::format("--gpus: GPU {} does not exist ({} visible: 0-{})", v, visible, visible - 1));
    return static_cast<int>(v);
  };
  for (const auto& item : split_list(t)) {
    std::vector<int> ids;
    const auto dash = item.find('-');
    if (dash != std::string::npos && dash > 0) {
      const int a = parse_id(trim(item.substr(0, dash))), b = parse_id(trim(item.substr(dash + 1)));
      if (b < a) throw InputError(fmt::format("--gpus: range '{}' is reversed", item));
      for (int i = a; i <= b; ++i) ids.push_back(i);
    } else {
      ids.push_back(parse_id(item));
    }
    for (int id : ids) {
      if (!seen.insert(id).second)
        throw InputError(fmt::format("--gpus: GPU {} is listed twice", id));
      out.push_back(id);
    }
  }
  return out;
}

namespace {

std::int64_t parse_count(const std::string& text, const std::string& option) {
  const std::string t = trim(text);
  if (t.empty() || t.size() > 9 ||
      !std::all_of(t.begin(), t.end(), [](unsigned char c) { return std::isdigit(c); }))
    throw InputError(fmt::format("{}: '{}' is not a positive whole number", option, text));
  return std::stoll(t);
}

}  // namespace

std::vector<std::int64_t> parse_range(
    const std::string& text, const std::string& option, std::size_t max_values,
    const std::function<std::int64_t(const std::string&)>& value) {
  const auto parts = split_list(trim(text), ':');
  if (parts.size() != 3)
    throw InputError(
        fmt::format("{}: '{}' is not start:stop:xF or start:stop:+S", option, trim(text)));
  const std::int64_t start = value(parts[0]), stop = value(parts[1]);
  if (start < 1 || stop < start)
    throw InputError(fmt::format("{}: '{}' needs 1 <= start <= stop", option, trim(text)));
  const std::string step = parts[2];
  std::vector<std::int64_t> out;
  const auto too_many = [&] {
    return InputError(
        fmt::format("{}: '{}' gives more than {} values", option, trim(text), max_values));
  };
  if (step[0] == 'x' || step[0] == 'X') {
    const std::int64_t f = parse_count(step.substr(1), option);
    if (f < 2) throw InputError(fmt::format("{}: factor '{}' must be at least 2", option, step));
    for (std::int64_t v = start;; v *= f) {
      if (out.size() == max_values) throw too_many();
      out.push_back(v);
      if (v > stop / f) break;  // the next one passes stop (or overflows)
    }
  } else {
    const std::int64_t s = value(step[0] == '+' ? step.substr(1) : step);
    if (s < 1 || static_cast<std::uint64_t>((stop - start) / s) >= max_values) throw too_many();
    for (std::int64_t v = start; v <= stop; v += s) out.push_back(v);
  }
  return out;
}

std::vector<std::int64_t> parse_counts(const std::string& text, const std::string& option,
                                       std::int64_t max) {
  std::vector<std::int64_t> out;
  const std::string t = trim(text);
  if (t.find(':') != std::string::npos) {
    out = parse_range(t, option, kMaxListItems,
                      [&](const std::string& s) { return parse_count(s, option); });
  } else {
    for (const auto& item : split_list(t)) out.push_back(parse_count(item, option));
  }
  for (std::int64_t v : out)
    if (v < 1 || v > max) throw InputError(fmt::format("{}: {} is outside 1..{}", option, v, max));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace gpubench
