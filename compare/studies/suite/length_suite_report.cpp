// length_suite_report.cpp — see length_suite_report.h.
#include "compare/studies/suite/length_suite_report.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/fileio.h"
#include "data/length_tasks.h"
#include "compare/markdown.h"
#include "compare/rows.h"
#include "compare/stats.h"

namespace posgrad::train {

namespace fs = std::filesystem;

namespace {

using markdown::num;
using markdown::run_gnuplot;

// Suite tables label each row with a task and a method: two left-aligned columns.
struct Table : markdown::Table {
  explicit Table(std::vector<std::string> header, bool text = false) : markdown::Table(std::move(header), text, 2) {}
};

// Accuracies: the interval is clipped to [0, 1].
std::string cell(const Summary& s) { return markdown::bounded_cell(s, 2, 0.0, 1.0); }

const SuiteTaskResult* find(const UnitResult& u, const std::string& task, bool randomized) {
  for (const auto& s : u.parts.value<SuiteResult>().tasks)
    if (s.task == task && s.randomized == randomized) return &s;
  return nullptr;
}

// "rope+randomized" -> (`rope`, true).
std::pair<std::string, bool> split_row(const std::string& row) {
  Row r = Row::parse(row);
  const bool randomized = r.randomized;
  r.randomized = false;
  return {r.name(), randomized};
}

std::string bucket_name(const CompareConfig& c, size_t k) {
  const int64_t lo = static_cast<int64_t>(k) * c.of<SuiteSettings>().length + 1, hi = static_cast<int64_t>(k + 1) * c.of<SuiteSettings>().length;
  return std::to_string(lo) + "–" + std::to_string(hi) + (k == 0 ? " (train)" : "");
}

size_t n_buckets(const ComparisonResult& r) {
  size_t n = 0;
  for (const auto& u : r.units)
    for (const auto& s : u.parts.value<SuiteResult>().tasks) n = std::max(n, s.buckets.size());
  return n;
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? NAN : s / static_cast<double>(v.size());
}

// Per-seed mean per-token accuracy over the out-of-distribution buckets.
std::vector<double> ood_token_values(const ComparisonResult& r, const std::string& row, const std::string& task) {
  return suite_ood_values(r, row, task, /*sequence=*/false);
}

}  // namespace

std::vector<std::string> suite_rows(const ComparisonResult& r) {
  std::vector<std::string> out;
  for (const auto& m : r.config.methods)
    for (bool randomized : {false, true}) {
      bool any = false;
      for (const auto& u : r.units)
        if (u.method == m)
          for (const auto& s : u.parts.value<SuiteResult>().tasks) any = any || s.randomized == randomized;
      if (any) out.push_back(suite_row(m, randomized));
    }
  return out;
}

std::vector<std::string> suite_tasks_present(const ComparisonResult& r) {
  std::vector<std::string> out;
  for (const auto& t : r.config.of<SuiteSettings>().tasks) {
    bool any = false;
    for (const auto& u : r.units)
      for (const auto& s : u.parts.value<SuiteResult>().tasks) any = any || s.task == t;
    if (any) out.push_back(t);
  }
  return out;
}

std::vector<double> suite_values(const ComparisonResult& r, const std::string& row, const std::string& task,
                                 size_t bucket, bool sequence) {
  const auto [method, randomized] = split_row(row);
  std::vector<double> v;
  for (uint64_t seed : r.config.seeds)
    for (const auto& u : r.units) {
      if (u.method != method || u.seed != seed) continue;
      const SuiteTaskResult* s = find(u, task, randomized);
      if (!s || bucket >= s->buckets.size()) continue;
      v.push_back(sequence ? s->buckets[bucket].sequence_accuracy : s->buckets[bucket].token_accuracy);
    }
  return v;
}

std::vector<double> suite_ood_values(const ComparisonResult& r, const std::string& row, const std::string& task,
                                     bool sequence) {
  const auto [method, randomized] = split_row(row);
  std::vector<double> v;
  for (uint64_t seed : r.config.seeds)
    for (const auto& u : r.units) {
      if (u.method != method || u.seed != seed) continue;
      const SuiteTaskResult* s = find(u, task, randomized);
      if (!s || s->buckets.size() < 2) continue;
      double m = 0;
      for (size_t k = 1; k < s->buckets.size(); ++k) m += sequence ? s->buckets[k].sequence_accuracy : s->buckets[k].token_accuracy;
      v.push_back(m / static_cast<double>(s->buckets.size() - 1));
    }
  return v;
}

void write_suite_csv(const ComparisonResult& r, const std::string& path) {
  std::ostringstream o;
  o << "row,task,lo,hi,metric,n,mean,std,ci_low,ci_high\n";
  const size_t nb = n_buckets(r);
  for (const auto& task : suite_tasks_present(r))
    for (const auto& row : suite_rows(r))
      for (size_t k = 0; k < nb; ++k)
        for (bool sequence : {true, false}) {
          const Summary s = summarize(suite_values(r, row, task, k, sequence));
          if (!s.n) continue;
          o << row << "," << task << "," << static_cast<int64_t>(k) * r.config.of<SuiteSettings>().length + 1 << ","
            << static_cast<int64_t>(k + 1) * r.config.of<SuiteSettings>().length << ","
            << (sequence ? "sequence_accuracy" : "token_accuracy") << "," << s.n << "," << num(s.mean, 6) << ","
            << num(s.std, 6) << "," << num(s.ci_low, 6) << "," << num(s.ci_high, 6) << "\n";
        }
  write_file_atomic(path, o.str());
}

std::vector<std::string> write_suite_plots(const ComparisonResult& r, const std::string& dir) {
  const auto tasks = suite_tasks_present(r);
  if (tasks.empty()) return {};
  fs::create_directories(dir);
  const std::string d = fs::absolute(dir).string();
  const CompareConfig& c = r.config;
  const auto rows = suite_rows(r);
  const size_t nb = n_buckets(r);
  const int cols = std::min<int>(3, static_cast<int>(tasks.size()));
  const int nrows = (static_cast<int>(tasks.size()) + cols - 1) / cols;
  std::ofstream dat(d + "/suite_accuracy.dat");
  std::ostringstream gp;
  gp << markdown::gnuplot_style(std::max(900, 480 * cols), 360 * nrows + 60, 9)
     << "set output 'suite_accuracy.png'\nset yrange [-0.02:1.02]\nset key bottom left font ',7'\n"
     << "set multiplot layout " << nrows << "," << cols << " title \"Per-sequence accuracy vs input length\\n(bucket "
     << "midpoint; mean and 95% interval over " << c.seeds.size() << " seeds; trained on 1.." << c.of<SuiteSettings>().length << ")\"\n";
  int idx = 0;
  for (const auto& task : tasks) {
    std::string plot = "plot ";
    bool first = true;
    for (const auto& row : rows) {
      dat << "# " << task << " " << row << "\n";
      int points = 0;
      for (size_t k = 0; k < nb; ++k) {
        const Summary s = summarize(suite_values(r, row, task, k, true));
        if (!s.n) continue;
        ++points;
        const double mid = static_cast<double>(k) * static_cast<double>(c.of<SuiteSettings>().length) + (1.0 + static_cast<double>(c.of<SuiteSettings>().length)) / 2.0;
        dat << mid << " " << s.mean << " " << (s.has_interval() ? std::max(0.0, s.ci_low) : s.mean) << " "
            << (s.has_interval() ? std::min(1.0, s.ci_high) : s.mean) << "\n";
      }
      dat << "\n\n";
      if (points) {
        const bool rnd = split_row(row).second;
        plot += std::string(first ? "" : ", ") + "'suite_accuracy.dat' index " + std::to_string(idx) +
                " with yerrorlines " + (rnd ? "dt 2 lw 1" : "lw 2") + " title '" + row + "'";
        first = false;
      }
      ++idx;
    }
    gp << "set title '" << task << "'\nset xlabel 'input length'\nset ylabel 'accuracy'\nset arrow from "
       << static_cast<double>(c.of<SuiteSettings>().length) + 0.5 << ",graph 0 to " << static_cast<double>(c.of<SuiteSettings>().length) + 0.5
       << ",graph 1 nohead dt 3\n";
    if (!first) gp << plot << "\n";
    gp << "unset arrow\n";
  }
  gp << "unset multiplot\n";
  dat.close();
  {
    std::ofstream f(d + "/suite_accuracy.gp");
    f << gp.str();
  }
  if (run_gnuplot(d, "suite_accuracy.gp") && fs::exists(d + "/suite_accuracy.png")) return {"suite_accuracy"};
  return {};
}

namespace {

// The accuracy tables by input length, per sequence and per token.
void accuracy_tables(std::ostringstream& md, const ComparisonResult& r, const std::vector<std::string>& tasks,
                     const std::vector<std::string>& rows) {
  const CompareConfig& c = r.config;
  const size_t nb = n_buckets(r);
  for (bool sequence : {true, false}) {
    md << "### " << (sequence ? "Per-sequence" : "Per-token") << " accuracy by input length\n\n";
    std::vector<std::string> header = {"task", "row"};
    for (size_t k = 0; k < nb; ++k) header.push_back(bucket_name(c, k));
    Table t(header);
    for (const auto& task : tasks)
      for (const auto& row : rows) {
        std::vector<std::string> cells = {task, row};
        for (size_t k = 0; k < nb; ++k) cells.push_back(cell(summarize(suite_values(r, row, task, k, sequence))));
        t.row(cells);
      }
    md << t.markdown() << "\n";
  }
}

// Sizing: some row must learn the task in distribution, else the task says nothing about length.
void sizing_check(std::ostringstream& md, const ComparisonResult& r, const std::vector<std::string>& tasks,
                  const std::vector<std::string>& rows) {
  md << "### Sizing check (in distribution, per-sequence accuracy ≥ 0.9 for some row)\n\n";
  for (const auto& task : tasks) {
    std::string best;
    double best_v = -1;
    for (const auto& row : rows) {
      const Summary s = summarize(suite_values(r, row, task, 0, true));
      if (s.n && s.mean > best_v) best_v = s.mean, best = row;
    }
    md << "- " << task << ": best " << best << " " << num(best_v, 2)
       << (best_v >= 0.9 ? " — sized" : " — **mis-sized at this budget: no row learns the task in distribution**") << "\n";
  }
  md << "\n";
}

// Separations: pairs whose 95% intervals of the out-of-distribution mean do not overlap.
void separations(std::ostringstream& md, const ComparisonResult& r, const std::vector<std::string>& tasks,
                 const std::vector<std::string>& rows) {
  const CompareConfig& c = r.config;
  md << "### Separations out of distribution\n\nMean per-sequence accuracy over the buckets beyond " << c.of<SuiteSettings>().length
     << " (per seed, then summarised); pairs of rows whose 95% intervals do not overlap:\n\n";
  int separated = 0;
  for (const auto& task : tasks) {
    std::vector<std::pair<std::string, Summary>> s;
    for (const auto& row : rows) {
      const Summary x = summarize(suite_ood_values(r, row, task));
      if (x.n) s.emplace_back(row, x);
    }
    std::sort(s.begin(), s.end(), [](const auto& a, const auto& b) { return a.second.mean > b.second.mean; });
    std::string pairs;
    int count = 0;
    for (size_t i = 0; i < s.size(); ++i)
      for (size_t j = i + 1; j < s.size(); ++j)
        if (s[i].second.has_interval() && s[j].second.has_interval() && s[i].second.ci_low > s[j].second.ci_high) {
          ++count;
          if (count <= 6) pairs += (pairs.empty() ? "" : "; ") + s[i].first + " > " + s[j].first;
        }
    separated += count;
    md << "- " << task << ": " << (s.empty() ? "n/a" : "best " + s.front().first + " " + num(s.front().second.mean, 2))
       << ", " << count << " separated pair(s)" << (pairs.empty() ? "" : ": " + pairs + (count > 6 ? "; ..." : "")) << "\n";
  }
  md << "\n" << separated << " separated pair(s) in all.\n\n";
}

// Randomized positions against plain, where the suite has randomized rows.
void randomized_against_plain(std::ostringstream& md, const ComparisonResult& r, const std::vector<std::string>& tasks,
                              const std::vector<std::string>& rows) {
  bool any_rnd = false;
  for (const auto& row : rows) any_rnd = any_rnd || split_row(row).second;
  if (any_rnd) {
    md << "### Randomized positions against plain (out of distribution)\n\n"
       << "Difference of the mean out-of-distribution accuracy, randomized − plain, Welch's 95% interval and p "
       << "(Ruoss et al. 2023 report +12.0 points of accuracy on average over their tasks and encodings).\n\n";
    Table t({"task", "method", "per-sequence diff [95%]", "p", "per-token diff [95%]", "p"});
    for (const auto& task : tasks)
      for (const auto& row : rows) {
        const auto [method, rnd] = split_row(row);
        if (!rnd) continue;
        const WelchTest ws = welch_test(suite_ood_values(r, row, task), suite_ood_values(r, method, task));
        const WelchTest wt = welch_test(ood_token_values(r, row, task), ood_token_values(r, method, task));
        auto fmt = [](const WelchTest& w) {
          return w.testable ? num(w.diff, 3) + " [" + num(w.ci_low, 3) + ", " + num(w.ci_high, 3) + "]" : "n/a";
        };
        t.row({task, method, fmt(ws), ws.testable ? num(ws.p, 4) : "n/a", fmt(wt), wt.testable ? num(wt.p, 4) : "n/a"});
      }
    md << t.markdown() << "\n";
  }
}

}  // namespace

std::string suite_markdown(const ComparisonResult& r, bool plot_drawn) {
  const auto tasks = suite_tasks_present(r);
  if (tasks.empty()) return "";
  const CompareConfig& c = r.config;
  const auto rows = suite_rows(r);
  std::ostringstream md;
  md << "## Length generalisation suite\n\n"
     << "Tasks of Delétang et al. 2023 (\"Neural Networks and the Chomsky Hierarchy\"), the suite Ruoss et al. 2023 "
     << "(\"Randomized Positional Encodings Boost Length Generalization of Transformers\") also use. Each task trains its "
     << "own decoder (" << c.of<TaskSettings>().n_layer << " layers, width " << c.of<TaskSettings>().n_embd << ", " << c.of<TaskSettings>().n_head << " heads) for "
     << c.of<SuiteSettings>().iters << " steps of " << c.of<SuiteSettings>().batch << " sequences, each step at one input length drawn uniformly from 1.."
     << c.of<SuiteSettings>().length << "; format `[BOS] input [SEP] answer`, loss on the answer only. Scored on " << c.of<SuiteSettings>().examples
     << " fixed examples per length bucket (the same for every row and seed) by the argmax at each answer position "
     << "given the true prefix: per-sequence accuracy (every answer token right; equal to greedy decoding's exact match) "
     << "and per-token accuracy (the fraction of answer tokens right, the measure of Delétang et al.). "
     << "`+randomized` rows are trained with randomized positions (Ruoss et al. 2023): each batch takes an ordered random "
     << "subset of positions from [0, L_max), L_max the longest test sequence; evaluation uses 0..T-1. Cells: mean ± std "
     << "[95% interval] over " << c.seeds.size() << " seeds.\n\n";
  Table tasks_table({"task", "level", "source", "what"}, true);
  for (const auto& t : tasks) {
    const auto task = data::make_length_task(t);
    tasks_table.row({t, data::chomsky_level_name(task->level()), task->source(), task->description()});
  }
  md << tasks_table.markdown() << "\n";
  accuracy_tables(md, r, tasks, rows);
  sizing_check(md, r, tasks, rows);
  separations(md, r, tasks, rows);
  randomized_against_plain(md, r, tasks, rows);
  if (plot_drawn) md << "![suite_accuracy](plots/suite_accuracy.png)\n\n";
  return md.str();
}

std::vector<ClaimVerdict> judge_suite_claims(const ComparisonResult& r) {
  std::vector<ClaimVerdict> out;
  const auto tasks = suite_tasks_present(r);
  if (tasks.empty() || n_buckets(r) < 2) return out;
  const auto rows = suite_rows(r);
  {  // (s1) standard encodings fail beyond N.
    ClaimVerdict v;
    v.id = "s1";
    v.claim = "Standard encodings (none, sinusoidal, learned, relative, RoPE, ALiBi) mostly fail beyond the training "
              "length (Delétang et al. 2023; Ruoss et al. 2023 §4)";
    v.metric = "per-token accuracy, training bucket vs the mean of the longer buckets, plain rows that learn the task (≥ 0.9 in distribution)";
    int drop = 0, hold = 0, unclear = 0;
    std::string measured;
    for (const auto& task : tasks)
      for (const auto& row : rows) {
        if (split_row(row).second) continue;
        const auto in = suite_values(r, row, task, 0, false);
        const auto ood = ood_token_values(r, row, task);
        if (in.empty() || ood.empty() || mean_of(in) < 0.9) continue;
        const WelchTest w = welch_test(ood, in);
        const int o = significant_order(w);
        if (o < 0) ++drop;
        else if (!w.testable || mean_of(ood) < 0.9) ++unclear;
        else ++hold;
      }
    measured = std::to_string(drop) + " (task, row) pairs drop significantly, " + std::to_string(hold) +
               " hold ≥ 0.9 without a significant drop, " + std::to_string(unclear) + " neither";
    v.measured = measured;
    const int total = drop + hold + unclear;
    if (total == 0) {
      v.verdict = "inconclusive";
      v.why = "no plain row learns a task in distribution";
    } else if (2 * drop > total) {
      v.verdict = "supported";
      v.why = "most pairs that learn a task lose accuracy beyond it (Welch, 5%)";
    } else if (2 * hold > total) {
      v.verdict = "contradicted";
      v.why = "most pairs that learn a task keep it beyond the training length";
    } else {
      v.verdict = "inconclusive";
      v.why = "neither a majority of significant drops nor of held accuracy";
    }
    out.push_back(v);
  }
  {  // (s2) randomized positions help.
    ClaimVerdict v;
    v.id = "s2";
    v.claim = "Randomized positions raise test accuracy beyond the training length (Ruoss et al. 2023: +12.0 points on average)";
    v.metric = "per-token accuracy, mean of the longer buckets, <method>+randomized − <method> per task";
    int up = 0, down = 0, none = 0;
    std::vector<double> diffs;
    for (const auto& task : tasks)
      for (const auto& row : rows) {
        const auto [method, rnd] = split_row(row);
        if (!rnd) continue;
        const auto a = ood_token_values(r, row, task), b = ood_token_values(r, method, task);
        if (a.empty() || b.empty()) continue;
        diffs.push_back(mean_of(a) - mean_of(b));
        const int o = significant_order(welch_test(a, b));
        (o > 0 ? up : o < 0 ? down : none)++;
      }
    if (diffs.empty()) {
      v.measured = "no randomized rows";
      v.verdict = "inconclusive";
      v.why = "not measured (--suite-randomized)";
    } else {
      const double avg = mean_of(diffs);
      v.measured = "mean difference " + num(100 * avg, 1) + " points over " + std::to_string(diffs.size()) +
                   " (method, task) pairs; " + std::to_string(up) + " significantly higher, " + std::to_string(down) +
                   " lower, " + std::to_string(none) + " not significant";
      if (avg > 0 && up > down) {
        v.verdict = "supported";
        v.why = "the average difference is positive and significant gains outnumber losses (Welch, 5%)";
      } else if (avg < 0 && down > up) {
        v.verdict = "contradicted";
        v.why = "the average difference is negative and significant losses outnumber gains";
      } else {
        v.verdict = "inconclusive";
        v.why = "no clear direction at this budget";
      }
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace posgrad::train
