// Host side of `gpubench tp`: bytes each layer moves between ranks, the collective-time table
// (log-log interpolation, clamping, extrapolation), the prediction and its helpers, the
// micro-benchmark shapes and the headline keys.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "gpubench/core/errors.hpp"
#include "gpubench/modules/tp/tp.hpp"
#include "input_error.hpp"

using namespace gpubench;
using namespace gpubench::tp;
using gpubench::testing::input_error_of;

namespace {

// An all-reduce curve on 2 GPUs: 10 us latency floor, then bandwidth-bound (about 100 GB/s).
CommTable two_gpu_table() {
  return {2, {{1024, 10e-6}, {65536, 12e-6}, {1 << 20, 20e-6}, {16 << 20, 170e-6},
              {64 << 20, 650e-6}}};
}

}  // namespace

TEST(TpComm, AllReducesPerLayer) {
  const model::ModelConfig m = model::load_preset("llama-2-7b");  // hidden 4096
  const LayerComm pre = layer_comm(m, model::Phase::Prefill, 1, 4096, 2, 2, false);
  EXPECT_EQ(pre.all_reduces, 2);
  EXPECT_EQ(pre.reduce_scatters + pre.all_gathers, 0);
  EXPECT_EQ(pre.bytes_per_collective, 4096ull * 4096 * 2);  // 32 MiB of bf16 rows
  EXPECT_EQ(pre.total_bytes, 2 * pre.bytes_per_collective);
  EXPECT_DOUBLE_EQ(pre.bus_bytes, 2.0 * pre.bytes_per_collective);  // 2 x size x 2(t-1)/t
  const LayerComm dec = layer_comm(m, model::Phase::Decode, 4, 999, 2, 4, false);
  EXPECT_EQ(dec.bytes_per_collective, 4ull * 4096 * 2);  // one row per sequence, tokens unused
  EXPECT_DOUBLE_EQ(dec.bus_bytes, 2.0 * dec.bytes_per_collective * 2 * 3 / 4);
  const LayerComm one = layer_comm(m, model::Phase::Prefill, 8, 4096, 2, 1, false);
  EXPECT_EQ(one.all_reduces, 0);
  EXPECT_EQ(one.total_bytes, 0u);
  EXPECT_EQ(one.bus_bytes, 0.0);
}

TEST(TpComm, SequenceParallelMovesTheSameBusBytes) {
  const model::ModelConfig m = model::load_preset("llama-3-8b");
  for (int t : {2, 4, 8}) {
    const LayerComm ar = layer_comm(m, model::Phase::Prefill, 2, 1024, 2, t, false);
    const LayerComm sp = layer_comm(m, model::Phase::Prefill, 2, 1024, 2, t, true);
    EXPECT_EQ(sp.all_reduces, 0);
    EXPECT_EQ(sp.reduce_scatters, 2);
    EXPECT_EQ(sp.all_gathers, 2);
    EXPECT_EQ(sp.bytes_per_collective, ar.bytes_per_collective);
    EXPECT_EQ(sp.total_bytes, 2 * ar.total_bytes);  // 4 collectives of the same size
    EXPECT_DOUBLE_EQ(sp.bus_bytes, ar.bus_bytes);
  }
  // Decode does not split one row per sequence: all-reduces stay.
  EXPECT_EQ(layer_comm(m, model::Phase::Decode, 1, 1, 2, 2, true).all_reduces, 2);
  EXPECT_NE(input_error_of([&] { layer_comm(m, model::Phase::Prefill, 1, 0, 2, 2, false); }), "");
  EXPECT_NE(input_error_of([&] { layer_comm(m, model::Phase::Decode, 0, 1, 2, 2, false); }), "");
  EXPECT_NE(input_error_of([&] { layer_comm(m, model::Phase::Decode, 1, 1, 3, 2, false); }), "");
  EXPECT_NE(input_error_of([&] { layer_comm(m, model::Phase::Decode, 1, 1, 2, 0, false); }), "");
}

TEST(TpTable, ExactAtSamplesAndLogLogBetween) {
  const CommTable table = two_gpu_table();
  for (const CommSample& s : table.samples) EXPECT_DOUBLE_EQ(table.seconds(s.bytes), s.seconds);
  // Halfway in log size is the geometric mean of the times.
  EXPECT_NEAR(table.seconds(std::sqrt(1024.0 * 65536.0)), std::sqrt(10e-6 * 12e-6), 1e-15);
  EXPECT_NEAR(table.seconds(4 << 20), std::sqrt(20e-6 * 170e-6), 1e-12);
}

TEST(TpTable, ClampsBelowAndExtrapolatesAbove) {
  const CommTable table = two_gpu_table();
  EXPECT_DOUBLE_EQ(table.seconds(1), 10e-6);
  EXPECT_DOUBLE_EQ(table.seconds(512), 10e-6);
  // Last segment: 48 MiB more in 480 us; 64 MiB past the end costs 640 us more.
  EXPECT_NEAR(table.seconds(128 << 20), 650e-6 + 640e-6, 1e-12);
  // A single sample scales with its own bandwidth above, clamps below.
  const CommTable one{4, {{1 << 20, 50e-6}}};
  EXPECT_DOUBLE_EQ(one.seconds(4 << 20), 200e-6);
  EXPECT_DOUBLE_EQ(one.seconds(1024), 50e-6);
  // A flat last segment falls back to the largest sample's bandwidth.
  const CommTable flat{2, {{1024, 10e-6}, {2048, 10e-6}}};
  EXPECT_DOUBLE_EQ(flat.seconds(4096), 20e-6);
}

TEST(TpTable, MonotoneOverASweep) {
  const CommTable table = two_gpu_table();
  double previous = 0;
  for (double b = 16; b < 1e9; b *= 1.37) {
    const double s = table.seconds(b);
    EXPECT_GE(s, previous) << b;
    previous = s;
  }
}

TEST(TpTable, BadTables) {
  EXPECT_TRUE(gpubench::testing::contains(
      input_error_of([] { CommTable{2, {}}.seconds(1024); }), "no collective times"));
  EXPECT_NE(input_error_of([] { CommTable{2, {{2048, 1e-5}, {1024, 2e-5}}}.seconds(1024); }), "");
  EXPECT_NE(input_error_of([] { CommTable{2, {{1024, 0}}}.seconds(1024); }), "");
  EXPECT_NE(input_error_of([] { two_gpu_table().seconds(0); }), "");
}

TEST(TpPredict, ComputeSplitsCommAdds) {
  const CommTable table = two_gpu_table();
  const Prediction p = predict(1e-3, 2, 32, 1 << 20, table);
  EXPECT_DOUBLE_EQ(p.compute_s, 16e-3);
  EXPECT_DOUBLE_EQ(p.comm_s, 2 * 32 * 20e-6);
  EXPECT_DOUBLE_EQ(p.total_s, p.compute_s + p.comm_s);
  // TP=1: no communication, any table (even an empty one).
  const Prediction one = predict(1e-3, 1, 32, 1 << 20, CommTable{});
  EXPECT_DOUBLE_EQ(one.total_s, 32e-3);
  EXPECT_EQ(one.comm_s, 0.0);
  const std::string other = input_error_of([&] { predict(1e-3, 4, 32, 1024, table); });
  EXPECT_TRUE(gpubench::testing::contains(other, "measured on 2 GPUs, not 4")) << other;
  EXPECT_NE(input_error_of([&] { predict(-1, 2, 32, 1024, table); }), "");
  EXPECT_NE(input_error_of([&] { predict(1e-3, 2, 0, 1024, table); }), "");
  EXPECT_NE(input_error_of([&] { predict(1e-3, 0, 1, 1024, table); }), "");
}

TEST(TpPredict, RatiosAndChecks) {
  EXPECT_DOUBLE_EQ(prediction_error_pct(10.0, 11.0), 10.0);  // predicted slower than measured
  EXPECT_DOUBLE_EQ(prediction_error_pct(10.0, 9.0), -10.0);
  EXPECT_NE(input_error_of([] { prediction_error_pct(0, 1); }), "");
  EXPECT_DOUBLE_EQ(speedup(10.0, 6.25), 1.6);
  EXPECT_DOUBLE_EQ(efficiency(1.6, 2), 0.8);
  EXPECT_DOUBLE_EQ(comm_share(2.0, 8.0), 0.25);
  EXPECT_NE(input_error_of([] { speedup(1, 0); }), "");
  EXPECT_NE(input_error_of([] { efficiency(1, 0); }), "");
  EXPECT_NE(input_error_of([] { comm_share(1, 0); }), "");
  EXPECT_TRUE(within_pct(105, 100, 5));
  EXPECT_TRUE(within_pct(95, 100, 5));
  EXPECT_FALSE(within_pct(106, 100, 5));
  EXPECT_TRUE(within_pct(0, 0, 0));
  EXPECT_NE(input_error_of([] { within_pct(1, 1, -1); }), "");
  // Decode of llama-2-7b at batch 1 on 2 GPUs: 64 all-reduces of 8 KiB each, a time between the
  // 1 KiB and 64 KiB samples' (their geometric mean: 8 KiB is halfway in log size).
  const model::ModelConfig m = model::load_preset("llama-2-7b");
  const LayerComm dec = layer_comm(m, model::Phase::Decode, 1, 1, 2, 2, false);
  const CommTable table = two_gpu_table();
  const double expected = expected_decode_comm_s(32, dec.bytes_per_collective, table);
  EXPECT_DOUBLE_EQ(expected, 64 * table.seconds(8192));
  EXPECT_GT(expected, 64 * 10e-6);
  EXPECT_LT(expected, 64 * 12e-6);
}

TEST(TpMicro, ColumnAndRowShapes) {
  const MicroShape col = micro_shape(MicroKind::Column, 8192, 1024, 4, 2);
  EXPECT_EQ(col.n, 2048);
  EXPECT_EQ(col.k, 8192);
  EXPECT_DOUBLE_EQ(col.flops_per_rank, 2.0 * 1024 * 2048 * 8192);
  EXPECT_EQ(col.comm_bytes, 1024ull * 8192 * 2);
  EXPECT_EQ(col.collective, "all_gather");
  const MicroShape row = micro_shape(MicroKind::Row, 8192, 1024, 4, 2);
  EXPECT_EQ(row.n, 8192);
  EXPECT_EQ(row.k, 2048);
  EXPECT_DOUBLE_EQ(row.flops_per_rank, col.flops_per_rank);  // same work, split differently
  EXPECT_EQ(row.comm_bytes, col.comm_bytes);
  EXPECT_EQ(row.collective, "all_reduce");
  const MicroShape single = micro_shape(MicroKind::Row, 8192, 16, 1, 2);
  EXPECT_EQ(single.k, 8192);
  EXPECT_EQ(single.comm_bytes, 0u);
  EXPECT_EQ(single.collective, "");
  EXPECT_EQ(input_error_of([] { micro_shape(MicroKind::Row, 8190, 16, 4, 2); }),
            "--micro-size: 8190 does not split over --tp 4");
  EXPECT_NE(input_error_of([] { micro_shape(MicroKind::Row, 8192, 0, 4, 2); }), "");
  EXPECT_EQ(std::string(to_string(MicroKind::Column)), "column");
  EXPECT_EQ(std::string(to_string(MicroKind::Row)), "row");
}

TEST(TpHeadline, KeysMatchTheIssue) {
  EXPECT_EQ(headline_key(HeadlineKind::PrefillSpeedup, 2, 4096), kTp2PrefillSpeedup4096);
  EXPECT_EQ(headline_key(HeadlineKind::DecodeSpeedup, 2, 2048), kTp2DecodeSpeedupCtx2048);
  EXPECT_EQ(headline_key(HeadlineKind::PrefillSpeedup, 4, 4096), kTp4PrefillSpeedup4096);
  EXPECT_EQ(headline_key(HeadlineKind::CommSharePrefill, 2, 4096), kTp2CommSharePrefill4096);
  EXPECT_EQ(headline_key(HeadlineKind::DecodeSpeedup, 8, 512), "tp8_decode_speedup_ctx512");
}

// The engine's op names by kind, for the split of a step: the two all-reduces are communication.
TEST(TpOpKind, EngineOpsByKind) {
  EXPECT_EQ(op_kind("attn_all_reduce"), "communication");
  EXPECT_EQ(op_kind("mlp_all_reduce"), "communication");
  for (const char* c : {"attn_reduce_scatter", "mlp_all_gather", "input_all_gather",
                        "final_all_gather"})
    EXPECT_EQ(op_kind(c), "communication") << c;
  for (const char* g : {"qkv", "attn_out", "mlp_gate_up", "mlp_up", "mlp_down", "lm_head"})
    EXPECT_EQ(op_kind(g), "gemm") << g;
  EXPECT_EQ(op_kind("attention"), "attention");
  for (const char* o : {"rope_kv_cache", "residual_norm", "mlp_act", "embedding", "final_norm"})
    EXPECT_EQ(op_kind(o), "other") << o;
}

// A point TP=1 did not run is checked by a later degree's agreement, never reported as ok on its
// own: TP=2's point stays unchecked until TP=4's logits matched it.
TEST(TpChecks, PointWithoutTp1IsConfirmedOnlyByALaterDegree) {
  auto point = [](int t, const char* status, int against, std::int64_t length) {
    Outcome o;
    o.t = t;
    o.phase = model::Phase::Prefill;
    o.length = length;
    o.status = status;
    o.checked_against = against;
    return o;
  };
  std::map<int, std::vector<Outcome>> by_t;
  // Prompt 4096: TP=2 first (unchecked), TP=4 agreed with it. Prompt 8192: TP=2 alone.
  by_t[2] = {point(2, "unchecked", 0, 4096), point(2, "unchecked", 0, 8192)};
  by_t[4] = {point(4, "ok", 2, 4096)};
  by_t[4][0].check_error = 0.0123;
  confirm_across_degrees(by_t);
  EXPECT_EQ(by_t[2][0].status, "ok");
  EXPECT_EQ(by_t[2][0].checked_against, 4);
  EXPECT_EQ(by_t[2][0].check_error, 0.0123);  // the comparison that confirmed it
  EXPECT_NE(by_t[2][0].note.find("checked against TP=4"), std::string::npos);
  EXPECT_EQ(by_t[2][1].status, "unchecked");  // nothing checked it
  // A later degree that failed its check confirms nothing.
  by_t[2][1].status = "unchecked";
  by_t[4].push_back(point(4, "failed", 2, 8192));
  confirm_across_degrees(by_t);
  EXPECT_EQ(by_t[2][1].status, "unchecked");
}
