// claims.cpp — see claims.h.
#include "compare/claims.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>

#include "nn/posenc/position_encoding.h"
#include "compare/studies/suite/length_suite_report.h"
#include "compare/studies/pi/pi_report.h"
#include "compare/studies/passkey/passkey_report.h"

namespace posgrad::train {

namespace {

const std::vector<std::string> kAbsolute = {"sinusoidal", "learned"};

std::string num(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

std::string with_interval(const Summary& s, int prec) {
  if (s.n == 0) return "n/a";
  if (!s.has_interval()) return num(s.mean, prec) + " (1 seed)";
  return num(s.mean, prec) + " [" + num(s.ci_low, prec) + ", " + num(s.ci_high, prec) + "]";
}

bool has(const ComparisonResult& r, const std::string& m) {
  return std::find(r.config.methods.begin(), r.config.methods.end(), m) != r.config.methods.end();
}

// The outcome of "a is better than b" on metric m.
struct Pair {
  std::string a, b;
  int outcome = 0;  // +1 significantly as claimed, -1 significantly against, 0 neither / not testable
  bool testable = false;
  double p = NAN;
};

Pair better(const ComparisonResult& r, const std::string& a, const std::string& b, const Metric& m) {
  Pair p{a, b};
  const WelchTest w = welch_test(values(r, a, m), values(r, b, m));
  p.testable = w.testable;
  p.p = w.p;
  const int o = significant_order(w);  // -1: a lower
  p.outcome = m.lower_is_better() ? -o : o;
  return p;
}

struct Judgement {
  std::string verdict, why;
};

// Every pair must hold as claimed.
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

// chain[i] better than chain[i + 1]; "absolute" expands to every absolute method with values.
std::vector<Pair> chain_pairs(const ComparisonResult& r, const std::vector<std::string>& chain, const Metric& m,
                              std::string& missing) {
  // An inner link of the chain is expanded twice (as the better and as the worse of a pair): the
  // missing names are a set, listed once each in alphabetical order.
  std::set<std::string> absent;
  auto expand = [&](const std::string& x) {
    std::vector<std::string> out;
    for (const auto& y : x == "absolute" ? kAbsolute : std::vector<std::string>{x})
      if (has(r, y) && !values(r, y, m).empty()) out.push_back(y);
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
    if (!has(r, row.substr(0, row.find_first_of("+@")))) continue;
    s += (s.empty() ? "" : "; ") + row + " " + with_interval(summary(r, row, m), m.precision());
  }
  return s.empty() ? "n/a" : s;
}

ClaimVerdict ordering_claim(const ComparisonResult& r, std::string id, std::string claim, const Metric& m,
                            const std::vector<std::string>& chain) {
  std::string missing;
  const auto pairs = chain_pairs(r, chain, m, missing);
  const Judgement j = judge_pairs(pairs, missing);
  return {std::move(id), std::move(claim), m.name() + (m.lower_is_better() ? " (lower is better)" : " (higher is better)"),
          measured(r, {"rope", "deberta", "t5", "sinusoidal", "learned"}, m), j.verdict, j.why};
}

int64_t longest_with_values(const ComparisonResult& r, const std::string& row) {
  int64_t best = 1;
  for (int64_t k : r.config.eval_multipliers)
    if (!values(r, row, {Quantity::Perplexity, k}).empty()) best = std::max(best, k);
  return best;
}

// "handles longer sequences": perplexity grows by less than `limit` from 1x to the longest length.
ClaimVerdict extrapolates(const ComparisonResult& r, std::string id, std::string claim, const std::string& method) {
  constexpr double kLimit = 1.10;
  ClaimVerdict v{std::move(id), std::move(claim), "", "", "inconclusive", ""};
  if (!has(r, method)) {
    v.why = "not measured: add " + method + " to --methods";
    return v;
  }
  const int64_t k = longest_with_values(r, method);
  const Metric m{Quantity::PerplexityRatio, k};
  v.metric = m.name() + ": perplexity at " + std::to_string(k) + "x the training length / at 1x; threshold " +
             num(kLimit, 2) + " (less than 10% growth)";
  std::string all;
  for (int64_t x : r.config.eval_multipliers)
    if (x != 1) all += (all.empty() ? "" : "; ") + std::to_string(x) + "x " + with_interval(summary(r, method, {Quantity::PerplexityRatio, x}), 2);
  v.measured = all;
  const Summary s = summary(r, method, m);
  if (k == 1 || s.n == 0) {
    v.why = "no evaluation beyond the training length";
  } else if (!s.has_interval()) {
    v.why = "one seed: no interval";
  } else if (s.ci_high < kLimit) {
    v.verdict = "supported";
    v.why = "the whole 95% interval of the growth at " + std::to_string(k) + "x is below " + num(kLimit, 2);
  } else if (s.ci_low > kLimit) {
    v.verdict = "contradicted";
    v.why = "perplexity grows by more than 10% at " + std::to_string(k) + "x (interval above " + num(kLimit, 2) + ")";
  } else {
    v.why = "the interval of the growth contains the threshold";
  }
  return v;
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

std::vector<double> decay_values(const ComparisonResult& r, const std::string& method) {
  std::vector<double> v;
  for (uint64_t seed : r.config.seeds)
    for (const auto& u : r.units)
      if (u.method == method && u.seed == seed && !u.attention_by_distance.empty())
        v.push_back(attention_distance_correlation(u.attention_by_distance));
  return v;
}

}  // namespace

double attention_distance_correlation(const std::vector<std::vector<double>>& by_layer) {
  if (by_layer.empty() || by_layer.front().size() < 2) return 0.0;
  const size_t T = by_layer.front().size();
  std::vector<double> d(T), w(T, 0.0);
  for (size_t i = 0; i < T; ++i) {
    d[i] = static_cast<double>(i);
    for (const auto& l : by_layer) w[i] += l[i] / static_cast<double>(by_layer.size());
  }
  return spearman(d, w);
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
  const Metric ppl{Quantity::Perplexity, 1}, acc{Quantity::Accuracy, 1}, f1{Quantity::TaskTokenF1, 1};
  out.push_back(ordering_claim(r, "a", "perplexity: RoPE < DeBERTa < T5 < absolute", ppl,
                               {"rope", "deberta", "t5", "absolute"}));
  {
    ClaimVerdict a = ordering_claim(r, "b", "accuracy and F1: RoPE > DeBERTa > T5 > absolute", acc,
                                    {"rope", "deberta", "t5", "absolute"});
    ClaimVerdict b = ordering_claim(r, "b", "", f1, {"rope", "deberta", "t5", "absolute"});
    ClaimVerdict v = a;
    v.metric = a.metric + "; " + b.metric + " of the synthetic " + r.config.task + " task";
    v.measured = "accuracy: " + a.measured + " — F1: " + b.measured;
    v.verdict = a.verdict == "contradicted" || b.verdict == "contradicted" ? "contradicted"
                : a.verdict == "supported" && b.verdict == "supported"    ? "supported"
                                                                          : "inconclusive";
    v.why = "accuracy: " + a.why + "; F1: " + b.why;
    out.push_back(v);
  }
  {
    const int64_t k = r.config.eval_multipliers.back();
    ClaimVerdict v = ordering_claim(r, "c", "extrapolation: RoPE > DeBERTa > T5 > absolute",
                                    {Quantity::PerplexityRatio, k}, {"rope", "deberta", "t5", "absolute"});
    v.why += " (learned positions cannot run beyond their table, so 'absolute' is sinusoidal here)";
    out.push_back(v);
  }
  {
    std::string missing;
    std::vector<Pair> pairs;
    for (const std::string rel : {"t5", "deberta", "rope", "alibi"})
      for (const auto& abs : kAbsolute)
        if (has(r, rel) && has(r, abs)) pairs.push_back(better(r, rel, abs, ppl));
    if (pairs.empty()) missing = "relative and absolute methods";
    const Judgement j = judge_pairs(pairs, missing);
    out.push_back({"d", "relative encodings (T5, DeBERTa, RoPE, ALiBi) beat absolute ones (sinusoidal, learned)",
                   ppl.name() + " (lower is better)",
                   measured(r, {"t5", "deberta", "rope", "alibi", "sinusoidal", "learned"}, ppl), j.verdict, j.why});
  }
  out.push_back(extrapolates(r, "e", "T5's bucketing lets it handle sequences longer than trained", "t5"));
  out.push_back(extrapolates(r, "f", "RoPE naturally extrapolates", "rope"));
  {
    ClaimVerdict v{"g", "RoPE's influence decays with distance", "", "", "inconclusive", ""};
    v.metric = "Spearman correlation of query-key distance and mean attention weight (trained model, layers averaged)";
    const Summary rope = summarize(decay_values(r, "rope")), none = summarize(decay_values(r, "none"));
    v.measured = "rope " + with_interval(rope, 3) + "; none (no position encoding) " + with_interval(none, 3);
    if (!has(r, "rope") || rope.n == 0) {
      v.why = "not measured: add rope to --methods";
    } else if (!rope.has_interval()) {
      v.why = "one seed: no interval";
    } else if (rope.ci_low > 0) {
      v.verdict = "contradicted";
      v.why = "attention grows with distance (interval above 0)";
    } else if (rope.ci_high < 0) {
      const WelchTest w = welch_test(decay_values(r, "rope"), decay_values(r, "none"));
      if (none.n >= 2 && significant_order(w) >= 0) {
        v.why = "attention decays with distance, but not more than without any position encoding (Welch p " +
                num(w.p, 3) + "): the decay is learned locality, not shown to be RoPE's";
      } else {
        v.verdict = "supported";
        v.why = "attention decays with distance" +
                std::string(none.n >= 2 ? ", more steeply than without a position encoding" : "");
      }
    } else {
      v.why = "the interval of the correlation contains 0";
    }
    out.push_back(v);
  }
  {
    ClaimVerdict v{"h", "cost: T5 cheapest, DeBERTa dearest, RoPE in between", "", "", "inconclusive", ""};
    const double noise = r.cost.noise();
    v.metric = "median time of a training step (interleaved benchmark), per length; noise " + num(100 * noise, 1) +
               "% (median min-max spread)";
    int against = 0, holds = 0, lengths = 0;
    for (int64_t T : r.cost.lengths) {
      const CostRow *t5 = r.cost.find("t5", "step", T), *rope = r.cost.find("rope", "step", T),
                    *deb = r.cost.find("deberta", "step", T);
      if (!t5 || !rope || !deb) continue;
      ++lengths;
      const double a = t5->median(), b = rope->median(), c = deb->median();
      v.measured += (v.measured.empty() ? "" : "; ") + std::string("T=") + std::to_string(T) + ": t5 " + num(1e3 * a, 1) +
                    " ms, rope " + num(1e3 * b, 1) + " ms, deberta " + num(1e3 * c, 1) + " ms";
      auto clearly = [&](double x, double y) { return x < y * (1 - noise); };  // x below y beyond the noise
      if (clearly(b, a) || clearly(c, b)) ++against;
      else if (clearly(a, b) && clearly(b, c)) ++holds;
    }
    if (lengths == 0) {
      v.why = "not measured: needs t5, rope and deberta in --methods";
    } else if (against) {
      v.verdict = "contradicted";
      v.why = "at " + std::to_string(against) + " of " + std::to_string(lengths) +
              " lengths the order is reversed by more than the noise";
    } else if (holds == lengths) {
      v.verdict = "supported";
      v.why = "at every length t5 < rope < deberta by more than the noise";
    } else {
      v.why = "some differences are inside the noise";
    }
    out.push_back(v);
  }
  {
    ClaimVerdict v{"i", "parameters: T5 adds the fewest, RoPE none, DeBERTa a table", "position_parameters (exact counts)",
                   "", "inconclusive", ""};
    std::map<std::string, double> p;
    for (const auto& m : r.config.methods) {
      const auto x = values(r, m, {Quantity::PositionParameters, 1});
      if (!x.empty()) p[m] = x.front();
      if (!x.empty()) v.measured += (v.measured.empty() ? "" : "; ") + m + " " + num(x.front(), 0);
    }
    if (!p.count("t5") || !p.count("rope") || !p.count("deberta")) {
      v.why = "not measured: needs t5, rope and deberta in --methods";
    } else {
      // The claim ranks the article's encodings; others measured here (ALiBi, KERPLE, ...) are
      // reported beside the verdict but do not decide it.
      const std::set<std::string> article = {"sinusoidal", "learned", "t5", "deberta", "rope"};
      std::string smaller, others;
      for (const auto& [m, n] : p) {
        if (!(n > 0 && n < p["t5"])) continue;
        std::string& list = article.count(m) ? smaller : others;
        list += (list.empty() ? "" : ", ") + m + " " + num(n, 0);
      }
      const bool ok = p["rope"] == 0 && p["deberta"] > p["t5"] && p["t5"] > 0 && smaller.empty();
      v.verdict = ok ? "supported" : "contradicted";
      v.why = ok ? "RoPE adds 0, T5 the fewest of the article's encodings that add any, DeBERTa a table (" +
                       num(p["deberta"], 0) + ")"
                 : (!smaller.empty() ? "fewer than T5: " + smaller : "the counts do not follow the claim");
      if (!others.empty()) v.why += "; outside the article's methods, fewer than T5: " + others;
    }
    out.push_back(v);
  }
  {
    ClaimVerdict v{"j", "beyond 2048 tokens RoPE is the best choice", "", "", "inconclusive", ""};
    const int64_t block = r.config.base.model.block_size;
    int64_t k = 0;
    for (int64_t x : r.config.eval_multipliers)
      if (x * block >= 2048) {
        k = x;
        break;
      }
    if (k == 0 || !has(r, "rope")) {
      v.metric = "perplexity at >= 2048 tokens";
      v.why = k == 0 ? "not measured: the longest evaluation is shorter than 2048 tokens (raise --eval-multipliers)"
                     : "not measured: add rope to --methods";
    } else {
      const Metric m{Quantity::Perplexity, k};
      v.metric = m.name() + " (" + std::to_string(k * block) + " tokens; lower is better)";
      std::vector<std::string> others;
      for (const auto& row : rows(r))
        if (row != "rope" && !values(r, row, m).empty()) others.push_back(row);
      std::vector<Pair> pairs;
      for (const auto& o : others) pairs.push_back(better(r, "rope", o, m));
      std::vector<std::string> shown = {"rope"};
      shown.insert(shown.end(), others.begin(), others.end());
      v.measured = measured(r, shown, m);
      const Judgement j = judge_pairs(pairs, others.empty() ? "no other method runs there" : "");
      v.verdict = j.verdict;
      v.why = j.why + " (plain RoPE against every other row, its scaled variants included)";
    }
    out.push_back(v);
  }
  {
    ClaimVerdict v{"k", "position-encoding arithmetic runs in half precision without loss", "", "", "inconclusive", ""};
    constexpr double kLimit = 1.01;
    const int64_t k = longest_with_values(r, "rope");
    const int64_t len = k * r.config.base.model.block_size;
    v.metric = "RoPE perplexity with its angle arithmetic in bf16 / fp16 over fp32, at " + std::to_string(len) +
               " tokens; threshold " + num(kLimit, 2) + " (1% worse)";
    const Metric m{Quantity::Perplexity, k};
    const auto base = values(r, "rope", m);
    std::vector<std::string> above, inside;
    for (const std::string prec : {"bf16", "fp16"}) {
      const auto half = values(r, "rope@" + prec, m);
      std::vector<double> ratio;
      for (size_t i = 0; i < std::min(base.size(), half.size()); ++i) ratio.push_back(half[i] / base[i]);
      const Summary s = summarize(ratio);
      v.measured += (v.measured.empty() ? "" : "; ") + prec + " " + with_interval(s, 4);
      if (s.n < 2) inside.push_back(prec + " (fewer than 2 seeds)");
      else if (s.ci_low > kLimit) above.push_back(prec);
      else if (!(s.ci_high < kLimit)) inside.push_back(prec);
    }
    // ALiBi's bias -m_h d in bf16: distances that collapse onto their neighbour's bias (computed exactly).
    const auto slopes = nn::alibi_slopes(r.config.base.model.n_head);
    int64_t collapsed = 0;
    for (int64_t d = 1; d + 1 < len; ++d)
      if (nn::round_to_bf16(nn::round_to_bf16(slopes.back()) * nn::round_to_bf16(static_cast<double>(d))) ==
          nn::round_to_bf16(nn::round_to_bf16(slopes.back()) * nn::round_to_bf16(static_cast<double>(d + 1))))
        ++collapsed;
    v.measured += "; ALiBi bias of the last head in bf16: " + std::to_string(collapsed) + " of " +
                  std::to_string(len - 2) + " distances share their neighbour's value (bf16 holds integers exactly "
                  "only up to 256, fp16 up to 2048)";
    if (base.empty()) {
      v.why = "not measured: add rope to --methods";
    } else if (!above.empty()) {
      v.verdict = "contradicted";
      std::string a;
      for (const auto& x : above) a += (a.empty() ? "" : ", ") + x;
      v.why = "RoPE in " + a + " is worse by more than 1% (whole interval above " + num(kLimit, 2) + ")";
    } else if (inside.empty()) {
      v.verdict = "supported";
      v.why = "RoPE loses less than 1% in both formats (ALiBi and T5 were not evaluated through the model)";
    } else {
      v.why = "the interval contains the 1% threshold for " + inside.front();
    }
    out.push_back(v);
  }
  for (auto& v : judge_suite_claims(r)) out.push_back(std::move(v));
  for (auto& v : judge_pi_claims(r)) out.push_back(std::move(v));
  for (auto& v : judge_passkey_claims(r)) out.push_back(std::move(v));
  return out;
}

}  // namespace posgrad::train
