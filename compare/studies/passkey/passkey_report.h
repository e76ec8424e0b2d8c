// passkey_report.h — the passkey retrieval test's part of the comparison's report (compare/studies/passkey/passkey.h),
// all from the typed results (UnitResult::passkey): per-seed values and their summaries,
// passkey.csv, one heat map per row (needle depth x length, mean over seeds), the markdown section
// and the test's claims, judged from Welch's 95% intervals (compare/stats.h) like the suite's.
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

// passkey.csv: row, multiplier, depth ("mean": over the depths), n, mean, std, ci_low, ci_high.
void write_passkey_csv(const ComparisonResult& r, const std::string& path);
// plots/passkey_<row>.png (+ .gp, .dat) per row; returns the rows whose heat map was drawn (none
// when gnuplot is missing or fails: warned, not fatal). Removes stale passkey_*.png first.
std::vector<std::string> write_passkey_plots(const ComparisonResult& r, const std::string& dir);
// The report's section (empty without passkey results); embeds the heat maps found in plots_dir.
std::string passkey_markdown(const ComparisonResult& r, const std::string& plots_dir);
// The test's claims (Chen et al. 2023 §3.3; Peng et al. 2023); empty without passkey results.
std::vector<ClaimVerdict> judge_passkey_claims(const ComparisonResult& r);

}  // namespace posgrad::train
