// Options -> Settings for `gpubench allreduce`: defaults, parsing and checks.
#include "gpubench/modules/allreduce/settings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

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

// nccl-tests' flags: each mapped onto what gpubench does, a note where it changes nothing, or
// InputError where gpubench does not do it (rather than run something else under its name).
void nccl_flags(const Options& o, Settings& s) {
  const auto refuse = [](const char* flag, int value, const char* what) {
    throw InputError(
        fmt::format("{} {}: {} is not done by gpubench allreduce (yet)", flag, value, what));
  };
  if (o.nthreads == 0 || o.ngpus == 0 || o.nthreads < -1 || o.ngpus < -1)
    throw InputError("-t and -g must be at least 1");
  if (o.nthreads > 0 || o.ngpus > 0)
    s.gpus_per_process = std::max(o.nthreads, 1) * std::max(o.ngpus, 1);
  if (o.iters == 0 || o.iters < -1) throw InputError("-n must be at least 1");
  if (o.iters > 0) s.iters = o.iters;
  if (o.warmup_iters < -1) throw InputError("-w must be at least 0");
  s.warmup = o.warmup_iters;
  if (o.per_iter_skip < -1) throw InputError("-K must be at least 0");
  if (o.per_iter_skip > 0) s.warmup = std::max(s.warmup, 0) + o.per_iter_skip;
  if (o.run_cycles < -1)
    throw InputError(fmt::format("-N {}: at least 0 (0: until stopped)", o.run_cycles));
  if (o.run_cycles >= 0) s.cycles = o.run_cycles;
  if (o.parallel_init >= 0)
    s.notes.push_back("-p: gpubench always sets up its ranks in parallel (a thread each)");
  switch (o.blocking_mode) {
    case -1:
    case 0:
      break;
    case 1:
      s.blocking = s.barrier_each_op = true;
      break;
    case 2:
      s.blocking = true;
      break;
    case 3:
      s.notes.push_back(
          "-z 3: gpubench always waits for every rank and meets at a barrier before each timed "
          "iteration, the barrier outside the time");
      break;
    default:
      throw InputError(fmt::format("-z {}: not one of 0, 1, 2, 3", o.blocking_mode));
  }
  if (o.stream_null > 0) refuse("-y", o.stream_null, "running on the NULL stream");
  if (o.cudagraph > 0) {
    s.cuda_graph = true;
    s.notes.push_back(fmt::format(
        "-G {}: each timed iteration replays one CUDA graph of the iteration's ops; gpubench's "
        "stopping rule decides how many",
        o.cudagraph));
  }
  if (o.report_cputime > 0)
    refuse("-C", o.report_cputime, "reporting CPU time (gpubench reports GPU event time)");
  s.timestamps = o.report_timestamps > 0;
  if (o.average < -1 || o.average > 3)
    throw InputError(
        fmt::format("-a {}: not one of 0 (rank 0), 1 (mean), 2 (min), 3 (max)", o.average));
  if (o.average >= 0) s.rank_time = o.average;
  if (o.local_register < -1 || o.local_register > 2)
    throw InputError(
        fmt::format("-R {}: not one of 0 (none), 1 (ncclCommRegister), 2 (symmetric windows)",
                    o.local_register));
  s.registration = std::max(o.local_register, 0);
  if (o.cta_policy < -1 || o.cta_policy > 2)
    throw InputError(
        fmt::format("-x {}: not one of 0 (default), 1 (efficiency), 2 (zero)", o.cta_policy));
  s.cta_policy = o.cta_policy;
  if (o.device_implementation > 0)
    throw InputError(
        fmt::format("-D {}: nccl-tests' own device-API kernels do not apply: gpubench times NCCL's "
                    "collectives",
                    o.device_implementation));
  if (o.device_cta_count > 0)
    s.notes.push_back("-V: applies to nccl-tests' own device kernels (-D) only: ignored");
  s.memory_report = o.memory > 0;
  if (o.unalign < -1 || o.unalign > 1024)
    throw InputError(fmt::format("-u {}: must be between 0 and 1024 elements", o.unalign));
  s.unalign = std::max(o.unalign, 0);
  if (o.per_iter_timing >= 0)
    s.notes.push_back("-I: gpubench always times each iteration (the stats columns)");
}

// --impl one-shot: gpubench's one-shot kernel (the tp engine's small all-reduce) in place of
// NCCL, for what it does: an in-place bf16 or fp16 sum, one communicator.
void one_shot_settings(const Options& o, Settings& s) {
  if (o.impl == "nccl") return;
  if (o.impl != "one-shot")
    throw InputError(fmt::format("--impl: '{}' is not one of nccl, one-shot", o.impl));
  s.one_shot = true;
  const auto refuse = [](const std::string& why) { throw InputError("--impl one-shot: " + why); };
  if (s.collectives.size() != 1 || s.collectives[0].kind != Kind::AllReduce)
    refuse("all_reduce only (--collective all_reduce)");
  for (const DataType& t : s.types)
    if (t.name != "bf16" && t.name != "fp16") refuse("bf16 or fp16 (-d bf16), not " + t.name);
  for (const ReduceOp& op : s.ops)
    if (op.name != "sum") refuse("sums only (-o sum), not " + op.name);
  if (s.split != 1) refuse("one communicator (--split 1)");
  if (s.registration > 0) refuse("its buffers are its own (no -R)");
  if (s.min_bytes > kOneShotMaxBytes)
    refuse(fmt::format("messages up to {} (-b)", format_bytes(kOneShotMaxBytes)));
  if (!s.in_place) refuse("it sums in place (not --place out)");
  if (s.out_of_place) {
    s.out_of_place = false;
    s.notes.push_back("--impl one-shot sums in place: in-place rows only");
  }
}

}  // namespace

Settings resolve_settings(const Options& o, bool quick) {
  Settings s;
  s.collectives = parse_collectives(o.collective);
  if (!(o.skew >= 0 && o.skew <= 1))
    throw InputError(fmt::format("--skew {}: must be between 0 (even) and 1", o.skew));
  for (Collective& c : s.collectives) c.skew = o.skew;
  s.types = parse_list_or_all<DataType>(o.type, all_types(),
                                        [](const std::string& n) { return parse_type(n); });
  s.ops = parse_list_or_all<ReduceOp>(o.op, all_ops(),
                                      [](const std::string& n) { return parse_op(n); });
  const std::string root = trim(o.root);
  if (root == "all" || root == "-1") {
    s.all_roots = true;
  } else {
    char* end = nullptr;
    const long v = std::strtol(root.c_str(), &end, 10);
    if (root.empty() || *end != '\0' || v < 0 || v > 1 << 20)
      throw InputError(fmt::format("--root '{}': a rank (0, 1, ...) or all", o.root));
    s.root = static_cast<int>(v);
  }
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
  if (o.split < 1) throw InputError(fmt::format("--split {} must be >= 1", o.split));
  s.split = o.split;
  if (!(o.timeout > 0)) throw InputError("--timeout must be greater than 0 seconds");
  s.timeout_s = o.timeout;
  s.allow_shared_gpus = o.allow_shared_gpus;
  nccl_flags(o, s);
  one_shot_settings(o, s);
  if (s.cuda_graph && s.blocking)
    throw InputError("CUDA graphs (-G) and blocking (-z 1, -z 2) exclude each other");
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
  if (all_roots)
    j["root"] = "all";
  else
    j["root"] = root;
  for (const auto& c : collectives)
    if (c.kind == Kind::AllToAllV) j["alltoallv_skew"] = c.skew;
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
  j["barrier_each_op"] = barrier_each_op;
  if (gpus_per_process > 0) j["gpus_per_process"] = gpus_per_process;
  if (iters > 0) j["iters_per_size"] = iters;
  if (warmup >= 0) j["warmup_per_size"] = warmup;
  if (registration > 0)
    j["registration"] = registration == 1 ? "ncclCommRegister" : "symmetric windows";
  if (cta_policy >= 0) j["cta_policy"] = cta_policy;
  if (unalign > 0) j["unalign_elements"] = unalign;
  static const char* const kRankTime[] = {"rank 0", "mean", "fastest", "slowest"};
  j["rank_time"] = kRankTime[rank_time];
  if (timestamps) j["timestamps"] = true;
  if (memory_report) j["memory_report"] = true;
  if (cycles != 1) j["cycles"] = cycles;
  j["impl"] = one_shot ? "one-shot" : "nccl";
  j["split"] = split;
  j["timeout_s"] = timeout_s;
  return j;
}

}  // namespace gpubench::allreduce
