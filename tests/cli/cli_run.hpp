#pragma once
// Runs the built gpubench binary as a user would, for the CLI tests: exit code, stdout, stderr.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace gpubench::cli_test {

// The binary and source tree under test: $GPUBENCH_BINARY / $GPUBENCH_SOURCE_DIR when set (a build
// copied to a GPU machine), else the build's own.
inline std::string binary() {
  const char* env = std::getenv("GPUBENCH_BINARY");
  return env && *env ? env : GPUBENCH_BINARY;
}
inline std::string source_dir() {
  const char* env = std::getenv("GPUBENCH_SOURCE_DIR");
  return env && *env ? env : GPUBENCH_SOURCE_DIR;
}

struct Outcome {
  int code = -1;
  std::string out, err;
};

inline std::filesystem::path scratch() {
  static const auto dir = [] {
    auto d =
        std::filesystem::temp_directory_path() / ("gpubench_cli_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Runs gpubench with `args` (shell words) and a 60 s limit so nothing can hang the suite.
inline Outcome run(const std::string& args, const std::string& env = "") {
  static int n = 0;
  const auto out = scratch() / ("out" + std::to_string(n) + ".txt");
  const auto err = scratch() / ("err" + std::to_string(n++) + ".txt");
  const std::string cmd = env + " timeout 60 " + binary() + " " + args + " >" + out.string() +
                          " 2>" + err.string() + " </dev/null";
  const int status = std::system(cmd.c_str());
  Outcome o;
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  o.out = slurp(out);
  o.err = slurp(err);
  return o;
}

inline std::filesystem::path write_config(const std::string& name, const std::string& text) {
  const auto p = scratch() / name;
  std::ofstream(p) << text;
  return p;
}

inline int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

inline bool has_gpu() {
  return std::system("nvidia-smi -L >/dev/null 2>&1") == 0;
}

inline void expect_bad_input(const Outcome& o, const std::string& fragment) {
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_EQ(lines(o.err), 1) << o.err;
  EXPECT_NE(o.err.find("gpubench: error:"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find(fragment), std::string::npos)
      << "expected '" << fragment << "' in: " << o.err;
}

}  // namespace gpubench::cli_test
