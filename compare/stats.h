// stats.h — the statistics of the comparison: a summary of per-seed values (mean, sample standard
// deviation, 95% confidence interval of the mean from Student's t), and Welch's unequal-variance
// t-test of two methods' per-seed values with the 95% interval of the difference of means.
// Welch (1947), "The generalization of 'Student's' problem when several different population
// variances are involved"; the Welch–Satterthwaite degrees of freedom. Student's t distribution
// through the regularized incomplete beta function, I_x(a, b) by its continued fraction (DLMF
// 8.17.22, evaluated with the modified Lentz method). Deliberately not here: multiple-comparison
// corrections (the report states how many comparisons it makes), non-parametric tests.
#pragma once

#include <cstdint>
#include <vector>

namespace posgrad::train {

// Regularized incomplete beta I_x(a, b), a, b > 0, x in [0, 1]. ValueError outside.
double incomplete_beta(double a, double b, double x);
// P(T <= t) for Student's t with df > 0 degrees of freedom.
double student_t_cdf(double t, double df);
// The p-quantile of Student's t (0 < p < 1), by bisection on the CDF to 1e-12.
double student_t_quantile(double p, double df);

// n values -> mean, sample standard deviation (n - 1 in the denominator), and the 95% interval
// mean ± t(0.975, n - 1) · std / sqrt(n). n = 0: everything NaN; n = 1: std 0, interval NaN.
struct Summary {
  int64_t n = 0;
  double mean = 0, std = 0, ci_low = 0, ci_high = 0;
  bool has_interval() const { return n >= 2; }
};
Summary summarize(const std::vector<double>& values);

// Welch's t-test of mean(a) - mean(b). Two-sided p-value; 95% interval of the difference.
// Fewer than 2 values on a side: not testable (testable false, p NaN). Both sides without
// variance: p = 0 when the means differ, 1 when they are equal (a deterministic quantity).
struct WelchTest {
  bool testable = false;
  double diff = 0, t = 0, df = 0, p = 1, ci_low = 0, ci_high = 0;
};
WelchTest welch_test(const std::vector<double>& a, const std::vector<double>& b);

// -1: a significantly lower than b, +1: significantly higher, 0: no significant difference (or
// not testable), at the two-sided level alpha.
int significant_order(const WelchTest& w, double alpha = 0.05);

// Spearman's rank correlation of (x, y): Pearson's correlation of their ranks, ties sharing their
// mean rank; 0 when either has a single rank.
double spearman(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace posgrad::train
