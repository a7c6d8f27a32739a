// `gpubench bandwidth`: its options, the order of its parts, and the headline. The parts
// (hbm, host, p2p, sweep, latency) live in their own files.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <optional>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/progress.hpp"
#include "gpubench/modules/bandwidth/bandwidth.hpp"

namespace gpubench {

namespace {

using bandwidth::Part;

class BandwidthModule final : public ResolvingModule<bandwidth::Options, bandwidth::Settings> {
 public:
  std::string name() const override { return "bandwidth"; }
  std::string help() const override {
    return "HBM, host<->device, GPU<->GPU bandwidth and latency, verified";
  }

  std::vector<std::string> examples() const override {
    return {"gpubench bandwidth --gpus 0,1",
            "gpubench bandwidth --tests hbm,p2p --sweep-sizes 1M:2G:x4",
            "gpubench bandwidth --quick --json -"};
  }

  void add_options(CLI::App& app) override {
    opts_ = bandwidth::Options{};  // a fresh parse starts from the defaults
    effective_.reset();
    app.add_option("--tests", opts_.tests, "Parts to run: hbm,host,p2p,sweep,latency or all")
        ->capture_default_str();
    app.add_option("--hbm-size", opts_.hbm_size,
                   "Bytes per HBM array (default 2G; 512M with --quick)");
    app.add_option("--hbm-dtypes", opts_.hbm_dtypes, "HBM element types: fp32,fp64")
        ->capture_default_str();
    app.add_option("--host-size", opts_.host_size,
                   "Host<->device transfer size (default 1G; 256M with --quick)");
    app.add_option("--p2p-size", opts_.p2p_size,
                   "GPU<->GPU transfer size (default 1G; 256M with --quick)");
    app.add_option(
        "--sweep-sizes", opts_.sweep_sizes,
        "Transfer sizes of the size sweep (default 1M,2M,4M,...,2G; 1M,16M,256M with --quick)");
    app.add_option("--latency-hops", opts_.latency_hops, "Dependent loads per latency measurement")
        ->capture_default_str();
  }

  Report run(Context& ctx) override {
    const bandwidth::Settings settings = bandwidth::resolve_settings(opts_, ctx.quick());
    effective_ = settings;
    bandwidth::check_memory_fits(ctx, settings);

    Report report;
    report.module = name();
    report.config = settings.to_json();
    bandwidth::Figures figures;
    bandwidth::Lanes lanes(ctx.gpus());
    bandwidth::RunState rs{ctx, settings, report, figures, lanes};
    progress::expect(settings.parts.size());
    for (Part part : settings.parts) {
      if (Context::interrupted()) break;
      progress::next(bandwidth::to_string(part));
      run_part(part, rs);
    }
    bandwidth::set_headline(report, figures);
    if (Context::interrupted())
      report.warn("interrupted: only the parts and cases finished are reported");
    return report;
  }

 private:
  // A part that fails outside a verified case (an allocation, a CUDA error) is recorded as a
  // failed case and the next part still runs; bad input still ends the run.
  static void run_part(Part part, bandwidth::RunState& rs) {
    try {
      switch (part) {
        case Part::Hbm:
          bandwidth::run_hbm(rs);
          break;
        case Part::Host:
          bandwidth::run_host(rs);
          break;
        case Part::P2p:
          bandwidth::run_p2p(rs);
          break;
        case Part::Sweep:
          bandwidth::run_sweep(rs);
          break;
        case Part::Latency:
          bandwidth::run_latency(rs);
          break;
      }
    } catch (const InputError&) {
      throw;
    } catch (const NoGpuError&) {
      throw;
    } catch (const std::exception& e) {
      spdlog::error("bandwidth: {}: {}", bandwidth::to_string(part), e.what());
      rs.report.add(bandwidth::failed_case(bandwidth::to_string(part), "error", {}, e.what()));
      rs.report.warn(
          fmt::format("bandwidth {} stopped early: {}", bandwidth::to_string(part), e.what()));
    }
  }

  bandwidth::Settings resolve(const bandwidth::Options& o, bool quick) const override {
    return bandwidth::resolve_settings(o, quick);
  }
};

}  // namespace

ModulePtr make_bandwidth_module() {
  return std::make_unique<BandwidthModule>();
}

}  // namespace gpubench
