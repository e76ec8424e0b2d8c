// length_suite_report.cpp — see length_suite_report.h.
#include "compare/studies/suite/length_suite_report.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "compare/markdown.h"
#include "compare/rows.h"
#include "compare/stats.h"
#include "compare/studies/study_claims.h"
#include "data/fileio.h"
#include "data/length_tasks.h"

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
double clip01(double x) { return std::isnan(x) ? x : std::clamp(x, 0.0, 1.0); }

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
  const int64_t lo = static_cast<int64_t>(k) * c.of<SuiteSettings>().length + 1,
                hi = static_cast<int64_t>(k + 1) * c.of<SuiteSettings>().length;
  return std::to_string(lo) + "–" + std::to_string(hi) + (k == 0 ? " (train)" : "");
}

size_t n_buckets(const ComparisonResult& r) {
  size_t n = 0;
  for (const auto& u : r.units)
    for (const auto& s : u.parts.value<SuiteResult>().tasks) n = std::max(n, s.buckets.size());
  return n;
}

// Per seed of `row` on `task`: the per-sequence (sequence = true) or per-token accuracy, the mean
// over buckets [first, end) (clipped to the buckets the seed has), with the examples it rests on
// (the number of buckets x the fewest examples of one). Seeds without them are left out.
std::map<uint64_t, Scored> suite_scored(const ComparisonResult& r, const std::string& row, const std::string& task,
                                        size_t first, size_t end, bool sequence) {
  const auto [method, randomized] = split_row(row);
  std::map<uint64_t, Scored> out;
  for (const auto& u : r.units) {
    if (u.method != method || std::find(r.config.seeds.begin(), r.config.seeds.end(), u.seed) == r.config.seeds.end())
      continue;
    const SuiteTaskResult* s = find(u, task, randomized);
    if (!s || s->buckets.size() <= first) continue;
    const size_t last = std::min(end, s->buckets.size());
    double sum = 0;
    int64_t fewest = s->buckets[first].examples;
    for (size_t k = first; k < last; ++k) {
      sum += sequence ? s->buckets[k].sequence_accuracy : s->buckets[k].token_accuracy;
      fewest = std::min(fewest, s->buckets[k].examples);
    }
    const auto K = static_cast<int64_t>(last - first);
    out[u.seed] = Scored{sum / static_cast<double>(K), K * fewest};
  }
  return out;
}

double scored_mean(const std::map<uint64_t, Scored>& v) {
  double s = 0;
  for (const auto& [seed, x] : v) s += x.value;
  return v.empty() ? NAN : s / static_cast<double>(v.size());
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
      for (size_t k = 1; k < s->buckets.size(); ++k)
        m += sequence ? s->buckets[k].sequence_accuracy : s->buckets[k].token_accuracy;
      v.push_back(m / static_cast<double>(s->buckets.size() - 1));
    }
  return v;
}

void write_suite_csv(const ComparisonResult& r, const std::string& path) {
  std::ostringstream o;
  o << "row,task,lo,hi,metric,n,mean,std,ci_low,ci_high\n";
  const size_t nb = n_buckets(r);
  const int64_t N = r.config.of<SuiteSettings>().length;
  for (const auto& task : suite_tasks_present(r))
    for (const auto& row : suite_rows(r))
      for (size_t k = 0; k < nb; ++k)
        for (bool sequence : {true, false}) {
          const Summary s = summarize(suite_values(r, row, task, k, sequence));
          if (!s.n) continue;
          o << row << "," << task << "," << static_cast<int64_t>(k) * N + 1 << "," << static_cast<int64_t>(k + 1) * N
            << "," << (sequence ? "sequence_accuracy" : "token_accuracy") << "," << s.n << "," << num(s.mean, 6) << ","
            << num(s.std, 6) << "," << num(clip01(s.ci_low), 6) << "," << num(clip01(s.ci_high), 6) << "\n";
        }
  write_file_atomic(path, o.str());
}

void write_suite_seeds_csv(const ComparisonResult& r, const std::string& path) {
  std::ostringstream o;
  o << "row,task,lo,hi,seed,examples,sequence_accuracy,sequence_correct,wilson_low,wilson_high,token_accuracy\n";
  const size_t nb = n_buckets(r);
  const int64_t N = r.config.of<SuiteSettings>().length;
  for (const auto& task : suite_tasks_present(r))
    for (const auto& row : suite_rows(r))
      for (size_t k = 0; k < nb; ++k) {
        const auto seq = suite_scored(r, row, task, k, k + 1, true), tok = suite_scored(r, row, task, k, k + 1, false);
        for (const auto& [seed, x] : seq) {
          const auto w = wilson_of(x);
          o << row << "," << task << "," << static_cast<int64_t>(k) * N + 1 << "," << static_cast<int64_t>(k + 1) * N
            << "," << seed << "," << x.examples << "," << num(x.value, 6) << ","
            << (w ? std::to_string(std::llround(x.value * static_cast<double>(x.examples))) : "n/a") << ","
            << (w ? num(w->low, 6) : "n/a") << "," << (w ? num(w->high, 6) : "n/a") << "," << num(tok.at(seed).value, 6)
            << "\n";
        }
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
     << "midpoint; mean and 95% interval over " << c.seeds.size() << " seeds; trained on 1.."
     << c.of<SuiteSettings>().length << ")\"\n";
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
        const double mid = static_cast<double>(k) * static_cast<double>(c.of<SuiteSettings>().length) +
                           (1.0 + static_cast<double>(c.of<SuiteSettings>().length)) / 2.0;
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
       << static_cast<double>(c.of<SuiteSettings>().length) + 0.5 << ",graph 0 to "
       << static_cast<double>(c.of<SuiteSettings>().length) + 0.5 << ",graph 1 nohead dt 3\n";
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

// The accuracy tables by input length, per sequence and per token: the mean over seeds (its seed
// interval clipped to [0, 1]); with one seed a per-sequence cell is that model's count with Wilson's
// interval. Then each seed's per-sequence accuracy with Wilson's interval, folded.
void accuracy_tables(std::ostringstream& md, const ComparisonResult& r, const std::vector<std::string>& tasks,
                     const std::vector<std::string>& rows) {
  const CompareConfig& c = r.config;
  const size_t nb = n_buckets(r);
  std::vector<std::string> header = {"task", "row"};
  for (size_t k = 0; k < nb; ++k) header.push_back(bucket_name(c, k));
  for (bool sequence : {true, false}) {
    md << "### " << (sequence ? "Per-sequence" : "Per-token") << " accuracy by input length\n\n";
    Table t(header);
    for (const auto& task : tasks)
      for (const auto& row : rows) {
        std::vector<std::string> cells = {task, row};
        for (size_t k = 0; k < nb; ++k) {
          const auto one = suite_scored(r, row, task, k, k + 1, sequence);
          cells.push_back(sequence && one.size() == 1 ? wilson_text(one.begin()->second, 2)
                                                      : cell(summarize(suite_values(r, row, task, k, sequence))));
        }
        t.row(cells);
      }
    md << t.markdown() << "\n";
  }
  if (c.seeds.size() < 2) return;
  std::vector<std::string> h = {"task", "row", "seed"};
  h.insert(h.end(), header.begin() + 2, header.end());
  Table t(h);
  for (const auto& task : tasks)
    for (const auto& row : rows)
      for (uint64_t seed : c.seeds) {
        std::vector<std::string> cells = {task, row, std::to_string(seed)};
        bool any = false;
        for (size_t k = 0; k < nb; ++k) {
          const auto one = suite_scored(r, row, task, k, k + 1, true);
          const auto it = one.find(seed);
          any = any || it != one.end();
          cells.push_back(it == one.end() ? "n/a" : wilson_text(it->second, 2));
        }
        if (any) t.row(cells);
      }
  md << "<details><summary>per-sequence accuracy of each model (seed), with Wilson's 95% interval of its "
        "count</summary>\n\n"
     << t.markdown() << "\n</details>\n\n";
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
       << (best_v >= 0.9 ? " — sized" : " — **mis-sized at this budget: no row learns the task in distribution**")
       << "\n";
  }
  md << "\n";
}

// Separations: pairs whose 95% intervals of the out-of-distribution mean do not overlap.
void separations(std::ostringstream& md, const ComparisonResult& r, const std::vector<std::string>& tasks,
                 const std::vector<std::string>& rows) {
  const CompareConfig& c = r.config;
  md << "### Separations out of distribution\n\nMean per-sequence accuracy over the buckets beyond "
     << c.of<SuiteSettings>().length
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
       << ", " << count << " separated pair(s)" << (pairs.empty() ? "" : ": " + pairs + (count > 6 ? "; ..." : ""))
       << "\n";
  }
  md << "\n" << separated << " separated pair(s) in all.\n\n";
}

// Randomized positions against plain, where the suite has randomized rows: the paired difference
// of the out-of-distribution accuracy with the interval of the claims (margin_test, margin 0).
void randomized_against_plain(std::ostringstream& md, const ComparisonResult& r, const std::vector<std::string>& tasks,
                              const std::vector<std::string>& rows) {
  bool any_rnd = false;
  for (const auto& row : rows) any_rnd = any_rnd || split_row(row).second;
  if (!any_rnd) return;
  md << "### Randomized positions against plain (out of distribution)\n\n"
     << "Difference of the out-of-distribution accuracy (the mean over the buckets beyond the training length), "
     << "randomized − plain, paired by seed; its 95% interval covers the seeds' noise and a bound on the test "
        "examples' "
     << "(the two rows are scored on the same examples), p against no difference (Ruoss et al. 2023 report +12.0 "
        "points "
     << "of accuracy on average over their tasks and encodings).\n\n";
  Table t({"task", "method", "per-sequence diff [95%]", "p", "per-token diff [95%]", "p"});
  const size_t nb = n_buckets(r);
  for (const auto& task : tasks)
    for (const auto& row : rows) {
      const auto [method, rnd] = split_row(row);
      if (!rnd) continue;
      std::vector<std::string> cells = {task, method};
      for (bool sequence : {true, false}) {
        const MarginTest m = margin_test("", suite_scored(r, row, task, 1, nb, sequence),
                                         suite_scored(r, method, task, 1, nb, sequence), true, 0.0);
        cells.push_back(margin_text(m, 3));
        cells.push_back(m.test.testable ? p_text(m.test.p) : "n/a");
      }
      t.row(cells);
    }
  md << t.markdown() << "\n";
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
     << "(\"Randomized Positional Encodings Boost Length Generalization of Transformers\") also use. Each task trains "
        "its "
     << "own decoder (" << c.of<TaskSettings>().n_layer << " layers, width " << c.of<TaskSettings>().n_embd << ", "
     << c.of<TaskSettings>().n_head << " heads) for " << c.of<SuiteSettings>().iters << " steps of "
     << c.of<SuiteSettings>().batch << " sequences, each step at one input length drawn uniformly from 1.."
     << c.of<SuiteSettings>().length << "; format `[BOS] input [SEP] answer`, loss on the answer only. Scored on "
     << c.of<SuiteSettings>().examples
     << " fixed examples per length bucket (the same for every row and seed) by the argmax at each answer position "
     << "given the true prefix: per-sequence accuracy (every answer token right; equal to greedy decoding's exact "
        "match) "
     << "and per-token accuracy (the fraction of answer tokens right, the measure of Delétang et al.). "
     << "`+randomized` rows are trained with randomized positions (Ruoss et al. 2023): each batch takes an ordered "
        "random "
     << "subset of positions from [0, L_max), L_max the longest test sequence; evaluation uses 0..T-1. Cells: mean ± "
        "std "
     << "[95% interval] over " << c.seeds.size() << " seed" << (c.seeds.size() == 1 ? "" : "s")
     << ", the interval clipped to [0, 1]: it covers the seeds' spread alone — every seed is scored on the same "
     << c.of<SuiteSettings>().examples << " examples per bucket, so it says nothing of how those examples were drawn. "
     << "One model's per-sequence accuracy is a count of those examples: with one seed the cell is that count with "
     << "Wilson's 95% interval (the examples' noise alone), and with more a folded table gives each seed's. Per-token "
     << "accuracy is a mean of per-example fractions, not a count: no Wilson interval. Claims s1 and s2 combine both "
     << "noises (their protocol).\n\n";
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

namespace {

// The margins of the suite's claims: the least change of per-token accuracy they claim.
constexpr double kFailDrop = 0.10;        // s1: "fails beyond the training length"
constexpr double kRandomizedGain = 0.05;  // s2: "raises test accuracy"
constexpr double kNopeMargin = 0.05;      // s3: "at or above": within 0.05 of exact match
const char* const kS1 =
    "Standard encodings (none, sinusoidal, learned, relative, RoPE, ALiBi) mostly fail beyond the "
    "training length (Delétang et al. 2023; Ruoss et al. 2023 §4)";
const char* const kS2 =
    "Randomized positions raise test accuracy beyond the training length (Ruoss et al. 2023: +12.0 "
    "points on average)";

std::string s1_metric() {
  return "per-token accuracy, training bucket − mean of the longer buckets, paired by seed (the same model), one test "
         "per (task, plain row) that learns the task (≥ 0.9 in distribution); margin: a drop of at least " +
         num(kFailDrop, 2);
}
std::string s2_metric() {
  return "per-token accuracy, mean of the longer buckets, <method>+randomized − <method>, paired by seed (the same "
         "examples and training data), one test per (task, method); margin: a gain of at least " +
         num(kRandomizedGain, 2);
}

// "600 steps of 32 sequences (lengths 1..6) per task x 3 seeds; 36 test examples per bucket".
std::string suite_budget(const ComparisonResult& r) {
  const SuiteSettings& s = r.config.of<SuiteSettings>();
  const size_t n = r.config.seeds.size();
  return std::to_string(s.iters) + " steps of " + std::to_string(s.batch) + " sequences (lengths 1.." +
         std::to_string(s.length) + ") per task x " + std::to_string(n) + " seed" + (n == 1 ? "" : "s") + "; " +
         std::to_string(s.examples) + " test examples per bucket";
}

std::string suite_protocol(const ComparisonResult& r) {
  const CompareConfig& c = r.config;
  const size_t nb = n_buckets(r);
  const int64_t N = c.of<SuiteSettings>().length;
  return "per-token accuracy, teacher-forced argmax; training bucket 1–" + std::to_string(N) +
         ", beyond: the mean of " + std::to_string(nb - 1) + " bucket(s) " + std::to_string(N + 1) + "–" +
         std::to_string(static_cast<int64_t>(nb) * N) + " (" +
         std::to_string(static_cast<int64_t>(nb - 1) * c.of<SuiteSettings>().examples) +
         " examples), the same examples for every row and seed; intervals: the seeds' noise and a bound on the test "
         "examples' (study_claims.h)";
}

// Every plain row that learns a task in distribution must lose at least kFailDrop beyond it.
ClaimVerdict claim_s1(const ComparisonResult& r, const std::vector<std::string>& tasks,
                      const std::vector<std::string>& rows) {
  std::vector<ClaimTest> tests;
  std::string measured, unlearned;
  for (const auto& task : tasks)
    for (const auto& row : rows) {
      if (split_row(row).second) continue;
      const auto in = suite_scored(r, row, task, 0, 1, false), ood = suite_scored(r, row, task, 1, n_buckets(r), false);
      if (in.empty() || ood.empty()) continue;
      const double learned = scored_mean(in);
      if (learned < 0.9) {
        unlearned += (unlearned.empty() ? "" : ", ") + task + " " + row + " " + num(learned, 2);
        continue;
      }
      const MarginTest m =
          margin_test(task + " " + row + " drops by more than " + num(kFailDrop, 2), in, ood, false, kFailDrop);
      measured += (measured.empty() ? "" : "; ") + task + " " + row + " drop " + margin_text(m);
      tests.push_back(m.test);
    }
  if (!unlearned.empty())
    measured +=
        (measured.empty() ? "" : "; ") + std::string("not learned (< 0.9 in distribution, left out): ") + unlearned;
  const Judgement j = tests.empty() ? Judgement{kInconclusive,
                                                "no plain row learns a task in distribution (per-token accuracy "
                                                "≥ 0.9) at this budget: nothing can fail beyond it",
                                                0}
                                    : judge_family(tests, "");
  return claim_from("s1", kS1, s1_metric(), measured.empty() ? "n/a" : measured, j, suite_budget(r), suite_protocol(r));
}

// Every randomized row must beat its plain row beyond the training length by at least kRandomizedGain.
ClaimVerdict claim_s2(const ComparisonResult& r, const std::vector<std::string>& tasks,
                      const std::vector<std::string>& rows) {
  std::vector<ClaimTest> tests;
  std::string measured;
  for (const auto& task : tasks)
    for (const auto& row : rows) {
      const auto [method, rnd] = split_row(row);
      if (!rnd) continue;
      const auto a = suite_scored(r, row, task, 1, n_buckets(r), false),
                 b = suite_scored(r, method, task, 1, n_buckets(r), false);
      if (a.empty() || b.empty()) continue;
      const MarginTest m =
          margin_test(task + " " + row + " above " + method + " by more than " + num(kRandomizedGain, 2), a, b, true,
                      kRandomizedGain);
      measured += (measured.empty() ? "" : "; ") + task + " " + row + " − " + method + " " + margin_text(m);
      tests.push_back(m.test);
    }
  const Judgement j =
      judge_family(tests, tests.empty() ? "a randomized row (--suite-randomized, a method among --methods)" : "");
  return claim_from("s2", kS2, s2_metric(), measured.empty() ? "n/a" : measured, j, suite_budget(r), suite_protocol(r));
}

}  // namespace

namespace {

const char* const kS3 =
    "NoPE generalises at least as well as the other position encodings on copy, reverse and sort "
    "beyond the training length (Kazemnejad et al. 2023 §4)";

// The Kazemnejad et al. tasks among the suite's: copy (duplicate_string), reverse, sort (bucket_sort).
const std::vector<std::string>& kazemnejad_tasks() {
  static const std::vector<std::string> t = {"duplicate_string", "reverse_string", "bucket_sort"};
  return t;
}

ClaimVerdict claim_s3(const ComparisonResult& r, const std::vector<std::string>& tasks,
                      const std::vector<std::string>& rows) {
  const std::string metric =
      "per-sequence accuracy (exact match, Kazemnejad et al.'s scoring) on inputs of " +
      std::to_string(r.config.of<SuiteSettings>().length + 1) + ".." +
      std::to_string(2 * r.config.of<SuiteSettings>().length) +
      " (up to twice the training length), none − <row>, "
      "the same examples, one non-inferiority test per (task, plain row) where either learns the task (≥ 0.9 "
      "per-token in distribution); margin " +
      num(kNopeMargin, 2);
  std::vector<std::string> present;
  for (const auto& t : kazemnejad_tasks())
    if (std::find(tasks.begin(), tasks.end(), t) != tasks.end()) present.push_back(t);
  std::string missing;
  if (std::find(r.config.methods.begin(), r.config.methods.end(), "none") == r.config.methods.end())
    missing = "none in --methods";
  else if (present.empty())
    missing = "duplicate_string, reverse_string or bucket_sort in --suite-tasks (the full preset runs them)";
  std::vector<ClaimTest> tests;
  std::string measured, unlearned;
  if (missing.empty())
    for (const auto& task : present) {
      const auto none_in = suite_scored(r, "none", task, 0, 1, false);
      const auto none_far = suite_scored(r, "none", task, 1, 2, true);
      for (const auto& row : rows) {
        if (split_row(row).second || row == "none") continue;
        const auto in = suite_scored(r, row, task, 0, 1, false), far = suite_scored(r, row, task, 1, 2, true);
        if (far.empty() || none_far.empty()) continue;
        if (scored_mean(in) < 0.9 && scored_mean(none_in) < 0.9) {
          unlearned += (unlearned.empty() ? "" : ", ") + task + " none/" + row;
          continue;
        }
        const MarginTest m = margin_test(task + " none at or above " + row, none_far, far, true, -kNopeMargin);
        measured += (measured.empty() ? "" : "; ") + task + " none − " + row + " " + margin_text(m);
        tests.push_back(m.test);
      }
    }
  if (!unlearned.empty())
    measured += (measured.empty() ? "" : "; ") + std::string("neither learns the task in distribution (left out): ") +
                unlearned;
  Judgement j;
  if (!missing.empty())
    j = judge_family(tests, missing);
  else if (tests.empty())
    j = {kInconclusive,
         "no pair of none and another row where either learns the task in distribution (per-token "
         "accuracy ≥ 0.9) at this budget",
         0};
  else
    j = judge_family(tests, "");
  return claim_from("s3", kS3, metric, measured.empty() ? "n/a" : measured, j, suite_budget(r), suite_protocol(r));
}

}  // namespace

std::vector<ClaimVerdict> judge_suite_claims(const ComparisonResult& r) {
  const auto tasks = suite_tasks_present(r);
  if (tasks.empty()) return {};
  if (n_buckets(r) < 2) {
    const Judgement none{kNotMeasured, "needs a bucket beyond the training length (--suite-max-multiplier 2 or more)",
                         0};
    return {
        claim_from("s1", kS1, s1_metric(), "n/a", none, suite_budget(r)),
        claim_from("s2", kS2, s2_metric(), "n/a", none, suite_budget(r)),
        claim_from("s3", kS3, "per-sequence accuracy up to twice the training length", "n/a", none, suite_budget(r))};
  }
  const auto rows = suite_rows(r);
  return {claim_s1(r, tasks, rows), claim_s2(r, tasks, rows), claim_s3(r, tasks, rows)};
}

}  // namespace posgrad::train
