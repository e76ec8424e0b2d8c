// report.h — renders a ComparisonResult (compare/results.h) into the experiment directory, each
// output by its own function and all of them from the typed result (no JSON paths):
//   results.csv  every metric per row (method or variant): n, mean, std, 95% interval — the
//                deterministic numbers only, byte-identical for the same seeds and threads
//   cost.csv     the interleaved cost benchmark: per method, length and measurement, median/min/max
//   plots/*.png  gnuplot: perplexity vs length with intervals, training loss, per-position loss,
//                attention weight vs distance
//   report.md    provenance, settings, the article's table with intervals, pairwise decisions,
//                the claims table, extrapolation, the task, cost, plots
// `posgrad report RUN_DIR` calls write_report on a finished run's results.json.
#pragma once

#include <string>

#include "compare/results.h"
#include "compare/study.h"

namespace posgrad::train {

void write_results_csv(const ComparisonResult& r, const std::string& path);
// report.md into out.dir: provenance, settings (each study's lines), each study's lead section, the
// claims table (judge_claims), each study's section, the plots drawn (`plots`, the studies'
// write_files) and the list of files.
// The provenance's note on units kept from an earlier invocation that trained with other threads or
// jobs than the last invocation's: "; units kept from an earlier invocation trained otherwise: 8 with
// 2 threads, one at a time" ("" when every recorded unit matches or none was recorded).
std::string kept_units_threads(const ComparisonResult& r);

void write_markdown(const ComparisonResult& r, const std::vector<std::string>& plots, const ReportDir& out);
// All of the above into r.config.out_dir; returns the path of report.md.
std::string write_report(const ComparisonResult& r);
// Reads RUN_DIR/results.json with read_comparison (compare/results.h: IoError naming the file and the
// JSON path of a value out of range or inconsistent with the file's configuration) and re-renders
// everything; returns report.md's path. Nothing is written when the file is refused.
std::string rerender_report(const std::string& run_dir);

}  // namespace posgrad::train
