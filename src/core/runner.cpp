// Runs one module and fills the report's metadata (system, config, monitor, warnings).
#include "gpubench/core/runner.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <ctime>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/mpi.hpp"
#include "gpubench/core/progress.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/version.hpp"

namespace gpubench {

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

ojson common_json(const CommonOptions& c, const MeasureOptions& m) {
  return ojson{{"gpus", c.gpus},
               {"quick", c.quick},
               {"warmup", m.warmup},
               {"iters", m.fixed_iters},
               {"min_iters", m.min_iters},
               {"min_time_s", m.min_time_s},
               {"max_noise_pct", 100 * m.max_noise},
               {"max_time_s", m.max_time_s},
               {"l2", to_string(m.l2)}};
}

// What every report carries besides its module's results: who, when, on what, with what.
void fill_metadata(Report& r, Module& module, const CommonOptions& common, const System& system,
                   const std::string& run_id, const std::vector<std::string>& command,
                   const std::string& started) {
  // What will cap performance on this machine belongs in every report of it, not only env's.
  if (module.measures_here())
    for (const auto& w : system.warnings) r.warn(w);
  r.module = module.name();
  r.version = GPUBENCH_VERSION_STRING;
  r.run_id = run_id;
  r.started_at = started;
  r.finished_at = utc_now();
  r.command = command;
  if (module.measures_here()) r.system = system.to_json();
  r.config = effective_config(module, common);
}

}  // namespace

ojson effective_config(const Module& module, const CommonOptions& common) {
  ojson cfg = common_json(common, measure_options_from(common));
  const ojson module_cfg = module.config(common.quick);
  for (const auto& [k, v] : module_cfg.items()) cfg[k] = v;
  return cfg;
}

namespace {

// run_module, with `processes` whether the caller's run is one rank per process.
Report run_in(Module& module, const CommonOptions& common, const System& system,
              const std::string& run_id, const std::vector<std::string>& command,
              const Context::StallSink& on_stall, bool processes) {
  const std::string started = utc_now();
  (void)measure_options_from(common);  // validates --l2
  module.validate();
  std::vector<int> gpus;
  if (!system.gpus.empty())
    gpus = parse_gpu_list(common.gpus, static_cast<int>(system.gpus.size()));
  else if (common.gpus != "all")
    throw NoGpuError(
        fmt::format("--gpus {}: no usable GPU ({})", common.gpus, system.no_gpu_reason));
  if (module.needs_gpu() && gpus.empty())
    throw NoGpuError(fmt::format("no usable GPU: {}", system.no_gpu_reason.empty()
                                                          ? "none selected"
                                                          : system.no_gpu_reason));

  Report r;
  if (auto why = module.unsupported(system, gpus)) {
    r.status = "skipped";
    r.error = *why;
  } else {
    Context ctx(system, gpus, common);
    ctx.set_run(run_id, command);
    ctx.set_over_processes(processes && module.supports_mpi());
    // A stalled run's report: what the module published, with this report's metadata (the
    // monitor's figures stay out: the thread that merges them may be the stuck one).
    ctx.on_stall([&](Report& stalled) {
      fill_metadata(stalled, module, common, system, run_id, command, started);
      return on_stall ? on_stall(stalled) : kExitFailed;
    });
    progress::begin(module.name());
    struct EndProgress {
      ~EndProgress() { progress::end(); }
    } end_progress;
    try {
      r = module.run(ctx);
      r.settle_status();
    } catch (const InputError&) {
      throw;
    } catch (const NoGpuError&) {
      throw;
    } catch (const std::exception& e) {
      r.status = "failed";
      r.error = e.what();
      spdlog::error("{}: {}", module.name(), e.what());
    }
    // The run's buffers are gone (leaked where a device timed out): later runs free again.
    clear_stuck_devices();
    r.monitor = ctx.monitor_summary().to_json();
    for (const auto& g : ctx.monitor_summary().gpus) {
      if (!g.throttled()) continue;
      r.warn(
          fmt::format("GPU {} throttled while measuring ({}): figures may be below what it can do",
                      g.gpu, throttling_list(g.throttle_reasons, ", ")));
    }
    if (Context::interrupted()) {
      r.warn(fmt::format("interrupted by {}: the report holds the cases finished before it",
                         Context::interrupt_signal() == SIGTERM ? "SIGTERM" : "SIGINT"));
      if (r.status == "ok") r.status = "partial";
    }
  }
  fill_metadata(r, module, common, system, run_id, command, started);
  return r;
}

}  // namespace

Report run_module(Module& module, const CommonOptions& common, const System& system,
                  const std::string& run_id, const std::vector<std::string>& command,
                  const Context::StallSink& on_stall) {
  return run_in(module, common, system, run_id, command, on_stall, process_info().mpi);
}

Report run_nested(Module& module, Context& parent) {
  // The parent's line is taken up again however the nested run ends (a throw included).
  struct Resume {
    progress::Position at = progress::position();
    ~Resume() { progress::resume(at); }
  } resume;
  // A module nested in one that runs in this process alone runs here alone too.
  return run_in(
      module, parent.common(), parent.system(), parent.run_id(), parent.command(),
      [&parent](Report& stalled) { return parent.stall(stalled); }, parent.over_processes());
}

}  // namespace gpubench
