// study_claims.h — what the studies' own claims share beyond the common rules of compare/claims.h:
// a claims-table row from a family's judgement, a "better" test on two lists of per-seed values
// (for results outside ComparisonResult's rows, e.g. the encoder track), and, for the studies that
// score a known number of test examples per cell (the length suite's buckets, the passkey grid),
// Wilson intervals of one model's proportion and a paired test of "a exceeds b by at least a margin"
// whose noise is the seeds' AND the test examples'.
//
// Why the examples' noise: every seed of such a study is scored on the same fixed examples (a
// generator fixed by the cell), so the spread over seeds says how much training varies, not how
// much these n examples tell about the task. Three seeds that agree to the digit on 36 examples
// would give a t-interval of width 0; margin_test adds a bound on the examples' variance, so the
// interval never claims more than the examples can say.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compare/claims.h"
#include "compare/stats.h"
#include "compare/studies/lm/lm.h"

namespace posgrad::train {

// A claims-table row (ClaimVerdict, compare/claims.h) from a family's judgement: verdict, reason and
// family size from `j`; budget and protocol as given ("" for none).
ClaimVerdict claim_from(std::string id, std::string claim, std::string metric, std::string measured, const Judgement& j,
                        std::string budget, std::string protocol = "");

// The length protocol of a claim that reads the language-model metrics at k x the training length,
// for its protocol column: "non-overlapping windows of the validation text, 4 of 2048 tokens at 32x
// (intervals: seed noise only)" or the sliding windows' stride and count (compare/studies/lm/lm.h).
std::string length_protocol(const ComparisonResult& r, int64_t k, Protocol p = Protocol::NonOverlapping);

// A length claim under both protocols: the verdict is judge(Protocol::NonOverlapping) (the papers'
// protocol); its protocol text ends with the verdict of the same claim on the sliding-window metrics
// (or says they are off). `note` is appended to the sliding protocol's name.
template <typename F>
ClaimVerdict with_sliding(const ComparisonResult& r, F judge, const std::string& note = "") {
  ClaimVerdict v = judge(Protocol::NonOverlapping);
  if (v.protocol.empty()) return v;  // not measured: no length was read
  if (r.config.of<LmSettings>().eval_stride_fraction == 0) {
    v.protocol += "; sliding windows: off (--eval-stride-fraction 0)";
    return v;
  }
  const ClaimVerdict s = judge(Protocol::Sliding);
  v.protocol +=
      "; under " + (s.protocol.empty() ? std::string("sliding windows") : s.protocol) + note + ": " + s.verdict;
  return v;
}

// One model's score on a known number of test examples: a proportion (examples right / examples)
// or a mean of per-example scores in [0, 1] (per-token accuracy: the share of each example's tokens
// right, averaged over the examples).
struct Scored {
  double value = 0;      // in [0, 1]
  int64_t examples = 0;  // the test examples it is the mean over (> 0)
};

// Wilson's 95% score interval (wilson_interval, compare/stats.h) of a proportion: k = value ·
// examples successes of `examples`. nullopt when examples <= 0 or value · examples is not a whole
// number (to 1e-6): then the value is no count of that many examples (a per-token accuracy).
std::optional<Proportion> wilson_of(const Scored& s);
// "0.75 [0.58, 0.87] (27/36)"; "0.75 (no count of 36)" when wilson_of has none.
std::string wilson_text(const Scored& s, int prec);

// The claim "a − b > margin", a and b scored per seed on test examples (a in-distribution and b
// beyond it for the same model; a randomized or scaled row and b the plain one of the same seed):
// over the S seeds both have (non-finite values left out and counted), d_s = a_s − b_s, D their mean,
// s² their sample variance. The examples: a's value is a mean of per-example scores in [0, 1] over
// N_a examples, whose variance over draws of the examples is at most μ(1 − μ)/N_a; with Agresti &
// Caffo's (2000) one success and one failure added, p̃ = (μ N + 1)/(N + 2) and v = p̃(1 − p̃)/(N + 2),
// which stays above 0 at 0 and 1 (μ: the mean over seeds). The seeds share the examples, so v does
// not shrink with S. Independent example sets (different lengths: `shared_examples` false): V =
// v_a + v_b; the same examples (two rows on one grid): V = (√v_a + √v_b)², the bound for any
// correlation of the two rows' errors. se² = s²/S + V; t = (D − margin)/se with Satterthwaite's
// df = se⁴ (S − 1) / (s²/S)², V counted as known (capped at 1e6; s = 0: the cap, the normal tail
// to 1e-6). Two-sided p from Student's t; the 95% interval D ± t(0.975, df) · se, clipped to [−1, 1].
// Not testable with fewer than 2 seeds (the seeds' noise is unknown). examples_a / examples_b: the
// fewest examples of a seed on each side (N above). On simulated fixed test sets whose examples are
// easy or hard alike for every seed, at a true difference equal to the margin, it reads significant
// in about 3.7% of experiments; the seeds' t-test alone in about 39% (tests/test_study_claims.cpp).
struct MarginTest {
  ClaimTest test;  // direction +1 when D > margin
  int64_t seeds = 0, examples_a = 0, examples_b = 0;
  double diff = NAN, low = NAN, high = NAN, se = NAN, df = NAN;
};
MarginTest margin_test(std::string name, const std::map<uint64_t, Scored>& a, const std::map<uint64_t, Scored>& b,
                       bool shared_examples, double margin);
// "0.62 [0.41, 0.83]" (D and its interval), "0.62 (1 seed)", or "n/a" without seeds.
std::string margin_text(const MarginTest& m, int prec = 2);

}  // namespace posgrad::train
