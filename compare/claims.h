// claims.h — the claims table: each study's claims (StudyEntry::claims, compare/study.h) judged on a
// comparison's measurements, and the rules they share. Each verdict is "supported", "contradicted"
// or "inconclusive", with the metric used, the measured values (mean and 95% interval over seeds)
// and why. Orderings are decided pair by pair with Welch's t-test at the 5% level (compare/stats.h):
// an ordering is supported when every pair differs significantly in the claimed direction,
// contradicted when some pair differs significantly the other way, and inconclusive otherwise.
// Thresholds are stated in each claim.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "compare/results.h"

namespace posgrad::train {

struct ClaimVerdict {
  std::string id;        // "a" .. "k", "s1", "p1", ...
  std::string claim;     // the paper's words, condensed
  std::string metric;    // what was measured
  std::string measured;  // values with intervals
  std::string verdict;   // supported | contradicted | inconclusive
  std::string why;
};

// Every study's claims, in registry order.
std::vector<ClaimVerdict> judge_claims(const ComparisonResult& r);

// ---- the rules the studies' claims share ---------------------------------------------------------

// "4.312 [4.260, 4.364]" (mean [95% interval]), "4.312 (1 seed)", or "n/a" without values.
std::string with_interval(const Summary& s, int prec);
// Whether `method` is among the configured methods.
bool has_method(const ComparisonResult& r, const std::string& method);

// The outcome of "a is better than b" on metric m (Welch, 5%).
struct Pair {
  std::string a, b;
  int outcome = 0;  // +1 significantly as claimed, -1 significantly against, 0 neither / not testable
  bool testable = false;
  double p = NAN;
};
Pair better(const ComparisonResult& r, const std::string& a, const std::string& b, const Metric& m);

struct Judgement {
  std::string verdict, why;
};
// Every pair must hold as claimed: contradicted when one is significantly the other way, inconclusive
// when one is not significant or not testable, supported otherwise; inconclusive "not measured:
// <missing>" when `missing` is not empty.
Judgement judge_pairs(const std::vector<Pair>& pairs, const std::string& missing);
// The pairs of an ordering: chain[i] better than chain[i + 1], each link a row or the name of a group
// in `groups` (every member of the group with values takes part). The links without values are
// appended to `missing`, once each in alphabetical order.
std::vector<Pair> chain_pairs(const ComparisonResult& r, const std::vector<std::string>& chain, const Metric& m,
                              std::string& missing, const std::map<std::string, std::vector<std::string>>& groups = {});
// "rope 4.3 [4.2, 4.4]; t5 ..." for the rows whose method is configured; "n/a" when none is.
std::string measured(const ComparisonResult& r, const std::vector<std::string>& rows, const Metric& m);

// "rope < deberta ≈ t5 < learned": the rows ordered by mean (best first), "<" between neighbours
// that differ significantly (Welch, 5%), "≈" where they do not. Rows without values are left out.
std::string ranking(const ComparisonResult& r, const std::vector<std::string>& rows, const Metric& m);

}  // namespace posgrad::train
