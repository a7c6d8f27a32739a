#pragma once
// The command line: `gpubench <subcommand> [options]`, `gpubench all --config FILE`, `list`.
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace gpubench {

struct CommonOptions;
class Module;

// Adds the options every module subcommand (and `all`) takes; `config` receives --config.
void add_common_options(CLI::App& app, CommonOptions& common, std::string& config);

// Sets `module`'s own options from `args` ("--dtypes", "bf16", ...) as its subcommand would,
// for a module run inside another (check's battery); the common options stay the parent's.
// InputError with CLI11's message on a bad argument, and on a common option among `args`.
void configure_module(Module& module, const std::vector<std::string>& args);

// The whole program: returns the process exit code (errors.hpp). Never throws.
int run_cli(int argc, char** argv);

}  // namespace gpubench
