// report.cpp — see report.h.
#include "train/report.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "data/fileio.h"
#include "train/compare.h"
#include "train/options.h"

namespace posgrad::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct Stat {
  double mean = NAN, std = 0;
  int n = 0;  // seeds with a value (0: n/a)
};

Stat stat_of(const std::vector<double>& v) {
  Stat s;
  s.n = static_cast<int>(v.size());
  if (v.empty()) return s;
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / s.n;
  if (s.n > 1) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.std = std::sqrt(ss / (s.n - 1));  // sample standard deviation over seeds
  }
  return s;
}

// Value at a JSON path ("a/b/c"), or nullopt where it is missing or null (n/a).
std::optional<double> at(const json& j, const std::string& path) {
  const json* cur = &j;
  std::stringstream ss(path);
  std::string key;
  while (std::getline(ss, key, '/')) {
    if (!cur->is_object() || !cur->contains(key)) return std::nullopt;
    cur = &(*cur)[key];
    if (cur->is_null()) return std::nullopt;
  }
  if (!cur->is_number()) return std::nullopt;
  return cur->get<double>();
}

std::string fmt(const Stat& s, int prec = 3) {
  if (s.n == 0) return "n/a";
  char buf[64];
  if (s.n > 1) std::snprintf(buf, sizeof buf, "%.*f ± %.*f", prec, s.mean, prec, s.std);
  else std::snprintf(buf, sizeof buf, "%.*f", prec, s.mean);
  return buf;
}

std::string num(double v, int prec = 6) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

// The commit of the source tree posgrad was built from ("-dirty" with uncommitted changes).
std::string git_commit() {
  FILE* p = popen("git -C '" POSGRAD_SOURCE_DIR "' describe --always --abbrev=12 --dirty 2>/dev/null", "r");
  if (!p) return "unknown";
  char buf[64] = {0};
  std::string out = fgets(buf, sizeof buf, p) ? buf : "";
  pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out.empty() ? "unknown (not a git checkout)" : out;
}

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void row(std::vector<std::string> r) { rows_.push_back(std::move(r)); }
  std::string markdown() const {
    std::string s = "|";
    for (auto& h : header_) s += " " + h + " |";
    s += "\n|";
    for (size_t i = 0; i < header_.size(); ++i) s += i == 0 ? "---|" : "---:|";
    s += "\n";
    for (auto& r : rows_) {
      s += "|";
      for (auto& c : r) s += " " + c + " |";
      s += "\n";
    }
    return s;
  }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

struct Aggregate {
  std::vector<std::string> methods;  // in the configured order
  std::map<std::string, std::vector<const json*>> by_method;
  Stat get(const std::string& method, const std::string& path) const {
    std::vector<double> v;
    for (const json* r : by_method.at(method))
      if (auto x = at(*r, path)) v.push_back(*x);
    return stat_of(v);
  }
};

bool run_gnuplot(const std::string& script_path) {
  std::string cmd = "gnuplot '" + script_path + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return false;
  char buf[512];
  std::string out;
  while (fgets(buf, sizeof buf, p)) out += buf;
  int st = pclose(p);
  if (st != 0) spdlog::warn("gnuplot failed on {}: {}", script_path, out);
  return st == 0;
}

const char* kStyle =
    "set terminal pngcairo size 1000,650 enhanced font 'Sans,11'\n"
    "set grid\nset key outside right top\n";

}  // namespace

std::string write_report(const CompareConfig& cfg, const std::vector<json>& results) {
  Aggregate agg;
  for (const auto& m : cfg.methods) {
    agg.methods.push_back(m);
    agg.by_method[m] = {};
  }
  for (const auto& r : results) agg.by_method[r.at("method").get<std::string>()].push_back(&r);
  const auto& M = cfg.eval_multipliers;
  const auto& TM = cfg.task_multipliers;
  const int64_t block = cfg.base.model.block_size;
  const std::string rope_variants[] = {"rope+linear", "rope+dynamic", "rope+yarn"};
  const bool have_rope = agg.by_method.count("rope") && !agg.by_method["rope"].empty();

  // ---- results.csv (deterministic numbers only) and timing.csv --------------------------------
  std::string csv = "method,metric,mean,std,n\n";
  auto csv_row = [&](const std::string& method, const std::string& metric, const Stat& s) {
    csv += method + "," + metric + "," + (s.n ? num(s.mean) : "n/a") + "," + (s.n ? num(s.std) : "n/a") + "," +
           std::to_string(s.n) + "\n";
  };
  for (const auto& m : agg.methods) {
    csv_row(m, "parameters", agg.get(m, "parameters"));
    csv_row(m, "val_loss", agg.get(m, "val/loss"));
    csv_row(m, "val_perplexity", agg.get(m, "val/perplexity"));
    csv_row(m, "val_accuracy", agg.get(m, "val/accuracy"));
    for (int64_t k : M) csv_row(m, "perplexity_x" + std::to_string(k), agg.get(m, "extrapolation/" + std::to_string(k) + "/perplexity"));
    for (int64_t k : TM) {
      csv_row(m, "task_exact_match_x" + std::to_string(k), agg.get(m, "synthetic/scores/" + std::to_string(k) + "/exact_match"));
      csv_row(m, "task_token_f1_x" + std::to_string(k), agg.get(m, "synthetic/scores/" + std::to_string(k) + "/token_f1"));
    }
  }
  if (have_rope)
    for (const auto& v : rope_variants)
      for (int64_t k : M)
        csv_row(v, "perplexity_x" + std::to_string(k), agg.get("rope", "rope_scaled/" + v + "/" + std::to_string(k) + "/perplexity"));
  write_file_atomic(cfg.out_dir + "/results.csv", csv);

  std::string tcsv = "method,seed,tokens_per_s,step_ms,peak_mb,train_seconds,resumed\n";
  for (const auto& r : results) {
    const auto& t = r.at("timing");
    tcsv += r.at("method").get<std::string>() + "," + std::to_string(r.at("seed").get<uint64_t>()) + "," +
            num(t.at("tokens_per_s"), 1) + "," + num(t.at("step_ms"), 2) + "," + num(t.at("peak_mb"), 2) + "," +
            num(t.at("train_seconds"), 1) + "," + (t.at("resumed").get<bool>() ? "yes" : "no") + "\n";
  }
  write_file_atomic(cfg.out_dir + "/timing.csv", tcsv);
  write_file_atomic(cfg.out_dir + "/results.json", json({{"config", cfg.to_json()}, {"results", results}}).dump(1) + "\n");

  // ---- plots ---------------------------------------------------------------------------------------
  const std::string pd = cfg.out_dir + "/plots";
  fs::create_directories(pd);
  std::vector<std::string> plots;
  {
    std::ofstream dat(pd + "/ppl_vs_length.dat");
    std::string plot = "plot ";
    int idx = 0;
    auto series = [&](const std::string& name, const std::function<Stat(int64_t)>& f, const std::string& style) {
      dat << "# " << name << "\n";
      for (int64_t k : M) {
        Stat s = f(k);
        if (s.n) dat << k * block << " " << s.mean << "\n";
      }
      dat << "\n\n";
      plot += std::string(idx ? ", " : "") + "'ppl_vs_length.dat' index " + std::to_string(idx) + " with linespoints " +
              style + " title '" + name + "'";
      ++idx;
    };
    for (const auto& m : agg.methods)
      series(m, [&](int64_t k) { return agg.get(m, "extrapolation/" + std::to_string(k) + "/perplexity"); }, "lw 2");
    if (have_rope)
      for (const auto& v : rope_variants)
        series(v, [&](int64_t k) { return agg.get("rope", "rope_scaled/" + v + "/" + std::to_string(k) + "/perplexity"); },
               "dt 2 lw 1");
    std::ofstream gp(pd + "/ppl_vs_length.gp");
    gp << kStyle << "set output 'ppl_vs_length.png'\nset logscale x 2\nset logscale y\n"
       << "set xlabel 'evaluation length (tokens); training length " << block << "'\nset ylabel 'validation perplexity'\n"
       << "set title 'Length extrapolation'\n" << plot << "\n";
    plots.push_back("ppl_vs_length");
  }
  {
    std::ofstream dat(pd + "/train_loss.dat");
    std::string plot = "plot ";
    int idx = 0;
    for (const auto& m : agg.methods) {
      if (agg.by_method[m].empty()) continue;
      dat << "# " << m << "\n";
      for (const auto& p : agg.by_method[m].front()->at("train_curve")) dat << p[0] << " " << p[1] << "\n";
      dat << "\n\n";
      plot += std::string(idx ? ", " : "") + "'train_loss.dat' index " + std::to_string(idx) + " with lines lw 2 title '" + m + "'";
      ++idx;
    }
    std::ofstream gp(pd + "/train_loss.gp");
    gp << kStyle << "set output 'train_loss.png'\nset xlabel 'step'\nset ylabel 'training loss'\n"
       << "set title 'Training loss (first seed)'\n" << plot << "\n";
    plots.push_back("train_loss");
  }
  {
    std::ofstream dat(pd + "/per_position_loss.dat");
    std::string plot = "plot ";
    int idx = 0;
    for (const auto& m : agg.methods) {
      if (agg.by_method[m].empty()) continue;
      const auto& v = agg.by_method[m].front()->at("per_position_loss");
      dat << "# " << m << "\n";
      // Mean over buckets of 8 positions: the raw curve is noisy with few windows.
      const size_t bucket = v.size() >= 64 ? 8 : 1;
      for (size_t i = 0; i + bucket <= v.size(); i += bucket) {
        double s = 0;
        for (size_t k = 0; k < bucket; ++k) s += v[i + k].get<double>();
        dat << i + bucket / 2 << " " << s / bucket << "\n";
      }
      dat << "\n\n";
      plot += std::string(idx ? ", " : "") + "'per_position_loss.dat' index " + std::to_string(idx) +
              " with lines lw 2 title '" + m + "'";
      ++idx;
    }
    std::ofstream gp(pd + "/per_position_loss.gp");
    gp << kStyle << "set output 'per_position_loss.png'\nset xlabel 'position in the window'\nset ylabel 'loss'\n"
       << "set arrow from " << block << ", graph 0 to " << block << ", graph 1 nohead dt 3\n"
       << "set title 'Loss per position inside a " << cfg.per_position_multiplier
       << "x window (dotted: training length)'\n" << plot << "\n";
    plots.push_back("per_position_loss");
  }
  {
    std::ofstream dat(pd + "/attention_distance.dat");
    std::ofstream gp(pd + "/attention_distance.gp");
    const int n = static_cast<int>(agg.methods.size());
    const int cols = std::min(n, 4), rows = (n + cols - 1) / cols;
    gp << "set terminal pngcairo size " << 420 * cols << "," << 330 * rows << " enhanced font 'Sans,9'\n"
       << "set output 'attention_distance.png'\nset multiplot layout " << rows << "," << cols
       << " title 'Mean attention weight vs query-key distance (per layer)'\nset logscale y\nset grid\n"
       << "set xlabel 'distance'\n";
    int idx = 0;
    for (const auto& m : agg.methods) {
      if (agg.by_method[m].empty()) continue;
      const auto& layers = agg.by_method[m].front()->at("attention_by_distance");
      std::string plot = "plot ";
      for (size_t l = 0; l < layers.size(); ++l) {
        dat << "# " << m << " layer " << l << "\n";
        for (size_t d = 0; d < layers[l].size(); ++d)
          if (layers[l][d].get<double>() > 0) dat << d << " " << layers[l][d].get<double>() << "\n";
        dat << "\n\n";
        plot += std::string(l ? ", " : "") + "'attention_distance.dat' index " + std::to_string(idx) +
                " with lines lw 2 title 'layer " + std::to_string(l) + "'";
        ++idx;
      }
      gp << "set title '" << m << "'\n" << plot << "\n";
    }
    gp << "unset multiplot\n";
    plots.push_back("attention_distance");
  }
  std::vector<std::string> made;
  {
    const auto cwd = fs::current_path();
    fs::current_path(pd);
    for (const auto& p : plots)
      if (run_gnuplot(p + ".gp") && fs::exists(p + ".png")) made.push_back(p);
    fs::current_path(cwd);
  }

  // ---- report.md -------------------------------------------------------------------------------------
  std::ostringstream md;
  const auto& b = cfg.base;
  md << "# posgrad position-encoding comparison\n\n"
     << "Measured, not illustrative: every number below comes from the runs in this directory.\n\n"
     << "- corpus: `" << b.corpus << "` (" << b.tokenizer << "-level), contiguous 90/10 train/validation split\n"
     << "- model: GPT, " << b.model.n_layer << " layers, " << b.model.n_head << " heads, " << b.model.n_embd
     << " wide, training length " << block << ", dropout " << b.model.dropout << "\n"
     << "- training: " << b.max_iters << " steps of " << b.batch_size << "x" << block << " tokens, AdamW lr "
     << b.lr << " (warm-up " << b.warmup_iters << ", cosine to " << b.min_lr << "), weight decay " << b.weight_decay
     << ", clip " << b.grad_clip << "\n"
     << "- seeds: ";
  for (size_t i = 0; i < cfg.seeds.size(); ++i) md << (i ? ", " : "") << cfg.seeds[i];
  md << " (mean ± sample std over seeds where more than one)\n"
     << "- RoPE evaluation-time scalings: linear and YaRN with s = L/L_train, dynamic NTK\n"
     << "- git commit: `" << git_commit() << "`\n\n";
  // Every setting, generated from the option table (the same names as the CLI flags and config.json).
  md << "<details><summary>All settings (as <code>posgrad compare</code> options)</summary>\n\n| option | value |\n|---|---|\n";
  for (const auto& o : compare_options()) md << "| `" << o.spec.flag() << "` | " << opt::format(o.get(cfg)) << " |\n";
  md << "\n</details>\n\n";

  md << "## The article's table, measured\n\n"
     << "Perplexity and accuracy: next-token prediction on the validation split at the training length. "
     << "Exact match / F1: the synthetic " << cfg.task << " task at its training length (" << cfg.task_length
     << " symbols) and at " << TM.back() << "x that length (token F1 is SQuAD-style bag-of-tokens F1). "
     << "Extrapolation: perplexity at " << (M.size() > 2 ? M[2] : M.back()) << "x the training length divided by perplexity at 1x "
     << "(1.0 = no degradation; n/a = the method cannot run there).\n\n";
  const int64_t xm = M.size() > 2 ? M[2] : M.back();
  Table main({"method", "val perplexity", "val accuracy", "task exact match (1x)", "task F1 (1x)",
              "task exact match (" + std::to_string(TM.back()) + "x)", "task F1 (" + std::to_string(TM.back()) + "x)",
              "extrapolation ppl(" + std::to_string(xm) + "x)/ppl(1x)"});
  auto ratio = [&](const std::string& m, int64_t k) {
    std::vector<double> v;
    for (const json* r : agg.by_method.at(m)) {
      auto a = at(*r, "extrapolation/" + std::to_string(k) + "/perplexity");
      auto c = at(*r, "extrapolation/1/perplexity");
      if (a && c) v.push_back(*a / *c);
    }
    return stat_of(v);
  };
  for (const auto& m : agg.methods)
    main.row({m, fmt(agg.get(m, "val/perplexity")), fmt(agg.get(m, "val/accuracy"), 4),
              fmt(agg.get(m, "synthetic/scores/1/exact_match")), fmt(agg.get(m, "synthetic/scores/1/token_f1")),
              fmt(agg.get(m, "synthetic/scores/" + std::to_string(TM.back()) + "/exact_match")),
              fmt(agg.get(m, "synthetic/scores/" + std::to_string(TM.back()) + "/token_f1")), fmt(ratio(m, xm))});
  md << main.markdown() << "\n";

  md << "## Length extrapolation: validation perplexity at multiples of the training length\n\n"
     << "Non-overlapping windows over the same validation text (about " << cfg.eval_tokens
     << " scored tokens per length).\n\n";
  std::vector<std::string> eh = {"method"};
  for (int64_t k : M) eh.push_back(std::to_string(k) + "x (" + std::to_string(k * block) + ")");
  Table ext(eh);
  for (const auto& m : agg.methods) {
    std::vector<std::string> r = {m};
    for (int64_t k : M) r.push_back(fmt(agg.get(m, "extrapolation/" + std::to_string(k) + "/perplexity")));
    ext.row(r);
  }
  if (have_rope)
    for (const auto& v : rope_variants) {
      std::vector<std::string> r = {v};
      for (int64_t k : M) r.push_back(fmt(agg.get("rope", "rope_scaled/" + v + "/" + std::to_string(k) + "/perplexity")));
      ext.row(r);
    }
  md << ext.markdown() << "\n";

  md << "## Synthetic " << cfg.task << " task (trained at " << cfg.task_length << " symbols)\n\n";
  std::vector<std::string> th = {"method"};
  for (int64_t k : TM) th.push_back("EM / F1 at " + std::to_string(k * cfg.task_length));
  Table task(th);
  for (const auto& m : agg.methods) {
    std::vector<std::string> r = {m};
    for (int64_t k : TM)
      r.push_back(fmt(agg.get(m, "synthetic/scores/" + std::to_string(k) + "/exact_match"), 2) + " / " +
                  fmt(agg.get(m, "synthetic/scores/" + std::to_string(k) + "/token_f1"), 2));
    task.row(r);
  }
  md << task.markdown() << "\n";

  md << "## Cost (measured while training; timing varies between machines and runs)\n\n";
  Table cost({"method", "parameters", "tokens/s", "step (ms)", "peak memory (MiB)", "train time (s)"});
  for (const auto& m : agg.methods)
    cost.row({m, fmt(agg.get(m, "parameters"), 0), fmt(agg.get(m, "timing/tokens_per_s"), 0),
              fmt(agg.get(m, "timing/step_ms"), 1), fmt(agg.get(m, "timing/peak_mb"), 1),
              fmt(agg.get(m, "timing/train_seconds"), 1)});
  md << cost.markdown() << "\n";

  // ---- reading ----------------------------------------------------------------------------------------
  md << "## Reading\n\n";
  {
    std::vector<std::pair<double, std::string>> by_ppl;
    for (const auto& m : agg.methods) {
      Stat s = agg.get(m, "val/perplexity");
      if (s.n) by_ppl.emplace_back(s.mean, m);
    }
    std::sort(by_ppl.begin(), by_ppl.end());
    if (!by_ppl.empty()) {
      md << "- At the training length the best validation perplexity is **" << by_ppl.front().second << "** ("
         << num(by_ppl.front().first, 3) << ") and the worst **" << by_ppl.back().second << "** ("
         << num(by_ppl.back().first, 3) << "). Ranking: ";
      for (size_t i = 0; i < by_ppl.size(); ++i) md << (i ? " < " : "") << by_ppl[i].second;
      md << ".\n";
    }
    const int64_t far = M.back();
    std::vector<std::pair<double, std::string>> degr;
    for (const auto& m : agg.methods) {
      Stat s = ratio(m, far);
      if (s.n) degr.emplace_back(s.mean, m);
    }
    std::sort(degr.begin(), degr.end());
    if (!degr.empty()) {
      md << "- At " << far << "x the training length, perplexity grows least for **" << degr.front().second << "** (x"
         << num(degr.front().first, 2) << ") and most for **" << degr.back().second << "** (x" << num(degr.back().first, 2)
         << "). Ranking by growth: ";
      for (size_t i = 0; i < degr.size(); ++i) md << (i ? " < " : "") << degr[i].second;
      md << ". Learned absolute positions cannot be evaluated beyond their table (n/a).\n";
    }
    // The ALiBi paper (Press et al. 2022, Fig. 1): sinusoidal degrades first, rotary next, T5 bias and ALiBi hold longest.
    auto r = [&](const std::string& m) -> std::optional<double> {
      if (!agg.by_method.count(m)) return std::nullopt;
      Stat s = ratio(m, far);
      if (!s.n) return std::nullopt;
      return s.mean;
    };
    auto sin = r("sinusoidal"), rope = r("rope"), t5 = r("t5"), alibi = r("alibi");
    if (sin && rope && t5 && alibi) {
      const bool first = *sin > *rope && *sin > *t5 && *sin > *alibi;
      const bool next = *rope > *t5 && *rope > *alibi;
      md << "- The ALiBi paper's ordering (sinusoidal degrades first, rotary next, T5 bias and ALiBi hold longest) is **"
         << (first && next ? "reproduced" : "not reproduced") << "** here at " << far << "x: growth sinusoidal x"
         << num(*sin, 2) << ", rope x" << num(*rope, 2) << ", t5 x" << num(*t5, 2) << ", alibi x" << num(*alibi, 2) << ".";
      if (!(first && next))
        md << (first ? " Sinusoidal does degrade first, but rotary is not worse than both T5 and ALiBi."
                     : " Sinusoidal is not the first to degrade.");
      md << "\n";
    } else {
      md << "- The ALiBi paper's ordering cannot be checked: it needs sinusoidal, rope, t5 and alibi among --methods.\n";
    }
    if (agg.by_method.count("none") && !agg.by_method["none"].empty()) {
      Stat none = agg.get("none", "val/perplexity");
      md << "- NoPE (no position encoding; the causal mask alone carries order) reaches perplexity " << fmt(none)
         << " at the training length.\n";
    }
    Stat base_tps = agg.by_method.count("none") ? agg.get("none", "timing/tokens_per_s") : Stat{};
    if (base_tps.n) {
      md << "- Throughput relative to NoPE:";
      for (const auto& m : agg.methods) {
        Stat s = agg.get(m, "timing/tokens_per_s");
        if (s.n && m != "none") md << " " << m << " " << num(s.mean / base_tps.mean, 2) << "x;";
      }
      md << " (cost differences are the encodings' own work inside attention and embedding).\n";
    }
  }
  md << "\n## Plots\n\n";
  for (const auto& p : made) md << "![" << p << "](plots/" << p << ".png)\n\n";
  if (made.size() != plots.size()) md << "(Some plots could not be drawn: is gnuplot installed?)\n\n";
  md << "Files: `results.csv` (metrics, byte-identical for the same seed and thread count), `timing.csv`, "
     << "`results.json` (everything, per seed), one run directory per method and seed.\n";
  const std::string path = cfg.out_dir + "/report.md";
  write_file_atomic(path, md.str());
  return path;
}

}  // namespace posgrad::train
