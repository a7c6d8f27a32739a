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

std::vector<int> balance_stages(const std::vector<double>& layer_s, int p, double first_extra_s,
                                double last_extra_s) {
  const int L = static_cast<int>(layer_s.size());
  if (p < 1) throw InputError(fmt::format("--pp: {} must be at least 1", p));
  if (p > L)
    throw InputError(fmt::format("--pp: {} stages need at least {} layers, not {}", p, p, L));
  std::vector<double> prefix(static_cast<std::size_t>(L) + 1, 0.0);
  for (int i = 0; i < L; ++i) prefix[i + 1] = prefix[i] + layer_s[static_cast<std::size_t>(i)];
  // Stage j holding layers [a, b): its cost.
  auto cost = [&](int j, int a, int b) {
    return prefix[b] - prefix[a] + (j == 0 ? first_extra_s : 0) + (j == p - 1 ? last_extra_s : 0);
  };
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[j][i]: the slowest stage when stages 0..j hold layers [0, i); cut[j][i]: where stage j
  // starts in that split.
  std::vector<std::vector<double>> best(p, std::vector<double>(L + 1, kInf));
  std::vector<std::vector<int>> cut(p, std::vector<int>(L + 1, 0));
  for (int i = 1; i <= L; ++i) best[0][i] = cost(0, 0, i);
  for (int j = 1; j < p; ++j)
    for (int i = j + 1; i <= L; ++i)
      for (int k = j; k < i; ++k) {  // earliest cut first: ties keep the first one found
        const double v = std::max(best[j - 1][k], cost(j, k, i));
        if (v < best[j][i]) {
          best[j][i] = v;
          cut[j][i] = k;
        }
      }
  std::vector<int> layers(static_cast<std::size_t>(p));
  int end = L;
  for (int j = p - 1; j >= 0; --j) {
    const int start = j == 0 ? 0 : cut[j][end];
    layers[static_cast<std::size_t>(j)] = end - start;
    end = start;
  }
  return layers;
}

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

std::string agreed_memory_check(RankGroup& group, int rank, std::uint64_t need) {
  std::size_t free_b = 0, total_b = 0;
  GPB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const auto needs = group.all_gather(rank, static_cast<double>(need));
  const auto frees = group.all_gather(rank, static_cast<double>(free_b));
  for (std::size_t j = 0; j < needs.size(); ++j)
    if (needs[j] + static_cast<double>(kMemoryReserve) > frees[j])
      return fmt::format(
          "does not fit in GPU memory: stage {} needs {} (and {} spare) with {} free", j,
          format_bytes(static_cast<std::uint64_t>(needs[j])), format_bytes(kMemoryReserve),
          format_bytes(static_cast<std::uint64_t>(frees[j])));
  return "";
}

std::string Layout::name() const {
  std::vector<std::string> parts;
  if (tp > 1) parts.push_back(fmt::format("tp={}", tp));
  if (pp > 1) parts.push_back(fmt::format("pp={}", pp));
  if (dp > 1 || parts.empty()) parts.push_back(fmt::format("dp={}", dp));
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "x") + p;
  return out;
}

namespace {

bool valid(const Layout& l, const model::ModelConfig& m) {
  return model::why_not_divisible(m, l.tp).empty() && l.pp <= m.num_layers;
}

Layout parse_one(const std::string& item, int gpus) {
  Layout l;
  bool seen[3] = {false, false, false};
  for (const auto& factor : split_list(item, 'x')) {
    const auto eq = factor.find('=');
    if (eq == std::string::npos)
      throw InputError(fmt::format("--layouts: '{}' is not name=value (dp, tp or pp)", factor));
    std::string name = trim(factor.substr(0, eq));
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    const std::string value = trim(factor.substr(eq + 1));
    if (value.empty() || value.size() > 6 ||
        !std::all_of(value.begin(), value.end(), [](unsigned char c) { return std::isdigit(c); }))
      throw InputError(fmt::format("--layouts: '{}' is not a whole number in '{}'", value, item));
    const int n = std::stoi(value);
    if (n < 1) throw InputError(fmt::format("--layouts: {} must be at least 1 in '{}'", n, item));
    const int idx = name == "dp" ? 0 : name == "tp" ? 1 : name == "pp" ? 2 : -1;
    if (idx < 0)
      throw InputError(fmt::format("--layouts: '{}' is not dp, tp or pp in '{}'", name, item));
    if (seen[idx]) throw InputError(fmt::format("--layouts: {} appears twice in '{}'", name, item));
    seen[idx] = true;
    (idx == 0 ? l.dp : idx == 1 ? l.tp : l.pp) = n;
  }
  if (l.gpus() != gpus)
    throw InputError(fmt::format("--layouts: '{}' uses {} GPUs, not the {} of the run", trim(item),
                                 l.gpus(), gpus));
  return l;
}

}  // namespace

std::vector<Layout> parse_layouts(const std::string& text, int gpus, const model::ModelConfig& m) {
  if (gpus < 1) throw InputError(fmt::format("--layouts: {} GPUs", gpus));
  std::vector<Layout> out;
  if (trim(text) == "all") {
    for (int tp = 1; tp <= gpus; tp *= 2)
      for (int pp = 1; tp * pp <= gpus; pp *= 2)
        if (gpus % (tp * pp) == 0) {
          const Layout l{gpus / (tp * pp), tp, pp};
          if (valid(l, m)) out.push_back(l);
        }
    if (out.empty())
      throw InputError(fmt::format("--layouts: no layout of {} GPUs fits {}", gpus, m.name));
    return out;
  }
  for (const auto& item : split_list(trim(text))) {
    const Layout l = parse_one(item, gpus);
    if (const std::string why = model::why_not_divisible(m, l.tp); !why.empty())
      throw InputError(fmt::format("--layouts: '{}': {}", trim(item), why));
    if (l.pp > m.num_layers)
      throw InputError(
          fmt::format("--layouts: '{}': {} stages for {} layers", trim(item), l.pp, m.num_layers));
    if (std::find(out.begin(), out.end(), l) != out.end())
      throw InputError(fmt::format("--layouts: '{}' appears twice", l.name()));
    out.push_back(l);
  }
  return out;
}

}  // namespace gpubench::pp
