// gradient.cpp — see gradient.h.
#include "compare/studies/gradient/gradient.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "compare/markdown.h"

namespace posgrad::train {

namespace {

using json = nlohmann::json;

void run(UnitContext& ctx) {
  data::EvalWindows w = ctx.data.eval_windows(ctx.model.config().block_size, 8);
  const auto [x, y] = w.batch(0, w.size());
  ctx.unit.parts.get<GradientResult>().by_distance = ctx.model.gradient_by_distance(x.to(ctx.dev), y.to(ctx.dev));
}

void check_part(const UnitResult& u, const CompareConfig& cfg, const ValueCheck& c, const std::string& path) {
  const auto& g = u.parts.value<GradientResult>().by_distance;
  const std::string p = json_path_key(path, "gradient_by_distance");
  c.size(g.size(), static_cast<size_t>(cfg.base.model.n_layer), p, "one profile per layer (--n-layer)");
  for (size_t l = 0; l < g.size(); ++l) {
    c.size(g[l].size(), static_cast<size_t>(cfg.base.model.block_size), json_path_at(p, l),
           "one norm per distance 0..--block-size - 1");
    for (size_t d = 0; d < g[l].size(); ++d)
      c.at_least(g[l][d], 0.0, json_path_at(json_path_at(p, l), d), "a gradient norm");
  }
}

std::optional<double> value(const CompareConfig&, const UnitResult& u, const std::string& row, const Metric& m) {
  const GradientResult* g = u.parts.find<GradientResult>();
  if (row != u.method || !g || g->by_distance.empty()) return std::nullopt;
  const auto& v = g->by_distance.front();
  if (m.quantity == 1) {  // reach
    if (v.size() < 2 || !(v[1] > 0)) return std::nullopt;
    return v.back() / v[1];
  }
  const size_t d = static_cast<size_t>(m.multiplier);
  if (d >= v.size()) return std::nullopt;
  return v[d];
}

std::vector<int64_t> table_distances(int64_t block) {
  std::vector<int64_t> d = {1, std::max<int64_t>(1, block / 4), std::max<int64_t>(1, block / 2), block - 1};
  d.erase(std::unique(d.begin(), d.end()), d.end());
  return d;
}

std::vector<std::string> write_files(const ComparisonResult& r, const ReportDir& out) {
  std::vector<std::pair<std::string, const std::vector<std::vector<double>>*>> profiles;
  for (const auto& m : r.config.methods) {
    const UnitResult* u = first_unit(r, m);
    if (const GradientResult* g = u ? u->parts.find<GradientResult>() : nullptr)
      profiles.emplace_back(m, &g->by_distance);
  }
  markdown::LayerPanels f;
  f.name = "gradient_distance";
  f.title = "Gradient norm of the last position loss wrt each block input, by distance (first seed)";
  f.settings = "set logscale y\nset xlabel 'distance from the last position'\nset key inside right top\n";
  f.positive_only = true;
  f.label = [](size_t l) { return l ? "block " + std::to_string(l) + " input" : std::string("embeddings"); };
  markdown::draw_layer_panels(out.plots, f, profiles);
  return {};
}

std::string section(const ComparisonResult& r, const ReportDir& out) {
  const CompareConfig& c = r.config;
  const int64_t block = c.base.model.block_size;
  std::ostringstream md;
  md << "## Gradient flow by distance\n\n"
     << "The L2 norm of the gradient of the last position's next-token loss with respect to each input embedding, by "
     << "its distance from that position (8 validation windows at the training length, eval mode); mean [95% interval] "
     << "over seeds. Reach: the norm at distance " << block - 1 << " over the norm at distance 1 (1 = the signal "
     << "reaches the oldest token as strongly as the previous one; for position-blind uniform attention the last "
        "block's "
     << "input has a flat profile, the embeddings' need not). It measures where a trained model's learning signal "
        "goes, "
     << "not how well it learns. The norms themselves are not comparable across methods whose embeddings are scaled "
     << "differently (an absolute table added to the token embedding changes the input's scale); compare the shape "
     << "of each profile and the reach.\n\n";
  std::vector<std::string> header = {"method"};
  const auto distances = table_distances(block);
  for (int64_t d : distances) header.push_back("distance " + std::to_string(d));
  header.push_back("reach " + std::to_string(block - 1) + "/1");
  markdown::Table t(header);
  for (const auto& m : c.methods) {
    std::vector<std::string> cells = {m};
    // Norms and their ratio are >= 0: the Student-t interval's lower end is clipped there.
    constexpr double kInf = std::numeric_limits<double>::infinity();
    for (int64_t d : distances)
      cells.push_back(markdown::bounded_cell(summary(r, m, gradient_metric(d)), 4, 0.0, kInf));
    cells.push_back(markdown::bounded_cell(summary(r, m, gradient_metric(0, true)), 3, 0.0, kInf));
    t.row(cells);
  }
  md << t.markdown() << "\n";
  if (std::filesystem::exists(out.plots + "/gradient_distance.png"))
    md << "![gradient_distance](plots/gradient_distance.png)\n\n";
  return md.str();
}

}  // namespace

Metric gradient_metric(int64_t distance, bool reach) {
  Metric m;
  m.study = GradientResult::kStudy;
  m.quantity = reach ? 1 : 0;
  m.multiplier = distance;
  m.label = reach ? "gradient_reach" : "gradient_norm_d" + std::to_string(distance);
  m.lower_better = false;
  m.digits = reach ? 3 : 4;
  return m;
}

StudyEntry gradient_study() {
  StudyEntry e;
  e.name = GradientResult::kStudy;
  e.summary =
      "gradient flow by distance: the norm of the last position's loss gradient at each input embedding and "
      "block input, by distance from that position";
  e.run_unit = run;
  e.unit_to_json = [](const UnitResult& u, json& j) {
    if (const auto* g = u.parts.find<GradientResult>()) j["gradient_by_distance"] = g->by_distance;
  };
  e.unit_from_json = [](const json& j, UnitResult& u) {
    if (!j.contains("gradient_by_distance")) return;  // a unit measured before the study existed
    auto& g = u.parts.get<GradientResult>().by_distance;
    for (const auto& layer : j.at("gradient_by_distance")) g.push_back(json_list<double>(layer, json_real));
  };
  e.check_unit = [](const UnitResult& u, const CompareConfig& cfg, const ValueCheck& c, const std::string& path) {
    if (u.parts.find<GradientResult>()) check_part(u, cfg, c, path);
  };
  e.value = value;
  e.metrics = [](const CompareConfig& c) {  // results.csv: the table's distances and the reach
    std::vector<Metric> m;
    for (int64_t d : table_distances(c.base.model.block_size)) m.push_back(gradient_metric(d));
    m.push_back(gradient_metric(0, true));
    return m;
  };
  e.write_files = write_files;
  e.markdown = section;
  return e;
}

}  // namespace posgrad::train
