// Every command a user is shown works: each subcommand's --help examples and every gpubench
// command in README.md are run with --dry-run (input checked, configuration printed, no GPU
// touched) and must be accepted. --help lists a subcommand's own options before the common ones.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.hpp"

using namespace gpubench::cli_test;

namespace {

const char* const kSubcommands[] = {"env", "bandwidth", "allreduce", "matmul", "seqlen",
                                    "tp",  "pp",        "compare",   "check",  "stress"};

// "mpirun -np 4 gpubench allreduce -b 64M" -> "allreduce -b 64M"; "" when not a gpubench command.
std::string gpubench_args(std::string line) {
  line = std::regex_replace(line, std::regex(R"(\s+#.*$)"), "");  // a shell comment
  const std::regex launcher(R"(^\s*(mpirun|srun)(\s+-\S+(\s+\d+)?)*\s+)");
  line = std::regex_replace(line, launcher, "");
  const std::regex head(R"(^\s*(\S*/)?gpubench\s+)");
  std::smatch m;
  if (!std::regex_search(line, m, head)) return "";
  return m.suffix().str();
}

// Runs `args` from the source tree (config paths are relative to it) with --dry-run.
Outcome dry(const std::string& args) {
  return run(args + " --dry-run", "cd " + source_dir() + " &&");
}

std::vector<std::string> examples_of(const std::string& sub) {
  const Outcome o = run(sub + " --help");
  std::vector<std::string> out;
  std::istringstream in(o.out);
  std::string line;
  bool in_examples = false;
  while (std::getline(in, line)) {
    if (line.rfind("Examples:", 0) == 0) {
      in_examples = true;
      continue;
    }
    if (in_examples && !line.empty()) out.push_back(line);
  }
  return out;
}

}  // namespace

TEST(CliExamples, HelpShowsOwnOptionsFirstAndExamples) {
  for (const char* sub : kSubcommands) {
    SCOPED_TRACE(sub);
    const Outcome o = run(std::string(sub) + " --help");
    EXPECT_EQ(o.code, 0);
    const auto common = o.out.find("Common options");
    ASSERT_NE(common, std::string::npos) << o.out;
    EXPECT_LT(o.out.find("--"), common) << "its own options come first";
    EXPECT_GT(o.out.find("--gpus"), common);
    EXPECT_GE(examples_of(sub).size(), 2u) << o.out;
  }
}

TEST(CliExamples, EveryHelpExampleIsAccepted) {
  for (const char* sub : kSubcommands)
    for (const std::string& e : examples_of(sub)) {
      const std::string args = gpubench_args(e);
      ASSERT_FALSE(args.empty()) << e;
      const Outcome o = dry(args);
      EXPECT_EQ(o.code, 0) << e << "\n" << o.err;
      EXPECT_NE(o.out.find("\"config\""), std::string::npos) << e;
    }
}

TEST(CliExamples, EveryReadmeCommandIsAccepted) {
  const std::string readme = slurp(std::filesystem::path(source_dir()) / "README.md");
  ASSERT_FALSE(readme.empty());
  std::set<std::string> commands;
  // `gpubench ...` in the text and tables, and whole lines inside ``` blocks.
  const std::regex inline_code(R"(`((?:\S*/)?gpubench [^`]+)`)");
  for (auto it = std::sregex_iterator(readme.begin(), readme.end(), inline_code);
       it != std::sregex_iterator(); ++it)
    commands.insert((*it)[1].str());
  std::istringstream in(readme);
  std::string line;
  bool block = false;
  while (std::getline(in, line)) {
    if (line.rfind("```", 0) == 0) {
      block = !block;
      continue;
    }
    if (block && !gpubench_args(line).empty()) commands.insert(line);
  }
  int checked = 0;
  for (const std::string& c : commands) {
    std::string args = gpubench_args(c);
    // Placeholders (FILE, <subcommand>, RUN_DIR) and what is not a subcommand run are not
    // commands to run; --version and list run as they are.
    if (args.find('<') != std::string::npos || std::regex_search(args, std::regex("[A-Z]{4,}")))
      continue;
    const std::string first = args.substr(0, args.find(' '));
    if (first == "list" || first == "--version") {
      EXPECT_EQ(run(args).code, 0) << c;
      continue;
    }
    if (first.rfind("-", 0) == 0) continue;
    const Outcome o = dry(args);
    EXPECT_EQ(o.code, 0) << c << "\n" << o.err;
    ++checked;
  }
  EXPECT_GE(checked, 10) << "the README's examples were not found";
}

TEST(CliExamples, DryRunTouchesNothingAndRefusesBadInput) {
  const auto dir = scratch() / "dry_run_dir";
  const Outcome o = run("bandwidth --dry-run --output-dir " + dir.string());
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir));
  EXPECT_NE(o.out.find("\"hbm_dtypes\""), std::string::npos) << o.out;
  expect_bad_input(run("matmul --dtypes bf17 --dry-run"), "bf17");
  // Arguments nothing takes, in the order given (on the command line, in a module's parse, in
  // all's).
  expect_bad_input(run("matmul --foo 1 --bar 2 --dry-run"),
                   "arguments were not expected: --foo 1 --bar 2");
  expect_bad_input(run("all --foo x --dry-run"), "arguments were not expected: --foo x");
  expect_bad_input(run("env extra"), "argument was not expected: extra");
  const Outcome all = run("all --config config/quick.ini --dry-run", "cd " + source_dir() + " &&");
  EXPECT_EQ(all.code, 0) << all.err;
  EXPECT_NE(all.out.find("\"module\": \"pp\""), std::string::npos);
  // --quick's own defaults, not the full run's, in the configuration printed.
  const Outcome quick = run("seqlen --quick --dry-run");
  EXPECT_NE(quick.out.find("\"seq_lens\": [\n      512,\n      2048\n    ]"), std::string::npos)
      << quick.out;
  // A quick advise of the run's model: the best layout beside one GPU.
  const std::size_t advise = all.out.find("\"module\": \"advise\"");
  ASSERT_NE(advise, std::string::npos) << all.out;
  EXPECT_NE(all.out.find("\"top\": 1", advise), std::string::npos);
}

// nccl-tests' own examples and flags, as its users type them: each accepted with its meaning,
// or refused by name when gpubench does not do it (never taken with another meaning). The
// examples of nccl-tests' README and of alltoallv_perf's documentation come first, then every
// flag of its README's argument list under its short and long names.
TEST(CliExamples, NcclTestsFlags) {
  const char* const accepted[] = {
      "-b 8 -e 128M -f 2 -g 8",                    // nccl-tests README, one node
      "-b 8 -e 8G -f 2 -g 1",                      // nccl-tests README, under mpirun -np 64 -N 8
      "--collective alltoallv -b 1M -e 32M -f 2",  // alltoallv_perf's examples
      "--collective alltoallv --skew 0.0 -b 1M -e 32M -f 2",  // NCCL_TESTS_ALLTOALLV_SPREAD=0.0
      "--nthreads 1 --ngpus 1 --minbytes 32M --maxbytes 32M --stepbytes 1M",
      "-b 32M -e 32M -i 1M",
      "--op all --datatype all --root all",
      "-o sum -d float -r 0",
      "-r -1 --collective broadcast,reduce,gather,scatter",
      "--iters 20 --warmup_iters 1 --agg_iters 1 --run_cycles 1 --average 1",
      "--per_iter_timing 1 --per_iter_skip 2",
      "--parallel_init 0 --check 1 --blocking 0 --cudagraph 0 --report_cputime 0",
      "--local_register 2 --device_implementation 0 --device_cta_count 16",
      "--report_timestamps 1 --output_file out.json --timeout 30 --memory 1 --unalign 1",
      "-b 8 -e 128M -f 2 -t 2 -g 2",
      "-n 20 -w 5",
      "-m 4",
      "-T 30",
      "-J out.json",
      "-G 10",
      "-z 1",
      "-z 2",
      "-z 3",
      "-a 3",
      "-a 0",
      "-a 1",
      "-a 2",
      "-R 1",
      "-R 2 -G 100 -b 8 -e 8",  // nccl-tests' small-message latency
      "-x 1",
      "-u 1",
      "-M 1 -S 1",
      "-c 0",
      "--collective gather,scatter,alltoallv,hypercube -r 1",
      "--collective alltoallv --skew 0.5",
      "-p 1 -I 1 -K 2 -N 1 -y 0 -C 0 -S 0 -R 0 -M 0 -u 0 -D 0 -V 16",
      "-d bfloat16 -o max -r 1",
      "-o mulsum",
      "-N 3",
      "--impl one-shot -d bf16 -b 8 -e 1M -G 100",  // small messages beside nccl-tests' -R 2
      "-N 0",
      "-o all -d all",
      "--minbytes 1K --maxbytes 1M --stepfactor 4 --datatype half --agg_iters 2 --warmup_iters 1",
      "--nthreads 1 --ngpus 2 --blocking 2 --cudagraph 0 --average 3 --output_file out.json",
  };
  for (const char* args : accepted) {
    const Outcome o = run(std::string("allreduce ") + args + " --dry-run");
    EXPECT_EQ(o.code, 0) << args << "\n" << o.err;
  }
  const std::pair<const char*, const char*> refused[] = {
      {"-a 4", "-a 4: not one of 0 (rank 0)"},
      {"-R 3", "-R 3: not one of 0 (none)"},
      {"-x 3", "-x 3: not one of 0"},
      {"-u 2000", "-u 2000: must be between 0 and 1024"},
      {"-C 1", "CPU time"},
      {"-N -2", "-N -2: at least 0"},
      {"--impl one-shot", "--impl one-shot: bf16 or fp16"},
      {"--impl one-shot -d bf16 --collective all_gather", "all_reduce only"},
      {"--impl one-shot -d fp16 -R 2", "no -R"},
      {"--impl one-shot -d bf16 --place out", "in place"},
      {"--impl one-shot -d bf16 -b 8M", "messages up to 4 MiB"},
      {"--impl nvls", "'nvls' is not one of nccl, one-shot"},
      {"-D 1", "do not apply"},
      {"-y 1", "NULL stream"},
      {"--collective alltoallv --skew 1.5", "--skew 1.5: must be between 0"},
      {"--collective scatterv", "'scatterv' is not one of"},
      {"-z 4", "-z 4: not one of 0, 1, 2, 3"},
      {"-G 5 -z 1", "exclude each other"},
      {"-g 0", "-t and -g must be at least 1"},
  };
  for (const auto& [args, why] : refused)
    expect_bad_input(run(std::string("allreduce ") + args + " --dry-run"), why);
}
