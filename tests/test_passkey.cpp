// test_passkey.cpp — passkey retrieval: the example generator (exact length, needle depth, answer
// tokens and target mask, determinism, both key alphabets, refused inputs), the scorer on hand-made
// logits, the fine-tuning and the grid (bit-identical repeats, n/a beyond a learned table, the
// RoPE rows, the trained model left unchanged), passkey rows mixed into pretraining (the share of
// rows, determinism, the sampler's rows kept, a resume bit for bit) and the scoring of a model
// without fine-tuning, the comparison's options and results.json entries, a tiny comparison that
// pretrains with passkey rows, and the report and claims on results with known values.
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
#include "support/compare_config.h"
#include "support/test_util.h"
#include "tensor/errors.h"
#include "train/options.h"
#include "train/presets.h"
#include "train/trainer.h"

using namespace posgrad;
using posgrad::test::thrown_message;
namespace fs = std::filesystem;

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

// ---- passkey rows in pretraining ----------------------------------------------------------------------

namespace {

// A (B, T) int64 batch with every entry `fill`.
Tensor filled(int64_t rows, int64_t cols, int64_t fill) {
  Tensor t = Tensor::empty({rows, cols}, DType::Int64);
  for (int64_t i = 0; i < rows * cols; ++i) t.data<int64_t>()[i] = fill;
  return t;
}

// The rows of x where any entry differs from `fill`.
std::vector<int64_t> changed_rows(const Tensor& x, int64_t fill) {
  std::vector<int64_t> out;
  for (int64_t r = 0; r < x.size(0); ++r)
    for (int64_t t = 0; t < x.size(1); ++t)
      if (x.data<int64_t>()[r * x.size(1) + t] != fill) {
        out.push_back(r);
        break;
      }
  return out;
}

std::vector<int64_t> row_of(const Tensor& x, int64_t r) {
  const int64_t* p = x.data<int64_t>() + r * x.size(1);
  return std::vector<int64_t>(p, p + x.size(1));
}

}  // namespace

TEST(PasskeyPretrain, MixReplacesItsShareOfRowsWithExamplesDeterministically) {
  const std::string text = letters_text();
  const data::CharTokenizer tok(text);
  const data::TokenSpan span = span_of(tok, text);
  train::PasskeyConfig cfg = tiny_passkey();
  cfg.pretrain_fraction = 0.25;
  const train::BatchMix mix = train::passkey_pretrain_mix(span, tok, cfg, 7);
  ASSERT_TRUE(mix);
  const int64_t B = 12, T = 20;
  auto mixed = [&](const train::BatchMix& m, int64_t step, int64_t micro) {
    Tensor x = filled(B, T, -7), y = filled(B, T, -8);
    m(step, micro, x, y);
    return std::make_pair(x, y);
  };
  const auto [x, y] = mixed(mix, 3, 0);
  const auto rows = changed_rows(x, -7);
  ASSERT_EQ(rows.size(), 3u);  // 0.25 x 12, exactly: a whole number of rows
  EXPECT_EQ(changed_rows(y, -8), rows);
  for (int64_t r : rows) {
    // A passkey example of T + 1 tokens, as next-token data with every target kept: y is x shifted.
    const auto xr = row_of(x, r), yr = row_of(y, r);
    for (int64_t t = 0; t + 1 < T; ++t) EXPECT_EQ(yr[t], xr[t + 1]) << "row " << r << " position " << t;
    std::vector<int64_t> all = xr;
    all.push_back(yr.back());
    const std::string s = tok.decode(all);
    const std::string key = s.substr(s.size() - 2);  // key_length 2, the last tokens
    EXPECT_EQ(s.substr(s.size() - 7, 5), " key ") << s;
    EXPECT_TRUE(contains(s.substr(0, s.size() - 7), " key " + key + ".")) << s;
  }
  // A function of (seed, step, micro) alone: again, from another mix of the same seed, the same rows;
  // another step, micro-batch or seed: other rows or examples.
  const train::BatchMix again = train::passkey_pretrain_mix(span, tok, cfg, 7);
  EXPECT_EQ(mixed(again, 3, 0).first.to_vector(), x.to_vector());
  EXPECT_EQ(mixed(mix, 3, 0).second.to_vector(), y.to_vector());
  EXPECT_NE(mixed(mix, 4, 0).first.to_vector(), x.to_vector());
  EXPECT_NE(mixed(mix, 3, 1).first.to_vector(), x.to_vector());
  EXPECT_NE(mixed(train::passkey_pretrain_mix(span, tok, cfg, 8), 3, 0).first.to_vector(), x.to_vector());
  // A share that is no whole number of rows: 0.3 x 12 = 3.6, so 3 or 4 rows, 3.6 on average.
  cfg.pretrain_fraction = 0.3;
  const train::BatchMix part = train::passkey_pretrain_mix(span, tok, cfg, 7);
  double total = 0;
  const int steps = 400;
  for (int step = 0; step < steps; ++step) {
    const size_t n = changed_rows(mixed(part, step, 0).first, -7).size();
    EXPECT_TRUE(n == 3 || n == 4) << n;
    total += static_cast<double>(n);
  }
  EXPECT_NEAR(total / steps, 3.6, 0.1);  // the mean's standard deviation is 0.024
  // Share 0: no mix at all, so the batches are the sampler's, byte for byte.
  cfg.pretrain_fraction = 0;
  EXPECT_FALSE(train::passkey_pretrain_mix(span, tok, cfg, 7));
  // The template must be writable: refused when the mix is made, not in the middle of training.
  const data::CharTokenizer no_k("abcdef .");  // no 'k' or 'y': " key " cannot be written
  cfg.pretrain_fraction = 0.25;
  EXPECT_THROW(train::passkey_pretrain_mix(span_of(no_k, "abc def."), no_k, cfg, 7), ValueError);
}

TEST(PasskeyData, MarkerTemplateMarksTheKeyWithOneCharacter) {
  const std::string text = letters_text() + "()";
  const data::CharTokenizer tok(text);
  data::PasskeyGenerator g(span_of(tok, text), tok, 3, data::PasskeyTemplate::Marker, 4);
  EXPECT_EQ(g.overhead(), data::passkey_overhead_bytes(data::PasskeyTemplate::Marker, 3));
  EXPECT_EQ(g.overhead(), 2 + 3 + 1 + 2 + 3);  // " (" K ")" ... " (" K
  const data::PasskeyExample e = g.example(40, 0.5);
  const std::string s = tok.decode(e.tokens);
  EXPECT_EQ(s.substr(s.size() - 5), " (" + e.key_text) << s;
  EXPECT_EQ(s.substr(static_cast<size_t>(e.needle_start), 6), " (" + e.key_text + ")") << s;
  EXPECT_EQ(data::parse_passkey_template("marker"), data::PasskeyTemplate::Marker);
}

TEST(PasskeyPretrain, TheSamplersRowsStayAndAResumedRunTrainsOnTheSameBatches) {
  test::TempDir d;
  train::TrainConfig c = train::train_preset("tiny");
  c.corpus = test::write_corpus(d);
  c.threads = 2;
  c.checkpoint_interval = 2;
  c.max_iters = 5;
  const std::string text = read_file(c.corpus);
  const data::CharTokenizer tok(text);
  const data::TokenSpan span = span_of(tok, text);
  train::PasskeyConfig pk = tiny_passkey();
  pk.pretrain_fraction = 0.5;
  // The rows the mix leaves are the sampler's: its draws are the same with or without the mix.
  data::BatchSampler plain(span, 3), with_mix(span, 3);
  auto [x0, y0] = plain.next(c.batch_size, c.model.block_size);
  auto [x1, y1] = with_mix.next(c.batch_size, c.model.block_size);
  const Tensor x_before = x1.clone();
  train::passkey_pretrain_mix(span, tok, pk, 1)(0, 0, x1, y1);
  int64_t kept = 0;
  for (int64_t r = 0; r < c.batch_size; ++r)
    if (row_of(x1, r) == row_of(x_before, r)) {
      ++kept;
      EXPECT_EQ(row_of(y1, r), row_of(y0, r));
    }
  EXPECT_EQ(kept, c.batch_size - c.batch_size / 2);
  // A run stopped after step 3 and resumed from step 2's checkpoint with the same mix ends with the
  // weights of the run that was not stopped; a run without the mix ends elsewhere.
  auto weights = [](train::Trainer& t) {
    std::vector<float> all;
    for (auto& [n, p] : t.model().named_parameters()) {
      const auto v = p.to_float_vector();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  auto trainer = [&](const std::string& dir, bool resume, bool mixed) {
    train::TrainConfig tc = c;
    tc.out_dir = d.str(dir);
    auto t = std::make_unique<train::Trainer>(tc, resume);
    if (mixed) t->set_batch_mix(train::passkey_pretrain_mix(t->dataset().train(), t->tokenizer(), pk, tc.seed));
    return t;
  };
  auto whole = trainer("whole", false, true);
  whole->run();
  trainer("cut", false, true)->run(/*stop_after=*/3);
  auto resumed = trainer("cut", true, true);
  EXPECT_EQ(resumed->current_step(), 2);
  resumed->run();
  EXPECT_EQ(weights(*whole), weights(*resumed));
  auto unmixed = trainer("plain", false, false);
  unmixed->run();
  EXPECT_NE(weights(*whole), weights(*unmixed));
}

TEST(PasskeyPretrain, WithoutFineTuningThePretrainedModelIsScoredAsItIs) {
  const std::string text = letters_text();
  const data::CharTokenizer tok(text);
  const data::TokenSpan span = span_of(tok, text);
  train::PasskeyConfig cfg = tiny_passkey();
  cfg.iters = 0;
  cfg.pretrain_fraction = 0.5;
  Generator g(5), d(6);
  nn::GPT model(small("rope", tok.vocab_size(), 16), g, d);
  model.eval();
  const auto rows = train::run_passkey(model, span, span, tok, cfg, "rope", 1, Device::cpu());
  ASSERT_EQ(rows.size(), 4u);  // rope and its three evaluation-time scalings
  const train::PasskeyGrid direct = train::evaluate_passkey(model, span, tok, cfg, Device::cpu());
  const auto& grid = rows.at("rope").grid;
  ASSERT_EQ(grid.cells.size(), direct.cells.size());
  for (size_t i = 0; i < grid.cells.size(); ++i) EXPECT_EQ(grid.cells[i].accuracy, direct.cells[i].accuracy) << i;
  // Its loss is the key loss of the model itself on fixed held-out examples (not a fine-tuning's).
  const double loss = train::passkey_key_loss(model, span, tok, cfg, Device::cpu());
  EXPECT_EQ(rows.at("rope").final_loss, loss);
  EXPECT_GT(loss, 0);
  cfg.iters = 3;  // fine-tuned after: another model, another loss
  EXPECT_NE(train::run_passkey(model, span, span, tok, cfg, "rope", 1, Device::cpu()).at("rope").final_loss, loss);
}

TEST(PasskeyPretrain, TinyComparisonScoresThePretrainedModelsAndRefusesAnotherShareOnResume) {
  test::TempDir d;
  train::CompareConfig c = test::tiny_compare(d, "mix");
  c.methods = {"alibi", "rope"};
  c.of<train::PasskeyConfig>().iters = 0;
  c.of<train::PasskeyConfig>().pretrain_fraction = 0.5;
  const std::string report = read_file(train::run_compare(c));
  EXPECT_TRUE(contains(report, "## Passkey retrieval")) << report;
  EXPECT_TRUE(contains(report, "pretrained with 50% of its batches' rows passkey examples")) << report;
  EXPECT_TRUE(contains(report, "the whole row's next-token loss), not fine-tuned after, then scored")) << report;
  EXPECT_TRUE(contains(report, "| `--passkey-pretrain-fraction` | 0.5 |")) << report;
  const std::string csv = read_file(d.str("mix/passkey.csv"));
  for (const char* row : {"\nalibi,1,mean,2,", "\nrope,1,mean,2,", "\nrope+yarn,2,mean,2,"})
    EXPECT_TRUE(contains(csv, row)) << row << "\n" << csv;
  // The heat map of every row is written (drawn where gnuplot runs).
  for (const char* row : {"alibi", "rope", "rope+yarn"})
    EXPECT_TRUE(fs::exists(d.str(std::string("mix/plots/passkey_") + row + ".gp"))) << row;
  // The mix changed what the models were trained on: the same run without it reads other perplexities.
  train::CompareConfig plain = c;
  plain.of<train::PasskeyConfig>().pretrain_fraction = 0;
  plain.of<train::PasskeyConfig>().iters = 0;
  plain.out_dir = d.str("plain");
  train::run_compare(plain);
  auto ppl = [&](const std::string& dir) {
    const std::string r = read_file(d.str(dir + "/results.csv"));
    const size_t at = r.find("\nrope,val_perplexity,");
    return r.substr(at, r.find('\n', at + 1) - at);
  };
  EXPECT_NE(ppl("mix"), ppl("plain"));
  EXPECT_FALSE(fs::exists(d.str("plain/passkey.csv")) && contains(read_file(d.str("plain/passkey.csv")), "\nrope,"));
  // Another share is another experiment: refused on resume, naming the option and both values.
  c.of<train::PasskeyConfig>().pretrain_fraction = 0.25;
  const std::string m = thrown_message<UsageError>([&] { train::run_compare(c); });
  EXPECT_TRUE(contains(m, "--passkey-pretrain-fraction 0.5 there, 0.25 now")) << m;
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
  // The pretraining share: in [0, 1), and its rows must hold the template at the training length.
  EXPECT_TRUE(contains(refused([](train::CompareConfig& c) { c.of<train::PasskeyConfig>().pretrain_fraction = 1; }),
                       "passkey-pretrain-fraction"));
  EXPECT_TRUE(contains(thrown_message<UsageError>([] {
                         train::CompareConfig c = train::compare_preset("tiny");
                         opt::from_json(train::compare_options(), c, {{"passkey_pretrain_fraction", -0.1}}, "c.json");
                       }),
                       "passkey_pretrain_fraction"));
  const std::string too_short = refused([](train::CompareConfig& c) {
    c.of<train::PasskeyConfig>().iters = 0;
    c.of<train::PasskeyConfig>().pretrain_fraction = 0.25;
    c.of<train::PasskeyConfig>().key_length = 5;
  });
  EXPECT_TRUE(contains(too_short, "--passkey-pretrain-fraction rows' length is --block-size 16")) << too_short;
  // Every preset's passkey settings are valid (the full one uses the standard template at 128 tokens).
  for (const std::string preset : {"quick", "medium", "full", "tiny"})
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

TEST(PasskeyOptions, MethodsAndDerivedChooseTheUnitsAndModelsThatRunTheTest) {
  // A kind covers its variants; "all" every method.
  train::PasskeyConfig k;
  EXPECT_TRUE(train::passkey_selects(k, "alibi"));
  k.methods = {"rope"};
  EXPECT_TRUE(train::passkey_selects(k, "rope"));
  EXPECT_TRUE(train::passkey_selects(k, "rope[rope_fraction=0.5]"));
  EXPECT_FALSE(train::passkey_selects(k, "alibi"));
  EXPECT_FALSE(train::passkey_selects(k, "xpos"));
  // Refused lists, each naming the option.
  auto refused = [](std::vector<std::string> methods) {
    train::CompareConfig c = train::compare_preset("tiny");
    c.methods = {"alibi", "rope"};
    c.of<train::PasskeyConfig>().methods = std::move(methods);
    return thrown_message<UsageError>([&] { c.validate(); });
  };
  EXPECT_TRUE(contains(refused({"all", "rope"}), "--passkey-methods: 'all' selects every method")) << refused({"all"});
  EXPECT_TRUE(contains(refused({"rope", "rope"}), "--passkey-methods lists an encoding twice"));
  const std::string none = refused({"learned"});
  EXPECT_TRUE(contains(none, "--passkey-methods learned selects none of --methods alibi, rope")) << none;
  EXPECT_TRUE(contains(thrown_message<UsageError>([] {
                         train::CompareConfig c = train::compare_preset("tiny");
                         opt::from_json(train::compare_options(), c, {{"passkey_methods", {"ropes"}}}, "c.json");
                       }),
                       "passkey_methods"));

  // A tiny comparison: alibi has no passkey rows, rope its own and its scalings' but none of the
  // position-interpolation study's fine-tuned models.
  test::TempDir d;
  train::CompareConfig c = test::tiny_compare(d, "only");
  c.methods = {"alibi", "rope"};
  c.of<train::PasskeyConfig>().methods = {"rope"};
  c.of<train::PasskeyConfig>().derived = false;
  const std::string report = read_file(train::run_compare(c));
  EXPECT_TRUE(contains(report, "the test runs for rope only (--passkey-methods)")) << report;
  const std::string csv = read_file(d.str("only/passkey.csv"));
  EXPECT_TRUE(contains(csv, "\nrope,1,mean,2,")) << csv;
  EXPECT_TRUE(contains(csv, "\nrope+yarn,2,mean,2,")) << csv;
  EXPECT_FALSE(contains(csv, "\nalibi,")) << csv;
  EXPECT_FALSE(contains(csv, " ft")) << csv;
  // With the derived models (the option's default) the same experiment adds their rows.
  train::CompareConfig all = c;
  all.of<train::PasskeyConfig>().derived = true;
  all.out_dir = d.str("derived");
  train::run_compare(all);
  EXPECT_TRUE(contains(read_file(d.str("derived/passkey.csv")), "\nrope+linear ft2x,1,mean,2,"));
  // Another selection is another experiment: refused on resume, naming the option.
  c.of<train::PasskeyConfig>().methods = {"all"};
  const std::string m = thrown_message<UsageError>([&] { train::run_compare(c); });
  EXPECT_TRUE(contains(m, "--passkey-methods")) << m;

  // The pretraining mix goes only into the selected methods' batches: alibi trains as without it.
  auto ppl = [&](const std::string& dir, const std::string& method) {
    const std::string r = read_file(d.str(dir + "/results.csv"));
    const size_t at = r.find("\n" + method + ",val_perplexity,");
    return r.substr(at, r.find('\n', at + 1) - at);
  };
  train::CompareConfig mix = test::tiny_compare(d, "mix");
  mix.methods = {"alibi", "rope"};
  mix.of<train::PasskeyConfig>().iters = 0;
  mix.of<train::PasskeyConfig>().pretrain_fraction = 0.5;
  mix.of<train::PasskeyConfig>().methods = {"rope"};
  train::run_compare(mix);
  train::CompareConfig plain = mix;
  plain.of<train::PasskeyConfig>().pretrain_fraction = 0;
  plain.out_dir = d.str("plain");
  train::run_compare(plain);
  EXPECT_EQ(ppl("mix", "alibi"), ppl("plain", "alibi"));
  EXPECT_NE(ppl("mix", "rope"), ppl("plain", "rope"));
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
