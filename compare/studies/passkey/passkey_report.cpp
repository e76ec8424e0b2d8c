// passkey_report.cpp — see passkey_report.h.
#include "compare/studies/passkey/passkey_report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <type_traits>

#include "compare/markdown.h"
#include "compare/rows.h"
#include "compare/stats.h"
#include "compare/studies/lm/lm.h"
#include "compare/studies/pi/pi_protocol.h"
#include "compare/studies/study_claims.h"
#include "data/fileio.h"

namespace posgrad::train {

namespace fs = std::filesystem;

namespace {

using markdown::num;

const PasskeyResult* find_row(const UnitResult& u, const std::string& row) {
  auto it = u.parts.value<PasskeyRows>().rows.find(row);
  return it == u.parts.value<PasskeyRows>().rows.end() ? nullptr : &it->second;
}

// The unit of each seed (in configuration order) that has `row`.
template <typename F>
void for_each_seed(const ComparisonResult& r, const std::string& row, F f) {
  for (uint64_t seed : r.config.seeds)
    for (const auto& u : r.units)
      if (u.seed == seed)
        if (const PasskeyResult* p = find_row(u, row)) {
          if constexpr (std::is_invocable_v<F, uint64_t, const PasskeyResult&>)
            f(seed, *p);
          else
            f(*p);
        }
}

// Per seed of `row`: the accuracy over the cells `take` accepts that have one (their mean, each cell
// `examples` examples: the count of all of them), with the examples it rests on (the cells x the
// fewest examples of one). Seeds without such a cell are left out.
template <typename Take>
std::map<uint64_t, Scored> passkey_scored(const ComparisonResult& r, const std::string& row, Take take) {
  std::map<uint64_t, Scored> out;
  for_each_seed(r, row, [&](uint64_t seed, const PasskeyResult& p) {
    double sum = 0;
    int64_t cells = 0, fewest = 0;
    for (const auto& c : p.grid.cells)
      if (take(c) && c.accuracy) {
        sum += *c.accuracy;
        fewest = cells == 0 ? c.examples : std::min(fewest, c.examples);
        ++cells;
      }
    if (cells) out[seed] = Scored{sum / static_cast<double>(cells), cells * fewest};
  });
  return out;
}
std::map<uint64_t, Scored> scored_at(const ComparisonResult& r, const std::string& row, int64_t multiplier) {
  return passkey_scored(r, row, [&](const PasskeyCell& c) { return c.multiplier == multiplier; });
}
std::map<uint64_t, Scored> scored_beyond(const ComparisonResult& r, const std::string& row) {
  return passkey_scored(r, row, [](const PasskeyCell& c) { return c.multiplier > 1; });
}

double scored_mean(const std::map<uint64_t, Scored>& v) {
  double s = 0;
  for (const auto& [seed, x] : v) s += x.value;
  return v.empty() ? NAN : s / static_cast<double>(v.size());
}

double clip01(double x) { return std::isnan(x) ? x : std::clamp(x, 0.0, 1.0); }

// A table cell of accuracies over seeds: mean ± std [seed interval clipped to [0, 1]]; one seed: its
// count with Wilson's interval.
std::string accuracy_cell(const std::vector<double>& v, const std::map<uint64_t, Scored>& one) {
  if (v.size() == 1 && one.size() == 1) return wilson_text(one.begin()->second, 2);
  return markdown::bounded_cell(summarize(v), 2, 0.0, 1.0);
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? NAN : s / static_cast<double>(v.size());
}

std::string depth_text(double d) { return opt::format(opt::Value(d)); }

std::string file_name(const std::string& row) {
  std::string f = row;
  for (auto& c : f)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '_') c = '_';
  return "passkey_" + f;
}

// How the models met passkey examples before scoring: "pretrained with 25% of its batches' rows ...",
// "fine-tuned for 150 steps of 16 examples ...", or both.
// 100 F as a percentage ("25", "12.5"), six significant digits.
std::string percent(double fraction) {
  std::ostringstream o;
  o << 100 * fraction;
  return o.str();
}

std::string training_text(const ComparisonResult& r) {
  const PasskeyConfig& c = r.config.of<PasskeyConfig>();
  std::string out;
  if (c.pretrain_fraction > 0)
    out = "pretrained with " + percent(c.pretrain_fraction) +
          "% of its batches' rows passkey examples at its training length instead of corpus windows (depth uniform "
          "per example, the whole row's next-token loss)";
  if (c.iters > 0)
    out += (out.empty() ? "" : ", then ") + std::string("fine-tuned for ") + std::to_string(c.iters) + " steps of " +
           std::to_string(c.batch) +
           " examples at its training length (depth uniform per example, loss on the key only)";
  else
    out += ", not fine-tuned after";
  return out;
}

std::string chance_text(const ComparisonResult& r) {
  std::string alphabet;
  for (const auto& u : r.units)
    for (const auto& [row, p] : u.parts.value<PasskeyRows>().rows) alphabet = p.grid.alphabet;
  const double size = alphabet == "digits" ? 10 : 26;
  return alphabet + ", chance " + num(std::pow(size, -static_cast<double>(r.config.of<PasskeyConfig>().key_length)), 8);
}

}  // namespace

std::vector<std::string> passkey_rows(const ComparisonResult& r) {
  std::vector<std::string> out;
  auto present = [&](const std::string& row) {
    for (const auto& u : r.units)
      if (u.parts.value<PasskeyRows>().rows.count(row)) return true;
    return false;
  };
  for (const auto& m : r.config.methods) {
    if (present(m)) out.push_back(m);
    if (takes_rope_scaling(m))
      for (const char* s : {"+linear", "+dynamic", "+yarn"})
        if (const std::string row = Row{m, s}.name(); present(row)) out.push_back(row);
  }
  // The position-interpolation protocol's fine-tuned rows ("rope+linear ft2x", compare/studies/pi/pi_protocol.h),
  // in the order the protocol ran them.
  for (const auto& u : r.units)
    for (const auto& p : u.parts.value<PiResults>().rows)
      if (const std::string row = pi_row_name(u.method, p.scaling, p.multiplier);
          present(row) && std::find(out.begin(), out.end(), row) == out.end())
        out.push_back(row);
  return out;
}

std::vector<double> passkey_values(const ComparisonResult& r, const std::string& row, int64_t multiplier,
                                   double depth) {
  std::vector<double> v;
  for_each_seed(r, row, [&](const PasskeyResult& p) {
    const PasskeyCell* c = p.grid.find(multiplier, depth);
    if (c && c->accuracy) v.push_back(*c->accuracy);
  });
  return v;
}

std::vector<double> passkey_depth_mean_values(const ComparisonResult& r, const std::string& row, int64_t multiplier) {
  std::vector<double> v;
  for_each_seed(r, row, [&](const PasskeyResult& p) {
    std::vector<double> d;
    for (const auto& c : p.grid.cells)
      if (c.multiplier == multiplier && c.accuracy) d.push_back(*c.accuracy);
    if (!d.empty()) v.push_back(mean_of(d));
  });
  return v;
}

std::vector<double> passkey_beyond_values(const ComparisonResult& r, const std::string& row) {
  std::vector<double> v;
  for_each_seed(r, row, [&](const PasskeyResult& p) {
    std::vector<double> d;
    for (const auto& c : p.grid.cells)
      if (c.multiplier > 1 && c.accuracy) d.push_back(*c.accuracy);
    if (!d.empty()) v.push_back(mean_of(d));
  });
  return v;
}

void write_passkey_csv(const ComparisonResult& r, const std::string& path) {
  std::ostringstream o;
  o << "row,multiplier,depth,n,mean,std,ci_low,ci_high\n";
  auto line = [&](const std::string& row, int64_t m, const std::string& depth, const Summary& s) {
    o << row << "," << m << "," << depth << "," << s.n << ",";
    if (s.n == 0)
      o << "n/a,n/a,n/a,n/a\n";
    else if (!s.has_interval())
      o << num(s.mean, 6) << "," << num(s.std, 6) << ",n/a,n/a\n";
    else
      o << num(s.mean, 6) << "," << num(s.std, 6) << "," << num(clip01(s.ci_low), 6) << "," << num(clip01(s.ci_high), 6)
        << "\n";
  };
  const PasskeyConfig& c = r.config.of<PasskeyConfig>();
  for (const auto& row : passkey_rows(r))
    for (int64_t m : c.multipliers) {
      for (double d : c.depths) line(row, m, depth_text(d), summarize(passkey_values(r, row, m, d)));
      line(row, m, "mean", summarize(passkey_depth_mean_values(r, row, m)));
    }
  write_file_atomic(path, o.str());
}

void write_passkey_seeds_csv(const ComparisonResult& r, const std::string& path) {
  std::ostringstream o;
  o << "row,seed,multiplier,depth,examples,accuracy,correct,wilson_low,wilson_high\n";
  auto line = [&](const std::string& row, uint64_t seed, int64_t m, const std::string& depth, const Scored& x) {
    const auto w = wilson_of(x);
    o << row << "," << seed << "," << m << "," << depth << "," << x.examples << "," << num(x.value, 6) << ","
      << (w ? std::to_string(std::llround(x.value * static_cast<double>(x.examples))) : "n/a") << ","
      << (w ? num(w->low, 6) : "n/a") << "," << (w ? num(w->high, 6) : "n/a") << "\n";
  };
  const PasskeyConfig& c = r.config.of<PasskeyConfig>();
  for (const auto& row : passkey_rows(r))
    for (int64_t m : c.multipliers) {
      for (double d : c.depths)
        for (const auto& [seed, x] :
             passkey_scored(r, row, [&](const PasskeyCell& cell) { return cell.multiplier == m && cell.depth == d; }))
          line(row, seed, m, depth_text(d), x);
      for (const auto& [seed, x] : scored_at(r, row, m)) line(row, seed, m, "mean", x);
    }
  write_file_atomic(path, o.str());
}

std::vector<std::string> write_passkey_plots(const ComparisonResult& r, const std::string& dir) {
  std::vector<std::string> drawn;
  if (fs::exists(dir))  // a stale heat map must not stand for these results
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("passkey_", 0) == 0 && e.path().extension() == ".png") fs::remove(e.path());
    }
  const auto rows = passkey_rows(r);
  if (rows.empty()) return drawn;
  fs::create_directories(dir);
  const std::string d = fs::absolute(dir).string();
  const PasskeyConfig& c = r.config.of<PasskeyConfig>();
  for (const auto& row : rows) {
    const std::string name = file_name(row), base = d + "/" + name;
    {
      std::ofstream dat(base + ".dat");
      for (size_t j = 0; j < c.depths.size(); ++j) {
        for (size_t i = 0; i < c.multipliers.size(); ++i) {
          const Summary s = summarize(passkey_values(r, row, c.multipliers[i], c.depths[j]));
          dat << i << " " << j << " " << (s.n ? num(s.mean, 4) : "NaN") << " " << (s.n ? num(s.mean, 2) : "n/a")
              << "\n";
        }
        dat << "\n";
      }
    }
    std::ostringstream gp;
    gp << markdown::gnuplot_style(760, 520, 10) << "unset grid\nset output '" << name << ".png'\n"
       << "set title \"Passkey accuracy, " << row << " (mean over " << r.config.seeds.size() << " seeds; " << c.examples
       << " examples per cell)\"\nset xlabel 'length (x training length " << r.config.base.model.block_size
       << ")'\nset ylabel 'needle depth'\nset cbrange [0:1]\nset palette defined (0 '#b2182b', 0.5 '#f7f7f7', 1 "
          "'#2166ac')\n"
       << "set xrange [-0.5:" << static_cast<double>(c.multipliers.size()) - 0.5
       << "]\nset yrange [-0.5:" << static_cast<double>(c.depths.size()) - 0.5 << "]\nset xtics (";
    for (size_t i = 0; i < c.multipliers.size(); ++i) gp << (i ? ", " : "") << "'" << c.multipliers[i] << "x' " << i;
    gp << ")\nset ytics (";
    for (size_t j = 0; j < c.depths.size(); ++j) gp << (j ? ", " : "") << "'" << depth_text(c.depths[j]) << "' " << j;
    gp << ")\nplot '" << name << ".dat' using 1:2:3 with image notitle, '' using 1:2:4 with labels notitle\n";
    {
      std::ofstream f(base + ".gp");
      f << gp.str();
    }
    if (markdown::run_gnuplot(d, name + ".gp") && fs::exists(base + ".png")) drawn.push_back(row);
  }
  return drawn;
}

std::string passkey_markdown(const ComparisonResult& r, const std::string& plots_dir) {
  const auto rows = passkey_rows(r);
  if (rows.empty()) return "";
  const PasskeyConfig& c = r.config.of<PasskeyConfig>();
  std::ostringstream md;
  md << "## Passkey retrieval\n\n"
     << "The test of Mohtashami & Jaggi 2023 (\"Landmark Attention\", §4.2), also used by Chen et al. 2023 "
     << "(\"Position Interpolation\", §3.3) and Peng et al. 2023 (\"YaRN\"): a key of " << c.key_length << " symbols ("
     << chance_text(r) << " per example) is hidden in validation text at a needle depth (the fraction of the filler "
     << "before it), and the question at the end asks for it (template '" << c.template_name << "'). Each "
     << "trained language model is " << training_text(r) << ", then scored on " << c.examples
     << " fixed examples per (length, depth) cell, the same for every row and seed: an example counts when every key "
     << "symbol is the argmax given the true prefix (= greedy decoding of the key). rope+<scaling> rows are the "
     << (c.iters > 0 ? "fine-tuned " : "")
     << "RoPE model with that evaluation-time scaling (linear and YaRN at s = the length multiplier, "
        "dynamic "
     << "NTK growing its base with the length). n/a: beyond a learned table or the validation text. Cells: accuracy, "
     << "mean over the depths (one model: its count of the " << c.examples
     << " x depths examples), then mean ± std [95% "
     << "interval] over " << r.config.seeds.size() << " seed" << (r.config.seeds.size() == 1 ? "" : "s")
     << ", the interval clipped to [0, 1]: the seeds' spread alone, since every seed is scored on the same examples. "
     << "With one seed a cell is that model's count with Wilson's 95% interval (the examples' noise alone); with more, "
     << "a folded table gives each seed's. Claims pk1 and pk2 combine both noises (their protocol).\n\n";
  std::vector<std::string> header = {"row"};
  for (int64_t m : c.multipliers) header.push_back(std::to_string(m) + "x" + (m == 1 ? " (train)" : ""));
  markdown::Table t(header);
  for (const auto& row : rows) {
    std::vector<std::string> cells = {row};
    for (int64_t m : c.multipliers)
      cells.push_back(accuracy_cell(passkey_depth_mean_values(r, row, m), scored_at(r, row, m)));
    t.row(cells);
  }
  md << t.markdown() << "\n";
  if (r.config.seeds.size() > 1) {
    std::vector<std::string> h = {"row", "seed"};
    h.insert(h.end(), header.begin() + 1, header.end());
    markdown::Table per_seed(h);
    for (const auto& row : rows)
      for (uint64_t seed : r.config.seeds) {
        std::vector<std::string> cells = {row, std::to_string(seed)};
        bool any = false;
        for (int64_t m : c.multipliers) {
          const auto v = scored_at(r, row, m);
          const auto it = v.find(seed);
          any = any || it != v.end();
          cells.push_back(it == v.end() ? "n/a" : wilson_text(it->second, 2));
        }
        if (any) per_seed.row(cells);
      }
    md << "<details><summary>accuracy of each model (seed), mean over the depths, with Wilson's 95% interval of its "
       << "count</summary>\n\n"
       << per_seed.markdown() << "\n</details>\n\n";
  }
  for (const auto& row : rows)
    if (fs::exists(fs::path(plots_dir) / (file_name(row) + ".png")))
      md << "![" << file_name(row) << "](plots/" << file_name(row) << ".png)\n\n";
  return md.str();
}

namespace {

// The margins of the claims: the least change of accuracy they claim.
constexpr double kLostDrop = 0.10;     // pk1: "is lost beyond it"
constexpr double kScalingGain = 0.05;  // pk2: "retrieves where plain RoPE does not"
// Both claims are about models that retrieve at the training length: a method is judged when its
// mean accuracy at 1x over the seeds reaches this (pk1: each method; pk2: rope). A model that never
// learnt the task can lose nothing beyond 1x, and a scaling of it can recover nothing.
constexpr double kRetrieves = 0.5;
const char* const kPk1 =
    "Passkey retrieval learned at the training length is lost beyond it without context extension: "
    "direct extrapolation extends the effective window only marginally (Chen et al. 2023 §3.3, Table "
    "4; Mohtashami & Jaggi 2023 §4.2)";
const char* const kPk2 =
    "Scaling RoPE for the longer context (position interpolation, dynamic NTK, YaRN) retrieves the "
    "passkey beyond the training length where plain RoPE does not (Chen et al. 2023 §3.3; Peng et al. "
    "2023 §4)";

std::string passkey_budget(const ComparisonResult& r) {
  const PasskeyConfig& c = r.config.of<PasskeyConfig>();
  const std::string mixed =
      c.pretrain_fraction > 0 ? " (" + percent(c.pretrain_fraction) + "% of its rows passkey examples)" : "";
  const std::string tuned = c.iters > 0 ? std::to_string(c.iters) + " passkey fine-tuning steps of " +
                                              std::to_string(c.batch) + " examples of " +
                                              std::to_string(r.config.base.model.block_size) + " tokens after "
                                        : "";
  std::string only;
  if (!(c.methods.size() == 1 && c.methods.front() == "all")) {
    for (const auto& m : c.methods) only += (only.empty() ? "" : ", ") + m;
    only = "; the test runs for " + only + " only (--passkey-methods)";
  }
  return tuned + training_budget(r) + mixed + "; " + std::to_string(c.examples) +
         " test examples per (length, depth) cell" + only;
}

std::string passkey_protocol(const ComparisonResult& r) {
  const PasskeyConfig& c = r.config.of<PasskeyConfig>();
  std::string beyond;
  for (int64_t m : c.multipliers)
    if (m > 1) beyond += (beyond.empty() ? "" : ", ") + std::to_string(m) + "x";
  if (beyond.empty()) return "";
  return "whole-key accuracy (teacher-forced argmax = greedy decoding), " + std::to_string(c.depths.size()) +
         " depths; 1x against the mean over " + beyond +
         " (cells n/a left out), the same examples for every row and "
         "seed; intervals: the seeds' noise and a bound on the test examples' (study_claims.h)";
}

// Every method that retrieves at 1x must lose at least kLostDrop beyond it.
ClaimVerdict claim_pk1(const ComparisonResult& r) {
  std::vector<ClaimTest> tests;
  std::string measured, unlearned, no_beyond;
  for (const auto& m : r.config.methods) {
    const auto in = scored_at(r, m, 1), ood = scored_beyond(r, m);
    if (in.empty()) continue;
    if (ood.empty()) {
      no_beyond += (no_beyond.empty() ? "" : ", ") + m;
      continue;
    }
    if (scored_mean(in) < kRetrieves) {
      unlearned += (unlearned.empty() ? "" : ", ") + m + " " + num(scored_mean(in), 2);
      continue;
    }
    const MarginTest t = margin_test(m + " drops by more than " + num(kLostDrop, 2), in, ood, false, kLostDrop);
    measured += (measured.empty() ? "" : "; ") + m + " drop " + margin_text(t);
    tests.push_back(t.test);
  }
  if (!unlearned.empty())
    measured += (measured.empty() ? "" : "; ") +
                ("not retrieving at 1x (< " + num(kRetrieves, 1) + ", left out): " + unlearned);
  if (!no_beyond.empty()) measured += (measured.empty() ? "" : "; ") + ("n/a beyond 1x: " + no_beyond);
  Judgement j;
  if (!tests.empty())
    j = judge_family(tests, "");
  else if (!unlearned.empty())
    j = {kInconclusive,
         "no method retrieves at the training length (mean accuracy ≥ 0.5) at this budget: nothing can be lost beyond "
         "it",
         0};
  else
    j = judge_family(tests, passkey_protocol(r).empty() ? "a --passkey-multipliers value above 1"
                                                        : "a method that runs beyond its training length (every cell "
                                                          "beyond 1x is n/a)");
  return claim_from(
      "pk1", kPk1,
      "passkey accuracy (mean over depths), 1x − the mean over the longer lengths, paired by seed (the same "
      "model), one test per method that retrieves at 1x (≥ " +
          num(kRetrieves, 1) + "); margin: a drop of at least " + num(kLostDrop, 2),
      measured.empty() ? "n/a" : measured, j, passkey_budget(r), passkey_protocol(r));
}

// Every evaluation-time scaling of RoPE must beat plain RoPE beyond 1x by at least kScalingGain.
ClaimVerdict claim_pk2(const ComparisonResult& r) {
  const std::string paper_method = "rope";  // the papers' claim is about RoPE
  const auto base = scored_beyond(r, paper_method);
  std::vector<ClaimTest> tests;
  std::string measured;
  for (const char* v : {"+linear", "+dynamic", "+yarn"}) {
    const std::string row = Row{paper_method, v}.name();
    const auto a = scored_beyond(r, row);
    if (a.empty() || base.empty()) continue;
    const MarginTest t =
        margin_test(row + " above rope by more than " + num(kScalingGain, 2), a, base, true, kScalingGain);
    measured += (measured.empty() ? "" : "; ") + row + " − rope " + margin_text(t);
    tests.push_back(t.test);
  }
  const std::string missing = !has_method(r, paper_method) ? "rope in --methods"
                              : base.empty() ? "rope evaluated beyond 1x (a --passkey-multipliers value above 1)"
                                             : "the rope+linear, rope+dynamic or rope+yarn rows";
  Judgement j = judge_family(tests, tests.empty() ? missing : "");
  const auto in = scored_at(r, paper_method, 1);
  if (!tests.empty() && scored_mean(in) < kRetrieves) {  // judged only on a rope that retrieves in distribution
    measured = "not retrieving at 1x: rope " + num(scored_mean(in), 2) + " (< " + num(kRetrieves, 1) + "); " + measured;
    j = {kInconclusive,
         "rope does not retrieve the passkey at its training length (mean accuracy < " + num(kRetrieves, 1) +
             ") at this budget: a scaling of a model that never retrieves has nothing to extend",
         0};
  }
  return claim_from(
      "pk2", kPk2,
      "passkey accuracy, mean over the lengths > 1x and the depths, rope+<scaling> − rope, paired by seed (the "
      "same model, the same examples; no fine-tuning at the longer lengths), one test per scaling, judged when "
      "rope retrieves at 1x (≥ " +
          num(kRetrieves, 1) + "); margin: a gain of at least " + num(kScalingGain, 2),
      measured.empty() ? "n/a" : measured, j, passkey_budget(r), passkey_protocol(r));
}

}  // namespace

std::vector<ClaimVerdict> judge_passkey_claims(const ComparisonResult& r) {
  if (passkey_rows(r).empty()) return {};
  return {claim_pk1(r), claim_pk2(r)};
}

}  // namespace posgrad::train
