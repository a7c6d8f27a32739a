// The Report model and its JSON form (schema gpubench.result/1).
#include "gpubench/core/result.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gpubench {

CaseResult& CaseResult::metric(const std::string& key, double value, const std::string& unit) {
  for (auto& kv : metrics) {
    if (kv.first == key) {
      kv.second = Metric{value, unit, {}};
      return *this;
    }
  }
  metrics.emplace_back(key, Metric{value, unit, {}});
  return *this;
}

const Metric* CaseResult::find_metric(const std::string& key) const {
  for (const auto& kv : metrics)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

void Report::set_headline(const std::string& key, double value, const std::string& unit) {
  for (auto& kv : headline) {
    if (kv.first == key) {
      kv.second = Metric{value, unit, {}};
      return;
    }
  }
  headline.emplace_back(key, Metric{value, unit, {}});
}

void Report::set_headline_text(const std::string& key, const std::string& text,
                               const std::string& unit) {
  set_headline(key, 0, unit);
  for (auto& kv : headline)
    if (kv.first == key) kv.second.text = text;
}

const Metric* Report::find_headline(const std::string& key) const {
  for (const auto& kv : headline)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

void Report::warn(const std::string& text) {
  if (std::find(warnings.begin(), warnings.end(), text) == warnings.end()) warnings.push_back(text);
}

void Report::settle_status() {
  if (!error.empty()) {
    status = "failed";
    return;
  }
  const auto failed = std::count_if(results.begin(), results.end(),
                                    [](const CaseResult& c) { return c.status == "failed"; });
  const auto ran = std::count_if(results.begin(), results.end(),
                                 [](const CaseResult& c) { return c.status != "skipped"; });
  if (failed == 0)
    status = "ok";
  else if (failed == ran)
    status = "failed";
  else
    status = "partial";
}

namespace {

// Numbers as numbers; NaN and infinities (not representable in JSON) as null.
ojson number(double v) {
  return std::isfinite(v) ? ojson(v) : ojson(nullptr);
}
double number_from(const ojson& j) {
  return j.is_number() ? j.get<double>() : std::numeric_limits<double>::quiet_NaN();
}

// The object at `key`, or an empty one (items() on a temporary would dangle).
const ojson& object_at(const ojson& j, const char* key) {
  static const ojson empty = ojson::object();
  const auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : empty;
}

ojson metric_json(const Metric& m) {
  if (!m.text.empty()) return ojson{{"value", m.text}, {"unit", m.unit}};
  return ojson{{"value", number(m.value)}, {"unit", m.unit}};
}

Metric metric_from(const ojson& v) {
  Metric m{number_from(v["value"]), v.value("unit", ""), ""};
  if (v["value"].is_string()) m.text = v["value"].get<std::string>();
  return m;
}

}  // namespace

const std::string& worse_level(const std::string& a, const std::string& b) {
  auto rank = [](const std::string& l) { return l == "FAIL" ? 2 : l == "WARN" ? 1 : 0; };
  return rank(b) > rank(a) ? b : a;
}

void Verdict::add(Finding f) {
  level = worse_level(level, f.level);
  findings.push_back(std::move(f));
}

Verdict add_check_rows(Report& r, const std::vector<Check>& checks) {
  const auto rank = [](const std::string& l) {
    return l == "FAIL" ? 0 : l == "WARN" ? 1 : l == "PASS" ? 2 : 3;
  };
  std::vector<Check> sorted = checks;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [&](const Check& a, const Check& b) { return rank(a.level) < rank(b.level); });
  Verdict v;
  for (const Check& c : sorted) {
    CaseResult row;
    row.group = c.group;
    row.name = c.subject;
    row.params = {{"check", c.what}, {"verdict", c.level}};
    if (std::isfinite(c.value)) row.metric("value", c.value, c.unit);
    if (std::isfinite(c.expected)) row.metric("expected", c.expected, c.unit);
    row.note = c.reason;
    r.add(std::move(row));
    if (c.level == "N/A") continue;
    ++v.judged;
    if (c.level != "PASS")
      v.add({c.level, c.subject, c.group + ": " + c.what, c.value, c.expected, c.unit, c.reason});
  }
  return v;
}

namespace {

ojson verdict_json(const Verdict& v) {
  ojson findings = ojson::array();
  for (const Finding& f : v.findings)
    findings.push_back({{"level", f.level},
                        {"subject", f.subject},
                        {"what", f.what},
                        {"value", number(f.value)},
                        {"expected", number(f.expected)},
                        {"unit", f.unit},
                        {"reason", f.reason}});
  return {{"level", v.level}, {"line", v.line}, {"judged", v.judged}, {"findings", findings}};
}

Verdict verdict_from(const ojson& j) {
  Verdict v;
  v.level = j.value("level", "PASS");
  v.line = j.value("line", "");
  v.judged = j.value("judged", 0);
  for (const auto& fj : j.value("findings", ojson::array())) {
    Finding f;
    f.level = fj.value("level", "");
    f.subject = fj.value("subject", "");
    f.what = fj.value("what", "");
    f.value = fj.contains("value") ? number_from(fj["value"]) : std::nan("");
    f.expected = fj.contains("expected") ? number_from(fj["expected"]) : std::nan("");
    f.unit = fj.value("unit", "");
    f.reason = fj.value("reason", "");
    v.findings.push_back(std::move(f));
  }
  return v;
}

}  // namespace

ojson to_json(const Report& r) {
  ojson j;
  j["schema"] = kResultSchema;
  j["module"] = r.module;
  j["version"] = r.version;
  j["run_id"] = r.run_id;
  j["started_at"] = r.started_at;
  j["finished_at"] = r.finished_at;
  j["command"] = r.command;
  j["system"] = r.system;
  j["config"] = r.config;
  ojson head = ojson::object();
  for (const auto& kv : r.headline) head[kv.first] = metric_json(kv.second);
  j["headline"] = head;
  ojson results = ojson::array();
  for (const auto& c : r.results) {
    ojson cj;
    cj["group"] = c.group;
    cj["case"] = c.name;
    cj["params"] = c.params;
    ojson metrics = ojson::object();
    for (const auto& kv : c.metrics) metrics[kv.first] = metric_json(kv.second);
    cj["metrics"] = metrics;
    if (c.stats) cj["stats"] = stats_to_json(*c.stats, 1e6, "us");
    cj["status"] = c.status;
    if (!c.note.empty()) cj["note"] = c.note;
    results.push_back(cj);
  }
  j["results"] = results;
  ojson matrices = ojson::array();
  for (const auto& m : r.matrices) {
    ojson values = ojson::array();
    for (const auto& row : m.values) {
      ojson rj = ojson::array();
      for (double v : row) rj.push_back(number(v));
      values.push_back(rj);
    }
    matrices.push_back({{"name", m.name},
                        {"title", m.title},
                        {"unit", m.unit},
                        {"row_label", m.row_label},
                        {"col_label", m.col_label},
                        {"rows", m.rows},
                        {"cols", m.cols},
                        {"values", values}});
  }
  j["matrices"] = matrices;
  ojson sweeps = ojson::array();
  for (const auto& s : r.sweeps) {
    ojson series = ojson::array();
    for (const auto& se : s.series) {
      ojson y = ojson::array();
      for (double v : se.y) y.push_back(number(v));
      series.push_back({{"label", se.label}, {"x", se.x}, {"y", y}});
    }
    sweeps.push_back({{"name", s.name},
                      {"title", s.title},
                      {"x_label", s.x_label},
                      {"x_unit", s.x_unit},
                      {"y_label", s.y_label},
                      {"y_unit", s.y_unit},
                      {"log_x", s.log_x},
                      {"series", series}});
  }
  j["sweeps"] = sweeps;
  j["monitor"] = r.monitor;
  j["extra"] = r.extra;
  if (!r.attachments.empty()) {
    ojson names = ojson::array();
    for (const auto& a : r.attachments) names.push_back(a.first);
    j["attachments"] = names;
  }
  j["warnings"] = r.warnings;
  if (!r.findings.empty()) j["findings"] = r.findings;
  j["status"] = r.status;
  if (!r.error.empty()) j["error"] = r.error;
  if (r.verdict) j["verdict"] = verdict_json(*r.verdict);
  return j;
}

Report report_from_json(const ojson& j) {
  Report r;
  r.module = j.value("module", "");
  r.version = j.value("version", "");
  r.run_id = j.value("run_id", "");
  r.started_at = j.value("started_at", "");
  r.finished_at = j.value("finished_at", "");
  if (j.contains("command")) r.command = j["command"].get<std::vector<std::string>>();
  r.system = j.value("system", ojson::object());
  r.config = j.value("config", ojson::object());
  for (const auto& [k, v] : object_at(j, "headline").items())
    r.headline.emplace_back(k, metric_from(v));
  for (const auto& cj : j.value("results", ojson::array())) {
    CaseResult c;
    c.group = cj.value("group", "");
    c.name = cj.value("case", "");
    c.params = cj.value("params", ojson::object());
    for (const auto& [k, v] : object_at(cj, "metrics").items())
      c.metrics.emplace_back(k, metric_from(v));
    if (cj.contains("stats")) {
      const auto& s = cj["stats"];
      const double inv = s.value("unit", "s") == "us" ? 1e-6 : 1.0;
      Stats st;
      st.n = s.value("n", 0u);
      st.median = number_from(s["median"]) * inv;
      st.min = number_from(s["min"]) * inv;
      st.max = number_from(s["max"]) * inv;
      st.mean = number_from(s["mean"]) * inv;
      st.p5 = number_from(s["p5"]) * inv;
      st.p95 = number_from(s["p95"]) * inv;
      st.p99 = number_from(s["p99"]) * inv;
      st.stdev = number_from(s["stdev"]) * inv;
      st.cv = number_from(s["cv"]);
      c.stats = st;
    }
    c.status = cj.value("status", "ok");
    c.note = cj.value("note", "");
    r.results.push_back(std::move(c));
  }
  for (const auto& mj : j.value("matrices", ojson::array())) {
    Matrix m;
    m.name = mj.value("name", "");
    m.title = mj.value("title", "");
    m.unit = mj.value("unit", "");
    m.row_label = mj.value("row_label", "src");
    m.col_label = mj.value("col_label", "dst");
    m.rows = mj.value("rows", std::vector<std::string>{});
    m.cols = mj.value("cols", std::vector<std::string>{});
    for (const auto& row : mj.value("values", ojson::array())) {
      std::vector<double> vals;
      for (const auto& v : row) vals.push_back(number_from(v));
      m.values.push_back(vals);
    }
    r.matrices.push_back(std::move(m));
  }
  for (const auto& sj : j.value("sweeps", ojson::array())) {
    Sweep s;
    s.name = sj.value("name", "");
    s.title = sj.value("title", "");
    s.x_label = sj.value("x_label", "");
    s.x_unit = sj.value("x_unit", "");
    s.y_label = sj.value("y_label", "");
    s.y_unit = sj.value("y_unit", "");
    s.log_x = sj.value("log_x", true);
    for (const auto& se : sj.value("series", ojson::array())) {
      Series series;
      series.label = se.value("label", "");
      for (const auto& v : se.value("x", ojson::array())) series.x.push_back(number_from(v));
      for (const auto& v : se.value("y", ojson::array())) series.y.push_back(number_from(v));
      s.series.push_back(std::move(series));
    }
    r.sweeps.push_back(std::move(s));
  }
  r.monitor = j.value("monitor", ojson::object());
  r.extra = j.value("extra", ojson::object());
  r.warnings = j.value("warnings", std::vector<std::string>{});
  r.findings = j.value("findings", std::vector<std::string>{});
  r.status = j.value("status", "ok");
  r.error = j.value("error", "");
  if (j.contains("verdict") && j["verdict"].is_object()) r.verdict = verdict_from(j["verdict"]);
  return r;
}

}  // namespace gpubench
