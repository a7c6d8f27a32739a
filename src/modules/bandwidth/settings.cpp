// `gpubench bandwidth` options -> Settings: the mode's defaults, then one clear line per bad value.
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <string>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/modules/bandwidth/bandwidth.hpp"

namespace gpubench::bandwidth {

namespace {

// Config files may hand a list over as several values joined by newlines.
std::string normalize_list(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ',');
  return text;
}

std::vector<std::string> split_option(const std::string& option, const std::string& text) {
  try {
    return split_list(normalize_list(text));
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", option, e.what()));
  }
}

std::vector<Part> parse_parts(const std::string& text) {
  std::vector<bool> chosen(std::size(kAllParts), false);
  for (const std::string& item : split_option("--tests", text)) {
    if (item == "all") {
      std::fill(chosen.begin(), chosen.end(), true);
      continue;
    }
    bool known = false;
    for (std::size_t i = 0; i < std::size(kAllParts); ++i) {
      if (item == to_string(kAllParts[i])) {
        chosen[i] = true;
        known = true;
      }
    }
    if (!known)
      throw InputError(
          fmt::format("--tests: '{}' is not one of hbm, host, p2p, sweep, latency, all", item));
  }
  std::vector<Part> parts;
  for (std::size_t i = 0; i < std::size(kAllParts); ++i)
    if (chosen[i]) parts.push_back(kAllParts[i]);
  return parts;
}

std::vector<std::string> parse_dtypes(const std::string& text) {
  bool fp32 = false, fp64 = false;
  for (const std::string& text_item : split_option("--hbm-dtypes", text)) {
    const std::string item = canonical_dtype(text_item);
    if (item == "fp32")
      fp32 = true;
    else if (item == "fp64")
      fp64 = true;
    else
      throw InputError(fmt::format("--hbm-dtypes: '{}' is not one of fp32, fp64", item));
  }
  std::vector<std::string> out;
  if (fp32) out.push_back("fp32");
  if (fp64) out.push_back("fp64");
  return out;
}

}  // namespace

const char* to_string(Part p) {
  switch (p) {
    case Part::Hbm:
      return "hbm";
    case Part::Host:
      return "host";
    case Part::P2p:
      return "p2p";
    case Part::Sweep:
      return "sweep";
    case Part::Latency:
      return "latency";
  }
  return "?";
}

bool Settings::has(Part p) const {
  return std::find(parts.begin(), parts.end(), p) != parts.end();
}

nlohmann::ordered_json Settings::to_json() const {
  nlohmann::ordered_json j;
  j["tests"] = nlohmann::ordered_json::array();
  for (Part p : parts) j["tests"].push_back(to_string(p));
  j["hbm_size"] = hbm_bytes;
  j["hbm_dtypes"] = hbm_dtypes;
  j["host_size"] = host_bytes;
  j["pageable_size"] = pageable_bytes;
  j["p2p_size"] = p2p_bytes;
  j["sweep_sizes"] = sweep_sizes;
  j["latency_hops"] = latency_hops;
  return j;
}

std::vector<std::uint64_t> default_sweep_sizes(bool quick) {
  if (quick) return {1 * kMiB, 16 * kMiB, 256 * kMiB};
  std::vector<std::uint64_t> sizes;
  for (std::uint64_t s = kMiB; s <= 2 * kGiB; s *= 2) sizes.push_back(s);
  return sizes;
}

Settings resolve_settings(const Options& o, bool quick) {
  Settings s;
  s.parts = parse_parts(o.tests);
  s.hbm_dtypes = parse_dtypes(o.hbm_dtypes);
  s.hbm_bytes = parse_size_option("--hbm-size", o.hbm_size, quick ? 512 * kMiB : 2 * kGiB);
  s.host_bytes = parse_size_option("--host-size", o.host_size, quick ? 256 * kMiB : kGiB);
  s.p2p_bytes = parse_size_option("--p2p-size", o.p2p_size, quick ? 256 * kMiB : kGiB);
  // Pageable copies go through a staging buffer at a fraction of pinned speed: quick mode
  // keeps them short.
  s.pageable_bytes = quick ? std::min<std::uint64_t>(s.host_bytes, 64 * kMiB) : s.host_bytes;

  if (o.sweep_sizes.empty()) {
    s.sweep_sizes = default_sweep_sizes(quick);
  } else {
    try {
      s.sweep_sizes = parse_size_list(normalize_list(o.sweep_sizes));
    } catch (const InputError& e) {
      throw InputError(fmt::format("--sweep-sizes: {}", e.what()));
    }
    std::sort(s.sweep_sizes.begin(), s.sweep_sizes.end());
    s.sweep_sizes.erase(std::unique(s.sweep_sizes.begin(), s.sweep_sizes.end()),
                        s.sweep_sizes.end());
    if (s.sweep_sizes.empty()) throw InputError("--sweep-sizes: no size given");
  }

  // A STREAM array needs at least one 16-byte vector of each dtype to mean anything.
  if (s.hbm_bytes < 4096)
    throw InputError(
        fmt::format("--hbm-size: {} is too small (at least 4K per array)", o.hbm_size));
  if (o.latency_hops < static_cast<long long>(kMinLatencyHops) ||
      o.latency_hops > static_cast<long long>(kMaxLatencyHops))
    throw InputError(fmt::format("--latency-hops: {} is outside {}..{}", o.latency_hops,
                                 kMinLatencyHops, kMaxLatencyHops));
  s.latency_hops = static_cast<std::uint64_t>(o.latency_hops);
  return s;
}

}  // namespace gpubench::bandwidth
