// stats.cpp — see stats.h.
#include "compare/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "tensor/errors.h"
#include "tensor/random.h"

namespace posgrad::train {

namespace {

// Continued fraction of I_x(a, b) (DLMF 8.17.22), modified Lentz; converges fast for x < (a+1)/(a+b+2).
double beta_fraction(double a, double b, double x) {
  const double tiny = 1e-300, eps = 1e-15;
  double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
  if (std::fabs(d) < tiny) d = tiny;
  d = 1.0 / d;
  double f = d;
  for (int m = 1; m <= 10000; ++m) {
    const double m2 = 2.0 * m;
    // even step: d_{2m} = m (b - m) x / ((a + 2m - 1)(a + 2m))
    double num = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
    d = 1.0 + num * d;
    c = 1.0 + num / c;
    if (std::fabs(d) < tiny) d = tiny;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    f *= d * c;
    // odd step: d_{2m+1} = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1))
    num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
    d = 1.0 + num * d;
    c = 1.0 + num / c;
    if (std::fabs(d) < tiny) d = tiny;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = d * c;
    f *= delta;
    if (std::fabs(delta - 1.0) < eps) break;
  }
  return f;
}

}  // namespace

double incomplete_beta(double a, double b, double x) {
  POSGRAD_CHECK(a > 0 && b > 0 && x >= 0 && x <= 1, ValueError,
                "incomplete_beta: need a, b > 0 and x in [0, 1], got a=", a, " b=", b, " x=", x);
  if (x == 0 || x == 1) return x;
  // x^a (1-x)^b / (a B(a, b)), in logs.
  const double front =
      std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1.0) / (a + b + 2.0)) return front * beta_fraction(a, b, x) / a;
  return 1.0 - front * beta_fraction(b, a, 1.0 - x) / b;  // symmetry I_x(a,b) = 1 - I_{1-x}(b,a)
}

double student_t_cdf(double t, double df) {
  POSGRAD_CHECK(df > 0, ValueError, "student_t_cdf: degrees of freedom must be positive, got ", df);
  if (std::isnan(t)) return NAN;
  if (std::isinf(t)) return t > 0 ? 1.0 : 0.0;
  const double tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t));  // P(T > |t|)
  return t >= 0 ? 1.0 - tail : tail;
}

double student_t_two_sided_p(double t, double df) {
  POSGRAD_CHECK(df > 0, ValueError, "student_t_two_sided_p: degrees of freedom must be positive, got ", df);
  if (std::isnan(t)) return NAN;
  if (std::isinf(t)) return 0.0;
  return incomplete_beta(df / 2.0, 0.5, df / (df + t * t));
}

double student_t_quantile(double p, double df) {
  POSGRAD_CHECK(p > 0 && p < 1, ValueError, "student_t_quantile: p must be in (0, 1), got ", p);
  if (p < 0.5) return -student_t_quantile(1.0 - p, df);
  double lo = 0, hi = 1;
  while (student_t_cdf(hi, df) < p) hi *= 2;  // terminates: the CDF tends to 1
  for (int i = 0; i < 200 && hi - lo > 1e-12 * std::max(1.0, hi); ++i) {
    const double mid = 0.5 * (lo + hi);
    (student_t_cdf(mid, df) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

std::vector<double> finite_values(const std::vector<double>& v, int64_t* dropped) {
  std::vector<double> out;
  out.reserve(v.size());
  for (double x : v)
    if (std::isfinite(x)) out.push_back(x);
  if (dropped) *dropped += static_cast<int64_t>(v.size() - out.size());
  return out;
}

Summary summarize(const std::vector<double>& values) {
  Summary s;
  const std::vector<double> v = finite_values(values, &s.non_finite);
  s.n = static_cast<int64_t>(v.size());
  if (v.empty()) {
    s.mean = s.std = s.ci_low = s.ci_high = NAN;
    return s;
  }
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(s.n);
  if (s.n < 2) {
    s.ci_low = s.ci_high = NAN;
    return s;
  }
  double ss = 0;
  for (double x : v) ss += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(ss / static_cast<double>(s.n - 1));
  const double half =
      student_t_quantile(0.975, static_cast<double>(s.n - 1)) * s.std / std::sqrt(static_cast<double>(s.n));
  s.ci_low = s.mean - half;
  s.ci_high = s.mean + half;
  return s;
}

namespace {

WelchTest untestable(WelchTest w, const char* why) {
  w.testable = false;
  w.p = w.t = w.ci_low = w.ci_high = NAN;
  w.why = why;
  return w;
}

}  // namespace

WelchTest welch_test(const std::vector<double>& a, const std::vector<double>& b) {
  WelchTest w;
  const Summary sa = summarize(a), sb = summarize(b);
  w.non_finite = sa.non_finite + sb.non_finite;
  if (sa.n < 2 || sb.n < 2) return untestable(w, "fewer than 2 seeds");
  w.diff = sa.mean - sb.mean;
  const double va = sa.std * sa.std / static_cast<double>(sa.n), vb = sb.std * sb.std / static_cast<double>(sb.n);
  const double se2 = va + vb;
  if (se2 == 0) return untestable(w, "no variance on either side");
  w.testable = true;
  const double se = std::sqrt(se2);
  w.t = w.diff / se;
  // Welch–Satterthwaite
  w.df = se2 * se2 / (va * va / static_cast<double>(sa.n - 1) + vb * vb / static_cast<double>(sb.n - 1));
  w.p = student_t_two_sided_p(w.t, w.df);
  const double half = student_t_quantile(0.975, w.df) * se;
  w.ci_low = w.diff - half;
  w.ci_high = w.diff + half;
  return w;
}

WelchTest one_sample_test(const std::vector<double>& d, double mu) {
  WelchTest w;
  const Summary s = summarize(d);
  w.non_finite = s.non_finite;
  if (s.n < 2) return untestable(w, "fewer than 2 seeds");
  w.diff = s.mean - mu;
  if (s.std == 0) return untestable(w, "no variance");
  w.testable = true;
  const double se = s.std / std::sqrt(static_cast<double>(s.n));
  w.t = w.diff / se;
  w.df = static_cast<double>(s.n - 1);
  w.p = student_t_two_sided_p(w.t, w.df);
  w.ci_low = s.ci_low - mu;
  w.ci_high = s.ci_high - mu;
  return w;
}

std::vector<double> holm_adjust(const std::vector<double>& p) {
  const size_t m = p.size();
  std::vector<size_t> order;
  for (size_t i = 0; i < m; ++i)
    if (!std::isnan(p[i])) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  std::vector<double> adj(m, NAN);
  double running = 0;
  for (size_t j = 0; j < order.size(); ++j) {
    running = std::max(running, std::min(1.0, static_cast<double>(m - j) * p[order[j]]));
    adj[order[j]] = running;
  }
  return adj;
}

Proportion wilson_interval(int64_t successes, int64_t n, double z) {
  POSGRAD_CHECK(n > 0 && successes >= 0 && successes <= n, ValueError,
                "wilson_interval: need 0 <= successes <= n and n > 0, got ", successes, " of ", n);
  const double nn = static_cast<double>(n), p = static_cast<double>(successes) / nn, z2 = z * z;
  const double centre = (p + z2 / (2 * nn)) / (1 + z2 / nn);
  const double half = z / (1 + z2 / nn) * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn));
  return {p, std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

int significant_order(const WelchTest& w, double alpha) {
  if (!w.testable || !(w.p < alpha)) return 0;
  return w.diff < 0 ? -1 : 1;
}

double spearman(const std::vector<double>& x, const std::vector<double>& y) {
  auto ranks = [](const std::vector<double>& v) {
    std::vector<size_t> idx(v.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
    std::vector<double> r(v.size());
    for (size_t i = 0; i < idx.size();) {  // ties share their mean rank
      size_t j = i;
      while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
      for (size_t k = i; k <= j; ++k) r[idx[k]] = 0.5 * static_cast<double>(i + j);
      i = j + 1;
    }
    return r;
  };
  const auto rx = ranks(x), ry = ranks(y);
  const double mx = std::accumulate(rx.begin(), rx.end(), 0.0) / rx.size();
  const double my = std::accumulate(ry.begin(), ry.end(), 0.0) / ry.size();
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < rx.size(); ++i) {
    sxy += (rx[i] - mx) * (ry[i] - my);
    sxx += (rx[i] - mx) * (rx[i] - mx);
    syy += (ry[i] - my) * (ry[i] - my);
  }
  return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0.0;
}

namespace {

// floor(u · n) for one uniform u; no draw from a single item.
size_t draw_index(Generator& gen, size_t n) {
  if (n == 1) return 0;
  return std::min(n - 1, static_cast<size_t>(gen.next_unit() * static_cast<double>(n)));
}

// The type-7 quantile of sorted values.
double quantile_sorted(const std::vector<double>& v, double p) {
  const double h = p * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (h - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

// The percentile interval of `stat` over `resamples` draws: stat(gen) is one resample's value.
template <typename F>
BootstrapInterval percentile_interval(int64_t resamples, uint64_t seed, F stat) {
  POSGRAD_CHECK(resamples >= 2, ValueError, "a bootstrap needs at least 2 resamples, got ", resamples);
  Generator gen(seed);
  std::vector<double> v(static_cast<size_t>(resamples));
  for (auto& x : v) x = stat(gen);
  std::sort(v.begin(), v.end());
  BootstrapInterval b;
  b.low = quantile_sorted(v, 0.025);
  b.high = quantile_sorted(v, 0.975);
  b.resamples = resamples;
  return b;
}

}  // namespace

BootstrapInterval bootstrap_mean(const std::vector<double>& values, int64_t resamples, uint64_t seed) {
  int64_t dropped = 0;
  const std::vector<double> x = finite_values(values, &dropped);
  if (x.empty()) {
    POSGRAD_CHECK(resamples >= 2, ValueError, "a bootstrap needs at least 2 resamples, got ", resamples);
    BootstrapInterval b;
    b.non_finite = dropped;
    return b;
  }
  BootstrapInterval b = percentile_interval(resamples, seed, [&](Generator& gen) {
    double sum = 0;
    for (size_t i = 0; i < x.size(); ++i) sum += x[draw_index(gen, x.size())];
    return sum / static_cast<double>(x.size());
  });
  b.non_finite = dropped;
  return b;
}

BootstrapInterval perplexity_bootstrap(const std::vector<WindowLosses>& seeds, int64_t resamples, uint64_t seed) {
  std::vector<const WindowLosses*> kept;
  int64_t dropped = 0;
  for (size_t s = 0; s < seeds.size(); ++s) {
    const WindowLosses& w = seeds[s];
    POSGRAD_CHECK(!w.loss.empty() && w.loss.size() == w.tokens.size(), ValueError, "perplexity bootstrap: seed ", s,
                  " has ", w.loss.size(), " window losses and ", w.tokens.size(),
                  " token counts (need the same, >= 1)");
    bool finite = true;
    for (size_t i = 0; i < w.loss.size(); ++i) {
      POSGRAD_CHECK(w.tokens[i] >= 1, ValueError, "perplexity bootstrap: seed ", s, " window ", i, " scored ",
                    w.tokens[i], " tokens (need >= 1)");
      finite = finite && std::isfinite(w.loss[i]);
    }
    if (finite)
      kept.push_back(&w);
    else
      ++dropped;
  }
  if (kept.empty()) {
    POSGRAD_CHECK(resamples >= 2, ValueError, "a bootstrap needs at least 2 resamples, got ", resamples);
    BootstrapInterval b;
    b.non_finite = dropped;
    return b;
  }
  BootstrapInterval b = percentile_interval(resamples, seed, [&](Generator& gen) {
    double sum = 0;
    for (size_t i = 0; i < kept.size(); ++i) {
      const WindowLosses& w = *kept[draw_index(gen, kept.size())];
      double loss = 0;
      int64_t tokens = 0;
      for (size_t j = 0; j < w.loss.size(); ++j) {
        const size_t k = draw_index(gen, w.loss.size());
        loss += w.loss[k];
        tokens += w.tokens[k];
      }
      sum += std::exp(loss / static_cast<double>(tokens));
    }
    return sum / static_cast<double>(kept.size());
  });
  b.non_finite = dropped;
  return b;
}

}  // namespace posgrad::train
