// claims.h — the article's claims about relative position encodings, judged one by one on a
// comparison's measurements. Each verdict is "supported", "contradicted" or "inconclusive", with
// the metric used, the measured values (mean and 95% interval over seeds) and why. Orderings are
// decided pair by pair with Welch's t-test at the 5% level (compare/stats.h): an ordering is
// supported when every adjacent pair differs significantly in the claimed direction, contradicted
// when some pair differs significantly the other way, and inconclusive otherwise. "Absolute" means
// the sinusoidal and learned encodings (each must be beaten). Thresholds are stated in each claim.
#pragma once

#include <string>
#include <vector>

#include "compare/results.h"

namespace posgrad::train {

struct ClaimVerdict {
  std::string id;        // "a" .. "k"
  std::string claim;     // the article's words, condensed
  std::string metric;    // what was measured
  std::string measured;  // values with intervals
  std::string verdict;   // supported | contradicted | inconclusive
  std::string why;
};

std::vector<ClaimVerdict> judge_claims(const ComparisonResult& r);

// "rope < deberta ≈ t5 < learned": the rows ordered by mean (best first), "<" between neighbours
// that differ significantly (Welch, 5%), "≈" where they do not. Rows without values are left out.
std::string ranking(const ComparisonResult& r, const std::vector<std::string>& rows, const Metric& m);

// Spearman's rank correlation of (distance, mean attention weight), attention averaged over layers.
double attention_distance_correlation(const std::vector<std::vector<double>>& by_layer);

}  // namespace posgrad::train
