// The result model and its writers: JSON round trip, numbers as numbers, Markdown and console.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/report.hpp"

using namespace gpubench;

namespace {
Report sample_report() {
  Report r;
  r.module = "bandwidth";
  r.version = "0.1.0+test";
  r.run_id = "test_20260101_000000";
  r.command = {"gpubench", "bandwidth"};
  r.set_headline("hbm_triad_GBps", 4370.5, "GB/s");
  CaseResult c;
  c.group = "HBM fp64";
  c.name = "triad";
  c.params = {{"gpu", 0}, {"bytes", 1073741824}};
  c.metric("bandwidth", 4370.5, "GB/s").metric("efficiency", 91.0, "%");
  c.stats = compute_stats({1e-3, 1.1e-3, 0.9e-3});
  r.add(c);
  CaseResult s;
  s.group = "HBM fp64";
  s.name = "dot";
  s.status = "skipped";
  s.note = "not supported | here";
  r.add(s);
  Matrix m;
  m.name = "p2p_unidir_ce_GBps";
  m.title = "P2P unidirectional (GB/s)";
  m.unit = "GB/s";
  m.rows = m.cols = {"GPU0", "GPU1"};
  m.values = {{NAN, 390.1}, {391.2, NAN}};
  r.matrices.push_back(m);
  Sweep sw;
  sw.name = "p2p_sweep";
  sw.title = "P2P size sweep";
  sw.x_label = "size";
  sw.x_unit = "bytes";
  sw.y_label = "bandwidth";
  sw.y_unit = "GB/s";
  sw.series.push_back({"NVLink", {1048576, 2097152}, {100, 200}});
  r.sweeps.push_back(sw);
  r.warn("a warning");
  r.warn("a warning");
  return r;
}
}  // namespace

TEST(Report, JsonShapeAndNumbers) {
  const auto j = to_json(sample_report());
  EXPECT_EQ(j["schema"], "gpubench.result/1");
  EXPECT_TRUE(j["headline"]["hbm_triad_GBps"]["value"].is_number());
  EXPECT_EQ(j["headline"]["hbm_triad_GBps"]["unit"], "GB/s");
  EXPECT_EQ(j["results"][0]["case"], "triad");
  EXPECT_TRUE(j["results"][0]["metrics"]["bandwidth"]["value"].is_number());
  EXPECT_EQ(j["results"][0]["stats"]["unit"], "us");
  EXPECT_NEAR(j["results"][0]["stats"]["median"].get<double>(), 1000.0, 1e-9);
  EXPECT_TRUE(j["matrices"][0]["values"][0][0].is_null());  // NaN -> null, never "nan"
  EXPECT_TRUE(j["matrices"][0]["values"][0][1].is_number());
  EXPECT_EQ(j["warnings"].size(), 1u);
  for (const char* k :
       {"schema", "module", "version", "run_id", "started_at", "finished_at", "command", "system",
        "config", "headline", "results", "monitor", "warnings", "status"})
    EXPECT_TRUE(j.contains(k)) << k;
}

TEST(Report, JsonRoundTrip) {
  const Report a = sample_report();
  const Report b = report_from_json(to_json(a));
  // Stats travel in microseconds, so allow rounding there; everything else is exact.
  ojson ja = to_json(a), jb = to_json(b);
  ASSERT_TRUE(a.results[0].stats && b.results[0].stats);
  EXPECT_NEAR(a.results[0].stats->median, b.results[0].stats->median, 1e-15);
  EXPECT_EQ(a.results[0].stats->n, b.results[0].stats->n);
  ja["results"][0].erase("stats");
  jb["results"][0].erase("stats");
  EXPECT_EQ(ja.dump(), jb.dump());
}

TEST(Report, SettleStatus) {
  Report r = sample_report();
  r.settle_status();
  EXPECT_EQ(r.status, "ok");
  CaseResult f;
  f.name = "copy";
  f.status = "failed";
  r.add(f);
  r.settle_status();
  EXPECT_EQ(r.status, "partial");
  Report only_failed;
  only_failed.add(f);
  only_failed.settle_status();
  EXPECT_EQ(only_failed.status, "failed");
}

TEST(Report, MarkdownHasTablesMatricesAndChartLinks) {
  const std::string md = render_markdown(sample_report());
  EXPECT_NE(md.find("# gpubench bandwidth"), std::string::npos);
  EXPECT_NE(md.find("## HBM fp64"), std::string::npos);
  EXPECT_NE(md.find("| triad |"), std::string::npos);
  EXPECT_NE(md.find("bandwidth (GB/s)"), std::string::npos);
  EXPECT_NE(md.find("not supported \\| here"), std::string::npos);  // pipes escaped
  // Chart slots, not links: the files do not exist until scripts/plot_results.py draws them.
  EXPECT_NE(md.find("<!-- chart: charts/bandwidth_p2p_unidir_ce_GBps.png -->"), std::string::npos);
  EXPECT_NE(md.find("<!-- chart: charts/bandwidth_p2p_sweep.png -->"), std::string::npos);
  EXPECT_EQ(md.find("]("), std::string::npos) << "no link to a file that is not there";
  EXPECT_NE(md.find("| 1 MiB |"), std::string::npos);
  EXPECT_NE(md.find("hbm_triad_GBps"), std::string::npos);
}

TEST(Report, CsvOneRowPerCaseWithUnitsInTheHeader) {
  Report a = sample_report();
  Report b;
  b.module = "matmul";
  CaseResult c;
  c.group = "GEMM, bf16";
  c.name = "8192x8192x8192";
  c.params = {{"dtype", "bf16"}, {"shape", "8192,8192"}};
  c.metric("tflops", 691.0, "TFLOP/s");
  c.note = "say \"hi\"";
  b.add(c);
  const std::string csv = render_csv({a, b});
  const auto first_line = csv.substr(0, csv.find('\n'));
  EXPECT_EQ(first_line,
            "module,group,case,status,gpu,bytes,dtype,shape,bandwidth (GB/s),efficiency (%),"
            "tflops (TFLOP/s),note");
  EXPECT_NE(csv.find("bandwidth,HBM fp64,triad,ok,0,1073741824,,,4370.5,91,,\n"), std::string::npos)
      << csv;
  EXPECT_NE(csv.find("bandwidth,HBM fp64,dot,skipped,,,,,,,,not supported | here\n"),
            std::string::npos)
      << csv;
  EXPECT_NE(csv.find("matmul,\"GEMM, bf16\",8192x8192x8192,ok,,,bf16,\"8192,8192\",,,691,"
                     "\"say \"\"hi\"\"\"\n"),
            std::string::npos)
      << csv;
  int rows = 0;
  for (char ch : csv) rows += ch == '\n';
  EXPECT_EQ(rows, 4);  // the header and three cases
}

TEST(Report, ConsoleAligned) {
  const std::string c = render_console(sample_report());
  EXPECT_NE(c.find("HBM fp64"), std::string::npos);
  EXPECT_NE(c.find("4370.5"), std::string::npos);
  EXPECT_NE(c.find("warning: a warning"), std::string::npos);
  EXPECT_NE(c.find("390.1"), std::string::npos);
}

TEST(Report, FindingsInEveryView) {
  Report r = sample_report();
  r.findings = {"Latency: run tp=4.", "Throughput at 32 sequences: run dp=4."};
  const std::string md = render_markdown(r);
  const auto at = md.find("## Findings\n\n- Latency: run tp=4.\n- Throughput");
  ASSERT_NE(at, std::string::npos) << md;
  EXPECT_LT(md.find("## Headline"), at);  // after the headline, before the tables
  EXPECT_LT(at, md.find("## HBM fp64"));
  EXPECT_NE(render_console(r).find("\nThroughput at 32 sequences: run dp=4.\n"), std::string::npos);
  EXPECT_EQ(report_from_json(to_json(r)).findings, r.findings);
  // A report without findings keeps the JSON it had.
  EXPECT_FALSE(to_json(sample_report()).contains("findings"));
}

TEST(Report, LongSweepsShowEvenlySpacedRowsAndTheLast) {
  Report r;
  r.module = "stress";
  Sweep s{"stress_power", "Power over the run", "time", "s", "power", "W", false, {}};
  Series gpu{"GPU 0", {}, {}};
  for (int i = 1; i <= 900; ++i) {
    gpu.x.push_back(i);
    gpu.y.push_back(600 + i % 7);
  }
  s.series.push_back(gpu);
  r.sweeps.push_back(s);
  const std::string c = render_console(r);
  EXPECT_NE(c.find("Power over the run (41 of 900 points shown; all in the JSON and the chart)"),
            std::string::npos)
      << c;
  EXPECT_NE(c.find("\n  900 "), std::string::npos) << "the last point is shown";
  EXPECT_EQ(c.find("\n  2 "), std::string::npos) << "rows in between are left out";
  EXPECT_EQ(to_json(r)["sweeps"][0]["series"][0]["x"].size(), 900u);
}

TEST(Report, AtomicWriteAndOutputDir) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "gpubench_report_test";
  fs::remove_all(dir);
  std::string id = "ignored";
  const fs::path out = make_output_dir(dir.string(), id);
  write_report_files(out, sample_report());
  EXPECT_TRUE(fs::exists(out / "bandwidth.json"));
  EXPECT_TRUE(fs::exists(out / "bandwidth.md"));
  int files = 0;
  for (const auto& e : fs::directory_iterator(out)) files += e.is_regular_file();
  EXPECT_EQ(files, 2);  // no temp files left behind
  // A folder that holds files is never reused, a file is not a folder.
  EXPECT_THROW(check_output_dir(dir.string()), InputError);
  std::ofstream(dir / "file") << "x";
  EXPECT_THROW(check_output_dir((dir / "file" / "sub").string()), InputError);
  EXPECT_THROW(check_output_dir((dir / "file").string()), InputError);
  EXPECT_NO_THROW(check_output_dir((dir / "new" / "deeper").string()));
  EXPECT_FALSE(fs::exists(dir / "new"));  // checking makes nothing
  fs::remove_all(dir);
}

// The default folder is results/<run id>, made with mkdir: a second run of the same second gets
// <run id>_2, and the run id follows the folder.
TEST(Report, DefaultFoldersAreNeverShared) {
  namespace fs = std::filesystem;
  const fs::path cwd = fs::current_path();
  const fs::path dir = fs::temp_directory_path() / "gpubench_report_unique";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::current_path(dir);
  std::string a = "test_20261128_120000", b = a;
  const fs::path first = make_output_dir("", a), second = make_output_dir("", b);
  fs::current_path(cwd);
  EXPECT_EQ(first, fs::path("results") / "test_20261128_120000");
  EXPECT_EQ(second, fs::path("results") / "test_20261128_120000_2");
  EXPECT_EQ(b, "test_20261128_120000_2");
  fs::remove_all(dir);
}

// --json: checked before the run; a symlink is followed (and stays a symlink); a device is
// written in place; a write that fails is a WriteError naming the path.
TEST(Report, OutputFileChecksAndWrites) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "gpubench_report_file";
  fs::remove_all(dir);
  fs::create_directories(dir);
  EXPECT_THROW(check_output_file(dir, "--json"), InputError);  // a folder
  EXPECT_THROW(check_output_file(dir / "missing" / "r.json", "--json"), InputError);
  EXPECT_NO_THROW(check_output_file(dir / "r.json", "--json"));
  std::ofstream(dir / "target.json") << "old";
  fs::create_symlink(dir / "target.json", dir / "link.json");
  EXPECT_NO_THROW(check_output_file(dir / "link.json", "--json"));
  write_output_file(dir / "link.json", "new\n");
  EXPECT_TRUE(fs::is_symlink(dir / "link.json"));
  std::ifstream f(dir / "target.json");
  std::string text;
  std::getline(f, text);
  EXPECT_EQ(text, "new");
  fs::create_symlink(dir / "nowhere.json", dir / "dangling.json");
  EXPECT_THROW(check_output_file(dir / "dangling.json", "--json"), InputError);
  EXPECT_NO_THROW(check_output_file("/dev/null", "--json"));
  EXPECT_NO_THROW(write_output_file("/dev/null", "x"));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  if (fs::exists("/dev/full")) {
    EXPECT_THROW(write_output_file("/dev/full", "x"), WriteError);
  }
  EXPECT_THROW(write_output_file(dir / "missing" / "r.json", "x"), WriteError);
  fs::remove_all(dir);
}

// Attachments (pp's traces) are written under the folder, in subfolders as named; the JSON
// report lists their names and the Markdown links them.
TEST(Report, AttachmentsWrittenAndListed) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "gpubench_report_attach_test";
  fs::remove_all(dir);
  std::string id = "ignored";
  const fs::path out = make_output_dir(dir.string(), id);
  Report r = sample_report();
  r.attachments.emplace_back("traces/t1.json", ojson{{"traceEvents", ojson::array()}});
  write_report_files(out, r);
  ASSERT_TRUE(fs::exists(out / "traces" / "t1.json"));
  std::ifstream f(out / "traces" / "t1.json");
  const ojson back = ojson::parse(f);
  EXPECT_TRUE(back.contains("traceEvents"));
  const ojson j = to_json(r);
  ASSERT_TRUE(j.contains("attachments"));
  EXPECT_EQ(j["attachments"][0], "traces/t1.json");
  EXPECT_NE(render_markdown(r).find("[traces/t1.json](traces/t1.json)"), std::string::npos);
  EXPECT_FALSE(to_json(sample_report()).contains("attachments"));
  fs::remove_all(dir);
}

TEST(Report, RunIdFormat) {
  const std::string id = make_run_id();
  ASSERT_EQ(id.size(), 20u);
  EXPECT_EQ(id.rfind("test_", 0), 0u);
  EXPECT_EQ(id[13], '_');
}
