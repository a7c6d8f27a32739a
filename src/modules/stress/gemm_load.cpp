// stress's GEMM load (see loads.hpp): every output of a deterministic GEMM compared bit for bit
// with the first, which an fp64 reference has checked.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "gpubench/core/cublaslt.hpp"
#include "gpubench/core/gemm.hpp"
#include "gpubench/core/stats.hpp"
#include "gpubench/kernels/gemm_check.cuh"
#include "gpubench/kernels/memtest.cuh"
#include "gpubench/kernels/spin.cuh"
#include "gpubench/modules/stress/loads.hpp"

namespace gpubench::stress {

namespace {

constexpr std::int64_t kSide = 8192;  // M = N = K: at the dense peak of every current GPU
constexpr int kRing = 4;              // outputs per batch, each compared with the golden copy
constexpr std::uint64_t kSeed = 0x57E55;

std::uint64_t read_u64(const void* device_ptr, cudaStream_t s) {
  std::uint64_t v = 0;
  GPB_CUDA_CHECK(cudaMemcpyAsync(&v, device_ptr, sizeof v, cudaMemcpyDeviceToHost, s));
  GPB_CUDA_CHECK(cudaStreamSynchronize(s));
  return v;
}

// One dtype on one GPU: operands, the ring of outputs, the golden copy and what was seen.
struct DtypeState {
  DtypeState(GemmDtype t, GemmPlan p) : dtype(t), plan(std::move(p)) {}
  GemmDtype dtype;
  GemmPlan plan;
  GemmAlgo algo;
  DeviceBuffer a, b, golden;
  std::vector<DeviceBuffer> ring;
  std::size_t elements = 0;
  int element_size = 0;
  GemmOutcome out;
  std::vector<double> batch_tflops;
};

}  // namespace

struct GemmLoad::Impl {
  int gpu;
  bool fault, hang;
  CublasLtHandle handle;
  Stream stream;
  DeviceBuffer workspace, tallies;  // CompareTally, then GemmCheckTally
  Event start, stop;
  std::vector<std::unique_ptr<DtypeState>> states;

  Impl(int g, bool inject, bool inject_hang)
      : gpu(g),
        fault(inject),
        hang(inject_hang),
        stream(g, /*high_priority=*/true),  // before the memory test's blocks (memtest.cu)
        workspace(g, gemm_workspace_bytes(compute_capability_major(g))),
        tallies(g, 256),
        start(g),
        stop(g) {}

  static_assert(sizeof(CompareTally) <= 128 && sizeof(GemmCheckTally) <= 128,
                "the two tallies share one 256-byte buffer");
  CompareTally* compare_tally() const { return tallies.as<CompareTally>(); }
  GemmCheckTally* check_tally() const {
    return reinterpret_cast<GemmCheckTally*>(tallies.as<char>() + 128);
  }

  void set_up(GemmDtype t, const GemmAlgo* given);
  std::vector<GemmAlgo> fastest_first(DtypeState& s);
  bool same_bits(DtypeState& s, const DeviceBuffer& out);
  void reference_check(DtypeState& s);
  void batch(DtypeState& s, Progress& progress);
};

// The fastest candidate without split-K whose output is the same, bit for bit, on two runs
// becomes the algorithm (or `given`, another GPU's, when it is the same on two runs here); its
// output the golden copy.
void GemmLoad::Impl::set_up(GemmDtype t, const GemmAlgo* given) {
  DeviceGuard guard(gpu);
  GemmShape shape{kSide, kSide, kSide, true, false, 0};
  auto s = std::make_unique<DtypeState>(
      t, GemmPlan(handle, t, shape, workspace.bytes(), GemmReduction::AccumulateType));
  const GemmTypeInfo& info = gemm_type_info(t);
  const GemmOperandBytes bytes = gemm_operand_bytes(t, shape);
  s->a = DeviceBuffer(gpu, bytes.a);
  s->b = DeviceBuffer(gpu, bytes.b);
  s->golden = DeviceBuffer(gpu, bytes.d);
  for (int i = 0; i < kRing; ++i) s->ring.emplace_back(gpu, bytes.d);
  s->element_size = static_cast<int>(element_bytes(info.d));
  s->elements = bytes.d / element_bytes(info.d);
  fill_gemm_operand(s->a.get(), info.a, bytes.a / element_bytes(info.a), kSeed, stream);
  fill_gemm_operand(s->b.get(), info.b, bytes.b / element_bytes(info.b), kSeed + 1, stream);
  s->out.dtype = t;
  s->out.shape = shape.to_string();
  bool chosen = false;
  for (const GemmAlgo& c : given ? std::vector<GemmAlgo>{*given} : fastest_first(*s)) {
    s->algo = c;
    s->plan.run(c, s->a.get(), s->b.get(), s->golden.get(), workspace.get(), stream);
    if (same_bits(*s, s->golden)) {
      chosen = true;
      break;
    }
    spdlog::debug("stress: GPU {} {}: {} not deterministic, next", gpu, to_string(t), c.describe());
  }
  if (!chosen)
    throw std::runtime_error(fmt::format(
        "no deterministic {} GEMM algorithm among cuBLASLt's candidates", to_string(t)));
  s->out.algo = s->algo.describe();
  reference_check(*s);
  GPB_CUDA_CHECK(cudaMemsetAsync(tallies.get(), 0, 8, stream));
  launch_buffer_hash(s->golden.get(), s->golden.bytes(), tallies.as<unsigned long long>(), stream);
  s->out.golden_hash = read_u64(tallies.get(), stream);
  states.push_back(std::move(s));
}

// The heuristic's candidates without split-K (a split-K sum's order may change between runs),
// each timed over a few runs, fastest first: stress holds the rate matmul reports.
std::vector<GemmAlgo> GemmLoad::Impl::fastest_first(DtypeState& s) {
  std::vector<std::pair<double, GemmAlgo>> timed;
  for (const GemmAlgo& c : s.plan.candidates(8)) {
    if (c.split_k() > 1) continue;
    constexpr int kRuns = 10;
    s.plan.run(c, s.a.get(), s.b.get(), s.golden.get(), workspace.get(), stream);  // warm
    start.record(stream);
    for (int i = 0; i < kRuns; ++i)
      s.plan.run(c, s.a.get(), s.b.get(), s.golden.get(), workspace.get(), stream);
    stop.record(stream);
    stop.synchronize();
    timed.emplace_back(stop.seconds_since(start), c);
  }
  std::stable_sort(timed.begin(), timed.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<GemmAlgo> out;
  for (auto& [seconds, algo] : timed) out.push_back(algo);
  return out;
}

// Runs the algorithm once more into ring[0] and compares it with `out`.
bool GemmLoad::Impl::same_bits(DtypeState& s, const DeviceBuffer& out) {
  s.plan.run(s.algo, s.a.get(), s.b.get(), s.ring[0].get(), workspace.get(), stream);
  launch_compare_reset(compare_tally(), stream);
  launch_compare_bits(s.ring[0].get(), out.get(), s.elements, s.element_size, compare_tally(),
                      stream);
  return read_u64(compare_tally(), stream) == 0;
}

// Sampled entries of the golden copy recomputed in fp64 (gemm_check.cuh's tolerance).
void GemmLoad::Impl::reference_check(DtypeState& s) {
  const GemmCheckArgs args = gemm_check_args(s.dtype, s.plan.shape(), s.a.get(), s.b.get(),
                                             s.golden.get(), kGemmCheckSamples);
  const GemmCheckTally got = check_gemm_now(args, check_tally(), stream);
  s.out.reference_ok = got.checked == args.entries && got.wrong == 0;
  if (!s.out.reference_ok)
    s.out.reference_note =
        got.checked != args.entries
            ? fmt::format("the check covered {} of {} entries", got.checked, args.entries)
            : fmt::format(
                  "{} of {} sampled entries outside the tolerance (first at row {}, "
                  "column {})",
                  got.wrong, got.checked, got.first_wrong % kSide, got.first_wrong / kSide);
}

// kRing GEMMs timed with events, then each output compared with the golden copy.
void GemmLoad::Impl::batch(DtypeState& s, Progress& progress) {
  if (hang) {  // test hook: a kernel that outlasts any hang limit, once
    hang = false;
    launch_busy_wait(std::uint64_t{600} * 1000 * 1000 * 1000, 1, stream);
  }
  start.record(stream);
  for (DeviceBuffer& d : s.ring)
    s.plan.run(s.algo, s.a.get(), s.b.get(), d.get(), workspace.get(), stream);
  stop.record(stream);
  if (fault) {  // test hook: one bit of one element of one output flipped, once
    fault = false;
    const std::size_t at = s.elements / 3 * s.element_size;
    unsigned char byte = 0;
    GPB_CUDA_CHECK(
        cudaMemcpyAsync(&byte, s.ring[1].as<char>() + at, 1, cudaMemcpyDeviceToHost, stream));
    stream.synchronize();
    byte ^= 0x01;
    GPB_CUDA_CHECK(
        cudaMemcpyAsync(s.ring[1].as<char>() + at, &byte, 1, cudaMemcpyHostToDevice, stream));
  }
  launch_compare_reset(compare_tally(), stream);
  for (DeviceBuffer& d : s.ring)
    launch_compare_bits(d.get(), s.golden.get(), s.elements, s.element_size, compare_tally(),
                        stream);
  CompareTally got{};
  GPB_CUDA_CHECK(
      cudaMemcpyAsync(&got, compare_tally(), sizeof got, cudaMemcpyDeviceToHost, stream));
  stream.synchronize();
  const double seconds = stop.seconds_since(start);
  const double flops = gemm_flops(s.plan.shape()) * kRing;
  s.out.iterations += kRing;
  s.out.mismatched += got.mismatched;
  if (got.mismatched > 0 && s.out.first_mismatch < 0)
    s.out.first_mismatch = static_cast<std::int64_t>(got.first);
  for (unsigned i = 0; i < std::min(got.recorded, kCompareRecorded); ++i)
    if (s.out.mismatch_at.size() < kCompareRecorded) {
      const auto at = static_cast<std::int64_t>(got.at[i]);
      s.out.mismatch_at.emplace_back(at % kSide, at / kSide);
    }
  s.batch_tflops.push_back(flops / seconds / 1e12);
  Progress::Totals t;
  t.flops = flops;
  t.gemm_s = seconds;
  t.errors = got.mismatched;
  progress.add(t);
}

GemmLoad::GemmLoad(int gpu, const std::vector<GemmDtype>& dtypes, bool inject_fault,
                   bool inject_hang, const GemmLoad* like)
    // The cuBLASLt handle is made on the current device: this GPU's.
    : impl_([&] {
        DeviceGuard guard(gpu);
        return std::make_unique<Impl>(gpu, inject_fault, inject_hang);
      }()) {
  for (std::size_t i = 0; i < dtypes.size(); ++i)
    impl_->set_up(dtypes[i], like ? &like->impl_->states.at(i)->algo : nullptr);
}

GemmLoad::~GemmLoad() = default;

void GemmLoad::run(const StopFn& stop, Progress& progress) {
  DeviceGuard guard(impl_->gpu);
  while (!stop())
    for (auto& s : impl_->states) {
      if (stop()) break;
      impl_->batch(*s, progress);
    }
}

std::vector<GemmOutcome> GemmLoad::outcomes() const {
  std::vector<GemmOutcome> out;
  for (const auto& s : impl_->states) {
    GemmOutcome o = s->out;
    std::vector<double> r = s->batch_tflops;
    if (!r.empty()) {
      std::sort(r.begin(), r.end());
      o.tflops = percentile_sorted(r, 0.5);
      o.tflops_low = percentile_sorted(r, 0.05);
    }
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace gpubench::stress
