// Parallel layouts: enumeration and parsing, stage balancing, a rank's place and communicators.
#include "gpubench/parallel/layout.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <limits>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/model/shard.hpp"

namespace gpubench::parallel {

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
  if (gpus > 0 && l.gpus() != gpus)
    throw InputError(fmt::format("--layouts: '{}' uses {} GPUs, not the {} of the run", trim(item),
                                 l.gpus(), gpus));
  return l;
}

}  // namespace

std::vector<Layout> every_layout(int gpus, const model::ModelConfig& m) {
  if (gpus < 1) throw InputError(fmt::format("{} GPUs: at least 1 is needed", gpus));
  std::vector<Layout> out;
  for (int tp = 1; tp <= gpus; ++tp)
    for (int pp = 1; tp * pp <= gpus; ++pp)
      if (gpus % (tp * pp) == 0) {
        const Layout l{gpus / (tp * pp), tp, pp};
        if (valid(l, m)) out.push_back(l);
      }
  return out;
}

std::vector<Layout> parse_layouts(const std::string& text, int gpus, const model::ModelConfig& m) {
  if (gpus < 0) throw InputError(fmt::format("--layouts: {} GPUs", gpus));
  std::vector<Layout> out;
  if (trim(text) == "all" && gpus == 0) return out;
  if (trim(text) == "all") {
    const auto pow2 = [](int n) { return (n & (n - 1)) == 0; };
    for (const Layout& l : every_layout(gpus, m))
      if (pow2(l.dp) && pow2(l.tp) && pow2(l.pp)) out.push_back(l);
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
    if (!out.empty() && l.gpus() != out.front().gpus())
      throw InputError(fmt::format("--layouts: '{}' uses {} GPUs, '{}' {}: a run has one count",
                                   l.name(), l.gpus(), out.front().name(), out.front().gpus()));
    out.push_back(l);
  }
  return out;
}

Place Place::of(const Layout& l, int rank) {
  Place p;
  p.trank = rank % l.tp;
  p.stage = rank / l.tp % l.pp;
  p.replica = rank / (l.tp * l.pp);
  return p;
}

LayoutComms::LayoutComms(RankGroup& group, int rank, const Layout& l, bool ring, int max_ctas) {
  if (group.size() != l.gpus())
    throw InputError(
        fmt::format("layout {} needs {} GPUs, the group has {}", l.name(), l.gpus(), group.size()));
  const Place at = Place::of(l, rank);
  // Ids made on rank 0: every tensor group's, then every pipeline's, then every ring's; each
  // rank joins its own in that order (the same order everywhere).
  const int tp_groups = l.dp * l.pp, pp_groups = l.dp * l.tp;
  // Only the ids of communicators this layout has: each made id keeps a listening socket open.
  std::vector<ncclUniqueId> ids(static_cast<std::size_t>(tp_groups + 2 * pp_groups));
  const auto used = [&](std::size_t i) {
    const auto t = static_cast<std::size_t>(tp_groups), p = static_cast<std::size_t>(pp_groups);
    return i < t ? l.tp > 1 : i < t + p ? l.pp > 1 : l.pp > 1 && ring;
  };
  if (rank == 0)
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (used(i)) GPB_NCCL_CHECK(ncclGetUniqueId(&ids[i]));
  if (l.tp > 1 || l.pp > 1) group.broadcast(rank, ids.data(), ids.size() * sizeof(ncclUniqueId));
  const auto id = [&](int i) -> const ncclUniqueId& { return ids[static_cast<std::size_t>(i)]; };
  if (l.tp > 1) tp = NcclComm(id(at.replica * l.pp + at.stage), l.tp, at.trank);
  const int pipeline = at.replica * l.tp + at.trank;
  if (l.pp > 1) pp = NcclComm(id(tp_groups + pipeline), l.pp, at.stage, max_ctas);
  if (l.pp > 1 && ring)
    this->ring = NcclComm(id(tp_groups + pp_groups + pipeline), l.pp, at.stage, max_ctas);
}

std::string agreed_memory_check(RankGroup& group, int rank, std::uint64_t need) {
  std::size_t free_b = 0, total_b = 0;
  GPB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const auto needs = group.all_gather(rank, static_cast<double>(need));
  const auto frees = group.all_gather(rank, static_cast<double>(free_b));
  for (std::size_t j = 0; j < needs.size(); ++j)
    if (needs[j] + static_cast<double>(kMemoryReserve) > frees[j])
      return fmt::format("does not fit in GPU memory: rank {} needs {} (and {} spare) with {} free",
                         j, format_bytes(static_cast<std::uint64_t>(needs[j])),
                         format_bytes(kMemoryReserve),
                         format_bytes(static_cast<std::uint64_t>(frees[j])));
  return "";
}

}  // namespace gpubench::parallel
