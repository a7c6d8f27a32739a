#pragma once
// Private interface of `gpubench matmul`: options and resolved settings, the pure formulas
// (shape parsing, rotation sets, repeats, the MAMF search grid, headline), and the GPU work
// (one case on one GPU: algorithm search, verification, measurement).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpubench/core/context.hpp"
#include "gpubench/core/gemm.hpp"
#include "gpubench/core/module.hpp"
#include "gpubench/core/result.hpp"

namespace gpubench {

ModulePtr make_matmul_module();

namespace matmul {

// As given on the command line or in the config (long option names = INI keys). Empty values
// mean "the default for this mode".
struct Options {
  std::string dtypes;  // default: all; --mamf: bf16; quick: bf16,fp8_e4m3,tf32
  std::string sizes;   // square sweep; default 1024,2048,4096,8192,16384
  std::string shapes;  // explicit MxNxK list (replaces the square sweep)
  std::string layout;  // best, tn, nn, nt, tt (fp8 and int8: tn only); "": best, tn with --quick
  std::string model;   // preset name: the GEMMs of one layer
  std::string model_config;  // or a HuggingFace config.json
  std::int64_t tokens = 4096;
  int algos = 8;  // heuristic candidates timed per case
  bool mamf = false;
  std::string mamf_sizes;  // the search grid of M, N and K
  bool mamf_refine = true;
  double sustained = 0;  // seconds holding the best shape
  bool burst = false;    // time like a framework microbenchmark: idle, 10 + 50 GEMMs
};

enum class CaseKind { Square, Shape, Model, Mamf, Sustained };

// One GEMM to measure.
struct CaseSpec {
  CaseKind kind = CaseKind::Square;
  GemmDtype dtype = GemmDtype::Bf16;
  GemmShape shape;
  std::string label;  // model GEMM name ("qkv", ...) or ""
  // Also time the other layouts (NN, NT, TT) of the same bytes and keep the fastest.
  bool any_layout = false;
  // The split-K reductions the candidates may use. Any (tests only) lets reductions in D's type
  // in, which the check then rejects where their extra rounding leaves the tolerance.
  GemmReduction reduction = GemmReduction::AccumulateType;
};

// What a run does, after defaults and validation.
struct Settings {
  std::vector<GemmDtype> dtypes;
  std::vector<std::int64_t> sizes;       // square sweep (empty when shapes or a model are given)
  std::vector<GemmShape> shapes;         // explicit shapes
  bool trans_a = true, trans_b = false;  // the layout (TN when any_layout)
  bool any_layout = false;               // --layout best: every allowed layout per case
  std::string model;                     // the model's name when its layer GEMMs are run
  std::vector<CaseSpec> model_gemms;     // per dtype
  std::int64_t tokens = 0;
  int algos = 8;
  bool mamf = false;
  std::vector<std::int64_t> mamf_sizes;
  bool mamf_refine = true;
  double sustained = 0;
  bool burst = false;
  // The cases of the sweep / shape list / model, in run order (dtype-major).
  std::vector<CaseSpec> cases() const;
  nlohmann::ordered_json to_json() const;
};

// Applies the mode's defaults and checks every value; throws InputError("--option: why").
Settings resolve_settings(const Options& o, bool quick);

// "8192x8192x8192" -> shape (M, N, K); also "8192" for a cube. Throws InputError.
GemmShape parse_shape(const std::string& text);
std::vector<GemmShape> parse_shapes(const std::string& list);
// "tn" / "nn" / "nt" / "tt" (case-insensitive) -> (trans_a, trans_b). Throws InputError.
// ("best" is handled by resolve_settings.)
std::pair<bool, bool> parse_layout(const std::string& text);
// "2048,4096" or "1024:16384:1024" (start:stop:step, inclusive). Throws InputError.
std::vector<std::int64_t> parse_dims(const std::string& text, const std::string& option);

// Operand sets to rotate through so one pass reads more than 3x the L2 (cold), or 1 (hot);
// never more than fit in `budget_bytes`, at least 1.
int rotation_sets(std::uint64_t set_bytes, std::uint64_t l2_bytes, std::uint64_t budget_bytes,
                  bool hot);
// --burst: the final measurement after `kBurstIdleSeconds` idle, `kBurstWarmup` untimed and
// exactly `kBurstIters` timed iterations, like a torch.matmul loop timed with CUDA events.
inline constexpr double kBurstIdleSeconds = 1.0;
inline constexpr int kBurstWarmup = 10;
inline constexpr int kBurstIters = 50;
MeasureOptions burst_options(MeasureOptions m);

// With --layout best, the heuristic's first candidates timed for each layout besides TN.
inline constexpr int kOtherLayoutAlgos = 3;

// GEMMs per timed iteration so one iteration lasts about `target_s` (at least 1, at most 8:
// the measurement core queues 64 iterations behind its spin gate).
inline constexpr int kMaxRepeats = 8;
int repeats_for(double gemm_seconds, double target_s = 25e-6);

// The order the timed candidates are verified in until one passes: those that ran (a finite
// brief time per GEMM), fastest first, ties in the given (heuristic) order.
std::vector<std::size_t> verification_order(const std::vector<double>& brief_seconds);

// A candidate that failed its check, as the row names it.
struct RejectedAlgo {
  std::string config;  // the layout and GemmAlgo::describe(): "TN id 21 tile 18 ... cluster 0"
  std::string why;     // check_failure_text(), or the error it ran into
};
// "497 of 16384 checked entries outside the tolerance, worst 7.43x it, first at row 3 column 9"
std::string check_failure_text(std::uint64_t wrong, std::uint64_t checked, double worst_ratio,
                               std::int64_t row, std::int64_t column);
// The row's note on the rejected candidates ("" when none): with `verified`, the faster ones the
// figure passed over; else why the case has no figure. At most kNotedRejections in full, then
// how many more.
inline constexpr std::size_t kNotedRejections = 4;
std::string rejection_note(const std::vector<RejectedAlgo>& rejected, bool verified);

// The MAMF search: every M x N x K of the grid, then (refine) the neighbours of the best at
// half and a quarter of the grid's smallest step.
std::vector<GemmShape> mamf_grid(const std::vector<std::int64_t>& sizes, bool trans_a,
                                 bool trans_b);
std::vector<GemmShape> mamf_neighbours(const GemmShape& best, std::int64_t step,
                                       const std::vector<GemmShape>& done, int alignment);

// The MAMF search's best `k` distinct shapes by rate (highest first), measured again in full.
inline constexpr int kMamfFinalists = 5;
std::vector<GemmShape> mamf_finalists(std::vector<std::pair<double, GemmShape>> scored, int k);

// One measured case on one GPU.
struct CaseOutcome {
  int gpu = -1;
  CaseSpec spec;
  bool ok = false;
  std::string status = "ok";  // ok | skipped | failed
  std::string note;
  double tflops = 0, median_s = 0;
  double first_pick_tflops = 0;    // the heuristic's first pick, timed briefly (0: it failed)
  double first_pick_gain_pct = 0;  // how much the chosen algorithm beat it, same brief timing
  double mean_tflops = 0, max_tflops = 0;  // mean time, fastest iteration
  GemmAlgo algo;                           // the fastest candidate that verified
  // Candidates that failed verification, fastest first: all of them when none verified, else
  // those faster than `algo`.
  std::vector<RejectedAlgo> rejected;
  int candidates_timed = 0, repeats = 1, sets = 1;
  std::uint64_t checked = 0;
  double max_error_ratio = 0, max_rel_error = 0;
  Measurement measurement;
};

// Per-GPU resources the cases of one GPU share (handle, stream, workspace, check tally).
class GpuBench {
 public:
  GpuBench(Context& ctx, int gpu);
  ~GpuBench();
  GpuBench(const GpuBench&) = delete;
  GpuBench& operator=(const GpuBench&) = delete;
  // Times the heuristic's candidates briefly, verifies them fastest first until one passes,
  // measures that one (the case fails when none passes). `opts` times the final run;
  // `monitor` (may be null) samples while it runs. Errors of the case become a failed outcome.
  CaseOutcome run_case(const CaseSpec& spec, int algos, const MeasureOptions& opts,
                       Monitor* monitor);
  // Seconds the GPU idles (synchronized) before each final measurement (--burst), 0 by default.
  void set_idle_before(double seconds);

 private:
  struct Impl;
  Impl* impl_;
};

// Runs `spec` on every selected GPU at once (a thread per GPU), one outcome per GPU.
std::vector<CaseOutcome> run_on_all(Context& ctx, std::vector<std::unique_ptr<GpuBench>>& benches,
                                    const CaseSpec& spec, int algos, const MeasureOptions& opts);

// The row of the report for one outcome.
CaseResult to_case_result(const CaseOutcome& o, const std::optional<double>& peak_tflops,
                          bool several_gpus);
// The group (table) a case belongs to: "bf16 square", "bf16 llama-2-7b layer, 4096 tokens".
std::string group_of(const CaseSpec& spec, const std::string& model, std::int64_t tokens);

}  // namespace matmul
}  // namespace gpubench
