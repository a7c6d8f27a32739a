// gpubench: one binary, a subcommand per module.
#include "gpubench/core/cli.hpp"

int main(int argc, char** argv) {
  return gpubench::run_cli(argc, argv);
}
