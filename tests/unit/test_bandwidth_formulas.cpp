// `gpubench bandwidth` host logic: bytes per STREAM kernel, option defaults and validation,
// repeats, efficiency, the worst-of headline, and the host side of the verification pattern.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gpubench/core/errors.hpp"
#include "gpubench/modules/bandwidth/bandwidth.hpp"
#include "input_error.hpp"

using namespace gpubench;
using namespace gpubench::bandwidth;

namespace {

// The InputError message of resolving `o`, or "" when it resolves.
std::string error_of(const Options& o, bool quick = false) {
  return gpubench::testing::input_error_of([&] { (void)resolve_settings(o, quick); });
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

}  // namespace

TEST(BandwidthFormulas, ArraysMovedPerStreamKernel) {
  EXPECT_EQ(stream_arrays_moved(StreamOp::Copy), 2);
  EXPECT_EQ(stream_arrays_moved(StreamOp::Scale), 2);
  EXPECT_EQ(stream_arrays_moved(StreamOp::Add), 3);
  EXPECT_EQ(stream_arrays_moved(StreamOp::Triad), 3);
  EXPECT_EQ(stream_arrays_moved(StreamOp::Dot), 2);
  EXPECT_EQ(stream_arrays_moved(StreamOp::Read), 1);
  EXPECT_EQ(stream_arrays_moved(StreamOp::Write), 1);
  EXPECT_EQ(stream_bytes(StreamOp::Triad, 1u << 27, sizeof(double)), 3ull << 30);
  EXPECT_EQ(stream_bytes(StreamOp::Copy, 1000, sizeof(float)), 8000u);
}

TEST(BandwidthFormulas, OutputArrayOfEachKernel) {
  EXPECT_EQ(stream_output_array(StreamOp::Copy), 2);   // c = a
  EXPECT_EQ(stream_output_array(StreamOp::Scale), 1);  // b = s*c
  EXPECT_EQ(stream_output_array(StreamOp::Add), 2);    // c = a + b
  EXPECT_EQ(stream_output_array(StreamOp::Triad), 0);  // a = b + s*c
  EXPECT_EQ(stream_output_array(StreamOp::Write), 2);
  EXPECT_EQ(stream_output_array(StreamOp::Dot), -1);
  EXPECT_TRUE(stream_is_reduction(StreamOp::Read));
  EXPECT_FALSE(stream_is_reduction(StreamOp::Triad));
}

TEST(BandwidthFormulas, InitValuesAreNonZeroInOneToTwo) {
  for (std::uint64_t i = 0; i < 10000; ++i) {
    const float f = init_value<float>(7, i);
    const double d = init_value<double>(7, i);
    EXPECT_GE(f, 1.0f);
    EXPECT_LT(f, 2.0f);
    EXPECT_GE(d, 1.0);
    EXPECT_LT(d, 2.0);
  }
  EXPECT_NE(init_value<double>(7, 0), init_value<double>(8, 0));
  EXPECT_NE(init_value<double>(7, 0), init_value<double>(7, 1));
}

TEST(BandwidthFormulas, ExpectedValuesAndTolerance) {
  const StreamSeeds s;
  EXPECT_EQ(stream_expected<double>(StreamOp::Copy, s, 5), init_value<double>(s.a, 5));
  EXPECT_EQ(stream_expected<float>(StreamOp::Write, s, 5), stream_fill_value<float>());
  const double triad = init_value<double>(s.b, 9) + 0.4 * init_value<double>(s.c, 9);
  EXPECT_TRUE(stream_value_ok<double>(triad, stream_expected<double>(StreamOp::Triad, s, 9)));
  EXPECT_TRUE(stream_value_ok<double>(std::nextafter(triad, 10.0), triad));  // one ulp: an FMA
  EXPECT_FALSE(stream_value_ok<double>(triad * (1 + 1e-12), triad));
  EXPECT_FALSE(stream_value_ok<float>(std::numeric_limits<float>::quiet_NaN(), 1.5f));
  EXPECT_FALSE(stream_value_ok<float>(init_value<float>(s.a, 6), init_value<float>(s.a, 5)));
}

TEST(BandwidthSettings, DefaultsFollowTheMode) {
  const Settings full = resolve_settings(Options{}, false);
  EXPECT_EQ(full.parts.size(), 5u);
  EXPECT_EQ(full.hbm_bytes, 2ull << 30);
  EXPECT_EQ(full.host_bytes, 1ull << 30);
  EXPECT_EQ(full.pageable_bytes, 1ull << 30);
  EXPECT_EQ(full.p2p_bytes, 1ull << 30);
  EXPECT_EQ(full.hbm_dtypes, (std::vector<std::string>{"fp32", "fp64"}));
  EXPECT_EQ(full.latency_hops, 10000u);
  ASSERT_EQ(full.sweep_sizes.size(), 12u);  // 1M .. 2G
  EXPECT_EQ(full.sweep_sizes.front(), 1ull << 20);
  EXPECT_EQ(full.sweep_sizes.back(), 2ull << 30);
  for (std::size_t i = 1; i < full.sweep_sizes.size(); ++i)
    EXPECT_EQ(full.sweep_sizes[i], 2 * full.sweep_sizes[i - 1]);

  const Settings quick = resolve_settings(Options{}, true);
  EXPECT_EQ(quick.hbm_bytes, 512ull << 20);
  EXPECT_EQ(quick.host_bytes, 256ull << 20);
  EXPECT_EQ(quick.pageable_bytes, 64ull << 20);
  EXPECT_EQ(quick.p2p_bytes, 256ull << 20);
  EXPECT_EQ(quick.sweep_sizes, (std::vector<std::uint64_t>{1ull << 20, 16ull << 20, 256ull << 20}));

  const auto j = full.to_json();
  EXPECT_EQ(j["hbm_size"], 2ull << 30);
  EXPECT_EQ(j["tests"].size(), 5u);
}

TEST(BandwidthSettings, GivenValuesWinAndListsAreCanonical) {
  Options o;
  o.tests = "latency,hbm,hbm";
  o.hbm_size = "64M";
  o.hbm_dtypes = "fp64";
  o.host_size = "1M";
  o.sweep_sizes = "16M,1M\n4M,1M";  // a config list may arrive newline-joined
  const Settings s = resolve_settings(o, true);
  EXPECT_EQ(s.parts, (std::vector<Part>{Part::Hbm, Part::Latency}));
  EXPECT_TRUE(s.has(Part::Hbm));
  EXPECT_FALSE(s.has(Part::P2p));
  EXPECT_EQ(s.hbm_bytes, 64ull << 20);
  EXPECT_EQ(s.host_bytes, 1ull << 20);
  EXPECT_EQ(s.pageable_bytes, 1ull << 20);
  EXPECT_EQ(s.hbm_dtypes, (std::vector<std::string>{"fp64"}));
  EXPECT_EQ(s.sweep_sizes, (std::vector<std::uint64_t>{1ull << 20, 4ull << 20, 16ull << 20}));

  o.tests = "p2p,all";
  EXPECT_EQ(resolve_settings(o, false).parts.size(), 5u);
}

TEST(BandwidthSettings, BadValuesNameTheirOption) {
  Options o;
  o.tests = "hbm,nope";
  EXPECT_TRUE(starts_with(error_of(o), "--tests: 'nope'")) << error_of(o);
  o = Options{};
  o.tests = "";
  EXPECT_TRUE(starts_with(error_of(o), "--tests:")) << error_of(o);
  o = Options{};
  o.hbm_size = "0";
  EXPECT_TRUE(starts_with(error_of(o), "--hbm-size:")) << error_of(o);
  o.hbm_size = "1K";
  EXPECT_TRUE(starts_with(error_of(o), "--hbm-size:")) << error_of(o);
  o = Options{};
  o.host_size = "12Q";
  EXPECT_TRUE(starts_with(error_of(o), "--host-size:")) << error_of(o);
  o = Options{};
  o.p2p_size = "-5M";
  EXPECT_TRUE(starts_with(error_of(o), "--p2p-size:")) << error_of(o);
  o = Options{};
  o.sweep_sizes = "1M,,2M";
  EXPECT_TRUE(starts_with(error_of(o), "--sweep-sizes:")) << error_of(o);
  o = Options{};
  o.hbm_dtypes = "fp16";
  EXPECT_TRUE(starts_with(error_of(o), "--hbm-dtypes: 'fp16'")) << error_of(o);
  o = Options{};
  o.latency_hops = 0;
  EXPECT_TRUE(starts_with(error_of(o), "--latency-hops:")) << error_of(o);
  o.latency_hops = static_cast<int>(kMaxLatencyHops) + 1;
  EXPECT_TRUE(starts_with(error_of(o), "--latency-hops:")) << error_of(o);
  o.latency_hops = static_cast<int>(kMinLatencyHops);
  EXPECT_EQ(error_of(o), "");
  // One line each.
  o = Options{};
  o.tests = "x";
  EXPECT_EQ(error_of(o).find('\n'), std::string::npos);
}

TEST(BandwidthFormulas, RepeatsPerLaunch) {
  EXPECT_EQ(repeats_for(1ull << 30, 400), 1);            // 2.7 ms: one is plenty
  EXPECT_EQ(repeats_for(1ull << 20, 400), kMaxRepeats);  // 2.6 us: as many as allowed
  EXPECT_EQ(repeats_for(16ull << 20, 400, 1e-4), 3);     // 42 us each: ceil(100 / 42)
}

TEST(BandwidthFormulas, RepeatsWithoutAPeakAreOne) {
  EXPECT_EQ(repeats_for(1ull << 20, 0), 1);
  EXPECT_EQ(repeats_for(0, 400), 1);
}

TEST(BandwidthFormulas, Efficiency) {
  EXPECT_DOUBLE_EQ(efficiency_pct(240, 480), 50.0);
  EXPECT_TRUE(std::isnan(efficiency_pct(240, 0)));
  EXPECT_TRUE(std::isnan(efficiency_pct(std::nan(""), 480)));
}

TEST(BandwidthHeadline, WorstOfSkipsNaNAndPicksTheWeakest) {
  const std::vector<Figure> figs = {
      {"GPU0", 4300, 90}, {"GPU1", std::nan(""), 0}, {"GPU2", 4100, 85}, {"GPU3", 4400, 92}};
  const auto low = worst_of(figs, true);
  ASSERT_TRUE(low);
  EXPECT_EQ(low->where, "GPU2");
  const auto high = worst_of(figs, false);
  ASSERT_TRUE(high);
  EXPECT_EQ(high->where, "GPU3");
  EXPECT_FALSE(worst_of({}, true));
  EXPECT_FALSE(worst_of({{"GPU0", std::nan(""), 0}}, true));
}

TEST(BandwidthHeadline, KeysAndEfficiencies) {
  Figures f;
  f.hbm_copy = {{"GPU0", 4050, 82.4}, {"GPU1", 4010, 81.6}};
  f.hbm_triad = {{"GPU0", 4350, 88.5}};
  f.h2d_pinned = {{"GPU0", 55.1, 87.5}};
  f.d2h_pinned = {{"GPU0", 55.0, std::nan("")}};
  f.p2p_unidir_ce = {{"GPU0->GPU1", 392, 82}, {"GPU1->GPU0", 391, 81.8}};
  f.p2p_bidir_ce = {{"GPU0<->GPU1", 779, 81.5}};
  f.p2p_unidir_sm = {{"GPU0->GPU1", 375, 78.5}};
  f.p2p_latency = {{"GPU0->GPU1", 0.9, std::nan("")}, {"GPU1->GPU0", 1.1, std::nan("")}};
  Report r;
  set_headline(r, f);
  ASSERT_NE(r.find_headline("hbm_copy_GBps"), nullptr);
  EXPECT_DOUBLE_EQ(r.find_headline("hbm_copy_GBps")->value, 4010);
  EXPECT_DOUBLE_EQ(r.find_headline("hbm_copy_efficiency_pct")->value, 81.6);
  EXPECT_EQ(r.find_headline("hbm_copy_GBps")->unit, "GB/s");
  EXPECT_DOUBLE_EQ(r.find_headline("hbm_triad_GBps")->value, 4350);
  EXPECT_DOUBLE_EQ(r.find_headline("h2d_pinned_GBps")->value, 55.1);
  EXPECT_NE(r.find_headline("d2h_pinned_GBps"), nullptr);
  EXPECT_EQ(r.find_headline("d2h_pinned_efficiency_pct"), nullptr);  // peak unknown
  EXPECT_DOUBLE_EQ(r.find_headline("p2p_unidir_ce_GBps")->value, 391);
  EXPECT_DOUBLE_EQ(r.find_headline("p2p_bidir_ce_GBps")->value, 779);
  EXPECT_DOUBLE_EQ(r.find_headline("p2p_unidir_sm_GBps")->value, 375);
  ASSERT_NE(r.find_headline("p2p_latency_us"), nullptr);
  EXPECT_DOUBLE_EQ(r.find_headline("p2p_latency_us")->value, 1.1);  // the worst pair is the slowest
  EXPECT_EQ(r.find_headline("p2p_latency_us")->unit, "us");

  Report empty;
  set_headline(empty, Figures{});
  EXPECT_TRUE(empty.headline.empty());
}

TEST(BandwidthPattern, HostFillMatchesTheWordFormula) {
  std::vector<unsigned char> buf(4 * 100 + 3);
  host_pattern_fill(buf.data(), buf.size(), 42);
  for (std::size_t w = 0; w < 100; ++w) {
    std::uint32_t got;
    std::memcpy(&got, buf.data() + 4 * w, 4);
    EXPECT_EQ(got, pattern_word(42, w));
  }
  for (std::size_t j = 400; j < buf.size(); ++j)
    EXPECT_EQ(buf[j], static_cast<unsigned char>(pattern_word(42, 100) >> (8 * (j - 400))));
  EXPECT_EQ(host_pattern_mismatches(buf.data(), buf.size(), 42), 0u);
  EXPECT_GT(host_pattern_mismatches(buf.data(), buf.size(), 43), 90u);
}

TEST(BandwidthPattern, HostCheckCountsWrongWordsAcrossThreads) {
  // Large enough to be split over several threads, with a partial last word.
  const std::size_t bytes = (40u << 20) + 3;
  std::vector<unsigned char> buf(bytes);
  host_pattern_fill(buf.data(), bytes, 9);
  EXPECT_EQ(host_pattern_mismatches(buf.data(), bytes, 9), 0u);
  buf[0] ^= 1;
  buf[5] ^= 0x80;
  buf[6] ^= 0x80;             // same word as byte 5: still one word
  buf[(20u << 20) + 1] ^= 4;  // in the middle
  buf[bytes - 1] ^= 0xff;     // the partial last word
  EXPECT_EQ(host_pattern_mismatches(buf.data(), bytes, 9), 4u);
}

TEST(BandwidthPattern, SeedsDifferPerSourceAndName) {
  EXPECT_NE(seed_for("p2p.src", 0), seed_for("p2p.src", 1));
  EXPECT_NE(seed_for("p2p.src", 0), seed_for("host.h2d", 0));
  EXPECT_EQ(seed_for("p2p.src", 3), seed_for("p2p.src", 3));
  EXPECT_NE(pattern_word(1, 0), pattern_word(2, 0));
}

TEST(BandwidthPattern, MismatchNoteCountsWords) {
  EXPECT_EQ(mismatch_note(3, 10), "verification failed: 3 of 3 words differ from the pattern");
}
