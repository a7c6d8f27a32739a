#pragma once
// The module contract: a module *describes* work; the core measures it and writes the reports.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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
  // False for subcommands of the product that are not built yet: listed, refused when called.
  virtual bool available() const { return true; }
  // Binds the module's own Options struct to its subcommand's flags (long names = INI keys).
  virtual void add_options(CLI::App& app) = 0;
  // Checks option values after parsing (throws InputError with one clear line).
  virtual void validate() const {}
  // Why it cannot run on this system (e.g. "needs 2 GPUs with peer access"), or nothing.
  virtual std::optional<std::string> unsupported(const System& system,
                                                 const std::vector<int>& gpus) const = 0;
  // The effective options, recorded in the report's "config".
  virtual nlohmann::ordered_json config() const = 0;
  // Runs and returns the report's data: results, headline, matrices, sweeps, warnings.
  virtual Report run(Context& ctx) = 0;
  // Does this module use the GPUs (false for env: it still runs without one).
  virtual bool needs_gpu() const { return true; }
  // Does it run one rank per process under mpirun/srun? Others run on rank 0 alone there.
  virtual bool supports_mpi() const { return false; }
};

using ModulePtr = std::unique_ptr<Module>;

// Every module of the product in a fixed order (src/core/registry.cpp).
std::vector<ModulePtr> make_modules();

}  // namespace gpubench
