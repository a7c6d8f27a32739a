// `gpubench matmul` settings: defaults per mode, shape/layout/grid parsing and validation.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/model/presets.hpp"
#include "gpubench/modules/matmul/matmul.hpp"

namespace gpubench::matmul {

namespace {

constexpr std::int64_t kMaxDim = 1 << 20;  // 1M rows: far past any GEMM worth timing

std::int64_t parse_dim(const std::string& text, const std::string& what) {
  const std::string t = trim(text);
  if (t.empty() || t.size() > 9 ||
      !std::all_of(t.begin(), t.end(), [](unsigned char c) { return std::isdigit(c); }))
    throw InputError(fmt::format("{}: '{}' is not a positive whole number", what, text));
  const std::int64_t v = std::stoll(t);
  if (v <= 0) throw InputError(fmt::format("{}: dimension '{}' must be greater than 0", what, t));
  if (v > kMaxDim)
    throw InputError(fmt::format("{}: dimension {} is larger than {}", what, v, kMaxDim));
  return v;
}

std::vector<GemmDtype> default_dtypes(const Options& o, bool quick, bool tn) {
  if (o.mamf) return {GemmDtype::Bf16};
  if (quick) return {GemmDtype::Bf16, GemmDtype::Fp8E4M3, GemmDtype::Tf32};
  std::vector<GemmDtype> all;
  for (GemmDtype t : {GemmDtype::Bf16, GemmDtype::Fp16, GemmDtype::Fp8E4M3, GemmDtype::Fp8E5M2,
                      GemmDtype::Tf32, GemmDtype::Fp32, GemmDtype::Fp64, GemmDtype::Int8})
    if (tn || !gemm_type_info(t).tn_only) all.push_back(t);
  return all;
}

void check_shape(GemmDtype t, const GemmShape& s, const std::string& option) {
  if (auto why = gemm_shape_problem(t, s)) throw InputError(option + ": " + *why);
}

}  // namespace

GemmShape parse_shape(const std::string& text) {
  const std::string t = trim(text);
  std::vector<std::string> parts;
  std::string cur;
  for (char c : t) {
    if (c == 'x' || c == 'X') {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(cur);
  const std::string what = fmt::format("shape '{}'", t);
  GemmShape s;
  if (parts.size() == 1) {
    s.m = s.n = s.k = parse_dim(parts[0], what);
  } else if (parts.size() == 3) {
    s.m = parse_dim(parts[0], what);
    s.n = parse_dim(parts[1], what);
    s.k = parse_dim(parts[2], what);
  } else {
    throw InputError(fmt::format("{}: expected MxNxK (or one size for a cube)", what));
  }
  return s;
}

std::vector<GemmShape> parse_shapes(const std::string& list) {
  std::vector<GemmShape> out;
  for (const auto& item : split_list(list)) out.push_back(parse_shape(item));
  return out;
}

std::pair<bool, bool> parse_layout(const std::string& text) {
  std::string t = trim(text);
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "tn") return {true, false};
  if (t == "nn") return {false, false};
  if (t == "nt") return {false, true};
  if (t == "tt") return {true, true};
  throw InputError(fmt::format("--layout: '{}' is not one of best, tn, nn, nt, tt", text));
}

std::vector<std::int64_t> parse_dims(const std::string& text, const std::string& option) {
  std::vector<std::int64_t> out;
  const std::string t = trim(text);
  if (t.find(':') != std::string::npos) {
    out = parse_range(t, option, 4096, [&](const std::string& v) { return parse_dim(v, option); });
  } else {
    try {
      for (const auto& item : split_list(t)) out.push_back(parse_dim(item, option));
    } catch (const InputError& e) {
      const std::string msg = e.what();
      throw InputError(msg.rfind(option, 0) == 0 ? msg : option + ": " + msg);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Settings resolve_settings(const Options& o, bool quick) {
  Settings s;
  std::string layout = trim(o.layout);
  std::transform(layout.begin(), layout.end(), layout.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (layout.empty()) {
    s.any_layout = !quick;  // quick mode times TN only
  } else if (layout == "best") {
    s.any_layout = true;
  } else {
    std::tie(s.trans_a, s.trans_b) = parse_layout(o.layout);
  }
  const bool tn = s.trans_a && !s.trans_b;
  if (trim(o.dtypes).empty()) {
    s.dtypes = default_dtypes(o, quick, tn);
  } else if (trim(o.dtypes) == "all") {
    s.dtypes = default_dtypes(Options{}, false, tn);
  } else {
    for (const auto& item : split_list(o.dtypes)) {
      GemmDtype t;
      try {
        t = parse_gemm_dtype(item);
      } catch (const InputError& e) {
        throw InputError(std::string("--dtypes: ") + e.what());
      }
      if (std::find(s.dtypes.begin(), s.dtypes.end(), t) == s.dtypes.end()) s.dtypes.push_back(t);
    }
  }
  if (s.dtypes.empty()) throw InputError("--dtypes: no data type left to run");

  if (o.algos < 1 || o.algos > 64)
    throw InputError(fmt::format("--algos: {} is outside 1..64", o.algos));
  s.algos = quick ? std::min(o.algos, 4) : o.algos;
  if (!(o.sustained >= 0) || o.sustained > 3600)
    throw InputError(fmt::format("--sustained: {} s is outside 0..3600", o.sustained));
  s.sustained = o.sustained;
  s.burst = o.burst;
  s.mamf = o.mamf;
  s.mamf_refine = o.mamf_refine;

  const bool has_shapes = !trim(o.shapes).empty();
  const bool has_model = !trim(o.model).empty() || !trim(o.model_config).empty();
  if (!trim(o.model).empty() && !trim(o.model_config).empty())
    throw InputError("--model and --model-config: give one of them");
  if (has_shapes) {
    try {
      s.shapes = parse_shapes(o.shapes);
    } catch (const InputError& e) {
      throw InputError(std::string("--shapes: ") + e.what());
    }
    for (auto& sh : s.shapes) {
      sh.trans_a = s.trans_a;
      sh.trans_b = s.trans_b;
    }
  }
  if (!trim(o.sizes).empty()) {
    s.sizes = parse_dims(o.sizes, "--sizes");
  } else if (!has_shapes && !has_model && !o.mamf) {
    s.sizes = quick ? std::vector<std::int64_t>{4096, 8192}
                    : std::vector<std::int64_t>{1024, 2048, 4096, 8192, 16384};
  }
  if (has_model) {
    if (o.tokens <= 0 || o.tokens > kMaxDim)
      throw InputError(fmt::format("--tokens: {} is outside 1..{}", o.tokens, kMaxDim));
    s.tokens = o.tokens;
    const model::ModelConfig cfg = trim(o.model).empty() ? model::load_model_config(o.model_config)
                                                         : model::load_preset(trim(o.model));
    s.model = cfg.name;
    for (const auto& g : model::layer_gemms(cfg, o.tokens)) {
      CaseSpec c;
      c.kind = CaseKind::Model;
      c.shape.m = g.tokens;
      c.shape.n = g.out_features;
      c.shape.k = g.in_features;
      c.shape.trans_a = s.trans_a;
      c.shape.trans_b = s.trans_b;
      c.label = g.name;
      s.model_gemms.push_back(c);
    }
  }
  if (o.mamf) {
    s.mamf_sizes = !trim(o.mamf_sizes).empty()
                       ? parse_dims(o.mamf_sizes, "--mamf-sizes")
                       : (quick ? std::vector<std::int64_t>{4096, 8192, 12288}
                                : std::vector<std::int64_t>{2048, 4096, 6144, 8192, 12288, 16384});
    if (s.mamf_sizes.size() > 16)
      throw InputError(
          fmt::format("--mamf-sizes: {} sizes make {} shapes; give at most 16", s.mamf_sizes.size(),
                      s.mamf_sizes.size() * s.mamf_sizes.size() * s.mamf_sizes.size()));
  }
  // Layout and alignment rules of every data type the user asked for, up front.
  for (GemmDtype t : s.dtypes) {
    for (const auto& c : s.cases())
      if (c.dtype == t)
        check_shape(t, c.shape,
                    c.kind == CaseKind::Model
                        ? "--model"
                        : (c.kind == CaseKind::Shape ? "--shapes" : "--sizes"));
    if (s.mamf)
      for (std::int64_t d : s.mamf_sizes) {
        GemmShape sh{d, d, d, s.trans_a, s.trans_b};
        check_shape(t, sh, "--mamf-sizes");
      }
  }
  if (s.cases().empty() && !s.mamf)
    throw InputError("nothing to run: give --sizes, --shapes, --model or --mamf");
  return s;
}

std::vector<CaseSpec> Settings::cases() const {
  std::vector<CaseSpec> out;
  for (GemmDtype t : dtypes) {
    for (std::int64_t n : sizes) {
      CaseSpec c;
      c.kind = CaseKind::Square;
      c.dtype = t;
      c.shape = {n, n, n, trans_a, trans_b};
      c.any_layout = any_layout && !gemm_type_info(t).tn_only;
      out.push_back(c);
    }
    for (const auto& sh : shapes) {
      CaseSpec c;
      c.kind = CaseKind::Shape;
      c.dtype = t;
      c.shape = sh;
      c.any_layout = any_layout && !gemm_type_info(t).tn_only;
      out.push_back(c);
    }
    for (CaseSpec c : model_gemms) {
      c.dtype = t;
      c.any_layout = any_layout && !gemm_type_info(t).tn_only;
      out.push_back(c);
    }
  }
  return out;
}

nlohmann::ordered_json Settings::to_json() const {
  nlohmann::ordered_json j;
  std::vector<std::string> names, shape_names;
  for (GemmDtype t : dtypes) names.push_back(to_string(t));
  for (const auto& sh : shapes) shape_names.push_back(sh.to_string());
  j["dtypes"] = names;
  j["sizes"] = sizes;
  j["shapes"] = shape_names;
  j["layout"] = any_layout ? "best" : GemmShape{1, 1, 1, trans_a, trans_b}.layout();
  if (!model.empty()) {
    j["model"] = model;
    j["tokens"] = tokens;
  }
  j["algos"] = algos;
  j["mamf"] = mamf;
  if (mamf) {
    j["mamf_sizes"] = mamf_sizes;
    j["mamf_refine"] = mamf_refine;
  }
  j["sustained_s"] = sustained;
  j["burst"] = burst;
  return j;
}

int rotation_sets(std::uint64_t set_bytes, std::uint64_t l2_bytes, std::uint64_t budget_bytes,
                  bool hot) {
  if (hot || set_bytes == 0) return 1;
  const std::uint64_t want = (3 * l2_bytes) / set_bytes + 1;  // > 3x L2 in all
  const std::uint64_t fit = budget_bytes / set_bytes;
  return static_cast<int>(std::max<std::uint64_t>(1, std::min<std::uint64_t>({want, fit, 1024})));
}

MeasureOptions burst_options(MeasureOptions m) {
  m.warmup = kBurstWarmup;
  m.fixed_iters = kBurstIters;
  return m;
}

int repeats_for(double gemm_seconds, double target_s) {
  if (!(gemm_seconds > 0)) return 1;
  const double r = std::ceil(target_s / gemm_seconds);
  return static_cast<int>(std::clamp(r, 1.0, static_cast<double>(kMaxRepeats)));
}

std::vector<std::size_t> verification_order(const std::vector<double>& brief_seconds) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < brief_seconds.size(); ++i)
    if (std::isfinite(brief_seconds[i])) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return brief_seconds[a] < brief_seconds[b];
  });
  return order;
}

std::vector<GemmShape> mamf_grid(const std::vector<std::int64_t>& sizes, bool trans_a,
                                 bool trans_b) {
  std::vector<GemmShape> out;
  for (std::int64_t m : sizes)
    for (std::int64_t n : sizes)
      for (std::int64_t k : sizes) out.push_back({m, n, k, trans_a, trans_b});
  return out;
}

std::vector<GemmShape> mamf_neighbours(const GemmShape& best, std::int64_t step,
                                       const std::vector<GemmShape>& done, int alignment) {
  std::vector<GemmShape> out;
  const std::int64_t deltas[] = {-step, 0, step};
  auto seen = [&](const GemmShape& s) {
    auto same = [&](const GemmShape& o) { return o.m == s.m && o.n == s.n && o.k == s.k; };
    return std::any_of(done.begin(), done.end(), same) || std::any_of(out.begin(), out.end(), same);
  };
  for (std::int64_t dm : deltas)
    for (std::int64_t dn : deltas)
      for (std::int64_t dk : deltas) {
        GemmShape s = best;
        s.m += dm;
        s.n += dn;
        s.k += dk;
        if (s.m <= 0 || s.n <= 0 || s.k <= 0) continue;
        if (alignment > 1 && (s.m % alignment || s.n % alignment || s.k % alignment)) continue;
        if (!seen(s)) out.push_back(s);
      }
  return out;
}

std::vector<GemmShape> mamf_finalists(std::vector<std::pair<double, GemmShape>> scored, int k) {
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<GemmShape> out;
  for (const auto& [rate, sh] : scored) {
    if (static_cast<int>(out.size()) >= k) break;
    const bool seen = std::any_of(out.begin(), out.end(), [&](const GemmShape& o) {
      return o.m == sh.m && o.n == sh.n && o.k == sh.k;
    });
    if (!seen) out.push_back(sh);
  }
  return out;
}

}  // namespace gpubench::matmul
