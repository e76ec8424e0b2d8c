// addition_report.cpp — the addition study's report (see addition.h): the seed-to-seed spread per
// row, variant and length (addition.csv, addition_seeds.csv, a table per method and variant, a plot
// per variant) and claim z1.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "compare/markdown.h"
#include "compare/rows.h"
#include "compare/stats.h"
#include "compare/studies/addition/addition.h"
#include "compare/studies/study_claims.h"
#include "compare/studies/task/task.h"
#include "data/fileio.h"

namespace posgrad::train {

namespace {

// "1 seed", "3 seeds".
std::string counted(size_t n, const std::string& noun) { return std::to_string(n) + " " + noun + (n == 1 ? "" : "s"); }

using markdown::num;

const AdditionResult* result_of(const ComparisonResult& r) {
  const auto* a = r.parts.find<AdditionResult>();
  return a && !a->units.empty() ? a : nullptr;
}

// The (row, variant) pairs with results, in configuration order: methods, then variants, plain first.
struct RowKey {
  std::string method, variant;
  bool randomized = false;
  std::string row() const { return Row{method, "", 0, randomized}.name(); }
};
std::vector<RowKey> row_keys(const ComparisonResult& r) {
  std::vector<RowKey> out;
  for (const auto& m : r.config.methods)
    for (const auto& [v, rnd] : addition_rows(r.config, m)) out.push_back({m, v, rnd});
  return out;
}

// Mean, min, max and sample sd of values (NaN for none; sd NaN for one).
struct Spread {
  size_t n = 0;
  double mean = NAN, min = NAN, max = NAN, sd = NAN;
};
Spread spread_of(const std::vector<AdditionSeedScore>& s) {
  Spread o;
  o.n = s.size();
  if (s.empty()) return o;
  std::vector<double> v;
  for (const auto& x : s) v.push_back(x.value());
  o.min = *std::min_element(v.begin(), v.end());
  o.max = *std::max_element(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  o.mean = sum / static_cast<double>(v.size());
  if (v.size() >= 2) {
    double ss = 0;
    for (double x : v) ss += (x - o.mean) * (x - o.mean);
    o.sd = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  return o;
}
std::string spread_cell(const Spread& s) {
  if (!s.n) return "n/a";
  return num(s.mean, 2) + " (" + num(s.min, 2) + "–" + num(s.max, 2) + (s.n >= 2 ? ", sd " + num(s.sd, 2) : "") + ")";
}

int64_t max_length(const ComparisonResult& r) { return 3 * r.config.of<AdditionSettings>().length; }

}  // namespace

std::vector<AdditionSeedScore> addition_scores(const AdditionResult& r, const std::string& method,
                                               const std::string& variant, bool randomized, int64_t lo, int64_t hi) {
  std::vector<AdditionSeedScore> out;
  for (const auto& u : r.units) {
    if (u.method != method) continue;
    for (const auto& row : u.rows) {
      if (row.variant != variant || row.randomized != randomized) continue;
      AdditionSeedScore s{u.seed, 0, 0};
      for (const auto& l : row.lengths)
        if (l.n >= lo && l.n <= hi) {
          s.correct += l.correct;
          s.examples += l.examples;
        }
      if (s.examples > 0) out.push_back(s);
    }
  }
  return out;
}

double addition_spread(const std::vector<AdditionSeedScore>& s) {
  if (s.size() < 2) return 0.0;
  double lo = 1, hi = 0;
  for (const auto& x : s) {
    lo = std::min(lo, x.value());
    hi = std::max(hi, x.value());
  }
  return hi - lo;
}

void write_addition_csv(const ComparisonResult& r, const std::string& path) {
  const AdditionResult* a = result_of(r);
  std::ostringstream o;
  o << "method,row,variant,randomized,length,seeds,mean,min,max,sd\n";
  if (a)
    for (const auto& k : row_keys(r))
      for (int64_t n = 1; n <= max_length(r); ++n) {
        const Spread s = spread_of(addition_scores(*a, k.method, k.variant, k.randomized, n, n));
        if (!s.n) continue;
        o << k.method << ',' << k.row() << ',' << k.variant << ',' << (k.randomized ? 1 : 0) << ',' << n << ',' << s.n
          << ',' << num(s.mean) << ',' << num(s.min) << ',' << num(s.max) << ',' << (s.n >= 2 ? num(s.sd) : "") << '\n';
      }
  write_file_atomic(path, o.str());
}

void write_addition_seeds_csv(const ComparisonResult& r, const std::string& path) {
  const AdditionResult* a = result_of(r);
  std::ostringstream o;
  o << "method,row,variant,randomized,seed,length,examples,correct,exact_match,wilson_low,wilson_high\n";
  if (a)
    for (const auto& k : row_keys(r))
      for (const auto& u : a->units) {
        if (u.method != k.method) continue;
        for (const auto& row : u.rows) {
          if (row.variant != k.variant || row.randomized != k.randomized) continue;
          for (const auto& l : row.lengths) {
            const Proportion w = wilson_interval(l.correct, l.examples);
            o << k.method << ',' << k.row() << ',' << k.variant << ',' << (k.randomized ? 1 : 0) << ',' << u.seed << ','
              << l.n << ',' << l.examples << ',' << l.correct << ',' << num(l.exact()) << ',' << num(w.low) << ','
              << num(w.high) << '\n';
          }
        }
      }
  write_file_atomic(path, o.str());
}

// plots/addition_<variant>.png: per row, the mean exact match over seeds by operand length, with the
// min–max range over seeds as error bars; a dashed line at N.
std::vector<std::string> write_addition_plots(const ComparisonResult& r, const std::string& dir) {
  const AdditionResult* a = result_of(r);
  std::vector<std::string> drawn;
  if (!a) return drawn;
  std::filesystem::create_directories(dir);
  const std::string d = std::filesystem::absolute(dir).string();
  const AdditionSettings& s = r.config.of<AdditionSettings>();
  std::vector<std::string> names;
  for (const auto& variant : s.variants) {
    const std::string name = "addition_" + variant;
    std::ofstream dat(d + "/" + name + ".dat");
    std::string plot;
    int idx = 0;
    for (const auto& k : row_keys(r)) {
      if (k.variant != variant) continue;
      dat << "# " << k.row() << "\n";
      for (int64_t n = 1; n <= max_length(r); ++n) {
        const Spread sp = spread_of(addition_scores(*a, k.method, k.variant, k.randomized, n, n));
        if (sp.n) dat << n << " " << sp.mean << " " << sp.min << " " << sp.max << "\n";
      }
      dat << "\n\n";
      plot += std::string(plot.empty() ? "plot " : ", ") + "'" + name + ".dat' index " + std::to_string(idx++) +
              " with yerrorlines lw 2 title '" + k.row() + "'";
    }
    if (plot.empty()) continue;
    std::ofstream gp(d + "/" + name + ".gp");
    gp << markdown::gnuplot_style() << "set output '" << name << ".png'\nset xrange [0.5:" << max_length(r) + 0.5
       << "]\nset yrange [-0.03:1.03]\nset xlabel 'operand length (digits)'\nset ylabel 'exact match'\n"
       << "set arrow from " << s.length + 0.5 << ",-0.03 to " << s.length + 0.5 << ",1.03 nohead dt 2\n"
       << "set title 'Reversed addition (" << variant << "): exact match by length, mean and min-max over "
       << counted(s.seeds.size(), "seed") << " (trained on 1.." << s.length << ")'\n"
       << plot << "\n";
    names.push_back(name);
  }
  return markdown::draw(d, names);
}

std::string addition_markdown(const ComparisonResult& r, const std::string& plots_dir) {
  const AdditionResult* a = result_of(r);
  if (!a) return "";
  const AdditionSettings& s = r.config.of<AdditionSettings>();
  const TaskSettings& t = r.config.of<TaskSettings>();
  std::ostringstream md;
  md << "## Reversed addition with index hints\n\n"
     << "Zhou et al. 2024 §3: operands and sum written least-significant digit first; with index hints every "
     << "digit follows a hint token naming its place (consecutive hints from a random offset in a set of "
     << 3 * s.length + 1 << " in training, from the first at test time). Each model (the task models' sizes: "
     << counted(static_cast<size_t>(t.n_layer), "layer") << ", " << t.n_embd << " wide) trained " << s.iters
     << " steps of " << s.batch << " examples with operand lengths drawn independently in 1.." << s.length
     << "; rows `+randomized` with "
     << "randomized positions (Ruoss et al. 2023). Exact match (the whole answer, hints and end token included, "
     << "right under greedy decoding) on " << s.examples << " fixed examples per length, both operands of that "
     << "length, over " << counted(s.seeds.size(), "seed")
     << " (`--addition-seeds`): mean (min–max, sd). `addition.csv` "
     << "has every length, `addition_seeds.csv` every seed's count with Wilson's interval. A model that ignores "
     << "position can add only one-digit numbers and reads 0 beyond length 1.\n\n";
  const int64_t N = s.length;
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{1, N}, {N + 1, 2 * N}, {2 * N + 1, 3 * N}};
  for (const auto& m : r.config.methods)
    for (const auto& variant : s.variants) {
      std::vector<RowKey> keys;
      for (const auto& k : row_keys(r))
        if (k.method == m && k.variant == variant) keys.push_back(k);
      if (keys.empty()) continue;
      md << "### " << m << ", " << variant << "\n\n";
      std::vector<std::string> head = {"length"};
      for (const auto& k : keys) head.push_back(k.row());
      markdown::Table tab(head);
      auto line = [&](const std::string& label, int64_t lo, int64_t hi) {
        std::vector<std::string> row = {label};
        for (const auto& k : keys)
          row.push_back(spread_cell(spread_of(addition_scores(*a, m, variant, k.randomized, lo, hi))));
        tab.row(row);
      };
      for (int64_t n = 1; n <= 3 * N; ++n) line(std::to_string(n), n, n);
      for (const auto& [lo, hi] : ranges) line(std::to_string(lo) + ".." + std::to_string(hi) + " pooled", lo, hi);
      md << tab.markdown() << "\n";
    }
  for (const auto& variant : s.variants)
    if (std::filesystem::exists(plots_dir + "/addition_" + variant + ".png"))
      md << "![addition_" << variant << "](plots/addition_" << variant << ".png)\n\n";
  return md.str();
}

namespace {

// One-sided normal tail P(Z > z).
double upper_tail(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }

// The Agresti–Caffo variance of one seed's proportion: p̃ = (k + 1)/(n + 2), p̃(1 − p̃)/(n + 2).
double seed_variance(const AdditionSeedScore& s) {
  const double n = static_cast<double>(s.examples);
  const double p = (static_cast<double>(s.correct) + 1) / (n + 2);
  return p * (1 - p) / (n + 2);
}

// The z1 test of one row's per-seed scores beyond N (addition.h): direction +1 with the Bonferroni
// p of the largest pair's "difference above the margin", −1 with the largest pair p of "every
// difference within the margin"; two-sided p = 2 × the one-sided.
ClaimTest spread_test(const std::string& name, const std::vector<AdditionSeedScore>& s, double margin) {
  ClaimTest t;
  t.name = name;
  if (s.size() < 2) {
    t.why_not = "fewer than 2 seeds";
    return t;
  }
  double p_fragile = 1, p_robust = 0;
  size_t pairs = 0;
  for (size_t i = 0; i < s.size(); ++i)
    for (size_t j = i + 1; j < s.size(); ++j) {
      ++pairs;
      const double d = std::fabs(s[i].value() - s[j].value());
      const double se = std::sqrt(seed_variance(s[i]) + seed_variance(s[j]));
      p_fragile = std::min(p_fragile, upper_tail((d - margin) / se));
      // Within the margin: d < margin and d > −margin, two one-sided tests (the larger p).
      p_robust = std::max(p_robust, std::max(upper_tail((margin - d) / se), upper_tail((d + margin) / se)));
    }
  p_fragile = std::min(1.0, p_fragile * static_cast<double>(pairs));
  t.testable = true;
  t.direction = addition_spread(s) > margin ? +1 : -1;
  t.p = std::min(1.0, 2 * (t.direction > 0 ? p_fragile : p_robust));
  return t;
}

std::string seed_list(const std::vector<AdditionSeedScore>& s) {
  std::string o;
  for (const auto& x : s)
    o += (o.empty() ? "" : ", ") + std::to_string(x.seed) + ": " + num(x.value(), 2) + " (" +
         std::to_string(x.correct) + "/" + std::to_string(x.examples) + ")";
  return o;
}

}  // namespace

std::vector<ClaimVerdict> judge_addition_claims(const ComparisonResult& r) {
  const std::string claim =
      "Length generalisation of addition is fragile: it varies widely across random seeds (Zhou et al. 2024, "
      "abstract and §5)";
  const AdditionSettings& s = r.config.of<AdditionSettings>();
  const AdditionResult* a = result_of(r);
  if (!a) {
    Judgement j{kNotMeasured, "needs the addition study: --addition-iters > 0 (the full preset runs it)", 0};
    return {claim_from("z1", claim, "spread of exact match over seeds beyond N", "n/a", j, "")};
  }
  const int64_t N = s.length;
  const std::string metric =
      "exact match pooled over operand lengths " + std::to_string(N + 1) + ".." + std::to_string(2 * N) +
      " per seed; spread = max − min over seeds above " + num(s.spread_margin, 2) +
      " (largest pair, z test with the test examples' binomial variance, Bonferroni over pairs) or every pair "
      "within it (two one-sided tests per pair); only rows whose every seed reaches " +
      num(kAdditionLearned, 2) + " in distribution (lengths 1.." + std::to_string(N) + "); one test per row";
  const std::string budget = std::to_string(s.iters) + " steps of " + std::to_string(s.batch) + " examples x " +
                             counted(s.seeds.size(), "seed") + "; " + std::to_string(s.examples) +
                             " test examples per length";
  std::vector<ClaimVerdict> out;
  for (const auto& k : row_keys(r)) {
    const auto in = addition_scores(*a, k.method, k.variant, k.randomized, 1, N);
    const auto beyond = addition_scores(*a, k.method, k.variant, k.randomized, N + 1, 2 * N);
    if (in.empty() || beyond.empty()) continue;
    double worst_in = 1, best_beyond = 0;
    for (const auto& x : in) worst_in = std::min(worst_in, x.value());
    for (const auto& x : beyond) best_beyond = std::max(best_beyond, x.value());
    const std::string id = "z1 " + k.row() + " " + k.variant;
    const ClaimTest test = spread_test(k.row() + " " + k.variant + " spread beyond N", beyond, s.spread_margin);
    const std::string measured = "in distribution, worst seed " + num(worst_in, 3) + "; beyond N per seed " +
                                 seed_list(beyond) + "; spread " + num(addition_spread(beyond), 2) + " (p " +
                                 p_text(test.p) + ")";
    Judgement j;
    if (worst_in < kAdditionLearned) {
      j = {kInconclusive,
           k.row() + " (" + k.variant + ") did not learn addition in distribution at every seed (worst " +
               num(worst_in, 3) + " < " + num(kAdditionLearned, 2) + ")",
           0};
    } else if (best_beyond <= s.spread_margin) {
      j = {kInconclusive,
           "no seed generalises beyond N (best " + num(best_beyond, 2) + " <= the margin " + num(s.spread_margin, 2) +
               "): nothing to be fragile about",
           0};
    } else {
      std::vector<ClaimTest> tests = {test};
      j = judge_family(tests, "");
    }
    out.push_back(claim_from(id, claim, metric, measured, j, budget));
  }
  return out;
}

}  // namespace posgrad::train
