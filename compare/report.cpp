// report.cpp — see report.h.
#include "compare/report.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/fileio.h"
#include "data/process.h"
#include "train/interrupt.h"
#include "compare/claims.h"
#include "compare/compare_eval.h"
#include "compare/studies/suite/length_suite_report.h"
#include "compare/studies/pi/pi_report.h"
#include "compare/studies/passkey/passkey_report.h"
#include "compare/markdown.h"
#include "compare/options.h"
#include "train/options.h"

namespace posgrad::train {

namespace fs = std::filesystem;

namespace {

using markdown::cell;
using markdown::num;
using markdown::run_gnuplot;
using markdown::Table;

int64_t longest(const CompareConfig& c) { return c.eval_multipliers.back(); }

const UnitResult* first_unit(const ComparisonResult& r, const std::string& method) {
  for (uint64_t seed : r.config.seeds)
    for (const auto& u : r.units)
      if (u.method == method && u.seed == seed) return &u;
  return nullptr;
}

const char* kStyle = "set terminal pngcairo size 1000,650 noenhanced font 'Sans,11'\nset grid\nset key outside right top\n";

}  // namespace

// ---- CSV ---------------------------------------------------------------------------------------------

void write_results_csv(const ComparisonResult& r, const std::string& path) {
  std::string csv = "row,metric,n,mean,std,ci_low,ci_high\n";
  for (const auto& row : rows(r))
    for (const Metric& m : csv_metrics(r.config)) {
      const Summary s = summary(r, row, m);
      csv += row + "," + m.name() + "," + std::to_string(s.n) + ",";
      if (s.n == 0) csv += "n/a,n/a,n/a,n/a\n";
      else if (!s.has_interval()) csv += num(s.mean) + "," + num(s.std) + ",n/a,n/a\n";
      else csv += num(s.mean) + "," + num(s.std) + "," + num(s.ci_low) + "," + num(s.ci_high) + "\n";
    }
  write_file_atomic(path, csv);
}

void write_cost_csv(const ComparisonResult& r, const std::string& path) {
  std::string csv = "method,measurement,T,batch,rounds,median_ms,min_ms,max_ms,spread,peak_mib,parameters\n";
  for (const auto& c : r.cost.rows) {
    if (c.seconds.empty()) continue;
    const auto [lo, hi] = std::minmax_element(c.seconds.begin(), c.seconds.end());
    csv += c.method + "," + c.what + "," + std::to_string(c.T) + "," + std::to_string(c.batch) + "," +
           std::to_string(c.seconds.size()) + "," + num(1e3 * c.median(), 3) + "," + num(1e3 * *lo, 3) + "," +
           num(1e3 * *hi, 3) + "," + num(c.spread(), 3) + "," + num(static_cast<double>(c.peak_bytes) / (1 << 20), 2) + "," +
           std::to_string(c.parameters) + "\n";
  }
  write_file_atomic(path, csv);
}

// ---- plots ------------------------------------------------------------------------------------------

std::vector<std::string> write_plots(const ComparisonResult& r, const std::string& dir) {
  fs::create_directories(dir);
  const std::string d = fs::absolute(dir).string();
  const CompareConfig& c = r.config;
  const int64_t block = c.base.model.block_size;
  std::vector<std::string> scripts;
  {  // perplexity vs length, mean with the 95% interval
    std::ofstream dat(d + "/ppl_vs_length.dat");
    std::string plot = "plot ";
    int idx = 0;
    for (const auto& row : rows(r)) {
      dat << "# " << row << "\n";
      int points = 0;
      for (int64_t k : c.eval_multipliers) {
        const Summary s = summary(r, row, {Quantity::Perplexity, k});
        if (!s.n) continue;
        ++points;
        dat << k * block << " " << s.mean << " " << (s.has_interval() ? s.ci_low : s.mean) << " "
            << (s.has_interval() ? s.ci_high : s.mean) << "\n";
      }
      dat << "\n\n";
      if (!points) {
        ++idx;
        continue;
      }
      const bool variant = row.find_first_of("+@") != std::string::npos;
      plot += std::string(plot.size() > 5 ? ", " : "") + "'ppl_vs_length.dat' index " + std::to_string(idx) +
              " with yerrorlines " + (variant ? "dt 2 lw 1" : "lw 2") + " title '" + row + "'";
      ++idx;
    }
    std::ofstream gp(d + "/ppl_vs_length.gp");
    gp << kStyle << "set output 'ppl_vs_length.png'\nset logscale x 2\nset logscale y\n"
       << "set xlabel 'evaluation length (tokens); training length " << block << "'\nset ylabel 'validation perplexity'\n"
       << "set title 'Length extrapolation (mean and 95% interval over " << c.seeds.size() << " seeds)'\n" << plot << "\n";
    scripts.push_back("ppl_vs_length");
  }
  {  // training loss, first seed
    std::ofstream dat(d + "/train_loss.dat");
    std::string plot = "plot ";
    int idx = 0;
    for (const auto& m : c.methods) {
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
    gp << kStyle << "set output 'train_loss.png'\nset xlabel 'step'\nset ylabel 'training loss'\n"
       << "set title 'Training loss (first seed)'\n" << plot << "\n";
    scripts.push_back("train_loss");
  }
  {  // per-position loss, first seed, buckets of 8 positions
    std::ofstream dat(d + "/per_position_loss.dat");
    std::string plot = "plot ";
    int idx = 0;
    for (const auto& m : c.methods) {
      const UnitResult* u = first_unit(r, m);
      if (!u || u->per_position_loss.empty()) continue;
      const auto& v = u->per_position_loss;
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
    gp << kStyle << "set output 'per_position_loss.png'\nset xlabel 'position in the window'\n"
       << "set ylabel 'loss'\nset arrow from " << block << ", graph 0 to " << block << ", graph 1 nohead dt 3\n"
       << "set title 'Loss per position inside a " << c.per_position_multiplier
       << "x window (dotted: training length; first seed)'\n" << plot << "\n";
    scripts.push_back("per_position_loss");
  }
  {  // attention weight vs distance, one panel per method
    std::ofstream dat(d + "/attention_distance.dat");
    std::ofstream gp(d + "/attention_distance.gp");
    const int n = static_cast<int>(c.methods.size());
    const int cols = std::min(n, 4), rows_ = (n + cols - 1) / cols;
    gp << "set terminal pngcairo size " << 420 * cols << "," << 330 * rows_ << " noenhanced font 'Sans,9'\n"
       << "set output 'attention_distance.png'\nset multiplot layout " << rows_ << "," << cols
       << " title 'Mean attention weight vs query-key distance (per layer, first seed)'\nset logscale y\nset grid\n"
       << "set xlabel 'distance'\n";
    int idx = 0;
    for (const auto& m : c.methods) {
      const UnitResult* u = first_unit(r, m);
      if (!u) continue;
      std::string plot = "plot ";
      for (size_t l = 0; l < u->attention_by_distance.size(); ++l) {
        dat << "# " << m << " layer " << l << "\n";
        for (size_t k = 0; k < u->attention_by_distance[l].size(); ++k)
          if (u->attention_by_distance[l][k] > 0) dat << k << " " << u->attention_by_distance[l][k] << "\n";
        dat << "\n\n";
        plot += std::string(l ? ", " : "") + "'attention_distance.dat' index " + std::to_string(idx) +
                " with lines lw 2 title 'layer " + std::to_string(l) + "'";
        ++idx;
      }
      gp << "set title '" << m << "'\n" << plot << "\n";
    }
    gp << "unset multiplot\n";
    scripts.push_back("attention_distance");
  }
  std::vector<std::string> made;
  for (const auto& s : scripts)
    if (run_gnuplot(d, s + ".gp") && fs::exists(d + "/" + s + ".png")) made.push_back(s);
  return made;
}

// ---- markdown -------------------------------------------------------------------------------------

void write_markdown(const ComparisonResult& r, const std::vector<std::string>& plots, const std::string& path) {
  const CompareConfig& c = r.config;
  const auto& b = c.base;
  const int64_t block = b.model.block_size;
  const Metric ppl{Quantity::Perplexity, 1}, acc{Quantity::Accuracy, 1};
  std::ostringstream md;
  md << "# posgrad position-encoding comparison\n\n"
     << "Measured, not illustrative: every number below comes from the runs in this directory, as mean ± sample "
     << "standard deviation [95% confidence interval of the mean, Student's t] over " << c.seeds.size() << " seed"
     << (c.seeds.size() == 1 ? "" : "s") << ".\n\n";

  md << "## Provenance\n\n"
     << "- git commit: `" << r.provenance.git_commit << "`\n"
     << "- CPU: " << r.provenance.cpu << " (SIMD path " << r.provenance.simd << "), " << r.provenance.threads
     << " OpenMP threads\n"
     << "- compiler: " << r.provenance.compiler << "; libraries: " << r.provenance.libraries << "; CUDA backend "
     << r.provenance.cuda << "\n"
     << "- configuration hash (FNV-1a of the settings below): `" << r.provenance.config_hash << "`\n\n";

  md << "## Settings\n\n"
     << "- corpus: `" << b.corpus << "` (" << b.tokenizer << "-level), contiguous 90/10 train/validation split\n"
     << "- model: GPT, " << b.model.n_layer << " layers, " << b.model.n_head << " heads, " << b.model.n_embd
     << " wide, training length " << block << ", dropout " << b.model.dropout << "\n"
     << "- training: " << b.max_iters << " steps of " << b.batch_size << "x" << block << " tokens, AdamW lr " << b.lr
     << " (warm-up " << b.warmup_iters << ", cosine to " << b.min_lr << "), weight decay " << b.weight_decay << ", clip "
     << b.grad_clip << "\n- seeds: ";
  for (size_t i = 0; i < c.seeds.size(); ++i) md << (i ? ", " : "") << c.seeds[i];
  {  // the measured seed-to-seed noise that sizes the experiment
    std::vector<double> rel;
    for (const auto& m : c.methods) {
      const Summary s = summary(r, m, ppl);
      if (s.has_interval()) rel.push_back(s.std / s.mean);
    }
    std::sort(rel.begin(), rel.end());
    md << "\n- seed-to-seed noise: the standard deviation of the validation perplexity over seeds is "
       << (rel.empty() ? std::string("not measured (one seed)") : num(100 * rel[rel.size() / 2], 2) + "% of the mean (median over methods)")
       << "; differences smaller than about twice that are not resolved with " << c.seeds.size() << " seeds\n";
  }
  md << "- RoPE evaluation-time variants: linear and YaRN scaling with s = L/L_train, dynamic NTK; `rope@bf16` and "
     << "`rope@fp16` round the rotary angle arithmetic to that format\n";
  if (std::find(c.methods.begin(), c.methods.end(), "rope") != c.methods.end())
    for (const auto& [row, why] : skipped_rope_variants(c))
      md << "- `" << row << "` not measured: this configuration cannot build it (" << why << ")\n";
  md << "\n"
     << "<details><summary>All settings (as <code>posgrad compare</code> options)</summary>\n\n| option | value |\n|---|---|\n";
  for (const auto& o : compare_options()) md << "| `" << o.spec.flag() << "` | " << opt::format(o.get(c)) << " |\n";
  md << "\n</details>\n\n";

  const int64_t tm = c.task_multipliers.back(), xm = longest(c);
  md << "## The article's table, measured\n\n"
     << "Perplexity and accuracy: next-token prediction on the validation split at the training length. Task "
     << "exact match / F1: the synthetic " << c.task << " task at its training length (" << c.task_length
     << " symbols) and at " << tm << "x (token F1 is bag-of-tokens F1). Extrapolation: perplexity at " << xm
     << "x the training length (" << xm * block << " tokens) over perplexity at 1x (1.0 = no degradation; n/a = the "
     << "method cannot run there).\n\n";
  Table main({"method", "val perplexity", "val accuracy", "task F1 (1x)", "task F1 (" + std::to_string(tm) + "x)",
              "extrapolation ppl(" + std::to_string(xm) + "x)/ppl(1x)"});
  for (const auto& m : c.methods)
    main.row({m, cell(summary(r, m, ppl), 3), cell(summary(r, m, acc), 4),
              cell(summary(r, m, {Quantity::TaskTokenF1, 1}), 3), cell(summary(r, m, {Quantity::TaskTokenF1, tm}), 3),
              cell(summary(r, m, {Quantity::PerplexityRatio, xm}), 2)});
  md << main.markdown() << "\n";

  md << "## Which differences are real\n\n"
     << "Welch's t-test (unequal variances) on the per-seed values of every pair of methods, two-sided, 5% level, "
     << "no correction for the number of comparisons. A ranking orders only significant differences: `<` between "
     << "neighbours that differ, `≈` where they do not (≈ is not transitive).\n\n";
  const std::vector<Metric> key = {ppl, acc, {Quantity::PerplexityRatio, xm}, {Quantity::TaskTokenF1, 1}};
  for (const Metric& m : key) {
    md << "**" << m.name() << "** (" << (m.lower_is_better() ? "lower" : "higher") << " is better): "
       << ranking(r, c.methods, m) << "\n\n";
    std::vector<std::string> header = {"p-value"};
    header.insert(header.end(), c.methods.begin(), c.methods.end());
    Table t(header);
    for (const auto& a : c.methods) {
      std::vector<std::string> row = {a};
      for (const auto& bm : c.methods) {
        if (a == bm) {
          row.push_back("—");
          continue;
        }
        const WelchTest w = welch_test(values(r, a, m), values(r, bm, m));
        if (!w.testable) {
          row.push_back("n/a");
          continue;
        }
        const int o = significant_order(w);
        row.push_back(num(w.p, 3) + (o < 0 ? " (lower)" : o > 0 ? " (higher)" : ""));
      }
      t.row(row);
    }
    md << "<details><summary>pairwise p-values (row vs column)</summary>\n\n" << t.markdown() << "\n</details>\n\n";
  }

  md << "## The article's claims\n\n";
  Table claims({"", "claim", "metric", "measured", "verdict", "why"}, /*text=*/true);
  for (const auto& v : judge_claims(r))
    claims.row({v.id, v.claim, v.metric, v.measured, "**" + v.verdict + "**", v.why});
  if (r.encoder)  // claim (b) where the article made it: a bidirectional encoder's classification and labelling
    for (const auto& v : judge_encoder_claims(*r.encoder))
      claims.row({"b (encoder)", v.claim, v.metric, v.measured, "**" + v.verdict + "**", v.why});
  md << claims.markdown() << "\n";

  md << "## Length extrapolation: validation perplexity at multiples of the training length\n\n"
     << "Non-overlapping windows over the same validation text (about " << c.eval_tokens
     << " scored tokens per length).\n\n";
  std::vector<std::string> eh = {"method"};
  for (int64_t k : c.eval_multipliers) eh.push_back(std::to_string(k) + "x (" + std::to_string(k * block) + ")");
  Table ext(eh);
  for (const auto& row : rows(r)) {
    std::vector<std::string> cells = {row};
    for (int64_t k : c.eval_multipliers) cells.push_back(cell(summary(r, row, {Quantity::Perplexity, k}), 2));
    ext.row(cells);
  }
  md << ext.markdown() << "\n";

  md << "## Synthetic " << c.task << " task (trained at " << c.task_length << " symbols)\n\n";
  std::vector<std::string> th = {"method"};
  for (int64_t k : c.task_multipliers) th.push_back("exact match / F1 at " + std::to_string(k * c.task_length));
  Table task(th);
  for (const auto& m : c.methods) {
    std::vector<std::string> cells = {m};
    for (int64_t k : c.task_multipliers)
      cells.push_back(cell(summary(r, m, {Quantity::TaskExactMatch, k}), 2) + " / " +
                      cell(summary(r, m, {Quantity::TaskTokenF1, k}), 2));
    task.row(cells);
  }
  md << task.markdown() << "\n";

  const double noise = r.cost.noise();
  md << "## Cost (interleaved benchmark, not training time)\n\n"
     << r.cost.rounds << " rounds after a warm-up, every method once per round and length, " << r.cost.threads
     << " threads; median time with [min, max]. Noise figure: the median (max - min) / median over all measurements "
     << "is " << num(100 * noise, 1) << "%; a difference smaller than that is inside the noise. Memory: the peak "
     << "of posgrad's allocator during the training step (not the RSS). Parameters of the benchmark models "
     << "(256-symbol vocabulary, block_size = T).\n\n";
  std::vector<std::string> ch = {"method", "position parameters"};
  for (int64_t T : r.cost.lengths) {
    ch.push_back("step T=" + std::to_string(T) + " (ms)");
    ch.push_back("attention T=" + std::to_string(T) + " (ms)");
  }
  ch.push_back("peak memory at T=" + (r.cost.lengths.empty() ? std::string("?") : std::to_string(r.cost.lengths.back())) + " (MiB)");
  Table cost(ch);
  for (const auto& m : c.methods) {
    const Summary pp = summary(r, m, {Quantity::PositionParameters, 1});  // exact: the same for every seed
    std::vector<std::string> cells = {m, pp.n ? num(pp.mean, 0) : "n/a"};
    const CostRow* last = nullptr;
    for (int64_t T : r.cost.lengths)
      for (const std::string what : {"step", "attention"}) {
        const CostRow* x = r.cost.find(m, what, T);
        if (!x || x->seconds.empty()) {
          cells.push_back("n/a");
          continue;
        }
        const auto [lo, hi] = std::minmax_element(x->seconds.begin(), x->seconds.end());
        cells.push_back(num(1e3 * x->median(), 2) + " [" + num(1e3 * *lo, 2) + ", " + num(1e3 * *hi, 2) + "]");
        if (what == std::string("step")) last = x;
      }
    cells.push_back(last ? num(static_cast<double>(last->peak_bytes) / (1 << 20), 1) : "n/a");
    cost.row(cells);
  }
  md << cost.markdown() << "\n";
  for (int64_t T : r.cost.lengths) {  // which step times are inside the noise of the cheapest
    const CostRow* best = nullptr;
    for (const auto& m : c.methods) {
      const CostRow* x = r.cost.find(m, "step", T);
      if (x && !x->seconds.empty() && (!best || x->median() < best->median())) best = x;
    }
    if (!best) continue;
    std::string close;
    for (const auto& m : c.methods) {
      const CostRow* x = r.cost.find(m, "step", T);
      if (x && x != best && !x->seconds.empty() && x->median() < best->median() * (1 + noise))
        close += (close.empty() ? "" : ", ") + m;
    }
    md << "- T=" << T << ": cheapest step " << best->method << " (" << num(1e3 * best->median(), 2) << " ms)"
       << (close.empty() ? "; every other method is dearer by more than the noise" : "; inside the noise of it: " + close)
       << "\n";
  }

  md << "\n" << suite_markdown(r, fs::exists(fs::path(path).parent_path() / "plots" / "suite_accuracy.png"));
  md << pi_markdown(r, fs::exists(fs::path(path).parent_path() / "plots" / "pi_ppl_vs_length.png"));
  md << passkey_markdown(r, (fs::path(path).parent_path() / "plots").string());
  if (r.encoder) md << encoder_report_markdown(*r.encoder) << "\n";
  md << "## Plots\n\n";
  for (const auto& p : plots) md << "![" << p << "](plots/" << p << ".png)\n\n";
  if (plots.size() < 4) md << "(Some plots could not be drawn: is gnuplot installed?)\n\n";
  md << "Files: `results.json` (the typed result: every unit, the cost benchmark, the provenance; `posgrad report "
     << "DIR` re-renders this report from it), `results.csv` (every metric with its interval; byte-identical for "
     << "the same seeds and threads), `cost.csv`, one run directory per method and seed.\n";
  write_file_atomic(path, md.str());
}

namespace {

// A signal (train/interrupt.h) while the report is rendered: nothing of the new report is in place
// yet, so the previous one stands whole.
void poll_interrupt(const std::string& dir, const std::string& staging) {
  if (!interrupt_requested()) return;
  std::error_code ec;
  fs::remove_all(staging, ec);
  throw Interrupted(std::string("interrupted by ") + signal_name(interrupt_signal()) + " while writing the report of " +
                        dir + "; its results.json is complete and the previous report (if any) is kept",
                    dir, 0, interrupt_signal());
}

// Renders every output into `staging` (a fresh folder inside the experiment directory), polling for
// a signal between outputs. Returns the names of the files written there, report.md last.
std::vector<std::string> render(const ComparisonResult& r, const std::string& dir, const std::string& staging) {
  std::vector<std::string> files;
  auto step = [&](const std::string& name) {
    files.push_back(name);
    poll_interrupt(dir, staging);
  };
  if (r.encoder) {
    write_file_atomic(staging + "/encoder_results.csv", encoder_results_csv(*r.encoder));
    step("encoder_results.csv");
  }
  if (r.config.track == "encoder") {  // no decoder units: the encoder track's section is the report
    POSGRAD_CHECK(r.encoder.has_value(), IoError, dir, ": an encoder-track comparison without encoder results");
    std::ostringstream md;
    md << "# posgrad position-encoding comparison: encoder track\n\nMeasured, not illustrative: every number below "
       << "comes from the runs of this experiment (commit " << r.provenance.git_commit << ", " << r.provenance.cpu
       << ", " << r.provenance.threads << " threads). Files: `results.json` (under \"encoder\"), "
       << "`encoder_results.csv` (every value per seed).\n\n"
       << encoder_report_markdown(*r.encoder);
    write_file_atomic(staging + "/report.md", md.str());
    step("report.md");
    return files;
  }
  const std::string plots_dir = staging + "/plots";
  write_results_csv(r, staging + "/results.csv");
  step("results.csv");
  write_cost_csv(r, staging + "/cost.csv");
  step("cost.csv");
  const auto plots = write_plots(r, plots_dir);
  step("plots");
  write_suite_csv(r, staging + "/suite.csv");
  write_suite_plots(r, plots_dir);
  step("suite.csv");
  write_pi_csv(r, staging + "/pi.csv");
  write_pi_plot(r, plots_dir);
  step("pi.csv");
  write_passkey_csv(r, staging + "/passkey.csv");
  write_passkey_plots(r, plots_dir);
  step("passkey.csv");
  write_markdown(r, plots, staging + "/report.md");
  step("report.md");
  return files;
}

}  // namespace

std::string write_report(const ComparisonResult& r) {
  const std::string dir = r.config.out_dir;
  fs::create_directories(dir);
  // Rendered aside, then moved into place: each file by one rename (atomic), the plots folder
  // swapped whole (no stale plot stands for new results), report.md last. A render that fails or is
  // interrupted leaves the previous report as it was.
  const std::string staging = dir + "/.report-new";
  fs::remove_all(staging);
  fs::create_directories(staging + "/plots");
  std::vector<std::string> files;
  try {
    files = render(r, dir, staging);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(staging, ec);
    throw;
  }
  for (const auto& f : files) {
    if (f == "report.md") continue;
    if (f == "plots") {
      const std::string old = dir + "/.plots-old";
      fs::remove_all(old);
      if (fs::exists(dir + "/plots")) fs::rename(dir + "/plots", old);
      fs::rename(staging + "/plots", dir + "/plots");
      fs::remove_all(old);
    } else {
      fs::rename(staging + "/" + f, dir + "/" + f);
    }
  }
  fs::rename(staging + "/report.md", dir + "/report.md");
  fs::remove_all(staging);
  fsync_dir(dir);
  return dir + "/report.md";
}

std::string rerender_report(const std::string& run_dir) {
  POSGRAD_CHECK(!run_dir.empty(), UsageError, "RUN_DIR is empty: name the experiment directory (it holds results.json)");
  const std::string path = run_dir + "/results.json";
  if (!fs::exists(path)) throw IoError("no results.json in '" + run_dir + "' (run posgrad compare there first)");
  // Schema, ranges and consistency with its own configuration (compare/results.h): IoError naming the value.
  ComparisonResult r = read_comparison(read_file(path), path);
  r.config.out_dir = run_dir;  // render where the results are, wherever the run was made
  const DirectoryLock hold(run_dir);  // not while a compare writes there (data/process.h)
  return write_report(r);
}

}  // namespace posgrad::train
