// HBM bandwidth per GPU: the STREAM kernels (copy, scale, add, triad, dot, read, write) on arrays
// well above L2, each verified on the GPU and spot-checked on the host before its figure is kept.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "gpubench/modules/bandwidth/bandwidth.hpp"

namespace gpubench::bandwidth {

namespace {

template <class T>
const char* dtype_name();
template <>
const char* dtype_name<float>() {
  return "fp32";
}
template <>
const char* dtype_name<double>() {
  return "fp64";
}

template <class T>
struct StreamArrays {
  StreamArrays(int device, std::size_t elements)
      : n(elements), a(device, n * sizeof(T)), b(device, n * sizeof(T)), c(device, n * sizeof(T)) {}
  std::size_t n;
  DeviceBuffer a, b, c;
  T* array(int which) const { return which == 0 ? a.as<T>() : which == 1 ? b.as<T>() : c.as<T>(); }
};

template <class T>
void launch_op(StreamOp op, const StreamArrays<T>& x, const ReduceWorkspace& ws, cudaStream_t s) {
  T* a = x.a.template as<T>();
  T* b = x.b.template as<T>();
  T* c = x.c.template as<T>();
  switch (op) {
    case StreamOp::Copy:
      launch_stream_copy<T>(a, c, x.n, s);
      break;
    case StreamOp::Scale:
      launch_stream_scale<T>(c, b, stream_scalar<T>(), x.n, s);
      break;
    case StreamOp::Add:
      launch_stream_add<T>(a, b, c, x.n, s);
      break;
    case StreamOp::Triad:
      launch_stream_triad<T>(a, b, c, stream_scalar<T>(), x.n, s);
      break;
    case StreamOp::Dot:
      launch_stream_dot<T>(a, b, x.n, ws, s);
      break;
    case StreamOp::Read:
      launch_stream_read<T>(a, x.n, ws, s);
      break;
    case StreamOp::Write:
      launch_stream_write<T>(c, stream_fill_value<T>(), x.n, s);
      break;
  }
}

template <class T>
std::uint64_t device_mismatches(Lane& lane, StreamOp op, const T* out, std::size_t n,
                                const StreamSeeds& seeds) {
  unsigned long long bad = 0;
  GPB_CUDA_CHECK(cudaMemsetAsync(lane.counter(), 0, sizeof(bad), lane.main));
  launch_stream_check<T>(op, out, n, seeds, lane.counter(), lane.main);
  GPB_CUDA_CHECK(
      cudaMemcpyAsync(&bad, lane.counter(), sizeof(bad), cudaMemcpyDeviceToHost, lane.main));
  lane.main.synchronize();
  return bad;
}

// Copies windows at the start, middle and end of `out` to the host and checks them against the
// expected values computed here: the GPU check above is anchored by an independent one.
template <class T>
std::string host_spot_check(Lane& lane, StreamOp op, const T* out, std::size_t n,
                            const StreamSeeds& seeds) {
  constexpr std::size_t kWindow = 4096;
  const std::size_t w = std::min(kWindow, n);
  std::vector<T> host(w);
  for (std::size_t start : {std::size_t{0}, (n - w) / 2, n - w}) {
    GPB_CUDA_CHECK(cudaMemcpyAsync(host.data(), out + start, w * sizeof(T), cudaMemcpyDeviceToHost,
                                   lane.main));
    lane.main.synchronize();
    for (std::size_t k = 0; k < w; ++k) {
      const T expected = stream_expected<T>(op, seeds, start + k);
      if (!stream_value_ok<T>(host[k], expected))
        return fmt::format("verification failed: element {} is {:.9g}, expected {:.9g}", start + k,
                           static_cast<double>(host[k]), static_cast<double>(expected));
    }
  }
  return "";
}

// Empty when the op left the right result, else why not.
template <class T>
std::string verify(Lane& lane, StreamOp op, const StreamArrays<T>& x, const StreamSeeds& seeds,
                   const ReduceWorkspace& ws) {
  DeviceGuard guard(lane.device);
  if (!stream_is_reduction(op)) {
    const T* out = x.array(stream_output_array(op));
    if (const std::uint64_t bad = device_mismatches<T>(lane, op, out, x.n, seeds))
      return fmt::format("verification failed: {} of {} elements wrong", bad, x.n);
    return host_spot_check<T>(lane, op, out, x.n, seeds);
  }
  // The inputs still hold their initial values (copy's expected value is array a's; with a's
  // seed swapped for b's it is array b's) ...
  std::uint64_t bad = device_mismatches<T>(lane, StreamOp::Copy, x.a.template as<T>(), x.n, seeds);
  if (op == StreamOp::Dot)
    bad += device_mismatches<T>(lane, StreamOp::Copy, x.b.template as<T>(), x.n,
                                StreamSeeds{seeds.b, seeds.b, seeds.c});
  if (bad) return fmt::format("verification failed: {} input elements changed", bad);
  // ... and the timed kernel's sum matches a double reference summed in another order.
  const double got = ws.read_result(lane.main);
  GPB_CUDA_CHECK(cudaMemsetAsync(lane.reference_sum(), 0, sizeof(double), lane.main));
  launch_reference_sum<T>(x.a.template as<T>(),
                          op == StreamOp::Dot ? x.b.template as<T>() : nullptr, x.n,
                          lane.reference_sum(), lane.main);
  double reference = 0;
  GPB_CUDA_CHECK(cudaMemcpyAsync(&reference, lane.reference_sum(), sizeof(double),
                                 cudaMemcpyDeviceToHost, lane.main));
  lane.main.synchronize();
  if (!(std::fabs(got - reference) <= kReductionTolerance * std::fabs(reference)))
    return fmt::format("verification failed: {} = {:.17g}, reference {:.17g}", to_string(op), got,
                       reference);
  return "";
}

template <class T>
void run_dtype(RunState& rs, int gpu, bool headline_dtype) {
  Lane& lane = rs.lanes.of(gpu);
  DeviceGuard guard(gpu);
  const std::size_t n = rs.settings.hbm_bytes / sizeof(T);
  const std::uint64_t array_bytes = n * sizeof(T);
  StreamArrays<T> x(gpu, n);
  ReduceWorkspace ws(gpu);
  const StreamSeeds seeds{seed_for("hbm.a", gpu), seed_for("hbm.b", gpu), seed_for("hbm.c", gpu)};

  // Arrays several times L2 leave nothing in it between iterations; flushing it anyway would
  // only add the flush's dirty lines to the timed traffic.
  MeasureOptions opts = rs.ctx.measure_options();
  int l2 = 0;
  GPB_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, gpu));
  if (opts.l2 != L2Policy::Hot && array_bytes >= 4ull * static_cast<std::uint64_t>(l2))
    opts.l2 = L2Policy::Hot;

  const GpuInfo* info = rs.ctx.system().gpu(gpu);
  const double peak = info ? info->hbm_GBps_theoretical() : 0;
  const std::string group = fmt::format("HBM {}", dtype_name<T>());

  for (StreamOp op : kStreamOps) {
    if (Context::interrupted()) return;
    const std::string name = fmt::format("{} {}", gpu_label(gpu), to_string(op));
    const std::uint64_t bytes = stream_bytes(op, n, sizeof(T));
    nlohmann::ordered_json params = {{"gpu", gpu},
                                     {"dtype", dtype_name<T>()},
                                     {"kernel", to_string(op)},
                                     {"array_bytes", array_bytes},
                                     {"elements", n},
                                     {"bytes_per_iteration", bytes},
                                     {"l2", to_string(opts.l2)}};
    // Every kernel starts from freshly initialised arrays, so its output is known exactly.
    launch_stream_init<T>(x.a.template as<T>(), x.b.template as<T>(), x.c.template as<T>(), n,
                          seeds, lane.main);
    lane.main.synchronize();
    const Measurement m = rs.ctx.measure(
        gpu, lane.main, [&](cudaStream_t s, int) { launch_op<T>(op, x, ws, s); }, opts);
    const std::string failure = verify<T>(lane, op, x, seeds, ws);
    if (!failure.empty()) {
      spdlog::error("bandwidth: {} {}: {}", group, name, failure);
      rs.report.add(failed_case(group, name, std::move(params), failure));
      continue;
    }
    CaseResult& c = rs.report.add(
        bandwidth_case(group, name, std::move(params), static_cast<double>(bytes), 1, m, peak));
    spdlog::info("bandwidth: {} {}: {:.1f} GB/s", group, name, c.metrics.front().second.value);
    if (!headline_dtype) continue;
    const Metric* eff = c.find_metric("efficiency");
    const Figure f{gpu_label(gpu), c.metrics.front().second.value, eff ? eff->value : std::nan("")};
    if (op == StreamOp::Copy) rs.figures.hbm_copy.push_back(f);
    if (op == StreamOp::Triad) rs.figures.hbm_triad.push_back(f);
  }
}

}  // namespace

void run_hbm(RunState& rs) {
  const auto& dtypes = rs.settings.hbm_dtypes;
  const bool has64 = std::find(dtypes.begin(), dtypes.end(), "fp64") != dtypes.end();
  for (int gpu : rs.ctx.gpus()) {
    for (const std::string& dtype : dtypes) {
      if (Context::interrupted()) return;
      if (dtype == "fp32")
        run_dtype<float>(rs, gpu, !has64);
      else
        run_dtype<double>(rs, gpu, true);
    }
  }
}

}  // namespace gpubench::bandwidth
