// The Chrome trace of a data-parallel step (chrome://tracing, Perfetto): rank 0's compute and
// communication streams.
#include "gpubench/modules/dp/dp.hpp"

namespace gpubench::dp {

nlohmann::ordered_json chrome_trace(const std::vector<TraceSpan>& spans, const std::string& title) {
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  const char* lanes[] = {"rank 0 compute", "rank 0 communication"};
  for (int lane = 0; lane < 2; ++lane)
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", lane},
                      {"args", {{"name", lanes[lane]}}}});
  for (const TraceSpan& s : spans)
    events.push_back({{"name", s.name},
                      {"cat", s.lane == 0 ? "compute" : "communication"},
                      {"ph", "X"},
                      {"ts", s.start * 1e6},
                      {"dur", (s.end - s.start) * 1e6},
                      {"pid", 0},
                      {"tid", s.lane}});
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", {{"title", title}}}};
}

}  // namespace gpubench::dp
