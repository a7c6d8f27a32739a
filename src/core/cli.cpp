// The command line: parse argv (and config.ini sections) with CLI11, run modules, write reports.
#include "gpubench/core/cli.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

#include "gpubench/core/config.hpp"
#include "gpubench/core/context.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/module.hpp"
#include "gpubench/core/mpi.hpp"
#include "gpubench/core/progress.hpp"
#include "gpubench/core/report.hpp"
#include "gpubench/core/runner.hpp"
#include "gpubench/core/system.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/core/watchdog.hpp"
#include "gpubench/version.hpp"

namespace gpubench {

namespace {

// A number at least (or, `strict`, above) zero, and finite: CLI11's own range validators let
// "nan" through (every comparison with it is false) and name infinity with 300 digits.
CLI::Validator finite_number(bool strict) {
  return CLI::Validator(
      [strict](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return "'" + text + "' is not a number";
        if (!std::isfinite(v)) return "'" + text + "' is not a finite number";
        if (strict ? !(v > 0) : !(v >= 0))
          return "'" + text + "' must be " + (strict ? "greater than 0" : "0 or more");
        return "";
      },
      strict ? "POSITIVE" : "NONNEGATIVE");
}

}  // namespace

constexpr const char* kCommonGroup = "Common options";

void add_common_options(CLI::App& app, CommonOptions& c, std::string& config) {
  app.option_defaults()->group(kCommonGroup);
  app.add_option("--gpus", c.gpus, "GPUs to use: all, 0,1 or 0-3")->capture_default_str();
  app.add_flag("--quick", c.quick, "Short run: smaller sizes, fewer iterations");
  app.add_option("--iters", c.iters, "Exactly N timed iterations (no noise rule)")
      ->check(finite_number(true));
  app.add_option("--warmup", c.warmup, "Untimed iterations first")->check(finite_number(false));
  app.add_option("--min-time", c.min_time, "Minimum timed GPU seconds per measurement")
      ->check(finite_number(false));
  app.add_option("--max-noise", c.max_noise, "Stop when stdev/mean <= this percent (e.g. 0.5)")
      ->check(finite_number(false));
  app.add_option("--max-time", c.max_time, "Wall-clock cap per measurement, seconds")
      ->check(finite_number(true));
  app.add_option("--l2", c.l2, "L2 policy: cold, rotate, hot")
      ->check(CLI::IsMember({"cold", "rotate", "hot"}))
      ->capture_default_str();
  app.add_option("--log-level", c.log_level, "trace, debug, info, warn, error, off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  app.add_option("--output-dir", c.output_dir,
                 "Report folder (default results/test_YYYYMMDD_HHMMSS)");
  app.add_option("--json,-J,--output_file", c.json,
                 "Also write the JSON report to FILE ('-' = stdout only)");
  app.add_option("--csv", c.csv,
                 "Also write one CSV row per case to FILE, units in the header ('-' = stdout "
                 "only)");
  app.add_flag("--no-files", c.no_files, "Write no report files");
  app.add_option("--config", config, "INI file: [common] and [<subcommand>] sections");
  app.add_flag("--dry-run", c.dry_run,
               "Check the input and print the effective configuration (JSON); touch no GPU, "
               "write nothing");
  app.option_defaults()->group("Options");
}

namespace {

constexpr const char* kCommonSection = "common";

// MPI starts only where a run needs it: a subcommand with a process-per-GPU form on a machine
// with GPUs, under mpirun/srun. Otherwise every process ends on its own (bad input, no GPU, a
// subcommand rank 0 runs alone), so a launcher without MPI support (srun without --mpi) still
// ends each rank with its exit code and message.
std::unique_ptr<MpiSession>* g_session = nullptr;
void start_mpi() {
  if (g_session && !*g_session) *g_session = std::make_unique<MpiSession>();
}

// Bad input that one MPI rank may meet alone (it depends on its node): printed by that rank.
struct RankInputError : InputError {
  using InputError::InputError;
};

// SIGINT and SIGTERM ask the run to stop between cases and report what finished; a second one
// ends the process at once.
void on_stop_signal(int sig) {
  if (Context::interrupted()) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
  Context::request_interrupt(sig);
}

// 130 after SIGINT, 143 after SIGTERM, 0 when no signal stopped the run.
int signal_exit_code() {
  switch (Context::interrupt_signal()) {
    case 0:
      return 0;
    case SIGTERM:
      return kExitTerminated;
    default:
      return kExitInterrupted;
  }
}

void setup_logging(const std::string& level) {
  static bool made = false;
  if (!made) {
    auto logger = std::make_shared<spdlog::logger>("gpubench", progress::stderr_sink());
    logger->set_pattern("[%H:%M:%S %^%l%$] %v");
    spdlog::set_default_logger(logger);
    made = true;
  }
  spdlog::set_level(spdlog::level::from_str(level));
}

// Every floating-point option must be a finite number: CLI11 reads "nan" and "inf" as doubles,
// and a NaN passes every range check (each comparison with it is false).
void refuse_non_finite(const CLI::App& app) {
  for (const CLI::Option* o : app.get_options()) {
    if (o->count() == 0 || o->get_type_name().rfind("FLOAT", 0) != 0) continue;
    for (const std::string& text : o->results()) {
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (end != text.c_str() && !std::isfinite(v))
        throw CLI::ValidationError(o->get_name(), fmt::format("'{}' is not a finite number", text));
    }
  }
}

// Arguments no option of `app` took (parsed with allow_extras), refused in the order they were
// given in `args` (CLI11's own message lists them backwards).
void refuse_extras(const CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> extras = app.remaining();
  if (extras.empty()) return;
  const bool one = extras.size() == 1;
  std::string listed;
  for (const std::string& a : args) {
    const auto it = std::find(extras.begin(), extras.end(), a);
    if (it == extras.end()) continue;
    listed += (listed.empty() ? "" : " ") + a;
    extras.erase(it);
  }
  throw CLI::ParseError(
      fmt::format("The following argument{} not expected: {}", one ? " was" : "s were", listed),
      CLI::ExitCodes::ExtrasError);
}

// A fresh CLI11 app for one module: common options + the module's own.
struct ModuleApp {
  CommonOptions common;
  std::string config;
  CLI::App app;
  ModuleApp(Module& m) : app(m.help(), m.name()) {
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    m.add_options(app);  // its own options first, in --help too
    add_common_options(app, common, config);
  }
  void parse(const std::vector<std::string>& args) {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 consumes from the back
    app.allow_extras(true);
    app.parse(reversed);
    refuse_non_finite(app);
    refuse_extras(app, args);
  }
};

// Flags of `app` (options taking no value), so "quick = true" becomes "--quick".
std::vector<std::string> flag_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* o : app.get_options())
    if (o->get_type_size_max() == 0)
      for (const auto& n : o->get_lnames()) out.push_back(n);
  return out;
}

// Checks every key of [common] and of the module's section against its options.
void check_section_keys(const IniFile& ini, const std::string& section, const CLI::App& app) {
  const IniSection* s = ini.find(section);
  if (!s) return;
  for (const auto& e : s->entries) {
    if (e.key == "config")
      throw InputError(
          fmt::format("{}:{}: 'config' cannot be set inside a config file", ini.origin, e.line));
    if (!app.get_option_no_throw("--" + e.key))
      throw InputError(
          fmt::format("{}:{}: unknown key '{}' in [{}]", ini.origin, e.line, e.key, section));
  }
}

void check_sections(const IniFile& ini, const std::vector<ModulePtr>& modules) {
  for (const auto& s : ini.sections) {
    if (s.name == kCommonSection) continue;
    bool known = false;
    for (const auto& m : modules) known = known || m->name() == s.name;
    if (!known)
      throw InputError(
          fmt::format("{}:{}: unknown section [{}] (sections: common and the subcommands)",
                      ini.origin, s.line, s.name));
  }
}

// Parses argv-after-subcommand for `m`, with the config's [common] and [m] sections first so
// that the command line wins. Returns the effective common options.
CommonOptions parse_module(Module& m, const std::vector<std::string>& cli_args,
                           const IniFile* ini) {
  std::vector<std::string> args;
  if (ini) {
    ModuleApp probe(m);
    check_section_keys(*ini, kCommonSection, probe.app);
    check_section_keys(*ini, m.name(), probe.app);
    const auto flags = flag_names(probe.app);
    for (auto& a : section_args(*ini, kCommonSection, flags)) args.push_back(a);
    for (auto& a : section_args(*ini, m.name(), flags)) args.push_back(a);
  }
  args.insert(args.end(), cli_args.begin(), cli_args.end());
  ModuleApp parsed(m);
  try {
    parsed.parse(args);
  } catch (const CLI::ParseError& e) {
    throw InputError(ini ? fmt::format("{} (with {})", e.what(), ini->origin)
                         : std::string(e.what()));
  }
  return parsed.common;
}

}  // namespace

void configure_module(Module& module, const std::vector<std::string>& args) {
  ModuleApp parsed(module);
  try {
    parsed.parse(args);
  } catch (const CLI::ParseError& e) {
    std::string given;
    for (const std::string& a : args) given += " " + a;
    throw InputError(fmt::format("{}{}: {}", module.name(), given, e.what()));
  }
  for (const CLI::Option* o : parsed.app.get_options())
    if (o->count() > 0 && o->get_group() == kCommonGroup)
      throw InputError(fmt::format("{}: {} is a common option", module.name(), o->get_name()));
}

namespace {

// Everything about the input that needs no GPU, before any hardware is touched: the common
// options, the GPU list's syntax and the module's own options.
void check_input(Module& m, const CommonOptions& c) {
  if (c.json == "-" && c.csv == "-")
    throw InputError("--json - and --csv - both want stdout: give one of them a file");
  (void)measure_options_from(c);
  (void)parse_gpu_list(c.gpus, -1);
  m.validate();
}

// --json - or --csv - takes stdout: the console tables then go to stderr.
bool stdout_taken(const CommonOptions& c) {
  return c.json == "-" || c.csv == "-";
}

void print_report(const Report& r, const CommonOptions& c) {
  if (c.json == "-") std::cout << render_json(r);
  if (c.csv == "-") std::cout << render_csv({r});
  (stdout_taken(c) ? std::cerr : std::cout) << render_console(r);
  std::cout.flush();
}

// Under MPI a rank that failed or stalled on its own leaves the report to rank 0, which
// writes what finished and ends the job (its watchdog fires if it waits on this rank). Should
// rank 0 be the one stuck, this rank ends the job itself once rank 0's watchdog would have
// fired: its limit, and 10 s more. Returns the exit code to end with.
int wait_for_lead() {
  std::this_thread::sleep_for(std::chrono::duration<double>(stall_limit() + 10));
  return kExitFailed;
}

int exit_code_of(const Report& r) {
  if (r.status != "ok") return kExitFailed;
  return r.verdict && r.verdict->level == "FAIL" ? kExitVerdict : kExitOk;
}

bool writes_folder(const CommonOptions& c) {
  return !c.no_files && !(stdout_taken(c) && c.output_dir.empty());
}
bool writes_json_file(const CommonOptions& c) {
  return !c.json.empty() && c.json != "-";
}
bool writes_csv_file(const CommonOptions& c) {
  return !c.csv.empty() && c.csv != "-";
}

// Every output path, checked before anything runs: a bad one is bad input (exit 2).
void check_outputs(const CommonOptions& c) {
  if (writes_folder(c)) check_output_dir(c.output_dir);
  if (writes_json_file(c)) check_output_file(c.json, "--json");
  if (writes_csv_file(c)) check_output_file(c.csv, "--csv");
}

// Where a finished run's reports go. The folder is made only now, when there is a report to
// put in it, so input refused at any point before leaves nothing behind.
class Output {
 public:
  Output(const CommonOptions& c, std::string run_id) : c_(c), run_id_(std::move(run_id)) {}
  const std::string& run_id() const noexcept { return run_id_; }
  const std::filesystem::path& dir() const noexcept { return dir_; }
  bool failed() const noexcept { return !failures_.empty(); }

  // Writes <dir>/<module>.json|.md (the report's run_id becomes the folder's name). A failure
  // is printed with the path and remembered; the console output stands.
  void write_report(Report& r) {
    if (!writes_folder(c_)) return;
    attempt([&] {
      if (dir_.empty()) dir_ = make_output_dir(c_.output_dir, run_id_);
      r.run_id = run_id_;
      write_report_files(dir_, r);
    });
  }
  void write_file(const std::filesystem::path& path, const std::string& text) {
    attempt([&] { write_output_file(path, text); });
  }
  void announce() const {
    if (!dir_.empty())
      (stdout_taken(c_) ? std::cerr : std::cout) << "report: " << dir_.string() << "\n";
  }

 private:
  template <class F>
  void attempt(F&& f) {
    try {
      f();
    } catch (const std::exception& e) {  // WriteError, or the folder gone since the check
      failures_.push_back(e.what());
      std::fprintf(stderr, "gpubench: error: report not written: %s\n", e.what());
    }
  }
  const CommonOptions& c_;
  std::string run_id_;
  std::filesystem::path dir_;
  std::vector<std::string> failures_;
};

// The exit code of a run: a stopping signal first, then a report not written, then the run's.
int final_exit_code(int run_code, const Output& out) {
  if (const int s = signal_exit_code()) return s;
  if (out.failed()) return kExitNotWritten;
  return run_code;
}

// A module's report where the user asked for it: the folder, the console, --json FILE.
void deliver(Report& r, const CommonOptions& c, Output& out) {
  out.write_report(r);
  print_report(r, c);
  if (writes_json_file(c)) out.write_file(c.json, render_json(r));
  if (writes_csv_file(c)) out.write_file(c.csv, render_csv({r}));
  out.announce();
}

int cmd_list(const std::vector<ModulePtr>& modules) {
  const System sys = System::discover(false);
  const std::vector<int> all_gpus = [&] {
    std::vector<int> v;
    for (const auto& g : sys.gpus) v.push_back(g.index);
    return v;
  }();
  std::cout << fmt::format("{:<10} {:<10} {}\n", "module", "can run", "about");
  for (const auto& m : modules) {
    std::string state = "yes";
    std::string about = m->help();
    if (m->needs_gpu() && sys.gpus.empty()) {
      state = "no";
      about += " [no GPU: " + sys.no_gpu_reason + "]";
    } else if (auto why = m->unsupported(sys, all_gpus)) {
      state = "no";
      about += " [" + *why + "]";
    }
    std::cout << fmt::format("{:<10} {:<10} {}\n", m->name(), state, about);
  }
  return kExitOk;
}

int cmd_module(Module& m, const std::vector<std::string>& cli_args, const std::string& config,
               const std::vector<std::string>& command) {
  IniFile ini;
  if (!config.empty()) ini = load_ini(config);
  if (!config.empty()) check_sections(ini, make_modules());
  const CommonOptions c = parse_module(m, cli_args, config.empty() ? nullptr : &ini);
  // Under mpirun/srun every process parses the same arguments; rank 0 writes and prints, and a
  // module without a process-per-GPU form runs on rank 0 alone.
  const ProcessInfo launch = detect_launch();
  const bool lead = launch.rank == 0;
  if (launch.size > 1 && !m.supports_mpi() && !lead) return kExitOk;
  setup_logging(lead ? c.log_level : std::string("warn"));
  check_input(m, c);
  if (c.dry_run) {
    if (lead)
      std::cout << ojson{{"module", m.name()}, {"config", effective_config(m, c)}}.dump(2) << "\n";
    return kExitOk;
  }
  if (lead) check_outputs(c);
  Output out(c, make_run_id());
  const System sys =
      System::discover(m.name() == "env" && !m.config(c.quick).value("no_warm", false));
  if (launch.size > 1 && m.supports_mpi() && !sys.gpus.empty()) start_mpi();
  const ProcessInfo& proc = process_info();
  // A stalled run: rank 0 writes what finished, then the job ends (see Context::watchdog).
  const auto on_stall = [&](Report& stalled) {
    if (!lead) return wait_for_lead();
    deliver(stalled, c, out);
    return final_exit_code(exit_code_of(stalled), out);
  };
  Report r;
  try {
    r = run_module(m, c, sys, out.run_id(), command, on_stall);
  } catch (const InputError& e) {
    // Found on this rank's node (its GPUs, its share of them): under MPI the other ranks may
    // not have it, so this rank says it, with its number.
    if (proc.mpi) throw RankInputError(e.what());
    throw;
  }
  if (r.status == "skipped") throw InputError(fmt::format("{}: {}", m.name(), r.error));
  if (launch.size > 1 && !m.supports_mpi())
    r.warn(fmt::format(
        "{} has no process-per-GPU form: under {} ({} processes) it ran in rank 0 alone, on the "
        "GPUs that rank sees; run it once per node instead",
        m.name(), launch.launcher, launch.size));
  // Under MPI a rank whose run broke (a timeout, a GPU error) may have left the others inside a
  // collective or an MPI call: after rank 0's report, end the whole job.
  const bool end_job = proc.mpi && proc.size > 1 && !r.error.empty();
  if (!lead) {
    if (end_job) {
      std::fprintf(stderr, "gpubench: error: [rank %d] %s\n", proc.rank, r.error.c_str());
      std::fflush(stderr);
      abort_job(wait_for_lead());
    }
    if (const int code = signal_exit_code()) return code;
    return exit_code_of(r);
  }
  deliver(r, c, out);
  const int code = final_exit_code(exit_code_of(r), out);
  if (end_job) {
    std::cout.flush();
    abort_job(code);  // a signal's code, or 4 when the report could not be written, stand
  }
  return code;
}

// Runs one module of `all`; a module that cannot run becomes a failed report.
Report run_in_all(Module& m, const CommonOptions& c, const System& sys, const std::string& run_id,
                  const std::vector<std::string>& command, const Context::StallSink& on_stall,
                  bool& no_gpu) {
  Report r;
  try {
    r = run_module(m, c, sys, run_id, command, on_stall);
  } catch (const NoGpuError& e) {
    no_gpu = true;
    r.module = m.name();
    r.status = "failed";
    r.error = e.what();
  } catch (const InputError& e) {
    r.module = m.name();
    r.status = "failed";
    r.error = e.what();
  }
  if (r.status == "failed") spdlog::error("{} failed: {}", m.name(), r.error);
  return r;
}

// The end of `all` on rank 0: summary.md, the JSON array, the summary line; the exit code.
int finish_all(const std::vector<Report>& reports, const CommonOptions& first, bool no_gpu,
               Output& out) {
  if (!out.dir().empty())
    out.write_file(out.dir() / "summary.md", render_summary_markdown(reports));
  ojson all = ojson::array();
  for (const auto& r : reports) all.push_back(to_json(r));
  if (first.json == "-") std::cout << all.dump(2) << "\n";
  if (first.csv == "-") std::cout << render_csv(reports);
  if (writes_json_file(first)) out.write_file(first.json, all.dump(2) + "\n");
  if (writes_csv_file(first)) out.write_file(first.csv, render_csv(reports));
  std::string failed;
  const Verdict* verdict = nullptr;
  for (const auto& r : reports) {
    if (r.status == "failed") failed += (failed.empty() ? "" : "; ") + r.module + ": " + r.error;
    if (r.verdict) verdict = &*r.verdict;
  }
  std::ostream& shown = stdout_taken(first) ? std::cerr : std::cout;
  shown << "summary: " << reports.size() << " modules, "
        << (failed.empty() ? "all ok" : "failed: " + failed) << "\n";
  if (verdict) shown << verdict->line << "\n";
  out.announce();
  int code = failed.empty() ? kExitOk : kExitFailed;
  if (code == kExitOk && verdict && verdict->level == "FAIL") code = kExitVerdict;
  if (no_gpu && failed.find("no usable GPU") != std::string::npos) code = kExitNoGpu;
  return final_exit_code(code, out);
}

int cmd_all(std::vector<ModulePtr>& modules, const std::vector<std::string>& cli_args,
            const std::string& config, const std::vector<std::string>& command) {
  IniFile ini;
  if (!config.empty()) {
    ini = load_ini(config);
    check_sections(ini, modules);
  }
  // Parse and validate every module's options first: bad input stops the run before it starts.
  std::vector<std::pair<Module*, CommonOptions>> plan;
  for (auto& m : modules) {
    if (!m->runs_in_all()) continue;
    CommonOptions c = parse_module(*m, cli_args, config.empty() ? nullptr : &ini);
    check_input(*m, c);
    plan.emplace_back(m.get(), c);
  }
  const CommonOptions& first = plan.front().second;
  const ProcessInfo launch = detect_launch();
  const bool lead = launch.rank == 0;
  if (first.dry_run) {
    ojson all = ojson::array();
    for (auto& [m, c] : plan)
      all.push_back({{"module", m->name()}, {"config", effective_config(*m, c)}});
    if (lead) std::cout << all.dump(2) << "\n";
    return kExitOk;
  }
  setup_logging(lead ? first.log_level : std::string("warn"));
  if (lead) check_outputs(first);
  Output out(first, make_run_id());
  const System sys = System::discover(true);
  if (launch.size > 1 && !sys.gpus.empty()) start_mpi();
  const ProcessInfo& proc = process_info();
  std::vector<Report> reports;
  bool no_gpu = false;
  // A stalled module: rank 0 writes it and the summary of the modules before it.
  const auto on_stall = [&](Report& stalled) {
    if (!lead) return wait_for_lead();
    out.write_report(stalled);
    if (!stdout_taken(first)) std::cout << render_console(stalled) << "\n" << std::flush;
    reports.push_back(stalled);
    return finish_all(reports, first, no_gpu, out);
  };
  for (auto& [m, c] : plan) {
    if (any_process(Context::interrupted())) break;  // every process stops at the same module
    if (launch.size > 1 && !m->supports_mpi() && !lead) continue;
    if (m->judges()) m->judge_these(reports);
    spdlog::info("running {}", m->name());
    Report r = run_in_all(*m, c, sys, out.run_id(), command, on_stall, no_gpu);
    // Under MPI the processes agree on the outcome before the next module: a failure on any
    // rank fails the module everywhere, and that rank says why, once, with its number.
    if (proc.mpi && m->supports_mpi() && any_process(r.status == "failed")) {
      if (r.status != "failed") {
        r.status = "failed";
        r.error = "another rank failed (its error is on stderr)";
      } else if (!lead) {
        std::fprintf(stderr, "gpubench: error: [rank %d] %s: %s\n", proc.rank, m->name().c_str(),
                     r.error.c_str());
      }
    }
    if (lead && !r.run_id.empty()) out.write_report(r);
    if (lead && !stdout_taken(first)) std::cout << render_console(r) << "\n" << std::flush;
    reports.push_back(std::move(r));
  }
  if (!lead) return kExitOk;
  return finish_all(reports, first, no_gpu, out);
}

}  // namespace

namespace {
// Prints the error once per job (rank 0; every rank for errors only it may have hit) and, under
// MPI, ends every process so none waits forever on a rank that stopped.
int fail(int code, const char* what, bool same_on_every_rank) {
  const ProcessInfo launch = detect_launch();
  if (launch.size <= 1) {
    std::fprintf(stderr, "gpubench: error: %s\n", what);
    return code;
  }
  if (launch.rank == 0 || !same_on_every_rank)
    std::fprintf(stderr, "gpubench: error: [rank %d] %s\n", launch.rank, what);
  std::fflush(stderr);
  if (!process_info().mpi) return code;  // MPI not started: every process ends on its own
  abort_job(code);
}
}  // namespace

int run_cli(int argc, char** argv) {
  std::vector<std::string> command(argv, argv + argc);
  std::unique_ptr<MpiSession> mpi;  // finalised when run_cli returns
  g_session = &mpi;
  // pp (alone or in all) before any CUDA context (MPI_Init may make one): up to 32 hardware work
  // queues per GPU instead of the driver's 8, unless the user set it, so that a stream waiting on
  // a flag in GPU memory (pp's copy-engine transfers) does not share a queue with, and hold up,
  // the stream whose work raises that flag. Every report records the value (system.environment).
  if (argc > 1 && (std::strcmp(argv[1], "pp") == 0 || std::strcmp(argv[1], "all") == 0))
    ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  try {
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
    auto modules = make_modules();
    CLI::App app{
        "gpubench: what a GPU server really delivers for LLM work, and which parallel layout to "
        "run on it"};
    app.set_version_flag("--version", std::string("gpubench ") + GPUBENCH_VERSION_STRING);
    app.require_subcommand(1);
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    // Top-level parse: validates the command line and serves --help for every subcommand.
    std::vector<std::unique_ptr<CommonOptions>> commons;
    std::vector<std::unique_ptr<std::string>> configs;
    std::map<std::string, CLI::App*> subs;
    std::vector<const CLI::App*> strict;  // extra arguments refused
    for (auto& m : modules) {
      CLI::App* sub = app.add_subcommand(m->name(), m->help());
      commons.push_back(std::make_unique<CommonOptions>());
      configs.push_back(std::make_unique<std::string>());
      m->add_options(*sub);  // its own options first in --help, the common ones after
      add_common_options(*sub, *commons.back(), *configs.back());
      std::string footer;
      for (const std::string& e : m->examples()) footer += "\n  " + e;
      if (!footer.empty()) sub->footer("Examples:" + footer);
      sub->allow_extras();  // refused below, in the order given
      strict.push_back(sub);
      subs[m->name()] = sub;
    }
    CLI::App* list = app.add_subcommand("list", "List the modules and whether each can run here");
    CLI::App* all = app.add_subcommand("all", "Run every module (sections of --config)");
    CommonOptions all_common;
    std::string all_config;
    add_common_options(*all, all_common, all_config);
    all->allow_extras();  // refused below, in the order given
    strict.push_back(all);
    // CLI11 would call an unknown word an "extra argument": name it as a subcommand instead.
    const auto is_subcommand = [&](const std::string& word) {
      for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
        if (sub->get_name() == word) return true;
      return false;
    };
    if (argc > 1 && argv[1][0] != '-' && !is_subcommand(argv[1]))
      throw InputError(fmt::format("unknown subcommand '{}' (see gpubench --help)", argv[1]));
    try {
      app.parse(argc, argv);
      const std::vector<std::string> given(argv + 1, argv + argc);
      for (const CLI::App* sub : strict)
        if (sub->parsed()) refuse_extras(*sub, given);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      std::fprintf(stderr, "gpubench: error: %s\n", e.what());
      return kExitBadInput;
    }
    if (list->parsed()) return cmd_list(modules);
    // Arguments after the subcommand name, for the fresh per-module parse.
    auto rest_after = [&](const std::string& name) {
      std::vector<std::string> rest;
      bool found = false;
      for (int i = 1; i < argc; ++i) {
        if (found)
          rest.emplace_back(argv[i]);
        else if (argv[i] == name)
          found = true;
      }
      return rest;
    };
    if (all->parsed()) return cmd_all(modules, rest_after("all"), all_config, command);
    for (std::size_t i = 0; i < modules.size(); ++i)
      if (subs[modules[i]->name()]->parsed())
        return cmd_module(*modules[i], rest_after(modules[i]->name()), *configs[i], command);
    throw InputError("no subcommand given (try --help)");
  } catch (const RankInputError& e) {
    return fail(kExitBadInput, e.what(), false);
  } catch (const InputError& e) {
    return fail(kExitBadInput, e.what(), true);
  } catch (const NoGpuError& e) {
    return fail(kExitNoGpu, e.what(), false);  // a node's own finding: each rank says it
  } catch (const WriteError& e) {
    return fail(kExitNotWritten, e.what(), false);
  } catch (const std::exception& e) {
    return fail(kExitFailed, e.what(), false);
  }
}

}  // namespace gpubench
