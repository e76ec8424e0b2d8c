// stats.h — the statistics of the comparison: a summary of per-seed values (mean, sample standard
// deviation, 95% confidence interval of the mean from Student's t), and Welch's unequal-variance
// t-test of two methods' per-seed values with the 95% interval of the difference of means.
// Welch (1947), "The generalization of 'Student's' problem when several different population
// variances are involved"; the Welch–Satterthwaite degrees of freedom. Student's t distribution
// through the regularized incomplete beta function, I_x(a, b) by its continued fraction (DLMF
// 8.17.22, evaluated with the modified Lentz method). Holm's (1979) step-down adjustment of a family
// of p-values, Wilson's (1927) score interval of a binomial proportion, and percentile-bootstrap
// intervals over seeds and over the evaluation windows within each seed.
//
// Values that are not finite (a diverged run's inf perplexity, a NaN) are no measurement: every
// function here leaves them out and says how many it left out (Summary::non_finite,
// WelchTest::non_finite), never throws on them.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace posgrad::train {

// Regularized incomplete beta I_x(a, b), a, b > 0, x in [0, 1]. ValueError outside.
double incomplete_beta(double a, double b, double x);
// P(T <= t) for Student's t with df > 0 degrees of freedom.
double student_t_cdf(double t, double df);
// P(|T| >= |t|), the two-sided p-value, from the tail directly: I_{df/(df+t²)}(df/2, 1/2) (DLMF
// 8.17.1 with Abramowitz & Stegun 26.7.1), so it stays exact far below 1e-16 where 2(1 − cdf)
// would round to 0. t = ±inf: 0; NaN: NaN. ValueError for df <= 0.
double student_t_two_sided_p(double t, double df);
// The p-quantile of Student's t (0 < p < 1), by bisection on the CDF to 1e-12.
double student_t_quantile(double p, double df);

// The finite values -> their count n, mean, sample standard deviation (n - 1 in the denominator),
// and the 95% interval mean ± t(0.975, n - 1) · std / sqrt(n); non_finite counts the values left
// out. n = 0: everything NaN; n = 1: std 0, interval NaN.
struct Summary {
  int64_t n = 0, non_finite = 0;
  double mean = 0, std = 0, ci_low = 0, ci_high = 0;
  bool has_interval() const { return n >= 2; }
};
Summary summarize(const std::vector<double>& values);

// The finite values of v, in order; *dropped (when given) += how many were not finite.
std::vector<double> finite_values(const std::vector<double>& v, int64_t* dropped = nullptr);

// Welch's t-test of mean(a) - mean(b) on their finite values (non_finite: how many were left out).
// Two-sided p-value (student_t_two_sided_p); 95% interval of the difference. Not testable (testable
// false, p NaN, `why` says which) with fewer than 2 finite values on a side, or when neither side
// varies: a constant group ([1, 1, 1] against [0.875, 0.875, 0.875], accuracies of 8 examples) gives
// no estimate of the noise, and a t-test on it would call any difference exact.
struct WelchTest {
  bool testable = false;
  double diff = 0, t = 0, df = 0, p = 1, ci_low = 0, ci_high = 0;
  int64_t non_finite = 0;
  std::string why;  // when not testable: "fewer than 2 seeds" | "no variance on either side"
};
WelchTest welch_test(const std::vector<double>& a, const std::vector<double>& b);

// One-sample t-test of mean(d) − mu on the finite values of d (paired differences, ratios against a
// threshold): diff = mean − mu, df = n − 1, the 95% interval of the mean − mu. Not testable with
// fewer than 2 finite values or no variance (as welch_test).
WelchTest one_sample_test(const std::vector<double>& d, double mu = 0);

// Holm's (1979) step-down adjusted p-values of a family, in the input's order: with the testable
// p-values sorted p_(1) <= ... <= p_(m), adj_(i) = max_{j <= i} min(1, (m − j + 1) · p_(j)). m counts
// every entry, a NaN one (a test that could not be made) too, so an untestable member still costs
// its share of the error rate; NaN entries stay NaN. Rejecting where adj < alpha keeps the
// probability of any false rejection in the family at most alpha, under any dependence.
std::vector<double> holm_adjust(const std::vector<double>& p);

// Wilson's score interval of a binomial proportion: `successes` of `n` trials, at the two-sided
// level of z (1.959964: 95%). Stays inside [0, 1] and is not empty at 0 or n successes (Wilson 1927;
// Brown, Cai & DasGupta 2001). ValueError unless 0 <= successes <= n, n > 0.
struct Proportion {
  double p = 0, low = 0, high = 0;
};
Proportion wilson_interval(int64_t successes, int64_t n, double z = 1.959963984540054);

// -1: a significantly lower than b, +1: significantly higher, 0: no significant difference (or
// not testable), at the two-sided level alpha.
int significant_order(const WelchTest& w, double alpha = 0.05);

// ---- bootstrap intervals ---------------------------------------------------------------------------
// Percentile bootstrap (Efron & Tibshirani 1993, "An Introduction to the Bootstrap", ch. 13): the
// statistic recomputed on `resamples` resamples drawn with replacement, the interval the 2.5% and
// 97.5% quantiles of those values (linear interpolation between order statistics, R's type 7).
// Draws come from a posgrad::Generator seeded with `seed` (tensor/random.h: counter-based, so the
// interval is a pure function of the inputs and the seed, bit for bit); an index into n items is
// floor(u · n) for one uniform u, and a draw from a single item uses no number.

// A 95% bootstrap interval; low = high = NaN (resamples 0) when nothing was finite to resample.
struct BootstrapInterval {
  double low = NAN, high = NAN;
  int64_t resamples = 0;
  int64_t non_finite = 0;  // seeds (values) left out because a value was not finite
  bool valid() const { return resamples > 0; }
};

// The mean of the finite values, resampled over the values (the seeds).
BootstrapInterval bootstrap_mean(const std::vector<double>& values, int64_t resamples, uint64_t seed);

// One seed's evaluation at one length: per window, the summed next-token loss of the targets it
// scored (nats) and how many it scored (train/evaluate.h, EvalResult::window_loss / window_tokens).
struct WindowLosses {
  std::vector<double> loss;
  std::vector<int64_t> tokens;
};
// The interval of the mean over seeds of each seed's perplexity exp(Σ_w loss[w] / Σ_w tokens[w]),
// resampled in two stages (Davison & Hinkley 1997, "Bootstrap Methods and their Application", §3.8):
// the seeds with replacement, then within each drawn seed its windows with replacement. It covers
// both the seed-to-seed noise of training and the noise of which text was scored (the windows are
// treated as exchangeable; neighbouring windows of one text are not independent, so if anything
// the window part is too narrow). With one window per seed it is bootstrap_mean of the per-seed
// perplexities (the same draws, the same interval); with one seed, a bootstrap over its windows.
// A seed with a non-finite window loss is left out (counted). ValueError when resamples < 2, when a
// seed has no windows or loss and tokens of different lengths, or a window scored fewer than 1 token.
BootstrapInterval perplexity_bootstrap(const std::vector<WindowLosses>& seeds, int64_t resamples, uint64_t seed);

// Spearman's rank correlation of (x, y): Pearson's correlation of their ranks, ties sharing their
// mean rank; 0 when either has a single rank.
double spearman(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace posgrad::train
