// `gpubench check`'s judgement on synthetic evidence: a slow GPU, a slow pair, a missing
// NVLink, an ECC delta, an XID, a counter the driver does not expose, a reference run equal
// within noise and one that shows a real regression, failed cases, and the expectation files.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "gpubench/core/errors.hpp"
#include "gpubench/modules/check/check.hpp"

using namespace gpubench;
using namespace gpubench::check;

namespace {

CaseResult hbm_case(int gpu, double gbps, double pct) {
  CaseResult c;
  c.group = "HBM fp64";
  c.name = "GPU" + std::to_string(gpu) + " triad";
  c.params = {{"gpu", gpu}, {"dtype", "fp64"}, {"kernel", "triad"}};
  c.metric("bandwidth", gbps, "GB/s");
  c.metric("efficiency", pct, "%");
  return c;
}

CaseResult p2p_case(int src, int dst, double gbps) {
  CaseResult c;
  c.group = "P2P unidirectional, copy engine";
  c.name = "GPU" + std::to_string(src) + "->GPU" + std::to_string(dst);
  c.params = {{"src", src}, {"dst", dst}};
  c.metric("bandwidth", gbps, "GB/s");
  c.metric("efficiency", 100 * gbps / 478.0, "%");
  return c;
}

// Four H200s: HBM triad 4380 GB/s (91%) each but `slow_gpu` at `slow_gbps`; every pair 396 GB/s
// but 0->1 at `slow_pair`.
Report bandwidth(int slow_gpu = -1, double slow_gbps = 0, double slow_pair = 396) {
  Report r;
  r.module = "bandwidth";
  r.system = {{"gpus", ojson::array({{{"name", "NVIDIA H200"}}})}};
  for (int g = 0; g < 4; ++g) {
    const double v = g == slow_gpu ? slow_gbps : 4380.0 + g;
    r.add(hbm_case(g, v, 100 * v / 4800));
  }
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b)
      if (a != b) r.add(p2p_case(a, b, a == 0 && b == 1 ? slow_pair : 396 + a + b));
  return r;
}

GpuHealth healthy(int gpu) {
  GpuHealth g;
  g.gpu = gpu;
  g.bus_id = "0000:1" + std::to_string(gpu) + ":00.0";
  g.ecc_enabled = true;
  g.ecc_corrected_volatile = g.ecc_uncorrected_volatile = 0;
  g.ecc_corrected_total = g.ecc_uncorrected_total = 0;
  g.remap_pending = g.remap_failed = false;
  g.pcie_replays = 0;
  g.pcie_gen = g.pcie_gen_max = 5;
  g.pcie_width = g.pcie_width_max = 16;
  g.temperature_C = 40;
  g.slowdown_temperature_C = 87;
  g.persistence_mode = true;
  g.mig_enabled = false;
  g.other_processes = std::vector<unsigned>{};
  for (unsigned l = 0; l < 18; ++l) {
    LinkHealth link;
    link.link = l;
    link.active = true;
    link.crc_flit = link.crc_data = link.replay = link.recovery = 0;
    g.links.push_back(link);
  }
  return g;
}

HealthSnapshot snapshot() {
  HealthSnapshot s;
  s.taken_at = "2026-12-06T00:00:00Z";
  for (int g = 0; g < 4; ++g) s.gpus.push_back(healthy(g));
  return s;
}

Evidence evidence(Report bw) {
  Evidence e;
  e.reports.push_back(std::move(bw));
  e.before = snapshot();
  e.after = snapshot();
  return e;
}

Report judged(const Evidence& e, const std::vector<Report>* reference = nullptr) {
  const Expectations expect = expectations_for("NVIDIA H200", "");
  return check_report(judge(e, expect, reference, 0.05), e, expect, Settings{});
}

bool has_check(const Report& r, const std::string& level, const std::string& subject,
               const std::string& what) {
  return std::any_of(r.results.begin(), r.results.end(), [&](const CaseResult& c) {
    return c.name == subject && c.params.value("check", "") == what &&
           c.params.value("verdict", "") == level;
  });
}

}  // namespace

TEST(Check, HealthyNodePasses) {
  const Report r = judged(evidence(bandwidth()));
  ASSERT_TRUE(r.verdict);
  EXPECT_EQ(r.verdict->level, "PASS") << r.verdict->line;
  EXPECT_EQ(r.verdict->line.rfind("node PASS: ", 0), 0u) << r.verdict->line;
  EXPECT_TRUE(has_check(r, "PASS", "GPU 2", "floor"));
  EXPECT_TRUE(has_check(r, "PASS", "GPU 2", "outlier"));
  EXPECT_TRUE(has_check(r, "PASS", "GPU 0->1", "outlier"));
  EXPECT_TRUE(has_check(r, "PASS", "GPU 3", "ECC uncorrected errors"));
}

// 4100 GB/s is 85.4% of peak: above H200's 85% floor, but 6.4% below the node's median.
TEST(Check, SlowGpuIsAnOutlierEvenAboveItsFloor) {
  const Report r = judged(evidence(bandwidth(2, 4100)));
  EXPECT_EQ(r.verdict->level, "FAIL");
  EXPECT_TRUE(has_check(r, "PASS", "GPU 2", "floor"));
  EXPECT_TRUE(has_check(r, "FAIL", "GPU 2", "outlier"));
  EXPECT_TRUE(has_check(r, "PASS", "GPU 1", "outlier"));
  EXPECT_NE(r.verdict->line.find("GPU 2 HBM triad (fp64) outlier"), std::string::npos)
      << r.verdict->line;
  EXPECT_EQ(r.results.front().params.value("verdict", ""), "FAIL") << "FAILs come first";
}

// Of two GPUs each is held against the other: 4000 is 8.7% below 4380 (against the median of
// both, 4190, it would be 4.5% below and pass the 5% limit).
TEST(Check, OfTwoGpusTheSlowerIsHeldAgainstTheOther) {
  Report bw;
  bw.module = "bandwidth";
  bw.system = {{"gpus", ojson::array({{{"name", "NVIDIA H200"}}})}};
  bw.add(hbm_case(0, 4380, 100 * 4380.0 / 4800));
  bw.add(hbm_case(1, 4000, 100 * 4000.0 / 4800));
  const Report r = judged(evidence(bw));
  EXPECT_TRUE(has_check(r, "FAIL", "GPU 1", "outlier"));
  EXPECT_TRUE(has_check(r, "PASS", "GPU 0", "outlier"));
}

TEST(Check, VerySlowGpuFailsItsFloor) {
  const Report r = judged(evidence(bandwidth(1, 3600)));
  EXPECT_TRUE(has_check(r, "FAIL", "GPU 1", "floor"));
  EXPECT_EQ(r.find_headline("failures")->value, 2);
}

TEST(Check, SlowPairIsFlagged) {
  const Report r = judged(evidence(bandwidth(-1, 0, 350)));
  EXPECT_EQ(r.verdict->level, "FAIL");
  EXPECT_TRUE(has_check(r, "FAIL", "GPU 0->1", "outlier"));
  EXPECT_TRUE(has_check(r, "PASS", "GPU 0->1", "floor")) << "350 GB/s is 73% of 478";
  EXPECT_TRUE(has_check(r, "PASS", "GPU 1->0", "outlier"));
}

// Pairs joined differently are held against pairs joined alike: on a node whose GPU 3 talks to
// the others over PCIe (the rest over NVLink), its pairs are no outliers of the NVLink ones (as
// they would be against the node's median); a slow PCIe pair still is among its own.
TEST(Check, PairsAreHeldAgainstPairsOfTheirLink) {
  Report bw = bandwidth();
  for (CaseResult& c : bw.results) {
    const int src = c.params.value("src", -1), dst = c.params.value("dst", -1);
    if (src < 0) continue;
    const bool pcie = src == 3 || dst == 3;
    c.params["link"] = pcie ? "PCIe" : "NVLink x18";
    if (pcie) c.metrics.front().second.value = src == 3 && dst == 2 ? 40.0 : 52.0;
  }
  const Report r = judged(evidence(bw));
  EXPECT_TRUE(has_check(r, "PASS", "GPU 0->1", "outlier"));
  EXPECT_TRUE(has_check(r, "PASS", "GPU 0->3", "outlier"));
  EXPECT_TRUE(has_check(r, "PASS", "GPU 3->0", "outlier"));
  EXPECT_TRUE(has_check(r, "FAIL", "GPU 3->2", "outlier"));
}

TEST(Check, MissingNvlinkFails) {
  Evidence e = evidence(bandwidth());
  e.after->gpus[1].links[5].active = false;
  const Report r = judged(e);
  EXPECT_EQ(r.verdict->level, "FAIL");
  EXPECT_TRUE(has_check(r, "FAIL", "GPU 1", "NVLink links up"));
  EXPECT_TRUE(has_check(r, "PASS", "GPU 0", "NVLink links up"));
}

// A GPU whose every link is down is not a PCIe-only GPU when the others use theirs, or when its
// own were up before the battery; a node without NVLink in use judges no link.
TEST(Check, EveryNvlinkDownFails) {
  Evidence e = evidence(bandwidth());
  for (auto& l : e.after->gpus[3].links) l.active = false;
  Report r = judged(e);
  EXPECT_EQ(r.verdict->level, "FAIL");
  EXPECT_TRUE(has_check(r, "FAIL", "GPU 3", "NVLink links up"));
  EXPECT_TRUE(has_check(r, "PASS", "GPU 2", "NVLink links up"));
  for (auto& g : e.after->gpus)
    for (auto& l : g.links) l.active = false;
  r = judged(e);  // down since the battery began: the snapshot before had them up
  EXPECT_TRUE(has_check(r, "FAIL", "GPU 0", "NVLink links up"));
  for (auto& g : e.before->gpus)
    for (auto& l : g.links) l.active = false;
  r = judged(e);  // never up: PCIe only
  for (const CaseResult& c : r.results)
    EXPECT_NE(c.params.value("check", ""), "NVLink links up") << c.name;
}

TEST(Check, NvlinkErrorsDuringTheBatteryAreDeltas) {
  Evidence e = evidence(bandwidth());
  e.before->gpus[3].links[2].crc_flit = 1000;  // old errors: not this battery's
  e.after->gpus[3].links[2].crc_flit = 1012;
  e.after->gpus[0].links[4].crc_data = 500;
  e.after->gpus[0].links[7].remote_bus_id = e.after->gpus[2].bus_id;
  e.after->gpus[0].links[7].replay = 3;
  const Report r = judged(e);
  EXPECT_TRUE(has_check(r, "WARN", "GPU 3 link 2", "NVLink error counters"));
  EXPECT_TRUE(has_check(r, "FAIL", "GPU 0 link 4", "NVLink error counters"));
  EXPECT_TRUE(has_check(r, "WARN", "GPU 0 link 7 (to GPU 2)", "NVLink error counters"));
}

TEST(Check, EccDeltaFailsAndCorrectedWarns) {
  Evidence e = evidence(bandwidth());
  e.after->gpus[2].ecc_uncorrected_volatile = 1;
  e.after->gpus[1].ecc_corrected_volatile = 4;
  const Report r = judged(e);
  EXPECT_EQ(r.verdict->level, "FAIL");
  EXPECT_TRUE(has_check(r, "FAIL", "GPU 2", "ECC uncorrected errors"));
  EXPECT_TRUE(has_check(r, "WARN", "GPU 1", "ECC corrected errors"));
  // Errors from before the battery are history, not this battery's.
  Evidence old = evidence(bandwidth());
  old.before->gpus[2].ecc_uncorrected_volatile = old.after->gpus[2].ecc_uncorrected_volatile = 7;
  EXPECT_TRUE(has_check(judged(old), "PASS", "GPU 2", "ECC uncorrected errors"));
}

TEST(Check, XidFails) {
  Evidence e = evidence(bandwidth());
  e.xids.push_back({3, 79, "2026-12-06T00:01:00Z"});
  const Report r = judged(e);
  EXPECT_EQ(r.verdict->level, "FAIL");
  EXPECT_TRUE(has_check(r, "FAIL", "GPU 3", "XID event"));
  EXPECT_NE(r.verdict->line.find("XID 79"), std::string::npos) << r.verdict->line;
  EXPECT_EQ(r.extra["xid_events"].size(), 1u);
}

TEST(Check, UnavailableCountersAreNotPasses) {
  Evidence e = evidence(bandwidth());
  e.after->gpus[0].ecc_uncorrected_volatile.reset();
  e.after->gpus[0].pcie_replays.reset();
  const Report r = judged(e);
  EXPECT_EQ(r.verdict->level, "PASS");
  EXPECT_TRUE(has_check(r, "N/A", "GPU 0", "ECC uncorrected errors"));
  EXPECT_TRUE(has_check(r, "N/A", "GPU 0", "PCIe replays"));
  EXPECT_EQ(r.find_headline("not_available")->value, 2);
  EXPECT_NE(r.verdict->line.find("2 not available"), std::string::npos) << r.verdict->line;
  // No snapshot at all (NVML missing): said, not passed.
  Evidence none;
  none.reports.push_back(bandwidth());
  EXPECT_TRUE(has_check(judged(none), "N/A", "node", "NVML counters"));
}

TEST(Check, BusyGpuAndHardwareSlowdownAreFlagged) {
  Evidence e = evidence(bandwidth());
  e.after->gpus[2].other_processes = std::vector<unsigned>{4242};
  e.reports[0].monitor = {
      {"gpus", ojson::array({{{"gpu", 1}, {"throttle_reasons", {"hw_slowdown"}}},
                             {{"gpu", 0}, {"throttle_reasons", {"sw_power_cap"}}},
                             {{"gpu", 3}, {"throttle_reasons", {"sw_thermal_slowdown"}}}})}};
  const Report r = judged(e);
  EXPECT_TRUE(has_check(r, "WARN", "GPU 2", "Other compute processes"));
  EXPECT_TRUE(has_check(r, "FAIL", "GPU 1", "Clock slowdowns"));
  EXPECT_TRUE(has_check(r, "PASS", "GPU 0", "Clock slowdowns"));
  EXPECT_TRUE(has_check(r, "WARN", "GPU 3", "Clock slowdowns"));  // stress FAILs it
}

TEST(Check, ReferenceRunEqualWithinNoisePassesARealRegressionFails) {
  const std::vector<Report> same{bandwidth()};
  const Report pass = judged(evidence(bandwidth()), &same);
  EXPECT_EQ(pass.verdict->level, "PASS") << pass.verdict->line;
  EXPECT_TRUE(has_check(pass, "PASS", "GPU 0", "reference"));
  // Every GPU 8% slower than the reference: no outlier on the node, but a regression.
  Report slow = bandwidth();
  for (CaseResult& c : slow.results)
    if (c.group == "HBM fp64") c.metrics[0].second.value *= 0.92;
  const Report fail = judged(evidence(slow), &same);
  EXPECT_EQ(fail.verdict->level, "FAIL");
  EXPECT_TRUE(has_check(fail, "PASS", "GPU 0", "outlier"));
  EXPECT_TRUE(has_check(fail, "FAIL", "GPU 0", "reference"));
}

TEST(Check, FailedCasesAreNeverFiguresAndFail) {
  Report bw = bandwidth(2, 1000);
  for (CaseResult& c : bw.results)
    if (c.params.value("gpu", -1) == 2) {
      c.status = "failed";
      c.note = "data check failed: 12 wrong elements";
    }
  const std::vector<Figure> figs = figures_of({bw});
  EXPECT_TRUE(
      std::none_of(figs.begin(), figs.end(), [](const Figure& f) { return f.subject == "GPU 2"; }));
  const Report r = judged(evidence(bw));
  EXPECT_TRUE(has_check(r, "FAIL", "bandwidth: HBM fp64 / GPU2 triad", "case"));
  EXPECT_FALSE(has_check(r, "FAIL", "GPU 2", "outlier")) << "the failed figure was used";
  Report skipped;
  skipped.module = "allreduce";
  skipped.status = "skipped";
  skipped.error = "needs 2 GPUs";
  Evidence e = evidence(bandwidth());
  e.reports.push_back(skipped);
  EXPECT_TRUE(has_check(judged(e), "N/A", "allreduce", "run"));
}

// A run whose cases were partly only predicted (advise's layouts not run) passes, but is not
// called verified.
TEST(Check, CasesNotRunAreNotCalledVerified) {
  Report advise;
  advise.module = "advise";
  CaseResult ran, predicted;
  ran.name = "dp=1 (one GPU)";
  predicted.name = "tp=2";
  predicted.status = "unchecked";
  advise.add(ran);
  advise.add(predicted);
  Evidence e = evidence(bandwidth());
  e.reports.push_back(advise);
  const Report r = judged(e);
  ASSERT_TRUE(has_check(r, "PASS", "advise", "run"));
  for (const CaseResult& c : r.results) {
    if (c.name == "advise") {
      EXPECT_NE(c.note.find("2 cases: 1 verified"), std::string::npos) << c.note;
    }
    if (c.name == "bandwidth") {
      EXPECT_NE(c.note.find("every one verified"), std::string::npos) << c.note;
    }
  }
}

TEST(CheckExpect, ModelFilesMatchTheirGpus) {
  EXPECT_EQ(expectations_for("NVIDIA H200", "").name, "h200");
  EXPECT_EQ(expectations_for("NVIDIA H100 80GB HBM3", "").name, "h100-sxm");
  EXPECT_EQ(expectations_for("NVIDIA A100-SXM4-80GB", "").name, "a100-sxm-80gb");
  EXPECT_EQ(expectations_for("NVIDIA H100 PCIe", "").name, "default");
  EXPECT_EQ(expectations_for("NVIDIA GeForce RTX 4090", "").name, "default");
  const Expectations h200 = expectations_for("NVIDIA H200", "");
  EXPECT_EQ(h200.floors.at("hbm_triad"), 85);
  EXPECT_EQ(h200.floors.at("p2p_unidir"), 70);
  for (const auto& [k, v] : expectations_for("x", "").floors) EXPECT_LT(v, h200.floors.at(k)) << k;
}

TEST(CheckExpect, FilesAreParsedStrictly) {
  const ExpectFile f = parse_expect_file("[gpu]\nmatch = A, B c\n[floors]\nhbm_triad = 80\n", "f");
  EXPECT_EQ(f.match, (std::vector<std::string>{"A", "B c"}));
  EXPECT_EQ(f.floors.at("hbm_triad"), 80);
  for (const char* bad : {"[floors]\nhbm = 80\n", "[floors]\nhbm_triad = 0\n",
                          "[floors]\nhbm_triad = 101\n", "[floors]\nhbm_triad = nan\n",
                          "[floors]\nhbm_triad = 80%\n", "[limits]\nx = 1\n", "[gpu]\nname = H\n"})
    EXPECT_THROW(parse_expect_file(bad, "f"), InputError) << bad;
}

TEST(CheckExpect, SettingsRefuseBadInput) {
  Options o;
  o.outlier = 0;
  EXPECT_THROW(resolve_settings(o, false), InputError);
  o.outlier = 100;
  EXPECT_THROW(resolve_settings(o, false), InputError);
  o = Options{};
  o.from = "/nonexistent/run";
  EXPECT_THROW(resolve_settings(o, false), InputError);
  o = Options{};
  EXPECT_TRUE(resolve_settings(o, true).quick);
  EXPECT_EQ(resolve_settings(o, true).to_json()["outlier_pct"], 5.0);
}
