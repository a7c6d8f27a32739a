// What a pipeline's training stages are balanced by (the parts' FLOPs, or their times measured
// on a GPU through TrainStage) and the activations a stage holds at its peak.
#include <fmt/format.h>

#include <algorithm>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/measure.hpp"
#include "gpubench/model/train_stage.hpp"
#include "gpubench/modules/pp/pp.hpp"

namespace gpubench::pp {

model::TrainShape train_shape(const Settings& s) {
  return {s.model, s.seq_len, s.dtype == "fp16" ? ActDtype::F16 : ActDtype::BF16};
}

std::uint64_t peak_saved_bytes(const StageWork& w, int in_flight) {
  if (in_flight < 0)
    throw InputError(fmt::format("microbatches in flight {} must not be negative", in_flight));
  return w.saved_bytes * static_cast<std::uint64_t>(in_flight);
}

StageCosts training_flop_costs(const Settings& s) {
  auto flops = [&](int blocks, bool head) {
    const StageWork w = stage_work_blocks(s.model, 0, blocks, head, 1, s.seq_len, 2);
    return w.forward_flops + w.backward_flops;
  };
  StageCosts c;
  c.layer = flops(2, false);
  c.attention = flops(1, false);
  c.head = flops(2, true) - c.layer;
  return c;
}

std::vector<int> training_stage_blocks(const Settings& s, int p, Schedule sch,
                                       const StageCosts& costs) {
  if (sch == Schedule::Interleaved) {
    // Every chunk alike: layers / (p x chunks) each (resolve_settings checked that it divides).
    return std::vector<int>(static_cast<std::size_t>(p), 2 * (s.layers / p));
  }
  // The embedding on the first stage, the LM head's forward and backward on the last.
  if (s.half_layers) return stage_blocks_from_costs(costs, s.layers, p);
  return blocks_of_layers(stages_from_costs(costs, s.layers, p));
}

std::vector<int> training_stage_blocks(const Settings& s, int p, Schedule sch) {
  return training_stage_blocks(s, p, sch, training_flop_costs(s));
}

StageCosts measure_training_costs(const Settings& s, int device, cudaStream_t stream) {
  const int two = std::min(2, s.layers);
  // The forward and backward of one sequence through a stage of the embedding, `blocks`
  // half-layers and (with `head`) the final norm and LM head: the median of 11 after one to
  // warm up, through the core's measurement.
  MeasureOptions mo;
  mo.warmup = 1;
  mo.fixed_iters = 11;
  mo.l2 = L2Policy::Hot;
  Measurer measurer(device);
  auto time_stage = [&](int blocks, bool head) {
    model::TrainStage ts(train_shape(s), device, {0}, {blocks}, true, head, 1);
    ts.build(1, stream);
    DeviceBuffer out(device, ts.transfer_bytes()), grad(device, ts.transfer_bytes());
    GPB_CUDA_CHECK(cudaMemsetAsync(grad.get(), 0, grad.bytes(), stream));
    auto pass = [&](cudaStream_t s2, int) {
      unsigned char* slab = ts.allocate(0, s2);
      ts.forward(0, 0, slab, head ? nullptr : out.get(), s2);
      ts.backward(0, slab, grad.get(), s2, false, nullptr);
      model::TrainStage::release(slab, s2);
    };
    return measurer.run(stream, pass, mo).median_s();
  };
  const double one = time_stage(2, false), one_head = time_stage(2, true);
  // Differences of medians: the small parts (the embedding above all) can come out a little
  // below zero from run-to-run noise; they count as free then, and a layer as `one` at worst.
  StageCosts c;
  const double layer = two > 1 ? time_stage(4, true) - one_head : one;
  c.layer = layer > 0 ? layer : one;
  c.head = std::max(0.0, one_head - one);
  c.embed = two > 1 ? std::max(0.0, one - c.layer) : 0.0;
  // The attention half: 1.5 layers less 1; by the FLOPs' share where that is lost in noise.
  const double attention = two > 1 ? time_stage(3, true) - one_head : 0.0;
  const StageCosts by_flops = training_flop_costs(s);
  c.attention = attention > 0 && attention < c.layer
                    ? attention
                    : c.layer * by_flops.attention / by_flops.layer;
  c.measured = true;
  return c;
}

}  // namespace gpubench::pp
