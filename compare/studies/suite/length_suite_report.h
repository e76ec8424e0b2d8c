// length_suite_report.h — the length-generalisation suite's part of the comparison's report, all
// from the typed results (UnitResult::suite): per-seed values and their summaries, suite.csv, the
// accuracy-vs-length plot (one panel per task, mean and 95% interval over seeds), the markdown
// section (tables, the sizing check, separations, randomized vs plain) and the suite's claims,
// judged like the article's (Welch's t-test at 5%, compare/stats.h).
#pragma once

#include <string>
#include <vector>

#include "compare/claims.h"
#include "compare/results.h"
#include "compare/studies/suite/length_suite.h"

namespace posgrad::train {

// The suite's rows in report order: each method, then its "+randomized" row, where present.
std::vector<std::string> suite_rows(const ComparisonResult& r);
// The suite's tasks present in the results, in configuration order.
std::vector<std::string> suite_tasks_present(const ComparisonResult& r);
// Per-seed values of one (row, task, bucket index): per-sequence accuracy (sequence = true) or
// per-token accuracy. Seeds without that entry are left out.
std::vector<double> suite_values(const ComparisonResult& r, const std::string& row, const std::string& task,
                                 size_t bucket, bool sequence);
// Per-seed mean accuracy over the out-of-distribution buckets (2 .. last) of one (row, task):
// per-sequence (sequence = true) or per-token; empty when there are none.
std::vector<double> suite_ood_values(const ComparisonResult& r, const std::string& row, const std::string& task,
                                     bool sequence = true);

// suite.csv: row, task, bucket lo, hi, metric (sequence_accuracy | token_accuracy), n (seeds), mean,
// std, ci_low, ci_high (the seeds' 95% Student-t interval, clipped to [0, 1]; nan with one seed).
void write_suite_csv(const ComparisonResult& r, const std::string& path);
// suite_seeds.csv: one line per (row, task, bucket, seed): row, task, lo, hi, seed, examples,
// sequence_accuracy, sequence_correct (its count of the examples), wilson_low, wilson_high (Wilson's
// 95% interval of that count; n/a when the accuracy is no count of the examples), token_accuracy.
void write_suite_seeds_csv(const ComparisonResult& r, const std::string& path);
// plots/suite_accuracy.png (+ .gp, .dat); returns the plot names drawn (empty when there is no
// suite or gnuplot fails: warned, not fatal).
std::vector<std::string> write_suite_plots(const ComparisonResult& r, const std::string& dir);
// The report's section (empty when the run has no suite results); plot_drawn: embed the plot.
std::string suite_markdown(const ComparisonResult& r, bool plot_drawn);
// The suite's claims (Deletang et al. 2023, Ruoss et al. 2023); empty without suite results.
//   s1: one test per (task, plain row) that learns the task (per-token accuracy >= 0.9 in the training
//       bucket): in-distribution − beyond (the mean of the longer buckets), the same model, above 0.10.
//       No such row: inconclusive. No bucket beyond the training length: not measured.
//   s2: one test per (task, method with a +randomized row): randomized − plain beyond the training
//       length, the same seed (same examples and training batches), above 0.05. No randomized row:
//       not measured.
//   s3: Kazemnejad et al. 2023 (NeurIPS, "The Impact of Positional Encoding on Length Generalization
//       in Transformers", §4): NoPE generalises at least as well as the other encodings on copy,
//       reverse and sort (duplicate_string, reverse_string, bucket_sort among --suite-tasks), with
//       their scoring (exact match: per-sequence accuracy) on the inputs up to twice the training
//       length (the bucket [N+1, 2N]). One non-inferiority test per (task, plain row other than
//       none) where either of the two learns the task (per-token accuracy >= 0.9 in the training
//       bucket): none − row > −0.05, the same examples (margin_test). Not measured without none or
//       without one of those tasks; inconclusive when no pair learns its task.
std::vector<ClaimVerdict> judge_suite_claims(const ComparisonResult& r);

}  // namespace posgrad::train
