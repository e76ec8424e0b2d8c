// test_stats.cpp — the comparison's statistics against known answers (values from SciPy's
// scipy.special.betainc, scipy.stats.t and scipy.stats.ttest_ind(equal_var=False), recorded here).
#include <gtest/gtest.h>

#include <cmath>

#include "tensor/errors.h"
#include "compare/stats.h"

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
  EXPECT_EQ(significant_order(welch_test({1}, {2, 3})), 0);
  const WelchTest same = welch_test({5, 5, 5}, {5, 5});
  EXPECT_EQ(same.p, 1.0);
  const WelchTest exact = welch_test({4, 4}, {5, 5, 5});  // deterministic values (parameter counts)
  EXPECT_EQ(exact.p, 0.0);
  EXPECT_EQ(significant_order(exact), -1);
}
