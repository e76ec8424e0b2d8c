// claims.h — the claims table: each study's claims (StudyEntry::claims, compare/study.h) judged on a
// comparison's measurements, and the rules they share.
//
// A claim is judged on a family of tests (compare/stats.h), each one direction of one comparison:
// "a is better than b" (Welch's t-test on the per-seed values), "the paired difference (or ratio) by
// seed is beyond a threshold" (a one-sample t-test), each with a two-sided p-value. At alpha = 5%:
//   - contradicted: some test is significant against the claim after Holm's (1979) adjustment over
//     the family. The probability that a claim which holds, or is void, reads "contradicted" is at
//     most alpha whatever the family's size and dependence (familywise error of the union side);
//   - supported: every test of the family is testable and significant at alpha in the claimed
//     direction. The claim is the intersection of its tests, so by the intersection–union principle
//     (Berger 1982, Technometrics 24) this has level alpha without adjustment; a two-sided p below
//     alpha in one direction makes each test's one-sided error alpha/2;
//   - inconclusive: neither, naming the tests that are not significant or not testable;
//   - not measured: the rows the claim needs were not run (the reason says which option adds them).
// Supported and contradicted exclude each other. The null-experiment test (tests/test_claims.cpp)
// measures both rates on simulated experiments where every method has the same distribution.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "compare/results.h"

namespace posgrad::train {

// The four verdicts.
inline constexpr const char* kSupported = "supported";
inline constexpr const char* kContradicted = "contradicted";
inline constexpr const char* kInconclusive = "inconclusive";
inline constexpr const char* kNotMeasured = "not measured";
// The level of every claim's family.
inline constexpr double kAlpha = 0.05;

struct ClaimVerdict {
  std::string id;        // "a" .. "k", "s1", "p1", ...
  std::string claim;     // the paper's words, condensed
  std::string metric;    // what was measured
  std::string measured;  // values with intervals
  std::string verdict;   // kSupported | kContradicted | kInconclusive | kNotMeasured
  std::string why;
  int64_t family = 0;    // the number of tests the verdict rests on (0: not a test, e.g. exact counts)
  std::string budget;    // what the measurement cost: "650 steps x 3 seeds", "40 fine-tuning steps"
  std::string protocol;  // how lengths were evaluated, for the claims that read them ("" otherwise)
};

// Every study's claims, in registry order.
std::vector<ClaimVerdict> judge_claims(const ComparisonResult& r);

// ---- the rules the studies' claims share ---------------------------------------------------------

// "4.312 [4.260, 4.364]" (mean [95% interval]), "4.312 (1 seed)", or "n/a" without values; "(+k
// non-finite)" when values were left out.
std::string with_interval(const Summary& s, int prec);
// A p-value for a table: "0.012", or "3.2e-05" below 0.001, "n/a" for NaN.
std::string p_text(double p);
// Whether `method` is among the configured methods.
bool has_method(const ComparisonResult& r, const std::string& method);
// "650 steps of 12x64 tokens x 3 seeds": the training budget behind every per-seed value.
std::string training_budget(const ComparisonResult& r);

// One test of a claim's family.
struct ClaimTest {
  std::string name;  // "rope vs deberta", "bf16 / fp32 below 1.01"
  bool testable = false;
  std::string why_not;     // when not testable: the test's reason ("fewer than 2 seeds", "no variance ...")
  int direction = 0;       // sign of the estimate against the claim: +1 as claimed, -1 against, 0 none
  double p = NAN;          // two-sided
  double p_holm = NAN;     // Holm-adjusted over the family (judge_family fills it)
  int64_t non_finite = 0;  // per-seed values left out as not finite
};

// "a is better than b" on metric m: Welch on the two rows' per-seed values.
ClaimTest better(const ComparisonResult& r, const std::string& a, const std::string& b, const Metric& m);
// The same on per-seed values given directly (a study's own quantities, e.g. the encoder's composites).
ClaimTest better_values(std::string name, const std::vector<double>& a, const std::vector<double>& b,
                        bool lower_is_better);
// "a is better than b" on the per-seed differences a − b of the seeds both rows have (a row and a
// variant of the same models: scaled against plain, randomized against plain, fine-tuned rows).
ClaimTest better_paired(const ComparisonResult& r, const std::string& a, const std::string& b, const Metric& m);
// "the values lie below `limit`" (claimed_below) or above it: a one-sample t-test of mean − limit.
ClaimTest beyond(const std::string& name, const std::vector<double>& values, double limit, bool claimed_below);

struct Judgement {
  std::string verdict, why;
  int64_t family = 0;
};
// The family's verdict by the rules at the top of this header; fills each test's p_holm. `missing`
// not empty (or no test): not measured, with "needs <missing>".
Judgement judge_family(std::vector<ClaimTest>& tests, const std::string& missing);
// The pairs of an ordering: chain[i] better than chain[i + 1], each link a row or the name of a group
// in `groups` (every member of the group with values takes part). The links without values are
// appended to `missing`, once each in alphabetical order.
std::vector<ClaimTest> chain_pairs(const ComparisonResult& r, const std::vector<std::string>& chain, const Metric& m,
                                   std::string& missing,
                                   const std::map<std::string, std::vector<std::string>>& groups = {});
// "rope 4.3 [4.2, 4.4]; t5 ..." for the rows whose method is configured; "n/a" when none is.
std::string measured(const ComparisonResult& r, const std::vector<std::string>& rows, const Metric& m);

// "rope < deberta ≈ t5 < learned": the rows ordered by mean (best first), "<" between neighbours
// that differ significantly (Welch, 5%, no adjustment: a description, not a verdict), "≈" where they
// do not. Rows without finite values are left out (a NaN mean is never sorted).
std::string ranking(const ComparisonResult& r, const std::vector<std::string>& rows, const Metric& m);

}  // namespace posgrad::train
