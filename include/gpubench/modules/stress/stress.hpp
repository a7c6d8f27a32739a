#pragma once
// `gpubench stress`: a burn-in that finds faulty GPUs. Every selected GPU holds, at once, a
// dense GEMM whose every output is compared bit for bit with the first (and the first with the
// other GPUs'), a memory test over most of its free HBM, and verified copies over its links
// (host<->device, and to every other GPU); a time series of rates, clocks, power and temperature
// is kept; NVML's health counters are read before and after. Each GPU is OK or FAULTY with the
// reasons, in check's verdict format.
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gpubench/core/gemm.hpp"
#include "gpubench/core/health.hpp"
#include "gpubench/core/result.hpp"

namespace gpubench {
class Context;
}

namespace gpubench::stress {

struct Options {
  std::string duration;          // "" : 15 minutes, 60 s with --quick
  std::string workload = "all";  // gemm,memory,link or all
  std::string dtypes = "bf16";
  double memory = 90;   // percent of each GPU's free HBM the memory test covers
  double outlier = 10;  // percent below the other GPUs' median rate that makes a GPU FAULTY
};

struct Settings {
  double duration_s = 900;
  bool gemm = true, memory = true, link = true;
  std::vector<GemmDtype> dtypes{GemmDtype::Bf16};
  double memory_share = 0.9;  // a fraction
  double outlier = 0.10;      // a fraction
  bool quick = false;
  // A load that adds nothing to its GPU's progress for this long is hung: one unit of its work
  // (a batch of GEMMs, a memory-test pass, a round of copies) takes well under a second.
  double hang_s = 60;
  nlohmann::ordered_json to_json() const;
};

// "15m", "90s", "1h", "1h30m", "600" (seconds) -> seconds; InputError with one line for anything
// else, zero, or more than a week.
double parse_duration(const std::string& text);
// InputError with one line on a bad duration, workload, dtype or share. Without --duration the
// run lasts 15 minutes, 60 s with --quick.
Settings resolve_settings(const Options& o, bool quick);

// ---- What the workloads saw ----

// One GEMM data type on one GPU.
struct GemmOutcome {
  GemmDtype dtype = GemmDtype::Bf16;
  std::string shape;                 // "8192x8192x8192"
  std::string algo;                  // the algorithm, the same on every GPU
  bool reference_ok = false;         // the first output checked against an fp64 reference
  std::string reference_note;        // why not, when it failed
  std::uint64_t iterations = 0;      // outputs compared with the first
  std::uint64_t mismatched = 0;      // elements that differed, over all of them
  std::int64_t first_mismatch = -1;  // element index (i + j*M) of the first seen
  // (row, column) of the first few elements that differed, as the comparisons found them.
  std::vector<std::pair<std::int64_t, std::int64_t>> mismatch_at;
  std::uint64_t golden_hash = 0;     // of the first output, compared across GPUs
  std::optional<bool> agrees;        // with the other GPUs' first output (nullopt: alone)
  double tflops = 0;                 // median over batches of GEMMs (GEMM time only)
  double tflops_low = 0;             // 5th percentile of the batches
};

struct WrongWord {
  std::uint64_t address = 0, expected = 0, got = 0;
};
struct MemoryOutcome {
  std::uint64_t bytes = 0;   // the region tested
  std::uint64_t passes = 0;  // patterns written and read back over the whole region
  std::uint64_t words_wrong = 0, bit_errors = 0;
  std::vector<WrongWord> first_wrong;  // up to a few, as the check found them
  double GBps = 0;                     // bytes written and read per second of the test's passes
};

// A link: src -> dst, -1 for the host.
struct LinkOutcome {
  int src = -1, dst = -1;
  std::uint64_t copies = 0, bytes_each = 0;
  std::uint64_t wrong_words = 0;  // 4-byte words that arrived different, over all copies
  double GBps = 0;                // copy bytes per second of copy time
  // A peer link's CUDA error (its copy or the check on the peer), which ended that link's load:
  // it fails the link, not the GPU that sent.
  std::string error;
  std::string name() const;       // "GPU 0 -> GPU 1", "host -> GPU 2"
};

// One sample of the time series of a GPU (about once a second).
struct Sample {
  double t = 0;  // seconds since the workloads started
  double tflops = std::nan(""), memory_GBps = std::nan(""), link_GBps = std::nan("");
  std::optional<unsigned> sm_MHz, mem_MHz, temperature_C;
  std::optional<double> power_W;
  std::uint64_t reasons = 0;  // NVML clocks-event reasons now
  std::uint64_t errors = 0;   // errors so far on this GPU (GEMM, memory, its links)
};

struct GpuOutcome {
  int gpu = -1;
  std::vector<GemmOutcome> gemm;
  std::optional<MemoryOutcome> memory;
  std::vector<Sample> series;
  std::string error;                // a workload that could not run, why
  // Its loads that made no progress for settings.hang_s ("GEMM", "memory", "link"): a kernel or
  // copy that never ended. Their outcomes are what set-up left (their threads never returned).
  std::vector<std::string> hung;
};

struct Outcome {
  Settings settings;
  double elapsed_s = 0;
  bool interrupted = false;
  std::vector<GpuOutcome> gpus;
  std::vector<LinkOutcome> links;
  std::optional<HealthSnapshot> before, after;
  std::vector<XidWatcher::Event> xids;
  std::string xid_unavailable;
  bool any_hung() const;
};

// ---- Judging and the report (host logic) ----

// The health part of the outcome: its snapshots and XID events, judged over "the run", a
// software thermal slowdown failing (a burn-in holds full load; no throttling filled in).
HealthEvidence health_of(const Outcome& o);
// Sets each GEMM outcome's `agrees`: its first output's hash against those of the other GPUs
// that ran the same dtype and algorithm (one model's). A GPU that differs from the majority
// disagrees; with two that differ, both do (neither can be told right); alone, nothing is set.
void compare_first_outputs(Outcome& o);
// Every check of the outcome: per GPU a hung load (FAIL; a link load beside a GPU whose own
// load hung waits on it: WARN), its GEMM outputs (against the first, the
// first against the reference and the other GPUs), its memory test, its links (a link's errors
// count against both ends), its sustained GEMM rate against the other GPUs' median (more than
// `outlier` below FAILs), and health (judge_health). Levels PASS / WARN / FAIL / N/A, subjects "GPU
// i" or a link.
std::vector<Check> judge(const Outcome& o);
// GPU index -> the FAIL reasons that make it FAULTY (no entry: OK). A FAIL of a link names both
// ends; a node-level FAIL (no GPU named) names every GPU.
std::map<int, std::vector<std::string>> faulty_gpus(const std::vector<Check>& checks,
                                                    const std::vector<int>& gpus);
Report stress_report(const Outcome& o);

// The live view's line of one GPU: "GPU 0  3:12 / 15:00  bf16 702.4 TFLOP/s  mem 2840 GB/s
// 1980 MHz  690 W  61 C  errors 0"; pure.
std::string live_line(int gpu, const Sample& s, double duration_s);

// ---- Running ----

// Test-only faults (never a user option): GPU tests hand them to run() to prove each detector.
struct Faults {
  int gemm_gpu = -1;    // one bit of one GEMM output flipped on this GPU, once
  int memory_gpu = -1;  // one word of this GPU's memory-test region corrupted, once
  // One copy over this link corrupted on arrival, once (-1: the host); both -2: none.
  int link_src = -2, link_dst = -2;
  int hang_gpu = -1;  // the GEMM load of this GPU runs a kernel that lasts 10 minutes, once
};

// Runs the workloads on ctx's GPUs for settings.duration_s (or until interrupted) and returns
// what they saw; a workload that cannot start on a GPU is recorded in its `error`. A load that
// hangs (no progress for settings.hang_s) stops the others; its thread, stuck in the driver,
// cannot be joined, so the report of what the run saw (that GPU FAULTY) goes to ctx.stall() and
// the process ends there with the sink's exit code (end_stuck_process): run() does not return.
Outcome run(Context& ctx, const Settings& settings, const Faults& faults = {});

}  // namespace gpubench::stress
