// study_claims.cpp — see study_claims.h.
#include "compare/studies/study_claims.h"

#include <algorithm>
#include <cmath>

#include "compare/markdown.h"
#include "train/evaluate.h"

namespace posgrad::train {

using markdown::num;

std::string length_protocol(const ComparisonResult& r, int64_t k, Protocol p) {
  const int64_t ctx = k * r.config.base.model.block_size;
  const int64_t windows = std::max<int64_t>(1, r.config.eval_tokens / ctx);
  if (p == Protocol::Sliding) {
    const int64_t stride = eval_stride(r.config, ctx);
    return "sliding windows over the same targets, stride " + std::to_string(stride) + ": " +
           std::to_string(sliding_windows(ctx, stride, windows * ctx)) + " windows at " + std::to_string(k) + "x";
  }
  return "non-overlapping windows of the validation text, " + std::to_string(windows) + " of " + std::to_string(ctx) +
         " tokens at " + std::to_string(k) + "x (intervals: seed noise only)";
}

ClaimVerdict claim_from(std::string id, std::string claim, std::string metric, std::string measured, const Judgement& j,
                        std::string budget, std::string protocol) {
  ClaimVerdict v;
  v.id = std::move(id);
  v.claim = std::move(claim);
  v.metric = std::move(metric);
  v.measured = std::move(measured);
  v.verdict = j.verdict;
  v.why = j.why;
  v.family = j.family;
  v.budget = std::move(budget);
  v.protocol = std::move(protocol);
  return v;
}

std::optional<Proportion> wilson_of(const Scored& s) {
  if (s.examples <= 0 || !std::isfinite(s.value) || s.value < 0 || s.value > 1) return std::nullopt;
  const double k = s.value * static_cast<double>(s.examples);
  const double whole = std::round(k);
  if (std::fabs(k - whole) > 1e-6) return std::nullopt;
  return wilson_interval(static_cast<int64_t>(whole), s.examples);
}

std::string wilson_text(const Scored& s, int prec) {
  const auto w = wilson_of(s);
  if (!w) return num(s.value, prec) + " (no count of " + std::to_string(s.examples) + ")";
  const auto k = static_cast<int64_t>(std::llround(s.value * static_cast<double>(s.examples)));
  return num(s.value, prec) + " [" + num(w->low, prec) + ", " + num(w->high, prec) + "] (" + std::to_string(k) + "/" +
         std::to_string(s.examples) + ")";
}

namespace {

constexpr double kMaxDf = 1e6;

// Agresti–Caffo: the variance bound of a mean of [0, 1] scores over n examples, one success and one
// failure added.
double examples_variance(double mean, int64_t n) {
  const double nn = static_cast<double>(n), p = (mean * nn + 1) / (nn + 2);
  return p * (1 - p) / (nn + 2);
}

MarginTest untestable(MarginTest m, const std::string& why) {
  m.test.testable = false;
  m.test.why_not = why;
  return m;
}

}  // namespace

MarginTest margin_test(std::string name, const std::map<uint64_t, Scored>& a, const std::map<uint64_t, Scored>& b,
                       bool shared_examples, double margin) {
  MarginTest m;
  m.test.name = std::move(name);
  std::vector<double> d;
  double sum_a = 0, sum_b = 0;
  for (const auto& [seed, x] : a) {
    const auto it = b.find(seed);
    if (it == b.end()) continue;
    if (!std::isfinite(x.value) || !std::isfinite(it->second.value)) {
      ++m.test.non_finite;
      continue;
    }
    d.push_back(x.value - it->second.value);
    sum_a += x.value;
    sum_b += it->second.value;
    m.examples_a = m.seeds == 0 ? x.examples : std::min(m.examples_a, x.examples);
    m.examples_b = m.seeds == 0 ? it->second.examples : std::min(m.examples_b, it->second.examples);
    ++m.seeds;
  }
  if (m.seeds == 0) return untestable(m, "no seed with both rows");
  const Summary s = summarize(d);
  m.diff = s.mean;
  if (m.seeds < 2) return untestable(m, "fewer than 2 seeds");
  if (m.examples_a <= 0 || m.examples_b <= 0) return untestable(m, "no test examples");
  const double S = static_cast<double>(m.seeds);
  const double va = examples_variance(sum_a / S, m.examples_a), vb = examples_variance(sum_b / S, m.examples_b);
  const double v_examples = shared_examples ? std::pow(std::sqrt(va) + std::sqrt(vb), 2) : va + vb;
  const double v_seeds = s.std * s.std / S;
  const double se2 = v_seeds + v_examples;
  m.se = std::sqrt(se2);
  m.df = v_seeds > 0 ? std::min(kMaxDf, se2 * se2 * (S - 1) / (v_seeds * v_seeds)) : kMaxDf;
  const double t = (m.diff - margin) / m.se;
  m.test.testable = true;
  m.test.p = student_t_two_sided_p(t, m.df);
  m.test.direction = t > 0 ? 1 : t < 0 ? -1 : 0;
  const double half = student_t_quantile(0.975, m.df) * m.se;
  m.low = std::max(-1.0, m.diff - half);
  m.high = std::min(1.0, m.diff + half);
  return m;
}

std::string margin_text(const MarginTest& m, int prec) {
  if (m.seeds == 0) return "n/a";
  if (m.seeds == 1) return num(m.diff, prec) + " (1 seed)";
  if (std::isnan(m.low)) return num(m.diff, prec) + " (no interval: " + m.test.why_not + ")";
  return num(m.diff, prec) + " [" + num(m.low, prec) + ", " + num(m.high, prec) + "]";
}

}  // namespace posgrad::train
