// lm.cpp — see lm.h.
#include "compare/studies/lm/lm.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

#include "compare/markdown.h"
#include "compare/method.h"
#include "compare/rows.h"
#include "nn/posenc/position_encoding.h"
#include "train/evaluate.h"

namespace posgrad::train {

namespace {

using json = nlohmann::json;
using markdown::cell;
using markdown::num;
using markdown::Table;

constexpr const char* kStudy = LmResult::kStudy;

// The options of each derived row at multiplier m (m = 1 is the plain model for the scalings).
std::vector<std::pair<std::string, opt::Value>> variant_options(const std::string& suffix, int64_t m) {
  if (suffix == "@bf16") return {{"rope_position_precision", std::string("bf16")}};
  if (suffix == "@fp16") return {{"rope_position_precision", std::string("fp16")}};
  const std::string scaling = suffix.substr(1);
  return {{"rope_scaling", scaling}, {"rope_scaling_factor", scaling == "dynamic" ? 1.0 : static_cast<double>(m)}};
}

const std::vector<std::string>& variant_suffixes() {
  static const std::vector<std::string> s = {"+linear", "+dynamic", "+yarn", "@bf16", "@fp16"};
  return s;
}

// The registered encodings that take a RoPE scaling, "a, b" (those whose units have derived rows).
std::string scaling_kinds() {
  std::string out;
  for (const auto& k : nn::position_encoding_kinds())
    if (takes_rope_scaling(k)) out += (out.empty() ? "" : ", ") + k;
  return out;
}

// A copy of `model` on `dev` with other encoding options (the scalings and precisions have no
// parameters), in evaluation mode.
std::unique_ptr<nn::GPT> variant_model(const nn::GPT& model,
                                       const std::vector<std::pair<std::string, opt::Value>>& options, Device dev) {
  auto m = copy_gpt(model, options, 0, dev);
  m->eval();
  return m;
}

// Evaluation-time variants of a trained model: the context-extension scalings (linear and YaRN
// stretch by s = L / L_train; dynamic NTK grows its base with the current length itself, s = 1, so
// it is the plain model up to L_train), and the rotary arithmetic rounded to bf16 / fp16 (claim k).
std::map<std::string, Lengths> evaluate_variants(nn::GPT& model, const std::string& method, const data::TokenSpan& val,
                                                 const CompareConfig& cfg, Device dev, const Lengths& plain) {
  std::map<std::string, Lengths> rows;
  const auto skipped = skipped_variants(cfg);  // rows this configuration cannot build: absent
  for (const std::string& suffix : variant_suffixes()) {
    const std::string row = Row{method, suffix}.name();
    if (skipped.count(row)) continue;
    if (suffix[0] == '@') {
      rows[row] = evaluate_lengths(*variant_model(model, variant_options(suffix, 1), dev), val, cfg, dev, nullptr);
      continue;
    }
    Lengths out;
    for (size_t i = 0; i < cfg.eval_multipliers.size(); ++i) {
      const int64_t m = cfg.eval_multipliers[i];
      if (m == 1) {  // s = 1 (and dynamic NTK up to L_train) is the plain model: the same numbers
        out.push_back(plain[i]);
        continue;
      }
      CompareConfig one = cfg;
      one.eval_multipliers = {m};
      out.push_back(
          evaluate_lengths(*variant_model(model, variant_options(suffix, m), dev), val, one, dev, nullptr).front());
    }
    rows[row] = out;
  }
  return rows;
}

// Its rows of the option table (compare/options.h).
void options(opt::Table<CompareConfig>& t) {
  using namespace opt;
  Rows<CompareConfig> r(t);
  // Results made before the option existed were evaluated with non-overlapping windows only: 0.
  r.group("Language-model evaluation (compare/studies/lm/lm.h)")
      .add(added_later(real("eval_stride_fraction", closed(0, 1),
                            "Sliding-window evaluation (Press et al. 2022, App. B) beside the non-overlapping one: the "
                            "stride between windows as a fraction f of each evaluation length L, max(1, floor(f L)) "
                            "tokens; each window after the first scores only its last stride targets, so each has at "
                            "least L - stride + 1 tokens of context; the same targets as the non-overlapping windows, "
                            "about 1/f times their cost. 0: off; 1: the non-overlapping windows again"),
                       0.0),
           POSGRAD_MEMBER(template of<LmSettings>().eval_stride_fraction));
}

void run(UnitContext& ctx) {
  LmResult& r = ctx.unit.parts.get<LmResult>();
  const data::TokenSpan& val = ctx.data.val();
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  auto t0 = Clock::now();
  r.lengths = evaluate_lengths(ctx.model, val, ctx.cfg, ctx.dev, &r.per_position_loss);
  const double plain = since(t0);
  t0 = Clock::now();
  r.sliding = evaluate_sliding_lengths(ctx.model, val, ctx.cfg, ctx.dev, r.lengths);
  const double sliding = since(t0);
  t0 = Clock::now();
  if (takes_rope_scaling(ctx.method))
    r.variants = evaluate_variants(ctx.model, ctx.method, val, ctx.cfg, ctx.dev, r.lengths);
  // The cost of each protocol, as measured (docs/presets.md records it for the presets).
  spdlog::info(
      "[{} seed {}] lm: {} lengths in {:.3f} s with non-overlapping windows, {:.3f} s with sliding windows{}",
      ctx.method, ctx.seed, r.lengths.size(), plain, sliding,
      r.variants.empty() ? std::string() : fmt::format("; {} derived rows in {:.3f} s", r.variants.size(), since(t0)));
}

json length_json(const std::optional<LengthResult>& l) {
  if (!l) return nullptr;
  json j = {{"context", l->context},
            {"windows", l->windows},
            {"loss", l->loss},
            {"perplexity", l->perplexity},
            {"accuracy", l->accuracy}};
  if (!l->window_loss.empty() || !l->window_tokens.empty()) {
    j["window_loss"] = l->window_loss;
    j["window_tokens"] = l->window_tokens;
  }
  return j;
}

std::optional<LengthResult> length_from(const json& j) {
  if (j.is_null()) return std::nullopt;
  LengthResult l;
  l.context = json_int(j.at("context"));
  l.windows = json_int(j.at("windows"));
  l.loss = json_real(j.at("loss"));
  l.perplexity = json_real(j.at("perplexity"));
  l.accuracy = json_real(j.at("accuracy"));
  // Absent in a result made before the per-window losses were stored: no bootstrap interval.
  if (j.contains("window_loss")) l.window_loss = json_list<double>(j.at("window_loss"), json_real);
  if (j.contains("window_tokens")) l.window_tokens = json_list<int64_t>(j.at("window_tokens"), json_int);
  return l;
}

LengthResult length_of(const EvalResult& e) {
  return LengthResult{e.context, e.windows, e.loss, e.perplexity, e.accuracy, e.window_loss, e.window_tokens};
}

void write_part(const UnitResult& u, json& j) {
  const LmResult& r = u.parts.value<LmResult>();
  json variants = json::object();
  for (const auto& [name, v] : r.variants) variants[name] = lengths_to_json(v);
  j["lengths"] = lengths_to_json(r.lengths);
  if (!r.sliding.empty()) j["sliding"] = lengths_to_json(r.sliding);
  j["variants"] = variants;
  j["per_position_loss"] = r.per_position_loss;
}

void read_part(const json& j, UnitResult& u) {
  LmResult& r = u.parts.get<LmResult>();
  r.lengths = lengths_from_json(j.at("lengths"));
  if (j.contains("sliding")) r.sliding = lengths_from_json(j.at("sliding"));  // absent: not measured
  for (const auto& [name, v] : j.at("variants").items()) r.variants[name] = lengths_from_json(v);
  r.per_position_loss = json_list<double>(j.at("per_position_loss"), json_real);
}

void check_length(const ValueCheck& c, const LengthResult& l, int64_t context, const std::string& p) {
  c.equal(l.context, context, json_path_key(p, "context"), "the evaluation multiplier x --block-size");
  c.positive(l.windows, json_path_key(p, "windows"));
  c.loss_and_perplexity(l.loss, l.perplexity, p);
  c.fraction(l.accuracy, json_path_key(p, "accuracy"));
}

// The per-window losses of a length, where stored: one loss and one count per window, window 0's
// count in `first` and every other's in `others` ({lo, hi}, inclusive), and their sums agreeing with
// the length's loss. Returns the scored targets (0 when not stored).
using CountRange = std::pair<int64_t, int64_t>;
int64_t check_windows(const ValueCheck& c, const LengthResult& l, const std::string& p, CountRange first,
                      CountRange others, const char* why) {
  if (l.window_loss.empty() && l.window_tokens.empty()) return 0;
  const std::string lp = json_path_key(p, "window_loss"), tp = json_path_key(p, "window_tokens");
  c.size(l.window_loss.size(), static_cast<size_t>(l.windows), lp, "one per window");
  c.size(l.window_tokens.size(), static_cast<size_t>(l.windows), tp, "one per window");
  double loss = 0;
  int64_t tokens = 0;
  for (size_t w = 0; w < l.window_loss.size(); ++w) {
    c.at_least(l.window_loss[w], 0.0, json_path_at(lp, w), "a summed loss");
    const int64_t n = l.window_tokens[w];
    const auto [lo, hi] = w == 0 ? first : others;
    if (n < lo || n > hi)
      c.fail(json_path_at(tp, w), std::to_string(n),
             "a window scores " + (lo == hi ? "" : std::to_string(lo) + " to ") + std::to_string(hi) + " targets (" +
                 why + ")");
    loss += l.window_loss[w];
    tokens += n;
  }
  const double mean = loss / static_cast<double>(tokens);
  if (std::fabs(mean - l.loss) > 1e-9 * std::fabs(l.loss) + 1e-12)
    c.fail(lp, "",
           "sums to a mean loss of " + ValueCheck::show(mean) + " per target, not the length's loss " +
               ValueCheck::show(l.loss) + " (they are written together)");
  return tokens;
}

void check_plain_length(const ValueCheck& c, const LengthResult& l, int64_t context, const std::string& p) {
  check_length(c, l, context, p);
  const int64_t tokens =
      check_windows(c, l, p, {context, context}, {context, context}, "a non-overlapping window scores all its targets");
  if (tokens != 0 && tokens != l.windows * context)
    c.fail(
        json_path_key(p, "window_tokens"), "",
        "sums to " + std::to_string(tokens) + ", expected windows x context = " + std::to_string(l.windows * context));
}

void check_part(const UnitResult& u, const CompareConfig& cfg, const ValueCheck& c, const std::string& p) {
  const LmResult& r = u.parts.value<LmResult>();
  check_lengths(c, r.lengths, cfg, json_path_key(p, "lengths"));
  check_sliding(c, r.sliding, r.lengths, cfg, json_path_key(p, "sliding"));
  // The derived rows are exactly those the unit's method makes, less the skipped ones.
  std::vector<std::string> want;
  const auto skipped = skipped_variants(cfg);
  for (const auto& row : variant_rows(u.method))
    if (!skipped.count(row)) want.push_back(row);
  const std::string vp = json_path_key(p, "variants");
  for (const auto& row : want)
    if (!r.variants.count(row))
      c.fail(vp, "", "has no row " + ValueCheck::quoted(row) + ", which every " + u.method + " unit measures");
  for (const auto& [name, v] : r.variants) {
    const std::string q = vp + "[" + ValueCheck::quoted(name) + "]";
    if (std::find(want.begin(), want.end(), name) == want.end())
      c.fail(q, "",
             want.empty() ? "only " + scaling_kinds() + " units have derived rows"
                          : "not a derived row of this configuration (" + ValueCheck::list(want) + ")");
    if (method_of(name) != u.method || Row::parse(name).variant.empty())
      c.fail(q, "",
             "a variant of unit " + ValueCheck::quoted(u.method) + " is named " + u.method + "+<scaling> or " +
                 u.method + "@<precision>");
    check_lengths(c, v, cfg, q);
  }
  const auto it = std::find(cfg.eval_multipliers.begin(), cfg.eval_multipliers.end(), cfg.per_position_multiplier);
  const size_t at = static_cast<size_t>(it - cfg.eval_multipliers.begin());
  const bool evaluated = it != cfg.eval_multipliers.end() && at < r.lengths.size() && r.lengths[at].has_value();
  const std::string pp = json_path_key(p, "per_position_loss");
  c.size(r.per_position_loss.size(),
         evaluated ? static_cast<size_t>(cfg.per_position_multiplier * cfg.base.model.block_size) : 0, pp,
         "one per position of the --per-position-multiplier window, where it was evaluated");
  for (size_t i = 0; i < r.per_position_loss.size(); ++i)
    c.at_least(r.per_position_loss[i], 0.0, json_path_at(pp, i), "a loss");
}

std::vector<std::string> extra_rows(const ComparisonResult& r) {
  std::vector<std::string> out;
  for (const auto& m : r.config.methods)
    for (const auto& u : r.units)
      if (u.method == m)
        if (const LmResult* l = u.parts.find<LmResult>())
          for (const auto& [name, v] : l->variants)
            if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  return out;
}

std::vector<Metric> metrics(const CompareConfig& c) {
  std::vector<Metric> m = {lm_metric(Quantity::Parameters), lm_metric(Quantity::PositionParameters),
                           lm_metric(Quantity::Loss), lm_metric(Quantity::Perplexity), lm_metric(Quantity::Accuracy)};
  for (int64_t k : c.eval_multipliers)
    if (k != 1) m.push_back(lm_metric(Quantity::Perplexity, k));
  for (int64_t k : c.eval_multipliers)
    if (k != 1) m.push_back(lm_metric(Quantity::PerplexityRatio, k));
  if (c.of<LmSettings>().eval_stride_fraction > 0) {  // after the others: their rows stay as they were
    for (int64_t k : c.eval_multipliers) m.push_back(lm_metric(Quantity::SlidingPerplexity, k));
    for (int64_t k : c.eval_multipliers)
      if (k != 1) m.push_back(lm_metric(Quantity::SlidingPerplexityRatio, k));
  }
  return m;
}

std::optional<double> value(const CompareConfig& c, const UnitResult& u, const std::string& row, const Metric& m) {
  const auto q = static_cast<Quantity>(m.quantity);
  if (q == Quantity::Parameters) return static_cast<double>(u.parameters);
  if (q == Quantity::PositionParameters) return static_cast<double>(u.position_parameters);
  const LmResult* r = u.parts.find<LmResult>();
  if (!r) return std::nullopt;
  const bool sliding = q == Quantity::SlidingPerplexity || q == Quantity::SlidingPerplexityRatio;
  const Lengths* ls = sliding ? &r->sliding : &r->lengths;
  if (row != u.method) {
    if (sliding) return std::nullopt;  // the derived rows are evaluated with non-overlapping windows only
    auto it = r->variants.find(row);
    if (it == r->variants.end()) return std::nullopt;
    ls = &it->second;
  }
  auto at = [&](int64_t mult) -> std::optional<LengthResult> {
    auto it = std::find(c.eval_multipliers.begin(), c.eval_multipliers.end(), mult);
    const size_t i = static_cast<size_t>(it - c.eval_multipliers.begin());
    if (it == c.eval_multipliers.end() || i >= ls->size()) return std::nullopt;
    return (*ls)[i];
  };
  const auto l = at(m.multiplier);
  if (!l) return std::nullopt;
  switch (q) {
    case Quantity::Loss: return l->loss;
    case Quantity::Perplexity:
    case Quantity::SlidingPerplexity: return l->perplexity;
    case Quantity::Accuracy: return l->accuracy;
    case Quantity::PerplexityRatio:
    case Quantity::SlidingPerplexityRatio: {
      // Relative to the same row and protocol at the training length (a variant equals its method
      // there, or is compared with itself).
      const auto one = at(1);
      if (!one) return std::nullopt;
      return l->perplexity / one->perplexity;
    }
    default: return std::nullopt;
  }
}

std::string settings_markdown(const ComparisonResult& r) {
  const CompareConfig& c = r.config;
  std::vector<double> rel;  // the measured seed-to-seed noise that sizes the experiment
  for (const auto& m : c.methods) {
    const Summary s = summary(r, m, lm_metric(Quantity::Perplexity));
    if (s.has_interval()) rel.push_back(s.std / s.mean);
  }
  std::sort(rel.begin(), rel.end());
  std::string md = "- seed-to-seed noise: the standard deviation of the validation perplexity over seeds is " +
                   (rel.empty() ? std::string("not measured (one seed)")
                                : num(100 * rel[rel.size() / 2], 2) + "% of the mean (median over methods)") +
                   "; differences smaller than about twice that are not resolved with " +
                   std::to_string(c.seeds.size()) + " seeds\n";
  const double f = c.of<LmSettings>().eval_stride_fraction;
  md += "- evaluation protocols: non-overlapping windows" +
        (f > 0 ? std::string(", and sliding windows over the same targets with stride max(1, floor(") + num(f, 3) +
                     " x length)) (`--eval-stride-fraction`; derived rows: non-overlapping only)"
               : std::string(" only (`--eval-stride-fraction 0`)")) +
        "\n";
  md +=
      "- RoPE evaluation-time variants: linear and YaRN scaling with s = L/L_train, dynamic NTK; `rope@bf16` and "
      "`rope@fp16` round the rotary angle arithmetic to that format\n";
  for (const auto& [row, why] : skipped_variants(r.config))
    md += "- `" + row + "` not measured: this configuration cannot build it (" + why + ")\n";
  return md;
}

// Whether some unit of the comparison has sliding-window lengths.
bool has_sliding(const ComparisonResult& r) {
  for (const auto& u : r.units)
    if (const LmResult* l = u.parts.find<LmResult>(); l && !l->sliding.empty()) return true;
  return false;
}

// Perplexity vs length, mean with the 95% interval: one panel per protocol (the sliding one, when
// measured, beside the non-overlapping one, with the same colour per row and the same axes).
void ppl_plot(const ComparisonResult& r, const std::string& d) {
  const CompareConfig& c = r.config;
  const int64_t block = c.base.model.block_size;
  const bool sliding = has_sliding(r);
  double lo = INFINITY, hi = -INFINITY;
  // One data block per row, a plot element for each row with values.
  auto panel = [&](const std::string& file, Protocol p) {
    std::ofstream dat(d + "/" + file);
    std::string plot = "plot ";
    int idx = 0, colour = 0;
    for (const auto& row : rows(r)) {
      ++colour;
      const bool variant = !Row::parse(row).variant.empty();
      if (p == Protocol::Sliding && variant) continue;  // non-overlapping only
      dat << "# " << row << "\n";
      int points = 0;
      for (int64_t k : c.eval_multipliers) {
        const Summary s = summary(r, row, lm_metric(Quantity::Perplexity, k, p));
        if (!s.n) continue;
        ++points;
        const double l = s.has_interval() ? s.ci_low : s.mean, h = s.has_interval() ? s.ci_high : s.mean;
        dat << k * block << " " << s.mean << " " << l << " " << h << "\n";
        lo = std::min(lo, l);
        hi = std::max(hi, h);
      }
      dat << "\n\n";
      if (points)
        plot += std::string(plot.size() > 5 ? ", " : "") + "'" + file + "' index " + std::to_string(idx) +
                " with yerrorlines " + (variant ? "dt 2 lw 1" : "lw 2") +
                (sliding ? " lc " + std::to_string(colour) : "") + " title '" + row + "'";
      ++idx;
    }
    return plot;
  };
  const std::string plain = panel("ppl_vs_length.dat", Protocol::NonOverlapping);
  std::ofstream gp(d + "/ppl_vs_length.gp");
  const std::string axes =
      "set logscale x 2\nset logscale y\nset xlabel 'evaluation length (tokens); training length " +
      std::to_string(block) + "'\nset ylabel 'validation perplexity'\n";
  const std::string title =
      "Length extrapolation (mean and 95% interval over " + std::to_string(c.seeds.size()) + " seeds)";
  if (!sliding) {
    gp << markdown::gnuplot_style() << "set output 'ppl_vs_length.png'\n"
       << axes << "set title '" << title << "'\n"
       << plain << "\n";
    return;
  }
  const std::string slid = panel("ppl_vs_length_sliding.dat", Protocol::Sliding);
  gp << markdown::gnuplot_style(1800, 650) << "set output 'ppl_vs_length.png'\nset multiplot layout 1,2 title '"
     << title << "'\n"
     << axes;
  // The same axes in both panels: the decades around every plotted value (gnuplot's log-scale
  // autoscale, which labels its ends).
  if (lo <= hi && lo > 0)
    gp << "set yrange [" << std::pow(10.0, std::floor(std::log10(lo))) << ":"
       << std::pow(10.0, std::ceil(std::log10(hi))) << "]\n";
  gp << "set title 'non-overlapping windows'\n"
     << plain << "\nset title 'sliding windows (stride " << num(c.of<LmSettings>().eval_stride_fraction, 3)
     << " x length)'\n"
     << slid << "\nunset multiplot\n";
}

// Training loss, first seed.
void train_loss_plot(const ComparisonResult& r, const std::string& d) {
  std::ofstream dat(d + "/train_loss.dat");
  std::string plot = "plot ";
  int idx = 0;
  for (const auto& m : r.config.methods) {
    const UnitResult* u = first_unit(r, m);
    if (!u) continue;
    dat << "# " << m << "\n";
    for (const auto& [step, loss] : u->train_curve) dat << step << " " << loss << "\n";
    dat << "\n\n";
    plot += std::string(idx ? ", " : "") + "'train_loss.dat' index " + std::to_string(idx) +
            " with lines lw 2 title '" + m + "'";
    ++idx;
  }
  std::ofstream gp(d + "/train_loss.gp");
  gp << markdown::gnuplot_style() << "set output 'train_loss.png'\nset xlabel 'step'\nset ylabel 'training loss'\n"
     << "set title 'Training loss (first seed)'\n"
     << plot << "\n";
}

// Per-position loss, first seed, buckets of 8 positions.
void per_position_plot(const ComparisonResult& r, const std::string& d) {
  const CompareConfig& c = r.config;
  std::ofstream dat(d + "/per_position_loss.dat");
  std::string plot = "plot ";
  int idx = 0;
  for (const auto& m : c.methods) {
    const UnitResult* u = first_unit(r, m);
    const LmResult* l = u ? u->parts.find<LmResult>() : nullptr;
    if (!l || l->per_position_loss.empty()) continue;
    const auto& v = l->per_position_loss;
    dat << "# " << m << "\n";
    const size_t bucket = v.size() >= 64 ? 8 : 1;
    for (size_t i = 0; i + bucket <= v.size(); i += bucket) {
      double s = 0;
      for (size_t k = 0; k < bucket; ++k) s += v[i + k];
      dat << i + bucket / 2 << " " << s / static_cast<double>(bucket) << "\n";
    }
    dat << "\n\n";
    plot += std::string(idx ? ", " : "") + "'per_position_loss.dat' index " + std::to_string(idx) +
            " with lines lw 2 title '" + m + "'";
    ++idx;
  }
  std::ofstream gp(d + "/per_position_loss.gp");
  gp << markdown::gnuplot_style() << "set output 'per_position_loss.png'\nset xlabel 'position in the window'\n"
     << "set ylabel 'loss'\nset arrow from " << c.base.model.block_size << ", graph 0 to " << c.base.model.block_size
     << ", graph 1 nohead dt 3\nset title 'Loss per position inside a " << c.per_position_multiplier
     << "x window (dotted: training length; first seed)'\n"
     << plot << "\n";
}

std::vector<std::string> write_files(const ComparisonResult& r, const ReportDir& out) {
  ppl_plot(r, out.plots);
  train_loss_plot(r, out.plots);
  per_position_plot(r, out.plots);
  return markdown::draw(out.plots, {"ppl_vs_length", "train_loss", "per_position_loss"});
}

// The windows the first unit measured at each multiplier under protocol p, "1x: 8, 2x: 4" ("" if none).
std::string window_counts(const ComparisonResult& r, Protocol p) {
  const CompareConfig& c = r.config;
  std::string out;
  for (size_t i = 0; i < c.eval_multipliers.size(); ++i)
    for (const auto& u : r.units) {
      const LmResult* l = u.parts.find<LmResult>();
      const Lengths* ls = l ? (p == Protocol::Sliding ? &l->sliding : &l->lengths) : nullptr;
      if (!ls || i >= ls->size() || !(*ls)[i]) continue;
      out +=
          (out.empty() ? "" : ", ") + std::to_string(c.eval_multipliers[i]) + "x: " + std::to_string((*ls)[i]->windows);
      break;
    }
  return out;
}

std::string section(const ComparisonResult& r, const ReportDir&) {
  const CompareConfig& c = r.config;
  const int64_t block = c.base.model.block_size;
  const bool sliding = has_sliding(r);
  std::ostringstream md;
  md << "## Length extrapolation: validation perplexity at multiples of the training length\n\n"
     << "Non-overlapping windows over the same validation text (about " << c.eval_tokens
     << " scored tokens per length).\n\n";
  std::vector<std::string> eh = {"method"};
  for (int64_t k : c.eval_multipliers) eh.push_back(std::to_string(k) + "x (" + std::to_string(k * block) + ")");
  auto length_table = [&](Protocol p) {
    Table t(eh);
    for (const auto& row : rows(r)) {
      if (p == Protocol::Sliding && !Row::parse(row).variant.empty()) continue;  // non-overlapping only
      std::vector<std::string> cells = {row};
      for (int64_t k : c.eval_multipliers)
        cells.push_back(cell(summary(r, row, lm_metric(Quantity::Perplexity, k, p)), 2));
      t.row(cells);
    }
    return t.markdown();
  };
  md << length_table(Protocol::NonOverlapping) << "\n";

  const double f = c.of<LmSettings>().eval_stride_fraction;
  if (sliding) {
    md << "### Sliding windows\n\n"
       << "The same targets scored with sliding windows (Press et al. 2022, App. B): each window of the evaluation "
       << "length L after the first scores only the targets the previous one did not, its last S = max(1, floor("
       << num(f, 3) << " L)) (`--eval-stride-fraction`), so each of them is predicted from at least L - S + 1 tokens "
       << "of context; the first window scores all its L targets, so at a length with one non-overlapping window the "
       << "two protocols measure the same thing. Windows per length: " << window_counts(r, Protocol::Sliding)
       << " (non-overlapping: " << window_counts(r, Protocol::NonOverlapping)
       << "). The derived rows (scalings, precisions) are evaluated with non-overlapping windows only.\n\n"
       << length_table(Protocol::Sliding) << "\n";
  } else {
    md << "Sliding windows: "
       << (f > 0 ? "not measured (results made before the protocol existed)" : "off (`--eval-stride-fraction 0`)")
       << ".\n\n";
  }

  md << "### Intervals over seeds and evaluation windows\n\n"
     << "The intervals above are Student's t over the seeds' perplexities: they carry the noise of training, not "
     << "that of the evaluation text, whose windows are few at the long lengths ("
     << window_counts(r, Protocol::NonOverlapping) << "). Below, the 95% percentile-bootstrap interval of the same "
     << "mean, resampling the seeds and then, within each drawn seed, its evaluation windows (each window's summed "
     << "loss and target count; " << kBootstrapResamples << " resamples from the fixed generator seed "
     << kBootstrapSeed << ", the same in every cell, so the table is bit-identical for the same results). It covers "
     << "both the seed-to-seed noise and the noise of which text was scored, windows of one text treated as "
     << "exchangeable; with one seed it is the windows' noise alone. It is not a wider replacement of the t "
     << "interval: from n seeds and W windows a bootstrap sees their spread shrunk by (n - 1)/n and (W - 1)/W in "
     << "variance and has no Student-t widening, so with 2-3 seeds it can be narrower than the t interval, and "
     << "at a length with 4 windows its window part rests on those 4 values. Read the two together. n/a: the "
     << "windows were not stored (a result made before they were) or not measured.\n\n";
  std::vector<std::string> bh = {"row", "protocol"};
  bh.insert(bh.end(), eh.begin() + 1, eh.end());
  Table boot(bh, false, 2);
  for (const auto& row : rows(r))
    for (Protocol p : {Protocol::NonOverlapping, Protocol::Sliding}) {
      if (p == Protocol::Sliding && (!sliding || !Row::parse(row).variant.empty())) continue;
      std::vector<std::string> cells = {row, p == Protocol::Sliding ? "sliding" : "non-overlapping"};
      for (int64_t k : c.eval_multipliers) {
        const BootstrapInterval b = length_bootstrap(r, row, k, p);
        cells.push_back(b.valid() ? "[" + num(b.low, 2) + ", " + num(b.high, 2) + "]" : "n/a");
      }
      boot.row(cells);
    }
  md << boot.markdown() << "\n";
  return md.str();
}

}  // namespace

Metric lm_metric(Quantity q, int64_t multiplier, Protocol protocol) {
  if (protocol == Protocol::Sliding) {
    if (q == Quantity::Perplexity)
      q = Quantity::SlidingPerplexity;
    else if (q == Quantity::PerplexityRatio)
      q = Quantity::SlidingPerplexityRatio;
    else if (q != Quantity::SlidingPerplexity && q != Quantity::SlidingPerplexityRatio)
      throw std::invalid_argument("lm_metric: only the perplexity and its ratio have a sliding-window form");
  }
  const std::string x = "_x" + std::to_string(multiplier);
  Metric m;
  m.study = kStudy;
  m.quantity = static_cast<int>(q);
  m.multiplier = multiplier;
  switch (q) {
    case Quantity::Parameters: m.label = "parameters"; break;
    case Quantity::PositionParameters: m.label = "position_parameters"; break;
    case Quantity::Loss: m.label = multiplier == 1 ? "val_loss" : "loss" + x; break;
    case Quantity::Perplexity: m.label = multiplier == 1 ? "val_perplexity" : "perplexity" + x; break;
    case Quantity::Accuracy: m.label = multiplier == 1 ? "val_accuracy" : "accuracy" + x; break;
    case Quantity::PerplexityRatio: m.label = "ppl_ratio" + x; break;
    case Quantity::SlidingPerplexity: m.label = "perplexity_sliding" + x; break;
    case Quantity::SlidingPerplexityRatio: m.label = "ppl_ratio_sliding" + x; break;
  }
  m.lower_better = q != Quantity::Accuracy;
  m.digits = q == Quantity::Parameters || q == Quantity::PositionParameters ? 0
             : q == Quantity::Accuracy || q == Quantity::Loss               ? 4
                                                                            : 3;
  return m;
}

Lengths evaluate_lengths(nn::GPT& model, const data::TokenSpan& val, const CompareConfig& cfg, Device dev,
                         std::vector<double>* per_position) {
  Lengths out;
  const int64_t block = model.config().block_size;
  const int64_t limit = model.position_encoding().max_length();
  for (int64_t m : cfg.eval_multipliers) {
    const int64_t ctx = m * block;
    if ((limit >= 0 && ctx > limit) || ctx + 1 > static_cast<int64_t>(val.size())) {
      out.emplace_back();
      continue;
    }
    const EvalResult e = evaluate_tokens(model, val, ctx, std::max<int64_t>(1, cfg.eval_tokens / ctx), 0, dev);
    out.push_back(length_of(e));
    if (per_position && m == cfg.per_position_multiplier) *per_position = e.per_position_loss;
  }
  return out;
}

Lengths evaluate_sliding_lengths(nn::GPT& model, const data::TokenSpan& val, const CompareConfig& cfg, Device dev,
                                 const Lengths& plain) {
  Lengths out;
  if (cfg.of<LmSettings>().eval_stride_fraction <= 0) return out;
  for (size_t i = 0; i < plain.size(); ++i) {
    if (!plain[i]) {
      out.emplace_back();
      continue;
    }
    const int64_t ctx = plain[i]->context, targets = plain[i]->windows * ctx;
    out.push_back(length_of(evaluate_sliding(model, val, ctx, eval_stride(cfg, ctx), targets, 0, dev)));
  }
  return out;
}

int64_t eval_stride(const CompareConfig& cfg, int64_t context) {
  const double f = cfg.of<LmSettings>().eval_stride_fraction;
  if (f <= 0) return 0;
  return std::clamp<int64_t>(static_cast<int64_t>(std::floor(f * static_cast<double>(context))), 1, context);
}

BootstrapInterval length_bootstrap(const ComparisonResult& r, const std::string& row, int64_t k, Protocol protocol) {
  const auto& mult = r.config.eval_multipliers;
  const auto it = std::find(mult.begin(), mult.end(), k);
  std::vector<WindowLosses> seeds;
  if (it != mult.end()) {
    const size_t i = static_cast<size_t>(it - mult.begin());
    const std::string method = method_of(row);
    for (uint64_t seed : r.config.seeds)
      for (const auto& u : r.units) {
        if (u.method != method || u.seed != seed) continue;
        const LmResult* l = u.parts.find<LmResult>();
        if (!l) continue;
        const Lengths* ls = nullptr;  // the derived rows have non-overlapping windows only
        if (row == method)
          ls = protocol == Protocol::Sliding ? &l->sliding : &l->lengths;
        else if (auto v = l->variants.find(row); v != l->variants.end() && protocol == Protocol::NonOverlapping)
          ls = &v->second;
        if (!ls || i >= ls->size() || !(*ls)[i] || (*ls)[i]->window_loss.empty()) continue;
        seeds.push_back(WindowLosses{(*ls)[i]->window_loss, (*ls)[i]->window_tokens});
      }
  }
  if (seeds.empty()) return {};
  return perplexity_bootstrap(seeds, kBootstrapResamples, kBootstrapSeed);
}

std::vector<std::string> variant_rows(const std::string& method) {
  std::vector<std::string> rows;
  if (takes_rope_scaling(method))
    for (const auto& s : variant_suffixes()) rows.push_back(Row{method, s}.name());
  return rows;
}

bool takes_rope_scaling(const std::string& method) {
  for (const auto& spec : nn::position_encoding_entry(method_kind(method)).options)
    if (spec.name == "rope_scaling") return true;
  return false;
}

std::vector<std::string> rope_scaling_methods(const CompareConfig& cfg) {
  std::vector<std::string> out;
  for (const auto& m : cfg.methods)
    if (takes_rope_scaling(m)) out.push_back(m);
  return out;
}

nn::PosEncConfig method_pos_config(const CompareConfig& cfg, const std::string& method) {
  nn::PosEncConfig pc = method_model(cfg.base.model, method).pos;
  pc.n_embd = cfg.base.model.n_embd;
  pc.n_head = cfg.base.model.n_head;
  pc.n_layer = cfg.base.model.n_layer;
  pc.block_size = cfg.base.model.block_size;
  return pc;
}

std::map<std::string, std::string> skipped_variants(const CompareConfig& cfg) {
  std::map<std::string, std::string> out;
  for (const auto& method : rope_scaling_methods(cfg))
    for (const std::string& suffix : variant_suffixes())
      for (int64_t m : cfg.eval_multipliers) {
        if (m == 1 && suffix[0] == '+') continue;  // the plain model's numbers
        nn::PosEncConfig pc = method_pos_config(cfg, method);
        try {
          for (const auto& [name, v] : variant_options(suffix, m)) pc.set(name, v);
          pc.validate();
        } catch (const ValueError& e) {
          out[Row{method, suffix}.name()] = e.what();
          break;
        }
      }
  return out;
}

json lengths_to_json(const Lengths& v) {
  json a = json::array();
  for (const auto& l : v) a.push_back(length_json(l));
  return a;
}

Lengths lengths_from_json(const json& j) {
  Lengths v;
  for (const auto& e : j) v.push_back(length_from(e));
  return v;
}

void check_lengths(const ValueCheck& c, const Lengths& v, const CompareConfig& cfg, const std::string& p) {
  c.size(v.size(), cfg.eval_multipliers.size(), p,
         "one per --eval-multipliers " + ValueCheck::list(cfg.eval_multipliers));
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t m = cfg.eval_multipliers[i];
    if (!v[i]) {
      if (m == 1) c.fail(json_path_at(p, i), "null", "every method is evaluated at the training length (multiplier 1)");
      continue;
    }
    check_plain_length(c, *v[i], m * cfg.base.model.block_size, json_path_at(p, i));
  }
}

void check_sliding(const ValueCheck& c, const Lengths& sliding, const Lengths& plain, const CompareConfig& cfg,
                   const std::string& p) {
  if (sliding.empty()) return;  // not measured
  if (cfg.of<LmSettings>().eval_stride_fraction == 0)
    c.fail(p, "", "sliding-window lengths in an experiment with --eval-stride-fraction 0 (no sliding evaluation)");
  c.size(sliding.size(), cfg.eval_multipliers.size(), p,
         "one per --eval-multipliers " + ValueCheck::list(cfg.eval_multipliers));
  for (size_t i = 0; i < sliding.size(); ++i) {
    const std::string q = json_path_at(p, i);
    const bool has_plain = i < plain.size() && plain[i].has_value();
    if (!sliding[i]) {
      if (has_plain) c.fail(q, "null", "measured wherever the non-overlapping windows were");
      continue;
    }
    if (!has_plain) c.fail(q, "", "measured where the non-overlapping windows were not (null there)");
    const LengthResult& l = *sliding[i];
    const int64_t context = cfg.eval_multipliers[i] * cfg.base.model.block_size;
    check_length(c, l, context, q);
    const int64_t stride = eval_stride(cfg, context), targets = plain[i]->windows * context;
    c.equal(l.windows, sliding_windows(context, stride, targets), json_path_key(q, "windows"),
            "the windows of stride " + std::to_string(stride) + " over the " + std::to_string(targets) +
                " targets of the non-overlapping windows");
    if (l.window_loss.empty() && l.window_tokens.empty())
      c.fail(q, "", "has no window_loss and window_tokens (stored with every sliding evaluation)");
    const int64_t tokens = check_windows(c, l, q, {context, context}, {1, stride},
                                         "the first window scores all its targets, the others at most the stride");
    if (tokens != targets)
      c.fail(json_path_key(q, "window_tokens"), "",
             "sums to " + std::to_string(tokens) + ", expected the " + std::to_string(targets) +
                 " targets of the non-overlapping windows");
  }
}

StudyEntry lm_study() {
  StudyEntry e;
  e.name = kStudy;
  e.summary =
      "language-model evaluation: perplexity and accuracy at 1x..Nx the training length with non-overlapping "
      "and sliding windows, per-position loss, evaluation-time RoPE scalings (Press et al. 2022 §2 and App. B; "
      "Chen et al. 2023; Peng et al. 2023)";
  e.init_settings = [](Parts& p) { p.get<LmSettings>(); };
  e.options = options;
  e.run_unit = run;
  e.unit_to_json = write_part;
  e.unit_from_json = read_part;
  e.check_unit = check_part;
  e.rows = extra_rows;
  e.metrics = metrics;
  e.value = value;
  e.settings_markdown = settings_markdown;
  e.write_files = write_files;
  e.markdown = section;
  e.gallery_plots = 3;
  return e;
}

}  // namespace posgrad::train
