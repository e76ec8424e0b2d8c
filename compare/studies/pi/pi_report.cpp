// pi_report.cpp — see pi_report.h.
#include "compare/studies/pi/pi_report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "compare/markdown.h"
#include "compare/rows.h"
#include "compare/stats.h"
#include "compare/studies/lm/lm.h"
#include "compare/studies/pi/pi_protocol.h"
#include "compare/studies/study_claims.h"
#include "data/fileio.h"
#include "tensor/option_table.h"

namespace posgrad::train {

namespace fs = std::filesystem;

namespace {

using markdown::num;

const PiResult* find_row(const UnitResult& u, const std::string& row) {
  for (const auto& p : u.parts.value<PiResults>().rows)
    if (pi_row_name(u.method, p.scaling, p.multiplier) == row) return &p;
  return nullptr;
}

// Whether unit u is one of the models the row `row` ("rope+linear ft2x", `rope`) was derived from.
bool of_row(const UnitResult& u, const std::string& row) { return u.method == Row::parse(row).method; }

std::optional<size_t> eval_index(const CompareConfig& c, int64_t m) {
  const auto it = std::find(c.eval_multipliers.begin(), c.eval_multipliers.end(), m);
  if (it == c.eval_multipliers.end()) return std::nullopt;
  return static_cast<size_t>(it - c.eval_multipliers.begin());
}

bool is_tuned(const ComparisonResult& r, const std::string& row) {
  const auto t = pi_rows(r);
  return std::find(t.begin(), t.end(), row) != t.end();
}

// The per-seed value of a fine-tuned row at evaluation multiplier m (nullopt where n/a).
std::optional<double> tuned_value(const ComparisonResult& r, const UnitResult& u, const std::string& row, int64_t m,
                                  Quantity q) {
  const PiResult* p = find_row(u, row);
  const auto i = eval_index(r.config, m);
  if (!p || !i || *i >= p->lengths.size() || !p->lengths[*i]) return std::nullopt;
  return q == Quantity::Loss ? p->lengths[*i]->loss : p->lengths[*i]->perplexity;
}

const PiResult* first_result(const ComparisonResult& r, const std::string& row) {
  for (const auto& u : r.units)
    if (of_row(u, row))
      if (const PiResult* p = find_row(u, row)) return p;
  return nullptr;
}

std::string interval(const Summary& s, int prec) {
  if (s.n == 0) return "n/a";
  if (!s.has_interval()) return num(s.mean, prec) + " (1 seed)";
  return num(s.mean, prec) + " [" + num(s.ci_low, prec) + ", " + num(s.ci_high, prec) + "]";
}

}  // namespace

std::vector<std::string> pi_rows(const ComparisonResult& r) {
  std::vector<std::string> out;
  for (const auto& u : r.units)
    for (const auto& p : u.parts.value<PiResults>().rows) {
      const std::string name = pi_row_name(u.method, p.scaling, p.multiplier);
      if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
    }
  // Configuration order (method, M, then scaling), whatever order the units were read in.
  std::vector<std::string> ordered;
  for (const auto& method : rope_scaling_methods(r.config)) {
    for (int64_t M : r.config.of<PiSettings>().multipliers)
      for (const auto& s : r.config.of<PiSettings>().scalings) {
        const std::string name = pi_row_name(method, s, M);
        if (std::find(out.begin(), out.end(), name) != out.end()) ordered.push_back(name);
      }
    const std::string drope = pi_row_name(method, "drope", 1);
    if (std::find(out.begin(), out.end(), drope) != out.end()) ordered.push_back(drope);
  }
  return ordered;
}

std::vector<std::string> pi_untuned_rows(const ComparisonResult& r) {
  std::vector<std::string> out;
  const auto all = rows(r);
  for (const auto& method : rope_scaling_methods(r.config))
    for (const std::string variant : {"", "+linear", "+yarn", "+dynamic"})
      if (const std::string row = Row{method, variant}.name(); std::find(all.begin(), all.end(), row) != all.end())
        out.push_back(row);
  return out;
}

std::vector<double> pi_values(const ComparisonResult& r, const std::string& row, int64_t m, Quantity q) {
  if (!is_tuned(r, row)) return values(r, row, lm_metric(q, m));
  std::vector<double> v;
  for (uint64_t seed : r.config.seeds)
    for (const auto& u : r.units)
      if (of_row(u, row) && u.seed == seed)
        if (auto x = tuned_value(r, u, row, m, q)) v.push_back(*x);
  return v;
}

std::vector<double> pi_paired_differences(const ComparisonResult& r, const std::string& a, const std::string& b,
                                          int64_t m) {
  std::vector<double> d;
  for (uint64_t seed : r.config.seeds)
    for (const auto& u : r.units)
      if (of_row(u, a) && u.seed == seed) {
        const auto x = tuned_value(r, u, a, m, Quantity::Perplexity), y = tuned_value(r, u, b, m, Quantity::Perplexity);
        if (x && y) d.push_back(*x - *y);
      }
  return d;
}

void write_pi_csv(const ComparisonResult& r, const std::string& path) {
  std::ostringstream o;
  o << "row,fine_tuned_at,scaling,eval_multiplier,context,metric,n,mean,std,ci_low,ci_high\n";
  const auto tuned = pi_rows(r);
  if (!tuned.empty()) {
    const int64_t block = r.config.base.model.block_size;
    auto emit = [&](const std::string& row, int64_t at, const std::string& scaling) {
      for (int64_t m : r.config.eval_multipliers)
        for (Quantity q : {Quantity::Perplexity, Quantity::Loss}) {
          const Summary s = summarize(pi_values(r, row, m, q));
          if (!s.n) continue;
          o << row << "," << at << "," << scaling << "," << m << "," << m * block << ","
            << (q == Quantity::Loss ? "loss" : "perplexity") << "," << s.n << "," << num(s.mean, 6) << ","
            << num(s.std, 6) << ",";
          if (s.has_interval())
            o << num(s.ci_low, 6) << "," << num(s.ci_high, 6) << "\n";
          else
            o << "n/a,n/a\n";
        }
    };
    for (const auto& row : pi_untuned_rows(r)) {
      const std::string variant = Row::parse(row).variant;  // "" or "+<scaling>"
      emit(row, 0, variant.empty() ? "none" : variant.substr(1));
    }
    for (const auto& row : tuned) {
      const PiResult* p = first_result(r, row);
      emit(row, p->multiplier, p->scaling);
    }
  }
  write_file_atomic(path, o.str());
}

bool write_pi_plot(const ComparisonResult& r, const std::string& dir) {
  const auto tuned = pi_rows(r);
  if (tuned.empty()) return false;
  fs::create_directories(dir);
  const std::string d = fs::absolute(dir).string();
  const CompareConfig& c = r.config;
  const int64_t block = c.base.model.block_size;
  std::vector<int64_t> Ms;  // the fine-tuning lengths present: one panel each (DroPE's rows, at 1x, in every panel)
  for (const auto& row : tuned) {
    const PiResult* p = first_result(r, row);
    if (p->scaling != "drope" && std::find(Ms.begin(), Ms.end(), p->multiplier) == Ms.end())
      Ms.push_back(p->multiplier);
  }
  if (Ms.empty()) Ms.push_back(1);
  const int cols = static_cast<int>(Ms.size());
  std::ofstream dat(d + "/pi_ppl_vs_length.dat");
  std::ostringstream gp;
  gp << markdown::gnuplot_style(std::max(900, 560 * cols), 480, 9)
     << "set output 'pi_ppl_vs_length.png'\nset logscale x 2\nset logscale y\nset key top left font ',8'\n"
     << "set multiplot layout 1," << cols << " title \"Perplexity vs length: RoPE scaled and fine-tuned at M x "
     << block << " tokens (solid) and untuned (dashed)\\n(mean and 95% interval over " << c.seeds.size()
     << " seeds)\"\n";
  int idx = 0;
  auto series = [&](const std::string& row, const std::string& style, std::string& plot) {
    dat << "# " << row << "\n";
    int points = 0;
    for (int64_t m : c.eval_multipliers) {
      const Summary s = summarize(pi_values(r, row, m));
      if (!s.n) continue;
      ++points;
      dat << m * block << " " << s.mean << " " << (s.has_interval() ? s.ci_low : s.mean) << " "
          << (s.has_interval() ? s.ci_high : s.mean) << "\n";
    }
    dat << "\n\n";
    if (points)
      plot += std::string(plot.size() > 5 ? ", " : "") + "'pi_ppl_vs_length.dat' index " + std::to_string(idx) +
              " with yerrorlines " + style + " title '" + row + "'";
    ++idx;
  };
  for (int64_t M : Ms) {
    std::string plot = "plot ";
    for (const auto& row : pi_untuned_rows(r)) series(row, "dt 2 lw 1", plot);
    for (const auto& row : tuned) {
      const PiResult* p = first_result(r, row);
      if (p->scaling == "drope")
        series(row, "lw 2 dt 4", plot);
      else if (p->multiplier == M)
        series(row, "lw 2", plot);
    }
    gp << "set title 'fine-tuned at " << M << "x (" << M * block << " tokens; dotted)'\n"
       << "set xlabel 'evaluation length (tokens); training length " << block
       << "'\nset ylabel 'validation perplexity'\n"
       << "set arrow from " << M * block << ",graph 0 to " << M * block << ",graph 1 nohead dt 3\n";
    if (plot.size() > 5) gp << plot << "\n";
    gp << "unset arrow\n";
  }
  gp << "unset multiplot\n";
  dat.close();
  {
    std::ofstream f(d + "/pi_ppl_vs_length.gp");
    f << gp.str();
  }
  return markdown::run_gnuplot(d, "pi_ppl_vs_length.gp") && fs::exists(d + "/pi_ppl_vs_length.png");
}

std::string pi_markdown(const ComparisonResult& r, bool plot_drawn) {
  const auto tuned = pi_rows(r);
  if (tuned.empty()) return "";
  const CompareConfig& c = r.config;
  const int64_t block = c.base.model.block_size;
  std::ostringstream md;
  md << "## Position interpolation: RoPE scaled and fine-tuned\n\n"
     << "The protocol of Chen et al. 2023 (\"Extending Context Window of Large Language Models via Positional "
     << "Interpolation\", §2.3, §3): each trained `rope` model is copied with a scaling at factor s = M, its context "
     << "extended to M × " << block << " tokens, and fine-tuned there for " << c.of<PiSettings>().iters
     << " steps (AdamW, lr " << num(c.of<PiSettings>().lr, 6) << " after a linear warm-up of "
     << std::max<int64_t>(1, c.of<PiSettings>().iters / 10) << " steps, then constant; max(1, " << c.base.batch_size
     << " / M) windows of M × " << block
     << " training tokens per step), then evaluated like every other row. `rope ftMx` is plain RoPE fine-tuned at M× "
     << "(no interpolation), `rope+linear ftMx` position interpolation, `rope+ntk ftMx` static NTK-aware scaling "
     << "(base b·s^(d/(d−2)), bloc97 2023; YaRN §3.1), `rope+yarn ftMx` YaRN (Peng et al. 2023). At one seed every "
     << "fine-tuned row starts from the same trained model and sees the same batches. The untuned rows (scaled at "
     << "evaluation time only, no fine-tuning) are shown for reference. Perplexity, mean ± std [95% interval] over "
     << c.seeds.size() << " seeds.\n\n";
  if (c.of<PiSettings>().drope)
    md << "`rope+drope ft1x` is DroPE (Gelberg & Cetin 2026): the same trained model with its rotary embedding dropped "
       << "(the NoPE encoding, the same weights) and recalibrated at the training length " << block << " for the same "
       << c.of<PiSettings>().iters << " steps of " << c.base.batch_size << " windows (" << c.of<PiSettings>().iters
       << " / " << c.base.max_iters << " = "
       << num(100.0 * static_cast<double>(c.of<PiSettings>().iters) /
                  static_cast<double>(std::max<int64_t>(1, c.base.max_iters)),
              1)
       << "% of the training steps; the paper's budget is under 1%), then evaluated zero-shot at every length; in the "
       << "plot, dash-dotted in every panel.\n\n";
  std::string left_out;
  for (const auto& m : rope_scaling_methods(c))
    if (const std::string why = pi_refusal(c, m); !why.empty()) left_out += "- " + m + ": " + why + "\n";
  if (!left_out.empty()) md << "Left out of the protocol:\n\n" << left_out << "\n";
  std::vector<std::string> header = {"row", "fine-tuned at", "last fine-tuning loss"};
  for (int64_t m : c.eval_multipliers) header.push_back(std::to_string(m * block) + " (" + std::to_string(m) + "x)");
  markdown::Table t(header);
  for (const auto& row : pi_untuned_rows(r)) {
    std::vector<std::string> cells = {row, "—", "—"};
    for (int64_t m : c.eval_multipliers) cells.push_back(markdown::cell(summarize(pi_values(r, row, m)), 3));
    t.row(cells);
  }
  for (const auto& row : tuned) {
    std::vector<double> last;
    for (uint64_t seed : c.seeds)
      for (const auto& u : r.units)
        if (of_row(u, row) && u.seed == seed)
          if (const PiResult* p = find_row(u, row)) last.push_back(p->final_loss);
    const int64_t M = first_result(r, row)->multiplier;
    std::vector<std::string> cells = {row, std::to_string(M * block), markdown::cell(summarize(last), 4)};
    for (int64_t m : c.eval_multipliers) cells.push_back(markdown::cell(summarize(pi_values(r, row, m)), 3));
    t.row(cells);
  }
  md << t.markdown() << "\n";
  // Paired differences at the fine-tuning length against plain RoPE fine-tuned the same way.
  markdown::Table d({"at", "row − rope ftMx (perplexity at M×)", "mean [95% interval]", "seeds"});
  int pairs = 0;
  for (const auto& row : tuned) {
    const PiResult* p = first_result(r, row);
    const std::string plain = pi_row_name(Row::parse(row).method, "none", p->multiplier);
    if (p->scaling == "none" || !is_tuned(r, plain)) continue;
    const Summary s = summarize(pi_paired_differences(r, row, plain, p->multiplier));
    d.row({std::to_string(p->multiplier * block), row + " − " + plain, interval(s, 3), std::to_string(s.n)});
    ++pairs;
  }
  if (pairs)
    md << "Per-seed differences at the fine-tuning length (negative: the scaling helps):\n\n" << d.markdown() << "\n";
  if (plot_drawn) md << "![pi_ppl_vs_length](plots/pi_ppl_vs_length.png)\n\n";
  return md.str();
}

namespace {

// The papers' claims are about RoPE: the method they are judged on.
const char* const kPaperMethod = "rope";

// "40 fine-tuning steps of 6 windows of 128 tokens at 2x, 3 of 256 at 4x (lr 0.0001), from models of 650
// steps of 12x64 tokens x 3 seeds": what each per-seed value of a fine-tuned row cost, from its results.
std::string pi_budget(const ComparisonResult& r) {
  const int64_t block = r.config.base.model.block_size;
  std::string per_m;
  int64_t iters = r.config.of<PiSettings>().iters;
  for (int64_t M : r.config.of<PiSettings>().multipliers) {
    const PiResult* p = nullptr;  // every scaling at M has the same budget
    for (const auto& scaling : r.config.of<PiSettings>().scalings)
      if (!p) p = first_result(r, pi_row_name(kPaperMethod, scaling, M));
    if (!p) continue;
    iters = p->iters;
    per_m += (per_m.empty() ? "" : ", ") + std::to_string(p->batch * r.config.base.grad_accum) +
             (per_m.empty() ? " windows of " : " of ") + std::to_string(M * block) + " tokens at " + std::to_string(M) +
             "x";
  }
  return std::to_string(iters) + " fine-tuning steps" + (per_m.empty() ? "" : " of " + per_m) + " (lr " +
         opt::format(opt::Value(r.config.of<PiSettings>().lr)) + "), from models of " + training_budget(r);
}

// How the perplexity at M·L was scored (as the article's length claims: windows of the validation text).
std::string pi_protocol(const ComparisonResult& r, const std::vector<int64_t>& Ms) {
  const int64_t block = r.config.base.model.block_size;
  std::string s;
  for (int64_t M : Ms) {
    const int64_t ctx = M * block, windows = std::max<int64_t>(1, r.config.eval_tokens / ctx);
    s += (s.empty() ? "" : "; ") + std::to_string(windows) + " windows of " + std::to_string(ctx) + " tokens at " +
         std::to_string(M) + "x";
  }
  return s.empty() ? ""
                   : "perplexity at the fine-tuning length on non-overlapping windows of the validation text: " + s +
                         " (intervals: seed noise only)";
}

// "rope+<a> ftMx" has lower perplexity at M× than "rope+<b> ftMx": one test per fine-tuning length
// M, a one-sample t-test of the per-seed differences a − b (the same trained model and batches)
// below 0, judged as a family (judge_family).
ClaimVerdict paired_claim(const ComparisonResult& r, std::string id, std::string claim, const std::string& a,
                          const std::string& b) {
  auto scaled = [](const std::string& s) { return Row{kPaperMethod, s == "none" ? "" : "+" + s}.name(); };
  const std::string metric = "perplexity at the fine-tuning length M·L, per-seed difference " + scaled(a) + " ftMx − " +
                             scaled(b) +
                             " ftMx (fine-tuned alike; negative supports the claim), one test per M: "
                             "Student's t on the differences, below 0";
  std::vector<ClaimTest> tests;
  std::vector<int64_t> Ms;
  std::string measured;
  for (int64_t M : r.config.of<PiSettings>().multipliers) {
    const std::string ra = pi_row_name(kPaperMethod, a, M), rb = pi_row_name(kPaperMethod, b, M);
    if (!is_tuned(r, ra) || !is_tuned(r, rb) || !eval_index(r.config, M)) continue;
    Ms.push_back(M);
    const auto d = pi_paired_differences(r, ra, rb, M);
    measured += (measured.empty() ? "" : "; ") + std::to_string(M) + "x: " + ra + " " +
                interval(summarize(pi_values(r, ra, M)), 3) + ", " + rb + " " +
                interval(summarize(pi_values(r, rb, M)), 3) + ", difference " + interval(summarize(d), 3);
    tests.push_back(beyond(std::to_string(M) + "x: " + ra + " below " + rb, d, 0.0, true));
  }
  const Judgement j = judge_family(tests, tests.empty() ? "rope in --methods, --pi-iters > 0, " + a + " and " + b +
                                                              " in --pi-scalings and a --pi-multipliers value among "
                                                              "--eval-multipliers"
                                                        : "");
  return claim_from(std::move(id), std::move(claim), metric, measured.empty() ? "n/a" : measured, j, pi_budget(r),
                    pi_protocol(r, Ms));
}

// DroPE (recalibrated at 1x) against each scaling fine-tuned at M·L, at M·L: one test per (M, scaling)
// present, the per-seed difference of perplexities below 0.
ClaimVerdict drope_claim(const ComparisonResult& r) {
  const std::string drope = pi_row_name(kPaperMethod, "drope", 1);
  std::vector<ClaimTest> tests;
  std::vector<int64_t> Ms;
  std::string measured;
  if (is_tuned(r, drope))
    for (int64_t M : r.config.of<PiSettings>().multipliers) {
      if (!eval_index(r.config, M)) continue;
      std::string at_m;
      for (const std::string s : {"linear", "ntk", "yarn"}) {
        const std::string other = pi_row_name(kPaperMethod, s, M);
        if (!is_tuned(r, other)) continue;
        const auto d = pi_paired_differences(r, drope, other, M);
        at_m += (at_m.empty() ? "" : ", ") + other + " " + interval(summarize(pi_values(r, other, M)), 3) +
                " (difference " + interval(summarize(d), 3) + ")";
        tests.push_back(beyond(std::to_string(M) + "x: " + drope + " below " + other, d, 0.0, true));
      }
      if (at_m.empty()) continue;
      Ms.push_back(M);
      measured += (measured.empty() ? "" : "; ") + std::to_string(M) + "x: " + drope + " " +
                  interval(summarize(pi_values(r, drope, M)), 3) + ", " + at_m;
    }
  const Judgement j = judge_family(
      tests, tests.empty() ? "rope in --methods, --pi-iters > 0, --pi-drope, one of linear, ntk, yarn in --pi-scalings "
                             "and a --pi-multipliers value among --eval-multipliers"
                           : "");
  return claim_from(
      "p4",
      "DroPE: RoPE dropped after training and recalibrated at the training length extrapolates better "
      "than PI, NTK-aware and YaRN (Gelberg & Cetin 2026)",
      "perplexity at M·L, per-seed difference " + drope +
          " − rope+<scaling> ftMx (DroPE recalibrated at "
          "1x for as many steps as each scaling is fine-tuned at M·L; negative supports the claim), one test "
          "per (M, scaling): Student's t on the differences, below 0",
      measured.empty() ? "n/a" : measured, j, pi_budget(r) + "; DroPE at 1x for the same steps", pi_protocol(r, Ms));
}

}  // namespace

std::vector<ClaimVerdict> judge_pi_claims(const ComparisonResult& r) {
  std::vector<ClaimVerdict> out;
  if (pi_rows(r).empty()) return out;
  out.push_back(paired_claim(
      r, "p1",
      "PI: RoPE interpolated (linear) and fine-tuned at M·L has lower perplexity at M·L than "
      "RoPE fine-tuned at M·L without scaling (Chen et al. 2023 §3.2, Tables 1-2: PI against direct fine-tuning 'FT')",
      "linear", "none"));
  out.push_back(
      paired_claim(r, "p2",
                   "static NTK-aware scaling fine-tuned at M·L has lower perplexity at M·L than PI fine-tuned "
                   "alike (bloc97 2023; compared fine-tuned in Peng et al. 2023 §4)",
                   "ntk", "linear"));
  out.push_back(paired_claim(r, "p3",
                             "YaRN fine-tuned at M·L has lower perplexity at M·L than PI fine-tuned alike (Peng et al. "
                             "2023 §4)",
                             "yarn", "linear"));
  out.push_back(drope_claim(r));  // not measured with --pi-drope false: the reason names it
  return out;
}

}  // namespace posgrad::train
