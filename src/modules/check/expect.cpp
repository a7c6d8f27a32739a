// check's settings and expectations: the built-in files of config/expect/ (compiled in) and a
// user's --expect file over them.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "gpubench/core/config.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/modules/check/check.hpp"

namespace gpubench::check {

// Generated at configure time from config/expect/*.ini (see CMakeLists.txt).
namespace detail {
extern const char* const kDataNames[];
extern const char* const kDataTexts[];
extern const std::size_t kDataCount;
}  // namespace detail

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

ExpectFile expect_file_of(const IniFile& ini);

}  // namespace

nlohmann::ordered_json Settings::to_json() const {
  return {{"from", from},
          {"expect", expect},
          {"reference", reference},
          {"outlier_pct", 100 * outlier}};
}

Settings resolve_settings(const Options& o, bool quick) {
  if (!std::isfinite(o.outlier) || !(o.outlier > 0) || !(o.outlier < 100))
    throw InputError(fmt::format("--outlier {}: must be a percent in (0, 100)", o.outlier));
  std::error_code ec;
  for (const auto& [flag, path] : {std::pair<const char*, const std::string*>{"--from", &o.from},
                                   {"--reference", &o.reference},
                                   {"--expect", &o.expect}})
    if (!path->empty() && !std::filesystem::exists(*path, ec))
      throw InputError(fmt::format("check {}: {} does not exist", flag, *path));
  if (!o.expect.empty()) (void)expect_file_of(load_ini(o.expect));
  return Settings{o.from, o.expect, o.reference, o.outlier / 100, quick};
}

const std::vector<std::string>& floor_keys() {
  static const std::vector<std::string> keys{
      "hbm_triad",        "h2d_pinned", "d2h_pinned", "p2p_unidir",    "p2p_bidir",
      "all_reduce_busbw", "gemm_bf16",  "gemm_fp16",  "gemm_fp8_e4m3", "gemm_fp8_e5m2",
      "gemm_tf32",        "gemm_int8",  "gemm_fp64"};
  return keys;
}

namespace {

ExpectFile expect_file_of(const IniFile& ini) {
  const std::string& origin = ini.origin;
  ExpectFile f;
  for (const IniSection& s : ini.sections) {
    if (s.name != "gpu" && s.name != "floors")
      throw InputError(
          fmt::format("{}:{}: unknown section [{}] (gpu, floors)", origin, s.line, s.name));
    for (const IniEntry& e : s.entries) {
      if (s.name == "gpu") {
        if (e.key != "match")
          throw InputError(
              fmt::format("{}:{}: unknown key '{}' in [gpu] (match)", origin, e.line, e.key));
        try {
          f.match = split_list(e.value);
        } catch (const InputError& err) {
          throw InputError(fmt::format("{}:{}: match: {}", origin, e.line, err.what()));
        }
        continue;
      }
      const auto& keys = floor_keys();
      if (std::find(keys.begin(), keys.end(), e.key) == keys.end())
        throw InputError(fmt::format("{}:{}: unknown floor '{}'", origin, e.line, e.key));
      char* end = nullptr;
      const double v = std::strtod(e.value.c_str(), &end);
      if (end == e.value.c_str() || *end != '\0' || !std::isfinite(v) || !(v > 0) || v > 100)
        throw InputError(fmt::format("{}:{}: floor {} = '{}' is not a percent in (0, 100]", origin,
                                     e.line, e.key, e.value));
      f.floors[e.key] = v;
    }
  }
  return f;
}

}  // namespace

ExpectFile parse_expect_file(const std::string& text, const std::string& origin) {
  return expect_file_of(parse_ini(text, origin));
}

nlohmann::ordered_json Expectations::to_json() const {
  nlohmann::ordered_json floors_json = nlohmann::ordered_json::object();
  for (const auto& [k, v] : floors) floors_json[k] = v;
  return {{"name", name}, {"source", source}, {"floors_pct_of_peak", floors_json}};
}

Expectations expectations_for(const std::string& gpu_name, const std::string& expect_file) {
  Expectations e{"default", "built in (config/expect/default.ini)", {}};
  std::map<std::string, ExpectFile> files;
  for (std::size_t i = 0; i < detail::kDataCount; ++i)
    files[detail::kDataNames[i]] = parse_expect_file(
        detail::kDataTexts[i], fmt::format("config/expect/{}.ini", detail::kDataNames[i]));
  for (const auto& [name, f] : files)
    for (const std::string& m : f.match)
      if (e.name == "default" && lower(gpu_name).find(lower(m)) != std::string::npos) {
        e.name = name;
        e.source = fmt::format("built in (config/expect/{}.ini)", name);
      }
  if (auto it = files.find(e.name); it != files.end()) e.floors = it->second.floors;
  if (!expect_file.empty()) {
    const ExpectFile user = expect_file_of(load_ini(expect_file));
    for (const auto& [k, v] : user.floors) e.floors[k] = v;
    e.source += ", then " + expect_file;
  }
  return e;
}

}  // namespace gpubench::check
