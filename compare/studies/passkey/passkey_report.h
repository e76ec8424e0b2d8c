// passkey_report.h — the passkey retrieval test's part of the comparison's report (compare/studies/passkey/passkey.h),
// all from the typed results (UnitResult::passkey): per-seed values and their summaries,
// passkey.csv, one heat map per row (needle depth x length, mean over seeds), the markdown section
// and the test's claims, judged on families of tests (judge_family, compare/claims.h): paired by seed,
// against a stated margin, with the seeds' noise and a bound on the test examples' (margin_test,
// compare/studies/study_claims.h), like the suite's.
#pragma once

#include <string>
#include <vector>

#include "compare/claims.h"
#include "compare/results.h"
#include "compare/studies/passkey/passkey.h"

namespace posgrad::train {

// The rows with passkey results, in report order: each method, then rope's "+<scaling>" rows.
std::vector<std::string> passkey_rows(const ComparisonResult& r);
// Per-seed accuracy of one (row, multiplier, depth) cell; seeds where it is n/a are left out.
std::vector<double> passkey_values(const ComparisonResult& r, const std::string& row, int64_t multiplier, double depth);
// Per-seed accuracy at one multiplier, the mean over the depths; seeds where it is n/a are left out.
std::vector<double> passkey_depth_mean_values(const ComparisonResult& r, const std::string& row, int64_t multiplier);
// Per-seed mean accuracy over every multiplier > 1 that has a value (and every depth); empty when none.
std::vector<double> passkey_beyond_values(const ComparisonResult& r, const std::string& row);

// passkey.csv: row, multiplier, depth ("mean": over the depths), n (seeds), mean, std, ci_low, ci_high
// (the seeds' 95% Student-t interval, clipped to [0, 1]; n/a with fewer than 2 seeds).
void write_passkey_csv(const ComparisonResult& r, const std::string& path);
// passkey_seeds.csv: one line per (row, seed, multiplier, depth | "mean" over the depths) that has an
// accuracy: examples, accuracy, correct (its count of the examples), wilson_low, wilson_high
// (Wilson's 95% interval of that count; n/a when the accuracy is no count of the examples).
void write_passkey_seeds_csv(const ComparisonResult& r, const std::string& path);
// plots/passkey_<row>.png (+ .gp, .dat) per row; returns the rows whose heat map was drawn (none
// when gnuplot is missing or fails: warned, not fatal). Removes stale passkey_*.png first.
std::vector<std::string> write_passkey_plots(const ComparisonResult& r, const std::string& dir);
// The report's section (empty without passkey results); embeds the heat maps found in plots_dir.
std::string passkey_markdown(const ComparisonResult& r, const std::string& plots_dir);
// The test's claims (Chen et al. 2023 §3.3; Peng et al. 2023); empty without passkey results.
//   pk1: one test per method that retrieves at 1x (mean accuracy >= 0.5): 1x − beyond (the mean over
//        the cells beyond 1x that have values), the same model, above 0.10. None retrieves:
//        inconclusive; nothing evaluated beyond 1x: not measured.
//   pk2: one test per evaluation-time scaling present (rope+linear, rope+dynamic, rope+yarn):
//        scaled − plain rope beyond 1x, the same fine-tuned model and examples, above 0.05. No rope
//        or no scaled row: not measured.
std::vector<ClaimVerdict> judge_passkey_claims(const ComparisonResult& r);

}  // namespace posgrad::train
