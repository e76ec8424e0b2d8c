// attention.cpp — see attention.h.
#include "compare/studies/attention/attention.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>

#include "compare/markdown.h"

namespace posgrad::train {

namespace {

using json = nlohmann::json;
constexpr double kSlack = 1e-9;  // rounding of the float64 profile at its bounds

void run(UnitContext& ctx) {
  data::EvalWindows w = ctx.data.eval_windows(ctx.model.config().block_size, 8);
  const Tensor x = w.batch(0, w.size()).first.to(ctx.dev);
  AttentionResult& a = ctx.unit.parts.get<AttentionResult>();
  a.over_uniform = ctx.model.attention_over_uniform_by_distance(x);
  a.first_token_share = ctx.model.first_token_share_by_layer(x);
}

void check_part(const UnitResult& u, const CompareConfig& cfg, const ValueCheck& c, const std::string& path) {
  const auto& a = u.parts.value<AttentionResult>().over_uniform;
  const std::string p = json_path_key(path, "attention_over_uniform");
  const int64_t block = cfg.base.model.block_size;
  c.size(a.size(), static_cast<size_t>(cfg.base.model.n_layer), p, "one profile per layer (--n-layer)");
  for (size_t l = 0; l < a.size(); ++l) {
    c.size(a[l].size(), static_cast<size_t>(block - 1), json_path_at(p, l),
           "one weight per distance 1..--block-size - 1");
    for (size_t i = 0; i < a[l].size(); ++i) {
      const std::string q = json_path_at(json_path_at(p, l), i);
      c.at_least(a[l][i], 0.0, q, "an attention weight over its uniform share");
      if (a[l][i] > static_cast<double>(block - 1) + kSlack)
        c.fail(q, ValueCheck::show(a[l][i]), "a weight over its uniform share 1/n is at most n <= --block-size - 1");
    }
  }
  const auto& f = u.parts.value<AttentionResult>().first_token_share;
  if (f.empty()) return;  // written before the measure existed
  const std::string pf = json_path_key(path, "attention_first_token_share");
  c.size(f.size(), static_cast<size_t>(cfg.base.model.n_layer), pf, "one share per layer (--n-layer)");
  for (size_t l = 0; l < f.size(); ++l) {
    c.at_least(f[l], 0.0, json_path_at(pf, l), "a share over its uniform share");
    if (f[l] > static_cast<double>(block) + kSlack)
      c.fail(json_path_at(pf, l), ValueCheck::show(f[l]),
             "a share over its uniform share 1/n is at most n <= --block-size");
  }
}

double mean_of(const std::vector<double>& v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

std::optional<double> value(const CompareConfig&, const UnitResult& u, const std::string& row, const Metric& m) {
  const AttentionResult* a = u.parts.find<AttentionResult>();
  if (row != u.method || !a) return std::nullopt;
  const double c = m.label == attention_first_token_metric().label ? mean_of(a->first_token_share)
                                                                   : attention_decay_contrast(a->over_uniform);
  if (!std::isfinite(c)) return std::nullopt;
  return c;
}

// One panel per method, a line per layer; 1 = uniform attention.
std::vector<std::string> write_files(const ComparisonResult& r, const ReportDir& out) {
  std::vector<std::pair<std::string, const std::vector<std::vector<double>>*>> profiles;
  for (const auto& m : r.config.methods) {
    const UnitResult* u = first_unit(r, m);
    if (const AttentionResult* a = u ? u->parts.find<AttentionResult>() : nullptr)
      profiles.emplace_back(m, &a->over_uniform);
  }
  markdown::LayerPanels f;
  f.name = "attention_distance";
  f.title = "Attention weight over its uniform share vs query-key distance (per layer, first seed; 1 = uniform)";
  f.settings = "set logscale y\nset xlabel 'distance'\nset key inside right top\n";
  f.x0 = 1;  // index k is distance k + 1
  f.positive_only = true;
  markdown::draw_layer_panels(out.plots, f, profiles);
  return {};  // shown in the section, not the gallery
}

std::string section(const ComparisonResult& r, const ReportDir& out) {
  const CompareConfig& c = r.config;
  const int64_t T = c.base.model.block_size, h = (T - 1) / 2;
  const Metric m = attention_decay_metric();
  std::ostringstream md;
  md << "## Attention by distance, over its uniform share\n\n"
     << "For each query i, its attention over the i keys it sees besides itself, renormalised (p' = P / (1 - P_ii)), "
     << "times i: 1 = the share uniform attention gives every key. Averaged per distance d over the queries, heads "
     << "and 8 validation windows at the training length, then over layers: a(d). The plain mean of P(i, i - d) is "
     << "not shown: it falls with d even for uniform attention (row i has i + 1 keys, and only long rows reach far), "
     << "so the mask "
     << "alone would make every method decay. The query's own key is left out: a model without positions can single it "
     << "out by its content.\n\n"
     << "Decay contrast C = (N - F) / (N + F), N the mean of a(d) over d = 1.." << h << ", F over d = " << h + 1 << ".."
     << T - 1 << ": 0 for uniform attention (exactly) and for any attention blind to positions over exchangeable keys "
     << "(in expectation), > 0 when near keys get more than their uniform share, at most 1. A decoder without position "
     << "encoding learns some positions from the causal mask, and text is locally correlated, so NoPE may read above "
     << "0 too: it is the control claim (g) tests against, with a margin of " << markdown::num(kDecayMargin, 2)
     << " (differences of C smaller than that count for nothing). Mean [95% interval] over seeds.\n\n";
  md << "First-token share: the first token's attention over its uniform share, n_i p_i0 for the queries i = 1.."
     << T - 1
     << " (n_i = i + 1 keys), averaged like a(d), then over layers: 1 for uniform attention (exactly); above 1 the "
     << "first token draws more than its share, the attention sink StreamingLLM found in trained decoders (Xiao et "
     << "al. 2024 §3.1). With attention sinks it is over the real keys alone, so the sink's own share does not "
     << "lower it; only a model that stops parking weight on the first token does (claim n6).\n\n";
  const Metric f = attention_first_token_metric();
  markdown::Table t({"method", "decay contrast C (0 = position-blind)", "first-token share (1 = position-blind)"});
  for (const auto& method : c.methods)
    t.row({method, markdown::bounded_cell(summary(r, method, m), 3, -1.0, 1.0),
           markdown::bounded_cell(summary(r, method, f), 2, 0.0, static_cast<double>(T))});
  md << t.markdown() << "\n";
  if (std::filesystem::exists(out.plots + "/attention_distance.png"))
    md << "![attention_distance](plots/attention_distance.png)\n\n";
  return md.str();
}

}  // namespace

double attention_decay_contrast(const std::vector<std::vector<double>>& by_layer) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  if (by_layer.empty() || by_layer.front().size() < 2) return kNaN;
  const size_t n = by_layer.front().size(), h = n / 2;  // distances 1..n; near: 1..h = floor((T - 1) / 2)
  double near = 0, far = 0;
  for (size_t i = 0; i < n; ++i) {
    double a = 0;  // the layers' mean at distance i + 1
    for (const auto& l : by_layer) {
      if (l.size() != n) return kNaN;
      a += l[i];
    }
    a /= static_cast<double>(by_layer.size());
    (i < h ? near : far) += a;
  }
  near /= static_cast<double>(h);
  far /= static_cast<double>(n - h);
  if (!(near + far > 0)) return kNaN;
  return (near - far) / (near + far);
}

Metric attention_decay_metric() {
  Metric m;
  m.study = AttentionResult::kStudy;
  m.label = "attention_decay_contrast";
  m.lower_better = false;
  m.digits = 3;
  return m;
}

Metric attention_first_token_metric() {
  Metric m;
  m.study = AttentionResult::kStudy;
  m.label = "attention_first_token_share";
  m.lower_better = true;
  m.digits = 3;
  return m;
}

Judgement judge_decay(const std::vector<double>& x, const std::vector<double>& control, const std::string& name,
                      const std::string& control_name) {
  const double m = kDecayMargin;
  const Summary s = summarize(x), sc = summarize(control);
  if (s.n == 0) return {kNotMeasured, "needs a value of " + name};
  if (!s.has_interval()) return {"inconclusive", "one seed of " + name + ": no interval (run at least 2 seeds)"};
  const std::string interval = "[" + markdown::num(s.ci_low, 4) + ", " + markdown::num(s.ci_high, 4) + "]";
  const std::string margin = markdown::num(m, 2);
  const WelchTest w = welch_test(x, control);
  const int o = significant_order(w);
  const std::string welch = "Welch p " + markdown::num(w.p, 3) + ", difference " + markdown::num(w.diff, 4);
  const bool up = s.ci_low > m, down = s.ci_high < -m;  // beyond the margin around the position-blind 0
  const bool more = o > 0 && w.diff > m, less = o < 0 && w.diff < -m;
  auto joined = [](const std::vector<std::string>& parts) {
    std::string out;
    for (const auto& p : parts) out += (out.empty() ? "" : "; ") + p;
    return out;
  };
  std::vector<std::string> against;
  if (down)
    against.push_back(name + "'s attention grows with distance: its interval " + interval + " is below -" + margin +
                      " (the position-blind value 0 less the margin)");
  if (less) against.push_back(name + " is less local than " + control_name + " beyond the margin (" + welch + ")");
  if (!against.empty()) return {"contradicted", joined(against)};
  if (up && more)
    return {"supported", name + " decays with distance: its interval " + interval + " is above " + margin +
                             " (the position-blind value 0 plus the margin), and it is more local than " +
                             control_name + " beyond the margin (" + welch + ")"};
  std::vector<std::string> open;
  if (up)
    open.push_back(name + "'s contrast is above the position-blind value 0 beyond the margin (interval " + interval +
                   ")");
  else if (s.ci_low > 0 || s.ci_high < 0)
    open.push_back(name + "'s interval " + interval + " excludes 0 but not the margin ±" + margin +
                   ": a difference from position-blind attention too small to count");
  else
    open.push_back("the interval of " + name + "'s contrast " + interval + " contains 0, the position-blind value");
  if (sc.n == 0)
    open.push_back("not measured against " + control_name + ": add it to --methods (a decoder without position " +
                   "encoding is the control for locality learned without positions)");
  else if (!w.testable)
    open.push_back("not testable against " + control_name + " (" + w.why + ")");
  else if (o != 0)
    open.push_back(name + " differs from " + control_name + " within the margin ±" + margin + " (" + welch + ")");
  else
    open.push_back(name + " is not significantly more local than " + control_name + " (" + welch + ")");
  return {"inconclusive", joined(open)};
}

StudyEntry attention_study() {
  StudyEntry e;
  e.name = AttentionResult::kStudy;
  e.summary =
      "attention weight by query-key distance over its uniform share, per layer, and its near/far decay "
      "contrast (claim g; Su et al. 2021 §3.4.3)";
  e.run_unit = run;
  e.unit_to_json = [](const UnitResult& u, json& j) {
    const AttentionResult& a = u.parts.value<AttentionResult>();
    j["attention_over_uniform"] = a.over_uniform;
    if (!a.first_token_share.empty()) j["attention_first_token_share"] = a.first_token_share;
  };
  e.unit_from_json = [](const json& j, UnitResult& u) {
    AttentionResult& r = u.parts.get<AttentionResult>();
    for (const auto& layer : j.at("attention_over_uniform"))
      r.over_uniform.push_back(json_list<double>(layer, json_real));
    if (j.contains("attention_first_token_share"))
      r.first_token_share = json_list<double>(j.at("attention_first_token_share"), json_real);
  };
  e.check_unit = check_part;
  e.metrics = [](const CompareConfig&) {
    return std::vector<Metric>{attention_decay_metric(), attention_first_token_metric()};
  };
  e.value = value;
  e.write_files = write_files;
  e.markdown = section;
  return e;
}

}  // namespace posgrad::train
