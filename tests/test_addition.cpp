// test_addition.cpp — reversed addition with index hints (data/addition.h) and its study
// (compare/studies/addition): the formats with and without hints (digits reversed, the same hint for
// the digits of one place, hints in range, training offsets that cover the hint set), lengths,
// determinism per seed, the batch's targets at exactly the answer, exact-match scoring on constructed
// logits, the refusals naming the option, claim z1's verdicts on constructed counts (and the measure
// of a model that ignores position), and the study in a tiny comparison.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include "compare/claims.h"
#include "compare/compare.h"
#include "compare/options.h"
#include "compare/report.h"
#include "compare/studies/addition/addition.h"
#include "data/addition.h"
#include "data/fileio.h"
#include "support/compare_config.h"
#include "support/test_util.h"

using namespace posgrad;
using namespace posgrad::data;
using posgrad::test::TempDir;

namespace {

// The number written by reversed digits.
uint64_t value_of(const std::vector<int64_t>& rev) {
  uint64_t v = 0;
  for (size_t k = rev.size(); k-- > 0;) v = v * 10 + static_cast<uint64_t>(rev[k]);
  return v;
}

}  // namespace

TEST(Addition, SumIsReversedAndHasNoLeadingZeros) {
  // 42 + 39 = 81: "2 4 + 9 3 = 1 8".
  EXPECT_EQ(add_reversed({2, 4}, {9, 3}), (std::vector<int64_t>{1, 8}));
  // 999 + 1 = 1000: the last column carries.
  EXPECT_EQ(add_reversed({9, 9, 9}, {1}), (std::vector<int64_t>{0, 0, 0, 1}));
  EXPECT_EQ(add_reversed({0}, {0}), (std::vector<int64_t>{0}));
  Generator g(4);
  for (int i = 0; i < 500; ++i) {
    const int64_t la = 1 + i % 7, lb = 1 + (i / 7) % 7;
    const AdditionOperands o = addition_operands(la, lb, g);
    ASSERT_EQ(static_cast<int64_t>(o.a.size()), la);
    ASSERT_EQ(static_cast<int64_t>(o.b.size()), lb);
    if (la > 1) {
      EXPECT_NE(o.a.back(), 0);
    }  // n digits: a non-zero leading digit
    if (lb > 1) {
      EXPECT_NE(o.b.back(), 0);
    }
    const auto s = add_reversed(o.a, o.b);
    EXPECT_EQ(value_of(s), value_of(o.a) + value_of(o.b));
    EXPECT_TRUE(s.size() == 1 || s.back() != 0);
    EXPECT_GE(s.size(), std::max(o.a.size(), o.b.size()));
    EXPECT_LE(s.size(), std::max(o.a.size(), o.b.size()) + 1);
  }
}

TEST(Addition, FormatWithoutHints) {
  const AdditionOperands o{{2, 4}, {9, 3}};
  int64_t start = 0;
  const auto t = addition_tokens(o, {false, 0}, 0, &start);
  EXPECT_EQ(t, (std::vector<int64_t>{kAddBos, 2, 4, kAddPlus, 9, 3, kAddEquals, 1, 8, kAddEos}));
  EXPECT_EQ(start, 7);
  EXPECT_EQ(addition_vocab_size({false, 0}), 15);
  EXPECT_EQ(addition_max_tokens(2, {false, 0}), 1 + 2 + 1 + 2 + 1 + 3 + 1);
}

TEST(Addition, FormatWithHints) {
  const AdditionOperands o{{2, 4}, {9}};  // 42 + 9 = 51
  const AdditionFormat f{true, 7};
  int64_t start = 0;
  const auto t = addition_tokens(o, f, 3, &start);
  const int64_t h = kAddHint0 + 3;
  EXPECT_EQ(t, (std::vector<int64_t>{kAddBos, h, 2, h + 1, 4, kAddPlus, h, 9, kAddEquals, h, 1, h + 1, 5, kAddEos}));
  EXPECT_EQ(start, 9);
  EXPECT_EQ(addition_vocab_size(f), 15 + 7);
  EXPECT_EQ(addition_max_tokens(2, f), 1 + 4 + 1 + 4 + 1 + 6 + 1);
  // The hints must fit in the set: offset 6 leaves one hint for two places.
  EXPECT_THROW(addition_tokens(o, f, 6), ValueError);
  EXPECT_THROW(addition_tokens(o, f, -1), ValueError);
}

// Training batches: the hint of every digit is offset + its place, the same in a, b and the sum;
// the offsets cover the whole set (so test lengths see trained hints); test batches start at 0.
TEST(Addition, TrainingHintsCoverTheSetAndAlignPlaces) {
  const AdditionFormat f{true, 10};
  Generator g(2);
  std::set<int64_t> seen;
  for (int rep = 0; rep < 200; ++rep) {
    const LengthBatch b = make_addition_batch({{3, 2}, {1, 1}}, f, true, g);
    const auto x = b.x.to_int_vector();
    const int64_t T = b.x.size(1);
    for (int64_t row = 0; row < 2; ++row) {
      // The parts a, b and the sum: (hint, digit) pairs, hints consecutive from one offset in each.
      std::vector<std::vector<int64_t>> parts(1);
      for (int64_t j = 1; j < T; ++j) {
        const int64_t v = x[row * T + j];
        if (v == kAddPlus || v == kAddEquals)
          parts.emplace_back();
        else if (v == kAddEos || v == kAddPad)
          break;
        else
          parts.back().push_back(v);
      }
      ASSERT_EQ(parts.size(), 3u);
      const int64_t offset = parts[0][0] - kAddHint0;
      for (const auto& part : parts) {
        ASSERT_EQ(part.size() % 2, 0u);
        for (size_t k = 0; k + 1 < part.size(); k += 2) {
          EXPECT_EQ(part[k], kAddHint0 + offset + static_cast<int64_t>(k / 2));
          EXPECT_LT(part[k + 1], 10);
          seen.insert(part[k] - kAddHint0);
        }
      }
      ASSERT_LT(*seen.rbegin(), 10);
    }
  }
  EXPECT_EQ(seen.size(), 10u);  // every hint of the set trained
  Generator t(1);
  const LengthBatch test = make_addition_batch({{4, 4}}, f, false, t);
  EXPECT_EQ(test.x.to_int_vector()[1], kAddHint0);  // test hints start at the first
  EXPECT_EQ(test.lengths, (std::vector<int64_t>{4}));
}

TEST(Addition, BatchTargetsAreExactlyTheAnswerAndDeterministic) {
  Generator g(5), h(5);
  const AdditionFormat f{false, 0};
  const LengthBatch b = make_addition_batch({{2, 3}, {1, 1}}, f, true, g);
  const LengthBatch c = make_addition_batch({{2, 3}, {1, 1}}, f, true, h);
  EXPECT_EQ(b.x.to_int_vector(), c.x.to_int_vector());  // the same seed, the same examples
  EXPECT_EQ(b.y.to_int_vector(), c.y.to_int_vector());
  Generator other(6);
  EXPECT_NE(make_addition_batch({{2, 3}, {1, 1}}, f, true, other).x.to_int_vector(), b.x.to_int_vector());
  const auto x = b.x.to_int_vector(), y = b.y.to_int_vector();
  const int64_t T = b.x.size(1);
  for (int64_t row = 0; row < 2; ++row) {
    bool after_equals = false;
    int64_t scored = 0;
    for (int64_t j = 0; j < T; ++j) {
      if (x[row * T + j] == kAddEquals) after_equals = true;
      const int64_t target = y[row * T + j];
      if (after_equals && target != kLengthIgnore) {
        ++scored;
        if (j + 1 < T && x[row * T + j + 1] != kAddPad) {
          EXPECT_EQ(target, x[row * T + j + 1]);
        }
      }
      if (!after_equals) {
        EXPECT_EQ(target, kLengthIgnore) << row << " " << j;
      }
      if (x[row * T + j] == kAddPad) {
        EXPECT_EQ(target, kLengthIgnore);
      }
    }
    // Row 0: 2- and 3-digit operands, a sum of 3 or 4 digits, then EOS; row 1: 1 or 2 digits, EOS.
    if (row == 0) {
      EXPECT_TRUE(scored == 4 || scored == 5) << scored;
    }
    if (row == 1) {
      EXPECT_TRUE(scored == 2 || scored == 3) << scored;
    }
  }
}

// Exact match: one-hot logits on every target read 1; a model wrong at one answer token of a row
// loses that row only.
TEST(Addition, ExactMatchScoring) {
  Generator g(7);
  const AdditionFormat f{true, 13};
  const LengthBatch b = make_addition_batch({{4, 4}, {4, 4}, {4, 4}}, f, false, g);
  const int64_t B = 3, T = b.x.size(1), V = addition_vocab_size(f);
  const auto y = b.y.to_int_vector();
  std::vector<double> logits(static_cast<size_t>(B * T * V), 0.0);
  for (int64_t i = 0; i < B * T; ++i)
    if (y[i] != kLengthIgnore) logits[i * V + y[i]] = 1.0;
  const Shape s{B, T, V};
  EXPECT_EQ(score_length_logits(Tensor::from_vector(logits, s, DType::Float32), b.y).sequence_accuracy, 1.0);
  // Row 1's last scored token (EOS) wrong: one example of three.
  for (int64_t j = T; j-- > 0;)
    if (y[T + j] != kLengthIgnore) {
      logits[(T + j) * V + y[T + j]] = 0.0;
      logits[(T + j) * V + kAddPlus] = 1.0;
      break;
    }
  const LengthScore sc = score_length_logits(Tensor::from_vector(logits, s, DType::Float32), b.y);
  EXPECT_NEAR(sc.sequence_accuracy, 2.0 / 3.0, 1e-12);
  EXPECT_EQ(sc.correct[1] + 1, sc.scored[1]);
}

TEST(Addition, Refusals) {
  Generator g(1);
  EXPECT_THROW(addition_operands(0, 3, g), ValueError);
  EXPECT_THROW(addition_operands(3, -1, g), ValueError);
  EXPECT_THROW(add_reversed({}, {1}), ValueError);
  EXPECT_THROW(add_reversed({12}, {1}), ValueError);
  EXPECT_THROW(make_addition_batch({}, {false, 0}, true, g), ValueError);
  EXPECT_THROW(make_addition_batch({{1, 1}}, {true, 0}, true, g), ValueError);
  EXPECT_THROW(make_addition_batch({{5, 5}}, {true, 4}, true, g), ValueError);  // 5 places, 4 hints
}

// ---- claim z1 on constructed counts ----------------------------------------------------------------

namespace {

// per row "method+randomized?/variant": per seed {in-distribution correct of 100, beyond-N correct of 100}.
using SeedCounts = std::vector<std::array<int64_t, 2>>;

train::ComparisonResult addition_result(const std::map<std::string, SeedCounts>& per_method) {
  train::ComparisonResult r;
  r.config = train::compare_preset("tiny");
  auto& s = r.config.of<train::AdditionSettings>();
  s.length = 2;
  s.examples = 50;  // two lengths per range: 100 examples
  s.variants = {"hints"};
  s.randomized = {};
  r.config.methods.clear();
  train::AdditionResult a;
  size_t nseeds = 0;
  for (const auto& [m, seeds] : per_method) {
    r.config.methods.push_back(m);
    nseeds = seeds.size();
    for (size_t k = 0; k < seeds.size(); ++k) {
      train::AdditionRow row;
      row.variant = "hints";
      for (int64_t n = 1; n <= 6; ++n) {
        // Lengths 1, 2: in distribution; 3, 4: beyond N (split the count over the two lengths); 5, 6: 0.
        const int64_t c = n <= 2 ? seeds[k][0] : (n <= 4 ? seeds[k][1] : 0);
        row.lengths.push_back({n, 50, n <= 4 ? (n % 2 ? c / 2 : c - c / 2) : 0});
      }
      a.units.push_back({m, k + 1, {row}});
    }
  }
  s.seeds.clear();
  for (size_t k = 0; k < nseeds; ++k) s.seeds.push_back(k + 1);
  r.parts.get<train::AdditionResult>() = a;
  return r;
}

const train::ClaimVerdict& z1(const std::vector<train::ClaimVerdict>& all, const std::string& id) {
  for (const auto& c : all)
    if (c.id == id) return c;
  throw std::runtime_error("no claim " + id);
}

}  // namespace

TEST(AdditionClaim, EveryVerdict) {
  const auto r = addition_result({
      // Learned; two seeds generalise, three do not: spread 0.9, supported.
      {"rope", {{{100, 95}}, {{99, 5}}, {{100, 90}}, {{98, 3}}, {{100, 4}}}},
      // Learned; every seed generalises alike: contradicted.
      {"fire", {{{100, 90}}, {{100, 92}}, {{99, 91}}, {{100, 89}}, {{100, 90}}}},
      // Learned; a spread near the margin: inconclusive.
      {"alibi", {{{100, 60}}, {{100, 80}}, {{100, 70}}, {{100, 65}}, {{100, 75}}}},
      // Not learned in distribution: inconclusive whatever the spread.
      {"t5", {{{90, 90}}, {{100, 0}}, {{100, 80}}, {{100, 0}}, {{100, 0}}}},
      // Learned, no seed beyond N: inconclusive.
      {"kerple", {{{100, 0}}, {{100, 2}}, {{100, 1}}, {{100, 0}}, {{100, 0}}}},
  });
  const auto all = train::judge_claims(r);
  EXPECT_EQ(z1(all, "z1 rope hints").verdict, train::kSupported) << z1(all, "z1 rope hints").why;
  EXPECT_EQ(z1(all, "z1 rope hints").family, 1);
  EXPECT_EQ(z1(all, "z1 fire hints").verdict, train::kContradicted) << z1(all, "z1 fire hints").why;
  EXPECT_EQ(z1(all, "z1 alibi hints").verdict, train::kInconclusive) << z1(all, "z1 alibi hints").why;
  EXPECT_NE(z1(all, "z1 alibi hints").why.find("not significant"), std::string::npos) << z1(all, "z1 alibi hints").why;
  EXPECT_EQ(z1(all, "z1 t5 hints").verdict, train::kInconclusive);
  EXPECT_NE(z1(all, "z1 t5 hints").why.find("did not learn addition in distribution"), std::string::npos);
  EXPECT_EQ(z1(all, "z1 kerple hints").verdict, train::kInconclusive);
  EXPECT_NE(z1(all, "z1 kerple hints").why.find("no seed generalises beyond N"), std::string::npos);
  // The study off: one row, not measured, naming the option.
  train::ComparisonResult off = r;
  off.parts.get<train::AdditionResult>().units.clear();
  const auto none = train::judge_claims(off);
  EXPECT_EQ(z1(none, "z1").verdict, train::kNotMeasured);
  EXPECT_NE(z1(none, "z1").why.find("--addition-iters"), std::string::npos);
}

// The measure's known values: the spread of equal seeds is 0, of 0.95 and 0.05 is 0.9; a model that
// ignores position adds only one-digit numbers (symmetric in the operands), so it reads 0 at every
// length >= 2 at every seed: not learned in distribution (N = 2), spread 0, inconclusive.
TEST(AdditionClaim, MeasureAndPositionBlindModel) {
  using train::AdditionSeedScore;
  EXPECT_EQ(train::addition_spread({{1, 50, 100}, {2, 50, 100}}), 0.0);
  EXPECT_NEAR(train::addition_spread({{1, 95, 100}, {2, 5, 100}, {3, 50, 100}}), 0.9, 1e-12);
  EXPECT_EQ(train::addition_spread({{1, 95, 100}}), 0.0);
  // Position-blind: length 1 right (50 of 50), length 2 and beyond wrong.
  auto r = addition_result({{"none", {{{50, 0}}, {{50, 0}}, {{50, 0}}, {{50, 0}}, {{50, 0}}}}});
  const auto& a = r.parts.get<train::AdditionResult>();
  const auto beyond = train::addition_scores(a, "none", "hints", false, 3, 4);
  ASSERT_EQ(beyond.size(), 5u);
  EXPECT_EQ(train::addition_spread(beyond), 0.0);
  const auto v = z1(train::judge_claims(r), "z1 none hints");
  EXPECT_EQ(v.verdict, train::kInconclusive);
  EXPECT_NE(v.why.find("did not learn"), std::string::npos) << v.why;
}

// ---- the study in a tiny comparison -----------------------------------------------------------------

TEST(AdditionStudy, TinyComparisonRunsItsOwnSeedsAndReportsTheSpread) {
  TempDir d;
  train::CompareConfig c = test::tiny_compare(d, "add");
  c.methods = {"rope", "none"};
  c.seeds = {1};
  // tiny: addition seeds 1, 2; N = 2 (lengths 1..6); plain and hints; rope also randomized.
  const std::string report = read_file(train::run_compare(c));
  EXPECT_NE(report.find("## Reversed addition with index hints"), std::string::npos);
  EXPECT_NE(report.find("### rope, hints"), std::string::npos);
  EXPECT_NE(report.find("| z1 rope+randomized hints |"), std::string::npos) << report;
  for (const char* m : {"rope", "none"})
    for (int seed : {1, 2})
      EXPECT_TRUE(std::filesystem::exists(c.out_dir + "/addition/" + std::string(m) + "/seed" + std::to_string(seed) +
                                          "/result.json"));
  const std::string csv = read_file(c.out_dir + "/addition.csv");
  size_t lines = 0;
  for (char ch : csv) lines += ch == '\n';
  // rows: rope plain, rope+randomized plain, rope hints, rope+randomized hints, none plain, none hints;
  // 6 lengths each.
  EXPECT_EQ(lines, 1u + 6u * 6u) << csv;
  EXPECT_NE(csv.find("rope,rope+randomized,hints,1,6,2,"), std::string::npos) << csv;
  const std::string seeds = read_file(c.out_dir + "/addition_seeds.csv");
  EXPECT_NE(seeds.find("none,none,plain,0,2,6,2,"), std::string::npos) << seeds;
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    EXPECT_TRUE(std::filesystem::exists(c.out_dir + "/plots/addition_hints.png"));
    EXPECT_NE(report.find("![addition_hints](plots/addition_hints.png)"), std::string::npos);
  }
  // posgrad report refuses a results.json whose addition units do not match the configuration.
  {
    const nlohmann::json valid = nlohmann::json::parse(read_file(c.out_dir + "/results.json"));
    auto refusal = [&](auto edit) {
      TempDir e;
      nlohmann::json j = valid;
      edit(j);
      std::filesystem::create_directories(e.str("run"));
      write_file_atomic(e.str("run/results.json"), j.dump(1));
      return test::thrown_message<IoError>([&] { train::rerender_report(e.str("run")); });
    };
    ASSERT_EQ(valid["addition"].size(), 4u);  // rope 1, rope 2, none 1, none 2
    const std::string missing = refusal([](nlohmann::json& j) { j["addition"].erase(3); });
    EXPECT_NE(missing.find("no unit for (none, seed 2)"), std::string::npos) << missing;
    const std::string twice = refusal([](nlohmann::json& j) { j["addition"][3] = j["addition"][2]; });
    EXPECT_NE(twice.find("addition[3]: a second unit for (none, seed 1); the first is addition[2]"), std::string::npos)
        << twice;
    const std::string gone = refusal([](nlohmann::json& j) { j.erase("addition"); });
    EXPECT_NE(gone.find("missing, but config.addition_iters is 3"), std::string::npos) << gone;
  }
  // A re-run keeps every finished unit, and the same results; a damaged one is refused by name.
  EXPECT_NO_THROW((void)train::run_compare(c));
  EXPECT_EQ(read_file(c.out_dir + "/addition.csv"), csv);
  const std::string unit = c.out_dir + "/addition/rope/seed2/result.json";
  std::string text = read_file(unit);
  text.replace(text.find("\"correct\""), 9, "\"correkt\"");
  write_file_atomic(unit, text);
  const std::string msg = test::thrown_message<IoError>([&] { (void)train::run_compare(c); });
  EXPECT_NE(msg.find("addition/rope/seed2/result.json"), std::string::npos) << msg;
  // Before any unit trains, and under --dry-run (which calls the same check).
  const std::string kept = test::thrown_message<IoError>([&] { train::check_kept_units(c); });
  EXPECT_NE(kept.find("addition/rope/seed2/result.json"), std::string::npos) << kept;
}

// A re-run in a directory holding only the study's own units (the decoder units not started): the
// study's options and the experiment's rows its task models read are fixed; turning the study off is
// refused by its name, since its finished units would drop from the report (check_same_experiment).
TEST(AdditionStudy, AReRunKeepsItsSettingsAndCannotTurnItOff) {
  TempDir d;
  train::CompareConfig c = test::tiny_compare(d, "keep");
  c.methods = {"none"};
  c.seeds = {1};
  (void)train::run_compare(c);
  // Only the study's units are left: the decoder unit goes, so that the study's own rule is what
  // decides.
  std::filesystem::remove_all(c.out_dir + "/none");
  auto refused = [&](auto edit) {
    train::CompareConfig x = c;
    edit(x);
    return test::thrown_message<UsageError>([&] { (void)train::run_compare(x); });
  };
  const std::string iters = refused([](train::CompareConfig& x) { x.of<train::AdditionSettings>().iters = 0; });
  EXPECT_NE(iters.find("--addition-iters 3 there, 0 now"), std::string::npos) << iters;
  const std::string off = refused([](train::CompareConfig& x) { x.track = "encoder"; });
  EXPECT_NE(off.find("holds finished units of the study addition, which these settings turn off"), std::string::npos)
      << off;
  const std::string lr = refused([](train::CompareConfig& x) { x.of<train::AdditionSettings>().lr *= 2; });
  EXPECT_NE(lr.find("--addition-lr"), std::string::npos) << lr;
  const std::string sinks = refused([](train::CompareConfig& x) { x.base.model.attention_sinks = true; });
  EXPECT_NE(sinks.find("--attention-sinks"), std::string::npos) << sinks;
  // The claim's margin changes only the verdict: a re-run with another one keeps the study's units
  // and judges z1 with it.
  train::CompareConfig margin = c;
  margin.of<train::AdditionSettings>().spread_margin = 0.35;
  const std::string report = read_file(train::run_compare(margin));
  EXPECT_NE(report.find("above 0.35"), std::string::npos) << report;
  EXPECT_EQ(report.find("above 0.20"), std::string::npos) << report;
}

// The study's settings are refused before anything is trained, naming the option.
TEST(AdditionStudy, BadSettingsAreRefusedNamingTheOption) {
  auto bad = [](auto edit) {
    train::CompareConfig c = train::compare_preset("tiny");
    c.methods = {"rope", "none"};
    edit(c.of<train::AdditionSettings>());
    return test::thrown_message<UsageError>([&] { c.validate(); });
  };
  EXPECT_NE(bad([](auto& s) { s.randomized = {"none"}; }).find("--addition-randomized: 'none'"), std::string::npos);
  EXPECT_NE(bad([](auto& s) { s.variants = {"hints", "hints"}; }).find("--addition-variants lists"), std::string::npos);
  EXPECT_NE(bad([](auto& s) { s.seeds = {1, 1}; }).find("--addition-seeds lists a seed twice"), std::string::npos);
  const std::string huge = bad([](auto& s) {
    s.length = 64;
    s.batch = 4096;
  });
  EXPECT_NE(huge.find("the addition model of rope"), std::string::npos) << huge;
  // Through the option table: out-of-range values name the flag.
  train::CompareConfig c = train::compare_preset("tiny");
  const std::string range = test::thrown_message<UsageError>([&] {
    opt::from_json(train::compare_options(), c, nlohmann::json{{"addition_length", 0}}, "test");
  });
  EXPECT_NE(range.find("addition_length"), std::string::npos) << range;
}
