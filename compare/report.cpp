// report.cpp — see report.h.
#include "compare/report.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "compare/claims.h"
#include "compare/markdown.h"
#include "compare/options.h"
#include "compare/study.h"
#include "data/fileio.h"
#include "data/process.h"
#include "train/interrupt.h"
#include "train/options.h"

namespace posgrad::train {

namespace fs = std::filesystem;

namespace {

using markdown::cell;
using markdown::num;
using markdown::run_gnuplot;
using markdown::Table;

}  // namespace

// ---- CSV ---------------------------------------------------------------------------------------------

void write_results_csv(const ComparisonResult& r, const std::string& path) {
  std::string csv = "row,metric,n,mean,std,ci_low,ci_high\n";
  for (const auto& row : rows(r))
    for (const Metric& m : csv_metrics(r.config)) {
      const Summary s = summary(r, row, m);
      csv += row + "," + m.name() + "," + std::to_string(s.n) + ",";
      if (s.n == 0)
        csv += "n/a,n/a,n/a,n/a\n";
      else if (!s.has_interval())
        csv += num(s.mean) + "," + num(s.std) + ",n/a,n/a\n";
      else
        csv += num(s.mean) + "," + num(s.std) + "," + num(s.ci_low) + "," + num(s.ci_high) + "\n";
    }
  write_file_atomic(path, csv);
}

// ---- markdown -------------------------------------------------------------------------------------

// Their train_seconds are of that setting; no other number depends on it.
std::string kept_units_threads(const ComparisonResult& r) {
  std::map<std::pair<int64_t, int64_t>, int> other;
  for (const UnitResult& u : r.units)
    if (u.threads > 0 && (u.threads != r.provenance.threads || std::max<int64_t>(1, u.jobs) != r.provenance.jobs))
      ++other[{u.threads, std::max<int64_t>(1, u.jobs)}];
  std::string s;
  for (const auto& [setting, n] : other)
    s += (s.empty() ? "; units kept from an earlier invocation trained otherwise: " : ", ") + std::to_string(n) +
         " with " + std::to_string(setting.first) + " thread" + (setting.first == 1 ? "" : "s") +
         (setting.second > 1 ? ", " + std::to_string(setting.second) + " at once" : ", one at a time");
  return s;
}

void write_markdown(const ComparisonResult& r, const std::vector<std::string>& plots, const ReportDir& out) {
  const std::string path = out.dir + "/report.md";
  const CompareConfig& c = r.config;
  const auto& b = c.base;
  const int64_t block = b.model.block_size;
  std::ostringstream md;
  md << "# posgrad position-encoding comparison\n\n"
     << "Measured, not illustrative: every number below comes from the runs in this directory, as mean ± sample "
     << "standard deviation [95% confidence interval of the mean, Student's t] over " << c.seeds.size() << " seed"
     << (c.seeds.size() == 1 ? "" : "s") << ".\n\n";

  md << "## Provenance\n\n"
     << "- git commit: `" << r.provenance.git_commit << "`\n"
     << "- CPU: " << r.provenance.cpu << " (SIMD path " << r.provenance.simd << "), " << r.provenance.threads
     << " OpenMP thread" << (r.provenance.threads == 1 ? "" : "s")
     << (r.provenance.jobs > 1 ? " per unit, " + std::to_string(r.provenance.jobs) + " units at once (--jobs)" : "")
     << kept_units_threads(r) << "\n"
     << "- compiler: " << r.provenance.compiler << "; libraries: " << r.provenance.libraries << "; CUDA backend "
     << r.provenance.cuda << "\n"
     << "- configuration hash (FNV-1a of the settings below): `" << r.provenance.config_hash << "`\n\n";

  md << "## Settings\n\n"
     << "- corpus: `" << b.corpus << "` (" << b.tokenizer << "-level), contiguous 90/10 train/validation split\n"
     << "- model: GPT, " << b.model.n_layer << " layers, " << b.model.n_head << " heads, " << b.model.n_embd
     << " wide, training length " << block << ", dropout " << b.model.dropout << "\n"
     << "- training: " << b.max_iters << " steps of " << b.batch_size << "x" << block << " tokens, AdamW lr " << b.lr
     << " (warm-up " << b.warmup_iters << ", cosine to " << b.min_lr << "), weight decay " << b.weight_decay
     << ", clip " << b.grad_clip << "\n"
     << "- matrix products: "
     << (b.precision == "bf16" ? "bf16 mixed precision (operands rounded to bf16, float accumulation; weights, "
                                 "optimizer state, softmax and norms in float)"
                               : "fp32")
     << "\n- seeds: ";
  for (size_t i = 0; i < c.seeds.size(); ++i) md << (i ? ", " : "") << c.seeds[i];
  md << "\n";
  for (const StudyEntry& s : studies())
    if (s.settings_markdown) md << s.settings_markdown(r);
  md << "\n"
     << "<details><summary>All settings (as <code>posgrad compare</code> options)</summary>\n\n| option | value "
        "|\n|---|---|\n";
  for (const auto& o : compare_options()) md << "| `" << o.spec.flag() << "` | " << opt::format(o.get(c)) << " |\n";
  md << "\n</details>\n\n";

  for (const StudyEntry& s : studies())
    if (s.lead_markdown) md << s.lead_markdown(r);

  md << "## The article's claims\n\n"
     << "Each claim is judged on a family of tests at the 5% level (the `tests` column counts them): "
     << "**contradicted** when some test is significant against the claim after Holm's adjustment over the "
     << "family (at most a 5% chance, whatever the family's size, that a claim which holds reads contradicted); "
     << "**supported** when every test is significant at 5% in the claimed direction (an intersection–union "
     << "test: all must hold, so no adjustment is needed for a 5% level); **inconclusive** otherwise; **not "
     << "measured** when the rows it needs were not run. A verdict reads the per-seed values: its intervals "
     << "carry the seeds' noise, not the evaluation text's (the suite's and passkey claims add a bound on their "
     << "fixed test examples' noise, as their protocol says). `budget` is what each per-seed value cost; "
     << "`protocol` how long texts were scored.\n\n";
  Table claims({"", "claim", "metric", "tests", "budget", "protocol", "measured", "verdict", "why"}, /*text=*/true);
  for (const auto& v : judge_claims(r))
    claims.row({v.id, v.claim, v.metric, v.family ? std::to_string(v.family) : "—", v.budget.empty() ? "—" : v.budget,
                v.protocol.empty() ? "—" : v.protocol, v.measured, "**" + v.verdict + "**", v.why});
  md << claims.markdown() << "\n";
  for (const StudyEntry& s : studies())
    if (s.markdown) md << s.markdown(r, out);

  md << "## Plots\n\n";
  for (const auto& p : plots) md << "![" << p << "](plots/" << p << ".png)\n\n";
  size_t gallery = 0;
  for (const StudyEntry& s : studies()) gallery += s.gallery_plots;
  if (plots.size() < gallery) md << "(Some plots could not be drawn: is gnuplot installed?)\n\n";
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

// The outputs written into `staging` so far (the studies' CSVs, the plots folder), by name.
std::vector<std::string> staged(const std::string& staging) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(staging)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Renders every output into `staging` (a fresh folder inside the experiment directory), polling for
// a signal between outputs. Returns the names of the files written there, report.md last.
std::vector<std::string> render(const ComparisonResult& r, const std::string& dir, const std::string& staging) {
  std::vector<std::string> files;
  auto step = [&](const std::string& name) {
    files.push_back(name);
    poll_interrupt(dir, staging);
  };
  const ReportDir out{staging, staging + "/plots"};
  if (r.config.track == "encoder") {  // no decoder units: the one study that ran writes the report
    // Only the studies with units of their own ran; the decoder studies' files would be empty tables
    // and plots of no data.
    for (const StudyEntry& s : studies())
      if (s.write_files && s.own_units && (!s.enabled || s.enabled(r.config))) s.write_files(r, out);
    std::string md;
    for (const StudyEntry& s : studies())
      if (s.report_alone && (!s.enabled || s.enabled(r.config))) md = s.report_alone(r);
    POSGRAD_CHECK(!md.empty(), IoError, dir,
                  ": an experiment without decoder units and without a study that reports alone");
    files = staged(staging);
    write_file_atomic(staging + "/report.md", md);
    step("report.md");
    return files;
  }
  write_results_csv(r, staging + "/results.csv");
  poll_interrupt(dir, staging);
  std::vector<std::string> plots;
  for (const StudyEntry& s : studies()) {
    if (!s.write_files) continue;
    for (auto& p : s.write_files(r, out)) plots.push_back(std::move(p));
    poll_interrupt(dir, staging);
  }
  files = staged(staging);
  write_markdown(r, plots, out);
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
  POSGRAD_CHECK(!run_dir.empty(), UsageError,
                "RUN_DIR is empty: name the experiment directory (it holds results.json)");
  const std::string path = run_dir + "/results.json";
  if (!fs::exists(path)) throw IoError("no results.json in '" + run_dir + "' (run posgrad compare there first)");
  // Schema, ranges and consistency with its own configuration (compare/results.h): IoError naming the value.
  ComparisonResult r = read_comparison(read_file(path), path);
  r.config.out_dir = run_dir;         // render where the results are, wherever the run was made
  const DirectoryLock hold(run_dir);  // not while a compare writes there (data/process.h)
  return write_report(r);
}

}  // namespace posgrad::train
