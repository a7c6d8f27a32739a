// `gpubench advise`: the building blocks a plan needs and its prediction from them. Pure
// arithmetic, no GPU.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/model/cost.hpp"
#include "gpubench/modules/advise/advise.hpp"

namespace gpubench::advise {

namespace {

constexpr std::uint64_t kTokenBytes = 4;  // an int32 token id

template <class Map, class Key>
const typename Map::mapped_type& block(const Map& map, const Key& key, const std::string& what) {
  const auto it = map.find(key);
  if (it == map.end()) throw InputError(fmt::format("no {} measured", what));
  return it->second;
}

Parts mean(const Parts& a, const Parts& b) {
  return {(a.layer + b.layer) / 2, (a.embed + b.embed) / 2, (a.head + b.head) / 2};
}

// The bytes a microbatch's hidden states take: prefill (its prompts) and decode (a token each).
std::uint64_t hidden_bytes(const Settings& s, const Plan& p, bool prefill) {
  return static_cast<std::uint64_t>(p.micro) * (prefill ? s.prompt : 1) *
         static_cast<std::uint64_t>(s.model.hidden_size) * s.elem_bytes;
}

// One GPU's share of a layer's decode bytes and prefill FLOPs at tp (weights, KV cache and
// FLOPs split over the ranks; activations, small, left whole), and of the ends (not split).
struct StageWork {
  double layer_bytes = 0, embed_bytes = 0, head_bytes = 0, layer_flops = 0, head_flops = 0;
};
StageWork stage_work(const Settings& s, const Plan& p) {
  const std::int64_t mean_context = s.prompt + (s.output_len - 2) / 2;
  const model::ModelCost dec =
      model::model_cost(s.model, model::Phase::Decode, p.micro, 1, mean_context, s.elem_bytes);
  const model::ModelCost pre =
      model::model_cost(s.model, model::Phase::Prefill, p.micro, s.prompt, 0, s.elem_bytes);
  StageWork w;
  w.layer_bytes = model::totals(dec.layer).bytes / p.layout.tp;
  w.layer_flops = model::totals(pre.layer).flops / p.layout.tp;
  for (const model::OpCost& op : dec.outside_layers)
    (op.name == "final_norm" || op.name == "lm_head" ? w.head_bytes : w.embed_bytes) += op.bytes;
  for (const model::OpCost& op : pre.outside_layers)
    if (op.name == "final_norm" || op.name == "lm_head") w.head_flops += op.flops;
  return w;
}

}  // namespace

Needs needs_of(const Settings& s, const Plan& p) {
  Needs n;
  n.compute.push_back({p.layout.tp, p.micro});
  if (p.layout.tp > 1)
    for (bool prefill : {true, false})
      n.all_reduces.push_back({p.layout.tp, hidden_bytes(s, p, prefill)});
  if (p.layout.pp > 1)
    n.transfers = {hidden_bytes(s, p, true), hidden_bytes(s, p, false),
                   static_cast<std::uint64_t>(p.micro) * kTokenBytes};
  return n;
}

Needs merge(const std::vector<Needs>& all) {
  Needs out;
  for (const Needs& n : all) {
    out.compute.insert(out.compute.end(), n.compute.begin(), n.compute.end());
    out.all_reduces.insert(out.all_reduces.end(), n.all_reduces.begin(), n.all_reduces.end());
    out.transfers.insert(out.transfers.end(), n.transfers.begin(), n.transfers.end());
  }
  const auto unique = [](auto& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  };
  unique(out.compute);
  unique(out.all_reduces);
  unique(out.transfers);
  return out;
}

Prediction predict(const Settings& s, const Plan& p, const Blocks& b) {
  const Layout& l = p.layout;
  const Blocks::Key key{l.tp, p.micro};
  const std::string at = fmt::format("at tp={}, {} sequences a step", l.tp, p.micro);
  const Parts& pre = block(b.prefill, key, "prefill " + at);
  const Parts dec = mean(block(b.decode_first, key, "decode step " + at),
                         block(b.decode_last, key, "decode step " + at));
  const auto all_reduce = [&](bool prefill) {
    const std::uint64_t bytes = hidden_bytes(s, p, prefill);
    return l.tp > 1 ? block(b.all_reduce_s, std::make_pair(l.tp, bytes),
                            fmt::format("all-reduce of {} bytes on {} GPUs", bytes, l.tp))
                    : 0.0;
  };
  const auto transfer = [&](std::uint64_t bytes) {
    return l.pp > 1 ? block(b.transfer_s, bytes, fmt::format("transfer of {} bytes", bytes)) : 0.0;
  };
  const double ar_pre = all_reduce(true), ar_dec = all_reduce(false);
  const double x_pre = transfer(hidden_bytes(s, p, true));
  const double x_dec = transfer(hidden_bytes(s, p, false));
  const double x_tok = transfer(static_cast<std::uint64_t>(p.micro) * kTokenBytes);
  const double steps = static_cast<double>(s.output_len - 1), m = p.m;

  const StageWork work = stage_work(s, p);
  double sum_f = 0, max_f = x_pre, sum_d = 0, max_d = 0, busiest = -1;
  Prediction out;
  for (int k = 0; k < l.pp; ++k) {
    const double layers = p.stage_layers.at(static_cast<std::size_t>(k));
    const double ends_pre = (k == 0 ? pre.embed : 0) + (k == l.pp - 1 ? pre.head : 0);
    const double ends_dec = (k == 0 ? dec.embed : 0) + (k == l.pp - 1 ? dec.head : 0);
    const double comm_f = 2 * layers * ar_pre, comm_d = 2 * layers * ar_dec;
    const double f = layers * pre.layer + ends_pre + comm_f;
    const double d = layers * dec.layer + ends_dec + comm_d;
    sum_f += f;
    sum_d += d;
    max_f = std::max(max_f, f);
    max_d = std::max(max_d, d);
    const double busy = m * f + steps * m * d;
    if (busy > busiest) {
      busiest = busy;
      out.comm_s = m * comm_f + steps * m * comm_d;
      out.compute_s = busy - out.comm_s;
      const bool first = k == 0, last = k == l.pp - 1;
      out.decode_bytes =
          layers * work.layer_bytes + (first ? work.embed_bytes : 0) + (last ? work.head_bytes : 0);
      out.decode_compute_s = d - comm_d;
      out.prefill_flops = layers * work.layer_flops + (last ? work.head_flops : 0);
      out.prefill_compute_s = f - comm_f;
    }
  }
  out.ttft_s = sum_f + (l.pp - 1) * x_pre + (m - 1) * max_f;
  const double cycle = sum_d + (l.pp - 1) * x_dec + (l.pp > 1 ? x_tok : 0.0);
  out.tpot_s = std::max(cycle, m * max_d);
  out.e2e_s = out.ttft_s + steps * out.tpot_s;
  out.tokens_per_s = static_cast<double>(p.batch * s.output_len) / out.e2e_s;
  out.wait_s = std::max(0.0, out.e2e_s - busiest);
  return out;
}

double error_pct(double predicted, double measured) {
  if (!(measured > 0)) throw InputError(fmt::format("measured time {} must be positive", measured));
  return 100.0 * (predicted - measured) / measured;
}

std::string explain(const Plan& p, const Prediction& pred, const Prediction& baseline,
                    double hbm_GBps, double peak_tflops) {
  const double busy = pred.compute_s + pred.comm_s + pred.wait_s;
  const auto share = [&](double x) { return busy > 0 ? 100.0 * x / busy : 0.0; };
  const std::string split =
      p.layout.gpus() == 1 ? std::string("all of it compute")
                           : fmt::format(
                                 "its busiest GPU computes {:.0f}% of the time, spends {:.0f}% in "
                                 "tensor-parallel all-reduces and {:.0f}% waiting on other stages",
                                 share(pred.compute_s), share(pred.comm_s), share(pred.wait_s));
  const std::string against =
      p.layout.gpus() == 1 ? std::string()
      : p.workload == Workload::Latency
          ? fmt::format(" against {:.2f} and {:.1f} on one GPU", baseline.tpot_s * 1e3,
                        baseline.ttft_s * 1e3)
          : fmt::format(
                " against {:.0f} on one GPU ({:.2f}x)", baseline.tokens_per_s,
                baseline.tokens_per_s > 0 ? pred.tokens_per_s / baseline.tokens_per_s : 0.0);
  std::string roofline;
  if (hbm_GBps > 0 && pred.decode_compute_s > 0) {
    const double GBps = pred.decode_bytes / pred.decode_compute_s / 1e9;
    roofline = fmt::format(
        " A decode step reads {:.2f} GB on its busiest GPU in {:.2f} ms ({:.2f} "
        "TB/s, {:.0f}% of the HBM peak)",
        pred.decode_bytes / 1e9, pred.decode_compute_s * 1e3, GBps / 1e3, 100 * GBps / hbm_GBps);
    if (peak_tflops > 0 && pred.prefill_compute_s > 0) {
      const double tflops = pred.prefill_flops / pred.prefill_compute_s / 1e12;
      roofline += fmt::format("; prefill computes at {:.0f} TFLOP/s ({:.0f}% of the dense peak)",
                              tflops, 100 * tflops / peak_tflops);
    }
    roofline += ".";
  }
  if (p.workload == Workload::Latency)
    return fmt::format("Predicted {:.2f} ms a token and {:.1f} ms to the first{}; {}.{}",
                       pred.tpot_s * 1e3, pred.ttft_s * 1e3, against, split, roofline);
  return fmt::format("Predicted {:.0f} tokens/s{}; {}.{}", pred.tokens_per_s, against, split,
                     roofline);
}

nlohmann::ordered_json Blocks::to_json() const {
  auto parts = [](const std::map<Key, Parts>& m) {
    auto a = nlohmann::ordered_json::array();
    for (const auto& [k, v] : m)
      a.push_back({{"tp", k.first},
                   {"sequences", k.second},
                   {"layer_s", v.layer},
                   {"embed_s", v.embed},
                   {"head_s", v.head}});
    return a;
  };
  auto ar = nlohmann::ordered_json::array();
  for (const auto& [k, v] : all_reduce_s)
    ar.push_back({{"ranks", k.first}, {"bytes", k.second}, {"seconds", v}});
  auto tr = nlohmann::ordered_json::array();
  for (const auto& [k, v] : transfer_s) tr.push_back({{"bytes", k}, {"seconds", v}});
  return {{"prefill", parts(prefill)},
          {"decode_first", parts(decode_first)},
          {"decode_last", parts(decode_last)},
          {"all_reduce", ar},
          {"transfer", tr}};
}

Blocks Blocks::from_json(const nlohmann::ordered_json& j) {
  const auto number = [](const nlohmann::ordered_json& o, const char* key, bool positive) {
    if (!o.is_object() || !o.contains(key) || !o[key].is_number())
      throw InputError(fmt::format("building blocks: '{}' missing or not a number", key));
    const double v = o[key].get<double>();
    if (!(positive ? v > 0 : v >= 0) || !std::isfinite(v))
      throw InputError(fmt::format("building blocks: '{}' is {}", key, v));
    return v;
  };
  const auto array = [&](const char* key) {
    if (!j.is_object() || !j.contains(key) || !j[key].is_array())
      throw InputError(fmt::format("building blocks: no '{}' list", key));
    return j[key];
  };
  Blocks b;
  for (const char* phase : {"prefill", "decode_first", "decode_last"}) {
    auto& into = std::string(phase) == "prefill"        ? b.prefill
                 : std::string(phase) == "decode_first" ? b.decode_first
                                                        : b.decode_last;
    for (const auto& e : array(phase)) {
      const Key key{static_cast<int>(number(e, "tp", true)),
                    static_cast<std::int64_t>(number(e, "sequences", true))};
      into[key] = {number(e, "layer_s", true), number(e, "embed_s", false),
                   number(e, "head_s", false)};
    }
  }
  for (const auto& e : array("all_reduce"))
    b.all_reduce_s[{static_cast<int>(number(e, "ranks", true)),
                    static_cast<std::uint64_t>(number(e, "bytes", true))}] =
        number(e, "seconds", true);
  for (const auto& e : array("transfer"))
    b.transfer_s[static_cast<std::uint64_t>(number(e, "bytes", true))] = number(e, "seconds", true);
  return b;
}

}  // namespace gpubench::advise
