// test_flipflop.cpp — flip-flop language modelling (data/flipflop.h) and its study
// (compare/studies/flipflop): the grammar of every generated sequence (first w, last r, each read
// bit the last write's), the instruction frequencies of FFL(p), the batch's targets at exactly the
// read bits, the scoring on constructed logits (a perfect reader, a reader that always answers 0:
// read accuracy 1/2 in expectation, the position-blind reading), the refusals, claim f1's verdicts on
// constructed counts, and the study in a tiny comparison.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "compare/claims.h"
#include "compare/compare.h"
#include "compare/studies/flipflop/flipflop.h"
#include "data/fileio.h"
#include "data/flipflop.h"
#include "support/compare_config.h"
#include "support/test_util.h"

using namespace posgrad;
using namespace posgrad::data;
using posgrad::test::TempDir;

namespace {

// The bit every read must return, by replaying the writes.
void expect_grammar(const std::vector<int64_t>& s) {
  ASSERT_GE(s.size(), 4u);
  ASSERT_EQ(s.size() % 2, 0u);
  EXPECT_EQ(s.front(), kFlipFlopWrite);
  EXPECT_EQ(s[s.size() - 2], kFlipFlopRead);
  int64_t stored = -1;
  for (size_t k = 0; k < s.size(); k += 2) {
    ASSERT_TRUE(s[k] == kFlipFlopWrite || s[k] == kFlipFlopRead || s[k] == kFlipFlopIgnore) << k;
    ASSERT_TRUE(s[k + 1] == kFlipFlopBit0 || s[k + 1] == kFlipFlopBit0 + 1) << k;
    if (s[k] == kFlipFlopWrite) stored = s[k + 1];
    if (s[k] == kFlipFlopRead) {
      EXPECT_EQ(s[k + 1], stored) << "read at " << k;
    }
  }
}

}  // namespace

TEST(FlipFlop, EverySequenceFollowsTheGrammar) {
  Generator g(3);
  for (double p : {0.0, 0.1, 0.8, 0.98, 1.0})
    for (int64_t T : {4, 6, 64, 257 * 2}) {
      const auto s = flipflop_sequence(T, p, g);
      EXPECT_EQ(static_cast<int64_t>(s.size()), T);
      expect_grammar(s);
    }
  // p = 1: every inner instruction is an ignore.
  const auto all_ignore = flipflop_sequence(20, 1.0, g);
  for (size_t k = 2; k + 2 < all_ignore.size(); k += 2) EXPECT_EQ(all_ignore[k], kFlipFlopIgnore);
  // The same seed, the same sequence.
  Generator a(9), b(9);
  EXPECT_EQ(flipflop_sequence(64, 0.8, a), flipflop_sequence(64, 0.8, b));
}

// FFL(p): the inner instructions are i with probability p and w, r with (1 - p)/2 each; write bits
// are fair coins. 4000 sequences of 64 tokens: 120000 inner instructions, standard errors < 0.002.
TEST(FlipFlop, InstructionFrequenciesAreThoseOfFflP) {
  Generator g(11);
  for (double p : {0.8, 0.1}) {
    double w = 0, r = 0, i = 0, ones = 0, writes = 0;
    for (int n = 0; n < 4000; ++n) {
      const auto s = flipflop_sequence(64, p, g);
      for (size_t k = 2; k + 2 < s.size(); k += 2) {
        w += s[k] == kFlipFlopWrite;
        r += s[k] == kFlipFlopRead;
        i += s[k] == kFlipFlopIgnore;
        if (s[k] == kFlipFlopWrite) {
          writes += 1;
          ones += s[k + 1] == kFlipFlopBit0 + 1;
        }
      }
    }
    const double total = w + r + i;
    EXPECT_NEAR(i / total, p, 0.01) << p;
    EXPECT_NEAR(w / total, (1 - p) / 2, 0.01) << p;
    EXPECT_NEAR(r / total, (1 - p) / 2, 0.01) << p;
    EXPECT_NEAR(ones / writes, 0.5, 0.02) << p;
  }
}

TEST(FlipFlop, BatchTargetsAreExactlyTheReadBits) {
  Generator g(5), h(5);
  const FlipFlopBatch b = make_flipflop_batch(3, 16, 0.5, g);
  ASSERT_EQ(b.x.shape(), (Shape{3, 15}));
  ASSERT_EQ(b.y.shape(), (Shape{3, 15}));
  const auto x = b.x.to_int_vector(), y = b.y.to_int_vector();
  int64_t reads = 0;
  for (int row = 0; row < 3; ++row) {
    const auto s = flipflop_sequence(16, 0.5, h);  // the same draws, row by row
    for (int t = 0; t < 15; ++t) {
      EXPECT_EQ(x[row * 15 + t], s[t]);
      if (s[t] == kFlipFlopRead) {
        EXPECT_EQ(y[row * 15 + t], s[t + 1]);
        ++reads;
      } else {
        EXPECT_EQ(y[row * 15 + t], kFlipFlopIgnoreIndex);
      }
    }
  }
  EXPECT_EQ(b.reads, reads);
  EXPECT_GE(reads, 3);  // every sequence ends with a read
}

TEST(FlipFlop, ScoringCountsReadsAndGlitches) {
  Generator g(7);
  const int64_t B = 400, T = 32;
  const FlipFlopBatch b = make_flipflop_batch(B, T, 0.5, g);
  const auto y = b.y.to_int_vector();
  // A perfect reader: one-hot logits on the target.
  std::vector<double> perfect(static_cast<size_t>(B * (T - 1) * kFlipFlopVocab), 0.0), zero = perfect;
  for (int64_t i = 0; i < B * (T - 1); ++i) {
    if (y[i] != kFlipFlopIgnoreIndex) perfect[i * kFlipFlopVocab + y[i]] = 1.0;
    zero[i * kFlipFlopVocab + kFlipFlopBit0] = 1.0;  // always answers bit 0
  }
  const Shape s{B, T - 1, kFlipFlopVocab};
  const FlipFlopScore p = score_flipflop_logits(Tensor::from_vector(perfect, s, DType::Float32), b.y);
  EXPECT_EQ(p.sequences, B);
  EXPECT_EQ(p.reads, b.reads);
  EXPECT_EQ(p.wrong_reads, 0);
  EXPECT_EQ(p.glitched, 0);
  EXPECT_EQ(p.read_accuracy(), 1.0);
  EXPECT_EQ(p.glitch_rate(), 0.0);
  // A reader blind to the input: read accuracy 1/2 in expectation (the written bit is a fair coin);
  // exactly the share of reads whose bit is 0.
  const FlipFlopScore z = score_flipflop_logits(Tensor::from_vector(zero, s, DType::Float64), b.y);
  int64_t zeros = 0;
  for (int64_t v : y) zeros += v == kFlipFlopBit0;
  EXPECT_EQ(z.reads - z.wrong_reads, zeros);
  EXPECT_NEAR(z.read_accuracy(), 0.5, 0.05);
  EXPECT_GT(z.glitch_rate(), 0.5);
  FlipFlopScore sum = p;
  sum += z;
  EXPECT_EQ(sum.sequences, 2 * B);
  EXPECT_EQ(sum.glitched, z.glitched);
  EXPECT_TRUE(std::isnan(FlipFlopScore{}.read_accuracy()));
  EXPECT_TRUE(std::isnan(FlipFlopScore{}.glitch_rate()));
}

TEST(FlipFlop, Refusals) {
  Generator g(1);
  EXPECT_THROW(flipflop_sequence(5, 0.5, g), ValueError);
  EXPECT_THROW(flipflop_sequence(2, 0.5, g), ValueError);
  EXPECT_THROW(flipflop_sequence(8, 1.5, g), ValueError);
  EXPECT_THROW(flipflop_sequence(8, std::nan(""), g), ValueError);
  EXPECT_THROW(make_flipflop_batch(0, 8, 0.5, g), ValueError);
  const FlipFlopBatch b = make_flipflop_batch(2, 8, 0.5, g);
  EXPECT_THROW(score_flipflop_logits(Tensor::zeros({2, 6, 5}), b.y), ShapeError);
  EXPECT_THROW(score_flipflop_logits(Tensor::zeros({2, 7, 3}), b.y), IndexError);  // targets 3, 4 outside V = 3
}

// ---- claim f1 on constructed counts -------------------------------------------------------------

namespace {

train::ComparisonResult flipflop_result(const std::map<std::string, std::vector<std::array<int64_t, 3>>>& per_method) {
  // per method, per seed: {in-distribution wrong reads, in glitched, sparse glitched} of 200 sequences,
  // 1000 reads in distribution, 200 sparse.
  train::ComparisonResult r;
  r.config = train::compare_preset("tiny");
  r.config.of<train::FlipFlopSettings>().sequences = 200;
  r.config.seeds = {1, 2, 3};
  r.config.methods.clear();
  for (const auto& [m, seeds] : per_method) {
    r.config.methods.push_back(m);
    for (size_t s = 0; s < seeds.size(); ++s) {
      train::UnitResult u;
      u.method = m;
      u.seed = s + 1;
      train::FlipFlopResult f;
      f.cells = train::flipflop_cells(r.config.of<train::FlipFlopSettings>());
      for (auto& c : f.cells) {
        c.score.sequences = 200;
        c.score.reads = c.split == "sparse" ? 200 : 1000;
        if (c.split == "in" && c.multiplier == 1) {
          c.score.wrong_reads = seeds[s][0];
          c.score.glitched = seeds[s][1];
        } else if (c.split == "sparse") {
          c.score.wrong_reads = c.score.glitched = seeds[s][2];
        }
      }
      u.parts.get<train::FlipFlopResult>() = f;
      r.units.push_back(std::move(u));
    }
  }
  return r;
}

const train::ClaimVerdict& f1(const std::vector<train::ClaimVerdict>& all, const std::string& m) {
  for (const auto& c : all)
    if (c.id == "f1 " + m) return c;
  throw std::runtime_error("no f1 row for " + m);
}

}  // namespace

TEST(FlipFlopClaim, EveryVerdict) {
  const auto r = flipflop_result({
      {"rope", {{{2, 2, 40}}, {{1, 1, 44}}, {{3, 2, 38}}}},  // learned; glitches on sparse: supported
      {"alibi", {{{2, 2, 0}}, {{1, 1, 1}}, {{2, 2, 0}}}},    // learned; no more glitches on sparse: inconclusive
      {"none", {{{400, 180, 190}}, {{420, 190, 195}}, {{410, 185, 199}}}},  // not learned (0.59): inconclusive
      {"t5", {{{30, 30, 0}}, {{28, 28, 0}}, {{32, 30, 0}}}},  // learned (0.97); fewer glitches on sparse: contradicted
  });
  const auto all = train::judge_claims(r);
  EXPECT_EQ(f1(all, "rope").verdict, train::kSupported) << f1(all, "rope").why;
  EXPECT_EQ(f1(all, "rope").family, 1);
  EXPECT_EQ(f1(all, "alibi").verdict, train::kInconclusive) << f1(all, "alibi").why;
  EXPECT_NE(f1(all, "alibi").why.find("not significant"), std::string::npos) << f1(all, "alibi").why;
  EXPECT_EQ(f1(all, "none").verdict, train::kInconclusive);
  EXPECT_NE(f1(all, "none").why.find("did not learn flip-flop in distribution"), std::string::npos)
      << f1(all, "none").why;
  EXPECT_EQ(f1(all, "t5").verdict, train::kContradicted) << f1(all, "t5").why;
  // The study off: no f1 row at all.
  train::ComparisonResult off = r;
  for (auto& u : off.units) u.parts.get<train::FlipFlopResult>().cells.clear();
  for (const auto& c : train::judge_claims(off)) EXPECT_NE(c.id.rfind("f1 ", 0), 0u) << c.id;
}

// ---- the study in a tiny comparison --------------------------------------------------------------

TEST(FlipFlopStudy, TinyComparisonScoresEveryCellAndReportsIt) {
  TempDir d;
  train::CompareConfig c = test::tiny_compare(d, "ff");
  c.methods = {"rope", "none"};
  c.seeds = {1};
  const std::string report = read_file(train::run_compare(c));
  EXPECT_NE(report.find("## Flip-flop language modelling"), std::string::npos);
  const std::string csv = read_file(c.out_dir + "/flipflop.csv");
  // tiny: multipliers 1, 2, then sparse and dense: 4 cells per unit, 2 units.
  size_t lines = 0;
  for (char ch : csv) lines += ch == '\n';
  EXPECT_EQ(lines, 1u + 2u * 4u) << csv;
  EXPECT_NE(csv.find("rope,1,sparse,1,0.98,3,"), std::string::npos) << csv;
  const std::string results = read_file(c.out_dir + "/results.csv");
  EXPECT_NE(results.find("rope,flipflop_glitch_rate_in_x2,1,"), std::string::npos);
  EXPECT_NE(report.find("| f1 rope |"), std::string::npos) << report;
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    EXPECT_TRUE(std::filesystem::exists(c.out_dir + "/plots/flipflop_glitch.png"));
    EXPECT_NE(report.find("![flipflop_glitch](plots/flipflop_glitch.png)"), std::string::npos);
  }
  // Re-rendered from results.json alone: the same section.
  EXPECT_NO_THROW((void)train::run_compare(c));
}

// The study's settings are refused before anything is trained, naming the option.
TEST(FlipFlopStudy, BadSettingsAreRefusedNamingTheOption) {
  auto bad = [](auto edit) {
    train::CompareConfig c = train::compare_preset("tiny");
    c.methods = {"rope"};
    edit(c.of<train::FlipFlopSettings>());
    return test::thrown_message<UsageError>([&] { c.validate(); });
  };
  EXPECT_NE(bad([](auto& s) { s.length = 9; }).find("--flipflop-length must be even"), std::string::npos);
  EXPECT_NE(bad([](auto& s) { s.multipliers = {2, 4}; }).find("must include 1"), std::string::npos);
  EXPECT_NE(bad([](auto& s) { s.multipliers = {1, 2, 2}; }).find("lists a length twice"), std::string::npos);
  // A model whose evaluation could not fit in memory: refused with the flip-flop options named.
  const std::string huge = bad([](auto& s) {
    s.length = 1 << 16;
    s.multipliers = {1, 64};
  });
  EXPECT_NE(huge.find("the flip-flop model of rope"), std::string::npos) << huge;
  EXPECT_NE(huge.find("GiB"), std::string::npos) << huge;
}
