// passkey_report.cpp — see passkey_report.h.
#include "compare/studies/passkey/passkey_report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/fileio.h"
#include "compare/markdown.h"
#include "compare/rows.h"
#include "compare/studies/lm/lm.h"
#include "compare/studies/pi/pi_protocol.h"
#include "compare/stats.h"

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
        if (const PasskeyResult* p = find_row(u, row)) f(*p);
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

std::vector<double> passkey_values(const ComparisonResult& r, const std::string& row, int64_t multiplier, double depth) {
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
    if (s.n == 0) o << "n/a,n/a,n/a,n/a\n";
    else if (!s.has_interval()) o << num(s.mean, 6) << "," << num(s.std, 6) << ",n/a,n/a\n";
    else o << num(s.mean, 6) << "," << num(s.std, 6) << "," << num(s.ci_low, 6) << "," << num(s.ci_high, 6) << "\n";
  };
  const PasskeyConfig& c = r.config.of<PasskeyConfig>();
  for (const auto& row : passkey_rows(r))
    for (int64_t m : c.multipliers) {
      for (double d : c.depths) line(row, m, depth_text(d), summarize(passkey_values(r, row, m, d)));
      line(row, m, "mean", summarize(passkey_depth_mean_values(r, row, m)));
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
          dat << i << " " << j << " " << (s.n ? num(s.mean, 4) : "NaN") << " " << (s.n ? num(s.mean, 2) : "n/a") << "\n";
        }
        dat << "\n";
      }
    }
    std::ostringstream gp;
    gp << markdown::gnuplot_style(760, 520, 10) << "unset grid\nset output '" << name << ".png'\n"
       << "set title \"Passkey accuracy, " << row << " (mean over " << r.config.seeds.size() << " seeds; "
       << c.examples << " examples per cell)\"\nset xlabel 'length (x training length " << r.config.base.model.block_size
       << ")'\nset ylabel 'needle depth'\nset cbrange [0:1]\nset palette defined (0 '#b2182b', 0.5 '#f7f7f7', 1 '#2166ac')\n"
       << "set xrange [-0.5:" << static_cast<double>(c.multipliers.size()) - 0.5 << "]\nset yrange [-0.5:"
       << static_cast<double>(c.depths.size()) - 0.5 << "]\nset xtics (";
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
     << "before it), and the question at the end asks for it (template '" << c.template_name << "'). Each trained "
     << "language model is fine-tuned for " << c.iters << " steps of " << c.batch
     << " examples at its training length (depth uniform per example, loss on the key only), then scored on " << c.examples
     << " fixed examples per (length, depth) cell, the same for every row and seed: an example counts when every key "
     << "symbol is the argmax given the true prefix (= greedy decoding of the key). rope+<scaling> rows are the "
     << "fine-tuned RoPE model with that evaluation-time scaling (linear and YaRN at s = the length multiplier, dynamic "
     << "NTK growing its base with the length). n/a: beyond a learned table or the validation text. Cells: accuracy, "
     << "mean over the depths, then mean ± std [95% interval] over " << r.config.seeds.size() << " seeds.\n\n";
  std::vector<std::string> header = {"row"};
  for (int64_t m : c.multipliers) header.push_back(std::to_string(m) + "x" + (m == 1 ? " (train)" : ""));
  markdown::Table t(header);
  for (const auto& row : rows) {
    std::vector<std::string> cells = {row};
    for (int64_t m : c.multipliers) cells.push_back(markdown::cell(summarize(passkey_depth_mean_values(r, row, m)), 2));
    t.row(cells);
  }
  md << t.markdown() << "\n";
  for (const auto& row : rows)
    if (fs::exists(fs::path(plots_dir) / (file_name(row) + ".png")))
      md << "![" << file_name(row) << "](plots/" << file_name(row) << ".png)\n\n";
  return md.str();
}

std::vector<ClaimVerdict> judge_passkey_claims(const ComparisonResult& r) {
  std::vector<ClaimVerdict> out;
  const auto rows = passkey_rows(r);
  bool beyond = false;
  for (int64_t m : r.config.of<PasskeyConfig>().multipliers) beyond = beyond || m > 1;
  if (rows.empty() || !beyond) return out;
  {  // (pk1) retrieval learned at the training length does not carry beyond it.
    ClaimVerdict v;
    v.id = "pk1";
    v.claim = "Passkey retrieval learned at the training length is lost beyond it without context extension: direct "
              "extrapolation extends the effective window only marginally (Chen et al. 2023 §3.3, Table 4; "
              "Mohtashami & Jaggi 2023 §4.2)";
    v.metric = "passkey accuracy (mean over depths), 1x vs the mean over the longer lengths, per method that retrieves at 1x (≥ 0.5)";
    int drop = 0, hold = 0, unclear = 0;
    for (const auto& m : r.config.methods) {
      const auto in = passkey_depth_mean_values(r, m, 1), ood = passkey_beyond_values(r, m);
      if (in.empty() || ood.empty() || mean_of(in) < 0.5) continue;
      const WelchTest w = welch_test(ood, in);
      if (significant_order(w) < 0) ++drop;
      else if (w.testable && w.ci_low > -0.1) ++hold;  // the whole interval of the change within 0.1 below 0
      else ++unclear;
    }
    v.measured = std::to_string(drop) + " method(s) lose accuracy significantly beyond 1x, " + std::to_string(hold) +
                 " keep it (95% interval of the change above −0.1), " + std::to_string(unclear) + " neither";
    const int total = drop + hold + unclear;
    if (total == 0) {
      v.verdict = "inconclusive";
      v.why = "no method retrieves at the training length (mean accuracy ≥ 0.5) at this budget";
    } else if (2 * drop > total) {
      v.verdict = "supported";
      v.why = "most methods that retrieve at 1x lose accuracy beyond it (Welch, 5%)";
    } else if (2 * hold > total) {
      v.verdict = "contradicted";
      v.why = "most methods that retrieve at 1x keep their accuracy beyond it";
    } else {
      v.verdict = "inconclusive";
      v.why = "neither a majority of significant drops nor of held accuracy";
    }
    out.push_back(v);
  }
  {  // (pk2) evaluation-time RoPE scaling retrieves beyond the training length better than plain RoPE.
    ClaimVerdict v;
    v.id = "pk2";
    v.claim = "Scaling RoPE for the longer context (position interpolation, dynamic NTK, YaRN) retrieves the passkey "
              "beyond the training length where plain RoPE does not (Chen et al. 2023 §3.3; Peng et al. 2023 §4)";
    v.metric = "passkey accuracy, mean over the lengths > 1x and the depths, rope+<scaling> − rope (no fine-tuning at the longer lengths)";
    const std::string paper_method = "rope";  // the papers' claim is about RoPE
    const auto base = passkey_beyond_values(r, paper_method);
    int up = 0, down = 0, none = 0;
    std::string measured;
    for (const std::string& s : {Row{paper_method, "+linear"}.name(), Row{paper_method, "+dynamic"}.name(),
                                Row{paper_method, "+yarn"}.name()}) {
      const auto a = passkey_beyond_values(r, s);
      if (a.empty() || base.empty()) continue;
      const WelchTest w = welch_test(a, base);
      const int o = significant_order(w);
      (o > 0 ? up : o < 0 ? down : none)++;
      measured += (measured.empty() ? "" : "; ") + std::string(s) + " " +
                  (w.testable ? num(w.diff, 3) + " [" + num(w.ci_low, 3) + ", " + num(w.ci_high, 3) + "]"
                              : num(mean_of(a) - mean_of(base), 3) + " (no interval)");
    }
    if (up + down + none == 0) {
      v.measured = "no RoPE rows";
      v.verdict = "inconclusive";
      v.why = "not measured (rope is not among --methods)";
    } else {
      v.measured = measured;
      if (up > 0 && down == 0) {
        v.verdict = "supported";
        v.why = std::to_string(up) + " scaling(s) significantly above plain RoPE, none below (Welch, 5%)";
      } else if (down > 0 && up == 0) {
        v.verdict = "contradicted";
        v.why = std::to_string(down) + " scaling(s) significantly below plain RoPE, none above";
      } else {
        v.verdict = "inconclusive";
        v.why = "no scaling differs significantly from plain RoPE, or they disagree";
      }
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace posgrad::train
