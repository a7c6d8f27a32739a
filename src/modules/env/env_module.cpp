// `gpubench env`: what this machine is (driver, libraries, GPUs, clocks, PCIe, NVLink, P2P) and
// what will cap performance on it. Runs, and says why, on a machine without driver or GPU.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gpubench/core/context.hpp"
#include "gpubench/core/module.hpp"
#include "gpubench/core/monitor.hpp"
#include "gpubench/core/nvml.hpp"
#include "gpubench/core/result.hpp"
#include "gpubench/core/system.hpp"
#include "gpubench/core/units.hpp"

namespace gpubench {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string gpu_label(int index) {
  return fmt::format("GPU{}", index);
}

std::string on_off(const std::optional<bool>& v) {
  return v ? (*v ? "on" : "off") : "n/a";
}

std::string or_na(const std::string& s) {
  return s.empty() ? "n/a" : s;
}

// Adds a metric only when the value is known (> 0), so tables show blanks instead of zeros.
void metric_if_known(CaseResult& c, const std::string& key, double value, const std::string& unit) {
  if (value > 0) c.metric(key, value, unit);
}

void add_software(Report& r, const System& s) {
  const std::pair<const char*, std::string> components[] = {
      {"NVIDIA driver", s.driver_version},
      {"CUDA driver API", s.cuda_driver_version},
      {"CUDA runtime", s.cuda_runtime_version},
      {"NCCL", s.nccl_version},
      {"cuBLAS", s.cublas_version},
      {"cuDNN", s.cudnn_version.empty() ? "n/a (" + s.cudnn_error + ")" : s.cudnn_version},
      {"MPI", s.mpi_version},
  };
  for (const auto& [name, version] : components) {
    CaseResult c;
    c.group = "Software";
    c.name = name;
    c.params["version"] = or_na(version);
    r.add(std::move(c));
  }
  CaseResult nvml;
  nvml.group = "Software";
  nvml.name = "NVML";
  nvml.params["version"] = s.nvml_available ? "loaded" : "unavailable: " + s.nvml_error;
  r.add(std::move(nvml));
}

void add_host(Report& r, const System& s) {
  CaseResult c;
  c.group = "Host";
  c.name = or_na(s.hostname);
  c.metric("gpus", static_cast<double>(s.gpus.size()), "");
  metric_if_known(c, "dev_shm", s.shm_bytes / kGiB, "GiB");
  r.add(std::move(c));
}

void add_gpu(Report& r, const GpuInfo& g, bool nvml_available) {
  const std::string name = gpu_label(g.index);

  CaseResult id;
  id.group = "GPUs";
  id.name = name;
  id.params["name"] = g.name;
  id.params["pci_bus_id"] = or_na(g.pci_bus_id);
  id.params["uuid"] = or_na(g.uuid);
  id.params["cc"] = fmt::format("{}.{}", g.cc_major, g.cc_minor);
  id.metric("sm_count", g.sm_count, "");
  id.metric("memory", g.memory_bytes / kGiB, "GiB");
  metric_if_known(id, "memory_free", g.memory_free_bytes / kGiB, "GiB");
  metric_if_known(id, "l2", g.l2_bytes / kMiB, "MiB");
  r.add(std::move(id));

  // Live readings for the state table; discovery keeps only what does not change.
  const Nvml& nvml = Nvml::get();
  const std::optional<nvml::Device> d = nvml.device_for_cuda(g.index);
  CaseResult state;
  state.group = "GPU state";
  state.name = name;
  state.params["ecc"] = g.ecc_enabled ? "on" : "off";
  state.params["persistence"] = on_off(g.persistence_mode);
  state.params["mig"] = on_off(g.mig_enabled);
  state.params["numa_node"] = or_na(g.numa_node);
  state.params["cpus"] = or_na(g.cpu_affinity);
  if (nvml_available) {
    const std::string throttle = throttling_list(g.clocks_event_reasons);
    state.params["throttled_by"] = throttle.empty() ? "none" : throttle;
  }
  if (g.ecc_errors_corrected)
    state.metric("ecc_corrected", static_cast<double>(*g.ecc_errors_corrected), "");
  if (g.ecc_errors_uncorrected)
    state.metric("ecc_uncorrected", static_cast<double>(*g.ecc_errors_uncorrected), "");
  if (d) {
    if (auto t = nvml.temperature_C(*d)) state.metric("temperature", *t, "C");
    if (auto p = nvml.power_W(*d)) state.metric("power", *p, "W");
  }
  metric_if_known(state, "power_limit", g.power_limit_W, "W");
  r.add(std::move(state));

  CaseResult clocks;
  clocks.group = "Clocks and memory";
  clocks.name = name;
  metric_if_known(clocks, "sm_clock", g.sm_clock_current_MHz, "MHz");
  metric_if_known(clocks, "sm_clock_max", g.sm_clock_max_MHz, "MHz");
  metric_if_known(clocks, "mem_clock", g.mem_clock_current_MHz, "MHz");
  metric_if_known(clocks, "mem_clock_max", g.memory_clock_max_MHz, "MHz");
  metric_if_known(clocks, "bus_width", g.memory_bus_width_bits, "bit");
  metric_if_known(clocks, "hbm_peak", g.hbm_GBps_theoretical(), "GB/s");
  r.add(std::move(clocks));

  CaseResult pcie;
  pcie.group = "PCIe";
  pcie.name = name;
  metric_if_known(pcie, "gen", g.pcie.gen_current, "");
  metric_if_known(pcie, "gen_max", g.pcie.gen_max, "");
  metric_if_known(pcie, "width", g.pcie.width_current, "");
  metric_if_known(pcie, "width_max", g.pcie.width_max, "");
  metric_if_known(pcie, "peak_now", g.pcie.GBps_current(), "GB/s");
  metric_if_known(pcie, "peak", g.pcie.GBps_theoretical(), "GB/s");
  if (pcie.metrics.empty()) pcie.note = "link state unknown (needs NVML)";
  r.add(std::move(pcie));

  if (nvml_available) {
    CaseResult nvlink;
    nvlink.group = "NVLink";
    nvlink.name = name;
    nvlink.metric("links_up", g.nvlink_links_up, "");
    metric_if_known(nvlink, "version", g.nvlink_version, "");
    metric_if_known(nvlink, "per_link", g.nvlink_GBps_per_link, "GB/s");
    metric_if_known(nvlink, "total", g.nvlink_links_up * g.nvlink_GBps_per_link, "GB/s");
    r.add(std::move(nvlink));
  }
}

void add_links(Report& r, const System& s) {
  for (const Link& l : s.links) {
    CaseResult c;
    c.group = "Links";
    c.name = fmt::format("{}-{}", gpu_label(l.a), gpu_label(l.b));
    c.params["connection"] = l.type == "NVLink" ? fmt::format("NVLink x{}", l.count) : l.type;
    c.params["p2p"] = l.p2p_access ? "yes" : "no";
    metric_if_known(c, "peak", l.GBps_theoretical, "GB/s");
    r.add(std::move(c));
  }
}

// GPU x GPU matrices: diagonal NaN (written as null), the same value both ways.
Matrix pair_matrix(const System& s, const std::string& name, const std::string& title,
                   const std::string& unit, double (*value)(const Link&)) {
  Matrix m;
  m.name = name;
  m.title = title;
  m.unit = unit;
  m.row_label = "GPU";
  m.col_label = "GPU";
  const std::size_t n = s.gpus.size();
  m.values.assign(n, std::vector<double>(n, std::numeric_limits<double>::quiet_NaN()));
  for (std::size_t i = 0; i < n; ++i) {
    m.rows.push_back(gpu_label(s.gpus[i].index));
    m.cols.push_back(gpu_label(s.gpus[i].index));
    for (std::size_t j = 0; j < n; ++j)
      if (const Link* l = s.link(s.gpus[i].index, s.gpus[j].index)) m.values[i][j] = value(*l);
  }
  return m;
}

void add_matrices(Report& r, const System& s) {
  if (s.gpus.size() < 2) return;
  r.matrices.push_back(pair_matrix(s, "p2p_access", "Peer-to-peer access (1: yes, 0: no)", "",
                                   [](const Link& l) { return l.p2p_access ? 1.0 : 0.0; }));
  r.matrices.push_back(
      pair_matrix(s, "p2p_connection", "Connection per GPU pair (NVLink links; 0: PCIe)", "",
                  [](const Link& l) {
                    return l.type == "none" ? std::numeric_limits<double>::quiet_NaN()
                                            : static_cast<double>(l.count);
                  }));
  r.matrices.push_back(
      pair_matrix(s, "link_GBps_theoretical", "Theoretical bandwidth per direction (GB/s)", "GB/s",
                  [](const Link& l) {
                    return l.GBps_theoretical > 0 ? l.GBps_theoretical
                                                  : std::numeric_limits<double>::quiet_NaN();
                  }));
}

void add_headline(Report& r, const System& s) {
  r.set_headline("gpu_count", static_cast<double>(s.gpus.size()), "");
  double nvlink = 0;
  double pcie = std::numeric_limits<double>::infinity();
  double hbm = std::numeric_limits<double>::infinity();
  for (const GpuInfo& g : s.gpus) {
    nvlink = std::max(nvlink, g.nvlink_links_up * g.nvlink_GBps_per_link);
    pcie = std::min(pcie, g.pcie.GBps_theoretical());
    hbm = std::min(hbm, g.hbm_GBps_theoretical());
  }
  // The weakest GPU for PCIe and HBM (a GPU with an unknown figure reports none).
  if (nvlink > 0) r.set_headline("nvlink_GBps_per_gpu", nvlink, "GB/s");
  if (std::isfinite(pcie) && pcie > 0) r.set_headline("pcie_GBps_theoretical", pcie, "GB/s");
  if (std::isfinite(hbm) && hbm > 0) r.set_headline("hbm_GBps_theoretical", hbm, "GB/s");
}

class EnvModule final : public Module {
 public:
  std::string name() const override { return "env"; }
  std::string help() const override {
    return "Driver, CUDA, NCCL, GPUs, clocks, PCIe, NVLink topology, P2P; warnings";
  }
  bool needs_gpu() const override { return false; }

  std::vector<std::string> examples() const override {
    return {"gpubench env", "gpubench env --no-warm --json -"};
  }

  void add_options(CLI::App& app) override {
    app.add_flag("--no-warm", no_warm_,
                 "Read PCIe links as they are (idle links show Gen1) instead of after a short "
                 "host-to-device copy on each GPU");
  }

  std::optional<std::string> unsupported(const System&, const std::vector<int>&) const override {
    return std::nullopt;
  }

  nlohmann::ordered_json config(bool) const override { return {{"no_warm", no_warm_}}; }

  Report run(Context& ctx) override {
    const System& s = ctx.system();
    Report r;
    r.extra = s.to_json();
    if (!s.no_gpu_reason.empty()) r.warn("no GPU: " + s.no_gpu_reason);
    for (const std::string& w : s.warnings) r.warn(w);

    add_host(r, s);
    add_software(r, s);
    for (const GpuInfo& g : s.gpus) add_gpu(r, g, s.nvml_available);
    add_links(r, s);
    add_matrices(r, s);
    add_headline(r, s);
    return r;
  }

 private:
  bool no_warm_ = false;
};

}  // namespace

ModulePtr make_env_module() {
  return std::make_unique<EnvModule>();
}

}  // namespace gpubench
