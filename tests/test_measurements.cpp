// test_measurements.cpp — the model-level measurements of how position reaches a GPT: attention
// weight by distance over its uniform share (attention_weight_over_uniform,
// GPT::attention_over_uniform_by_distance), attention entropy by query position
// (attention_row_entropy, GPT::attention_entropy_by_position) and gradient flow by distance
// (GPT::last_position_gradients, GPT::gradient_by_distance).
// Pinned: hand-computed weights and entropies, exchangeable keys read 1 in expectation, one-hot
// attention reads 0, uniform attention reads exactly 1 on both
// (causal, bidirectional, with sinks), the position-blind value of the gradient profile, central
// finite differences in double for every registered encoding, parameter gradients left alone, and
// the refusals. Every registered encoding (and each with sinks) runs both measurements.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/ops/attention.h"
#include "nn/gpt.h"
#include "support/test_util.h"

using namespace posgrad;

namespace {

const double kLn2 = std::log(2.0), kLn3 = std::log(3.0), kLn6 = std::log(6.0);

nn::GPTConfig tiny_config(const std::string& kind, bool sinks = false, bool causal = true, int64_t n_layer = 2) {
  nn::GPTConfig c;
  c.attention_sinks = sinks;
  c.vocab_size = 11;
  c.block_size = 8;
  c.n_layer = n_layer;
  c.n_head = 2;
  c.n_embd = 8;
  c.pos.kind = kind;
  c.pos.causal = causal;
  c.pos.set("t5_num_buckets", int64_t{8});
  c.pos.set("t5_max_distance", int64_t{12});
  c.pos.set("deberta_position_buckets", int64_t{4});
  c.pos.set("deberta_max_relative_positions", int64_t{8});
  return c;
}

// Converts every parameter and buffer of the model to float64 in place (the handles stay; the GPT
// itself builds float32 layers). With cfg.pos.dtype = Float64 the whole forward is then in double.
void to_float64(nn::Module& m) {
  auto convert = [](const Tensor& t) {
    Tensor d = t.detach().to(DType::Float64).contiguous();
    TensorImpl& impl = t.impl();
    impl.storage = d.impl().storage;
    impl.strides = d.strides();
    impl.offset = 0;
    impl.dtype = DType::Float64;
    impl.grad.reset();
  };
  for (auto& [n, t] : m.named_parameters()) convert(t);
  for (auto& [n, t] : m.named_buffers()) convert(t);
}

// A tiny float64 GPT in eval mode.
std::unique_ptr<nn::GPT> double_gpt(nn::GPTConfig c, uint64_t seed = 1) {
  c.pos.dtype = DType::Float64;
  Generator g(seed), d(seed + 1);
  auto model = std::make_unique<nn::GPT>(c, g, d);
  to_float64(*model);
  model->eval();
  return model;
}

// Zero query and key projections (weights and biases) in every block: all scores are equal for an
// encoding that adds no score bias (q = 0, so q.k = 0 and a rotation of 0 is 0).
void zero_query_key(nn::GPT& model) {
  const int64_t C = model.config().n_embd;
  for (size_t l = 0; l < model.blocks->size(); ++l) {
    const nn::CausalSelfAttention& a = *(*model.blocks)[l].attn;
    Tensor w = a.qkv->weight.narrow(0, 0, 2 * C);
    nn::assign_data(w, Tensor::zeros(w.shape(), w.dtype()));
    if (a.qkv->bias.defined()) {
      Tensor b = a.qkv->bias.narrow(0, 0, 2 * C);
      nn::assign_data(b, Tensor::zeros(b.shape(), b.dtype()));
    }
  }
}

Tensor random_ids(int64_t B, int64_t T, uint64_t seed, int64_t V = 11) {
  Generator g(seed);
  std::vector<int64_t> v;
  for (int64_t i = 0; i < B * T; ++i) v.push_back(static_cast<int64_t>(g.next_u64() % static_cast<uint64_t>(V)));
  return Tensor::from_ints(v, {B, T});
}

Tensor q_from(const std::vector<double>& v, const Shape& s) { return Tensor::from_vector(v, s, DType::Float64); }

// ---- attention_row_entropy (the op) ------------------------------------------------------------

// B = H = D = 1, T = 3, q = 1, k = (0, ln 2, ln 3), scale 1: row i's scores are (0, ln 2, ln 3)[0..i],
// so row 1 attends (1/3, 2/3) and row 2 (1/6, 2/6, 3/6).
TEST(AttentionRowEntropy, HandComputedRows) {
  const Tensor q = q_from({1, 1, 1}, {1, 1, 3, 1}), k = q_from({0, kLn2, kLn3}, {1, 1, 3, 1});
  const double h1 = kLn3 - 2.0 / 3.0 * kLn2;                     // -(1/3 ln 1/3 + 2/3 ln 2/3)
  const double h2 = kLn6 - 2.0 / 6.0 * kLn2 - 3.0 / 6.0 * kLn3;  // -sum p ln p for (1, 2, 3)/6
  const auto causal = attention_row_entropy(q, k, ScoreModifier{}, true, 1.0).to_vector();
  ASSERT_EQ(causal.size(), 3u);
  EXPECT_NEAR(causal[0], 0.0, 1e-15);
  EXPECT_NEAR(causal[1], h1, 1e-14);
  EXPECT_NEAR(causal[2], h2, 1e-14);
  const auto both = attention_row_entropy(q, k, ScoreModifier{}, false, 1.0).to_vector();
  for (double e : both) EXPECT_NEAR(e, h2, 1e-14);  // every row sees all three keys
}

// One key 1e4 above the others: exp(-1e4) is 0 in double, so every row is one-hot, entropy 0.
TEST(AttentionRowEntropy, OneHotRowsReadZero) {
  const int64_t T = 6;
  std::vector<double> kv(T, 0.0);
  kv[0] = 100.0;
  const Tensor q = q_from(std::vector<double>(T, 100.0), {1, 1, T, 1}), k = q_from(kv, {1, 1, T, 1});
  for (bool causal : {true, false})
    for (double e : attention_row_entropy(q, k, ScoreModifier{}, causal, 1.0).to_vector()) EXPECT_EQ(e, 0.0);
}

// Random float32 q, k with a distance bias and sinks, B = 3: against scores written out by loops.
// The sinks are ignored (the entropy is over the real keys), and the rows are averaged over b.
TEST(AttentionRowEntropy, MatchesNaiveScoresWithDistanceBiasAndSinks) {
  const int64_t B = 3, H = 2, T = 7, D = 5;
  Generator g(3);
  const Tensor q = randn({B, H, T, D}, g), k = randn({B, H, T, D}, g);
  ScoreModifier m;
  m.kind = ScoreBias::Distance;
  m.bias_by_distance = randn({H, 2 * T - 1}, g);
  m.sinks = Tensor::from_vector(std::vector<double>{3.0, -1.0}, {H});
  const double scale = 0.4;
  const auto qv = q.to_vector(), kv = k.to_vector(), bv = m.bias_by_distance.to_vector();
  for (bool causal : {true, false}) {
    const auto got = attention_row_entropy(q, k, m, causal, scale).to_vector();
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        double want = 0;
        for (int64_t b = 0; b < B; ++b) {
          const int64_t n = causal ? i + 1 : T;
          std::vector<double> s(n);
          for (int64_t j = 0; j < n; ++j) {
            double dot = 0;
            for (int64_t c = 0; c < D; ++c)
              dot += qv[((b * H + h) * T + i) * D + c] * kv[((b * H + h) * T + j) * D + c];
            s[j] = scale * dot + bv[h * (2 * T - 1) + j - i + T - 1];
          }
          double z = 0;
          for (double x : s) z += std::exp(x);
          for (double x : s) want -= std::exp(x) / z * std::log(std::exp(x) / z) / static_cast<double>(B);
        }
        EXPECT_NEAR(got[h * T + i], want, 1e-12) << "h " << h << " i " << i << (causal ? " causal" : " bidirectional");
      }
  }
}

TEST(AttentionRowEntropy, Refusals) {
  Generator g(4);
  const Tensor q = randn({1, 1, 3, 2}, g), k = randn({1, 1, 4, 2}, g);
  EXPECT_THROW(attention_row_entropy(q, k, ScoreModifier{}, true, 1.0), ShapeError);
  ScoreModifier m;
  m.query_positions = {0, 2, 5};
  m.key_positions = {0, 2, 5};
  EXPECT_THROW(attention_row_entropy(q, q, m, true, 1.0), ValueError);
}

// ---- attention_weight_over_uniform (the op) ----------------------------------------------------

// B = H = D = 1, T = 3, q = 1, k = (0, ln 2, ln 3), scale 1. Causal: row 1's only other key is 0
// (share 1, times 1 key); row 2's others are keys 0, 1 with scores (0, ln 2), so (1/3, 2/3) times 2
// keys: 2/3 at distance 2 and 4/3 at distance 1. a(1) = mean(1, 4/3) = 7/6, a(2) = 2/3.
// Bidirectional: row 0 sees keys 1, 2 (2/5, 3/5), row 1 keys 0, 2 (1/4, 3/4), row 2 keys 0, 1 (1/3,
// 2/3), each times 2: a(1) = mean(4/5, 1/2, 3/2, 4/3) = 31/30, a(2) = mean(6/5, 2/3) = 14/15.
TEST(AttentionWeightOverUniform, HandComputedRows) {
  const Tensor q = q_from({1, 1, 1}, {1, 1, 3, 1}), k = q_from({0, kLn2, kLn3}, {1, 1, 3, 1});
  const Tensor causal = attention_weight_over_uniform(q, k, ScoreModifier{}, true, 1.0);
  ASSERT_EQ(causal.shape(), (Shape{1, 2}));
  EXPECT_NEAR(causal.to_vector()[0], 7.0 / 6.0, 1e-15);
  EXPECT_NEAR(causal.to_vector()[1], 2.0 / 3.0, 1e-15);
  const auto both = attention_weight_over_uniform(q, k, ScoreModifier{}, false, 1.0).to_vector();
  EXPECT_NEAR(both[0], 31.0 / 30.0, 1e-15);
  EXPECT_NEAR(both[1], 14.0 / 15.0, 1e-15);
}

// Equal scores (q = 0, no bias) are uniform attention, position-blind by construction: exactly 1 at
// every distance, causal and bidirectional, with and without sinks (they are ignored), in float32
// too (the scores are rebuilt in float64). T = 1 has no distance, T = 2 one.
TEST(AttentionWeightOverUniform, UniformAttentionReadsExactlyOne) {
  Generator g(5);
  for (DType dt : {DType::Float64, DType::Float32})
    for (bool causal : {true, false})
      for (bool sinks : {false, true}) {
        const int64_t B = 3, H = 2, T = 9, D = 4;
        const Tensor q = Tensor::zeros({B, H, T, D}, dt), k = randn({B, H, T, D}, g, dt);
        ScoreModifier m;
        if (sinks) m.sinks = Tensor::from_vector(std::vector<double>{2.0, -3.0}, {H}, dt);
        const Tensor a = attention_weight_over_uniform(q, k, m, causal, 0.5);
        ASSERT_EQ(a.shape(), (Shape{H, T - 1}));
        for (double v : a.to_vector())
          EXPECT_EQ(v, 1.0) << (causal ? "causal" : "bidirectional") << (sinks ? "+sinks" : "");
      }
  EXPECT_EQ(
      attention_weight_over_uniform(Tensor::zeros({1, 2, 1, 3}), randn({1, 2, 1, 3}, g), ScoreModifier{}, true, 1.0)
          .shape(),
      (Shape{2, 0}));
  for (double v :
       attention_weight_over_uniform(Tensor::zeros({2, 1, 2, 3}), randn({2, 1, 2, 3}, g), ScoreModifier{}, true, 1.0)
           .to_vector())
    EXPECT_EQ(v, 1.0);
}

// Position-blind but not uniform: scores q_i . k_j with q_i = k_i (every query prefers its own
// content, as a model without positions can) and i.i.d. N(0, 1) keys. The keys other than the
// query's own are exchangeable, so each gets its uniform share in expectation: every a(d) is 1 up to
// sampling noise (4000 windows; the standard error is below 0.02), though P_ii is far above 1/(i + 1).
TEST(AttentionWeightOverUniform, ExchangeableKeysReadOneInExpectation) {
  const int64_t B = 4000, T = 8, D = 2;
  Generator g(11);
  const Tensor k = randn({B, 1, T, D}, g, DType::Float64);
  for (bool causal : {true, false}) {
    const auto a = attention_weight_over_uniform(k, k, ScoreModifier{}, causal, 1.0).to_vector();
    ASSERT_EQ(a.size(), static_cast<size_t>(T - 1));
    for (int64_t d = 1; d < T; ++d) EXPECT_NEAR(a[d - 1], 1.0, 0.08) << "distance " << d << (causal ? " causal" : "");
  }
  // ... while the share of the query's own key is not uniform: the measure leaves it out for that reason.
  const Tensor p = softmax(matmul(k, k.transpose(-1, -2)), -1);  // bidirectional rows, T keys each
  double self = 0;
  const auto pv = p.to_vector();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i) self += pv[(b * T + i) * T + i] / static_cast<double>(B * T);
  EXPECT_GT(self, 2.0 / T) << "q_i = k_i must favour the query's own key";
}

// A distance bias -0.5 |r| (ALiBi-like) on equal content scores decays: above 1 at distance 1, below
// it at the longest; +0.5 |r| grows the other way. The op matches scores written out by loops.
TEST(AttentionWeightOverUniform, DistanceBiasDecaysOrGrowsAndMatchesLoops) {
  const int64_t B = 2, H = 2, T = 7, D = 3;
  Generator g(3);
  const Tensor q = randn({B, H, T, D}, g, DType::Float64), k = randn({B, H, T, D}, g, DType::Float64);
  for (double slope : {-0.5, 0.5}) {
    ScoreModifier m;
    m.kind = ScoreBias::Distance;
    std::vector<double> bias;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t dd = 0; dd < 2 * T - 1; ++dd) bias.push_back(slope * std::fabs(static_cast<double>(dd - (T - 1))));
    m.bias_by_distance = Tensor::from_vector(bias, {H, 2 * T - 1}, DType::Float64);
    const auto flat =
        attention_weight_over_uniform(Tensor::zeros({B, H, T, D}, DType::Float64), k, m, true, 1.0).to_vector();
    for (int64_t h = 0; h < H; ++h) {
      if (slope < 0) {
        EXPECT_GT(flat[h * (T - 1)], 1.0);
        EXPECT_LT(flat[h * (T - 1) + T - 2], 1.0);
      } else {
        EXPECT_LT(flat[h * (T - 1)], 1.0);
        EXPECT_GT(flat[h * (T - 1) + T - 2], 1.0);
      }
    }
    const auto qv = q.to_vector(), kv = k.to_vector();
    for (bool causal : {true, false}) {
      const auto got = attention_weight_over_uniform(q, k, m, causal, 0.7).to_vector();
      for (int64_t h = 0; h < H; ++h) {
        std::vector<double> sum(T, 0.0), count(T, 0.0);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < T; ++i) {
            std::vector<int64_t> keys;
            for (int64_t j = 0; j < (causal ? i + 1 : T); ++j)
              if (j != i) keys.push_back(j);
            if (keys.empty()) continue;
            std::vector<double> e;
            double z = 0;
            for (int64_t j : keys) {
              double dot = 0;
              for (int64_t c = 0; c < D; ++c)
                dot += qv[((b * H + h) * T + i) * D + c] * kv[((b * H + h) * T + j) * D + c];
              e.push_back(std::exp(0.7 * dot + bias[h * (2 * T - 1) + j - i + T - 1]));
              z += e.back();
            }
            for (size_t x = 0; x < keys.size(); ++x) {
              sum[std::abs(i - keys[x])] += static_cast<double>(keys.size()) * e[x] / z;
              count[std::abs(i - keys[x])] += 1;
            }
          }
        for (int64_t d = 1; d < T; ++d)
          EXPECT_NEAR(got[h * (T - 1) + d - 1], sum[d] / count[d], 1e-12)
              << "h " << h << " d " << d << " slope " << slope;
      }
    }
  }
}

TEST(AttentionWeightOverUniform, Refusals) {
  Generator g(4);
  const Tensor q = randn({1, 1, 3, 2}, g), k = randn({1, 1, 4, 2}, g);
  EXPECT_NE(test::thrown_message<ShapeError>([&] {
              attention_weight_over_uniform(q, k, ScoreModifier{}, true, 1.0);
            }).find("attention_weight_over_uniform: q and k must be the same"),
            std::string::npos);
  ScoreModifier m;
  m.query_positions = {0, 2, 5};
  m.key_positions = {0, 2, 5};
  EXPECT_NE(test::thrown_message<ValueError>([&] {
              attention_weight_over_uniform(q, q, m, true, 1.0);
            }).find("per-token positions"),
            std::string::npos);
}

// ---- GPT::attention_over_uniform_by_distance ---------------------------------------------------

// Uniform attention in every layer (zero query/key projections, no score bias) reads 1 at every
// distance, causal or bidirectional, with sinks too.
TEST(AttentionOverUniformByDistance, UniformAttentionReadsOne) {
  for (const std::string kind : {"none", "sinusoidal", "learned", "rope", "xpos"})
    for (bool causal : {true, false})
      for (bool sinks : {false, true}) {
        if (!causal && nn::position_encoding_entry(kind).causal_only) continue;
        Generator g(1), d(2);
        nn::GPT model(tiny_config(kind, sinks, causal), g, d);
        model.eval();
        zero_query_key(model);
        const auto a = model.attention_over_uniform_by_distance(random_ids(3, 8, 5));
        ASSERT_EQ(a.size(), 2u);
        for (const auto& row : a) {
          ASSERT_EQ(row.size(), 7u);
          for (double v : row)
            EXPECT_NEAR(v, 1.0, 1e-12) << kind << (causal ? "" : " bidirectional") << (sinks ? "+sinks" : "");
        }
      }
}

// Every registered encoding at initialisation: finite weights in [0, T - 1], and each row's keys
// other than its own share n_i between them, so sum_d a(d) (T - d) = sum_i n_i = T (T - 1) / 2
// causal (B cancels), and with both sides 2 sum_d a(d) (T - d) = T (T - 1) bidirectionally.
TEST(AttentionOverUniformByDistance, EveryEncodingSharesEachRowsKeys) {
  const int64_t T = 8;
  for (bool causal : {true, false})
    for (const std::string& kind : causal ? nn::position_encoding_kinds() : nn::bidirectional_position_encoding_kinds())
      for (bool sinks : {false, true}) {
        Generator g(7), d(8);
        nn::GPT model(tiny_config(kind, sinks, causal), g, d);
        model.eval();
        for (const auto& row : model.attention_over_uniform_by_distance(random_ids(2, T, 9))) {
          ASSERT_EQ(row.size(), static_cast<size_t>(T - 1)) << kind;
          double total = 0;
          for (int64_t dist = 1; dist < T; ++dist) {
            const double v = row[dist - 1];
            EXPECT_TRUE(std::isfinite(v)) << kind;
            EXPECT_GE(v, 0.0) << kind;
            EXPECT_LE(v, T - 1.0) << kind;
            total += v * static_cast<double>(T - dist) * (causal ? 1.0 : 2.0);
          }
          EXPECT_NEAR(total, causal ? T * (T - 1) / 2.0 : T * (T - 1.0), 1e-9) << kind << (sinks ? "+sinks" : "");
        }
      }
}

// Layer l's row is the mean over heads of the op on that layer's own heads.
TEST(AttentionOverUniformByDistance, IsTheOpMeanOverHeads) {
  auto model = double_gpt(tiny_config("t5", true));
  const Tensor idx = random_ids(2, 8, 10);
  const auto a = model->attention_over_uniform_by_distance(idx);
  NoGradGuard no_grad;
  Tensor x = model->position_encoding().embed(model->wte->forward(idx), 0);
  for (size_t l = 0; l < 2; ++l) {
    const nn::Block& b = (*model->blocks)[l];
    const auto per_head =
        b.attn->attention_over_uniform(b.ln_1->forward(x), model->position_encoding(), l, 0).to_vector();
    ASSERT_EQ(per_head.size(), 14u);
    for (int64_t d = 0; d < 7; ++d) EXPECT_NEAR(a[l][d], (per_head[d] + per_head[7 + d]) / 2.0, 1e-14);
    x = b.forward(x, model->position_encoding(), l, 0);
  }
}

TEST(AttentionOverUniformByDistance, Refusals) {
  nn::GPTConfig c = tiny_config("learned");
  c.dropout = 0.1;
  Generator g(1), d(2);
  nn::GPT model(c, g, d);  // training mode with dropout
  EXPECT_THROW(model.attention_over_uniform_by_distance(random_ids(1, 4, 1)), ValueError);
  model.eval();
  EXPECT_EQ(model.attention_over_uniform_by_distance(random_ids(1, 1, 1)).front().size(), 0u);  // T = 1: no distance
  EXPECT_THROW(model.attention_over_uniform_by_distance(random_ids(1, 9, 1)), IndexError);      // learned table of 8
  EXPECT_THROW(model.attention_over_uniform_by_distance(Tensor::zeros({4})), ShapeError);
  model.position_encoding().set_position_ids({0, 2, 3, 5});
  EXPECT_THROW(model.attention_over_uniform_by_distance(random_ids(1, 4, 1)), ValueError);
}

// ---- attention_first_key_share and GPT::first_token_share_by_layer ------------------------------

// B = H = D = 1, T = 3, q = 1, k = (ln 2, 0, 0), scale 1: key 0 has weight 2 against 1 for the others.
// Causal: row 1 sees (2, 1): p_10 = 2/3, times 2 keys = 4/3; row 2 sees (2, 1, 1): 2/4 x 3 = 3/2; mean
// 17/12. Bidirectional: rows 1 and 2 see all three keys: 3/2 each, mean 3/2. Row 0 is left out.
TEST(AttentionFirstKeyShare, HandComputedRows) {
  const Tensor q = q_from({1, 1, 1}, {1, 1, 3, 1}), k = q_from({kLn2, 0, 0}, {1, 1, 3, 1});
  const Tensor c = attention_first_key_share(q, k, ScoreModifier{}, true, 1.0);
  ASSERT_EQ(c.shape(), (Shape{1}));
  EXPECT_NEAR(c.to_vector()[0], 17.0 / 12.0, 1e-15);
  EXPECT_NEAR(attention_first_key_share(q, k, ScoreModifier{}, false, 1.0).to_vector()[0], 1.5, 1e-15);
  // A key 0 the queries avoid: k0 = -ln 2 gives it weight 1/2 against 1: causal rows 2 (1/3) = 2/3 and
  // 3 (1/5) = 3/5, mean 19/30, below 1.
  const Tensor avoid = q_from({-kLn2, 0, 0}, {1, 1, 3, 1});
  EXPECT_NEAR(attention_first_key_share(q, avoid, ScoreModifier{}, true, 1.0).to_vector()[0], 19.0 / 30.0, 1e-15);
}

// Uniform attention (equal scores) is position-blind: exactly 1, causal and bidirectional, float32
// and float64, and sinks do not change it (they take the same share from every real key). T = 1 has
// no row to read: NaN.
TEST(AttentionFirstKeyShare, UniformAttentionReadsExactlyOneAndSinksAreIgnored) {
  Generator g(6);
  for (DType dt : {DType::Float64, DType::Float32})
    for (bool causal : {true, false})
      for (bool sinks : {false, true}) {
        const int64_t B = 3, H = 2, T = 9, D = 4;
        const Tensor q = Tensor::zeros({B, H, T, D}, dt), k = randn({B, H, T, D}, g, dt);
        ScoreModifier m;
        if (sinks) m.sinks = Tensor::from_vector(std::vector<double>{2.0, -3.0}, {H}, dt);
        const Tensor a = attention_first_key_share(q, k, m, causal, 0.5);
        ASSERT_EQ(a.shape(), (Shape{H}));
        for (double v : a.to_vector())
          EXPECT_EQ(v, 1.0) << (causal ? "causal" : "bidirectional") << (sinks ? "+sinks" : "");
      }
  for (double v :
       attention_first_key_share(Tensor::zeros({1, 2, 1, 3}), randn({1, 2, 1, 3}, g), ScoreModifier{}, true, 1.0)
           .to_vector())
    EXPECT_TRUE(std::isnan(v));
  // Random scores with sinks: the same as without (the sinks are ignored).
  const Tensor q = randn({2, 2, 6, 3}, g, DType::Float64), k = randn({2, 2, 6, 3}, g, DType::Float64);
  ScoreModifier m;
  m.sinks = Tensor::from_vector(std::vector<double>{1.0, -1.0}, {2}, DType::Float64);
  EXPECT_EQ(attention_first_key_share(q, k, m, true, 0.7).to_vector(),
            attention_first_key_share(q, k, ScoreModifier{}, true, 0.7).to_vector());
  EXPECT_THROW(attention_first_key_share(q, randn({2, 2, 5, 3}, g, DType::Float64), ScoreModifier{}, true, 1.0),
               ShapeError);
  ScoreModifier pos;
  pos.query_positions = {0, 2, 3, 5, 6, 8};
  pos.key_positions = pos.query_positions;
  EXPECT_THROW(attention_first_key_share(q, k, pos, true, 1.0), ValueError);
}

// The model-level measure: exactly 1 per layer under uniform attention for the encodings without a
// score bias, with and without sinks; the mean over heads of the op on each layer's heads otherwise.
TEST(FirstTokenShareByLayer, UniformAttentionReadsOneAndIsTheOpMeanOverHeads) {
  for (const std::string kind : {"none", "sinusoidal", "learned", "rope", "xpos"})
    for (bool sinks : {false, true}) {
      Generator g(1), d(2);
      nn::GPT model(tiny_config(kind, sinks), g, d);
      model.eval();
      zero_query_key(model);
      const auto f = model.first_token_share_by_layer(random_ids(3, 8, 5));
      ASSERT_EQ(f.size(), 2u);
      for (double v : f) EXPECT_NEAR(v, 1.0, 1e-12) << kind << (sinks ? "+sinks" : "");
    }
  auto model = double_gpt(tiny_config("alibi", true));
  const Tensor idx = random_ids(2, 8, 10);
  const auto f = model->first_token_share_by_layer(idx);
  NoGradGuard no_grad;
  Tensor x = model->position_encoding().embed(model->wte->forward(idx), 0);
  for (size_t l = 0; l < 2; ++l) {
    const nn::Block& b = (*model->blocks)[l];
    const auto per_head = b.attn->first_key_share(b.ln_1->forward(x), model->position_encoding(), l, 0).to_vector();
    ASSERT_EQ(per_head.size(), 2u);
    EXPECT_NEAR(f[l], (per_head[0] + per_head[1]) / 2.0, 1e-14);
    EXPECT_GT(std::fabs(per_head[0] - 1.0), 1e-6) << "ALiBi's bias favours near keys: the first is not at its share";
    x = b.forward(x, model->position_encoding(), l, 0);
  }
  nn::GPTConfig c = tiny_config("learned");
  c.dropout = 0.1;
  Generator g(1), d(2);
  nn::GPT train_mode(c, g, d);
  EXPECT_THROW(train_mode.first_token_share_by_layer(random_ids(1, 4, 1)), ValueError);
}

// ---- GPT::attention_entropy_by_position --------------------------------------------------------

// Encodings that add no score bias: with zero query/key projections every score is 0.
const std::vector<std::string> kNoScoreBias = {"none", "sinusoidal", "learned", "rope", "xpos"};

TEST(AttentionEntropyByPosition, UniformAttentionReadsOneCausal) {
  for (const std::string& kind : kNoScoreBias)
    for (bool sinks : {false, true}) {
      Generator g(1), d(2);
      nn::GPT model(tiny_config(kind, sinks), g, d);  // float32: the entropy is computed in float64
      model.eval();
      zero_query_key(model);
      if (sinks)
        for (size_t l = 0; l < model.blocks->size(); ++l)
          nn::assign_data((*model.blocks)[l].attn->sinks, Tensor::from_vector(std::vector<double>{2.0, -3.0}, {2}));
      const auto e = model.attention_entropy_by_position(random_ids(3, 8, 5));
      ASSERT_EQ(e.size(), 2u);
      for (const auto& row : e) {
        ASSERT_EQ(row.size(), 8u);
        EXPECT_TRUE(std::isnan(row[0])) << kind << ": query 0 sees one key";
        for (size_t i = 1; i < row.size(); ++i)
          EXPECT_NEAR(row[i], 1.0, 1e-12) << kind << (sinks ? "+sinks" : "") << " i " << i;
      }
    }
}

TEST(AttentionEntropyByPosition, UniformAttentionReadsOneBidirectional) {
  for (const std::string kind : {"none", "sinusoidal", "learned", "rope"}) {
    Generator g(1), d(2);
    nn::GPT model(tiny_config(kind, false, false), g, d);
    model.eval();
    zero_query_key(model);
    const auto e = model.attention_entropy_by_position(random_ids(2, 6, 6));
    for (const auto& row : e)
      for (double v : row) EXPECT_NEAR(v, 1.0, 1e-12) << kind;                  // every query sees T = 6 keys, log 6
    const auto one = model.attention_entropy_by_position(random_ids(2, 1, 6));  // T = 1: one key each
    for (const auto& row : one) EXPECT_TRUE(std::isnan(row[0]));
  }
}

// Every registered encoding, with and without sinks, at initialisation: n_layer rows of T, NaN at
// query 0, every other entry in [0, 1] (an entropy over n keys is at most log n).
TEST(AttentionEntropyByPosition, EveryEncodingGivesBoundedProfiles) {
  for (const std::string& kind : nn::position_encoding_kinds())
    for (bool sinks : {false, true}) {
      Generator g(7), d(8);
      nn::GPT model(tiny_config(kind, sinks), g, d);
      model.eval();
      const auto e = model.attention_entropy_by_position(random_ids(2, 8, 9));
      ASSERT_EQ(e.size(), 2u) << kind;
      for (const auto& row : e) {
        ASSERT_EQ(row.size(), 8u) << kind;
        EXPECT_TRUE(std::isnan(row[0])) << kind;
        for (size_t i = 1; i < row.size(); ++i) {
          EXPECT_GE(row[i], 0.0) << kind << " i " << i;
          EXPECT_LE(row[i], 1.0 + 1e-12) << kind << " i " << i;
        }
      }
    }
  for (const std::string& kind : nn::bidirectional_position_encoding_kinds()) {
    Generator g(7), d(8);
    nn::GPT model(tiny_config(kind, false, false), g, d);
    model.eval();
    for (const auto& row : model.attention_entropy_by_position(random_ids(2, 8, 9)))
      for (double v : row) {
        EXPECT_GE(v, 0.0) << kind;
        EXPECT_LE(v, 1.0 + 1e-12) << kind;
      }
  }
}

// Layer l's row equals the op on that layer's own heads (the model adds only the normalisation).
TEST(AttentionEntropyByPosition, IsTheOpOverLogN) {
  auto model = double_gpt(tiny_config("alibi", true));
  const Tensor idx = random_ids(2, 8, 10);
  const auto e = model->attention_entropy_by_position(idx);
  NoGradGuard no_grad;
  Tensor x = model->position_encoding().embed(model->wte->forward(idx), 0);
  for (size_t l = 0; l < 2; ++l) {
    const nn::Block& b = (*model->blocks)[l];
    const auto per_head = b.attn->attention_entropy(b.ln_1->forward(x), model->position_encoding(), l, 0).to_vector();
    for (int64_t i = 1; i < 8; ++i)
      EXPECT_NEAR(e[l][i], (per_head[i] + per_head[8 + i]) / 2.0 / std::log(i + 1.0), 1e-14);
    x = b.forward(x, model->position_encoding(), l, 0);
  }
}

TEST(AttentionEntropyByPosition, Refusals) {
  nn::GPTConfig c = tiny_config("learned");
  c.dropout = 0.1;
  Generator g(1), d(2);
  nn::GPT model(c, g, d);  // training mode with dropout
  EXPECT_THROW(model.attention_entropy_by_position(random_ids(1, 4, 1)), ValueError);
  model.eval();
  EXPECT_NO_THROW(model.attention_entropy_by_position(random_ids(1, 4, 1)));
  EXPECT_THROW(model.attention_entropy_by_position(random_ids(1, 9, 1)), IndexError);  // learned table of 8
  EXPECT_THROW(model.attention_entropy_by_position(Tensor::zeros({4})), ShapeError);
  model.position_encoding().set_position_ids({0, 2, 3, 5});
  EXPECT_THROW(model.attention_entropy_by_position(random_ids(1, 4, 1)), ValueError);
}

// ---- GPT::last_position_gradients / gradient_by_distance ---------------------------------------

// sum_b of the last position's loss, with the residual stream x_l given (blocks l.. are run).
double last_loss_from(const nn::GPT& m, Tensor x, size_t from, const Tensor& y) {
  NoGradGuard no_grad;
  const int64_t B = x.size(0), T = x.size(1), V = m.config().vocab_size;
  for (size_t l = from; l < m.blocks->size(); ++l) x = (*m.blocks)[l].forward(x, m.position_encoding(), l, 0);
  const Tensor logits = linear(m.ln_f->forward(x.narrow(1, T - 1, 1)), m.wte->weight).reshape({B, V});
  return sum(cross_entropy_rows(logits, y.narrow(1, T - 1, 1).contiguous().reshape({B}))).item();
}

// Central differences in double (eps 1e-6) of the last-position loss with respect to x_l at every
// position of window 1 and a few channels, for every registered encoding (and each with sinks).
TEST(GradientByDistance, FiniteDifferencesEveryEncoding) {
  const int64_t B = 2, T = 6, C = 8;
  const Tensor idx = random_ids(B, T, 11), y = random_ids(B, T, 12);
  for (const std::string& kind : nn::position_encoding_kinds())
    for (bool sinks : {false, true}) {
      auto model = double_gpt(tiny_config(kind, sinks), 3);
      const std::vector<Tensor> grads = model->last_position_gradients(idx, y);
      ASSERT_EQ(grads.size(), 2u);
      // The residual stream entering each block, as the model computes it.
      std::vector<Tensor> xs;
      {
        NoGradGuard no_grad;
        Tensor x = model->position_encoding().embed(model->wte->forward(idx), 0);
        for (size_t l = 0; l < 2; ++l) {
          xs.push_back(x.contiguous());
          x = (*model->blocks)[l].forward(x, model->position_encoding(), l, 0);
        }
      }
      for (size_t l = 0; l < 2; ++l) {
        ASSERT_EQ(grads[l].shape(), Shape({B, T, C}));
        ASSERT_EQ(grads[l].dtype(), DType::Float64);
        const auto gv = grads[l].to_vector();
        const auto base = xs[l].to_vector();
        for (int64_t j = 0; j < T; ++j)
          for (int64_t c : {int64_t{0}, int64_t{3}, int64_t{7}}) {
            const int64_t at = (1 * T + j) * C + c;  // window b = 1
            const double eps = 1e-6;
            std::vector<double> plus = base, minus = base;
            plus[at] += eps;
            minus[at] -= eps;
            const double fd = (last_loss_from(*model, Tensor::from_vector(plus, {B, T, C}, DType::Float64), l, y) -
                               last_loss_from(*model, Tensor::from_vector(minus, {B, T, C}, DType::Float64), l, y)) /
                              (2 * eps);
            EXPECT_NEAR(gv[at], fd, 1e-7 + 1e-5 * std::abs(fd))
                << kind << (sinks ? "+sinks" : "") << " layer " << l << " position " << j << " channel " << c;
          }
      }
      // gradient_by_distance is the per-position norm, by distance from the last position.
      const auto prof = model->gradient_by_distance(idx, y);
      for (size_t l = 0; l < 2; ++l) {
        const auto gv = grads[l].to_vector();
        for (int64_t d = 0; d < T; ++d) {
          double want = 0;
          for (int64_t b = 0; b < B; ++b) {
            double ss = 0;
            for (int64_t c = 0; c < C; ++c) ss += gv[(b * T + T - 1 - d) * C + c] * gv[(b * T + T - 1 - d) * C + c];
            want += std::sqrt(ss) / B;
          }
          EXPECT_NEAR(prof[l][d], want, 1e-15) << kind;
        }
      }
    }
}

// Every registered encoding, float32, causal and bidirectional: (n_layer, T) finite positive norms
// (the last query sees every key, so every distance 0..T-1 carries gradient).
TEST(GradientByDistance, EveryEncodingGivesFinitePositiveProfiles) {
  const Tensor idx = random_ids(3, 8, 13), y = random_ids(3, 8, 14);
  auto check = [&](const nn::GPTConfig& c) {
    Generator g(5), d(6);
    nn::GPT model(c, g, d);
    model.eval();
    const auto p = model.gradient_by_distance(idx, y);
    ASSERT_EQ(p.size(), 2u) << c.pos.kind;
    for (const auto& row : p) {
      ASSERT_EQ(row.size(), 8u) << c.pos.kind;
      for (double v : row) {
        EXPECT_TRUE(std::isfinite(v)) << c.pos.kind;
        EXPECT_GT(v, 0.0) << c.pos.kind;
      }
    }
  };
  for (const std::string& kind : nn::position_encoding_kinds())
    for (bool sinks : {false, true}) check(tiny_config(kind, sinks));
  for (const std::string& kind : nn::bidirectional_position_encoding_kinds()) check(tiny_config(kind, false, false));
}

// Windows do not interact: window b's profile in a batch is its profile alone, and the batch's
// profile is the mean of the windows'.
TEST(GradientByDistance, WindowsAreIndependentAndAveraged) {
  auto model = double_gpt(tiny_config("rope"), 4);
  const Tensor idx = random_ids(3, 7, 15), y = random_ids(3, 7, 16);
  const auto batch = model->last_position_gradients(idx, y);
  const auto prof = model->gradient_by_distance(idx, y);
  std::vector<std::vector<double>> mean(2, std::vector<double>(7, 0.0));
  for (int64_t b = 0; b < 3; ++b) {
    const Tensor xb = idx.narrow(0, b, 1).contiguous(), yb = y.narrow(0, b, 1).contiguous();
    const auto alone = model->last_position_gradients(xb, yb);
    const auto alone_prof = model->gradient_by_distance(xb, yb);
    for (size_t l = 0; l < 2; ++l) {
      const auto a = alone[l].to_vector(), w = batch[l].narrow(0, b, 1).contiguous().to_vector();
      for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], w[i], 1e-14);
      for (int64_t d = 0; d < 7; ++d) mean[l][d] += alone_prof[l][d] / 3.0;
    }
  }
  for (size_t l = 0; l < 2; ++l)
    for (int64_t d = 0; d < 7; ++d) EXPECT_NEAR(prof[l][d], mean[l][d], 1e-14);
}

// Position-blind and uniform (NoPE, zero query/key projections) on windows of one repeated token:
// every position carries the same state x at every layer, and query i averages its i + 1 values
// with weight 1/(i + 1). In the last block the loss reaches an earlier position j < T - 1 only
// through the last query's average, so g_{L-1}[j] = (1/T) J^T u with one vector u (J the value
// path's Jacobian at x, u the gradient at the last query's attention output): the same at every
// d >= 1, and T times it independent of T (the last position's state, hence u, does not depend on
// T). At d = 0 the residual path adds u itself. Earlier blocks reach j through the queries i in
// [j, T - 2] as well, so their profile is not flat (not pinned).
TEST(GradientByDistance, PositionBlindUniformAttentionIsFlatBeyondDistanceZero) {
  auto model = double_gpt(tiny_config("none", false, true, 3), 6);
  zero_query_key(*model);
  std::vector<double> scaled;  // T * profile[L-1][1], per T
  for (int64_t T : {4, 8}) {
    const Tensor idx = Tensor::from_ints(std::vector<int64_t>(2 * T, 5), {2, T});
    const Tensor y = Tensor::from_ints(std::vector<int64_t>(2 * T, 3), {2, T});
    const auto last = model->gradient_by_distance(idx, y)[2];
    for (int64_t d = 2; d < T; ++d) EXPECT_NEAR(last[d], last[1], 1e-14 * last[1]) << "T " << T << " d " << d;
    EXPECT_GT(std::abs(last[0] - last[1]), 1e-3 * last[1]) << "the residual path at d = 0";
    scaled.push_back(static_cast<double>(T) * last[1]);
  }
  EXPECT_NEAR(scaled[0], scaled[1], 1e-12 * scaled[0]);
}

// The same with sinks, in one block: the sink takes P_sink = e^s / (e^s + i + 1) of query i's row,
// which depends on i, so after one block the positions differ; the block's own input is still the
// same at every position, and its profile flat beyond d = 0 (weights (1 - P_sink)/T each).
TEST(GradientByDistance, PositionBlindUniformAttentionWithSinksIsFlatInOneBlock) {
  auto model = double_gpt(tiny_config("none", true, true, 1), 6);
  zero_query_key(*model);
  nn::assign_data((*model->blocks)[0].attn->sinks, Tensor::from_vector({1.5, -0.5}, {2}, DType::Float64));
  const Tensor idx = Tensor::from_ints(std::vector<int64_t>(16, 5), {2, 8});
  const Tensor y = Tensor::from_ints(std::vector<int64_t>(16, 3), {2, 8});
  const auto p = model->gradient_by_distance(idx, y)[0];
  for (int64_t d = 2; d < 8; ++d) EXPECT_NEAR(p[d], p[1], 1e-14 * p[1]) << "d " << d;
}

// The parameters' gradients are neither read nor written, their requires_grad flags come back, and
// the call works inside NoGradGuard and in training mode without dropout.
TEST(GradientByDistance, LeavesParameterGradientsAlone) {
  Generator g(1), d(2);
  nn::GPT model(tiny_config("t5"), g, d);  // training mode, dropout 0
  const Tensor idx = random_ids(2, 8, 17), y = random_ids(2, 8, 18);
  sum(cross_entropy(model.forward(idx), y)).backward();  // some gradients to keep
  auto params = model.named_parameters();
  std::vector<std::vector<double>> before;
  for (const auto& [n, p] : params) before.push_back(p.grad().defined() ? p.grad().to_vector() : std::vector<double>{});
  params.front().second.zero_grad();  // one parameter without a gradient must stay without
  before.front().clear();
  Tensor off = params.back().second;
  off.set_requires_grad(false);  // one frozen by the caller must stay frozen
  {
    NoGradGuard no_grad;
    EXPECT_NO_THROW(model.gradient_by_distance(idx, y));
    EXPECT_FALSE(GradMode::is_enabled()) << "grad mode comes back off";
  }
  EXPECT_TRUE(GradMode::is_enabled());
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i].second;
    EXPECT_EQ(p.requires_grad(), i + 1 != params.size()) << params[i].first;
    if (before[i].empty())
      EXPECT_FALSE(p.grad().defined()) << params[i].first;
    else
      EXPECT_EQ(p.grad().to_vector(), before[i]) << params[i].first;
  }
}

TEST(GradientByDistance, Refusals) {
  nn::GPTConfig c = tiny_config("learned");
  c.dropout = 0.1;
  Generator g(1), d(2);
  nn::GPT model(c, g, d);
  const Tensor idx = random_ids(2, 4, 1), y = random_ids(2, 4, 2);
  EXPECT_THROW(model.gradient_by_distance(idx, y), ValueError);  // training mode with dropout
  model.eval();
  EXPECT_NO_THROW(model.gradient_by_distance(idx, y));
  EXPECT_THROW(model.gradient_by_distance(idx, random_ids(2, 3, 2)), ShapeError);
  EXPECT_THROW(model.gradient_by_distance(Tensor::from_ints({}, {2, 0}), Tensor::from_ints({}, {2, 0})), ShapeError);
  EXPECT_THROW(model.gradient_by_distance(idx, Tensor::from_ints({1, 2, 3, -100, 1, 2, 3, 4}, {2, 4})), IndexError);
  EXPECT_THROW(model.gradient_by_distance(idx, Tensor::from_ints({1, 2, 3, 4, 1, 2, 3, 11}, {2, 4})), IndexError);
  EXPECT_THROW(model.gradient_by_distance(random_ids(1, 9, 1), random_ids(1, 9, 2)), IndexError);  // table of 8
  model.position_encoding().set_position_ids({0, 2, 3, 5});
  EXPECT_THROW(model.gradient_by_distance(idx, y), ValueError);
}

// CPU and CUDA give the same profiles (the entropy is computed on the host in float64 from device
// q and k; the gradients with the device's kernels).
TEST(MeasurementsCuda, MatchTheCpu) {
  POSGRAD_REQUIRE_CUDA();
  for (const std::string& kind : nn::position_encoding_kinds()) {
    Generator g(1), d(2);
    nn::GPT model(tiny_config(kind, true), g, d);
    model.eval();
    const Tensor idx = random_ids(2, 8, 3), y = random_ids(2, 8, 4);
    const auto e_cpu = model.attention_entropy_by_position(idx);
    const auto g_cpu = model.gradient_by_distance(idx, y);
    model.to(Device::cuda());
    const auto e_gpu = model.attention_entropy_by_position(idx.to(Device::cuda()));
    const auto g_gpu = model.gradient_by_distance(idx.to(Device::cuda()), y.to(Device::cuda()));
    for (size_t l = 0; l < e_cpu.size(); ++l)
      for (size_t i = 1; i < e_cpu[l].size(); ++i) {
        EXPECT_NEAR(e_gpu[l][i], e_cpu[l][i], 1e-4) << kind;
        EXPECT_NEAR(g_gpu[l][i], g_cpu[l][i], 1e-4 * (1 + g_cpu[l][i])) << kind;
      }
  }
}

}  // namespace
