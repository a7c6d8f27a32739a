#pragma once
// Shared by the GPU tests' bandwidth reports: seconds per call of a launch replayed from one CUDA
// graph, as the engine replays its decode step, so host launch costs do not count.
#include <cuda_runtime.h>

#include "gpubench/core/cuda.hpp"

namespace gpubench::testing {

// Captures run(0) .. run(reps - 1) into one graph, replays it once to warm up, then times one
// replay with events; returns the seconds per call.
template <class F>
double graph_replay_seconds(int device, cudaStream_t stream, int reps, F&& run) {
  CudaGraph graph;
  graph.capture(stream, [&](cudaStream_t) {
    for (int i = 0; i < reps; ++i) run(i);
  });
  Event start(device), stop(device);
  graph.launch(stream);  // warm-up replay
  start.record(stream);
  graph.launch(stream);
  stop.record(stream);
  stop.synchronize();
  return stop.seconds_since(start) / reps;
}

}  // namespace gpubench::testing
