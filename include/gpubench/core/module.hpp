#pragma once
// The module contract: a module *describes* work; the core measures it and writes the reports.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/result.hpp"

namespace CLI {
class App;
}

namespace gpubench {

class Context;
struct System;

class Module {
 public:
  virtual ~Module() = default;
  virtual std::string name() const = 0;
  virtual std::string help() const = 0;
  // Binds the module's own Options struct to its subcommand's flags (long names = INI keys).
  virtual void add_options(CLI::App& app) = 0;
  // Checks option values after parsing (throws InputError with one clear line).
  virtual void validate() const {}
  // Why it cannot run on this system (e.g. "needs 2 GPUs with peer access"), or nothing. By
  // default: it needs at least one selected GPU.
  virtual std::optional<std::string> unsupported(const System& system,
                                                 const std::vector<int>& gpus) const;
  // The effective options, recorded in the report's "config" and printed by --dry-run: those of
  // --quick's mode when `quick`.
  virtual nlohmann::ordered_json config(bool quick) const = 0;
  // Runs and returns the report's data: results, headline, matrices, sweeps, warnings.
  virtual Report run(Context& ctx) = 0;
  // Does this module use the GPUs (false for env: it still runs without one).
  virtual bool needs_gpu() const { return true; }
  // Does it run one rank per process under mpirun/srun? Others run on rank 0 alone there.
  virtual bool supports_mpi() const { return false; }
  // Does it measure this machine? compare reads earlier runs instead: `gpubench all` leaves it
  // out, and its report carries neither this machine's system nor its warnings.
  virtual bool measures_here() const { return true; }
  // Is it part of `gpubench all`? Every module that measures, but a burn-in (stress), which
  // holds the GPUs for as long as it is asked to.
  virtual bool runs_in_all() const { return measures_here(); }
  // Does it judge a run (check)? `gpubench all` runs it last and hands it, first, the reports
  // of the modules before it: it judges those instead of measuring its own, and the run ends
  // with its verdict.
  virtual bool judges() const { return false; }
  virtual void judge_these(std::vector<Report> /*reports*/) {}
  // Two or three command lines for its --help ("gpubench allreduce -b 8 -e 8G -f 2"); each one
  // is checked by a test (--dry-run).
  virtual std::vector<std::string> examples() const { return {}; }
};

// A module whose options resolve (for a mode: quick or not) into a Settings with to_json():
// validate() resolves them, so bad input fails before anything runs, and config() is the
// settings the last run used, else those the options resolve to (empty when they do not).
// The module binds opts_ in add_options() and sets effective_ in run().
template <class Options, class Settings>
class ResolvingModule : public Module {
 public:
  void validate() const override { (void)resolve(opts_, /*quick=*/false); }
  nlohmann::ordered_json config(bool quick) const override {
    if (effective_) return effective_->to_json();
    try {
      return resolve(opts_, quick).to_json();
    } catch (const InputError&) {
      return nlohmann::ordered_json::object();
    }
  }

 protected:
  virtual Settings resolve(const Options& options, bool quick) const = 0;
  Options opts_;
  std::optional<Settings> effective_;
};

using ModulePtr = std::unique_ptr<Module>;

// Every module of the product in a fixed order (src/core/registry.cpp).
std::vector<ModulePtr> make_modules();
// The module called `name`, for a module that runs another through the core (check's battery,
// advise's training runs). std::logic_error when there is none: callers name the product's own.
ModulePtr make_module(const std::string& name);

}  // namespace gpubench
