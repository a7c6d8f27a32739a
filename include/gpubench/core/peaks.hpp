#pragma once
// Dense peak FLOP/s per GPU and data type, the denominator of MFU. Only dense figures are
// stored (never the 2:4 sparsity ones), so a measured rate cannot pass 100% MFU by a factor of 2.
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gpubench {

// Data type keys: "fp64", "fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8"
// (fp16/bf16 with fp32 accumulate; fp8 with fp32 accumulate; int8 in TOPS).
const std::vector<std::string>& peak_dtype_keys();

struct PeakSpec {
  std::string model;   // "H100 SXM", "H200", ... or "" when derived
  std::string source;  // "table: NVIDIA H100 SXM datasheet (dense)" or
                       // "derived: sm_90, 132 SMs x 1980 MHz x 4096 FLOP/clock/SM for bf16 ..."
  // Dense peak TFLOP/s (TOPS for int8) per data type key. A key absent = no such unit, or no
  // rate known well enough to divide by (MFU is then omitted, never guessed).
  std::map<std::string, double> tflops;

  std::optional<double> peak(const std::string& dtype) const;
};

// From the CUDA device name, compute capability, SM count and max SM clock (MHz, 0 = unknown).
// Table first: the name's tokens, the compute capability and the SM count must all match an
// entry, so a MIG slice or a cut-down part with the same name is never given the full part's
// figure (an SM count <= 0 means unknown: the name alone decides). Else derived (see
// derived_peak_spec). Else nothing (MFU omitted). Parts whose tensor or FP64 rate is cut below the
// architecture's (H20, H800) are never derived.
std::optional<PeakSpec> find_peak_spec(const std::string& device_name, int cc_major, int cc_minor,
                                       int sm_count, int sm_clock_max_MHz);

struct GpuInfo;
// The same for a discovered GPU: its name, compute capability, SM count and maximum SM clock.
std::optional<PeakSpec> find_peak_spec(const GpuInfo& gpu);

// SM count x max SM clock x dense FLOP/clock/SM, for the architectures whose per-SM rate is fixed
// and known: sm_80 (A100-class), sm_90 (Hopper), sm_100 (Blackwell datacenter). Nothing for other
// architectures, or when the SM count or clock is unknown (<= 0). At the max clock this is an
// upper bound: datasheets quote tensor rates at a lower boost clock.
std::optional<PeakSpec> derived_peak_spec(int cc_major, int cc_minor, int sm_count,
                                          int sm_clock_max_MHz);

// MFU in percent; NaN when peak <= 0 (or is NaN).
double mfu_pct(double tflops, double peak_tflops);

}  // namespace gpubench
