// attention.cpp — see attention.h.
#include "compare/studies/attention/attention.h"

#include <fstream>

#include "compare/markdown.h"

namespace posgrad::train {

namespace {

using json = nlohmann::json;

void run(UnitContext& ctx) {
  data::EvalWindows w = ctx.data.eval_windows(ctx.model.config().block_size, 8);
  Tensor x = w.batch(0, w.size()).first.to(ctx.dev);
  ctx.unit.parts.get<AttentionResult>().by_distance = ctx.model.attention_by_distance(x);
}

void check_part(const UnitResult& u, const CompareConfig& cfg, const ValueCheck& c, const std::string& path) {
  const auto& a = u.parts.value<AttentionResult>().by_distance;
  const std::string p = json_path_key(path, "attention_by_distance");
  c.size(a.size(), static_cast<size_t>(cfg.base.model.n_layer), p, "one profile per layer (--n-layer)");
  for (size_t l = 0; l < a.size(); ++l)
    c.size(a[l].size(), static_cast<size_t>(cfg.base.model.block_size), json_path_at(p, l),
           "one weight per distance 0..--block-size - 1");
  for (size_t l = 0; l < a.size(); ++l)
    for (size_t i = 0; i < a[l].size(); ++i) c.at_least(a[l][i], 0.0, json_path_at(json_path_at(p, l), i), "an attention weight");
}

// One panel per method, a line per layer.
std::vector<std::string> write_files(const ComparisonResult& r, const ReportDir& out) {
  std::vector<std::pair<std::string, const std::vector<std::vector<double>>*>> profiles;
  for (const auto& m : r.config.methods)
    if (const UnitResult* u = first_unit(r, m)) profiles.emplace_back(m, &u->parts.value<AttentionResult>().by_distance);
  markdown::LayerPanels f;
  f.name = "attention_distance";
  f.title = "Mean attention weight vs query-key distance (per layer, first seed)";
  f.settings = "set logscale y\nset xlabel 'distance'\nset key inside right top\n";
  f.positive_only = true;
  return markdown::draw_layer_panels(out.plots, f, profiles);
}

}  // namespace

double attention_distance_correlation(const std::vector<std::vector<double>>& by_layer) {
  if (by_layer.empty() || by_layer.front().size() < 2) return 0.0;
  const size_t T = by_layer.front().size();
  std::vector<double> d(T), w(T, 0.0);
  for (size_t i = 0; i < T; ++i) {
    d[i] = static_cast<double>(i);
    for (const auto& l : by_layer) w[i] += l[i] / static_cast<double>(by_layer.size());
  }
  return spearman(d, w);
}

Metric attention_decay_metric() {
  Metric m;
  m.study = AttentionResult::kStudy;
  m.label = "attention_distance_spearman";
  m.lower_better = false;
  m.digits = 2;
  return m;
}

StudyEntry attention_study() {
  StudyEntry e;
  e.name = AttentionResult::kStudy;
  e.summary = "mean attention weight by query-key distance per layer, and its rank correlation with the distance (claim g; "
              "Su et al. 2021 §3.4.3)";
  e.run_unit = run;
  e.unit_to_json = [](const UnitResult& u, json& j) { j["attention_by_distance"] = u.parts.value<AttentionResult>().by_distance; };
  e.unit_from_json = [](const json& j, UnitResult& u) {
    auto& a = u.parts.get<AttentionResult>().by_distance;
    for (const auto& layer : j.at("attention_by_distance")) a.push_back(json_list<double>(layer, json_real));
  };
  e.check_unit = check_part;
  e.value = [](const CompareConfig&, const UnitResult& u, const std::string& row, const Metric&) -> std::optional<double> {
    const AttentionResult* a = u.parts.find<AttentionResult>();
    if (row != u.method || !a || a->by_distance.empty()) return std::nullopt;
    return attention_distance_correlation(a->by_distance);
  };
  e.write_files = write_files;
  e.gallery_plots = 1;
  return e;
}

}  // namespace posgrad::train
