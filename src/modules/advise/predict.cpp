// `gpubench advise`: the building blocks a plan needs and its prediction from them. Pure
// arithmetic, no GPU.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

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

// A training plan's bucket in bytes.
std::uint64_t bucket_bytes(const Settings& s, const TrainBucket& b) {
  return static_cast<std::uint64_t>(b.elems) * s.elem_bytes;
}

Needs train_needs(const Settings& s, const Plan& p) {
  Needs n;
  n.train.push_back(p.micro);
  n.adamw = true;
  const int ranks = p.layout.gpus();
  if (ranks == 1) return n;
  for (const TrainBucket& b : p.buckets) {
    const std::pair<int, std::uint64_t> key{ranks, bucket_bytes(s, b)};
    if (p.strategy == parallel::Strategy::Ddp) {
      n.bucket_all_reduces.push_back(key);
    } else {
      n.reduce_scatters.push_back(key);
      n.all_gathers.push_back(key);
    }
  }
  return n;
}

}  // namespace

Needs needs_of(const Settings& s, const Plan& p) {
  if (p.workload == Workload::Train) return train_needs(s, p);
  Needs n;
  n.compute.push_back({p.layout.tp, p.micro});
  if (p.overlap) {
    n.overlap_compute.push_back({p.layout.tp, p.micro});
    n.copy_all_reduces.push_back({p.layout.tp, overlap_chunk_bytes(s, p.micro)});
  }
  if (p.layout.tp > 1)
    for (bool prefill : {true, false})
      if (!prefill || !p.overlap)
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
    out.train.insert(out.train.end(), n.train.begin(), n.train.end());
    out.bucket_all_reduces.insert(out.bucket_all_reduces.end(), n.bucket_all_reduces.begin(),
                                  n.bucket_all_reduces.end());
    out.reduce_scatters.insert(out.reduce_scatters.end(), n.reduce_scatters.begin(),
                               n.reduce_scatters.end());
    out.all_gathers.insert(out.all_gathers.end(), n.all_gathers.begin(), n.all_gathers.end());
    out.overlap_compute.insert(out.overlap_compute.end(), n.overlap_compute.begin(),
                               n.overlap_compute.end());
    out.copy_all_reduces.insert(out.copy_all_reduces.end(), n.copy_all_reduces.begin(),
                                n.copy_all_reduces.end());
    out.adamw = out.adamw || n.adamw;
  }
  const auto unique = [](auto& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  };
  unique(out.compute);
  unique(out.all_reduces);
  unique(out.transfers);
  unique(out.train);
  unique(out.bucket_all_reduces);
  unique(out.reduce_scatters);
  unique(out.all_gathers);
  unique(out.overlap_compute);
  unique(out.copy_all_reduces);
  return out;
}

PipelineTimes play_pipeline(const std::vector<double>& f, const std::vector<double>& d,
                            double x_pre, double x_dec, double x_tok, int m, std::int64_t steps) {
  const std::size_t pp = f.size(), last = pp - 1;
  if (pp == 0 || d.size() != pp || m < 1 || steps < 0)
    throw std::invalid_argument("play_pipeline: stages, microbatches or steps out of range");
  std::vector<double> done(pp, 0.0), sent(pp, 0.0);  // each stage's previous job's
  std::vector<double> tokens_ready(static_cast<std::size_t>(m), 0.0);  // a microbatch's last
  PipelineTimes t;
  const std::int64_t jobs = static_cast<std::int64_t>(m) * (steps + 1);
  for (std::int64_t j = 0; j < jobs; ++j) {
    const bool prefill = j < m;
    const double x = prefill ? x_pre : x_dec;
    for (std::size_t k = 0; k < pp; ++k) {
      // Its stream reaches the job once the previous one is computed and its hidden states left.
      const double ready = std::max(done[k], k < last ? sent[k] : 0.0);
      double start = ready;
      if (k > 0) {  // the hidden states from k - 1, which computed this job already
        start = std::max(done[k - 1], ready) + x;
        sent[k - 1] = start;
      } else if (!prefill && pp > 1) {  // the tokens the last stage sent back a step before
        start = std::max(ready, tokens_ready[static_cast<std::size_t>(j % m)]) + x_tok;
      }
      done[k] = start + (prefill ? f[k] : d[k]);
    }
    tokens_ready[static_cast<std::size_t>(j % m)] = done[last];
    if (j == m - 1) t.ttft_s = done[last];
  }
  t.e2e_s = done[last];
  return t;
}

double overlapped_prefill_s(int layers, double layer_s, double attention_share, double all_reduce_s,
                            int chunks) {
  const double attention = attention_share * layer_s / chunks;
  const double mlp = (1 - attention_share) * layer_s / chunks;
  const auto n = static_cast<std::size_t>(std::max(chunks, 1));
  std::vector<double> attention_summed(n, 0.0), mlp_summed(n, 0.0);
  double compute = 0, comm = 0;
  const auto hand_over = [&](double& summed) {
    comm = std::max(comm, compute) + all_reduce_s;
    summed = comm;
  };
  for (int l = 0; l < layers; ++l) {
    for (std::size_t c = 0; c < n; ++c) {
      compute = std::max(compute, mlp_summed[c]) + attention;
      hand_over(attention_summed[c]);
    }
    for (std::size_t c = 0; c < n; ++c) {
      compute = std::max(compute, attention_summed[c]) + mlp;
      hand_over(mlp_summed[c]);
    }
  }
  return std::max(compute, comm);
}

int better_twin(const std::vector<Plan>& ranked, std::size_t i) {
  const Plan& p = ranked.at(i);
  if (p.workload == Workload::Train || p.layout.gpus() == 1) return -1;
  // Latency's replicas each run the one sequence: dp=4 is one GPU's generation four times.
  const auto same = [&](const Layout& a) {
    return p.workload == Workload::Latency ? a.tp == p.layout.tp && a.pp == p.layout.pp
                                           : a == p.layout;
  };
  for (std::size_t j = 0; j < i; ++j)
    if (ranked[j].workload == p.workload && same(ranked[j].layout)) return static_cast<int>(j);
  return -1;
}

Prediction predict(const Settings& s, const Plan& p, const Blocks& b) {
  if (p.workload == Workload::Train) return predict_train(s, p, b);
  const Layout& l = p.layout;
  const Blocks::Key key{l.tp, p.micro};
  const std::string at = fmt::format("at tp={}, {} sequences a step", l.tp, p.micro);
  const Parts& pre = p.overlap ? block(b.prefill_overlap, key, "overlapped prefill " + at)
                               : block(b.prefill, key, "prefill " + at);
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
  // An overlapped prefill's layers (their all-reduces within) instead of L x (layer + 2 sums).
  const auto overlapped = [&, share = attention_share(s, p.micro, s.prompt, true)](double layers) {
    const std::uint64_t bytes = overlap_chunk_bytes(s, p.micro);
    const double r =
        block(b.copy_all_reduce_s, std::make_pair(l.tp, bytes),
              fmt::format("copy-engine all-reduce of {} bytes on {} GPUs", bytes, l.tp));
    return overlapped_prefill_s(static_cast<int>(layers), pre.layer, share, r, kOverlapChunks);
  };
  const double ar_pre = p.overlap ? 0.0 : all_reduce(true), ar_dec = all_reduce(false);
  const double x_pre = transfer(hidden_bytes(s, p, true));
  const double x_dec = transfer(hidden_bytes(s, p, false));
  const double x_tok = transfer(static_cast<std::uint64_t>(p.micro) * kTokenBytes);
  const double steps = static_cast<double>(s.output_len - 1), m = p.m;

  const StageWork work = stage_work(s, p);
  std::vector<double> fs, ds;
  double busiest = -1;
  Prediction out;
  for (int k = 0; k < l.pp; ++k) {
    const double layers = p.stage_layers.at(static_cast<std::size_t>(k));
    const double ends_pre = (k == 0 ? pre.embed : 0) + (k == l.pp - 1 ? pre.head : 0);
    const double ends_dec = (k == 0 ? dec.embed : 0) + (k == l.pp - 1 ? dec.head : 0);
    const double comm_f = p.overlap ? overlapped(layers) - layers * pre.layer : 2 * layers * ar_pre;
    const double comm_d = 2 * layers * ar_dec;
    const double f = layers * pre.layer + ends_pre + comm_f;
    const double d = layers * dec.layer + ends_dec + comm_d;
    fs.push_back(f);
    ds.push_back(d);
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
  const PipelineTimes t = play_pipeline(fs, ds, x_pre, x_dec, x_tok, p.m, s.output_len - 1);
  out.ttft_s = t.ttft_s;
  out.e2e_s = t.e2e_s;
  out.tpot_s = steps > 0 ? (t.e2e_s - t.ttft_s) / steps : 0.0;
  out.tokens_per_s = static_cast<double>(p.batch * s.output_len) / out.e2e_s;
  out.wait_s = std::max(0.0, out.e2e_s - busiest);
  return out;
}

namespace {

// A training plan's buckets timed: compute of their units forward and backward, their
// collective after backward (all-reduce or reduce-scatter) and their all-gather (zero's after
// the optimizer, fsdp's before forward and backward). One GPU runs no collective.
struct BucketTimes {
  std::vector<double> forward, backward, reduce, gather;
};
BucketTimes bucket_times(const Settings& s, const Plan& p, const Blocks& b, const Parts& fwd,
                         const Parts& bwd) {
  const int n = p.layout.gpus();
  const bool ddp = p.strategy == parallel::Strategy::Ddp;
  const auto comm = [&](const std::map<std::pair<int, std::uint64_t>, double>& m,
                        const TrainBucket& k, const char* what) {
    if (n == 1) return 0.0;
    const std::uint64_t bytes = bucket_bytes(s, k);
    return block(m, std::make_pair(n, bytes),
                 fmt::format("{} of {} bytes on {} GPUs", what, bytes, n));
  };
  BucketTimes t;
  for (const TrainBucket& k : p.buckets) {
    t.forward.push_back(k.forward_layers * fwd.layer + (k.head ? fwd.head : 0.0));
    t.backward.push_back(k.backward_layers * bwd.layer + (k.head ? bwd.head : 0.0));
    t.reduce.push_back(ddp ? comm(b.bucket_all_reduce_s, k, "all-reduce")
                           : comm(b.reduce_scatter_s, k, "reduce-scatter"));
    t.gather.push_back(ddp ? 0.0 : comm(b.all_gather_s, k, "all-gather"));
  }
  return t;
}

}  // namespace

Prediction predict_train(const Settings& s, const Plan& p, const Blocks& b) {
  const std::string at = fmt::format("at {} sequences a GPU", p.micro);
  const Parts& fwd = block(b.train_forward, p.micro, "training forward " + at);
  const Parts& bwd = block(b.train_backward, p.micro, "training backward " + at);
  if (!(b.adamw_s > 0)) throw InputError("no AdamW step measured");
  const BucketTimes t = bucket_times(s, p, b, fwd, bwd);
  const bool fsdp = p.strategy == parallel::Strategy::Fsdp;
  const std::size_t nb = p.buckets.size();
  // Forward, buckets in forward order (the last first); fsdp gathers each into one of two
  // slots, the slot free once the forward of the bucket two before it ended.
  double compute = fwd.embed, comm = 0;
  std::vector<double> fwd_end(nb, 0.0), bwd_end(nb, 0.0), gathered(nb, 0.0);
  for (std::size_t i = nb; i-- > 0;) {
    double start = compute;
    if (fsdp) {
      comm = std::max(comm, i + 2 < nb ? fwd_end[i + 2] : 0.0) + t.gather[i];
      start = std::max(start, comm);
    }
    compute = start + t.forward[i];
    fwd_end[i] = compute;
  }
  // Backward, bucket 0 first: its collective queued as its backward ends. fsdp's last two
  // buckets of the forward are still in their slots; bucket i + 1 >= 2 is prefetched as bucket
  // i's backward begins, into the slot bucket i - 1's backward frees.
  for (std::size_t i = 0; i < nb; ++i) {
    if (fsdp && i + 1 < nb && i + 1 >= 2) {
      comm = std::max(comm, i >= 1 ? bwd_end[i - 1] : 0.0) + t.gather[i + 1];
      gathered[i + 1] = comm;
    }
    const double start = fsdp && i >= 2 ? std::max(compute, gathered[i]) : compute;
    compute = start + t.backward[i];
    bwd_end[i] = compute;
    comm = std::max(comm, compute) + t.reduce[i];
  }
  compute += bwd.embed;
  Prediction out;
  const int n = p.layout.gpus();
  const bool zero =
      p.strategy == parallel::Strategy::Zero1 || p.strategy == parallel::Strategy::Zero2;
  out.optimizer_s =
      b.adamw_s * static_cast<double>(p.strategy == parallel::Strategy::Ddp ? p.flat : p.flat / n);
  double after = 0;  // zero's all-gathers of the updated weights
  if (zero)
    for (double g : t.gather) after += g;
  out.e2e_s = std::max(compute, comm) + out.optimizer_s + after;
  out.compute_s = fwd.embed + bwd.embed;
  for (std::size_t i = 0; i < nb; ++i) out.compute_s += t.forward[i] + t.backward[i];
  out.comm_s = std::max(0.0, out.e2e_s - out.compute_s - out.optimizer_s);
  out.tokens_per_s = static_cast<double>(p.batch * s.seq_len) / out.e2e_s;
  const model::StageWork w =
      model::stage_work(s.model, s.layers, true, p.micro, s.seq_len, s.elem_bytes);
  out.flops = w.forward_flops + w.backward_flops;
  return out;
}

std::pair<int, int> calibration_layers(int model_layers) {
  const int b = std::min(model_layers, 8);
  return {std::max(1, b / 4), b};
}

Parts parts_of_steps(int a, int b, double ta, double tb, double tc) {
  Parts p;
  p.head = std::max(0.0, ta - tc);
  const double by_difference = a == b ? 0.0 : (tb - ta) / (b - a);
  p.embed = std::max(0.0, ta - a * by_difference - p.head);
  p.layer = std::max(0.0, (tb - p.head - p.embed) / b);
  return p;
}

double error_pct(double predicted, double measured) {
  if (!(measured > 0)) throw InputError(fmt::format("measured time {} must be positive", measured));
  return 100.0 * (predicted - measured) / measured;
}

namespace {

std::string explain_train(const Plan& p, const Prediction& pred, const Prediction& baseline,
                          double peak_tflops) {
  const auto share = [&](double x) { return pred.e2e_s > 0 ? 100.0 * x / pred.e2e_s : 0.0; };
  const std::string against =
      p.layout.gpus() == 1 || !(baseline.tokens_per_s > 0)
          ? std::string()
          : fmt::format(" against {:.0f} on one GPU ({:.2f}x)", baseline.tokens_per_s,
                        pred.tokens_per_s / baseline.tokens_per_s);
  std::string out = fmt::format(
      "Predicted {:.1f} ms a step, {:.0f} tokens/s{}; a GPU computes {:.0f}% of the step, "
      "AdamW takes {:.0f}%",
      pred.e2e_s * 1e3, pred.tokens_per_s, against, share(pred.compute_s), share(pred.optimizer_s));
  out += p.layout.gpus() == 1 ? std::string(".")
                              : fmt::format(" and communication the compute does not hide {:.0f}%.",
                                            share(pred.comm_s));
  if (peak_tflops > 0 && pred.compute_s > 0) {
    const double tflops = pred.flops / pred.compute_s / 1e12;
    out +=
        fmt::format(" Forward and backward compute at {:.0f} TFLOP/s ({:.0f}% of the dense peak).",
                    tflops, 100 * tflops / peak_tflops);
  }
  return out;
}

}  // namespace

std::string explain(const Plan& p, const Prediction& pred, const Prediction& baseline,
                    double hbm_GBps, double peak_tflops) {
  if (p.workload == Workload::Train) return explain_train(p, pred, baseline, peak_tflops);
  const double busy = pred.compute_s + pred.comm_s + pred.wait_s;
  const auto share = [&](double x) { return busy > 0 ? 100.0 * x / busy : 0.0; };
  const std::string split =
      p.layout.gpus() == 1 ? std::string("all of it compute")
                           : fmt::format(
                                 "its busiest GPU computes {:.0f}% of the time, spends {:.0f}% in "
                                 "tensor-parallel all-reduces and {:.0f}% waiting on other stages",
                                 share(pred.compute_s), share(pred.comm_s), share(pred.wait_s));
  const std::string against =
      p.layout.gpus() == 1 || !(baseline.e2e_s > 0) ? std::string()
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
  auto train = [](const std::map<std::int64_t, Parts>& m) {
    auto a = nlohmann::ordered_json::array();
    for (const auto& [k, v] : m)
      a.push_back(
          {{"sequences", k}, {"layer_s", v.layer}, {"embed_s", v.embed}, {"head_s", v.head}});
    return a;
  };
  auto coll = [](const std::map<std::pair<int, std::uint64_t>, double>& m) {
    auto a = nlohmann::ordered_json::array();
    for (const auto& [k, v] : m)
      a.push_back({{"ranks", k.first}, {"bytes", k.second}, {"seconds", v}});
    return a;
  };
  nlohmann::ordered_json out{{"prefill", parts(prefill)},
                             {"decode_first", parts(decode_first)},
                             {"decode_last", parts(decode_last)},
                             {"all_reduce", ar},
                             {"transfer", tr}};
  if (!prefill_overlap.empty() || !copy_all_reduce_s.empty()) {
    out["prefill_overlap"] = parts(prefill_overlap);
    out["copy_all_reduce"] = coll(copy_all_reduce_s);
  }
  if (adamw_s > 0 || !train_forward.empty()) {
    out["train_forward"] = train(train_forward);
    out["train_backward"] = train(train_backward);
    out["adamw_s"] = adamw_s;
    out["bucket_all_reduce"] = coll(bucket_all_reduce_s);
    out["reduce_scatter"] = coll(reduce_scatter_s);
    out["all_gather"] = coll(all_gather_s);
  }
  return out;
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
  // Overlapped prefill's blocks are absent from runs made before it was advised.
  const bool overlap = j.is_object() && j.contains("prefill_overlap");
  for (const char* phase : {"prefill", "decode_first", "decode_last", "prefill_overlap"}) {
    const std::string name = phase;
    if (name == "prefill_overlap" && !overlap) continue;
    auto& into = name == "prefill"        ? b.prefill
                 : name == "decode_first" ? b.decode_first
                 : name == "decode_last"  ? b.decode_last
                                          : b.prefill_overlap;
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
  if (overlap)
    for (const auto& e : array("copy_all_reduce"))
      b.copy_all_reduce_s[{static_cast<int>(number(e, "ranks", true)),
                           static_cast<std::uint64_t>(number(e, "bytes", true))}] =
          number(e, "seconds", true);
  if (!j.contains("adamw_s")) return b;  // a run made before training was advised
  b.adamw_s = number(j, "adamw_s", true);
  for (const char* phase : {"train_forward", "train_backward"})
    for (const auto& e : array(phase))
      (std::string(phase) == "train_forward"
           ? b.train_forward
           : b.train_backward)[static_cast<std::int64_t>(number(e, "sequences", true))] = {
          number(e, "layer_s", true), number(e, "embed_s", false), number(e, "head_s", false)};
  if (!j.contains("bucket_all_reduce")) b.bucket_all_reduce_s = b.all_reduce_s;  // older runs
  for (const char* kind : {"bucket_all_reduce", "reduce_scatter", "all_gather"}) {
    const std::string k = kind;
    if (k == "bucket_all_reduce" && !j.contains(kind)) continue;
    auto& into = k == "bucket_all_reduce" ? b.bucket_all_reduce_s
                 : k == "reduce_scatter"  ? b.reduce_scatter_s
                                          : b.all_gather_s;
    for (const auto& e : array(kind))
      into[{static_cast<int>(number(e, "ranks", true)),
            static_cast<std::uint64_t>(number(e, "bytes", true))}] = number(e, "seconds", true);
  }
  return b;
}

}  // namespace gpubench::advise
