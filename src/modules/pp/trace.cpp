// The Chrome trace of a pipeline timeline (chrome://tracing, Perfetto).
#include <fmt/format.h>

#include "gpubench/modules/pp/pp.hpp"

namespace gpubench::pp {

nlohmann::ordered_json chrome_trace(const Timeline& t, Schedule s, double transfer_s,
                                    const std::string& title) {
  const int p = static_cast<int>(t.stages.size());
  auto us = [](double seconds) { return seconds * 1e6; };
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  for (int st = 0; st < p; ++st) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", st},
                      {"args", {{"name", fmt::format("stage {}", st)}}}});
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", p + st},
                      {"args", {{"name", fmt::format("stage {} transfers", st)}}}});
  }
  const bool chunks = s == Schedule::Interleaved;
  const bool measured = !t.sends.empty() || !t.recvs.empty();
  int last_chunk = 0;
  for (const auto& stage : t.stages)
    for (const Span& sp : stage) last_chunk = std::max(last_chunk, sp.op.chunk);
  for (int st = 0; st < p; ++st)
    for (const Span& sp : t.stages[static_cast<std::size_t>(st)]) {
      const std::string name = fmt::format("{}{}{}", sp.op.forward ? "F" : "B", sp.op.mb,
                                           chunks ? fmt::format(".c{}", sp.op.chunk) : "");
      events.push_back({{"name", name},
                        {"cat", sp.op.forward ? "forward" : "backward"},
                        {"ph", "X"},
                        {"ts", us(sp.start)},
                        {"dur", us(sp.end - sp.start)},
                        {"pid", 0},
                        {"tid", st},
                        {"args", {{"microbatch", sp.op.mb}, {"chunk", sp.op.chunk}}}});
      if (transfer_s <= 0 || measured) continue;
      // Where the result goes: forward to the next stage (around the ring between chunks),
      // backward to the previous one; nothing leaves the ends of the pipeline.
      int to = -1;
      if (sp.op.forward && (st < p - 1 || sp.op.chunk < last_chunk)) to = (st + 1) % p;
      if (!sp.op.forward && (st > 0 || sp.op.chunk > 0)) to = (st + p - 1) % p;
      if (to < 0 || p == 1) continue;
      const std::string what =
          fmt::format("{} {}", sp.op.forward ? "activations" : "gradients", name);
      events.push_back({{"name", "send " + what},
                        {"cat", "send"},
                        {"ph", "X"},
                        {"ts", us(sp.end)},
                        {"dur", us(transfer_s)},
                        {"pid", 0},
                        {"tid", p + st}});
      events.push_back({{"name", "recv " + what},
                        {"cat", "recv"},
                        {"ph", "X"},
                        {"ts", us(sp.end)},
                        {"dur", us(transfer_s)},
                        {"pid", 0},
                        {"tid", p + to}});
    }
  // Measured transfers, where the timeline has them.
  auto transfers = [&](const std::vector<std::vector<Span>>& per_stage, const char* kind) {
    for (std::size_t st = 0; st < per_stage.size(); ++st)
      for (const Span& sp : per_stage[st])
        events.push_back(
            {{"name", fmt::format("{} {} {}{}{}", kind, sp.op.forward ? "activations" : "gradients",
                                  sp.op.forward ? "F" : "B", sp.op.mb,
                                  chunks ? fmt::format(".c{}", sp.op.chunk) : "")},
             {"cat", kind},
             {"ph", "X"},
             {"ts", us(sp.start)},
             {"dur", us(sp.end - sp.start)},
             {"pid", 0},
             {"tid", p + static_cast<int>(st)}});
  };
  transfers(t.sends, "send");
  transfers(t.recvs, "recv");
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"title", title},
            {"schedule", to_string(s)},
            {"bubble", t.bubble},
            {"makespan_ms", t.makespan_s * 1e3}}}};
}

}  // namespace gpubench::pp
