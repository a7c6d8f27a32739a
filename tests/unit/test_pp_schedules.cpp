// Host side of `gpubench pp`: the schedules' stage orders, the simulated timelines against the
// bubble theory, peak activations, transfers, stage balancing, parallel layouts and the Chrome
// trace.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "gpubench/core/errors.hpp"
#include "gpubench/model/presets.hpp"
#include "gpubench/modules/pp/pp.hpp"
#include "input_error.hpp"

using namespace gpubench;
using namespace gpubench::pp;
using gpubench::testing::input_error_of;

namespace {

std::string names(const std::vector<Op>& order) {
  std::string out;
  for (const Op& o : order)
    out += (out.empty() ? "" : " ") + std::string(o.forward ? "F" : "B") + std::to_string(o.mb) +
           (o.chunk ? "." + std::to_string(o.chunk) : "");
  return out;
}

OpTimes equal_times(int p, double f, double b, double transfer = 0) {
  OpTimes t;
  t.forward_s.assign(static_cast<std::size_t>(p), f);
  t.backward_s.assign(static_cast<std::size_t>(p), b);
  t.transfer_s = transfer;
  return t;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(PpSchedule, NamesParseAndPrint) {
  EXPECT_EQ(parse_schedule(" GPipe "), Schedule::GPipe);
  EXPECT_EQ(parse_schedule("1F1B"), Schedule::OneFOneB);
  EXPECT_EQ(parse_schedule("interleaved"), Schedule::Interleaved);
  for (Schedule s : {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved})
    EXPECT_EQ(parse_schedule(to_string(s)), s);
  EXPECT_EQ(input_error_of([] { (void)parse_schedule("zb-v"); }),
            "--schedule: 'zb-v' is not gpipe, 1f1b or interleaved");
}

TEST(PpSchedule, StageOrders) {
  EXPECT_EQ(names(stage_order(Schedule::GPipe, 2, 3, 1, 0)), "F0 F1 F2 B0 B1 B2");
  // 1F1B: p - stage - 1 warm-up forwards, then alternating, then the remaining backwards.
  EXPECT_EQ(names(stage_order(Schedule::OneFOneB, 4, 6, 1, 0)),
            "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(names(stage_order(Schedule::OneFOneB, 4, 6, 1, 3)),
            "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  EXPECT_EQ(names(stage_order(Schedule::OneFOneB, 4, 2, 1, 0)), "F0 F1 B0 B1");  // m < p
  // Interleaved, p = 2, v = 2, m = 2: forwards chunk 0 of mb 0,1 then chunk 1; backwards mirror.
  EXPECT_EQ(names(stage_order(Schedule::Interleaved, 2, 2, 2, 1)),
            "F0 F1 F0.1 B0.1 F1.1 B1.1 B0 B1");
}

TEST(PpSchedule, EveryOperationOnceInEveryOrder) {
  for (Schedule s : {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved})
    for (int p : {1, 2, 3, 4, 8})
      for (int m : {1, 2, 4, 8, 16, 24}) {
        const int v = s == Schedule::Interleaved ? 2 : 1;
        if (s == Schedule::Interleaved && m % p != 0) continue;
        for (int st = 0; st < p; ++st) {
          const auto order = stage_order(s, p, m, v, st);
          std::set<std::tuple<bool, int, int>> seen;
          for (const Op& o : order) seen.insert({o.forward, o.mb, o.chunk});
          EXPECT_EQ(order.size(), static_cast<std::size_t>(2 * m * v));
          EXPECT_EQ(seen.size(), order.size()) << to_string(s) << " p" << p << " m" << m;
        }
      }
}

// Equal stages and free transfers: the simulated bubble is the textbook one, exactly.
TEST(PpSimulate, BubbleEqualsTheory) {
  for (Schedule s : {Schedule::GPipe, Schedule::OneFOneB})
    for (int p : {1, 2, 4, 8})
      for (int m : {1, 2, 4, 8, 16}) {
        const Timeline t = simulate(s, p, m, 1, equal_times(p, 1.0, 2.0));
        EXPECT_NEAR(t.bubble, theory_bubble(s, p, m, 1), 1e-12) << to_string(s) << p << m;
        EXPECT_NEAR(t.makespan_s, (m + p - 1) * 3.0, 1e-9);
      }
  // Interleaved with v chunks of 1/v of a stage each: (p - 1) / (v m + p - 1).
  for (int p : {2, 4})
    for (int v : {2, 4})
      for (int m : {p, 2 * p, 4 * p}) {
        const Timeline t =
            simulate(Schedule::Interleaved, p, m, v, equal_times(p, 1.0 / v, 2.0 / v));
        EXPECT_NEAR(t.bubble, theory_bubble(Schedule::Interleaved, p, m, v), 1e-9)
            << "p" << p << " v" << v << " m" << m;
      }
  EXPECT_DOUBLE_EQ(theory_bubble(Schedule::GPipe, 4, 8, 1), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(theory_bubble(Schedule::Interleaved, 4, 8, 2), 3.0 / 19.0);
}

// The bubble of a timeline's own stage times: a simulated timeline gives back its own bubble;
// equal stages give the theory; a last stage 3.5% slower than the first (the LM head of a
// 2-stage llama-2-7b) adds about 1.4 points to GPipe's m = 16 bubble.
TEST(PpSimulate, StageTimeBubble) {
  for (Schedule s : {Schedule::GPipe, Schedule::OneFOneB})
    for (int p : {2, 4})
      for (int m : {4, 16}) {
        OpTimes uneven;
        for (int st = 0; st < p; ++st) {
          uneven.forward_s.push_back(1.0 + 0.1 * st);
          uneven.backward_s.push_back(2.0 + 0.3 * st);
        }
        const Timeline t = simulate(s, p, m, 1, uneven);
        EXPECT_NEAR(stage_time_bubble(t, s, p, m, 1), t.bubble, 1e-12) << to_string(s) << p << m;
        const Timeline e = simulate(s, p, m, 1, equal_times(p, 1.0, 2.0));
        EXPECT_NEAR(stage_time_bubble(e, s, p, m, 1), theory_bubble(s, p, m, 1), 1e-12);
      }
  OpTimes head;
  head.forward_s = {1.0, 1.035};
  head.backward_s = {2.0, 2.07};
  const double b = stage_time_bubble(simulate(Schedule::GPipe, 2, 16, 1, head), Schedule::GPipe,
                                     2, 16, 1);
  EXPECT_NEAR(100 * (b - theory_bubble(Schedule::GPipe, 2, 16, 1)), 1.4, 0.2);
  // With the hop's transfer time it gives back a timeline simulated with it; transfers cost
  // 1F1B more than GPipe (p 4, m 16, a hop a tenth of a forward: 19.7% against 16.7%).
  for (Schedule s : {Schedule::GPipe, Schedule::OneFOneB}) {
    OpTimes slow = equal_times(4, 1.0, 2.0);
    slow.transfer_s = 0.1;
    const Timeline x = simulate(s, 4, 16, 1, slow);
    EXPECT_NEAR(stage_time_bubble(x, s, 4, 16, 1, 0.1), x.bubble, 1e-12) << to_string(s);
    EXPECT_GT(stage_time_bubble(x, s, 4, 16, 1, 0.1), stage_time_bubble(x, s, 4, 16, 1));
  }
  OpTimes hop = equal_times(4, 1.0, 2.0);
  hop.transfer_s = 0.1;
  EXPECT_GT(simulate(Schedule::OneFOneB, 4, 16, 1, hop).bubble,
            simulate(Schedule::GPipe, 4, 16, 1, hop).bubble + 0.02);
  const Timeline t = simulate(Schedule::GPipe, 2, 4, 1, equal_times(2, 1.0, 2.0));
  EXPECT_EQ(stage_time_bubble(t, Schedule::GPipe, 1, 4, 1), 0.0);  // one stage: no bubble
  EXPECT_THROW(stage_time_bubble(t, Schedule::GPipe, 4, 4, 1), InputError);
  Timeline forwards_only = t;
  for (auto& stage : forwards_only.stages)
    stage.erase(std::remove_if(stage.begin(), stage.end(), [](const Span& x) { return !x.op.forward; }),
                stage.end());
  EXPECT_THROW(stage_time_bubble(forwards_only, Schedule::GPipe, 2, 4, 1), InputError);
}

// GPipe holds every microbatch's activations on the first stage; 1F1B at most p - stage.
TEST(PpSimulate, PeakActivations) {
  const int p = 4, m = 16;
  const Timeline g = simulate(Schedule::GPipe, p, m, 1, equal_times(p, 1, 2));
  const Timeline f = simulate(Schedule::OneFOneB, p, m, 1, equal_times(p, 1, 2));
  for (int st = 0; st < p; ++st) {
    EXPECT_EQ(g.peak_in_flight[static_cast<std::size_t>(st)], m);
    EXPECT_EQ(f.peak_in_flight[static_cast<std::size_t>(st)], p - st);
  }
  // The bound: 1F1B's peak <= (p / m) of GPipe's.
  EXPECT_LE(f.peak_in_flight[0], static_cast<double>(p) / m * g.peak_in_flight[0]);
}

TEST(PpSimulate, TransfersAndUnevenStages) {
  // One microbatch through two stages: F, hop, F, B, hop, B.
  const Timeline t = simulate(Schedule::GPipe, 2, 1, 1, equal_times(2, 1.0, 2.0, 0.25));
  EXPECT_DOUBLE_EQ(t.makespan_s, 1 + 0.25 + 1 + 2 + 0.25 + 2);
  EXPECT_DOUBLE_EQ(t.stages[1][0].start, 1.25);
  // A slow last stage sets the pace: m microbatches cost m x its time plus the fill.
  OpTimes uneven = equal_times(2, 1.0, 1.0);
  uneven.forward_s[1] = 3.0;
  uneven.backward_s[1] = 3.0;
  const Timeline u = simulate(Schedule::OneFOneB, 2, 8, 1, uneven);
  EXPECT_NEAR(u.makespan_s, 8 * 6.0 + 1 + 1, 1e-9);
  EXPECT_GT(u.bubble, theory_bubble(Schedule::OneFOneB, 2, 8, 1));
}

TEST(PpSimulate, BadSizes) {
  EXPECT_TRUE(has(input_error_of([] { (void)stage_order(Schedule::Interleaved, 4, 6, 2, 0); }),
                  "multiple of the 4 stages"));
  EXPECT_TRUE(has(input_error_of([] { (void)stage_order(Schedule::OneFOneB, 4, 8, 2, 0); }),
                  "interleaved"));
  EXPECT_EQ(input_error_of([] { (void)stage_order(Schedule::GPipe, 0, 8, 1, 0); }),
            "--pp: 0 must be at least 1");
  EXPECT_EQ(input_error_of([] { (void)stage_order(Schedule::GPipe, 2, 0, 1, 0); }),
            "--microbatches: 0 must be at least 1");
  EXPECT_TRUE(
      has(input_error_of([] { (void)stage_order(Schedule::GPipe, 2, 2, 1, 2); }), "stage 2"));
  EXPECT_TRUE(
      has(input_error_of([] { (void)simulate(Schedule::GPipe, 2, 2, 1, equal_times(3, 1, 1)); }),
          "2 stages"));
}

TEST(PpStages, Balance) {
  EXPECT_EQ(balance_stages(std::vector<double>(32, 1.0), 4, 0, 0), (std::vector<int>{8, 8, 8, 8}));
  // The embedding (2) and LM head (4) push layers off the first and last stages: 38 units over
  // 4 stages cannot do better than 10, and several splits reach it.
  const auto with_ends = balance_stages(std::vector<double>(32, 1.0), 4, 2.0, 4.0);
  ASSERT_EQ(with_ends.size(), 4u);
  EXPECT_EQ(with_ends[0] + with_ends[1] + with_ends[2] + with_ends[3], 32);
  EXPECT_EQ(std::max({with_ends[0] + 2, with_ends[1], with_ends[2], with_ends[3] + 4}), 10);
  EXPECT_LE(with_ends[3], 6);
  // The same inputs always give the same split.
  EXPECT_EQ(balance_stages(std::vector<double>(32, 1.0), 4, 2.0, 4.0), with_ends);
  EXPECT_EQ(balance_stages({5, 1, 1, 1}, 2, 0, 0), (std::vector<int>{1, 3}));
  EXPECT_EQ(balance_stages({1, 2, 3}, 3, 0, 0), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(input_error_of([] {
              (void)balance_stages({1, 1}, 3, 0, 0);
            }),
            "--pp: 3 stages need at least 3 layers, not 2");
}

TEST(PpLayouts, ParseAndName) {
  const model::ModelConfig m = model::load_preset("llama-2-7b");
  const auto l = parse_layouts("dp=4,tp=2xdp=2,pp=2xdp=2,tp=2xpp=2,tp=4", 4, m);
  ASSERT_EQ(l.size(), 5u);
  EXPECT_EQ(l[0], (Layout{4, 1, 1}));
  EXPECT_EQ(l[3], (Layout{1, 2, 2}));
  std::vector<std::string> n;
  for (const Layout& x : l) n.push_back(x.name());
  EXPECT_EQ(n, (std::vector<std::string>{"dp=4", "tp=2xdp=2", "pp=2xdp=2", "tp=2xpp=2", "tp=4"}));
  EXPECT_EQ(parse_layouts(" DP=2 x TP=2 ", 4, m).front(), (Layout{2, 2, 1}));
  // "all": every power-of-two split of 4 GPUs that the model takes.
  EXPECT_EQ(parse_layouts("all", 4, m).size(), 6u);
  EXPECT_EQ(parse_layouts("all", 1, m), (std::vector<Layout>{Layout{1, 1, 1}}));
}

TEST(PpLayouts, BadInput) {
  const model::ModelConfig m = model::load_preset("llama-2-7b");
  EXPECT_EQ(input_error_of([&] { (void)parse_layouts("tp=2", 4, m); }),
            "--layouts: 'tp=2' uses 2 GPUs, not the 4 of the run");
  EXPECT_TRUE(has(input_error_of([&] { (void)parse_layouts("ep=4", 4, m); }), "not dp, tp or pp"));
  EXPECT_TRUE(has(input_error_of([&] { (void)parse_layouts("tp=2xtp=2", 4, m); }), "twice"));
  EXPECT_TRUE(has(input_error_of([&] { (void)parse_layouts("tp4", 4, m); }), "name=value"));
  EXPECT_TRUE(has(input_error_of([&] { (void)parse_layouts("tp=two", 4, m); }), "whole number"));
  EXPECT_TRUE(has(input_error_of([&] { (void)parse_layouts("tp=0xdp=4", 4, m); }), "at least 1"));
  EXPECT_TRUE(has(input_error_of([&] { (void)parse_layouts("dp=4,dp=4", 4, m); }), "twice"));
  EXPECT_TRUE(
      has(input_error_of([&] { (void)parse_layouts("tp=3", 3, m); }), "32 attention heads"));
  EXPECT_TRUE(has(input_error_of([&] { (void)parse_layouts("pp=64", 64, m); }), "64 stages"));
  // GPUs not known yet (0): everything but the count, which the items must share.
  EXPECT_EQ(parse_layouts("tp=2xpp=2,pp=4", 0, m).size(), 2u);
  EXPECT_TRUE(parse_layouts("all", 0, m).empty());
  EXPECT_EQ(input_error_of([&] { (void)parse_layouts("tp=4,pp=2", 0, m); }),
            "--layouts: 'pp=2' uses 2 GPUs, 'tp=4' 4: a run has one count");
  EXPECT_TRUE(has(input_error_of([&] { (void)parse_layouts("tp=3", 0, m); }), "attention heads"));
  EXPECT_TRUE(has(input_error_of([&] { (void)parse_layouts("tp=2", -1, m); }), "-1 GPUs"));
}

TEST(PpTrace, ChromeTraceOfASchedule) {
  const int p = 2, m = 2;
  const Timeline t = simulate(Schedule::GPipe, p, m, 1, equal_times(p, 1e-3, 2e-3, 1e-4));
  const auto j = chrome_trace(t, Schedule::GPipe, 1e-4, "llama-2-7b pp=2");
  int threads = 0, forward = 0, backward = 0, send = 0, recv = 0;
  for (const auto& e : j["traceEvents"]) {
    const std::string ph = e["ph"], cat = e.value("cat", "");
    if (ph == "M") ++threads;
    if (cat == "forward") ++forward;
    if (cat == "backward") ++backward;
    if (cat == "send") ++send;
    if (cat == "recv") ++recv;
  }
  EXPECT_EQ(threads, 2 * p);  // a compute and a transfer track per stage
  EXPECT_EQ(forward, p * m);
  EXPECT_EQ(backward, p * m);
  EXPECT_EQ(send, 2 * m);  // stage 0 -> 1 forwards, stage 1 -> 0 backwards
  EXPECT_EQ(recv, 2 * m);
  const auto& f0 = j["traceEvents"][2 * p];  // the first span: F0 on stage 0 at time 0
  EXPECT_EQ(f0["name"], "F0");
  EXPECT_DOUBLE_EQ(f0["ts"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(f0["dur"].get<double>(), 1000.0);  // microseconds
  EXPECT_EQ(j["otherData"]["schedule"], "gpipe");
}

// A measured timeline draws its own sends and receives (not transfer_s after each hop).
TEST(PpTrace, MeasuredTransfersDrawnAsMeasured) {
  Timeline t;
  t.stages = {{Span{Op{true, 0, 0}, 0.0, 1e-3}}, {Span{Op{true, 0, 0}, 2e-3, 3e-3}}};
  t.sends = {{Span{Op{true, 0, 0}, 1e-3, 1.5e-3}}, {}};
  t.recvs = {{}, {Span{Op{true, 0, 0}, 1.1e-3, 1.6e-3}}};
  const auto j = chrome_trace(t, Schedule::GPipe, 0.0, "measured");
  int send = 0, recv = 0;
  for (const auto& e : j["traceEvents"]) {
    const std::string cat = e.value("cat", "");
    if (cat == "send") {
      ++send;
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1000.0);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 500.0);
      EXPECT_EQ(e["tid"], 2);  // stage 0's transfer track
      EXPECT_EQ(e["name"], "send activations F0");
    }
    if (cat == "recv") {
      ++recv;
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1100.0);
      EXPECT_EQ(e["tid"], 3);
    }
  }
  EXPECT_EQ(send, 1);
  EXPECT_EQ(recv, 1);
}

// Two stages, one microbatch, GPipe: a forward hop and a backward hop, marked by hand.
TEST(PpMeasuredTimeline, SpansTransfersAndBubble) {
  auto op = [](double ready, double usable, double end) {
    OpMarks m;
    m.ready = ready;
    m.usable = usable;
    m.end = end;
    return m;
  };
  OpMarks s0f = op(0, 0, 1), s0b = op(1, 3.4, 4.4);
  s0f.send_begin = 1.0, s0f.send_end = 1.2;
  s0b.recv_begin = 1.0, s0b.recv_end = 3.4;
  OpMarks s1f = op(0, 1.2, 2.2), s1b = op(2.2, 2.2, 3.0);
  s1f.recv_begin = 0, s1f.recv_end = 1.2;
  s1b.send_begin = 3.0, s1b.send_end = 3.3;
  const std::vector<std::vector<OpMarks>> marks{{s0f, s0b}, {s1f, s1b}};

  TransferTotals nccl;
  const Timeline t = measured_timeline(Schedule::GPipe, 2, 1, 1, marks, false, nccl);
  ASSERT_EQ(t.stages.size(), 2u);
  EXPECT_DOUBLE_EQ(t.stages[0][1].start, 3.4);
  EXPECT_DOUBLE_EQ(t.stages[1][0].end, 2.2);
  EXPECT_DOUBLE_EQ(t.busy_s, 1.0 + 1.0 + 1.0 + 0.8);
  EXPECT_DOUBLE_EQ(t.makespan_s, 4.4);
  EXPECT_DOUBLE_EQ(t.bubble, 1.0 - 3.8 / (2 * 4.4));
  EXPECT_EQ(nccl.hops, 2);
  // NCCL: from the later of the send and the posted receive to the arrival.
  EXPECT_NEAR(nccl.transfer_s, 0.2 + 0.4, 1e-12);
  EXPECT_NEAR(nccl.exposed_s, 0.2 + 0.4, 1e-12);
  ASSERT_EQ(t.recvs[0].size(), 1u);
  EXPECT_DOUBLE_EQ(t.recvs[0][0].start, 3.0);
  EXPECT_DOUBLE_EQ(t.recvs[0][0].end, 3.4);
  ASSERT_EQ(t.sends[1].size(), 1u);
  EXPECT_DOUBLE_EQ(t.sends[1][0].end, 3.3);

  // Copy engines: the sender's peer copy; the receiver's wait beyond it is not transfer.
  TransferTotals ce;
  const Timeline c = measured_timeline(Schedule::GPipe, 2, 1, 1, marks, true, ce);
  EXPECT_NEAR(ce.transfer_s, 0.2 + 0.3, 1e-12);
  EXPECT_NEAR(ce.exposed_s, 0.2 + 0.3, 1e-12);
  EXPECT_DOUBLE_EQ(c.recvs[0][0].end, 3.3);

  // A receive that arrived before the receiver was ready exposes nothing.
  auto early = marks;
  early[1][0].ready = 1.5;
  early[1][0].usable = 1.5;
  TransferTotals e;
  (void)measured_timeline(Schedule::GPipe, 2, 1, 1, early, false, e);
  EXPECT_NEAR(e.exposed_s, 0.4, 1e-12);
}

TEST(PpMeasuredTimeline, MarksThatDoNotMatchTheOrders) {
  TransferTotals t;
  const std::vector<std::vector<OpMarks>> one_stage{{OpMarks{}, OpMarks{}}};
  EXPECT_THROW(measured_timeline(Schedule::GPipe, 2, 1, 1, one_stage, false, t), InputError);
  const std::vector<std::vector<OpMarks>> short_stage{{OpMarks{}, OpMarks{}}, {OpMarks{}}};
  EXPECT_THROW(measured_timeline(Schedule::GPipe, 2, 1, 1, short_stage, false, t), InputError);
}
