// test_length_suite.cpp — randomized positions (position ids on the encodings: the rows and
// angles they select, clearing them restores the deterministic 0..T-1 forward, the encodings and
// uses that refuse them), the comparison's length suite (a tiny run: buckets, randomized rows,
// bit-identical repeats, the JSON round trip, refused settings) and its report and claims on
// results with known answers; randomized positions through the fused attention (T5, ALiBi, KERPLE,
// DeBERTa): ALiBi's bias at drawn positions by hand, reproducible training, evaluation at 0..T-1.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/node.h"
#include "autograd/ops/attention.h"
#include "compare/compare.h"
#include "compare/results.h"
#include "compare/studies/suite/length_suite.h"
#include "compare/studies/suite/length_suite_report.h"
#include "data/length_tasks.h"
#include "nn/gpt.h"
#include "nn/posenc/position_encoding.h"
#include "support/claim_verdict.h"
#include "tensor/errors.h"
#include "train/optim.h"
#include "train/trainer.h"

using namespace posgrad;

namespace {

nn::GPTConfig small(const std::string& kind) {
  nn::GPTConfig c;
  c.vocab_size = 11;
  c.block_size = 24;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 8;
  c.pos.kind = kind;
  return c;
}

std::vector<double> values_of(const Tensor& t) { return t.to(Device::cpu()).to_vector(); }

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = a.size() == b.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

}  // namespace

TEST(RandomizedPositions, TablesAtPositionIdsAreTheRowsOfThosePositions) {
  const std::vector<int64_t> ids = {0, 3, 4, 9, 17};
  const Tensor full = nn::sinusoidal_table(0, 20, 6, DType::Float64);  // (20, 6)
  const Tensor at = nn::sinusoidal_table_at(ids, 6, DType::Float64);   // (5, 6)
  const auto f = values_of(full), a = values_of(at);
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t c = 0; c < 6; ++c) EXPECT_EQ(a[t * 6 + c], f[ids[t] * 6 + c]);
  nn::RopeParams p;
  p.rotary_dim = 4;
  const auto [cf, sf] = nn::rope_tables(p, 0, 20, DType::Float64);
  const auto [ca, sa] = nn::rope_tables_at(p, ids, DType::Float64);
  const auto hcf = values_of(cf), hsf = values_of(sf), hca = values_of(ca), hsa = values_of(sa);
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t k = 0; k < 2; ++k) {
      EXPECT_EQ(hca[t * 2 + k], hcf[ids[t] * 2 + k]);
      EXPECT_EQ(hsa[t * 2 + k], hsf[ids[t] * 2 + k]);
    }
  Generator g(1);
  const Tensor x = Tensor::zeros({1, 5, 6}, DType::Float64);
  const Tensor table = randn({20, 6}, g, DType::Float64);
  const auto sum = values_of(nn::add_learned_positions_at(x, table, ids)), tab = values_of(table);
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t c = 0; c < 6; ++c) EXPECT_EQ(sum[t * 6 + c], tab[ids[t] * 6 + c]);
  EXPECT_THROW(nn::add_learned_positions_at(x, table, {0, 3, 4, 9, 20}), IndexError);
  EXPECT_THROW(nn::add_learned_positions_at(x, table, {0, 1}), ShapeError);
}

TEST(RandomizedPositions, IdsChangeTheForwardAndClearingRestoresItBitForBit) {
  for (const std::string kind : {"sinusoidal", "learned", "rope", "t5", "alibi", "kerple", "deberta"}) {
    Generator g(3), d(4);
    nn::GPT model(small(kind), g, d);
    model.eval();
    NoGradGuard ng;
    const Tensor idx = Tensor::from_ints({1, 2, 3, 4, 5, 6}, {1, 6});
    const auto plain = values_of(model.forward(idx));
    // Ids 0..T-1 are the plain forward.
    model.position_encoding().set_position_ids({0, 1, 2, 3, 4, 5});
    EXPECT_EQ(values_of(model.forward(idx)), plain) << kind;
    // Other ids give other logits (positions reach the model).
    model.position_encoding().set_position_ids({1, 4, 5, 9, 15, 23});
    EXPECT_GT(max_abs_diff(values_of(model.forward(idx)), plain), 1e-6) << kind;
    // Ids for another length: a ShapeError naming both.
    EXPECT_THROW(model.forward(Tensor::from_ints({1, 2, 3}, {1, 3})), ShapeError) << kind;
    // Decoding with a cache refuses while ids are set.
    nn::KVCache cache = model.make_kv_cache(8);
    EXPECT_THROW(model.forward(idx, cache), ValueError) << kind;
    model.position_encoding().clear_position_ids();
    EXPECT_EQ(values_of(model.forward(idx)), plain) << kind;
    // Bad ids.
    EXPECT_THROW(model.position_encoding().set_position_ids({0, 2, 2}), ValueError) << kind;
    EXPECT_THROW(model.position_encoding().set_position_ids({-1, 2}), ValueError) << kind;
  }
  // The learned table ends at block_size: an id past it is refused before any work.
  Generator g(3), d(4);
  nn::GPT learned(small("learned"), g, d);
  learned.position_encoding().set_position_ids({0, 1, 2, 3, 4, 24});
  EXPECT_THROW(learned.forward(Tensor::from_ints({1, 2, 3, 4, 5, 6}, {1, 6})), IndexError);
}

TEST(RandomizedPositions, EncodingsWithoutPositionIdsRefuseThemByName) {
  for (const auto& kind : nn::position_encoding_kinds()) {
    Generator g(3), d(4);
    nn::GPT model(small(kind), g, d);
    // FoX's decay and CoPE's counted positions come from the content: no positions to move.
    const bool takes = kind != "none" && kind != "fox" && kind != "cope";
    EXPECT_EQ(model.position_encoding().supports_position_ids(), takes) << kind;
    EXPECT_EQ(model.position_encoding().position_ids_in_attention(),
              kind == "t5" || kind == "alibi" || kind == "kerple" || kind == "deberta" || kind == "sandwich")
        << kind;
    EXPECT_EQ(train::suite_supports_randomized(kind), takes) << kind;
    if (takes) continue;
    try {
      model.position_encoding().set_position_ids({0, 1});
      ADD_FAILURE() << kind << " took position ids";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(kind), std::string::npos) << e.what();
    }
  }
}

namespace {

train::CompareConfig suite_config() {
  train::CompareConfig c = train::compare_preset("tiny");
  c.methods = {"alibi", "rope"};
  c.of<train::SuiteSettings>().randomized = {"rope"};
  c.of<train::SuiteSettings>().tasks = {"parity_check", "duplicate_string"};
  return c;
}

}  // namespace

TEST(LengthSuite, TinyRunHasEveryBucketAndRowAndRepeatsBitForBit) {
  const train::CompareConfig c = suite_config();
  c.validate();
  const auto rope = train::run_length_suite(c, "rope", 1, Device::cpu());
  ASSERT_EQ(rope.size(), 4u);  // 2 tasks x (plain, randomized)
  for (const auto& r : rope) {
    ASSERT_EQ(r.buckets.size(), 2u);
    EXPECT_EQ(r.buckets[0].lo, 1);
    EXPECT_EQ(r.buckets[0].hi, 3);
    EXPECT_EQ(r.buckets[1].lo, 4);
    EXPECT_EQ(r.buckets[1].hi, 6);
    for (const auto& b : r.buckets) {
      EXPECT_EQ(b.examples, c.of<train::SuiteSettings>().examples);
      EXPECT_TRUE(b.sequence_accuracy >= 0 && b.sequence_accuracy <= b.token_accuracy && b.token_accuracy <= 1);
    }
    EXPECT_TRUE(std::isfinite(r.final_loss));
  }
  EXPECT_FALSE(rope[0].randomized);
  EXPECT_TRUE(rope[1].randomized);
  EXPECT_NE(rope[0].final_loss, rope[1].final_loss);  // the positions changed the training
  const auto again = train::run_length_suite(c, "rope", 1, Device::cpu());
  for (size_t i = 0; i < rope.size(); ++i) {
    EXPECT_EQ(again[i].final_loss, rope[i].final_loss);
    for (size_t k = 0; k < rope[i].buckets.size(); ++k) {
      EXPECT_EQ(again[i].buckets[k].sequence_accuracy, rope[i].buckets[k].sequence_accuracy);
      EXPECT_EQ(again[i].buckets[k].token_accuracy, rope[i].buckets[k].token_accuracy);
    }
  }
  // ALiBi is not in suite_randomized: plain rows only.
  const auto alibi = train::run_length_suite(c, "alibi", 1, Device::cpu());
  ASSERT_EQ(alibi.size(), 2u);
  EXPECT_FALSE(alibi[1].randomized);
  // The JSON round trip is exact.
  const auto back = train::suite_from_json(train::suite_to_json(rope));
  ASSERT_EQ(back.size(), rope.size());
  EXPECT_EQ(train::suite_to_json(back).dump(), train::suite_to_json(rope).dump());
}

TEST(LengthSuite, RefusedSettingsNameTheOption) {
  train::CompareConfig c = suite_config();
  c.methods = {"none", "alibi", "rope"};
  c.of<train::SuiteSettings>().randomized = {"none"};
  try {
    c.validate();
    ADD_FAILURE() << "none+randomized accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--suite-randomized: 'none'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no position information"), std::string::npos) << e.what();
  }
  c.of<train::SuiteSettings>().randomized = {"alibi", "rope"};
  EXPECT_NO_THROW(c.validate());
  // The fused attention's per-token positions exist on the CPU only.
  c.base.device = "cuda";
  try {
    train::validate_length_suite(c);
    ADD_FAILURE() << "alibi+randomized accepted on cuda";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("'alibi' with --device cuda"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("only the CPU"), std::string::npos) << e.what();
  }
  c.of<train::SuiteSettings>().randomized = {"rope"};
  EXPECT_NO_THROW(train::validate_length_suite(c));
  c.base.device = "cpu";
  c.methods = {"alibi", "rope"};
  c.of<train::SuiteSettings>().randomized = {"learned"};  // not among the methods: accepted, and not run
  EXPECT_NO_THROW(c.validate());
  const auto rope = train::run_length_suite(c, "rope", 1, Device::cpu());
  for (const auto& r : rope) EXPECT_FALSE(r.randomized);
}

namespace {

// A result whose suite values are given: acc[row][seed] = (in-distribution, out-of-distribution)
// per-sequence = per-token accuracy, for one task.
train::ComparisonResult made(const std::map<std::string, std::vector<std::pair<double, double>>>& acc) {
  train::ComparisonResult r;
  r.config = train::compare_preset("tiny");
  r.config.methods = {"rope", "alibi"};
  r.config.seeds = {1, 2, 3};
  r.config.of<train::SuiteSettings>().tasks = {"reverse_string"};
  for (const std::string m : {"rope", "alibi"})
    for (uint64_t s = 1; s <= 3; ++s) {
      train::UnitResult u;
      u.method = m;
      u.seed = s;
      for (bool rnd : {false, true}) {
        const std::string row = train::suite_row(m, rnd);
        if (!acc.count(row)) continue;
        train::SuiteTaskResult t;
        t.task = "reverse_string";
        t.randomized = rnd;
        const auto [in, ood] = acc.at(row)[s - 1];
        t.buckets = {{1, 3, 3, in, in}, {4, 6, 3, ood, ood}};
        u.parts.get<train::SuiteResult>().tasks.push_back(t);
      }
      r.units.push_back(u);
    }
  return r;
}

using test::verdict;

}  // namespace

TEST(LengthSuiteReport, TablesSizingSeparationsAndClaimsFromKnownValues) {
  // Both plain rows learn the task and fail beyond it; randomized RoPE keeps most of it.
  auto r = made({{"rope", {{1.0, 0.10}, {0.98, 0.12}, {0.99, 0.11}}},
                 {"rope+randomized", {{1.0, 0.80}, {0.99, 0.82}, {1.0, 0.81}}},
                 {"alibi", {{0.95, 0.30}, {0.96, 0.31}, {0.97, 0.29}}}});
  EXPECT_EQ(train::suite_rows(r), std::vector<std::string>({"rope", "rope+randomized", "alibi"}));
  EXPECT_EQ(train::suite_values(r, "rope+randomized", "reverse_string", 1, true),
            std::vector<double>({0.80, 0.82, 0.81}));
  EXPECT_EQ(train::suite_ood_values(r, "alibi", "reverse_string"), std::vector<double>({0.30, 0.31, 0.29}));
  const std::string md = train::suite_markdown(r, false);
  EXPECT_NE(md.find("## Length generalisation suite"), std::string::npos);
  EXPECT_NE(md.find("| reverse_string | rope+randomized | 1.00"), std::string::npos) << md;
  EXPECT_NE(md.find("reverse_string: best rope+randomized 1.00 — sized"), std::string::npos) << md;
  EXPECT_NE(md.find("3 separated pair(s)"), std::string::npos) << md;  // randomized > alibi > rope
  EXPECT_NE(md.find("rope+randomized > alibi; rope+randomized > rope; alibi > rope"), std::string::npos) << md;
  EXPECT_EQ(md.find("suite_accuracy.png"), std::string::npos);  // no plot drawn: none referenced
  const auto claims = train::judge_suite_claims(r);
  // Three examples per bucket: the claims count the test examples' noise besides the seeds'
  // (margin_test, compare/studies/study_claims.h), and three examples cannot show a drop of 0.10 or a
  // gain of 0.05, however the three seeds agree. The verdicts on realistic counts (36 per bucket) are
  // known-answer tests in test_study_claims.cpp.
  EXPECT_EQ(verdict(claims, "s1"), "inconclusive");
  EXPECT_NE(claims[0].why.find("not significant at 5% for reverse_string alibi"), std::string::npos) << claims[0].why;
  EXPECT_NE(claims[0].measured.find("reverse_string rope drop 0.88 ["), std::string::npos) << claims[0].measured;
  EXPECT_EQ(verdict(claims, "s2"), "inconclusive");
  // A task no row learns is flagged; randomized worse than plain and plain rows that keep their
  // accuracy point against s2 and s1, but not significantly on three examples.
  auto bad = made({{"rope", {{0.90, 0.91}, {0.92, 0.92}, {0.93, 0.90}}},
                   {"rope+randomized", {{0.5, 0.20}, {0.52, 0.21}, {0.51, 0.22}}},
                   {"alibi", {{0.95, 0.95}, {0.96, 0.94}, {0.97, 0.96}}}});
  EXPECT_EQ(verdict(train::judge_suite_claims(bad), "s1"), "inconclusive");
  EXPECT_EQ(verdict(train::judge_suite_claims(bad), "s2"), "inconclusive");
  auto unlearned = made({{"rope", {{0.5, 0.1}, {0.6, 0.1}, {0.55, 0.1}}}});
  EXPECT_NE(train::suite_markdown(unlearned, false).find("**mis-sized"), std::string::npos);
  // Without suite results: no section, no claims.
  train::ComparisonResult empty = made({});
  EXPECT_EQ(train::suite_markdown(empty, true), "");
  EXPECT_TRUE(train::judge_suite_claims(empty).empty());
}

// ---- randomized positions through the fused attention (t5, alibi, kerple, deberta) -------------

// ALiBi at positions {0, 3, 7}: query 2 and key 0 are 7 apart, so their bias is -m_h 7 (Press et
// al. 2022 §3, at the drawn positions). Checked through the attention itself: with q = k = 0 the
// causal row of query 2 is softmax(-7 m, -4 m, 0) over keys 0, 1, 2, read off one-hot values.
TEST(RandomizedPositions, AlibiBiasAtDrawnPositionsByHand) {
  Generator g(3), d(4);
  nn::GPT model(small("alibi"), g, d);
  nn::PositionEncoding& pe = model.position_encoding();
  pe.set_position_ids({0, 3, 7});
  const ScoreModifier m = pe.scores(0, nn::LayerProjections{}, 3, 3, 0);
  ASSERT_EQ(m.query_positions, (std::vector<int64_t>{0, 3, 7}));
  const auto slopes = nn::alibi_slopes(2);
  const auto bias = values_of(m.bias_by_distance);  // (H, 2 * 7 + 1): column r + 7
  ASSERT_EQ(bias.size(), 2u * 15u);
  const Tensor q = Tensor::zeros({1, 2, 3, 3}, DType::Float64);
  std::vector<double> onehot(18, 0.0);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t j = 0; j < 3; ++j) onehot[(h * 3 + j) * 3 + j] = 1.0;
  const Tensor v = Tensor::from_vector(onehot, {1, 2, 3, 3}, DType::Float64);
  ScoreModifier m64 = m;
  m64.bias_by_distance = m.bias_by_distance.to(DType::Float64);
  const auto out = values_of(attention(q, q, v, m64, true, 1.0));
  for (int64_t h = 0; h < 2; ++h) {
    EXPECT_EQ(bias[h * 15 + (0 - 7 + 7)], -slopes[h] * 7.0) << h;  // slopes 2^-4, 2^-8: exact in float32
    const double z = std::exp(-7 * slopes[h]) + std::exp(-4 * slopes[h]) + 1.0;
    EXPECT_NEAR(out[(h * 3 + 2) * 3 + 0], std::exp(-7 * slopes[h]) / z, 1e-14) << h;
    EXPECT_NEAR(out[(h * 3 + 2) * 3 + 1], std::exp(-4 * slopes[h]) / z, 1e-14) << h;
  }
  // A key/value-cache step (queries at an offset) with ids set is refused by the encoding, naming it.
  try {
    (void)pe.scores(0, nn::LayerProjections{}, 1, 3, 2);
    ADD_FAILURE() << "a cache step with ids accepted";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("ALiBi scores"), std::string::npos) << e.what();
  }
}

// After training with ids, clearing them gives the 0..T-1 forward: the logits of a fresh model
// with the same weights, bit for bit. And one training step with ids repeats bit for bit.
TEST(RandomizedPositions, TrainingWithIdsThroughTheAttentionIsReproducibleAndEvaluationUsesZeroToT) {
  const Tensor x = Tensor::from_ints({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 3, 2}, {2, 6});
  const Tensor y = Tensor::from_ints({2, 3, 4, 5, 6, 7, 8, 9, 10, 3, 2, 1}, {2, 6});
  for (const std::string kind : {"t5", "alibi", "kerple", "deberta"}) {
    auto train_once = [&] {
      Generator g(3), d(4);
      auto model = std::make_shared<nn::GPT>(small(kind), g, d);
      train::AdamW opt(train::decay_groups(model->named_parameters(), 0.0), train::AdamWOptions(1e-2));
      const train::LRSchedule sched{1e-2, 1e-3, 1, 4, true};
      double loss = 0;
      for (int64_t it = 0; it < 2; ++it)
        loss = train::training_step(*model, opt, sched, it, 1, 1.0, Device::cpu(), [&] {
                 model->position_encoding().set_position_ids({1, 4, 5, 9, 15, 23});
                 return std::make_pair(x, y);
               }).loss;
      return std::make_pair(model, loss);
    };
    auto [a, loss_a] = train_once();
    auto [b, loss_b] = train_once();
    EXPECT_EQ(loss_a, loss_b) << kind;
    const auto pa = a->named_parameters(), pb = b->named_parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(values_of(pa[i].second), values_of(pb[i].second)) << kind;
    // Evaluation: ids cleared, positions 0..T-1 — the logits of a fresh model with these weights.
    a->position_encoding().clear_position_ids();
    a->eval();
    Generator g(8), d(9);
    nn::GPT fresh(small(kind), g, d);
    fresh.load_state_dict(a->state_dict());
    fresh.eval();
    NoGradGuard ng;
    const auto la = values_of(a->forward(x));
    EXPECT_EQ(la, values_of(fresh.forward(x))) << kind;
    EXPECT_EQ(la, values_of(a->forward(x))) << kind;  // and again: deterministic
  }
}

// The suite trains alibi+randomized rows, repeatably.
TEST(LengthSuite, AlibiRandomizedRowRepeatsBitForBit) {
  train::CompareConfig c = suite_config();
  c.of<train::SuiteSettings>().randomized = {"alibi"};
  c.of<train::SuiteSettings>().tasks = {"parity_check"};
  c.validate();
  const auto r = train::run_length_suite(c, "alibi", 1, Device::cpu());
  ASSERT_EQ(r.size(), 2u);
  EXPECT_FALSE(r[0].randomized);
  EXPECT_TRUE(r[1].randomized);
  EXPECT_NE(r[0].final_loss, r[1].final_loss);  // the positions changed the training
  const auto again = train::run_length_suite(c, "alibi", 1, Device::cpu());
  ASSERT_EQ(again.size(), r.size());
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(again[i].final_loss, r[i].final_loss);
    for (size_t k = 0; k < r[i].buckets.size(); ++k) {
      EXPECT_EQ(again[i].buckets[k].sequence_accuracy, r[i].buckets[k].sequence_accuracy);
      EXPECT_EQ(again[i].buckets[k].token_accuracy, r[i].buckets[k].token_accuracy);
    }
  }
}
