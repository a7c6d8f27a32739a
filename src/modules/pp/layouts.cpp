// Stage balancing and parallel layouts.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/model/shard.hpp"
#include "gpubench/modules/pp/pp.hpp"

namespace gpubench::pp {

std::string StageCosts::describe() const {
  const bool halves = attention > 0 && attention < layer;
  if (measured)
    return fmt::format("measured: layer {:.3f} ms{}, embedding {:.3f} ms, head {:.3f} ms (one "
                       "sequence)",
                       layer * 1e3,
                       halves ? fmt::format(" (attention half {:.3f} ms)", attention * 1e3) : "",
                       embed * 1e3, head * 1e3);
  return fmt::format("by FLOPs: head {:.2f} of a layer{}", layer > 0 ? head / layer : 0.0,
                     halves ? fmt::format(", attention half {:.2f}", attention / layer) : "");
}

std::vector<int> stages_from_costs(const StageCosts& c, int layers, int p) {
  // A layer that costs nothing (a measurement lost in noise) would let any split tie.
  const double layer = c.layer > 0 ? c.layer : 1.0;
  return balance_stages(std::vector<double>(static_cast<std::size_t>(std::max(layers, 0)), layer),
                        p, std::max(c.embed, 0.0), std::max(c.head, 0.0));
}

std::vector<int> blocks_of_layers(std::vector<int> layers) {
  for (int& l : layers) l *= 2;
  return layers;
}

std::vector<int> stage_blocks_from_costs(const StageCosts& c, int layers, int p) {
  if (!(c.layer > 0 && c.attention > 0 && c.attention < c.layer))
    return blocks_of_layers(stages_from_costs(c, layers, p));
  std::vector<double> units;
  for (int l = 0; l < layers; ++l) {
    units.push_back(c.attention);
    units.push_back(c.layer - c.attention);
  }
  return balance_stages(units, p, std::max(c.embed, 0.0), std::max(c.head, 0.0));
}

std::string stage_layers_text(const std::vector<int>& blocks) {
  std::string text;
  for (int b : blocks)
    text += (text.empty() ? "" : "/") +
            (b % 2 == 0 ? std::to_string(b / 2) : fmt::format("{}.5", b / 2));
  return text;
}

StageCosts agreed_stage_costs(RankGroup& group, int rank,
                              const std::function<StageCosts()>& measure) {
  std::array<double, 4> parts{};
  if (rank == 0) {
    const StageCosts c = measure();
    parts = {c.layer, c.embed, c.head, c.attention};
  }
  group.broadcast(rank, parts.data(), sizeof parts);
  StageCosts c;
  c.layer = parts[0];
  c.embed = parts[1];
  c.head = parts[2];
  c.attention = parts[3];
  c.measured = true;
  return c;
}

}  // namespace gpubench::pp
