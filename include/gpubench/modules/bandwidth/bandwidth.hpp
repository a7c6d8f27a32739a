#pragma once
// Private interface of `gpubench bandwidth`: options and resolved settings, the pure formulas
// (bytes moved, repeats, efficiency, worst-of headline), the per-GPU streams and checks the parts
// share, and the parts themselves (hbm, host, p2p, sweep, latency).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gpubench/core/context.hpp"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/module.hpp"
#include "gpubench/core/peers.hpp"
#include "gpubench/core/result.hpp"
#include "gpubench/kernels/memory.cuh"

namespace gpubench {

ModulePtr make_bandwidth_module();

namespace bandwidth {

using gpubench::PeerAccess;  // gpubench/core/peers.hpp

// ---------------------------------------------------------------------------------------------
// Options and settings

enum class Part { Hbm, Host, P2p, Sweep, Latency };
inline constexpr Part kAllParts[] = {Part::Hbm, Part::Host, Part::P2p, Part::Sweep, Part::Latency};
const char* to_string(Part p);

// As given on the command line or in the config (long option names = INI keys). Empty sizes
// mean "the default for this mode" (quick or not).
struct Options {
  std::string tests = "all";
  std::string hbm_size;
  std::string hbm_dtypes = "fp32,fp64";
  std::string host_size;
  std::string p2p_size;
  std::string sweep_sizes;
  int latency_hops = 10000;
};

inline constexpr std::uint64_t kMiB = 1ull << 20;
inline constexpr std::uint64_t kGiB = 1ull << 30;
inline constexpr std::uint64_t kMinLatencyHops = 100;      // fewer: launch overhead shows
inline constexpr std::uint64_t kMaxLatencyHops = 1000000;  // more: a launch takes seconds

// What a run does, after defaults and validation.
struct Settings {
  std::vector<Part> parts;              // in the fixed order of kAllParts
  std::uint64_t hbm_bytes = 0;          // per array
  std::vector<std::string> hbm_dtypes;  // "fp32", "fp64"
  std::uint64_t host_bytes = 0;         // pinned transfers
  std::uint64_t pageable_bytes = 0;     // pageable transfers (smaller in quick mode)
  std::uint64_t p2p_bytes = 0;
  std::vector<std::uint64_t> sweep_sizes;  // ascending, unique
  std::uint64_t latency_hops = 0;
  bool has(Part p) const;
  nlohmann::ordered_json to_json() const;
};

// Applies the mode's defaults and checks every value; throws InputError("--option: why").
Settings resolve_settings(const Options& o, bool quick);
// 1M, 2M, 4M, ... 2G; quick: 1M, 16M, 256M.
std::vector<std::uint64_t> default_sweep_sizes(bool quick);

// ---------------------------------------------------------------------------------------------
// Formulas

// Bytes one STREAM kernel moves over n elements (reads + writes).
std::uint64_t stream_bytes(StreamOp op, std::uint64_t n, std::size_t element_bytes);

// Copies per launch so one launch lasts about `target_s` at `expected_GBps`, in [1, kMaxRepeats].
// The cap keeps a batch of queued launches (the measurement core queues up to 64 behind its spin
// gate) well under the ~1000 operations a stream holds before the host blocks on the next one.
inline constexpr int kMaxRepeats = 4;
int repeats_for(std::uint64_t bytes, double expected_GBps, double target_s = 1e-4);

// GBps as a percentage of `peak_GBps`; NaN when the peak is unknown (<= 0).
double efficiency_pct(double GBps, double peak_GBps);

// One figure per GPU or pair, from which the headline takes the worst.
struct Figure {
  std::string where;  // "GPU0", "GPU0->GPU1"
  double value = 0;
  double efficiency = 0;  // percent, NaN when unknown
};
// The lowest (or, for latencies, highest) finite value; nothing when there is none.
std::optional<Figure> worst_of(const std::vector<Figure>& figures, bool lower_is_worse = true);

struct Figures {
  std::vector<Figure> hbm_copy, hbm_triad;  // of the headline dtype (fp64 when run)
  std::vector<Figure> h2d_pinned, d2h_pinned;
  std::vector<Figure> p2p_unidir_ce, p2p_bidir_ce, p2p_unidir_sm;
  std::vector<Figure> p2p_latency;  // off-diagonal pairs, microseconds
};
// Headline keys (worst GPU or pair each) and their efficiencies ("<key>_efficiency_pct").
void set_headline(Report& report, const Figures& figures);

// ---------------------------------------------------------------------------------------------
// What the parts share: per-GPU streams, signal events and the mismatch counter

struct Lane {
  explicit Lane(int device);
  int device;
  Stream main, side;               // side: the second direction of a bidirectional copy
  Event main_signal, side_signal;  // fork/join events (no timing), recorded on main / side
  DeviceBuffer scratch;            // [0]: mismatch counter, [1]: a double reference sum
  unsigned long long* counter() const { return scratch.as<unsigned long long>(); }
  double* reference_sum() const { return scratch.as<double>() + 1; }
};

class Lanes {
 public:
  explicit Lanes(const std::vector<int>& devices);
  Lane& of(int device);

 private:
  std::vector<std::unique_ptr<Lane>> lanes_;
};

// Joins every joinable thread of `threads` when it goes out of scope (or on join()), so an
// exception while starting them never leaves one running.
struct ThreadJoiner {
  std::vector<std::thread>& threads;
  void join() const {
    for (auto& t : threads)
      if (t.joinable()) t.join();
  }
  ~ThreadJoiner() { join(); }
};

// One stream's share of a concurrent transfer: `work` queues it on `stream` of `device`.
struct Leg {
  int device;
  cudaStream_t stream;
  const Event* signal;  // on `device`; recorded on `stream` to join back
  std::function<void(cudaStream_t)> work;
};
// Queues every leg so all start when `primary` reaches this point, and makes `primary` wait until
// all are done: the measured time of `primary` spans the whole concurrent transfer. A leg whose
// stream is `primary` runs in order on it. `host_threads`: each leg's work is issued from its own
// host thread, for calls that block the host (pageable copies) yet must overlap.
void run_legs(int primary_device, cudaStream_t primary, const Event& primary_signal,
              const std::vector<Leg>& legs, bool host_threads = false);

// Mismatching words of the pattern `seed` in device memory of lane.device (synchronises).
std::uint64_t device_pattern_mismatches(Lane& lane, const void* buf, std::size_t bytes,
                                        std::uint64_t seed);
void device_pattern_fill(Lane& lane, void* buf, std::size_t bytes, std::uint64_t seed);
void device_clear(Lane& lane, void* buf, std::size_t bytes);
// Host-memory twins, spread over a few threads.
void host_pattern_fill(void* buf, std::size_t bytes, std::uint64_t seed);
std::uint64_t host_pattern_mismatches(const void* buf, std::size_t bytes, std::uint64_t seed);

// Seeds of the patterns, distinct per source so a copy from the wrong place shows.
std::uint64_t seed_for(const std::string& what, int index);

// "verification failed: 12 of 268435456 words differ from the pattern"
std::string mismatch_note(std::uint64_t bad, std::uint64_t bytes);

// A bandwidth case from a measurement of launches that each move `bytes_per_launch` in
// `repeats` transfers: bandwidth from the median, efficiency against `peak_GBps` (if known),
// per-transfer time statistics.
CaseResult bandwidth_case(std::string group, std::string name, nlohmann::ordered_json params,
                          double bytes_per_launch, int repeats, const Measurement& m,
                          double peak_GBps);
// The same case marked failed (verification or error): no number, the reason as its note.
CaseResult failed_case(std::string group, std::string name, nlohmann::ordered_json params,
                       std::string note);
CaseResult skipped_case(std::string group, std::string name, nlohmann::ordered_json params,
                        std::string note);
// Statistics of the samples divided by `divisor` (per transfer, per access).
Stats scaled_stats(const Measurement& m, double divisor);

std::string gpu_label(int device);  // "GPU0"
Matrix make_matrix(std::string name, std::string title, std::string unit,
                   const std::vector<int>& gpus);

// ---------------------------------------------------------------------------------------------
// The parts

struct RunState {
  Context& ctx;
  const Settings& settings;
  Report& report;
  Figures& figures;
  Lanes& lanes;
};

// Throws InputError when a part's buffers cannot fit in a selected GPU's free memory or in
// half the host's memory.
void check_memory_fits(Context& ctx, const Settings& s);

void run_hbm(RunState& rs);
void run_host(RunState& rs);
void run_p2p(RunState& rs);
void run_sweep(RunState& rs);
void run_latency(RunState& rs);

// P2P pieces shared by the pair matrices, the fan-in/fan-out cases and the sweep.
constexpr double kLinkGuessGBps = 100;  // for sizing repeats when a link's peak is unknown
double link_peak(const System& system, int a, int b);       // per direction, 0 when unknown
std::string link_name(const System& system, int a, int b);  // "NVLink x18", "PCIe", "unknown"
// `repeats` copy-engine copies src (on src_dev) -> dst (on dst_dev), queued on `stream`.
void peer_copies(void* dst, int dst_dev, const void* src, int src_dev, std::size_t bytes,
                 int repeats, cudaStream_t stream);
// `repeats` SM copies by the kernel of the stream's (current) device.
void sm_copies(void* dst, const void* src, std::size_t bytes, int repeats, cudaStream_t stream);

// One source and one destination buffer per selected GPU (same order as ctx.gpus()); each
// source holds the pattern of its GPU's seed.
struct P2pBuffers {
  std::vector<DeviceBuffer> src, dst;
  std::vector<std::uint64_t> seed;
};

// All-to-one (every other GPU writes into one) and one-to-all (every other GPU reads from one).
void run_p2p_fan(RunState& rs, const PeerAccess& peers, P2pBuffers& buffers);


}  // namespace bandwidth
}  // namespace gpubench
