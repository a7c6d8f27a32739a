#pragma once
// The command line: `gpubench <subcommand> [options]`, `gpubench all --config FILE`, `list`.
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace gpubench {

struct CommonOptions;

// Adds the options every module subcommand (and `all`) takes; `config` receives --config.
void add_common_options(CLI::App& app, CommonOptions& common, std::string& config);

// The whole program: returns the process exit code (errors.hpp). Never throws.
int run_cli(int argc, char** argv);

}  // namespace gpubench
