// pi_report.h — the position-interpolation protocol's part of the comparison's report
// (compare/studies/pi/pi_protocol.h), all from the typed results (UnitResult::pi): per-seed perplexities of the
// fine-tuned rows beside the untuned RoPE rows (rope, rope+linear, rope+yarn, rope+dynamic), pi.csv,
// the perplexity-vs-length plot (one panel per fine-tuning length), the markdown section, and the
// protocol's claims. Differences between fine-tuned rows are paired by seed: at one seed every row
// starts from the same trained model and sees the same fine-tuning batches (compare/studies/pi/pi_protocol.h),
// so a claim is a family (judge_family, compare/claims.h) of one test per fine-tuning length M: a
// one-sample Student t-test of the per-seed differences (beyond(), compare/claims.h) below 0.
#pragma once

#include <string>
#include <vector>

#include "compare/claims.h"
#include "compare/results.h"
#include "compare/studies/lm/lm.h"

namespace posgrad::train {

// The fine-tuned rows present, in run order (fine-tuning multiplier, then scaling): "rope ft2x", ...
std::vector<std::string> pi_rows(const ComparisonResult& r);
// The untuned RoPE rows the section shows beside them (those present): rope, rope+linear, rope+yarn, rope+dynamic.
std::vector<std::string> pi_untuned_rows(const ComparisonResult& r);
// Per-seed perplexity (quantity Perplexity) or loss (Loss) of `row` — fine-tuned or untuned — at
// evaluation multiplier `m`, in seed order; seeds without a value are left out.
std::vector<double> pi_values(const ComparisonResult& r, const std::string& row, int64_t m,
                              Quantity q = Quantity::Perplexity);
// Per-seed a − b (perplexity at m) over the seeds where both rows have a value.
std::vector<double> pi_paired_differences(const ComparisonResult& r, const std::string& a, const std::string& b,
                                          int64_t m);

// pi.csv: row, fine_tuned_at (M; 0 = not fine-tuned), scaling, eval_multiplier, context, metric,
// n, mean, std, ci_low, ci_high — perplexity and loss of every fine-tuned and untuned row. Written
// (header only) when there are no fine-tuned rows.
void write_pi_csv(const ComparisonResult& r, const std::string& path);
// plots/pi_ppl_vs_length.png (+ .gp, .dat); true when drawn (false, warned, when there are no
// fine-tuned rows or gnuplot fails: a report without its plot is still a report).
bool write_pi_plot(const ComparisonResult& r, const std::string& dir);
// The report's section (empty without fine-tuned rows); plot_drawn: embed the plot.
std::string pi_markdown(const ComparisonResult& r, bool plot_drawn);
// The protocol's claims (p1: Chen et al. 2023; p2, p3: NTK-aware and YaRN against linear); empty
// without fine-tuned rows. Each: "rope+<a> ftMx" below "rope+<b> ftMx" in perplexity at M·L, one test
// per M among --pi-multipliers that both rows have and --eval-multipliers evaluates (none: not
// measured); the budget names the fine-tuning steps and windows.
std::vector<ClaimVerdict> judge_pi_claims(const ComparisonResult& r);

}  // namespace posgrad::train
