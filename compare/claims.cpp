// claims.cpp — see claims.h.
#include "compare/claims.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "compare/markdown.h"
#include "compare/study.h"

namespace posgrad::train {

using markdown::num;



std::string with_interval(const Summary& s, int prec) {
  if (s.n == 0) return "n/a";
  if (!s.has_interval()) return num(s.mean, prec) + " (1 seed)";
  return num(s.mean, prec) + " [" + num(s.ci_low, prec) + ", " + num(s.ci_high, prec) + "]";
}

bool has_method(const ComparisonResult& r, const std::string& m) {
  return std::find(r.config.methods.begin(), r.config.methods.end(), m) != r.config.methods.end();
}


Pair better(const ComparisonResult& r, const std::string& a, const std::string& b, const Metric& m) {
  Pair p{a, b};
  const WelchTest w = welch_test(values(r, a, m), values(r, b, m));
  p.testable = w.testable;
  p.p = w.p;
  const int o = significant_order(w);  // -1: a lower
  p.outcome = m.lower_is_better() ? -o : o;
  return p;
}


Judgement judge_pairs(const std::vector<Pair>& pairs, const std::string& missing) {
  if (!missing.empty()) return {"inconclusive", "not measured: " + missing};
  std::string against, unclear;
  for (const auto& p : pairs) {
    const std::string name = p.a + " vs " + p.b;
    if (!p.testable) unclear += (unclear.empty() ? "" : ", ") + name + " (fewer than 2 seeds)";
    else if (p.outcome < 0) against += (against.empty() ? "" : ", ") + name + " (p " + num(p.p, 4) + ")";
    else if (p.outcome == 0) unclear += (unclear.empty() ? "" : ", ") + name + " (p " + num(p.p, 3) + ")";
  }
  if (!against.empty()) return {"contradicted", "significantly the other way: " + against};
  if (!unclear.empty()) return {"inconclusive", "no significant difference for " + unclear};
  return {"supported", "every pair differs significantly (Welch, 5%) in the claimed direction"};
}

std::vector<Pair> chain_pairs(const ComparisonResult& r, const std::vector<std::string>& chain, const Metric& m,
                              std::string& missing, const std::map<std::string, std::vector<std::string>>& groups) {
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
  std::vector<Pair> pairs;
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
    if (s.n) by.emplace_back(m.lower_is_better() ? s.mean : -s.mean, row);
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
