#pragma once
// What a GPU test of a subcommand under mpirun needs: the binary under test and one run of it
// under `mpirun -np N` with its JSON report read back.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace gpubench::testing {

// The binary under test: $GPUBENCH_BINARY (a build copied to another machine) or the build's.
inline std::string binary_under_test() {
  const char* env = std::getenv("GPUBENCH_BINARY");
  return env && *env ? env : GPUBENCH_BINARY;
}

// `gpubench ARGS --json FILE` under `mpirun -np np` (NCCL_NVLS_ENABLE=0, 300 s at most): its
// JSON report, or null with the reason in `why` (the console log kept for a look).
inline nlohmann::json run_under_mpirun(int np, const std::string& args, std::string& why) {
  namespace fs = std::filesystem;
  const fs::path json = fs::temp_directory_path() /
                        ("gpubench_mpi_" + std::to_string(np) + "_" + std::to_string(::getpid()));
  const std::string cmd =
      "NCCL_NVLS_ENABLE=0 timeout 300 mpirun --allow-run-as-root --bind-to none -x "
      "NCCL_NVLS_ENABLE -np " +
      std::to_string(np) + " " + binary_under_test() + " " + args + " --json " + json.string() +
      " > " + json.string() + ".log 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream f(json);
  if (!f.good()) {
    why = "no report; exit " + std::to_string(WEXITSTATUS(status)) + "; see " + json.string() +
          ".log";
    return nullptr;
  }
  auto j = nlohmann::json::parse(f);
  fs::remove(json);
  fs::remove(json.string() + ".log");
  return j;
}

}  // namespace gpubench::testing
