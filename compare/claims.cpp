// claims.cpp — see claims.h.
#include "compare/claims.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "compare/markdown.h"
#include "compare/study.h"

namespace posgrad::train {

using markdown::num;

std::string with_interval(const Summary& s, int prec) {
  const std::string dropped = s.non_finite ? " (+" + std::to_string(s.non_finite) + " non-finite)" : "";
  if (s.n == 0) return "n/a" + dropped;
  if (!s.has_interval()) return num(s.mean, prec) + " (1 seed)" + dropped;
  return num(s.mean, prec) + " [" + num(s.ci_low, prec) + ", " + num(s.ci_high, prec) + "]" + dropped;
}

std::string p_text(double p) {
  if (std::isnan(p)) return "n/a";
  if (p >= 0.001) return num(p, 3);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", p);
  return buf;
}

bool has_method(const ComparisonResult& r, const std::string& m) {
  return std::find(r.config.methods.begin(), r.config.methods.end(), m) != r.config.methods.end();
}

std::string training_budget(const ComparisonResult& r) {
  const TrainConfig& b = r.config.base;
  return std::to_string(b.max_iters) + " steps of " + std::to_string(b.batch_size) + "x" +
         std::to_string(b.model.block_size) + " tokens x " + std::to_string(r.config.seeds.size()) + " seed" +
         (r.config.seeds.size() == 1 ? "" : "s");
}

namespace {

// A test from a t-test whose estimate is `claimed` − `other` (diff < 0 favours the claim when
// lower_is_better).
ClaimTest from_t(std::string name, const WelchTest& w, bool claim_is_lower) {
  ClaimTest t;
  t.name = std::move(name);
  t.testable = w.testable;
  t.why_not = w.why;
  t.non_finite = w.non_finite;
  t.p = w.p;
  if (w.testable && w.diff != 0) t.direction = (w.diff < 0) == claim_is_lower ? 1 : -1;
  return t;
}

}  // namespace

ClaimTest better_values(std::string name, const std::vector<double>& a, const std::vector<double>& b,
                        bool lower_is_better) {
  return from_t(std::move(name), welch_test(a, b), lower_is_better);
}

ClaimTest better(const ComparisonResult& r, const std::string& a, const std::string& b, const Metric& m) {
  return better_values(a + " vs " + b, values(r, a, m), values(r, b, m), m.lower_is_better());
}

ClaimTest better_paired(const ComparisonResult& r, const std::string& a, const std::string& b, const Metric& m) {
  const auto va = values_by_seed(r, a, m), vb = values_by_seed(r, b, m);
  std::vector<double> d;
  for (const auto& [seed, x] : va)
    if (const auto it = vb.find(seed); it != vb.end()) d.push_back(x - it->second);
  return from_t(a + " vs " + b + " (paired by seed)", one_sample_test(d, 0), m.lower_is_better());
}

ClaimTest beyond(const std::string& name, const std::vector<double>& v, double limit, bool claimed_below) {
  return from_t(name, one_sample_test(v, limit), claimed_below);
}

Judgement judge_family(std::vector<ClaimTest>& tests, const std::string& missing) {
  if (!missing.empty() || tests.empty())
    return {kNotMeasured, "needs " + (missing.empty() ? std::string("rows that were not run") : missing), 0};
  std::vector<double> p;
  for (const auto& t : tests) p.push_back(t.testable ? t.p : NAN);
  const std::vector<double> adj = holm_adjust(p);
  const auto m = static_cast<int64_t>(tests.size());
  std::string against, unclear, dropped;
  for (size_t i = 0; i < tests.size(); ++i) {
    ClaimTest& t = tests[i];
    t.p_holm = adj[i];
    if (t.non_finite) dropped += (dropped.empty() ? "" : ", ") + t.name + " (" + std::to_string(t.non_finite) + ")";
    if (!t.testable)
      unclear += (unclear.empty() ? "" : ", ") + t.name + " (" + t.why_not + ")";
    else if (t.direction < 0 && t.p_holm < kAlpha)
      against += (against.empty() ? "" : ", ") + t.name + " (p " + p_text(t.p) + ", Holm " + p_text(t.p_holm) + ")";
    else if (!(t.direction > 0 && t.p < kAlpha))
      unclear += (unclear.empty() ? "" : ", ") + t.name + " (p " + p_text(t.p) + ")";
  }
  const std::string note = dropped.empty() ? "" : "; non-finite per-seed values left out: " + dropped;
  const std::string of = " of " + std::to_string(m);
  if (!against.empty())
    return {kContradicted,
            (m == 1 ? std::string("significantly the other way: ")
                    : "significantly the other way after Holm over the " + std::to_string(m) + ": ") +
                against + note,
            m};
  if (!unclear.empty()) return {kInconclusive, "not significant at 5% for " + unclear + note, m};
  return {kSupported,
          (m == 1 ? std::string("significant at 5% as claimed") : "all" + of + " significant at 5% as claimed") + note,
          m};
}

std::vector<ClaimTest> chain_pairs(const ComparisonResult& r, const std::vector<std::string>& chain, const Metric& m,
                                   std::string& missing,
                                   const std::map<std::string, std::vector<std::string>>& groups) {
  // An inner link of the chain is expanded twice (as the better and as the worse of a pair): the
  // missing names are a set, listed once each in alphabetical order.
  std::set<std::string> absent;
  auto expand = [&](const std::string& x) {
    std::vector<std::string> out;
    const auto g = groups.find(x);
    for (const auto& y : g != groups.end() ? g->second : std::vector<std::string>{x})
      if (has_method(r, y) && !values(r, y, m).empty()) out.push_back(y);
    if (out.empty()) absent.insert(x);
    return out;
  };
  std::vector<ClaimTest> pairs;
  for (size_t i = 0; i + 1 < chain.size(); ++i)
    for (const auto& a : expand(chain[i]))
      for (const auto& b : expand(chain[i + 1])) pairs.push_back(better(r, a, b, m));
  for (const auto& x : absent) missing += (missing.empty() ? "" : ", ") + x;
  return pairs;
}

std::string measured(const ComparisonResult& r, const std::vector<std::string>& rows, const Metric& m) {
  std::string s;
  for (const auto& row : rows) {
    if (!has_method(r, method_of(row))) continue;
    s += (s.empty() ? "" : "; ") + row + " " + with_interval(summary(r, row, m), m.precision());
  }
  return s.empty() ? "n/a" : s;
}

std::string ranking(const ComparisonResult& r, const std::vector<std::string>& rows, const Metric& m) {
  std::vector<std::pair<double, std::string>> by;
  for (const auto& row : rows) {
    const Summary s = summary(r, row, m);
    if (s.n && std::isfinite(s.mean)) by.emplace_back(m.lower_is_better() ? s.mean : -s.mean, row);
  }
  std::sort(by.begin(), by.end());
  std::string out;
  for (size_t i = 0; i < by.size(); ++i) {
    if (i) {
      const int o = significant_order(welch_test(values(r, by[i - 1].second, m), values(r, by[i].second, m)));
      out += o != 0 ? (m.lower_is_better() ? " < " : " > ") : " ≈ ";
    }
    out += by[i].second;
  }
  return out;
}

std::vector<ClaimVerdict> judge_claims(const ComparisonResult& r) {
  std::vector<ClaimVerdict> out;
  for (const StudyEntry& s : studies())
    if (s.claims)
      for (auto& v : s.claims(r)) out.push_back(std::move(v));
  return out;
}

}  // namespace posgrad::train
