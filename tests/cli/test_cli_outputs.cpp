// Where reports go, checked with the built binary on a machine without a GPU (every GPU hidden):
// output paths are checked before the run, a refused input leaves no folder, a folder is never
// shared or mixed, writes never replace what is not a regular file, and a write that fails after
// the run exits 4 with the console output kept. Bounded input: huge sweeps, endless config files
// and non-finite numbers are refused at once.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli_run.hpp"

namespace {

using namespace gpubench::cli_test;
namespace fs = std::filesystem;

const std::string kNoGpu = "CUDA_VISIBLE_DEVICES=";

// A fresh empty folder under the scratch folder.
fs::path fresh(const std::string& name) {
  const fs::path d = scratch() / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

int entries(const fs::path& dir) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST(CliOutputs, RefusedInputLeavesNoFolder) {
  const fs::path cwd = fresh("refused");
  const std::string in = "cd " + cwd.string() + " && ";
  expect_bad_input(run("bandwidth --hbm-size 0", in), "hbm-size");
  expect_bad_input(run("allreduce --collective nope", in), "nope");
  expect_bad_input(run("seqlen --seq-lens 0", in), "--seq-lens");
  EXPECT_EQ(run("bandwidth --gpus 97", in + kNoGpu).code, 3);  // no GPU: exit 3, still nothing
  EXPECT_EQ(entries(cwd), 0) << "a refused run left " << fs::directory_iterator(cwd)->path();
}

TEST(CliOutputs, JsonPathCheckedBeforeTheRun) {
  expect_bad_input(run("env --no-files --json " + scratch().string(), kNoGpu), "is a folder");
  expect_bad_input(run("env --no-files --json /nonexistent/dir/r.json", kNoGpu), "does not exist");
  const fs::path dangling = scratch() / "dangling.json";
  fs::remove(dangling);
  fs::create_symlink(scratch() / "nowhere" / "x.json", dangling);
  expect_bad_input(run("env --no-files --json " + dangling.string(), kNoGpu), "symlink");
}

TEST(CliOutputs, SymlinkStaysASymlinkAndPipeIsWrittenInPlace) {
  const fs::path target = scratch() / "target.json", link = scratch() / "link.json";
  fs::remove(link);
  fs::remove(target);
  { std::ofstream(target) << "old"; }
  fs::create_symlink(target, link);
  auto o = run("env --no-files --json " + link.string(), kNoGpu);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(slurp(target).rfind("{", 0), 0u) << slurp(target).substr(0, 80);

  const fs::path fifo = scratch() / "report.fifo", got = scratch() / "from_fifo.json";
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  o = run("env --no-files --json " + fifo.string(),
          "(cat " + fifo.string() + " > " + got.string() + " &) ; " + kNoGpu);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_TRUE(fs::is_fifo(fifo));
  for (int i = 0; i < 50 && slurp(got).find("\"module\": \"env\"") == std::string::npos; ++i)
    ::usleep(100000);  // the reader may still be copying
  EXPECT_NE(slurp(got).find("\"module\": \"env\""), std::string::npos);
}

TEST(CliOutputs, DeviceIsWrittenInPlaceAndAFailedWriteExitsFour) {
  struct stat before {};
  ASSERT_EQ(::stat("/dev/null", &before), 0);
  EXPECT_EQ(run("env --no-files --json /dev/null", kNoGpu).code, 0);
  struct stat after {};
  ASSERT_EQ(::stat("/dev/null", &after), 0);
  EXPECT_TRUE(S_ISCHR(after.st_mode));
  EXPECT_EQ(before.st_ino, after.st_ino);
  // /dev/full: every write fails as on a full disk. The console report stands, the error names
  // the path, and the exit code is 4, not 2 (the input was fine).
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const auto o = run("env --no-files --json /dev/full", kNoGpu);
  EXPECT_EQ(o.code, 4) << o.err;
  EXPECT_NE(o.out.find("== gpubench env"), std::string::npos) << o.out;
  EXPECT_NE(o.err.find("report not written"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("/dev/full"), std::string::npos) << o.err;
}

TEST(CliOutputs, ExistingOutputDirIsNeverMixed) {
  const fs::path dir = fresh("used_dir");
  { std::ofstream(dir / "stale.json") << "{}"; }
  expect_bad_input(run("env --output-dir " + dir.string(), kNoGpu), "already holds files");
  EXPECT_EQ(entries(dir), 1);
  const fs::path empty = fresh("empty_dir");
  EXPECT_EQ(run("env --output-dir " + empty.string(), kNoGpu).code, 0);
  EXPECT_TRUE(fs::exists(empty / "env.json"));
}

TEST(CliOutputs, RunsStartedTogetherGetTheirOwnFolders) {
  const fs::path cwd = fresh("together");
  const std::string bin = binary();
  const std::string cmd = "cd " + cwd.string() + " && (" + kNoGpu + " " + bin +
                          " env --log-level off >/dev/null & " + kNoGpu + " " + bin +
                          " env --log-level off >/dev/null & " + kNoGpu + " " + bin +
                          " env --log-level off >/dev/null; wait)";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  int folders = 0;
  for (const auto& e : fs::directory_iterator(cwd / "results")) {
    ++folders;
    EXPECT_TRUE(fs::exists(e.path() / "env.json")) << e.path();
    EXPECT_NE(slurp(e.path() / "env.json").find(e.path().filename().string()), std::string::npos)
        << "the report's run_id names its folder";
  }
  EXPECT_EQ(folders, 3);
}

TEST(CliOutputs, AllWritesEveryReportToOneJsonFile) {
  const auto ini =
      write_config("all_json.ini", "[common]\nquick = true\n[bandwidth]\nhbm-size = 64M\n");
  const fs::path json = scratch() / "all.json";
  fs::remove(json);
  const auto o =
      run("all --no-files --config " + ini.string() + " --json " + json.string(), kNoGpu);
  EXPECT_EQ(o.code, 3) << o.err;  // env ran, the rest found no GPU
  const std::string text = slurp(json);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.front(), '[');
  EXPECT_NE(text.find("\"module\": \"env\""), std::string::npos);
  EXPECT_NE(text.find("\"module\": \"bandwidth\""), std::string::npos);
}

TEST(CliOutputs, BoundedInput) {
  expect_bad_input(run("allreduce -f 1.0000000000000002"), "at most 4096");
  expect_bad_input(run("allreduce -b 8 -e 8G -i 1"), "at most 4096");
  expect_bad_input(run("all --config /dev/zero"), "larger than");
  expect_bad_input(run("bandwidth --min-time nan"), "not a finite number");
  expect_bad_input(run("bandwidth --max-time inf"), "not a finite number");
  expect_bad_input(run("matmul --max-noise nan"), "not a finite number");
  expect_bad_input(run("allreduce --timeout nan"), "not a finite number");
  std::string many = "1";
  for (int i = 0; i < 2000; ++i) many += ",1";
  expect_bad_input(run("matmul --sizes " + many), "more than 1024 items");
}

}  // namespace

// check --from judges a run folder without a GPU: 0 for PASS (the verdict line on the console),
// 5 for FAIL (a GPU 10% below the node's median), 2 for input it cannot use, no folder left.
TEST(CliOutputs, CheckFromExitsFiveOnAFail) {
  const fs::path cwd = fresh("check");
  auto run_folder = [&](const std::string& name, double slow) {
    fs::create_directories(cwd / name);
    std::ofstream out(cwd / name / "bandwidth.json");
    out << R"({"schema": "gpubench.result/1", "module": "bandwidth", "system": {"gpus": )"
        << R"([{"name": "NVIDIA H200"}]}, "results": [)";
    for (int g = 0; g < 3; ++g)
      out << (g ? "," : "") << R"({"group": "HBM fp64", "case": "GPU)" << g
          << R"( triad", "params": {"gpu": )" << g << R"(, "kernel": "triad"}, "metrics": )"
          << R"({"bandwidth": {"value": )" << (g == 2 ? 4380 * slow : 4380)
          << R"(, "unit": "GB/s"}, "efficiency": {"value": )" << (g == 2 ? 91 * slow : 91)
          << R"(, "unit": "%"}}, "status": "ok"})";
    out << "]}";
    return name;
  };
  const std::string in = "cd " + cwd.string() + " && ";
  const Outcome pass = run("check --from " + run_folder("good", 0.99) + " --no-files", in);
  EXPECT_EQ(pass.code, 0) << pass.err;
  EXPECT_NE(pass.out.find("node PASS: "), std::string::npos) << pass.out;
  const Outcome fail = run("check --from " + run_folder("slow", 0.94) + " --no-files", in);
  EXPECT_EQ(fail.code, 5) << fail.err;
  EXPECT_NE(fail.out.find("node FAIL: GPU 2 HBM triad (fp64) outlier"), std::string::npos)
      << fail.out;
  expect_bad_input(run("check --from missing", in), "missing does not exist");
  expect_bad_input(run("check --from good --outlier 0", in), "--outlier");
  std::ofstream(cwd / "bad.ini") << "[floors]\nhbm_triad = 120\n";
  expect_bad_input(run("check --from good --expect bad.ini", in), "not a percent");
  EXPECT_EQ(entries(cwd), 3) << "check left files behind";
}

// compare reads two runs and exits 0 when nothing regressed, 5 when something did (the JSON
// and the console carry the verdict), 2 for a run it cannot read, leaving no folder behind.
TEST(CliOutputs, CompareExitsFiveOnARegression) {
  const fs::path cwd = fresh("compare");
  auto report = [&](const std::string& name, double gbps) {
    std::ofstream(cwd / name) << R"({"schema": "gpubench.result/1", "module": "bandwidth", )"
                              << R"("headline": {"hbm_triad_GBps": {"value": )" << gbps
                              << R"(, "unit": "GB/s"}}, "results": []})";
    return (cwd / name).string();
  };
  const std::string base = report("base.json", 4000), same = report("same.json", 3950),
                    slow = report("slow.json", 3000);
  const std::string in = "cd " + cwd.string() + " && ";
  const Outcome pass = run("compare " + base + " " + same + " --no-files", in);
  EXPECT_EQ(pass.code, 0) << pass.err;
  EXPECT_NE(pass.out.find("compare PASS: 1 figure, none regressed"), std::string::npos) << pass.out;
  const Outcome fail = run("compare " + base + " " + slow + " --json -", in);
  EXPECT_EQ(fail.code, 5) << fail.err;
  const auto verdict = fail.out.find("\"verdict\"");
  ASSERT_NE(verdict, std::string::npos) << fail.out;
  EXPECT_NE(fail.out.find("\"level\": \"FAIL\"", verdict), std::string::npos) << fail.out;
  EXPECT_NE(fail.out.find("\"what\": \"hbm_triad_GBps\"", verdict), std::string::npos);
  expect_bad_input(run("compare " + base + " missing.json", in), "missing.json does not exist");
  expect_bad_input(run("compare " + base, in), "new is required");
  std::ofstream(cwd / "junk.json") << "[1, 2]";
  expect_bad_input(run("compare " + base + " junk.json", in), "not a gpubench report");
  EXPECT_EQ(entries(cwd), 4) << "compare left files behind";
}
