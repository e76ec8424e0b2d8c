// test_claims.cpp — the claim rules of compare/claims.h and the article's claims (a)–(k) on
// constructed per-seed values: every reachable verdict of every claim with its reason, the family
// rule (Holm on the contradicted side, intersection–union on the supported side), and the null
// experiment: many simulated comparisons where every method has the same distribution, in which no
// claim may read "supported" or "contradicted" more often than the stated 5%.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "compare/claims.h"
#include "compare/compare.h"
#include "compare/studies/attention/attention.h"
#include "compare/studies/cost/cost.h"
#include "compare/studies/encoder/encoder_track.h"
#include "compare/studies/lm/lm.h"

using namespace posgrad;
using namespace posgrad::train;

namespace {

// A comparison built by hand: `methods` x `seeds` units with the language-model evaluation at
// every evaluation multiplier; each setter fills one quantity per seed.
struct Synthetic {
  ComparisonResult r;

  Synthetic(const std::vector<std::string>& methods, int64_t seeds = 3, int64_t block = 16,
            std::vector<int64_t> multipliers = {1, 2, 4}) {
    r.config = compare_preset("tiny");
    r.config.methods = methods;
    r.config.seeds.clear();
    for (int64_t s = 1; s <= seeds; ++s) r.config.seeds.push_back(static_cast<uint64_t>(s));
    r.config.base.model.block_size = block;
    r.config.eval_multipliers = std::move(multipliers);
    for (const auto& m : methods)
      for (uint64_t seed : r.config.seeds) {
        UnitResult u;
        u.method = m;
        u.seed = seed;
        auto& lengths = u.parts.get<LmResult>().lengths;
        for (int64_t k : r.config.eval_multipliers)
          lengths.push_back(LengthResult{k * block, 4, std::log(5.0), 5.0, 0.5});
        r.units.push_back(std::move(u));
      }
  }

  UnitResult& unit(const std::string& m, uint64_t seed) {
    for (auto& u : r.units)
      if (u.method == m && u.seed == seed) return u;
    throw std::runtime_error("no unit " + m);
  }
  size_t index(int64_t k) const {
    for (size_t i = 0; i < r.config.eval_multipliers.size(); ++i)
      if (r.config.eval_multipliers[i] == k) return i;
    throw std::runtime_error("no multiplier");
  }
  // Perplexity of `m` at k x per seed; k = 1 keeps the other lengths' ratio to it.
  Synthetic& ppl(const std::string& m, const std::vector<double>& v, int64_t k = 1) {
    for (size_t s = 0; s < v.size(); ++s) unit(m, s + 1).parts.get<LmResult>().lengths[index(k)]->perplexity = v[s];
    return *this;
  }
  // Perplexity growth: the value at k x is growth x the value at 1x.
  Synthetic& growth(const std::string& m, const std::vector<double>& g, int64_t k) {
    for (size_t s = 0; s < g.size(); ++s) {
      auto& l = unit(m, s + 1).parts.get<LmResult>().lengths;
      l[index(k)]->perplexity = g[s] * l[0]->perplexity;
    }
    return *this;
  }
  Synthetic& accuracy(const std::string& m, const std::vector<double>& v) {
    for (size_t s = 0; s < v.size(); ++s) unit(m, s + 1).parts.get<LmResult>().lengths[0]->accuracy = v[s];
    return *this;
  }
  // The encoder track's accuracy and macro-F1 of `m` per seed on one sequence task (marker_segment,
  // on which no encoding is structural) at 1x: claim (b) reads them.
  Synthetic& encoder(const std::string& m, const std::vector<double>& acc, const std::vector<double>& f1) {
    r.config.track = "both";
    EncoderTrackResult& e = r.parts.get<EncoderTrackResult>();
    e.config = encoder_track_preset("tiny");
    e.config.seeds = r.config.seeds;
    e.config.tasks = {"marker_segment"};
    e.config.multipliers = {1};
    if (std::find(e.config.methods.begin(), e.config.methods.end(), m) == e.config.methods.end())
      e.config.methods.push_back(m);
    for (size_t s = 0; s < acc.size(); ++s) {
      EncoderUnitResult u;
      u.method = m;
      u.seed = s + 1;
      u.mlm_loss = {1.0};
      u.mlm_accuracy = {0.5};
      u.tasks = {EncoderTaskScore{"marker_segment", 1, 16, 192, acc[s], f1[s]}};
      e.units.push_back(u);
    }
    return *this;
  }
  // The attention study's first-token share of `m` per seed (one layer).
  Synthetic& first_token(const std::string& m, const std::vector<double>& v) {
    for (size_t s = 0; s < v.size(); ++s) {
      AttentionResult& a = unit(m, s + 1).parts.get<AttentionResult>();
      a.first_token_share = {v[s]};
      a.over_uniform = {std::vector<double>(static_cast<size_t>(r.config.base.model.block_size - 1), 1.0)};
    }
    return *this;
  }
  // An evaluation-time variant row of `m` ("rope@bf16") with perplexity at k x per seed.
  Synthetic& variant(const std::string& row, const std::vector<double>& v, int64_t k) {
    const std::string m = method_of(row);
    for (size_t s = 0; s < v.size(); ++s) {
      auto& lm = unit(m, s + 1).parts.get<LmResult>();
      Lengths& l = lm.variants[row];
      if (l.empty()) l = lm.lengths;
      l[index(k)]->perplexity = v[s];
    }
    return *this;
  }
};

const ClaimVerdict& claim(const std::vector<ClaimVerdict>& all, const std::string& id) {
  for (const auto& c : all)
    if (c.id == id) return c;
  throw std::runtime_error("no claim " + id);
}

// The verdict of claim `id` and whether its reason contains `phrase`.
void expect(const ComparisonResult& r, const std::string& id, const std::string& verdict, const std::string& phrase) {
  const auto all = judge_claims(r);
  const ClaimVerdict& c = claim(all, id);
  EXPECT_EQ(c.verdict, verdict) << id << ": " << c.why;
  EXPECT_NE(c.why.find(phrase), std::string::npos) << id << " reason: " << c.why << "\n(expected: " << phrase << ")";
}

const std::vector<std::string> kArticle = {"rope", "deberta", "t5", "sinusoidal", "learned"};

// Perplexities in the claimed order (a): rope < deberta < t5 < absolute, well separated.
Synthetic ordered() {
  Synthetic s(kArticle);
  s.ppl("rope", {4.00, 4.02, 4.01}).ppl("deberta", {4.50, 4.52, 4.51}).ppl("t5", {5.00, 5.02, 5.01});
  s.ppl("sinusoidal", {6.00, 6.02, 6.01}).ppl("learned", {6.50, 6.52, 6.51});
  return s;
}

}  // namespace

// ---- the family rule -----------------------------------------------------------------------------

TEST(ClaimRules, FamilyVerdicts) {
  auto test = [](int direction, double p) {
    ClaimTest t;
    t.name = "t";
    t.testable = true;
    t.direction = direction;
    t.p = p;
    return t;
  };
  std::vector<ClaimTest> all_as_claimed = {test(1, 0.001), test(1, 0.04)};
  Judgement j = judge_family(all_as_claimed, "");
  EXPECT_EQ(j.verdict, kSupported);
  EXPECT_EQ(j.family, 2);
  EXPECT_NE(j.why.find("all of 2 significant"), std::string::npos) << j.why;
  // Supported needs every member: one at p 0.2 leaves it open.
  std::vector<ClaimTest> one_open = {test(1, 0.001), test(1, 0.2)};
  EXPECT_EQ(judge_family(one_open, "").verdict, kInconclusive);
  // A reversal at p 0.03 in a family of 4 with nothing else significant: Holm gives 0.12, not a
  // contradiction (the uncorrected rule said "contradicted").
  std::vector<ClaimTest> weak = {test(-1, 0.03), test(1, 0.4), test(1, 0.5), test(-1, 0.7)};
  j = judge_family(weak, "");
  EXPECT_EQ(j.verdict, kInconclusive) << j.why;
  EXPECT_NEAR(weak[0].p_holm, 0.12, 1e-12);
  // A strong reversal survives Holm over the 4.
  std::vector<ClaimTest> strong = {test(-1, 0.001), test(1, 0.4), test(1, 0.5), test(1, 0.001)};
  j = judge_family(strong, "");
  EXPECT_EQ(j.verdict, kContradicted);
  EXPECT_NE(j.why.find("after Holm over the 4"), std::string::npos) << j.why;
  // Untestable members: inconclusive, naming why.
  ClaimTest u;
  u.name = "x vs y";
  u.why_not = "no variance on either side";
  std::vector<ClaimTest> untestable = {test(1, 0.001), u};
  j = judge_family(untestable, "");
  EXPECT_EQ(j.verdict, kInconclusive);
  EXPECT_NE(j.why.find("x vs y (no variance on either side)"), std::string::npos) << j.why;
  // Missing rows, or no test at all: not measured.
  std::vector<ClaimTest> none;
  EXPECT_EQ(judge_family(none, "").verdict, kNotMeasured);
  EXPECT_EQ(judge_family(all_as_claimed, "deberta").verdict, kNotMeasured);
  EXPECT_EQ(judge_family(all_as_claimed, "deberta").why, "needs deberta");
}

TEST(ClaimRules, PairedTestUsesTheSameSeeds) {
  // rope@bf16 is rope plus a small, consistent shift per seed, hidden in the seed noise for Welch.
  Synthetic s({"rope"}, 3);
  s.ppl("rope", {4.0, 4.5, 5.0}).variant("rope@bf16", {4.01, 4.511, 5.01}, 1);
  const Metric m = lm_metric(Quantity::Perplexity);
  const ClaimTest unpaired = better(s.r, "rope", "rope@bf16", m);
  EXPECT_GT(unpaired.p, 0.9);
  const ClaimTest p2 = better_paired(s.r, "rope", "rope@bf16", m);
  ASSERT_TRUE(p2.testable);
  EXPECT_EQ(p2.direction, 1);  // rope lower: as "rope better" claims
  EXPECT_LT(p2.p, 0.05);
}

TEST(ClaimRules, NonFiniteValuesAreNotedNotThrown) {
  Synthetic s = ordered();
  s.ppl("learned", {6.50, INFINITY, 6.51});  // a diverged seed
  s.ppl("sinusoidal", {6.00, 6.02, NAN});
  std::vector<ClaimVerdict> all;
  ASSERT_NO_THROW(all = judge_claims(s.r));
  const ClaimVerdict& a = claim(all, "a");
  EXPECT_NE(a.measured.find("(+1 non-finite)"), std::string::npos) << a.measured;
  EXPECT_NE(a.why.find("non-finite per-seed values left out"), std::string::npos) << a.why;
  // The ranking leaves out a row without finite values instead of sorting a NaN.
  s.ppl("t5", {NAN, NAN, NAN});
  EXPECT_EQ(ranking(s.r, kArticle, lm_metric(Quantity::Perplexity)), "rope < deberta < sinusoidal < learned");
}

// ---- the article's claims, one verdict at a time ------------------------------------------------

TEST(ArticleClaims, A_PerplexityOrdering) {
  expect(ordered().r, "a", kSupported, "all of 4 significant");
  Synthetic s = ordered();
  s.ppl("rope", {4.50, 4.52, 4.51}).ppl("deberta", {4.00, 4.02, 4.01});
  expect(s.r, "a", kContradicted, "rope vs deberta");
  s = ordered();
  s.ppl("rope", {4.0, 4.6, 4.3}).ppl("deberta", {4.2, 4.5, 4.35});
  expect(s.r, "a", kInconclusive, "rope vs deberta (p ");
  Synthetic missing({"rope", "t5", "sinusoidal"});
  expect(missing.r, "a", kNotMeasured, "needs deberta");
  const auto all = judge_claims(ordered().r);
  EXPECT_EQ(claim(all, "a").family, 4);  // rope-deberta, deberta-t5, t5-sinusoidal, t5-learned
  EXPECT_EQ(claim(all, "a").budget, "6 steps of 4x16 tokens x 3 seeds");
}

TEST(ArticleClaims, B_AccuracyAndF1OnTheEncoderTrack) {
  auto build = [](std::vector<double> rope_f1) {
    Synthetic s(kArticle);
    s.encoder("rope", {0.60, 0.61, 0.62}, rope_f1).encoder("deberta", {0.55, 0.56, 0.57}, {0.80, 0.81, 0.82});
    s.encoder("t5", {0.50, 0.51, 0.52}, {0.70, 0.71, 0.72})
        .encoder("sinusoidal", {0.40, 0.41, 0.42}, {0.60, 0.61, 0.62});
    s.encoder("learned", {0.35, 0.36, 0.37}, {0.50, 0.51, 0.52});
    return s;
  };
  expect(build({0.90, 0.91, 0.92}).r, "b", kSupported, "all of 8 significant");
  expect(build({0.60, 0.61, 0.62}).r, "b", kContradicted, "F1 rope vs deberta");
  expect(build({0.70, 0.95, 0.80}).r, "b", kInconclusive, "F1 rope vs deberta (p ");
  // The claims table holds the encoder track's verdict itself, budget and all.
  const auto all = judge_claims(build({0.90, 0.91, 0.92}).r);
  EXPECT_EQ(claim(all, "b").family, 8);
  EXPECT_NE(claim(all, "b").budget.find("masked-LM steps"), std::string::npos) << claim(all, "b").budget;
  EXPECT_EQ(std::count_if(all.begin(), all.end(), [](const ClaimVerdict& v) { return v.id == "b"; }), 1);
  // Every method scores the same on every seed (a task that separates nothing): not testable.
  Synthetic flat(kArticle);
  for (const auto& m : kArticle) flat.encoder(m, {1, 1, 1}, {1, 1, 1});
  expect(flat.r, "b", kInconclusive, "no variance on either side");
  // Decoders only: a decoder's next-token accuracy is not the article's accuracy, nor a copy task's F1.
  expect(ordered().r, "b", kNotMeasured, "needs the encoder track (--track both)");
}

TEST(ArticleClaims, C_ExtrapolationOrdering) {
  Synthetic s = ordered();
  s.growth("rope", {1.01, 1.02, 1.015}, 4)
      .growth("deberta", {1.10, 1.11, 1.105}, 4)
      .growth("t5", {1.20, 1.21, 1.205}, 4);
  s.growth("sinusoidal", {2.0, 2.1, 2.05}, 4).growth("learned", {2.2, 2.3, 2.25}, 4);
  expect(s.r, "c", kSupported, "all of 4 significant");
  const auto all = judge_claims(s.r);
  EXPECT_NE(claim(all, "c").protocol.find("non-overlapping windows"), std::string::npos);
  s.growth("rope", {1.30, 1.31, 1.305}, 4);
  expect(s.r, "c", kContradicted, "rope vs deberta");
  s.growth("rope", {1.0, 1.3, 1.15}, 4);
  expect(s.r, "c", kInconclusive, "rope vs deberta (p ");
  expect(Synthetic({"rope"}).r, "c", kNotMeasured, "needs");
}

TEST(ArticleClaims, D_RelativeBeatAbsolute) {
  Synthetic s({"t5", "rope", "sinusoidal", "learned"});
  s.ppl("t5", {4.0, 4.02, 4.01})
      .ppl("rope", {4.1, 4.12, 4.11})
      .ppl("sinusoidal", {5.0, 5.02, 5.01})
      .ppl("learned", {5.1, 5.12, 5.11});
  expect(s.r, "d", kSupported, "all of 4 significant");
  s.ppl("rope", {6.0, 6.02, 6.01});
  expect(s.r, "d", kContradicted, "rope vs sinusoidal");
  s.ppl("rope", {4.0, 5.5, 4.7});
  expect(s.r, "d", kInconclusive, "rope vs sinusoidal (p ");
  expect(Synthetic({"t5", "rope"}).r, "d", kNotMeasured, "needs a relative");
}

TEST(ArticleClaims, EF_ExtrapolationThreshold) {
  Synthetic s({"t5", "rope"});
  s.growth("t5", {1.02, 1.03, 1.025}, 4).growth("rope", {1.9, 2.1, 2.0}, 4);
  expect(s.r, "e", kSupported, "significant at 5% as claimed");
  expect(s.r, "f", kContradicted, "growth at 4x below 1.10");
  s.growth("rope", {1.0, 1.2, 1.1}, 4);
  expect(s.r, "f", kInconclusive, "growth at 4x below 1.10 (p ");
  expect(Synthetic({"rope"}).r, "e", kNotMeasured, "needs t5 in --methods");
  Synthetic one({"t5"}, 1);
  one.growth("t5", {1.02}, 4);
  expect(one.r, "e", kInconclusive, "fewer than 2 seeds");
  Synthetic short_eval({"t5"}, 3, 16, {1});
  expect(short_eval.r, "e", kNotMeasured, "an evaluation beyond the training length");
}

TEST(ArticleClaims, H_CostOrderOnPairedRatios) {
  // Per-round times: a slow spell (round 2, 1.5x) hits every method alike and divides out of the
  // ratios, which decide the claim.
  auto with_cost = [](double t5, double rope, double deberta, std::vector<double> rope_jitter = {1.0, 1.01, 0.99}) {
    Synthetic s({"t5", "rope", "deberta"});
    CostResult& c = s.r.parts.get<CostResult>();
    c.rounds = 3;
    c.threads = 1;
    c.lengths = {64};
    const std::vector<double> mood = {1.0, 1.5, 1.0};
    auto row = [&](const std::string& m, double sec, std::vector<double> jitter) {
      std::vector<double> times;
      for (size_t i = 0; i < 3; ++i) times.push_back(sec * mood[i] * jitter[i]);
      c.rows.push_back(CostRow{m, "step", 64, 4, times, 0, 0});
    };
    row("t5", t5, {1, 1, 1});
    row("rope", rope, rope_jitter);
    row("deberta", deberta, {1, 1, 1});
    return s;
  };
  expect(with_cost(0.010, 0.012, 0.020).r, "h", kSupported, "all of 2 significant");
  expect(with_cost(0.012, 0.010, 0.020).r, "h", kContradicted, "t5/rope step at T=64 below 1");
  expect(with_cost(0.010, 0.010, 0.020, {1.0, 1.03, 0.97}).r, "h", kInconclusive, "t5/rope step at T=64 below 1 (p ");
  Synthetic none({"t5", "rope", "deberta"});
  expect(none.r, "h", kNotMeasured, "t5, rope and deberta in --methods");
  const auto all = judge_claims(with_cost(0.010, 0.012, 0.020).r);
  EXPECT_EQ(claim(all, "h").family, 2);
  EXPECT_EQ(claim(all, "h").budget, "3 interleaved rounds per length, 1 threads");
}

TEST(CostBenchmark, LogRatiosArePairedByRound) {
  CostResult c;
  c.rows.push_back(CostRow{"a", "step", 64, 1, {1.0, 2.0, 4.0}, 0, 0});
  c.rows.push_back(CostRow{"b", "step", 64, 1, {2.0, 4.0, 8.0}, 0, 0});
  c.rows.push_back(CostRow{"c", "step", 64, 1, {2.0, 4.0}, 0, 0});
  const auto lr = c.log_ratios("a", "b", "step", 64);
  ASSERT_EQ(lr.size(), 3u);
  for (double x : lr) EXPECT_DOUBLE_EQ(x, std::log(0.5));   // the machine's mood divides out
  EXPECT_TRUE(c.log_ratios("a", "c", "step", 64).empty());  // round counts differ
  EXPECT_TRUE(c.log_ratios("a", "x", "step", 64).empty());
  EXPECT_EQ(ratio_text(lr), "0.500 [0.500, 0.500]");
  EXPECT_EQ(ratio_text({}), "n/a");
}

TEST(ArticleClaims, I_ParameterCounts) {
  Synthetic s({"t5", "rope", "deberta"});
  for (auto& u : s.r.units) u.position_parameters = u.method == "t5" ? 128 : u.method == "deberta" ? 8192 : 0;
  expect(s.r, "i", kSupported, "RoPE adds 0");
  for (auto& u : s.r.units)
    if (u.method == "rope") u.position_parameters = 64;
  expect(s.r, "i", kContradicted, "fewer than T5: rope 64");
  expect(Synthetic({"t5", "rope"}).r, "i", kNotMeasured, "needs t5, rope and deberta");
}

TEST(ArticleClaims, J_BestBeyond2048Tokens) {
  // Block 64 evaluated at 32x: 2048 tokens.
  auto build = [](std::vector<double> alibi) {
    Synthetic s({"rope", "alibi", "t5"}, 3, 64, {1, 32});
    s.ppl("rope", {5.0, 5.02, 5.01}, 32).ppl("alibi", alibi, 32).ppl("t5", {7.0, 7.02, 7.01}, 32);
    return s;
  };
  expect(build({6.0, 6.02, 6.01}).r, "j", kSupported, "all of 2 significant");
  expect(build({4.0, 4.02, 4.01}).r, "j", kContradicted, "rope vs alibi");
  expect(build({4.5, 5.8, 5.2}).r, "j", kInconclusive, "rope vs alibi (p ");
  expect(Synthetic({"rope", "alibi"}).r, "j", kNotMeasured, "2048 tokens or more");
  expect(Synthetic({"alibi"}, 3, 64, {1, 32}).r, "j", kNotMeasured, "rope in --methods");
  // RoPE's own scaled row is paired with it by seed: a consistent 1% gain of rope+yarn is resolved
  // although it hides inside the seeds' spread.
  Synthetic v({"rope", "t5"}, 3, 64, {1, 32});
  v.ppl("rope", {5.0, 6.0, 7.0}, 32).ppl("t5", {9.0, 9.02, 9.01}, 32).variant("rope+yarn", {4.95, 5.93, 6.94}, 32);
  const auto all = judge_claims(v.r);
  EXPECT_EQ(claim(all, "j").verdict, kContradicted) << claim(all, "j").why;
  EXPECT_NE(claim(all, "j").why.find("rope vs rope+yarn (paired by seed)"), std::string::npos) << claim(all, "j").why;
}

TEST(ArticleClaims, K_HalfPrecisionPairedBySeed) {
  auto build = [](std::vector<double> bf16, std::vector<double> fp16) {
    Synthetic s({"rope"});
    s.ppl("rope", {4.0, 5.0, 6.0}, 4);
    std::vector<double> b, f;
    for (size_t i = 0; i < 3; ++i) {
      b.push_back(bf16[i] * (4.0 + static_cast<double>(i)));
      f.push_back(fp16[i] * (4.0 + static_cast<double>(i)));
    }
    s.variant("rope@bf16", b, 4).variant("rope@fp16", f, 4);
    return s;
  };
  // Ratios near 1 by seed although the seeds' perplexities differ by 50%.
  expect(build({1.001, 1.002, 1.0015}, {1.0, 1.0005, 1.0002}).r, "k", kSupported, "all of 2 significant");
  expect(build({1.05, 1.06, 1.055}, {1.0, 1.0005, 1.0002}).r, "k", kContradicted, "bf16 / fp32 below 1.01");
  expect(build({1.0, 1.03, 1.015}, {1.0, 1.0005, 1.0002}).r, "k", kInconclusive, "bf16 / fp32 below 1.01 (p ");
  // The same ratio on every seed is an exact answer, not a missing noise estimate.
  expect(build({1.0, 1.0, 1.0}, {1.0, 1.0, 1.0}).r, "k", kSupported, "all of 2 significant");
  expect(Synthetic({"t5"}).r, "k", kNotMeasured, "rope in --methods");
  expect(Synthetic({"rope"}).r, "k", kNotMeasured, "rope@bf16");
}

// ---- the newer encodings' papers (compare/studies/papers/papers.h) ---------------------------------------

TEST(PaperClaims, EveryVerdictOfN1ToN4) {
  const std::vector<std::string> m = {"fire", "t5", "alibi", "kerple", "rope", "hybrid", "xpos"};
  auto base = [&] {
    Synthetic s(m, 3, 16, {1, 2, 4});
    for (const auto& x : m) s.growth(x, {1.50, 1.51, 1.49}, 4);
    return s;
  };
  // n1: FIRE's growth well below each comparator's (within any margin), or 20% above all of them.
  Synthetic s = base();
  s.growth("fire", {1.20, 1.21, 1.19}, 4);
  expect(s.r, "n1", kSupported, "all of 3 significant");
  s.growth("fire", {1.80, 1.81, 1.79}, 4);
  expect(s.r, "n1", kContradicted, "fire within 5% of t5");
  // Level with them, with seed noise: within 5% is not shown either way.
  s.growth("fire", {1.40, 1.70, 1.55}, 4);
  expect(s.r, "n1", kInconclusive, "not significant");
  expect(Synthetic({"fire", "rope"}).r, "n1", kNotMeasured, "t5, alibi or kerple in --methods");
  expect(Synthetic({"t5", "alibi"}).r, "n1", kNotMeasured, "fire in --methods");
  EXPECT_EQ(claim(judge_claims(base().r), "n1").family, 3);
  // n2: better growth and no worse perplexity at 1x (one family of 2).
  s = base();
  s.ppl("rope", {5.00, 5.02, 4.98}).ppl("hybrid", {5.00, 5.01, 4.99});  // growth kept: set before it
  s.growth("hybrid", {1.20, 1.21, 1.19}, 4).growth("rope", {1.50, 1.51, 1.49}, 4);
  expect(s.r, "n2", kSupported, "all of 2 significant");
  s.ppl("hybrid", {5.50, 5.51, 5.49});  // 10% above rope's 5.0 at 1x
  expect(s.r, "n2", kContradicted, "hybrid within 1% of rope");
  s = base();
  expect(s.r, "n2", kInconclusive, "hybrid vs rope");
  expect(Synthetic({"rope"}).r, "n2", kNotMeasured, "hybrid in --methods");
  // n3: xpos against rope.
  s = base();
  s.growth("xpos", {1.20, 1.21, 1.19}, 4);
  expect(s.r, "n3", kSupported, "significant at 5% as claimed");
  s.growth("xpos", {1.80, 1.81, 1.79}, 4);
  expect(s.r, "n3", kContradicted, "xpos vs rope");
  expect(Synthetic({"rope"}).r, "n3", kNotMeasured, "xpos in --methods");
  // n4: fox below rope at 1x and at 4x.
  Synthetic f({"fox", "rope"}, 3, 16, {1, 4});
  f.ppl("fox", {4.50, 4.52, 4.51}).ppl("rope", {5.00, 5.02, 5.01});
  f.growth("fox", {1.10, 1.11, 1.09}, 4).growth("rope", {1.50, 1.51, 1.49}, 4);
  expect(f.r, "n4", kSupported, "all of 2 significant");
  f.ppl("fox", {5.50, 5.52, 5.51});
  expect(f.r, "n4", kContradicted, "fox vs rope");
  expect(Synthetic({"rope"}).r, "n4", kNotMeasured, "fox in --methods");
  // Without an evaluation beyond the training length nothing is read.
  expect(Synthetic(m, 3, 16, {1}).r, "n1", kNotMeasured, "an evaluation beyond the training length");
}

// n5 (p-RoPE no worse than full RoPE at 1x, 1% margin) and n6 (sinks lower the first-token share,
// paired by seed), on method variants (compare/method.h).
TEST(PaperClaims, EveryVerdictOfN5AndN6) {
  const std::string prope = "rope[rope_fraction=0.75;rope_partial=prope]";
  Synthetic s({"rope", prope});
  s.ppl("rope", {5.00, 5.02, 4.98}).ppl(prope, {4.90, 4.91, 4.89});
  expect(s.r, "n5", kSupported, "significant at 5% as claimed");
  EXPECT_EQ(claim(judge_claims(s.r), "n5").family, 1);
  s.ppl(prope, {5.50, 5.52, 5.48});  // 10% worse
  expect(s.r, "n5", kContradicted, prope + " / rope below 1.01 (paired by seed)");
  s.ppl(prope, {4.95, 5.15, 5.05});  // level, noisy
  expect(s.r, "n5", kInconclusive, "not significant");
  expect(Synthetic({"rope"}).r, "n5", kNotMeasured, "a p-RoPE method in --methods");
  // Two p-RoPE methods: each judged against full RoPE, a family of 2.
  const std::string half = "rope[rope_fraction=0.5;rope_partial=prope]";
  Synthetic two({"rope", half, prope});
  two.ppl("rope", {5.00, 5.02, 4.98}).ppl(prope, {4.90, 4.91, 4.89}).ppl(half, {5.50, 5.52, 5.48});
  expect(two.r, "n5", kContradicted, half + " / rope below 1.01");
  EXPECT_EQ(claim(judge_claims(two.r), "n5").family, 2);
  // The NeoX convention is not p-RoPE; p-RoPE without its full-RoPE twin is not measured either.
  expect(Synthetic({"rope", "rope[rope_fraction=0.75]"}).r, "n5", kNotMeasured, "a p-RoPE method");
  expect(Synthetic({prope, "alibi"}).r, "n5", kNotMeasured, "full RoPE beside " + prope);
  // A twin that differs in another setting (the base) is not the comparator.
  expect(Synthetic({prope, "rope[rope_base=500]"}).r, "n5", kNotMeasured, "full RoPE beside");

  const std::string sinks = "rope[attention_sinks=true]", asinks = "alibi[attention_sinks=true]";
  Synthetic k({"rope", sinks, "alibi", asinks});
  k.first_token("rope", {3.0, 3.2, 2.9}).first_token(sinks, {1.5, 1.6, 1.4});
  k.first_token("alibi", {2.0, 2.5, 1.8}).first_token(asinks, {1.2, 1.6, 1.0});
  expect(k.r, "n6", kSupported, "all of 2 significant");
  EXPECT_EQ(claim(judge_claims(k.r), "n6").family, 2);
  k.first_token(asinks, {2.6, 3.0, 2.5});  // alibi's sinks raise it, in every seed by about 0.5
  expect(k.r, "n6", kContradicted, asinks + " below alibi by more than 0.01 (paired by seed)");
  k.first_token(asinks, {2.1, 2.3, 2.0});  // up in two seeds, down in one
  expect(k.r, "n6", kInconclusive, asinks + " below alibi");
  // Lower in every seed, but by 3e-5: below the margin, so not "supported" (a reduction that small says
  // the sinks changed nothing; with tight seeds it reads contradicted: significantly less than 0.01).
  k.first_token(asinks, {1.99997, 2.49997, 1.79997});
  EXPECT_NE(claim(judge_claims(k.r), "n6").verdict, kSupported);
  expect(Synthetic({"rope", "alibi"}).r, "n6", kNotMeasured, "a method with attention sinks and the same method");
  expect(Synthetic({sinks, "alibi"}).r, "n6", kNotMeasured, "a method with attention sinks");
  // Sinks for the whole experiment: the twin is the variant without them.
  Synthetic w({"rope", "rope[attention_sinks=false]"});
  w.r.config.base.model.attention_sinks = true;
  w.first_token("rope", {1.5, 1.6, 1.4}).first_token("rope[attention_sinks=false]", {3.0, 3.2, 2.9});
  expect(w.r, "n6", kSupported, "significant at 5% as claimed");
  // Measured before the first-token share existed: no value to test.
  Synthetic old({"rope", sinks});
  expect(old.r, "n6", kNotMeasured, "the first-token share of rope (absent from results written before");
}

// ---- the null experiment ---------------------------------------------------------------------------

// Every method's per-seed values drawn from one distribution (perplexity 5 with the 1% seed noise
// measured in the default run, the same growth with length, accuracy, F1 and half-precision ratio):
// no claim that compares methods may read supported or contradicted in more than 5% of the
// experiments. Under the uncorrected rule (any one pair reversed at 5%), (d) and (j) read
// contradicted in about 12% of them.
TEST(NullExperiment, ComparativeVerdictsStayWithinTheStatedRate) {
  const std::vector<std::string> methods = {"none",    "sinusoidal", "learned", "t5",
                                            "deberta", "rope",       "alibi",   "kerple"};
  const std::vector<std::string> ids = {"a", "b", "c", "d", "j"};
  constexpr int kExperiments = 600;
  std::mt19937_64 gen(20261202);
  std::normal_distribution<double> noise(0.0, 1.0);
  std::map<std::string, int> supported, contradicted;
  for (int e = 0; e < kExperiments; ++e) {
    Synthetic s(methods, 3, 64, {1, 2, 4, 8, 16, 32});
    for (const auto& m : methods) {
      std::vector<double> ppl, acc, enc_acc, enc_f1;
      for (int i = 0; i < 3; ++i) {
        ppl.push_back(5.0 * (1 + 0.01 * noise(gen)));
        acc.push_back(0.5 + 0.005 * noise(gen));
        enc_acc.push_back(0.8 + 0.02 * noise(gen));
        enc_f1.push_back(0.7 + 0.03 * noise(gen));
      }
      s.ppl(m, ppl).accuracy(m, acc).encoder(m, enc_acc, enc_f1);
      for (int64_t k : {2, 4, 8, 16, 32}) {
        std::vector<double> g;
        for (int i = 0; i < 3; ++i) g.push_back(1.5 * (1 + 0.02 * noise(gen)));
        s.growth(m, g, k);
      }
    }
    for (const auto& v : judge_claims(s.r)) {
      supported[v.id] += v.verdict == kSupported;
      contradicted[v.id] += v.verdict == kContradicted;
    }
  }
  for (const auto& id : ids) {
    const double sup = static_cast<double>(supported[id]) / kExperiments;
    const double con = static_cast<double>(contradicted[id]) / kExperiments;
    RecordProperty("claim_" + id + "_supported", std::to_string(sup));
    RecordProperty("claim_" + id + "_contradicted", std::to_string(con));
    EXPECT_LE(sup, kAlpha) << id;
    EXPECT_LE(con, kAlpha) << id;
    std::printf("claim %s under the null: supported %.3f, contradicted %.3f (%d experiments)\n", id.c_str(), sup, con,
                kExperiments);
  }
}
