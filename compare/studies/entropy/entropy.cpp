// entropy.cpp — see entropy.h.
#include "compare/studies/entropy/entropy.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "compare/markdown.h"

namespace posgrad::train {

namespace {

using json = nlohmann::json;
constexpr double kSlack = 1e-9;  // rounding of the float64 entropy at uniform attention

void run(UnitContext& ctx) {
  data::EvalWindows w = ctx.data.eval_windows(ctx.model.config().block_size, 8);
  const Tensor x = w.batch(0, w.size()).first.to(ctx.dev);
  auto& out = ctx.unit.parts.get<EntropyResult>().by_position;
  for (auto& layer : ctx.model.attention_entropy_by_position(x))
    out.emplace_back(layer.begin() + 1, layer.end());  // query 0 has one key: no entropy (NaN)
}

void check_part(const UnitResult& u, const CompareConfig& cfg, const ValueCheck& c, const std::string& path) {
  const auto& e = u.parts.value<EntropyResult>().by_position;
  const std::string p = json_path_key(path, "attention_entropy");
  c.size(e.size(), static_cast<size_t>(cfg.base.model.n_layer), p, "one profile per layer (--n-layer)");
  for (size_t l = 0; l < e.size(); ++l) {
    c.size(e[l].size(), static_cast<size_t>(cfg.base.model.block_size - 1), json_path_at(p, l),
           "one value per query position 1..--block-size - 1");
    for (size_t i = 0; i < e[l].size(); ++i) {
      const std::string q = json_path_at(json_path_at(p, l), i);
      c.at_least(e[l][i], -kSlack, q, "a normalised entropy");
      if (e[l][i] > 1 + kSlack)
        c.fail(q, ValueCheck::show(e[l][i]), "a normalised entropy is at most 1 (uniform attention)");
    }
  }
}

std::optional<double> value(const CompareConfig&, const UnitResult& u, const std::string& row, const Metric& m) {
  const EntropyResult* e = u.parts.find<EntropyResult>();
  if (row != u.method || !e || e->by_position.empty()) return std::nullopt;
  const size_t i = static_cast<size_t>(m.multiplier - 1);
  double sum = 0;
  for (const auto& layer : e->by_position) {
    if (i >= layer.size()) return std::nullopt;
    sum += layer[i];
  }
  return sum / static_cast<double>(e->by_position.size());
}

// The four query positions of the table: the first with two keys, a quarter, half and the last.
std::vector<int64_t> table_positions(int64_t block) {
  std::vector<int64_t> p = {1, std::max<int64_t>(1, block / 4), std::max<int64_t>(1, block / 2), block - 1};
  p.erase(std::unique(p.begin(), p.end()), p.end());
  return p;
}

std::vector<std::string> write_files(const ComparisonResult& r, const ReportDir& out) {
  std::vector<std::pair<std::string, const std::vector<std::vector<double>>*>> profiles;
  for (const auto& m : r.config.methods) {
    const UnitResult* u = first_unit(r, m);
    if (const EntropyResult* e = u ? u->parts.find<EntropyResult>() : nullptr)
      profiles.emplace_back(m, &e->by_position);
  }
  markdown::LayerPanels f;
  f.name = "attention_entropy";
  f.title = "Attention entropy / log(i+1) by query position i (per layer, first seed; 1 = uniform)";
  f.settings = "set yrange [0:1.05]\nset xlabel 'query position'\nset key inside right bottom\n";
  f.x0 = 1;  // index k is query position k + 1
  markdown::draw_layer_panels(out.plots, f, profiles);
  return {};
}

std::string section(const ComparisonResult& r, const ReportDir& out) {
  const CompareConfig& c = r.config;
  const auto positions = table_positions(c.base.model.block_size);
  std::ostringstream md;
  md << "## Attention entropy by query position\n\n"
     << "The entropy of each query's attention row over the keys it sees, divided by log(i+1), its value for uniform "
     << "attention: 1 = attention spread evenly over the whole prefix (what position-blind attention without content "
     << "preferences does), 0 = one key. Mean over layers, heads and 8 validation windows at the training length; mean "
     << "[95% interval] over seeds. A value that falls with the query position means attention stays local while the "
     << "prefix grows. It measures how spread attention is, not where it goes (attention by distance does that). "
     << "With attention sinks (--attention-sinks) it is the entropy of the real keys' share, renormalised: a head "
     << "that parks most of its weight on the sink and spreads the rest evenly still reads 1.\n\n";
  std::vector<std::string> header = {"method"};
  for (int64_t i : positions) header.push_back("query " + std::to_string(i) + " (" + std::to_string(i + 1) + " keys)");
  markdown::Table t(header);
  for (const auto& m : c.methods) {
    std::vector<std::string> cells = {m};
    for (int64_t i : positions) cells.push_back(markdown::bounded_cell(summary(r, m, entropy_metric(i)), 3, 0.0, 1.0));
    t.row(cells);
  }
  md << t.markdown() << "\n";
  if (std::filesystem::exists(out.plots + "/attention_entropy.png"))
    md << "![attention_entropy](plots/attention_entropy.png)\n\n";
  return md.str();
}

}  // namespace

Metric entropy_metric(int64_t position) {
  Metric m;
  m.study = EntropyResult::kStudy;
  m.multiplier = position;
  m.label = "attention_entropy_q" + std::to_string(position);
  m.lower_better = false;
  m.digits = 3;
  return m;
}

StudyEntry entropy_study() {
  StudyEntry e;
  e.name = EntropyResult::kStudy;
  e.summary = "attention entropy by query position, normalised by log(i+1) (1 = uniform attention), per layer";
  e.run_unit = run;
  e.unit_to_json = [](const UnitResult& u, json& j) {
    if (const auto* e = u.parts.find<EntropyResult>()) j["attention_entropy"] = e->by_position;
  };
  e.unit_from_json = [](const json& j, UnitResult& u) {
    if (!j.contains("attention_entropy")) return;  // a unit measured before the study existed
    auto& e = u.parts.get<EntropyResult>().by_position;
    for (const auto& layer : j.at("attention_entropy")) e.push_back(json_list<double>(layer, json_real));
  };
  e.check_unit = [](const UnitResult& u, const CompareConfig& cfg, const ValueCheck& c, const std::string& path) {
    if (u.parts.find<EntropyResult>()) check_part(u, cfg, c, path);
  };
  e.value = value;
  e.metrics = [](const CompareConfig& c) {  // results.csv: the table's four query positions
    std::vector<Metric> m;
    for (int64_t i : table_positions(c.base.model.block_size)) m.push_back(entropy_metric(i));
    return m;
  };
  e.write_files = write_files;
  e.markdown = section;
  return e;
}

}  // namespace posgrad::train
