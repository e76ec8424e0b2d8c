// test_passkey.cpp — passkey retrieval: the example generator (exact length, needle depth, answer
// tokens and target mask, determinism, both key alphabets, refused inputs), the scorer on hand-made
// logits, the fine-tuning and the grid (bit-identical repeats, n/a beyond a learned table, the
// RoPE rows, the trained model left unchanged), the comparison's options and results.json entries, and the
// report and claims on results with known values.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "autograd/node.h"
#include "compare/compare.h"
#include "compare/options.h"
#include "compare/results.h"
#include "compare/studies/passkey/passkey.h"
#include "compare/studies/passkey/passkey_config.h"
#include "compare/studies/passkey/passkey_report.h"
#include "data/fileio.h"
#include "data/passkey.h"
#include "data/tokenizer.h"
#include "nn/gpt.h"
#include "support/claim_verdict.h"
#include "support/test_util.h"
#include "tensor/errors.h"
#include "train/options.h"

using namespace posgrad;
using posgrad::test::thrown_message;

namespace {

// Filler text holding every lowercase letter (a pangram) and no digit.
std::string letters_text(int repeats = 40) {
  std::string s;
  for (int i = 0; i < repeats; ++i) s += "The quick brown fox jumps over the lazy dog. What key? Remember it. ";
  return s;
}

data::TokenSpan span_of(const data::Tokenizer& tok, const std::string& text) {
  return data::TokenSpan::from_vector(tok.encode(text));
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

}  // namespace

// ---- the generator ------------------------------------------------------------------------------------

TEST(PasskeyData, ExactLengthDepthAnswerAndTargets) {
  const data::ByteTokenizer tok;  // encodes everything: digits
  data::PasskeyGenerator gen(span_of(tok, letters_text()), tok, 5, data::PasskeyTemplate::Standard, 7);
  EXPECT_EQ(gen.alphabet(), "digits");
  EXPECT_EQ(gen.overhead(), data::passkey_overhead_bytes(data::PasskeyTemplate::Standard, 5));
  const int64_t L = 200;
  const int64_t F = L - gen.overhead();
  const std::string question = " What is the pass key? The pass key is ";
  for (double depth : {0.0, 0.3, 1.0}) {
    const data::PasskeyExample e = gen.example(L, depth);
    ASSERT_EQ(static_cast<int64_t>(e.tokens.size()), L);
    EXPECT_EQ(e.filler_length, F);
    EXPECT_EQ(e.needle_start, std::llround(depth * static_cast<double>(F)));
    ASSERT_EQ(e.key_text.size(), 5u);
    for (char c : e.key_text) EXPECT_TRUE(c >= '0' && c <= '9') << e.key_text;
    const std::string text = tok.decode(e.tokens);
    const std::string needle = " The pass key is " + e.key_text + ". Remember it. " + e.key_text + " is the pass key. ";
    EXPECT_EQ(text.substr(static_cast<size_t>(e.needle_start), needle.size()), needle) << text;
    EXPECT_EQ(e.needle_length, static_cast<int64_t>(needle.size()));
    EXPECT_EQ(text.substr(text.size() - question.size() - 5), question + e.key_text);  // ends with the answer
    if (depth == 0.0) {
      EXPECT_EQ(e.needle_start, 0);  // right after the start
    }
    if (depth == 1.0) {  // just before the question
      EXPECT_EQ(e.needle_start + e.needle_length, L - static_cast<int64_t>(question.size()) - 5);
    }
    // As next-token data: only the last 5 targets are scored, and they are the key.
    const data::PasskeyBatch b = data::passkey_batch({e});
    ASSERT_EQ(b.x.shape(), Shape({1, L - 1}));
    const auto x = b.x.to_int_vector(), y = b.y.to_int_vector();
    for (int64_t j = 0; j < L - 1; ++j) {
      EXPECT_EQ(x[j], e.tokens[j]);
      if (j < L - 1 - 5)
        EXPECT_EQ(y[j], data::kPasskeyIgnore) << j;
      else
        EXPECT_EQ(y[j], e.key[j - (L - 1 - 5)]) << j;
    }
  }
}

TEST(PasskeyData, SameSeedSameExamplesAndLettersWithoutDigits) {
  const std::string text = letters_text();
  const data::CharTokenizer tok(text);  // no digit in the text: letters
  auto draw = [&](uint64_t seed) {
    data::PasskeyGenerator g(span_of(tok, text), tok, 4, data::PasskeyTemplate::Short, seed);
    std::vector<std::vector<int64_t>> out;
    for (double d : {0.0, 0.5, 1.0}) out.push_back(g.example(60, d).tokens);
    return out;
  };
  EXPECT_EQ(draw(3), draw(3));
  EXPECT_NE(draw(3), draw(4));
  data::PasskeyGenerator g(span_of(tok, text), tok, 4, data::PasskeyTemplate::Short, 3);
  EXPECT_EQ(g.alphabet(), "letters");
  EXPECT_EQ(g.alphabet_size(), 26);
  const data::PasskeyExample e = g.example(40, 0.5);
  for (char c : e.key_text) EXPECT_TRUE(c >= 'a' && c <= 'z') << e.key_text;
  const std::string s = tok.decode(e.tokens);
  EXPECT_EQ(s.substr(static_cast<size_t>(e.needle_start), 6 + 4), " key " + e.key_text + ".") << s;
  EXPECT_EQ(s.substr(s.size() - 9), " key " + e.key_text);
  // The digits win when all ten are there.
  const data::CharTokenizer with_digits(text + "0123456789");
  EXPECT_EQ(data::PasskeyGenerator(span_of(tok, text), with_digits, 4, data::PasskeyTemplate::Short, 3).alphabet(),
            "digits");
}

TEST(PasskeyData, RefusedInputsAreNamed) {
  const std::string text = letters_text();
  const data::CharTokenizer tok(text);
  const data::TokenSpan filler = span_of(tok, text);
  data::PasskeyGenerator g(filler, tok, 5, data::PasskeyTemplate::Standard, 1);
  EXPECT_TRUE(contains(thrown_message<ValueError>([&] { g.example(g.min_length() - 1, 0.5); }), "too short"));
  EXPECT_NO_THROW(g.example(g.min_length(), 0.5));
  EXPECT_TRUE(contains(thrown_message<ValueError>([&] { g.example(200, 1.5); }), "depth must lie in [0, 1]"));
  EXPECT_TRUE(contains(thrown_message<ValueError>([&] { g.example(200, NAN); }), "depth"));
  EXPECT_TRUE(contains(thrown_message<ValueError>([&] { g.example(g.max_length() + 1, 0.5); }), "filler text holds"));
  // A vocabulary without the template's 'W' (standard) or 'y' (short), or without any key alphabet.
  const data::CharTokenizer no_w("the pass key is. remember it? abcdefghijklmnopqrstuvwxyz TR");
  EXPECT_TRUE(contains(
      thrown_message<ValueError>([&] { data::PasskeyGenerator(filler, no_w, 5, data::PasskeyTemplate::Standard, 1); }),
      "cannot encode the template text ' What is the pass key? The pass key is '"));
  const data::CharTokenizer no_y(" ke.abcdefghijklmnopqrstuvwx");
  EXPECT_TRUE(contains(thrown_message<ValueError>([&] {
                         data::PasskeyGenerator(span_of(no_y, "abc abc"), no_y, 5, data::PasskeyTemplate::Short, 1);
                       }),
                       "cannot encode the template text ' key '"));
  const data::CharTokenizer few(" key.abc");
  EXPECT_TRUE(contains(thrown_message<ValueError>([&] {
                         data::PasskeyGenerator(span_of(few, "abc abc"), few, 5, data::PasskeyTemplate::Short, 1);
                       }),
                       "neither all digits 0-9 nor all lowercase letters"));
  EXPECT_TRUE(contains(
      thrown_message<ValueError>([&] { data::PasskeyGenerator(filler, tok, 0, data::PasskeyTemplate::Short, 1); }),
      "key_length"));
  EXPECT_TRUE(contains(thrown_message<ValueError>([] { data::parse_passkey_template("long"); }), "standard, short"));
}

// ---- scoring, fine-tuning, the grid ----------------------------------------------------------------

TEST(Passkey, ScorerCountsWholeKeysOnHandMadeLogits) {
  // B = 3, T = 4, V = 5; the last two positions are scored (targets 2, 3).
  Tensor logits = Tensor::zeros({3, 4, 5}, DType::Float32);
  float* p = logits.data<float>();
  auto set = [&](int64_t b, int64_t t, int64_t v, float x) { p[(b * 4 + t) * 5 + v] = x; };
  for (int64_t b = 0; b < 3; ++b) {
    set(b, 0, 4, 9);  // unscored positions: anything
    set(b, 2, 2, 1);
    set(b, 3, 3, 1);
  }
  set(1, 3, 0, 2);  // example 1: the second key symbol is wrong
  set(2, 2, 1, 1);  // example 2: a tie at the first symbol between ids 1 and 2 goes to 1: wrong
  Tensor y = Tensor::empty({3, 4}, DType::Int64);
  int64_t* py = y.data<int64_t>();
  for (int64_t b = 0; b < 3; ++b) {
    py[b * 4 + 0] = py[b * 4 + 1] = data::kPasskeyIgnore;
    py[b * 4 + 2] = 2;
    py[b * 4 + 3] = 3;
  }
  EXPECT_EQ(train::passkey_correct(logits, y), 1);
  set(1, 3, 3, 3);  // now right
  EXPECT_EQ(train::passkey_correct(logits, y), 2);
  Tensor none = Tensor::full({3, 4}, data::kPasskeyIgnore, DType::Int64);
  EXPECT_THROW(train::passkey_correct(logits, none), ValueError);
}

namespace {

nn::GPTConfig small(const std::string& kind, int64_t vocab, int64_t block, int64_t layers = 1, int64_t embd = 16) {
  nn::GPTConfig c;
  c.vocab_size = vocab;
  c.block_size = block;
  c.n_layer = layers;
  c.n_head = 2;
  c.n_embd = embd;
  c.pos.kind = kind;
  return c;
}

train::PasskeyConfig tiny_passkey() {
  train::PasskeyConfig c;
  c.iters = 3;
  c.batch = 3;
  c.examples = 4;
  c.multipliers = {1, 2};
  c.depths = {0, 0.5, 1};
  c.key_length = 2;
  return c;
}

}  // namespace

TEST(Passkey, GridRepeatsBitForBitAndLearnedTablesAreNaBeyondThemselves) {
  const std::string text = letters_text();
  const data::CharTokenizer tok(text);
  const data::TokenSpan span = span_of(tok, text);
  const train::PasskeyConfig cfg = tiny_passkey();
  for (const std::string kind : {"learned", "rope"}) {
    auto run = [&] {
      Generator g(5), d(6);
      nn::GPT model(small(kind, tok.vocab_size(), 20), g, d);
      const auto f = train::finetune_passkey(model, span, tok, cfg, 11, Device::cpu());
      return std::make_pair(f.final_loss, train::evaluate_passkey(model, span, tok, cfg, Device::cpu()));
    };
    const auto [loss, grid] = run();
    const auto [loss2, grid2] = run();
    EXPECT_TRUE(std::isfinite(loss));
    EXPECT_EQ(loss, loss2) << kind;
    EXPECT_EQ(grid.alphabet, "letters");
    ASSERT_EQ(grid.cells.size(), 6u);  // 2 multipliers x 3 depths, multiplier-major
    ASSERT_EQ(grid2.cells.size(), 6u);
    for (size_t i = 0; i < 6; ++i) {
      const auto& c = grid.cells[i];
      EXPECT_EQ(c.multiplier, cfg.multipliers[i / 3]);
      EXPECT_EQ(c.depth, cfg.depths[i % 3]);
      EXPECT_EQ(c.accuracy, grid2.cells[i].accuracy);
      const bool na = kind == "learned" && c.multiplier == 2;  // 40 tokens > the 20-row table
      EXPECT_EQ(c.accuracy.has_value(), !na) << kind << " " << c.multiplier;
      EXPECT_EQ(c.examples, na ? 0 : cfg.examples);
      if (c.accuracy) {
        EXPECT_TRUE(*c.accuracy >= 0 && *c.accuracy <= 1);
      }
    }
    EXPECT_NE(grid.find(2, 0.5), nullptr);
    EXPECT_EQ(grid.find(3, 0.5), nullptr);
  }
  // Cells beyond the validation text are n/a too.
  Generator g(5), d(6);
  nn::GPT model(small("rope", tok.vocab_size(), 20), g, d);
  train::PasskeyConfig far = cfg;
  far.multipliers = {1, 1000};
  const auto grid = train::evaluate_passkey(model, span, tok, far, Device::cpu());
  EXPECT_TRUE(grid.cells.front().accuracy.has_value());
  EXPECT_FALSE(grid.cells.back().accuracy.has_value());
}

TEST(Passkey, RopeRowsAndLeavesTheTrainedModelUnchanged) {
  const std::string text = letters_text();
  const data::CharTokenizer tok(text);
  const data::TokenSpan span = span_of(tok, text);
  Generator g(5), d(6);
  nn::GPT model(small("rope", tok.vocab_size(), 16), g, d);
  const auto before = model.state_dict();
  const auto rows = train::run_passkey(model, span, span, tok, tiny_passkey(), "rope", 1, Device::cpu());
  ASSERT_EQ(rows.size(), 4u);
  for (const char* r : {"rope", "rope+linear", "rope+dynamic", "rope+yarn"}) {
    ASSERT_TRUE(rows.count(r)) << r;
    EXPECT_EQ(rows.at(r).grid.cells.size(), 6u) << r;
    // At 1x the scaled rows are the plain model.
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(rows.at(r).grid.cells[i].accuracy, rows.at("rope").grid.cells[i].accuracy);
  }
  const auto after = model.state_dict();
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_EQ(before[i].second.to_vector(), after[i].second.to_vector()) << before[i].first;
  // JSON round trip, and a malformed entry is an IoError naming the file.
  const auto back = train::passkey_from_json(train::passkey_to_json(rows));
  EXPECT_EQ(train::passkey_to_json(back).dump(), train::passkey_to_json(rows).dump());
  train::UnitResult u;
  u.method = "rope";
  u.seed = 1;
  u.parts.get<train::PasskeyRows>().rows = rows;
  nlohmann::json j = train::to_json(u);
  EXPECT_EQ(train::to_json(train::unit_from_json(j, "unit.json")).dump(), j.dump());
  j["passkey"]["rope"]["cells"][0]["accuracy"] = "high";
  EXPECT_TRUE(contains(thrown_message<IoError>([&] { train::unit_from_json(j, "unit.json"); }), "unit.json"));
  j["passkey"]["rope"]["cells"][0]["accuracy"] = 1.5;
  EXPECT_TRUE(contains(thrown_message<IoError>([&] { train::unit_from_json(j, "unit.json"); }), "unit.json"));
}

// ---- options -------------------------------------------------------------------------------------------

TEST(PasskeyOptions, RefusedSettingsNameTheOption) {
  auto refused = [](auto change) {
    train::CompareConfig c = train::compare_preset("tiny");
    change(c);
    return thrown_message<UsageError>([&] { c.validate(); });
  };
  EXPECT_TRUE(contains(refused([](train::CompareConfig& c) {
                         c.of<train::PasskeyConfig>().multipliers = {2, 4};
                       }),
                       "--passkey-multipliers must include 1"));
  EXPECT_TRUE(contains(refused([](train::CompareConfig& c) {
                         c.of<train::PasskeyConfig>().multipliers = {1, 2, 2};
                       }),
                       "--passkey-multipliers lists"));
  EXPECT_TRUE(contains(refused([](train::CompareConfig& c) {
                         c.of<train::PasskeyConfig>().depths = {0, 0.5, 0.5};
                       }),
                       "--passkey-depths lists a depth twice"));
  EXPECT_TRUE(contains(refused([](train::CompareConfig& c) {
                         c.of<train::PasskeyConfig>().depths = {0, 1.5};
                       }),
                       "--passkey-depths"));
  EXPECT_TRUE(
      contains(refused([](train::CompareConfig& c) { c.of<train::PasskeyConfig>().template_name = "standard"; }),
               "--passkey-template standard"));
  EXPECT_TRUE(contains(refused([](train::CompareConfig& c) { c.of<train::PasskeyConfig>().key_length = 5; }),
                       "--block-size 16"));
  // Every preset's passkey settings are valid (the full one uses the standard template at 128 tokens).
  for (const std::string preset : {"quick", "full", "tiny"})
    EXPECT_NO_THROW(train::compare_preset(preset).validate()) << preset;
  EXPECT_EQ(train::compare_preset("full").of<train::PasskeyConfig>().template_name, "standard");
  // Off: the passkey options are not checked against each other.
  train::CompareConfig off = train::compare_preset("tiny");
  off.of<train::PasskeyConfig>().iters = 0;
  off.of<train::PasskeyConfig>().multipliers = {2};
  EXPECT_NO_THROW(off.validate());
  // The list of depths parses as numbers in [0, 1] on the command line and in JSON.
  train::CompareConfig c = train::compare_preset("tiny");
  opt::from_json(train::compare_options(), c, {{"passkey_depths", {0, 0.125, 1}}}, "c.json");
  EXPECT_EQ(c.of<train::PasskeyConfig>().depths, std::vector<double>({0, 0.125, 1}));
  EXPECT_TRUE(contains(thrown_message<UsageError>([&] {
                         opt::from_json(train::compare_options(), c, {{"passkey_depths", {0, -0.5}}}, "c.json");
                       }),
                       "passkey_depths"));
  EXPECT_TRUE(contains(thrown_message<UsageError>([&] {
                         opt::from_json(train::compare_options(), c, {{"passkey_depths", {0, "x"}}}, "c.json");
                       }),
                       "passkey_depths"));
}

// ---- report and claims --------------------------------------------------------------------------------

namespace {

// acc[row][seed] = (accuracy at 1x, accuracy at 2x) at every depth.
train::ComparisonResult made(const std::map<std::string, std::vector<std::pair<double, double>>>& acc) {
  train::ComparisonResult r;
  r.config = train::compare_preset("tiny");
  r.config.methods = {"learned", "rope"};
  r.config.seeds = {1, 2, 3};
  for (const std::string m : {"learned", "rope"})
    for (uint64_t s = 1; s <= 3; ++s) {
      train::UnitResult u;
      u.method = m;
      u.seed = s;
      for (const auto& [row, v] : acc) {
        if (row.rfind(m, 0) != 0) continue;
        train::PasskeyResult p;
        p.grid.alphabet = "letters";
        for (int64_t mult : {1, 2})
          for (double d : {0.0, 1.0}) {
            train::PasskeyCell c;
            c.multiplier = mult;
            c.depth = d;
            const double a = mult == 1 ? v[s - 1].first : v[s - 1].second;
            if (a >= 0) {
              c.examples = 2;
              c.accuracy = a;
            }
            p.grid.cells.push_back(c);
          }
        u.parts.get<train::PasskeyRows>().rows[row] = p;
      }
      r.units.push_back(u);
    }
  return r;
}

using test::verdict;

}  // namespace

TEST(PasskeyReport, TableCsvAndClaimsFromKnownValues) {
  // Plain RoPE retrieves at 1x and loses it at 2x; YaRN keeps most of it; learned is n/a at 2x.
  auto r = made({{"learned", {{0.9, -1}, {0.8, -1}, {1.0, -1}}},
                 {"rope", {{1.0, 0.1}, {0.9, 0.0}, {1.0, 0.2}}},
                 {"rope+yarn", {{1.0, 0.8}, {0.9, 0.9}, {1.0, 0.7}}}});
  EXPECT_EQ(train::passkey_rows(r), std::vector<std::string>({"learned", "rope", "rope+yarn"}));
  EXPECT_EQ(train::passkey_values(r, "rope", 2, 1.0), std::vector<double>({0.1, 0.0, 0.2}));
  EXPECT_TRUE(train::passkey_values(r, "learned", 2, 0.0).empty());
  EXPECT_EQ(train::passkey_beyond_values(r, "rope+yarn"), std::vector<double>({0.8, 0.9, 0.7}));
  const std::string md = train::passkey_markdown(r, "/nonexistent");
  EXPECT_TRUE(contains(md, "## Passkey retrieval")) << md;
  EXPECT_TRUE(contains(md, "| rope+yarn | 0.97 ± 0.06 [")) << md;
  EXPECT_TRUE(contains(md, "| learned | 0.90 ± 0.10 [0.65, 1.00] | n/a |")) << md;  // an accuracy's interval: clipped
  EXPECT_FALSE(contains(md, ".png"));
  test::TempDir dir;
  train::write_passkey_csv(r, dir.str("passkey.csv"));
  const std::string csv = read_file(dir.str("passkey.csv"));
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "row,multiplier,depth,n,mean,std,ci_low,ci_high");
  EXPECT_TRUE(contains(csv, "\nrope,2,1,3,0.100000,0.100000,")) << csv;
  EXPECT_TRUE(contains(csv, "\nlearned,2,mean,0,n/a,n/a,n/a,n/a\n")) << csv;
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 3 * 2 * 3);  // rows x multipliers x (2 depths + mean)
  const auto claims = train::judge_passkey_claims(r);
  // Two examples per cell: the claims count the test examples' noise besides the seeds' (margin_test,
  // compare/studies/study_claims.h). RoPE's drop of 0.9 still shows; YaRN's gain of 0.7 on the same
  // four examples beyond 1x, and RoPE keeping its accuracy within 0.1, do not. The verdicts on
  // realistic counts are known-answer tests in test_study_claims.cpp.
  EXPECT_EQ(verdict(claims, "pk1"), "supported");  // rope drops (learned has nothing beyond 1x)
  EXPECT_EQ(verdict(claims, "pk2"), "inconclusive");
  auto flat = made(
      {{"rope", {{0.95, 0.96}, {0.96, 0.96}, {0.97, 0.97}}}, {"rope+yarn", {{0.95, 0.1}, {0.96, 0.0}, {0.97, 0.2}}}});
  EXPECT_EQ(verdict(train::judge_passkey_claims(flat), "pk1"), "inconclusive");
  EXPECT_EQ(verdict(train::judge_passkey_claims(flat), "pk2"), "contradicted");
  auto unlearned = made({{"rope", {{0.1, 0.0}, {0.0, 0.0}, {0.2, 0.1}}}});
  EXPECT_EQ(verdict(train::judge_passkey_claims(unlearned), "pk1"), "inconclusive");
  const train::ComparisonResult empty = made({});
  EXPECT_EQ(train::passkey_markdown(empty, "/nonexistent"), "");
  EXPECT_TRUE(train::judge_passkey_claims(empty).empty());
}
