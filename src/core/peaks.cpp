// Dense peak FLOP/s table (NVIDIA datasheets, sparsity figures halved) and the per-SM derivation
// used for parts not in the table: the denominators of MFU.
#include "gpubench/core/peaks.hpp"
#include "gpubench/core/system.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

namespace gpubench {

namespace {

constexpr const char* kFp64 = "fp64";
constexpr const char* kFp32 = "fp32";
constexpr const char* kTf32 = "tf32";
constexpr const char* kFp16 = "fp16";
constexpr const char* kBf16 = "bf16";
constexpr const char* kFp8E4m3 = "fp8_e4m3";
constexpr const char* kFp8E5m2 = "fp8_e5m2";
constexpr const char* kInt8 = "int8";

// Dense rates of one part or one SM; 0 = no such unit (or no rate known well enough).
// fp16/bf16 and fp8 with fp32 accumulate; fp8 covers both e4m3 and e5m2.
struct DenseRates {
  double fp64 = 0, fp32 = 0, tf32 = 0, fp16 = 0, bf16 = 0, fp8 = 0, int8 = 0;
};

std::map<std::string, double> rates_map(const DenseRates& r, double scale) {
  std::map<std::string, double> out;
  const auto put = [&](const char* key, double rate) {
    if (rate > 0) out[key] = rate * scale;
  };
  put(kFp64, r.fp64);
  put(kFp32, r.fp32);
  put(kTf32, r.tf32);
  put(kFp16, r.fp16);
  put(kBf16, r.bf16);
  put(kFp8E4m3, r.fp8);
  put(kFp8E5m2, r.fp8);
  put(kInt8, r.int8);
  return out;
}

// One datasheet part. A device matches when its name holds every `tokens` entry and none of
// `excluded` (whole tokens, case-insensitive), and its compute capability and SM count equal
// the entry's: the SM count separates parts sharing a name and keeps MIG slices out.
struct TableEntry {
  const char* model;
  const char* source;
  std::vector<std::string> tokens;
  std::vector<std::string> excluded;
  int cc_major, cc_minor;
  int sm_count;
  DenseRates tflops;
};

// TFLOP/s (TOPS for int8), dense. Where a datasheet gives "dense | sparse" the dense figure is
// used; where it gives only the sparsity figure (marked *) it is halved. Ada and GA10x fp64 is
// not in their datasheets: it is fp32 / 64 (2 FP64 units per SM). With the SM count known no
// two entries match one device; with it unknown (<= 0) the first match wins (SXM before PCIe).
const std::vector<TableEntry>& peak_table() {
  // clang-format off
  static const std::vector<TableEntry> table = {
    // Hopper. SXM: 132 SMs; PCIe: 114 SMs; NVL: 132 SMs at a lower power limit.
    {"H100 SXM", "table: NVIDIA H100 SXM datasheet (dense)",
     {"H100"}, {"PCIE", "NVL"}, 9, 0, 132, {66.9, 66.9, 494.7, 989.4, 989.4, 1978.9, 1978.9}},
    {"H100 PCIe", "table: NVIDIA H100 PCIe datasheet (dense)",
     {"H100"}, {"NVL"}, 9, 0, 114, {51.2, 51.2, 378, 756, 756, 1513, 1513}},
    {"H100 NVL", "table: NVIDIA H100 NVL datasheet (dense: sparsity figures halved)",
     {"H100", "NVL"}, {}, 9, 0, 132, {60, 60, 417.5, 835.5, 835.5, 1670.5, 1670.5}},
    {"H200", "table: NVIDIA H200 SXM datasheet (dense)",
     {"H200"}, {"NVL"}, 9, 0, 132, {66.9, 66.9, 494.7, 989.4, 989.4, 1978.9, 1978.9}},
    {"H200 NVL", "table: NVIDIA H200 NVL datasheet (dense: sparsity figures halved)",
     {"H200", "NVL"}, {}, 9, 0, 132, {60, 60, 417.5, 835.5, 835.5, 1670.5, 1670.5}},
    {"GH200", "table: NVIDIA GH200 Grace Hopper datasheet (dense, Hopper GPU)",
     {"GH200"}, {}, 9, 0, 132, {66.9, 66.9, 494.7, 989.4, 989.4, 1978.9, 1978.9}},
    // Export parts: H100 tensor rates, FP64 cut to about 1 TFLOP/s (left out: not known to
    // the precision MFU needs). Never derived from the SM count (see kRateLimitedTokens).
    {"H800 SXM", "table: NVIDIA H800 SXM datasheet (dense; fp64 cut, omitted)",
     {"H800"}, {"PCIE"}, 9, 0, 132, {0, 66.9, 494.7, 989.4, 989.4, 1978.9, 1978.9}},
    {"H800 PCIe", "table: NVIDIA H800 PCIe datasheet (dense; fp64 cut, omitted)",
     {"H800"}, {}, 9, 0, 114, {0, 51.2, 378, 756, 756, 1513, 1513}},
    // Blackwell datacenter.
    {"B200", "table: NVIDIA HGX B200 datasheet (dense: sparsity figures halved, per GPU)",
     {"B200"}, {}, 10, 0, 148, {37, 75, 1125, 2250, 2250, 4500, 4500}},
    // Ampere GA100 (SXM4 and PCIe, 40 and 80 GB: same rates). A800 = A100 compute.
    {"A100", "table: NVIDIA A100 datasheet (dense)",
     {"A100"}, {}, 8, 0, 108, {19.5, 19.5, 156, 312, 312, 0, 624}},
    {"A800", "table: NVIDIA A800 datasheet (dense)",
     {"A800"}, {}, 8, 0, 108, {19.5, 19.5, 156, 312, 312, 0, 624}},
    {"A30", "table: NVIDIA A30 datasheet (dense)",
     {"A30"}, {}, 8, 0, 56, {10.3, 10.3, 82, 165, 165, 0, 330}},
    // Ampere GA102 datacenter parts (full-rate fp32 accumulate).
    {"A10", "table: NVIDIA A10 datasheet (dense; fp64 = fp32/64)",
     {"A10"}, {}, 8, 6, 72, {0.49, 31.2, 62.5, 125, 125, 0, 250}},
    {"A40", "table: NVIDIA A40 datasheet (dense; fp64 = fp32/64)",
     {"A40"}, {}, 8, 6, 84, {0.585, 37.4, 74.8, 149.7, 149.7, 0, 299.3}},
    // Ada. The professional parts run fp16/fp8 with fp32 accumulate at full rate; GeForce at
    // half rate (RTX 4090 figures below are the fp32-accumulate ones).
    {"L40S", "table: NVIDIA L40S datasheet (dense; fp64 = fp32/64)",
     {"L40S"}, {}, 8, 9, 142, {1.43, 91.6, 183, 362.05, 362.05, 733, 733}},
    {"L4", "table: NVIDIA L4 datasheet (dense: sparsity figures halved; fp64 = fp32/64)",
     {"L4"}, {}, 8, 9, 58, {0.47, 30.3, 60, 121, 121, 242.5, 242.5}},
    {"RTX 6000 Ada", "table: NVIDIA RTX 6000 Ada datasheet (dense: 1457 fp8 sparse halved; "
     "fp64 = fp32/64)",
     {"RTX", "6000", "ADA"}, {}, 8, 9, 142, {1.42, 91.1, 182.1, 364.2, 364.2, 728.5, 728.5}},
    {"GeForce RTX 4090", "table: NVIDIA Ada architecture whitepaper, RTX 4090 (dense, fp32 "
     "accumulate)",
     {"RTX", "4090"}, {}, 8, 9, 128, {1.29, 82.6, 82.6, 165.2, 165.2, 330.3, 660.6}},
    // Volta: fp16 tensor cores only (no tf32, bf16, fp8 or int8 tensor units).
    {"V100 SXM2", "table: NVIDIA V100 datasheet, SXM2 (dense)",
     {"V100", "SXM2"}, {}, 7, 0, 80, {7.8, 15.7, 0, 125, 0, 0, 0}},
    {"V100 PCIe", "table: NVIDIA V100 datasheet, PCIe (dense)",
     {"V100", "PCIE"}, {}, 7, 0, 80, {7, 14, 0, 112, 0, 0, 0}},
    {"V100S PCIe", "table: NVIDIA V100S datasheet (dense)",
     {"V100S"}, {}, 7, 0, 80, {8.2, 16.4, 0, 130, 0, 0, 0}},
  };
  // clang-format on
  return table;
}

// Parts whose tensor or FP64 rate is cut below their architecture's per-SM rate: deriving from
// the SM count would overstate the peak, so without a table match they get nothing.
const std::vector<std::string> kRateLimitedTokens = {"H20", "H800"};

// "NVIDIA A100-SXM4-80GB" -> {"NVIDIA", "A100", "SXM4", "80GB"}: upper-case alphanumeric runs.
std::vector<std::string> name_tokens(const std::string& name) {
  std::vector<std::string> tokens;
  std::string current;
  for (const char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c)) {
      current += static_cast<char>(std::toupper(c));
    } else if (!current.empty()) {
      tokens.push_back(current);
      current.clear();
    }
  }
  if (!current.empty()) tokens.push_back(current);
  return tokens;
}

bool has_token(const std::vector<std::string>& tokens, const std::string& token) {
  return std::find(tokens.begin(), tokens.end(), token) != tokens.end();
}

bool matches(const TableEntry& entry, const std::vector<std::string>& tokens, int cc_major,
             int cc_minor, int sm_count) {
  if (entry.cc_major != cc_major || entry.cc_minor != cc_minor) return false;
  if (sm_count > 0 && entry.sm_count != sm_count) return false;
  for (const auto& t : entry.tokens)
    if (!has_token(tokens, t)) return false;
  for (const auto& t : entry.excluded)
    if (has_token(tokens, t)) return false;
  return true;
}

// Dense FLOP per clock per SM, for architectures where every part of the same compute
// capability runs the same per-SM rate (A100-class, Hopper, Blackwell datacenter).
std::optional<DenseRates> per_sm_rates(int cc_major, int cc_minor) {
  if (cc_major == 8 && cc_minor == 0) return DenseRates{128, 128, 1024, 2048, 2048, 0, 4096};
  if (cc_major == 9 && cc_minor == 0) return DenseRates{256, 256, 2048, 4096, 4096, 8192, 8192};
  if (cc_major == 10 && cc_minor == 0) return DenseRates{128, 256, 4096, 8192, 8192, 16384, 16384};
  return std::nullopt;
}

}  // namespace

const std::vector<std::string>& peak_dtype_keys() {
  static const std::vector<std::string> keys = {kFp64, kFp32,    kTf32,    kFp16,
                                                kBf16, kFp8E4m3, kFp8E5m2, kInt8};
  return keys;
}

std::optional<double> PeakSpec::peak(const std::string& dtype) const {
  const auto it = tflops.find(dtype);
  if (it == tflops.end()) return std::nullopt;
  return it->second;
}

std::optional<PeakSpec> derived_peak_spec(int cc_major, int cc_minor, int sm_count,
                                          int sm_clock_max_MHz) {
  if (sm_count <= 0 || sm_clock_max_MHz <= 0) return std::nullopt;
  const auto rates = per_sm_rates(cc_major, cc_minor);
  if (!rates) return std::nullopt;
  PeakSpec spec;
  // FLOP/clock/SM x SMs x MHz = 1e6 FLOP/s; TFLOP/s = that / 1e6.
  spec.tflops = rates_map(*rates, double(sm_count) * double(sm_clock_max_MHz) / 1e6);
  std::string others =
      fmt::format("fp64 {}, fp32 {}, tf32 {}", rates->fp64, rates->fp32, rates->tf32);
  if (rates->fp8 > 0) others += fmt::format(", fp8 {}", rates->fp8);
  others += fmt::format(", int8 {}", rates->int8);
  spec.source = fmt::format("derived: sm_{}{}, {} SMs x {} MHz x {} FLOP/clock/SM for bf16 ({})",
                            cc_major, cc_minor, sm_count, sm_clock_max_MHz, rates->bf16, others);
  return spec;
}

std::optional<PeakSpec> find_peak_spec(const std::string& device_name, int cc_major, int cc_minor,
                                       int sm_count, int sm_clock_max_MHz) {
  const auto tokens = name_tokens(device_name);
  for (const auto& entry : peak_table()) {
    if (!matches(entry, tokens, cc_major, cc_minor, sm_count)) continue;
    PeakSpec spec;
    spec.model = entry.model;
    spec.source = entry.source;
    spec.tflops = rates_map(entry.tflops, 1.0);
    return spec;
  }
  for (const auto& t : kRateLimitedTokens)
    if (has_token(tokens, t)) return std::nullopt;
  return derived_peak_spec(cc_major, cc_minor, sm_count, sm_clock_max_MHz);
}

std::optional<PeakSpec> find_peak_spec(const GpuInfo& gpu) {
  return find_peak_spec(gpu.name, gpu.cc_major, gpu.cc_minor, gpu.sm_count, gpu.sm_clock_max_MHz);
}

double mfu_pct(double tflops, double peak_tflops) {
  if (!(peak_tflops > 0)) return std::numeric_limits<double>::quiet_NaN();
  return 100.0 * tflops / peak_tflops;
}

}  // namespace gpubench
