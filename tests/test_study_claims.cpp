// test_study_claims.cpp — known answers for the studies' own claims on the shared rules
// (judge_family, compare/claims.h): s1, s2 (length suite), pk1, pk2 (passkey), p1–p3 (position
// interpolation) and the encoder track's ordering claim, every verdict each can reach (supported,
// contradicted, inconclusive, not measured) from per-seed values built by hand, checking the verdict
// and a key phrase of its reason; the helpers they rest on (margin_test, wilson_of in
// compare/studies/study_claims.h) against values computed independently (mpmath, 40 digits) and
// margin_test's error rate on simulated fixed test sets; and the suite's and passkey tables and CSVs:
// each model's count with Wilson's interval, the seeds' interval clipped to [0, 1].
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "compare/compare.h"
#include "compare/results.h"
#include "compare/rows.h"
#include "compare/studies/encoder/encoder.h"
#include "compare/studies/passkey/passkey_report.h"
#include "compare/studies/pi/pi_protocol.h"
#include "compare/studies/pi/pi_report.h"
#include "compare/studies/study_claims.h"
#include "compare/studies/suite/length_suite.h"
#include "compare/studies/suite/length_suite_report.h"
#include "data/fileio.h"
#include "support/test_util.h"

using namespace posgrad;
using train::ClaimVerdict;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const ClaimVerdict& claim(const std::vector<ClaimVerdict>& claims, const std::string& id) {
  for (const auto& c : claims)
    if (c.id == id) return c;
  static const ClaimVerdict none = [] {
    ClaimVerdict v;
    v.verdict = "missing";
    v.why = "no claim with this id";
    return v;
  }();
  return none;
}

// The verdict, a phrase of the reason, and the family size, in one message when any fails.
void expect(const std::vector<ClaimVerdict>& claims, const std::string& id, const std::string& verdict,
            const std::string& phrase, int64_t family) {
  const ClaimVerdict& c = claim(claims, id);
  const std::string what = id + ": " + c.verdict + " — " + c.why + " | measured: " + c.measured;
  EXPECT_EQ(c.verdict, verdict) << what;
  EXPECT_TRUE(contains(c.why, phrase)) << "reason lacks '" << phrase << "': " << what;
  EXPECT_EQ(c.family, family) << what;
}

std::map<uint64_t, train::Scored> seeds(const std::vector<double>& v, int64_t examples) {
  std::map<uint64_t, train::Scored> m;
  for (size_t i = 0; i < v.size(); ++i) m[i + 1] = train::Scored{v[i], examples};
  return m;
}

}  // namespace

// ---- the helpers --------------------------------------------------------------------------------------

// Expected values: mpmath at 40 digits, from the formulas of study_claims.h written out independently
// (Student's t tail by the regularized incomplete beta, its quantile by root finding).
TEST(StudyClaimsHelpers, MarginTestKnownAnswers) {
  const std::vector<double> a = {34.0 / 36, 35.0 / 36, 1.0}, b = {10.0 / 36, 14.0 / 36, 18.0 / 36};
  // Independent example sets (two lengths): V = v_a + v_b.
  train::MarginTest m = train::margin_test("a − b above 0.1", seeds(a, 36), seeds(b, 36), false, 0.1);
  ASSERT_TRUE(m.test.testable) << m.test.why_not;
  EXPECT_EQ(m.seeds, 3);
  EXPECT_NEAR(m.diff, 0.58333333333333333, 1e-15);
  EXPECT_NEAR(m.se, 0.099570673974485661, 1e-14);
  EXPECT_NEAR(m.df, 36.687935719601042, 1e-9);
  EXPECT_NEAR(m.test.p, 2.2515935648206156e-5, 1e-12);
  EXPECT_NEAR(m.low, 0.38152604289396628, 1e-9);
  EXPECT_NEAR(m.high, 0.78514062377270038, 1e-9);
  EXPECT_EQ(m.test.direction, 1);
  // The same examples (two rows on one grid): V = (√v_a + √v_b)², wider.
  m = train::margin_test("shared", seeds(a, 36), seeds(b, 36), true, 0.1);
  EXPECT_NEAR(m.se, 0.12513534962584044, 1e-14);
  EXPECT_NEAR(m.df, 91.520321008504079, 1e-8);
  EXPECT_NEAR(m.test.p, 0.00020923037665502297, 1e-11);
  EXPECT_NEAR(m.low, 0.33478637076016627, 1e-9);
  // Three seeds that agree exactly: the seeds' variance is 0, the examples' is not — testable, at the
  // df cap (the normal tail); the interval is clipped to [−1, 1].
  m = train::margin_test("constant", seeds({1, 1, 1}, 36), seeds({0, 0, 0}, 108), false, 0.1);
  ASSERT_TRUE(m.test.testable);
  EXPECT_NEAR(m.se, 0.027498906487060285, 1e-15);
  EXPECT_EQ(m.df, 1e6);
  EXPECT_NEAR(m.low, 0.94610306843618464, 1e-9);
  EXPECT_EQ(m.high, 1.0);
  EXPECT_LT(m.test.p, 1e-200);
  // Held exactly (1.0 and 1.0): significantly below a 0.1 drop, against the claim.
  m = train::margin_test("held", seeds({1, 1, 1}, 36), seeds({1, 1, 1}, 108), false, 0.1);
  EXPECT_EQ(m.test.direction, -1);
  EXPECT_NEAR(m.test.p, 0.00027637267562990525, 1e-10);
  EXPECT_EQ(train::margin_text(m, 3), "0.000 [-0.054, 0.054]");
  // Paired by seed: only the seeds both sides have; one seed is not testable.
  auto one = seeds({0.5, 0.6}, 10);
  one.erase(2);
  m = train::margin_test("one seed", one, seeds({0.1, 0.2, 0.3}, 10), false, 0.1);
  EXPECT_FALSE(m.test.testable);
  EXPECT_EQ(m.test.why_not, "fewer than 2 seeds");
  EXPECT_EQ(train::margin_text(m), "0.40 (1 seed)");
  m = train::margin_test("none", {}, seeds({0.1}, 10), false, 0.1);
  EXPECT_EQ(train::margin_text(m), "n/a");
  // A non-finite value is left out and counted.
  m = train::margin_test("nan", seeds({0.9, NAN, 0.8, 0.85}, 36), seeds({0.1, 0.2, 0.15, 0.1}, 36), false, 0.1);
  EXPECT_EQ(m.test.non_finite, 1);
  EXPECT_EQ(m.seeds, 3);
}

TEST(StudyClaimsHelpers, WilsonOfACount) {
  // 27 of 36: Wilson's 95% interval (mpmath).
  const auto w = train::wilson_of({27.0 / 36, 36});
  ASSERT_TRUE(w.has_value());
  EXPECT_NEAR(w->low, 0.58929546233271651, 1e-12);
  EXPECT_NEAR(w->high, 0.86249522337005166, 1e-12);
  EXPECT_EQ(train::wilson_text({27.0 / 36, 36}, 2), "0.75 [0.59, 0.86] (27/36)");
  // 0 and n: inside [0, 1] and not empty.
  const auto zero = train::wilson_of({0.0, 8});
  ASSERT_TRUE(zero.has_value());
  EXPECT_EQ(zero->low, 0.0);
  EXPECT_GT(zero->high, 0.2);
  const auto all = train::wilson_of({1.0, 8});
  EXPECT_EQ(all->high, 1.0);
  EXPECT_LT(all->low, 0.8);
  // Not a count of that many examples (a per-token accuracy), or no examples: none.
  EXPECT_FALSE(train::wilson_of({0.5, 3}).has_value());
  EXPECT_FALSE(train::wilson_of({0.5, 0}).has_value());
  EXPECT_EQ(train::wilson_text({0.5, 3}, 2), "0.50 (no count of 3)");
}

// The error rate at the null's boundary. A task whose examples are easy or hard, as trained models
// of different seeds tend to agree on: an example is right with probability 0.97 (easy) or 0.03
// (hard); in distribution a share (0.80 − 0.03) / 0.94 of the examples is easy, beyond the training
// length (0.70 − 0.03) / 0.94, so the true drop over the task is exactly the margin 0.10. Each
// experiment draws one fixed test set (36 and 108 examples), scored by 3 seeds (each right on an
// example with its probability, independently): margin_test may read "above the margin" or "below"
// in at most 5% of the experiments (a two-sided 5% test; each side 2.5%, here allowed 3.5% for the
// simulation's own error, about 3 standard errors over 4000 experiments). The seeds' t-test alone,
// blind to how the fixed examples were drawn, reads one or the other in about 38% of them.
TEST(StudyClaimsHelpers, MarginTestHoldsItsLevelWithFixedTestExamples) {
  constexpr int kExperiments = 4000;
  std::mt19937_64 gen(20261203);
  auto uniform = [&] { return static_cast<double>(gen() >> 11) * 0x1.0p-53; };
  int above = 0, below = 0, naive_significant = 0;
  for (int e = 0; e < kExperiments; ++e) {
    std::map<uint64_t, train::Scored> in, ood;
    std::vector<double> p_in(36), p_ood(108), d;
    for (double& p : p_in) p = uniform() < (0.80 - 0.03) / 0.94 ? 0.97 : 0.03;
    for (double& p : p_ood) p = uniform() < (0.70 - 0.03) / 0.94 ? 0.97 : 0.03;
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      double a = 0, b = 0;
      for (double p : p_in) a += uniform() < p;
      for (double p : p_ood) b += uniform() < p;
      in[seed] = {a / 36, 36};
      ood[seed] = {b / 108, 108};
      d.push_back(a / 36 - b / 108);
    }
    const train::MarginTest m = train::margin_test("null", in, ood, false, 0.10);
    ASSERT_TRUE(m.test.testable);
    above += m.test.p < train::kAlpha && m.test.direction > 0;
    below += m.test.p < train::kAlpha && m.test.direction < 0;
    const train::WelchTest naive = train::one_sample_test(d, 0.10);
    naive_significant += naive.testable && naive.p < train::kAlpha;
  }
  const double rate_above = static_cast<double>(above) / kExperiments,
               rate_below = static_cast<double>(below) / kExperiments;
  std::printf(
      "margin_test at the null's boundary: above %.4f, below %.4f; the seeds' t-test alone: %.3f (%d experiments)\n",
      rate_above, rate_below, static_cast<double>(naive_significant) / kExperiments, kExperiments);
  EXPECT_LE(rate_above + rate_below, train::kAlpha);
  EXPECT_LE(rate_above, 0.035);
  EXPECT_LE(rate_below, 0.035);
  EXPECT_GT(static_cast<double>(naive_significant) / kExperiments, 2 * train::kAlpha);
}

// ---- s1, s2: the length suite ----------------------------------------------------------------------------

namespace {

constexpr int64_t kSuiteExamples = 36;

// acc[row][seed - 1] = (accuracy of the training bucket, of each of the buckets beyond), per-sequence
// = per-token, on one task with `buckets` buckets of 36 examples.
train::ComparisonResult suite(const std::map<std::string, std::vector<std::pair<double, double>>>& acc,
                              int64_t buckets = 4) {
  train::ComparisonResult r;
  r.config = train::compare_preset("tiny");
  r.config.methods = {"rope", "alibi"};
  if (acc.count("none")) r.config.methods.insert(r.config.methods.begin(), "none");
  r.config.seeds = {1, 2, 3};
  auto& s = r.config.of<train::SuiteSettings>();
  s.tasks = {"reverse_string"};
  s.length = 4;
  s.examples = kSuiteExamples;
  s.max_multiplier = buckets;
  for (const std::string& m : r.config.methods)
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      train::UnitResult u;
      u.method = m;
      u.seed = seed;
      for (bool rnd : {false, true}) {
        const auto it = acc.find(train::suite_row(m, rnd));
        if (it == acc.end()) continue;
        train::SuiteTaskResult t;
        t.task = "reverse_string";
        t.randomized = rnd;
        const auto [in, ood] = it->second[seed - 1];
        for (int64_t k = 0; k < buckets; ++k) {
          const double a = k == 0 ? in : ood;
          t.buckets.push_back({k * 4 + 1, (k + 1) * 4, kSuiteExamples, a, a});
        }
        u.parts.get<train::SuiteResult>().tasks.push_back(t);
      }
      r.units.push_back(u);
    }
  return r;
}

// k of 36, per seed.
std::pair<double, double> of36(int in, int ood) { return {in / 36.0, ood / 36.0}; }

}  // namespace

TEST(StudyClaims, S1EveryVerdict) {
  // Both plain rows learn the task and lose most of it beyond: every test significant.
  auto r =
      suite({{"rope", {of36(36, 4), of36(35, 6), of36(36, 5)}}, {"alibi", {of36(36, 10), of36(36, 8), of36(35, 12)}}});
  auto claims = train::judge_suite_claims(r);
  expect(claims, "s1", train::kSupported, "all of 2 significant at 5% as claimed", 2);
  EXPECT_TRUE(contains(claim(claims, "s1").metric, "a drop of at least 0.10")) << claim(claims, "s1").metric;
  EXPECT_TRUE(contains(claim(claims, "s1").measured, "reverse_string rope drop 0.85 ["))
      << claim(claims, "s1").measured;
  EXPECT_TRUE(contains(claim(claims, "s1").budget, "36 test examples per bucket")) << claim(claims, "s1").budget;
  EXPECT_TRUE(contains(claim(claims, "s1").protocol, "108 examples")) << claim(claims, "s1").protocol;
  // One row keeps all of it (36/36 in and beyond on every seed): significantly less than a 0.10 drop,
  // whatever the other row does — even though its three seeds agree exactly.
  r = suite(
      {{"rope", {of36(36, 36), of36(36, 36), of36(36, 36)}}, {"alibi", {of36(36, 10), of36(36, 8), of36(35, 12)}}});
  expect(train::judge_suite_claims(r), "s1", train::kContradicted,
         "significantly the other way after Holm over the 2: "
         "reverse_string rope drops by more than 0.10",
         2);
  // A drop of about 0.17 on 36 examples per bucket is not shown to exceed 0.10.
  r = suite({{"rope", {of36(36, 30), of36(36, 33), of36(36, 27)}}});
  expect(train::judge_suite_claims(r), "s1", train::kInconclusive, "not significant at 5% for reverse_string rope", 1);
  // No plain row learns the task in distribution: nothing can fail beyond it (the row is named).
  r = suite({{"rope", {of36(18, 2), of36(20, 2), of36(22, 2)}}});
  claims = train::judge_suite_claims(r);
  expect(claims, "s1", train::kInconclusive, "no plain row learns a task in distribution", 0);
  EXPECT_TRUE(
      contains(claim(claims, "s1").measured, "not learned (< 0.9 in distribution, left out): reverse_string rope 0.56"))
      << claim(claims, "s1").measured;
  // One bucket only: nothing beyond the training length was scored.
  r = suite({{"rope", {of36(36, 0), of36(36, 0), of36(36, 0)}}}, 1);
  claims = train::judge_suite_claims(r);
  expect(claims, "s1", train::kNotMeasured, "needs a bucket beyond the training length (--suite-max-multiplier", 0);
  expect(claims, "s2", train::kNotMeasured, "needs a bucket beyond the training length", 0);
  // No suite results at all: no claims (the study did not run).
  EXPECT_TRUE(train::judge_suite_claims(suite({})).empty());
}

TEST(StudyClaims, S2EveryVerdict) {
  const std::vector<std::pair<double, double>> plain = {of36(36, 4), of36(35, 6), of36(36, 5)};
  auto r = suite({{"rope", plain}, {"rope+randomized", {of36(36, 30), of36(36, 28), of36(36, 32)}}});
  auto claims = train::judge_suite_claims(r);
  expect(claims, "s2", train::kSupported, "significant at 5% as claimed", 1);
  EXPECT_TRUE(contains(claim(claims, "s2").metric, "a gain of at least 0.05")) << claim(claims, "s2").metric;
  EXPECT_TRUE(contains(claim(claims, "s2").measured, "reverse_string rope+randomized − rope 0.69 ["))
      << claim(claims, "s2").measured;
  // Randomized far below plain: against the claim.
  r = suite({{"rope", {of36(36, 30), of36(36, 28), of36(36, 32)}}, {"rope+randomized", plain}});
  expect(train::judge_suite_claims(r), "s2", train::kContradicted,
         "significantly the other way: reverse_string rope+randomized above rope", 1);
  // A gain of two examples of 36 per bucket: not shown to exceed 0.05.
  r = suite({{"rope", plain}, {"rope+randomized", {of36(36, 6), of36(36, 8), of36(36, 7)}}});
  expect(train::judge_suite_claims(r), "s2", train::kInconclusive,
         "not significant at 5% for reverse_string rope+randomized", 1);
  // No randomized row.
  r = suite({{"rope", plain}});
  expect(train::judge_suite_claims(r), "s2", train::kNotMeasured, "needs a randomized row (--suite-randomized", 0);
}

// s3 (Kazemnejad et al.): none at or above each other plain row, exact match up to 2N, margin 0.05.
TEST(StudyClaims, S3EveryVerdict) {
  // NoPE keeps 30 of 36 beyond, RoPE and ALiBi 4-12: none at or above both, supported.
  auto r = suite({{"none", {of36(36, 30), of36(36, 31), of36(36, 29)}},
                  {"rope", {of36(36, 4), of36(35, 6), of36(36, 5)}},
                  {"alibi", {of36(36, 10), of36(36, 8), of36(35, 12)}}});
  auto claims = train::judge_suite_claims(r);
  expect(claims, "s3", train::kSupported, "all of 2 significant at 5% as claimed", 2);
  EXPECT_TRUE(contains(claim(claims, "s3").measured, "reverse_string none − rope 0.69 ["))
      << claim(claims, "s3").measured;
  EXPECT_TRUE(contains(claim(claims, "s3").metric, "inputs of 5..8")) << claim(claims, "s3").metric;
  // NoPE far below ALiBi beyond: contradicted.
  r = suite({{"none", {of36(36, 2), of36(36, 3), of36(36, 1)}},
             {"rope", {of36(36, 4), of36(35, 6), of36(36, 5)}},
             {"alibi", {of36(36, 30), of36(36, 31), of36(35, 29)}}});
  expect(train::judge_suite_claims(r), "s3", train::kContradicted, "reverse_string none at or above alibi", 2);
  // Level with a few examples' difference and seed noise: inconclusive.
  r = suite({{"none", {of36(36, 12), of36(36, 6), of36(36, 9)}}, {"rope", {of36(36, 10), of36(35, 12), of36(36, 8)}}});
  expect(train::judge_suite_claims(r), "s3", train::kInconclusive,
         "not significant at 5% for reverse_string none at or above rope", 1);
  // Neither learns the task: nothing to compare.
  r = suite({{"none", {of36(10, 0), of36(12, 0), of36(9, 0)}}, {"rope", {of36(11, 0), of36(10, 0), of36(12, 0)}}});
  claims = train::judge_suite_claims(r);
  expect(claims, "s3", train::kInconclusive, "no pair of none and another row where either learns the task", 0);
  EXPECT_TRUE(contains(claim(claims, "s3").measured,
                       "neither learns the task in distribution (left out): reverse_string none/rope"))
      << claim(claims, "s3").measured;
  // Without none, or without one of the three tasks: not measured.
  expect(train::judge_suite_claims(suite({{"rope", {of36(36, 4), of36(35, 6), of36(36, 5)}}})), "s3",
         train::kNotMeasured, "needs none in --methods", 0);
  r = suite({{"none", {of36(36, 30), of36(36, 31), of36(36, 29)}}, {"rope", {of36(36, 4), of36(35, 6), of36(36, 5)}}});
  r.config.of<train::SuiteSettings>().tasks = {"cycle_navigation", "reverse_string"};
  for (auto& u : r.units)
    for (auto& t : u.parts.get<train::SuiteResult>().tasks) t.task = "cycle_navigation";
  expect(train::judge_suite_claims(r), "s3", train::kNotMeasured,
         "duplicate_string, reverse_string or bucket_sort in --suite-tasks", 0);
}

// ---- pk1, pk2: passkey retrieval --------------------------------------------------------------------------

namespace {

// acc[row][seed - 1] = (accuracy at 1x, accuracy at 2x and 4x) at each of 3 depths, 8 examples per
// cell; a negative accuracy: n/a (beyond a learned table).
train::ComparisonResult passkey(const std::map<std::string, std::vector<std::pair<double, double>>>& acc,
                                std::vector<std::string> methods = {"learned", "rope"}) {
  train::ComparisonResult r;
  r.config = train::compare_preset("tiny");
  r.config.methods = methods;
  r.config.seeds = {1, 2, 3};
  auto& c = r.config.of<train::PasskeyConfig>();
  c.multipliers = {1, 2, 4};
  c.depths = {0, 0.5, 1};
  c.examples = 8;
  for (const auto& m : methods)
    for (uint64_t s = 1; s <= 3; ++s) {
      train::UnitResult u;
      u.method = m;
      u.seed = s;
      for (const auto& [row, v] : acc) {
        if (train::Row::parse(row).method != m) continue;
        train::PasskeyResult p;
        p.grid.alphabet = "letters";
        for (int64_t mult : c.multipliers)
          for (double d : c.depths) {
            train::PasskeyCell cell;
            cell.multiplier = mult;
            cell.depth = d;
            const double a = mult == 1 ? v[s - 1].first : v[s - 1].second;
            if (a >= 0) {
              cell.examples = 8;
              cell.accuracy = a;
            }
            p.grid.cells.push_back(cell);
          }
        u.parts.get<train::PasskeyRows>().rows[row] = p;
      }
      r.units.push_back(u);
    }
  return r;
}

std::pair<double, double> of8(int in, int ood) { return {in / 8.0, ood / 8.0}; }

}  // namespace

TEST(StudyClaims, Pk1EveryVerdict) {
  // RoPE retrieves at 1x and loses it beyond, by the same amount on every seed (no seed variance: the
  // examples' noise alone decides); learned has no cell beyond 1x.
  const std::vector<std::pair<double, double>> lost = {of8(8, 1), of8(7, 0), of8(8, 1)};
  auto r = passkey({{"learned", {of8(8, -8), of8(7, -8), of8(8, -8)}}, {"rope", lost}});
  auto claims = train::judge_passkey_claims(r);
  expect(claims, "pk1", train::kSupported, "significant at 5% as claimed", 1);
  const ClaimVerdict& pk1 = claim(claims, "pk1");
  EXPECT_TRUE(contains(pk1.measured, "rope drop 0.88 [")) << pk1.measured;
  EXPECT_TRUE(contains(pk1.measured, "n/a beyond 1x: learned")) << pk1.measured;
  EXPECT_TRUE(contains(pk1.metric, "a drop of at least 0.10")) << pk1.metric;
  EXPECT_TRUE(contains(pk1.budget, "8 test examples per (length, depth) cell")) << pk1.budget;
  EXPECT_TRUE(contains(pk1.protocol, "1x against the mean over 2x, 4x")) << pk1.protocol;
  // Retrieval kept at every length: against the claim.
  r = passkey({{"rope", {of8(8, 8), of8(8, 8), of8(8, 8)}}});
  expect(train::judge_passkey_claims(r), "pk1", train::kContradicted,
         "significantly the other way: rope "
         "drops by more than 0.10",
         1);
  // A drop of about 0.17 on 24 and 48 examples, with seeds that disagree: not shown.
  r = passkey({{"rope", {of8(8, 6), of8(7, 7), of8(8, 6)}}});
  expect(train::judge_passkey_claims(r), "pk1", train::kInconclusive, "not significant at 5% for rope drops", 1);
  // Nothing retrieves at 1x.
  r = passkey({{"rope", {of8(1, 0), of8(0, 0), of8(2, 1)}}});
  expect(train::judge_passkey_claims(r), "pk1", train::kInconclusive, "no method retrieves at the training length", 0);
  // Only a method that cannot run beyond its table.
  r = passkey({{"learned", {of8(8, -8), of8(7, -8), of8(8, -8)}}}, {"learned"});
  expect(train::judge_passkey_claims(r), "pk1", train::kNotMeasured,
         "needs a method that runs beyond its training length", 0);
  // No passkey results: no claims.
  EXPECT_TRUE(train::judge_passkey_claims(passkey({})).empty());
}

TEST(StudyClaims, Pk2EveryVerdict) {
  const std::vector<std::pair<double, double>> lost = {of8(8, 1), of8(7, 0), of8(8, 1)};
  const std::vector<std::pair<double, double>> kept = {of8(8, 7), of8(7, 6), of8(8, 7)};
  auto r = passkey({{"rope", lost}, {"rope+yarn", kept}, {"rope+linear", {of8(8, 6), of8(7, 6), of8(8, 7)}}});
  auto claims = train::judge_passkey_claims(r);
  expect(claims, "pk2", train::kSupported, "all of 2 significant at 5% as claimed", 2);
  EXPECT_TRUE(contains(claim(claims, "pk2").measured, "rope+yarn − rope 0.75 [")) << claim(claims, "pk2").measured;
  EXPECT_TRUE(contains(claim(claims, "pk2").metric, "a gain of at least 0.05")) << claim(claims, "pk2").metric;
  // A scaling that loses what plain RoPE keeps.
  r = passkey({{"rope", kept}, {"rope+yarn", {of8(8, 0), of8(7, 0), of8(8, 0)}}});
  expect(train::judge_passkey_claims(r), "pk2", train::kContradicted,
         "significantly the other way: "
         "rope+yarn above rope by more than 0.05",
         1);
  // One example more per cell: not shown to exceed 0.05.
  r = passkey({{"rope", lost}, {"rope+yarn", {of8(8, 2), of8(7, 1), of8(8, 2)}}});
  expect(train::judge_passkey_claims(r), "pk2", train::kInconclusive, "not significant at 5% for rope+yarn", 1);
  // No scaled row.
  r = passkey({{"rope", lost}});
  expect(train::judge_passkey_claims(r), "pk2", train::kNotMeasured,
         "needs the rope+linear, rope+dynamic or rope+yarn rows", 0);
  r = passkey({{"learned", {of8(8, -8), of8(7, -8), of8(8, -8)}}}, {"learned"});
  expect(train::judge_passkey_claims(r), "pk2", train::kNotMeasured, "needs rope in --methods", 0);
}

// ---- p1, p2, p3: position interpolation -------------------------------------------------------------------

namespace {

// ppl[scaling][seed - 1] = perplexity at the fine-tuning length M·L of "rope(+scaling) ftMx", the same
// at M = 2 and 4 plus 0.1 · M; 40 fine-tuning steps of max(1, 12 / M) windows.
train::ComparisonResult pi(const std::map<std::string, std::vector<double>>& ppl) {
  train::ComparisonResult r;
  r.config = train::compare_preset("tiny");
  r.config.methods = {"rope"};
  r.config.seeds = {1, 2, 3};
  r.config.eval_multipliers = {1, 2, 4};
  r.config.base.batch_size = 12;
  auto& s = r.config.of<train::PiSettings>();
  s.iters = 40;
  s.multipliers = {2, 4};
  s.scalings = {};
  for (const auto& [scaling, v] : ppl)
    if (scaling != "drope") s.scalings.push_back(scaling);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    train::UnitResult u;
    u.method = "rope";
    u.seed = seed;
    for (int64_t M : s.multipliers)
      for (const auto& [scaling, v] : ppl) {
        if (scaling == "drope") continue;
        train::PiResult p;
        p.scaling = scaling;
        p.multiplier = M;
        p.iters = 40;
        p.batch = 12 / M;
        p.lengths.assign(3, std::nullopt);
        const double x = v[seed - 1] + 0.1 * static_cast<double>(M);
        p.lengths[M == 2 ? 1 : 2] = train::LengthResult{M * r.config.base.model.block_size, 4, std::log(x), x, 0.3};
        u.parts.get<train::PiResults>().rows.push_back(p);
      }
    // DroPE's row: recalibrated at 1x, evaluated at 2x and 4x (ppl["drope"] + 0.1 M there).
    if (const auto d = ppl.find("drope"); d != ppl.end()) {
      train::PiResult p;
      p.scaling = "drope";
      p.multiplier = 1;
      p.iters = 40;
      p.batch = 12;
      p.lengths.assign(3, std::nullopt);
      for (int64_t M : {2, 4}) {
        const double x = d->second[seed - 1] + 0.1 * static_cast<double>(M);
        p.lengths[M == 2 ? 1 : 2] = train::LengthResult{M * r.config.base.model.block_size, 4, std::log(x), x, 0.3};
      }
      u.parts.get<train::PiResults>().rows.push_back(p);
    }
    r.units.push_back(u);
  }
  return r;
}

}  // namespace

TEST(StudyClaims, PiClaimsEveryVerdict) {
  const std::vector<double> base = {5.50, 5.62, 5.55};
  auto plus = [&](double d, std::vector<double> noise) {
    for (size_t i = 0; i < noise.size(); ++i) noise[i] += base[i] + d;
    return noise;
  };
  // p1 supported (PI 0.5 below plain), p2 contradicted (NTK 0.5 above PI), p3 inconclusive (YaRN level with PI).
  auto r = pi({{"none", base},
               {"linear", plus(-0.5, {0.01, -0.02, 0.0})},
               {"ntk", plus(0.0, {0.02, 0.0, -0.01})},
               {"yarn", plus(-0.5, {0.1, -0.1, 0.02})}});
  auto claims = train::judge_pi_claims(r);
  expect(claims, "p1", train::kSupported, "all of 2 significant at 5% as claimed", 2);
  expect(claims, "p2", train::kContradicted,
         "significantly the other way after Holm over the 2: 2x: rope+ntk ft2x below "
         "rope+linear ft2x",
         2);
  expect(claims, "p3", train::kInconclusive, "not significant at 5% for 2x: rope+yarn ft2x below rope+linear ft2x", 2);
  const ClaimVerdict& p1 = claim(claims, "p1");
  EXPECT_TRUE(contains(p1.budget, "40 fine-tuning steps of 6 windows of")) << p1.budget;
  EXPECT_TRUE(contains(p1.budget, "3 of")) << p1.budget;
  EXPECT_TRUE(contains(p1.measured, "2x: rope+linear ft2x ")) << p1.measured;
  EXPECT_TRUE(contains(p1.protocol, "perplexity at the fine-tuning length")) << p1.protocol;
  // p1 contradicted (PI 0.7 above plain, as the quick preset measured), p2 inconclusive, p3 supported.
  r = pi({{"none", base},
          {"linear", plus(0.7, {0.01, -0.02, 0.0})},
          {"ntk", plus(0.7, {0.1, -0.1, 0.03})},
          {"yarn", plus(0.2, {0.0, 0.01, -0.02})}});
  claims = train::judge_pi_claims(r);
  expect(claims, "p1", train::kContradicted, "significantly the other way after Holm over the 2", 2);
  expect(claims, "p2", train::kInconclusive, "not significant at 5% for 2x: rope+ntk ft2x below rope+linear ft2x", 2);
  expect(claims, "p3", train::kSupported, "all of 2 significant at 5% as claimed", 2);
  // p1 inconclusive (PI level with plain), p2 supported, p3 contradicted.
  r = pi({{"none", base},
          {"linear", plus(0.0, {0.1, -0.1, 0.03})},
          {"ntk", plus(-0.5, {0.0, 0.01, -0.02})},
          {"yarn", plus(0.5, {0.01, 0.0, -0.01})}});
  claims = train::judge_pi_claims(r);
  expect(claims, "p1", train::kInconclusive, "not significant at 5% for 2x: rope+linear ft2x below rope ft2x", 2);
  expect(claims, "p2", train::kSupported, "all of 2 significant at 5% as claimed", 2);
  expect(claims, "p3", train::kContradicted, "significantly the other way after Holm over the 2", 2);
  // Plain RoPE fine-tuned alone: the scalings the claims compare were not run.
  claims = train::judge_pi_claims(pi({{"none", base}}));
  for (const char* id : {"p1", "p2", "p3"}) expect(claims, id, train::kNotMeasured, "in --pi-scalings", 0);
  EXPECT_TRUE(contains(claim(claims, "p2").why, "ntk and linear in --pi-scalings")) << claim(claims, "p2").why;
  // p4: DroPE (recalibrated at 1x) against linear, ntk and yarn fine-tuned at M, at M: a family of 2 x 3.
  r = pi({{"none", base},
          {"linear", base},
          {"ntk", plus(0.1, {0.0, 0.01, -0.01})},
          {"yarn", plus(-0.1, {0.01, 0.0, 0.0})},
          {"drope", plus(-0.6, {0.01, -0.02, 0.0})}});
  expect(train::judge_pi_claims(r), "p4", train::kSupported, "all of 6 significant at 5% as claimed", 6);
  EXPECT_TRUE(contains(claim(train::judge_pi_claims(r), "p4").measured, "2x: rope+drope ft1x "))
      << claim(train::judge_pi_claims(r), "p4").measured;
  r = pi({{"none", base}, {"linear", base}, {"drope", plus(0.6, {0.01, -0.02, 0.0})}});
  expect(train::judge_pi_claims(r), "p4", train::kContradicted, "2x: rope+drope ft1x below rope+linear ft2x", 2);
  r = pi({{"none", base}, {"linear", base}, {"drope", plus(0.0, {0.1, -0.1, 0.03})}});
  expect(train::judge_pi_claims(r), "p4", train::kInconclusive, "not significant at 5% for 2x: rope+drope ft1x below",
         2);
  expect(train::judge_pi_claims(pi({{"none", base}, {"linear", base}})), "p4", train::kNotMeasured, "--pi-drope", 0);
  // The fine-tuning lengths not evaluated: not measured either.
  r = pi({{"none", base}, {"linear", plus(-0.5, {0.01, -0.02, 0.0})}});
  r.config.eval_multipliers = {1, 8};
  expect(train::judge_pi_claims(r), "p1", train::kNotMeasured, "--pi-multipliers value among --eval-multipliers", 0);
}

// ---- the encoder track's ordering claim -------------------------------------------------------------------

namespace {

// acc[method][seed - 1] = accuracy and macro-F1 (the same) of the one sequence task at 1x.
train::EncoderTrackResult encoder(const std::map<std::string, std::vector<double>>& acc) {
  train::EncoderTrackResult r;
  r.config = train::encoder_track_preset("tiny");
  r.config.methods.clear();
  for (const auto& [m, v] : acc) r.config.methods.push_back(m);
  r.config.seeds = {1, 2, 3};
  r.config.tasks = {"reversed"};
  r.config.multipliers = {1};
  for (const auto& [m, v] : acc)
    for (uint64_t s = 1; s <= 3; ++s) {
      train::EncoderUnitResult u;
      u.method = m;
      u.seed = s;
      u.mlm_loss = {1.0};
      u.mlm_accuracy = {0.5};
      u.tasks = {train::EncoderTaskScore{"reversed", 1, 16, 8, v[s - 1], v[s - 1]}};
      r.units.push_back(u);
    }
  return r;
}

}  // namespace

TEST(StudyClaims, EncoderOrderingEveryVerdict) {
  const std::vector<double> rope = {0.90, 0.92, 0.91}, deberta = {0.80, 0.82, 0.81}, t5 = {0.70, 0.72, 0.71},
                            sinusoidal = {0.60, 0.62, 0.61};
  // In the claimed order, well apart: 3 pairs x (accuracy, F1).
  auto claims = train::judge_encoder_claims(
      encoder({{"rope", rope}, {"deberta", deberta}, {"t5", t5}, {"sinusoidal", sinusoidal}}));
  ASSERT_EQ(claims.size(), 1u);
  expect(claims, "b", train::kSupported, "all of 6 significant at 5% as claimed", 6);
  EXPECT_TRUE(contains(claims[0].budget, "fine-tuning steps per task")) << claims[0].budget;
  EXPECT_TRUE(contains(claims[0].measured, "accuracy: rope 0.910")) << claims[0].measured;
  // T5 well above DeBERTa: against the claim.
  claims = train::judge_encoder_claims(
      encoder({{"rope", rope}, {"deberta", t5}, {"t5", deberta}, {"sinusoidal", sinusoidal}}));
  expect(claims, "b", train::kContradicted, "significantly the other way after Holm over the 6: accuracy deberta vs t5",
         6);
  // RoPE level with DeBERTa.
  claims = train::judge_encoder_claims(encoder({{"rope", {0.81, 0.80, 0.83}},
                                                {"deberta", deberta},
                                                {"t5", t5},
                                                {"sinusoidal", sinusoidal},
                                                {"learned", sinusoidal}}));
  expect(claims, "b", train::kInconclusive, "not significant at 5% for accuracy rope vs deberta", 8);
  // No DeBERTa, no absolute encoding.
  claims = train::judge_encoder_claims(encoder({{"rope", rope}, {"t5", t5}}));
  expect(claims, "b", train::kNotMeasured, "needs deberta, absolute with values at 1x", 0);
}

// ---- the tables and CSVs: Wilson's interval per model, seed intervals clipped to [0, 1] ---------------

TEST(StudyTables, SuiteWilsonPerModelAndClippedSeedInterval) {
  const auto r = suite({{"rope", {of36(36, 4), of36(35, 6), of36(36, 5)}}});
  test::TempDir dir;
  train::write_suite_csv(r, dir.str("suite.csv"));
  train::write_suite_seeds_csv(r, dir.str("suite_seeds.csv"));
  const std::string csv = read_file(dir.str("suite.csv")), seeds_csv = read_file(dir.str("suite_seeds.csv"));
  // Mean 0.990741 over {1, 35/36, 1}: its t-interval ends above 1, clipped (the schema is unchanged).
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "row,task,lo,hi,metric,n,mean,std,ci_low,ci_high");
  EXPECT_TRUE(contains(csv, "\nrope,reverse_string,1,4,sequence_accuracy,3,0.990741,0.016038,0.")) << csv;
  EXPECT_TRUE(contains(csv, "0.016038,0.950901,1.000000\n")) << csv;
  // Each model's count of 36 with Wilson's interval (mpmath: 35/36 -> [0.85830281, 0.99507959]).
  EXPECT_EQ(seeds_csv.substr(0, seeds_csv.find('\n')),
            "row,task,lo,hi,seed,examples,sequence_accuracy,sequence_correct,wilson_low,wilson_high,token_accuracy");
  EXPECT_TRUE(contains(seeds_csv, "\nrope,reverse_string,1,4,2,36,0.972222,35,0.858303,0.995080,0.972222\n"))
      << seeds_csv;
  EXPECT_TRUE(contains(seeds_csv, "\nrope,reverse_string,5,8,3,36,0.138889,5,0.060818,0.286595,0.138889\n"))
      << seeds_csv;
  const std::string md = train::suite_markdown(r, false);
  EXPECT_TRUE(contains(md, "| reverse_string | rope | 0.99 ± 0.02 [0.95, 1.00] |")) << md;
  EXPECT_TRUE(contains(md, "| reverse_string | rope | 2 | 0.97 [0.86, 1.00] (35/36) |")) << md;
  EXPECT_TRUE(contains(md, "it covers the seeds' spread alone")) << md;
  // One seed: the cell is that model's count with Wilson's interval.
  auto one = r;
  one.config.seeds = {2};
  EXPECT_TRUE(contains(train::suite_markdown(one, false), "| reverse_string | rope | 0.97 [0.86, 1.00] (35/36) |"))
      << train::suite_markdown(one, false);
}

TEST(StudyTables, PasskeyWilsonPerModelAndClippedSeedInterval) {
  const auto r = passkey({{"rope", {of8(8, 1), of8(7, 0), of8(8, 1)}}}, {"rope"});
  test::TempDir dir;
  train::write_passkey_csv(r, dir.str("passkey.csv"));
  train::write_passkey_seeds_csv(r, dir.str("passkey_seeds.csv"));
  const std::string csv = read_file(dir.str("passkey.csv")), seeds_csv = read_file(dir.str("passkey_seeds.csv"));
  EXPECT_TRUE(contains(csv, "\nrope,1,mean,3,0.958333,0.072169,0.779056,1.000000\n")) << csv;  // clipped at 1
  EXPECT_EQ(seeds_csv.substr(0, seeds_csv.find('\n')),
            "row,seed,multiplier,depth,examples,accuracy,correct,wilson_low,wilson_high");
  // One cell (7 of 8) and the mean over the three depths (21 of 24), mpmath.
  EXPECT_TRUE(contains(seeds_csv, "\nrope,2,1,0.5,8,0.875000,7,0.529112,0.977583\n")) << seeds_csv;
  EXPECT_TRUE(contains(seeds_csv, "\nrope,2,1,mean,24,0.875000,21,0.689961,0.956557\n")) << seeds_csv;
  const std::string md = train::passkey_markdown(r, "/nonexistent");
  EXPECT_TRUE(contains(md, "| rope | 0.96 ± 0.07 [0.78, 1.00] |")) << md;
  EXPECT_TRUE(contains(md, "| rope | 2 | 0.88 [0.69, 0.96] (21/24) |")) << md;
  EXPECT_TRUE(contains(md, "the interval clipped to [0, 1]: the seeds' spread alone")) << md;
}
