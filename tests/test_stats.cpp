// test_stats.cpp — the comparison's statistics against known answers (values from SciPy's
// scipy.special.betainc, scipy.stats.t and scipy.stats.ttest_ind(equal_var=False), recorded here).
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "compare/stats.h"
#include "tensor/errors.h"

using namespace posgrad;
using namespace posgrad::train;

TEST(Stats, IncompleteBetaKnownValues) {
  EXPECT_NEAR(incomplete_beta(2.0, 3.0, 0.4), 0.5248, 1e-13);  // closed form 1 - (1-x)^3 (1 + 3x) ... = 0.5248
  EXPECT_NEAR(incomplete_beta(0.5, 0.5, 0.1), 0.20483276469913345, 1e-12);
  EXPECT_NEAR(incomplete_beta(10, 0.5, 0.99), 0.6579281751567845, 1e-12);
  EXPECT_EQ(incomplete_beta(3, 4, 0), 0.0);
  EXPECT_EQ(incomplete_beta(3, 4, 1), 1.0);
  EXPECT_THROW(incomplete_beta(0, 1, 0.5), ValueError);
  EXPECT_THROW(incomplete_beta(1, 1, 1.5), ValueError);
}

TEST(Stats, StudentTKnownValues) {
  EXPECT_NEAR(student_t_quantile(0.975, 1), 12.706204736174694, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 2), 4.302652729749462, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 4), 2.7764451051977934, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 9.5), 2.2441374614922958, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 30), 2.0422724563012378, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.025, 4), -2.7764451051977934, 1e-9);
  EXPECT_NEAR(student_t_cdf(-2.0, 3), 0.06966298427942152, 1e-12);
  EXPECT_NEAR(student_t_cdf(1.5, 7.3), 0.912218453598457, 1e-12);
  EXPECT_EQ(student_t_cdf(0, 5), 0.5);
}

TEST(Stats, SummaryHasTheStudentInterval) {
  const Summary s = summarize({1, 2, 3, 4});
  EXPECT_EQ(s.n, 4);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_NEAR(s.std, 1.2909944487358056, 1e-15);
  EXPECT_NEAR(s.ci_low, 0.4457397432394794, 1e-9);
  EXPECT_NEAR(s.ci_high, 4.554260256760521, 1e-9);
  const Summary one = summarize({7});
  EXPECT_EQ(one.mean, 7);
  EXPECT_EQ(one.std, 0);
  EXPECT_FALSE(one.has_interval());
  EXPECT_TRUE(std::isnan(one.ci_low));
  EXPECT_TRUE(std::isnan(summarize({}).mean));
}

TEST(Stats, WelchTestKnownValues) {
  WelchTest w = welch_test({4.31, 4.35, 4.28}, {4.63, 4.60, 4.70});
  ASSERT_TRUE(w.testable);
  EXPECT_NEAR(w.t, -9.19191923976406, 1e-9);
  EXPECT_NEAR(w.df, 3.5363994743757954, 1e-9);
  EXPECT_NEAR(w.p, 0.0013629695323349035, 1e-10);
  EXPECT_NEAR(w.ci_low, -0.4350485027179975, 1e-9);
  EXPECT_NEAR(w.ci_high, -0.22495149728200264, 1e-9);
  EXPECT_EQ(significant_order(w), -1);
  w = welch_test({1, 2, 3}, {1.5, 2.5, 3.5, 4.5, 5.5});
  EXPECT_NEAR(w.t, -1.6431676725154984, 1e-9);
  EXPECT_NEAR(w.df, 5.882352941176469, 1e-9);
  EXPECT_NEAR(w.p, 0.15244255151927696, 1e-10);
  EXPECT_EQ(significant_order(w), 0);  // not significant at 0.05
}

TEST(Stats, WelchTestEdgeCases) {
  EXPECT_FALSE(welch_test({1}, {2, 3}).testable);
  EXPECT_EQ(welch_test({1}, {2, 3}).why, "fewer than 2 seeds");
  EXPECT_EQ(significant_order(welch_test({1}, {2, 3})), 0);
  // Constant groups give no estimate of the noise: not testable, equal or not ([1, 1, 1] against
  // [0.875, 0.875, 0.875] is 8 examples per cell, not an exact difference).
  for (const auto& [a, b] : std::vector<std::pair<std::vector<double>, std::vector<double>>>{
           {{5, 5, 5}, {5, 5}}, {{1, 1, 1}, {0.875, 0.875, 0.875}}}) {
    const WelchTest w = welch_test(a, b);
    EXPECT_FALSE(w.testable);
    EXPECT_TRUE(std::isnan(w.p));
    EXPECT_EQ(w.why, "no variance on either side");
    EXPECT_EQ(significant_order(w), 0);
  }
  // One side constant, the other not: an ordinary Welch test (the variance comes from one side).
  EXPECT_TRUE(welch_test({4, 4, 4}, {5, 5.1, 4.9}).testable);
}

TEST(Stats, NonFiniteValuesAreLeftOutAndCounted) {
  const Summary s = summarize({1, NAN, 2, INFINITY, 3, -INFINITY});
  EXPECT_EQ(s.n, 3);
  EXPECT_EQ(s.non_finite, 3);
  EXPECT_DOUBLE_EQ(s.mean, 2.0);
  EXPECT_TRUE(std::isfinite(s.ci_low));
  const WelchTest w = welch_test({4.31, 4.35, NAN, 4.28}, {4.63, INFINITY, 4.60, 4.70});
  ASSERT_TRUE(w.testable);
  EXPECT_EQ(w.non_finite, 2);
  EXPECT_NEAR(w.p, 0.0013629695323349035, 1e-10);  // the known-values case without the two
  EXPECT_FALSE(welch_test({NAN, NAN}, {1, 2}).testable);
  EXPECT_NO_THROW(summarize({NAN}));
}

TEST(Stats, TwoSidedPFromTheTail) {
  // mpmath betainc(df/2, 1/2, 0, df/(df+t^2)) at 50 digits.
  EXPECT_NEAR(student_t_two_sided_p(-2.0, 3), 0.13932596855884316, 1e-13);
  EXPECT_NEAR(student_t_two_sided_p(50, 3), 1.761715204127197e-05, 1e-17);
  // Far below 1e-16, where 2 (1 - cdf) is 0: relative accuracy kept.
  EXPECT_NEAR(student_t_two_sided_p(1e6, 3) / 2.2053155816792292e-18, 1.0, 1e-9);
  EXPECT_NEAR(student_t_two_sided_p(1000, 10) / 2.460824710173272e-26, 1.0, 1e-9);
  EXPECT_EQ(2.0 * (1.0 - student_t_cdf(1000, 10)), 0.0);  // what the tail formula avoids
  EXPECT_EQ(student_t_two_sided_p(INFINITY, 4), 0.0);
  EXPECT_EQ(student_t_two_sided_p(0, 4), 1.0);
  EXPECT_TRUE(std::isnan(student_t_two_sided_p(NAN, 4)));
  EXPECT_THROW(student_t_two_sided_p(1, 0), ValueError);
}

TEST(Stats, OneSampleTest) {
  // Against mu: the same t as Student's one-sample test; mean 1.02 of {1.01, 1.02, 1.03} vs 1.0.
  const WelchTest w = one_sample_test({1.01, 1.02, 1.03}, 1.0);
  ASSERT_TRUE(w.testable);
  EXPECT_NEAR(w.diff, 0.02, 1e-12);
  EXPECT_NEAR(w.t, 0.02 / (0.01 / std::sqrt(3.0)), 1e-9);
  EXPECT_EQ(w.df, 2);
  EXPECT_NEAR(w.p, student_t_two_sided_p(w.t, 2), 1e-15);
  EXPECT_NEAR(w.ci_low, 0.02 - 4.302652729749462 * 0.01 / std::sqrt(3.0), 1e-9);
  EXPECT_FALSE(one_sample_test({2, 2, 2}, 1).testable);
  EXPECT_FALSE(one_sample_test({2}, 1).testable);
}

TEST(Stats, HolmAdjustment) {
  // R: p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm") = 0.03 0.06 0.06 0.02
  const auto a = holm_adjust({0.01, 0.04, 0.03, 0.005});
  ASSERT_EQ(a.size(), 4u);
  EXPECT_NEAR(a[0], 0.03, 1e-15);
  EXPECT_NEAR(a[1], 0.06, 1e-15);
  EXPECT_NEAR(a[2], 0.06, 1e-15);
  EXPECT_NEAR(a[3], 0.02, 1e-15);
  // An untestable member stays NaN and still counts in m: 0.01 is multiplied by 3, not 2.
  const auto b = holm_adjust({0.01, NAN, 0.2});
  EXPECT_NEAR(b[0], 0.03, 1e-15);
  EXPECT_TRUE(std::isnan(b[1]));
  EXPECT_NEAR(b[2], 0.4, 1e-15);
  EXPECT_EQ(holm_adjust({0.9, 0.8})[0], 1.0);  // capped at 1
  EXPECT_TRUE(holm_adjust({}).empty());
}

TEST(Stats, WilsonInterval) {
  // Wilson (1927) at z = 1.959964, against mpmath at 40 digits.
  Proportion p = wilson_interval(8, 10);
  EXPECT_DOUBLE_EQ(p.p, 0.8);
  EXPECT_NEAR(p.low, 0.4901624715366417, 1e-12);
  EXPECT_NEAR(p.high, 0.9433178485456247, 1e-12);
  p = wilson_interval(0, 10);  // never empty, never below 0
  EXPECT_EQ(p.low, 0.0);
  EXPECT_NEAR(p.high, 0.2775327998628892, 1e-12);
  p = wilson_interval(10, 10);
  EXPECT_NEAR(p.low, 0.7224672001371107, 1e-12);
  EXPECT_LE(p.high, 1.0);
  p = wilson_interval(7, 36);
  EXPECT_NEAR(p.low, 0.09753095418928728, 1e-12);
  EXPECT_NEAR(p.high, 0.35028042995177385, 1e-12);
  EXPECT_THROW(wilson_interval(3, 2), ValueError);
  EXPECT_THROW(wilson_interval(0, 0), ValueError);
  EXPECT_THROW(wilson_interval(-1, 5), ValueError);
}
