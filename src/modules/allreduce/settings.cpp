// Options -> Settings for `gpubench allreduce`: defaults, parsing and checks.
#include "settings.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"

namespace gpubench::allreduce {

namespace {

template <class T, class Parse>
std::vector<T> parse_list_or_all(const std::string& text, const std::vector<T>& all, Parse parse) {
  if (trim(text) == "all") return all;
  std::vector<T> out;
  for (const auto& item : split_list(text)) out.push_back(parse(item));
  return out;
}

}  // namespace

Settings resolve_settings(const Options& o, bool quick) {
  Settings s;
  s.collectives = parse_collectives(o.collective);
  s.types = parse_list_or_all<DataType>(o.type, all_types(),
                                        [](const std::string& n) { return parse_type(n); });
  s.ops = parse_list_or_all<ReduceOp>(o.op, all_ops(),
                                      [](const std::string& n) { return parse_op(n); });
  if (o.root < 0) throw InputError(fmt::format("--root {} is negative", o.root));
  s.root = o.root;
  s.min_bytes = parse_size_option("--min-bytes", o.min_bytes, 8);
  s.max_bytes =
      parse_size_option("--max-bytes", o.max_bytes, quick ? (256ull << 20) : (8ull << 30));
  s.step_bytes = parse_size_option("--step-bytes", o.step_bytes, 0);
  s.step_factor = o.step_factor;
  if (!o.step_bytes.empty() && o.step_factor != 2.0)
    throw InputError("--step-factor and --step-bytes exclude each other");
  if (quick && o.step_bytes.empty() && o.step_factor == 2.0) s.step_factor = 4;  // fewer points
  (void)sweep_sizes(s.min_bytes, s.max_bytes, s.step_factor, s.step_bytes, 1);   // checks
  if (o.agg_iters < 0) throw InputError("--agg-iters must be >= 0 (0: by message size)");
  s.agg_iters = o.agg_iters;
  if (o.place == "both") {
  } else if (o.place == "out") {
    s.in_place = false;
  } else if (o.place == "in") {
    s.out_of_place = false;
  } else {
    throw InputError(fmt::format("--place: '{}' is not one of both, out, in", o.place));
  }
  if (o.check < 0) throw InputError("--check must be >= 0");
  s.check = o.check;
  s.cuda_graph = o.cuda_graph;
  s.blocking = o.blocking;
  if (s.cuda_graph && s.blocking)
    throw InputError("--cuda-graph and --blocking exclude each other");
  if (o.split < 1) throw InputError(fmt::format("--split {} must be >= 1", o.split));
  s.split = o.split;
  if (!(o.timeout > 0)) throw InputError("--timeout must be greater than 0 seconds");
  s.timeout_s = o.timeout;
  s.allow_shared_gpus = o.allow_shared_gpus;
  return s;
}

int agg_for(std::uint64_t size, int requested) {
  if (requested > 0) return requested;
  // 20 ops below 1 MiB (nccl-tests' default iteration count), then fewer, but never under 4:
  // back-to-back ops overlap one's tail with the next one's start, which is the time per op
  // nccl-tests reports (docs/DECISIONS.md).
  if (size <= (1ull << 20)) return 20;
  const auto by_size = static_cast<int>((64ull << 20) / size);
  return std::clamp(by_size, 4, 20);
}

nlohmann::ordered_json Settings::to_json() const {
  nlohmann::ordered_json j;
  std::vector<std::string> names;
  for (const auto& c : collectives) names.push_back(c.name);
  j["collectives"] = names;
  names.clear();
  for (const auto& t : types) names.push_back(t.name);
  j["types"] = names;
  names.clear();
  for (const auto& op : ops) names.push_back(op.name);
  j["ops"] = names;
  j["root"] = root;
  j["min_bytes"] = min_bytes;
  j["max_bytes"] = max_bytes;
  if (step_bytes > 0)
    j["step_bytes"] = step_bytes;
  else
    j["step_factor"] = step_factor;
  j["agg_iters"] = agg_iters;
  j["out_of_place"] = out_of_place;
  j["in_place"] = in_place;
  j["check"] = check;
  j["cuda_graph"] = cuda_graph;
  j["blocking"] = blocking;
  j["split"] = split;
  j["timeout_s"] = timeout_s;
  return j;
}

}  // namespace gpubench::allreduce
