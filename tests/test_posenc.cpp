// test_posenc.cpp — the position encodings against shared/SPEC-positions.md §7: T5 buckets (the
// test-vector table and the complete range tables, both modes), DeBERTa log buckets and table rows,
// ALiBi slopes, RoPE frequencies and every scaling, the rotated-vector examples of both layouts,
// the inverse rotation, the relative property <R(m)q, R(n)k> = f(m - n), the sinusoidal table;
// the registry (every kind, unknown kind), learned positions past the table, configuration
// errors; and finite-difference gradients of every encoding's parameters inside two attention
// layers (T5's shared table, DeBERTa's shared E_rel / LayerNorm / projections, learned table).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>

#include "autograd/ops.h"
#include "nn/attention.h"
#include "nn/posenc/position_encoding.h"

using namespace posgrad;
using namespace posgrad::nn;

namespace {

// ---- T5 (spec §7.1) ---------------------------------------------------------------------------

TEST(T5Buckets, SpecTestVectors) {
  // r, bidirectional, causal
  const int64_t v[][3] = {{-200, 15, 31}, {-129, 15, 31}, {-128, 15, 31}, {-100, 15, 30}, {-33, 12, 21}, {-16, 10, 16},
                          {-15, 9, 15},   {-8, 8, 8},     {-1, 1, 1},     {0, 0, 0},      {1, 17, 0},    {8, 24, 0},
                          {15, 25, 0},    {16, 26, 0},    {33, 28, 0},    {100, 31, 0},   {128, 31, 0},  {200, 31, 0},
                          {-64, 14, 26},  {-32, 12, 21},  {32, 28, 0},    {64, 30, 0}};
  for (const auto& row : v) {
    EXPECT_EQ(t5_relative_bucket(row[0], true), row[1]) << "bidirectional r=" << row[0];
    EXPECT_EQ(t5_relative_bucket(row[0], false), row[2]) << "causal r=" << row[0];
  }
}

// The complete magnitude -> bucket ranges of spec §7.1 (inclusive; last bucket open-ended).
void check_ranges(bool bidirectional, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  for (size_t b = 0; b < ranges.size(); ++b) {
    const auto [lo, hi] = ranges[b];
    for (int64_t n = lo; n <= hi; ++n) {
      // bidirectional: n = |r| with r <= 0 (lower half) and r > 0 (upper half, +16)
      if (bidirectional) {
        EXPECT_EQ(t5_relative_bucket(-n, true), int64_t(b)) << "r=" << -n;
        if (n > 0) {
          EXPECT_EQ(t5_relative_bucket(n, true), int64_t(b) + 16) << "r=" << n;
        }
      } else {
        EXPECT_EQ(t5_relative_bucket(-n, false), int64_t(b)) << "r=" << -n;  // n = max(i - j, 0)
      }
    }
  }
}

TEST(T5Buckets, FullRangeTables) {
  // clang-format off
  check_ranges(true, {{0, 0},   {1, 1},   {2, 2},   {3, 3},   {4, 4},   {5, 5},   {6, 6},   {7, 7},
                      {8, 11},  {12, 15}, {16, 22}, {23, 31}, {32, 45}, {46, 63}, {64, 90}, {91, 5000}});
  std::vector<std::pair<int64_t, int64_t>> causal;
  for (int64_t n = 0; n < 16; ++n) causal.push_back({n, n});
  for (auto r : std::vector<std::pair<int64_t, int64_t>>{{16, 18}, {19, 20}, {21, 23}, {24, 26}, {27, 30}, {31, 34},
                                                         {35, 39}, {40, 45}, {46, 51}, {52, 58}, {59, 66}, {67, 76},
                                                         {77, 86}, {87, 98}, {99, 112}, {113, 5000}})
    causal.push_back(r);
  // clang-format on
  check_ranges(false, causal);
  for (int64_t r = 1; r <= 300; ++r) EXPECT_EQ(t5_relative_bucket(r, false), 0) << "future key r=" << r;
}

TEST(T5Buckets, ConfigurableAndValidated) {
  // 8 buckets, max distance 20, bidirectional: nb = 4, max_exact = 2, log range 2..20 over 2 buckets.
  EXPECT_EQ(t5_relative_bucket(-1, true, 8, 20), 1);
  EXPECT_EQ(t5_relative_bucket(1, true, 8, 20), 5);
  EXPECT_EQ(t5_relative_bucket(-1000, true, 8, 20), 3);
  EXPECT_EQ(t5_relative_bucket(1000, true, 8, 20), 7);
  EXPECT_THROW(t5_relative_bucket(5, true, 2, 128), ValueError);
  EXPECT_THROW(t5_relative_bucket(5, false, 32, 16), ValueError);
}

// ---- DeBERTa (spec §7.2) ------------------------------------------------------------------------

TEST(DebertaBuckets, SpecTestVectors) {
  // rel = i - j, HF bucket, row = clamp(bucket + 256, 0, 511)
  const int64_t v[][3] = {{-600, -270, 0},   {-300, -207, 49}, {-257, -192, 64}, {-256, -192, 64}, {-129, -129, 127},
                          {-128, -128, 128}, {-64, -64, 192},  {-1, -1, 255},    {0, 0, 256},      {1, 1, 257},
                          {64, 64, 320},     {128, 128, 384},  {129, 129, 385},  {256, 192, 448},  {257, 192, 448},
                          {300, 207, 463},   {600, 270, 511},  {-512, -256, 0},  {-511, -255, 1},  {511, 255, 511},
                          {512, 256, 511}};
  for (const auto& row : v) {
    EXPECT_EQ(deberta_log_bucket(row[0], 256, 512), row[1]) << "rel=" << row[0];
    EXPECT_EQ(deberta_row(row[0], 256, 512), row[2]) << "rel=" << row[0];
  }
  // Monotone and symmetric over the whole L = 512 range; exact inside [-128, 128].
  for (int64_t r = -511; r <= 511; ++r) {
    EXPECT_EQ(deberta_log_bucket(-r, 256, 512), -deberta_log_bucket(r, 256, 512));
    if (r > -511) {
      EXPECT_GE(deberta_log_bucket(r, 256, 512), deberta_log_bucket(r - 1, 256, 512));
    }
    if (std::abs(r) <= 128) {
      EXPECT_EQ(deberta_log_bucket(r, 256, 512), r);
    }
  }
}

TEST(DebertaBuckets, NoBucketingAndSpan) {
  EXPECT_EQ(deberta_log_bucket(700, 0, 512), 700);
  EXPECT_EQ(deberta_span(0, 64), 64);
  EXPECT_EQ(deberta_span(32, 128), 32);
  EXPECT_EQ(deberta_row(-100, 0, 64), 0);  // delta <= -S -> row 0
  EXPECT_EQ(deberta_row(63, 0, 64), 127);  // delta >= S - 1 -> last row
  EXPECT_EQ(deberta_row(5, 0, 64), 69);
}

// ---- ALiBi (spec §7.3) --------------------------------------------------------------------------

TEST(Alibi, SlopesSpecTestVectors) {
  const std::map<int64_t, std::vector<double>> expect = {
      {4, {0.25, 0.0625, 0.015625, 0.00390625}},
      {8, {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625}},
      {12,
       {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625, 0.7071067812, 0.3535533906, 0.1767766953,
        0.08838834765}}};
  for (const auto& [n, s] : expect) {
    auto m = alibi_slopes(n);
    ASSERT_EQ(m.size(), s.size());
    for (size_t i = 0; i < s.size(); ++i) EXPECT_NEAR(m[i], s[i], 1e-10) << "n=" << n << " head " << i;
  }
  EXPECT_EQ(alibi_slopes(1), std::vector<double>{std::exp2(-8.0)});
  EXPECT_EQ(alibi_slopes(3).size(), 3u);
  EXPECT_THROW(alibi_slopes(0), ValueError);
}

// ---- RoPE (spec §7.4) ---------------------------------------------------------------------------

RopeParams rope8(const std::string& scaling = "none", double factor = 1.0, int64_t L0 = 0) {
  RopeParams p;
  p.rotary_dim = 8;
  p.scaling = scaling;
  p.factor = factor;
  p.original_length = L0;
  return p;
}

void expect_freqs(const RopeFrequencies& f, const std::vector<double>& w, double tol, const std::string& what) {
  ASSERT_EQ(f.inv_freq.size(), w.size()) << what;
  for (size_t k = 0; k < w.size(); ++k) EXPECT_NEAR(f.inv_freq[k], w[k], tol * w[k]) << what << " k=" << k;
}

// KERPLE (log variant, docs/positions.md): the bias by distance against -r1 log(1 + r2 |r|) in double,
// the relative positions of a query window with an offset, and the projection of r1, r2 onto
// [0.01, inf) before use.
TEST(Kerple, BiasByDistanceFormula) {
  const Tensor r1 = Tensor::from_vector({1.0, 0.5}, {2}, DType::Float64);
  const Tensor r2 = Tensor::from_vector({2.0, 0.25}, {2}, DType::Float64);
  const Tensor b = kerple_bias_by_distance(r1, r2, 2, 4, 1);  // Tq 2, Tk 4, queries at positions 1, 2
  ASSERT_EQ(b.shape(), (Shape{2, 5}));
  const auto v = b.to_vector();
  const double rel[5] = {-2, -1, 0, 1, 2};  // d - (Tq - 1) - q_offset
  for (int h = 0; h < 2; ++h)
    for (int d = 0; d < 5; ++d) {
      const double want = -(h ? 0.5 : 1.0) * std::log(1.0 + (h ? 0.25 : 2.0) * std::fabs(rel[d]));
      EXPECT_EQ(v[h * 5 + d], want) << "h " << h << " d " << d;
    }
  EXPECT_EQ(v[2], 0.0);  // no penalty at distance 0
  EXPECT_NEAR(v[0], -std::log(5.0), 1e-15);
  EXPECT_THROW(kerple_bias_by_distance(r1, Tensor::zeros({3}, DType::Float64), 2, 2), ShapeError);
}

TEST(Kerple, ParametersInitAndProjection) {
  PosEncConfig c;
  c.kind = "kerple";
  c.n_head = 4;
  c.n_layer = 2;
  Generator g(3);
  auto pe = make_position_encoding(c, g);
  const auto params = pe->named_parameters();
  ASSERT_EQ(params.size(), 4u);  // r1_0, r2_0, r1_1, r2_1
  EXPECT_EQ(params[0].first, "r1_0");
  EXPECT_EQ(params[1].first, "r2_0");
  for (const auto& [name, p] : params) {
    EXPECT_EQ(p.shape(), (Shape{4})) << name;  // one-dimensional: outside weight decay
    for (double x : p.to_vector()) {
      EXPECT_GE(x, 0.0) << name;
      EXPECT_LT(x, name[1] == '1' ? 2.0 : 1.0) << name;  // U(0, 2) and U(0, 1)
    }
  }
  assign_data(params[0].second, Tensor::from_vector(std::vector<double>{-1.0, 0.005, 0.5, 3.0}, {4}, DType::Float32));
  const ScoreModifier m = pe->scores(0, {}, 5, 5, 0);
  EXPECT_EQ(m.kind, ScoreBias::Distance);
  EXPECT_EQ(m.bias_by_distance.shape(), (Shape{4, 9}));
  const auto r1 = params[0].second.to_vector();
  EXPECT_EQ(r1, (std::vector<double>{0.01f, 0.01f, 0.5, 3.0}));  // below 0.01: projected; others untouched
  EXPECT_THROW(pe->scores(2, {}, 5, 5, 0), IndexError);
}

TEST(Rope, FrequenciesAndScalings) {
  expect_freqs(rope_frequencies(rope8(), 10), {1, 0.1, 0.01, 0.001}, 1e-15, "default");
  // float32 bits of the default frequencies (spec table): the cast of the double value.
  const uint32_t bits[] = {0x3f800000, 0x3dcccccd, 0x3c23d70a, 0x3a83126f};
  auto f = rope_frequencies(rope8(), 10);
  for (int k = 0; k < 4; ++k) {
    const float x = static_cast<float>(f.inv_freq[k]);
    uint32_t b;
    std::memcpy(&b, &x, 4);
    EXPECT_EQ(b, bits[k]) << "k=" << k;
  }
  expect_freqs(rope_frequencies(rope8("linear", 4), 10), {0.25, 0.025, 0.0025, 0.00025}, 1e-14, "linear");
  expect_freqs(rope_frequencies(rope8("dynamic", 2, 2048), 4096), {1, 0.06933612744, 0.004807498568, 0.0003333333333},
               1e-9, "dynamic 4096");
  expect_freqs(rope_frequencies(rope8("dynamic", 2, 2048), 1000), {1, 0.1, 0.01, 0.001}, 1e-15, "dynamic 1000");
  expect_freqs(rope_frequencies(rope8("dynamic", 2, 2048), 2048), {1, 0.1, 0.01, 0.001}, 1e-15, "dynamic 2048");
  auto y = rope_frequencies(rope8("yarn", 4, 2048), 10);
  expect_freqs(y, {1, 0.1, 0.00625, 0.00025}, 1e-12, "yarn");
  EXPECT_NEAR(y.attention_factor, 1.138629436, 1e-9);
  expect_freqs(rope_frequencies(rope8("llama3", 8, 8192), 10), {1, 0.1, 0.01, 0.000213607544}, 1e-8, "llama3");
}

// Static NTK-aware scaling (YaRN §3.1): b' = b s^(dr/(dr-2)). dr = 8, b = 1e4, s = 4:
// b'^(1/4) = 10 * 4^(1/3), so omega_k = (10 * 4^(1/3))^-k and the lowest frequency is 1e-3 / 4.
TEST(Rope, NtkScaling) {
  const double r = 10.0 * std::cbrt(4.0);
  const auto f = rope_frequencies(rope8("ntk", 4), 10);
  expect_freqs(f, {1, 1 / r, 1 / (r * r), 0.00025}, 1e-15, "ntk s=4");
  EXPECT_EQ(f.attention_factor, 1.0);
  // The same frequencies at every length (static, unlike dynamic NTK), and s = 1 is plain RoPE.
  EXPECT_EQ(rope_frequencies(rope8("ntk", 4), 100000).inv_freq, f.inv_freq);
  EXPECT_EQ(rope_frequencies(rope8("ntk", 1), 10).inv_freq, rope_frequencies(rope8(), 10).inv_freq);
  // Bad factors: non-positive in the parameters (ValueError), below 1 as an option (UsageError naming it).
  for (double bad : {0.0, -2.0}) {
    try {
      (void)rope_frequencies(rope8("ntk", bad), 10);
      ADD_FAILURE() << "factor " << bad << " accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("scaling factor must be positive"), std::string::npos) << e.what();
    }
  }
  RopeParams two = rope8("ntk", 4);
  two.rotary_dim = 2;  // dr / (dr - 2) undefined
  EXPECT_THROW((void)rope_frequencies(two, 10), ValueError);
  PosEncConfig c;
  c.kind = "rope";
  c.set("rope_scaling", std::string("ntk"));
  try {
    c.set("rope_scaling_factor", 0.5);
    ADD_FAILURE() << "factor 0.5 accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--rope-scaling-factor"), std::string::npos) << e.what();
  }
  // Through the module: an ntk model at s = 1 rotates exactly as plain RoPE.
  c.n_embd = 16;
  c.n_head = 2;
  Generator g(0), gx(3);
  auto ntk1 = make_position_encoding(c, g);
  PosEncConfig plain = c;
  plain.set("rope_scaling", std::string("none"));
  auto none = make_position_encoding(plain, g);
  Tensor q = randn({1, 2, 6, 8}, gx), k = randn({1, 2, 6, 8}, gx);
  EXPECT_EQ(ntk1->rotate(0, q, k, 0).first.to_vector(), none->rotate(0, q, k, 0).first.to_vector());
}

TEST(Rope, LargeDimScalings) {
  // YaRN dr = 128, b = 1e4, s = 4, L0 = 4096: lo = 20, hi = 46 (k <= 20 kept, k >= 46 divided by s).
  RopeParams p;
  p.rotary_dim = 128;
  p.scaling = "yarn";
  p.factor = 4;
  p.original_length = 4096;
  auto y = rope_frequencies(p, 10);
  p.scaling = "none";
  auto d = rope_frequencies(p, 10);
  for (int k = 0; k <= 20; ++k) EXPECT_DOUBLE_EQ(y.inv_freq[k], d.inv_freq[k]) << k;
  for (int k = 21; k < 46; ++k) {
    EXPECT_LT(y.inv_freq[k], d.inv_freq[k]) << k;
    EXPECT_GT(y.inv_freq[k], d.inv_freq[k] / 4) << k;
  }
  for (int k = 46; k < 64; ++k) EXPECT_NEAR(y.inv_freq[k], d.inv_freq[k] / 4, 1e-15 * d.inv_freq[k]) << k;
  // llama3 dr = 128, b = 5e5, s = 8, L0 = 8192: 29 unchanged, 29 divided by 8, 6 smoothed.
  RopeParams l;
  l.rotary_dim = 128;
  l.base = 5e5;
  l.scaling = "llama3";
  l.factor = 8;
  l.original_length = 8192;
  auto lf = rope_frequencies(l, 10);
  l.scaling = "none";
  auto ld = rope_frequencies(l, 10);
  int same = 0, divided = 0, smoothed = 0;
  for (int k = 0; k < 64; ++k) {
    if (lf.inv_freq[k] == ld.inv_freq[k])
      ++same;
    else if (std::fabs(lf.inv_freq[k] - ld.inv_freq[k] / 8) <= 1e-15 * ld.inv_freq[k])
      ++divided;
    else
      ++smoothed;
  }
  EXPECT_EQ(same, 29);
  EXPECT_EQ(divided, 29);
  EXPECT_EQ(smoothed, 6);
}

// x = [1..8] at position 1 (row 1 of a 2-position tensor), dr = 8, b = 1e4.
Tensor rotate_example(bool interleaved, Tensor* x_out = nullptr) {
  std::vector<double> v;
  for (int r = 0; r < 2; ++r)
    for (int i = 1; i <= 8; ++i) v.push_back(i);
  Tensor x = Tensor::from_vector(v, {1, 1, 2, 8}, DType::Float64).set_requires_grad(true);
  if (x_out) *x_out = x;
  return apply_rope(x, rope8(), interleaved, 0);
}

TEST(Rope, RotatedVectorExamples) {
  const std::vector<double> half = {-3.667052618, 1.391007831, 2.929851168, 3.991998001,
                                    3.542982514,  6.169691825, 7.029649503, 8.003995999};
  const std::vector<double> inter = {-1.142639664, 1.922075597, 2.585678829, 4.279516911,
                                     4.939751002,  6.049699169, 6.991996501, 8.006995999};
  for (bool il : {false, true}) {
    auto y = rotate_example(il).to_vector();
    const auto& e = il ? inter : half;
    for (int i = 0; i < 8; ++i) {
      EXPECT_NEAR(y[8 + i], e[i], 1e-9) << (il ? "interleaved" : "rotate_half") << " i=" << i;
      EXPECT_NEAR(y[i], i + 1.0, 1e-15);  // position 0 is the identity
    }
  }
}

TEST(Rope, BackwardIsInverseRotation) {
  for (bool il : {false, true}) {
    Tensor x;
    Tensor y = rotate_example(il, &x);
    Generator g(3);
    Tensor gy = randn(y.shape(), g, DType::Float64);
    y.backward(gy);
    // <R x, g> = <x, R^T g>, and R^T R x = x.
    auto yv = y.to_vector(), gv = gy.to_vector(), xv = x.to_vector(), gx = x.grad().to_vector();
    double a = 0, b = 0;
    for (size_t i = 0; i < yv.size(); ++i) {
      a += yv[i] * gv[i];
      b += xv[i] * gx[i];
    }
    EXPECT_NEAR(a, b, 1e-13);
    Tensor y2 = y.detach().set_requires_grad(true);
    // Inverse by autograd: the gradient of <R x, y> with respect to x is R^T y = x.
    Tensor x2 = x.detach().clone().set_requires_grad(true);
    Tensor z = apply_rope(x2, rope8(), il, 0);
    z.backward(y.detach());
    EXPECT_LE(std::fabs(x2.grad().to_vector()[12] - xv[12]), 1e-14);
    (void)y2;
  }
}

// <R(m) q, R(n) k> depends only on m - n, for every layout and scaling (YaRN's factor squared).
TEST(Rope, RelativeProperty) {
  const int64_t T = 120, D = 10;
  Generator g(11);
  Tensor q1 = randn({1, 1, 1, D}, g, DType::Float64), k1 = randn({1, 1, 1, D}, g, DType::Float64);
  Tensor q = q1.expand({1, 1, T, D}).contiguous(), k = k1.expand({1, 1, T, D}).contiguous();
  for (const std::string scaling : {"none", "linear", "ntk", "yarn", "llama3"})
    for (bool il : {false, true}) {
      RopeParams p;
      p.rotary_dim = 8;  // partial: the last 2 channels pass through
      p.base = 100;
      p.scaling = scaling;
      p.factor = 3;
      p.original_length = 32;
      auto qv = apply_rope(q, p, il, 5).to_vector(), kv = apply_rope(k, p, il, 5).to_vector();
      auto dot = [&](int64_t m, int64_t n) {
        double s = 0;
        for (int64_t e = 0; e < D; ++e) s += qv[m * D + e] * kv[n * D + e];
        return s;
      };
      for (int64_t delta : {0, 1, 7, 40}) {
        const double ref = dot(delta, 0);
        for (int64_t n : {int64_t(3), int64_t(17), int64_t(60), T - 1 - delta})
          EXPECT_NEAR(dot(n + delta, n), ref, 1e-10) << scaling << " " << il;
      }
    }
}

TEST(Rope, ModuleConfigErrors) {
  Generator g(0);
  PosEncConfig c;
  c.kind = "rope";
  c.n_embd = 12;
  c.n_head = 3;
  // Not a declared choice: refused when set, naming the option.
  try {
    c.set("rope_scaling", std::string("ntk-by-parts"));
    ADD_FAILURE() << "an undeclared scaling was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--rope-scaling"), std::string::npos) << e.what();
  }
  c.set("rope_fraction", 0.2);  // 4 * 0.2 -> 0 channels
  EXPECT_THROW(make_position_encoding(c, g), ValueError);
  c.set("rope_fraction", 0.75);  // int(4 * 0.75) = 3: an odd rotary dim is refused in the neox convention
  try {
    make_position_encoding(c, g);
    ADD_FAILURE() << "an odd rotary dim was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("--rope-partial neox_hf"), std::string::npos) << e.what();
  }
  c.set("rope_fraction", 0.5);
  auto pe = make_position_encoding(c, g);
  Generator gx(1);
  Tensor q = randn({1, 3, 5, 4}, gx), k = randn({1, 3, 5, 4}, gx);
  auto [qr, kr] = pe->rotate(0, q, k, 0);
  auto a = q.to_vector(), b = qr.to_vector();
  for (int64_t row = 0; row < 15; ++row)
    for (int64_t e = 2; e < 4; ++e) EXPECT_EQ(a[row * 4 + e], b[row * 4 + e]);  // pass-through channels
  for (int64_t t = 1; t < 5; ++t) EXPECT_NE(a[t * 4 + 0], b[t * 4 + 0]) << t;   // positions 1.. rotate channel 0
}

// The encoding keeps its last cos / sin tables (one host computation and device copy, not one per layer
// and step): a change of length, offset, dtype or scaling must not reuse them. Every call equals the
// uncached apply_rope on the same input, bit for bit, in an order that hits and misses the cache.
TEST(Rope, KeptTablesFollowTheLengthOffsetAndDtype) {
  for (const std::string scaling : {"none", "dynamic"}) {
    Generator g(0);
    PosEncConfig c;
    c.kind = "rope";
    c.n_embd = 16;
    c.n_head = 2;
    c.block_size = 8;
    c.set("rope_scaling", scaling);
    if (scaling == "dynamic") c.set("rope_scaling_factor", 2.0);
    auto pe = make_position_encoding(c, g);
    const RopeParams p = rope_params(c);
    Generator gx(3);
    for (const auto& [T, pos0, dtype] : std::vector<std::tuple<int64_t, int64_t, DType>>{{8, 0, DType::Float32},
                                                                                         {8, 0, DType::Float32},
                                                                                         {16, 0, DType::Float32},
                                                                                         {8, 0, DType::Float32},
                                                                                         {8, 5, DType::Float32},
                                                                                         {8, 5, DType::Float64},
                                                                                         {8, 5, DType::Float32}}) {
      const Tensor q = randn({1, 2, T, 8}, gx).to(dtype), k = randn({1, 2, T, 8}, gx).to(dtype);
      auto [qr, kr] = pe->rotate(0, q, k, pos0);
      EXPECT_EQ(qr.to_vector(), apply_rope(q, p, false, pos0).to_vector()) << scaling << " T=" << T << " pos0=" << pos0;
      EXPECT_EQ(kr.to_vector(), apply_rope(k, p, false, pos0).to_vector()) << scaling << " T=" << T << " pos0=" << pos0;
    }
  }
}

// ---- partial rotary conventions (SPEC-positions-2 §2, test vectors §10.2) ------------------------

// gen(shape, s) of SPEC-positions-2 §0.1 for one dimension: 0.5 sin(1 + s + 0.7 i).
std::vector<double> gen1(int64_t n, double s) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(0.5 * std::sin(1.0 + s + 0.7 * double(i)));
  return v;
}

PosEncConfig rope_head(int64_t D, double fraction, const std::string& conv) {
  PosEncConfig c;
  c.kind = "rope";
  c.n_embd = D;
  c.n_head = 1;
  c.dtype = DType::Float64;
  c.set("rope_fraction", fraction);
  c.set("rope_partial", conv);
  return c;
}

// The encoding's rotation of one head vector x (D) at position pos (q and k rotate alike).
std::vector<double> rotate_one(const PosEncConfig& c, const std::vector<double>& x, int64_t pos) {
  Generator g(0);
  auto pe = make_position_encoding(c, g);
  const int64_t D = static_cast<int64_t>(x.size());
  std::vector<double> rows(static_cast<size_t>((pos + 1) * D), 0.0);
  std::copy(x.begin(), x.end(), rows.begin() + pos * D);
  Tensor q = Tensor::from_vector(rows, {1, 1, pos + 1, D}, DType::Float64);
  auto v = pe->rotate(0, q, q, 0).first.to_vector();
  return std::vector<double>(v.begin() + pos * D, v.end());
}

TEST(PartialRotary, NeoxAndProportionalFrequencies) {
  auto freqs = [](const PosEncConfig& c) { return rope_frequencies(rope_params(c), 1).inv_freq; };
  auto expect_freqs = [](const std::vector<double>& got, const std::vector<double>& want, const char* what) {
    ASSERT_GE(got.size(), want.size()) << what;
    // The vectors are printed to 7 significant digits.
    for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[k], want[k], 5e-7 * want[k]) << what << " k=" << k;
  };
  // d = 64, f = 0.25: NeoX 16 channels, omega = 1e4^(-2k/16); p-RoPE 8 of 32 pairs, omega = 1e4^(-2k/64).
  const RopeParams n64 = rope_params(rope_head(64, 0.25, "neox"));
  EXPECT_EQ(n64.rotary_dim, 16);
  expect_freqs(freqs(rope_head(64, 0.25, "neox")),
               {1, 0.3162278, 0.1, 0.03162278, 0.01, 0.003162278, 0.001, 0.0003162278}, "neox 64");
  const RopeParams p64 = rope_params(rope_head(64, 0.25, "prope"));
  EXPECT_EQ(p64.rotary_dim, 64);
  EXPECT_EQ(p64.kept_freqs, 8);
  const auto pf = freqs(rope_head(64, 0.25, "prope"));
  ASSERT_EQ(pf.size(), 32u);
  expect_freqs(pf, {1, 0.7498942, 0.5623413, 0.4216965, 0.3162278, 0.2371374, 0.1778279, 0.1333521}, "prope 64");
  for (size_t k = 8; k < 32; ++k) EXPECT_EQ(pf[k], 0.0) << "p-RoPE pair " << k << " must be position-free";
  // d = 32, f = 0.25 (the tiny model).
  expect_freqs(freqs(rope_head(32, 0.25, "neox")), {1, 0.1, 0.01, 0.001}, "neox 32");
  expect_freqs(freqs(rope_head(32, 0.25, "prope")), {1, 0.5623413, 0.3162278, 0.1778279}, "prope 32");
  // d = 64, f = 0.3: int(19.2) = 19 is odd. neox refuses it; neox_hf rotates 20 channels with
  // denominator 19 (current HF GPT-NeoX); p-RoPE keeps int(19.2 // 2) = 9 pairs.
  EXPECT_THROW(rope_params(rope_head(64, 0.3, "neox")), ValueError);
  const RopeParams h = rope_params(rope_head(64, 0.3, "neox_hf"));
  EXPECT_EQ(h.rotary_dim, 20);
  EXPECT_EQ(h.freq_dim, 19);
  const auto hf = freqs(rope_head(64, 0.3, "neox_hf"));
  ASSERT_EQ(hf.size(), 10u);
  expect_freqs(
      hf,
      {1, 0.379269, 0.143845, 0.05455595, 0.02069138, 0.0078476, 0.002976351, 0.001128838, 0.0004281332, 0.0001623777},
      "neox_hf 64 x 0.3");
  EXPECT_EQ(rope_params(rope_head(64, 0.3, "prope")).kept_freqs, 9);
  // The double product truncated: 100 x 0.57 = 56.99999999999999 -> 56 (not 57).
  EXPECT_EQ(rope_params(rope_head(100, 0.57, "neox")).rotary_dim, 56);
  // Combinations no source defines.
  PosEncConfig py = rope_head(64, 0.25, "prope");
  py.set("rope_scaling", std::string("yarn"));
  py.set("rope_scaling_factor", 2.0);
  EXPECT_THROW(rope_params(py), ValueError);
  py.set("rope_scaling", std::string("linear"));
  EXPECT_NO_THROW(rope_params(py));
  PosEncConfig hy = rope_head(64, 0.3, "neox_hf");
  hy.set("rope_scaling", std::string("yarn"));
  hy.set("rope_scaling_factor", 2.0);
  EXPECT_THROW(rope_params(hy), ValueError);
  EXPECT_THROW(rope_params(rope_head(64, 0.01, "prope")), ValueError);  // keeps no frequency
}

// SPEC-2 §10.2: x = gen((64,), 0) at position 7, rotate_half, f = 0.25. The rotated vectors (not
// only the tables) in both conventions: which channels move and with which partner.
TEST(PartialRotary, RotatedVectorsInBothConventions) {
  const std::vector<double> x = gen1(64, 0.0);
  const std::vector<double> neox = rotate_one(rope_head(64, 0.25, "neox"), x, 7);
  const std::vector<double> want_n = {
      0.214854186, -0.637574424, -0.0603696725, -0.0524964218, -0.306046157,   -0.481727617, -0.438283257, -0.185968927,
      0.393853448, 0.141983235,  0.595924127,   0.327960994,   -0.00904016631, -0.323277149, -0.493548165, -0.43813882};
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(neox[i], want_n[i], 2e-9) << "neox channel " << i;
  for (int i = 16; i < 64; ++i) EXPECT_EQ(neox[i], x[i]) << "neox channel " << i << " passes through";
  const std::vector<double> prope = rotate_one(rope_head(64, 0.25, "prope"), x, 7);
  const std::vector<double> want_lo = {0.641388584,  -0.115356129, -0.353120518, -0.0542731142,
                                       -0.167151838, -0.444910397, -0.437212075, -0.10092555};
  const std::vector<double> want_hi = {-0.0956013519, -0.645668,    -0.126653675, -0.172387332,
                                       -0.507390086,  -0.530490489, -0.318481295, -0.157875346};
  for (int i = 0; i < 8; ++i) {
    EXPECT_NEAR(prope[i], want_lo[i], 2e-9) << "p-RoPE channel " << i;
    EXPECT_NEAR(prope[32 + i], want_hi[i], 2e-9) << "p-RoPE channel " << 32 + i;
  }
  double sn = 0, sp = 0, changed = 0;
  for (int i = 0; i < 64; ++i) {
    sn += neox[i];
    sp += prope[i];
    if ((i >= 8 && i < 32) || i >= 40) {
      EXPECT_EQ(prope[i], x[i]) << "p-RoPE channel " << i << " is position-free";
    }
    changed += neox[i] != prope[i] ? 1 : 0;
  }
  EXPECT_NEAR(sn, -1.277057268, 1e-8);
  EXPECT_NEAR(sp, -3.253539592, 1e-8);
  EXPECT_EQ(changed, 24);  // the two conventions differ in 24 channels (SPEC-2 §2.5)
  // f = 1 in p-RoPE is plain RoPE.
  const std::vector<double> full = rotate_one(rope_head(64, 1.0, "prope"), x, 7);
  const std::vector<double> rope = rotate_one(rope_head(64, 1.0, "neox"), x, 7);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(full[i], rope[i]) << i;
}

// HF's odd rotary dim (neox_hf, d = 64, f = 0.3): 20 channels rotated in pairs (k, k + 10) with
// angles p 1e4^(-2k/19); channels 20..63 pass through.
TEST(PartialRotary, HfOddRotaryDimRotatesOneMoreChannel) {
  const std::vector<double> x = gen1(64, 0.0);
  const std::vector<double> y = rotate_one(rope_head(64, 0.3, "neox_hf"), x, 5);
  for (int k = 0; k < 10; ++k) {
    const double th = 5.0 * std::pow(1e4, -2.0 * k / 19.0);
    EXPECT_NEAR(y[k], x[k] * std::cos(th) - x[k + 10] * std::sin(th), 1e-15) << k;
    EXPECT_NEAR(y[k + 10], x[k + 10] * std::cos(th) + x[k] * std::sin(th), 1e-15) << k;
  }
  for (int i = 20; i < 64; ++i) EXPECT_EQ(y[i], x[i]) << i;
}

// ---- xPos (SPEC-positions-2 §6, test vectors §10.6) ------------------------------------------------

TEST(Xpos, SpecTestVectors) {
  const std::vector<double> z8 = xpos_zeta(8);
  const std::vector<double> want8 = {0.28571429, 0.46428571, 0.64285714, 0.82142857};
  ASSERT_EQ(z8.size(), 4u);
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(z8[k], want8[k], 5e-9) << k;
  const std::vector<double> z32 = xpos_zeta(32);
  EXPECT_NEAR(z32[1], 0.33035714, 5e-9);
  EXPECT_NEAR(z32[15], 0.95535714, 5e-9);
  // T = 6, centre 3, B = 512: q scales zeta_k^((n - 3)/512) = |(cos, sin)| of the query tables.
  const XposTables t = xpos_tables_at({0, 1, 2, 3, 4, 5}, 3.0, 8, 512.0, DType::Float64);
  const auto qc = t.q_cos.to_vector(), qs = t.q_sin.to_vector(), kc = t.k_cos.to_vector(), ks = t.k_sin.to_vector();
  const double want_q0[] = {1.007367415, 1.004505756, 1.002592218, 1.001153264};
  const double want_q5[] = {0.9951183488, 0.9970073964, 0.9982755793, 0.9992318956};
  for (int k = 0; k < 4; ++k) {
    EXPECT_NEAR(std::hypot(qc[k], qs[k]), want_q0[k], 1e-9) << k;
    EXPECT_NEAR(std::hypot(qc[5 * 4 + k], qs[5 * 4 + k]), want_q5[k], 1e-9) << k;
    EXPECT_NEAR(std::hypot(qc[3 * 4 + k], qs[3 * 4 + k]), 1.0, 1e-15) << k;  // n = c
    // keys carry the inverse scale
    EXPECT_NEAR(std::hypot(kc[k], ks[k]) * want_q0[k], 1.0, 1e-9) << k;
  }
  // q'(n = 3) and k'(m = 1) of x = gen((8,), 9), interleaved pairs; their dot product, and the same
  // with both positions and the centre shifted by 2.
  const std::vector<double> x = gen1(8, 9.0);
  auto one = [&](int64_t n, double centre, bool key) {
    std::vector<double> rows(static_cast<size_t>((n + 1) * 8), 0.0);
    std::copy(x.begin(), x.end(), rows.begin() + n * 8);
    Tensor q = Tensor::from_vector(rows, {1, 1, n + 1, 8}, DType::Float64);
    std::vector<int64_t> pos;
    for (int64_t i = 0; i <= n; ++i) pos.push_back(i);
    auto [qq, kk] = apply_xpos(q, q, pos, centre, 512.0, true);
    auto v = (key ? kk : qq).to_vector();
    return std::vector<double>(v.begin() + n * 8, v.end());
  };
  const std::vector<double> q3 = one(3, 3.0, false), k1 = one(1, 3.0, true);
  const std::vector<double> want_q = {0.3367885795, 0.4351446123, -0.3726940872, -0.350622393,
                                      0.1036478688, 0.4051835018, 0.4979267604,  0.362936086};
  const std::vector<double> want_k = {0.2542750032, -0.4849460917, -0.4336213829, -0.2687836267,
                                      0.1115375997, 0.402334656,   0.4982686197,  0.3616614999};
  double dot = 0, dot2 = 0;
  const std::vector<double> q5 = one(5, 5.0, false), k3 = one(3, 5.0, true);
  for (int i = 0; i < 8; ++i) {
    EXPECT_NEAR(q3[i], want_q[i], 1e-10) << "q' " << i;
    EXPECT_NEAR(k1[i], want_k[i], 1e-10) << "k' " << i;
    dot += q3[i] * k1[i];
    dot2 += q5[i] * k3[i];
  }
  EXPECT_NEAR(dot, 0.684406210157, 1e-12);
  EXPECT_NEAR(dot2, 0.684406210157, 1e-12);
  // The decay of pair k with distance: zeta_k^(63/32) for the tiny option B = 32.
  const XposTables t32 = xpos_tables_at({0, 63}, 0.0, 8, 32.0, DType::Float64);
  const auto a = t32.q_cos.to_vector(), b = t32.q_sin.to_vector(), c = t32.k_cos.to_vector(), d = t32.k_sin.to_vector();
  const double want_decay[] = {0.084891858, 0.22079214, 0.41901095, 0.67890546};
  for (int k = 0; k < 4; ++k)
    EXPECT_NEAR(std::hypot(a[4 + k], b[4 + k]) * std::hypot(c[k], d[k]), want_decay[k], 1e-8) << k;
}

TEST(Xpos, CausalOnlyAndHeadDim) {
  Generator g(0);
  PosEncConfig c;
  c.kind = "xpos";
  c.n_embd = 8;
  c.n_head = 2;
  EXPECT_NO_THROW(make_position_encoding(c, g));
  EXPECT_TRUE(position_encoding_entry("xpos").causal_only);
  c.causal = false;
  try {
    make_position_encoding(c, g);
    FAIL() << "bidirectional xPos was accepted";
  } catch (const ValueError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'xpos'"), std::string::npos) << m;
    EXPECT_NE(m.find("causal only"), std::string::npos) << m;
  }
  const auto bidir = bidirectional_position_encoding_kinds();
  EXPECT_EQ(std::find(bidir.begin(), bidir.end(), "xpos"), bidir.end());
  EXPECT_NE(std::find(bidir.begin(), bidir.end(), "sandwich"), bidir.end());
  c.causal = true;
  c.n_embd = 6;
  c.n_head = 2;  // D = 3: no pairs
  EXPECT_THROW(make_position_encoding(c, g), ValueError);
}

// ---- FIRE (SPEC-positions-2 §1, test vectors §10.1) ----------------------------------------------------

// The spec's MLP (width 4, H = 2) with c and m, L0, as differentiable double tensors.
FireParams spec_fire(double c, double m, double L0) {
  auto param = [](std::vector<double> v, Shape s) {
    Tensor t = Tensor::from_vector(v, s, DType::Float64);
    t.set_requires_grad(true);
    return t;
  };
  return FireParams{param({0.5, -1, 1.5, -0.25}, {4, 1}),
                    param({0.1, 0.2, -0.3, 0.05}, {4}),
                    param({1, -0.5, 0.25, 2, -1, 0.75, 0.5, -0.2}, {2, 4}),
                    param({0.01, -0.02}, {2}),
                    param({c}, {1}),
                    param({m}, {1}),
                    L0};
}

std::vector<int64_t> iota(int64_t n, int64_t from = 0) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(from + i);
  return v;
}

TEST(Fire, NormalisedDistanceSpotValues) {
  // An identity MLP (W = 1, H = 1: ReLU(u)) reads u itself; c = 0.1, L = 512.
  auto one = [](double v) { return Tensor::from_vector(std::vector<double>{v}, {1}, DType::Float64); };
  FireParams id{Tensor::from_vector(std::vector<double>{1}, {1, 1}, DType::Float64),
                one(0),
                Tensor::from_vector(std::vector<double>{1}, {1, 1}, DType::Float64),
                one(0),
                one(0.1),
                one(1),
                512};
  const std::vector<std::array<double, 3>> spots = {
      {1, 0, 0.02409814608},   {10, 0, 0.1752547529},     {63, 0, 0.5026124861},  {511, 0, 0.9995149164},
      {1023, 0, 0.9999997844}, {1023, 512, 0.8524090557}, {2047, 0, 0.9999998123}};
  for (const auto& [i, j, u] : spots) {
    const auto b = fire_bias(id, {int64_t(i)}, {int64_t(j)}, true).to_vector();
    EXPECT_NEAR(b[0], u, 1e-10) << "u(" << i << ", " << j << ")";
  }
}

TEST(Fire, SpecBiasCausalAndBidirectional) {
  const FireParams p = spec_fire(0.1, 1.5, 3.0);                    // L = 4.5
  const auto b = fire_bias(p, iota(8), iota(8), true).to_vector();  // (2, 8, 8)
  const double head0_row7[] = {0.90999835, 0.81002922, 0.70360613, 0.58983788,
                               0.46763490, 0.33564562, 0.19980864, 0.11};
  const double head1_row5[] = {-0.02000062, -0.06253985, -0.10823293, -0.15758521, -0.21123419, 0.02};
  for (int j = 0; j < 8; ++j) EXPECT_NEAR(b[0 * 64 + 7 * 8 + j], head0_row7[j], 5e-9) << j;
  for (int j = 0; j < 6; ++j) EXPECT_NEAR(b[1 * 64 + 5 * 8 + j], head1_row5[j], 5e-9) << j;
  EXPECT_NEAR(b[0 * 64 + 4 * 8 + 0], 0.82736085, 5e-9);  // a row below L: the distance bias
  EXPECT_NEAR(b[1 * 64 + 1 * 8 + 0], -0.20587240, 5e-9);
  // Bidirectionally: |i - j| with the query's normaliser, u(2, 7) = psi(5) / psi(4.5) > 1.
  const auto bi = fire_bias(p, iota(8), iota(8), false).to_vector();
  const double row2[] = {0.46435032, 0.25944662, 0.11, 0.25944662, 0.46435032, 0.65284346, 0.82736085, 0.98983265};
  for (int j = 0; j < 8; ++j) EXPECT_NEAR(bi[2 * 8 + j], row2[j], 5e-9) << j;
  // A key/value-cache step (queries 5..7 against keys 0..7) reads the same rows as the full window.
  const auto step = fire_bias(p, iota(3, 5), iota(8), true).to_vector();
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < 3; ++t)
      for (int j = 0; j <= 5 + t; ++j) EXPECT_EQ(step[(h * 3 + t) * 8 + j], b[(h * 8 + 5 + t) * 8 + j]);
}

TEST(Fire, SpecBackwardAndTieRule) {
  // G[h, i, j] = cos(0.3 h + 0.2 i - 0.1 j) on the causal entries: the gradient of sum(G * bias).
  auto grads = [](const FireParams& p) {
    std::vector<double> g;
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 8; ++j) g.push_back(j <= i ? std::cos(0.3 * h + 0.2 * i - 0.1 * j) : 0.0);
    const Tensor G = Tensor::from_vector(g, {2, 8, 8}, DType::Float64);
    sum(fire_bias(p, iota(8), iota(8), true) * G).backward();
  };
  FireParams p = spec_fire(0.1, 1.5, 3.0);
  grads(p);
  EXPECT_NEAR(p.c.grad().to_vector()[0], 5.999043643, 1e-8);
  EXPECT_NEAR(p.m.grad().to_vector()[0], -2.375136214, 1e-8);
  const double dw1[] = {3.976213301, -0.001465005838, 5.090443109, 0.2339863806};
  const double db1[] = {7.622541028, 0.9843120643, 10.32985135, 14.70059601};
  const double dw2[] = {7.363486789, 1.4780465,   8.728896381, 0.3695116249,
                        4.613126035, 1.249800891, 4.708970325, 0.3124502229};
  const auto gw1 = p.w1.grad().to_vector(), gb1 = p.b1.grad().to_vector(), gw2 = p.w2.grad().to_vector(),
             gb2 = p.b2.grad().to_vector();
  for (int e = 0; e < 4; ++e) {
    EXPECT_NEAR(gw1[e], dw1[e], 1e-8) << e;
    EXPECT_NEAR(gb1[e], db1[e], 1e-8) << e;
  }
  for (int e = 0; e < 8; ++e) EXPECT_NEAR(gw2[e], dw2[e], 1e-8) << e;
  EXPECT_NEAR(gb2[0], 25.96438956, 1e-8);
  EXPECT_NEAR(gb2[1], 18.34184853, 1e-8);
  // L = 4 exactly: row i = 4 sits on the tie of max(i, L) and sends half its gradient to L.
  FireParams tie = spec_fire(0.1, 1.0, 4.0);
  grads(tie);
  EXPECT_NEAR(tie.m.grad().to_vector()[0], -3.111330006, 1e-8);
  EXPECT_NEAR(tie.c.grad().to_vector()[0], 5.650902155, 1e-8);
}

TEST(Fire, EncodingParametersOptionsAndDevice) {
  PosEncConfig cfg;
  cfg.kind = "fire";
  cfg.n_layer = 2;
  Generator gen(1);
  auto enc = make_position_encoding(cfg, gen);
  // 2W + (W + 1) H + 2 = 198 per layer at W = 32, H = 4 (SPEC-2 §1.2).
  int64_t n = 0;
  for (const auto& [name, t] : enc->named_parameters()) n += t.numel();
  EXPECT_EQ(n, 2 * 198);
  const ScoreModifier m = enc->scores(1, LayerProjections{}, 5, 5, 0);
  EXPECT_EQ(m.kind, ScoreBias::Dense);
  EXPECT_EQ(m.bias_dense.shape(), (Shape{4, 5, 5}));
  EXPECT_THROW(enc->scores(2, LayerProjections{}, 5, 5, 0), IndexError);
  // L0 = 0 means a quarter of the context (64 / 4 = 16): rows below 16 read one distance bias.
  const auto b = enc->scores(0, LayerProjections{}, 20, 20, 0).bias_dense.to_vector();
  EXPECT_EQ(b[(10 * 20) + 7], b[(15 * 20) + 12]);                   // distance 3 below L
  EXPECT_NE(b[(18 * 20) + 15], b[(15 * 20) + 12]);                  // distance 3, row 18 > L: its own normaliser
  EXPECT_THROW(cfg.set("fire_mlp_width", int64_t{0}), UsageError);  // the option's range [1, 4096]
}

// ---- FoX (SPEC-positions-2 §4, test vectors §10.4) ----------------------------------------------------

// gen(shape, s) of SPEC-2 §0.1: 0.5 sin(1 + s + 0.7 i0 + 1.3 i1 + 0.37 i2 + 0.91 i3), float64.
Tensor spec_gen(const Shape& shape, double s) {
  static const double coef[] = {0.7, 1.3, 0.37, 0.91, 0.23};
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t f = 0; f < n; ++f) {
    double acc = 1.0 + s;
    int64_t rest = f;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      acc += coef[d] * static_cast<double>(rest % shape[d]);
      rest /= shape[d];
    }
    v[f] = 0.5 * std::sin(acc);
  }
  return Tensor::from_vector(v, shape, DType::Float64);
}

TEST(Fox, SpecTestVectors) {
  // z = 4 gen((2, 2, 5), 3): the gates' prefix, the bias F_i - F_j, the output and dLoss/dz.
  Tensor z = spec_gen({2, 2, 5}, 3.0) * 4.0;
  z.set_requires_grad(true);
  const Tensor F = fox_log_forget_prefix(z);
  const double want_F[] = {-1.712550135, -3.737955536, -5.864212129, -7.855045342, -9.506983523};
  const auto Fv = F.to_vector();
  for (int t = 0; t < 5; ++t) EXPECT_NEAR(Fv[t], want_F[t], 1e-9) << t;
  const Tensor q = spec_gen({2, 2, 5, 4}, 0), k = spec_gen({2, 2, 5, 4}, 1), v = spec_gen({2, 2, 5, 4}, 2);
  ScoreModifier m;
  m.kind = ScoreBias::Separable;
  m.bias_separable = cat({F, -F}, -1);
  const Tensor O = attention(q, k, v, m, true, 0.5);
  const double o_last[] = {-0.4678776496, -0.4068661924, -0.0315471428, 0.3681423428};  // O[0, 0, 4, :]
  const auto ov = O.to_vector();
  for (int e = 0; e < 4; ++e) EXPECT_NEAR(ov[4 * 4 + e], o_last[e], 1e-9) << e;
  sum(O * spec_gen({2, 2, 5, 4}, 4)).backward();
  const auto dz = z.grad().to_vector();
  const double want_dz[4][5] = {{-2.843540861e-18, -0.02080828019, -0.02200787975, -0.0214963764, -0.01779520288},
                                {-1.166907985e-17, -0.02830369457, -0.04209352228, -0.03568161833, -0.01427851926},
                                {0, -0.01892813756, -0.02598288537, -0.03030509408, -0.0198272697},
                                {0, -0.04418472308, -0.04083321819, -0.02223506257, -0.007622954629}};
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < 5; ++t) EXPECT_NEAR(dz[r * 5 + t], want_dz[r][t], 1e-10) << r << " " << t;
  // F_i cancels in each row: the same output with the column term alone.
  ScoreModifier c = m;
  c.bias_separable = cat({Tensor::zeros({2, 2, 5}, DType::Float64), -F.detach()}, -1);
  const auto oc = attention(q, k, v, c, true, 0.5).to_vector();
  for (size_t i = 0; i < ov.size(); ++i) EXPECT_NEAR(oc[i], ov[i], 1e-14) << i;
}

TEST(Fox, EncodingIsCausalCpuOnlyAndReadsTheLayerInput) {
  PosEncConfig cfg;
  cfg.kind = "fox";
  cfg.n_layer = 2;
  cfg.n_embd = 8;
  cfg.n_head = 2;
  Generator gen(2);
  auto enc = make_position_encoding(cfg, gen);
  EXPECT_FALSE(enc->supports_kv_cache());
  EXPECT_TRUE(position_encoding_entry("fox").causal_only);
  EXPECT_TRUE(position_encoding_entry("fox").cpu_only);
  LayerProjections lp;
  EXPECT_THROW(enc->scores(0, lp, 4, 4, 0), ValueError);  // no layer input
  Generator g(4);
  lp.input = randn({3, 4, 8}, g);
  const ScoreModifier m = enc->scores(1, lp, 4, 4, 0);
  EXPECT_EQ(m.kind, ScoreBias::Separable);
  EXPECT_EQ(m.bias_separable.shape(), (Shape{3, 2, 8}));
  EXPECT_THROW(enc->scores(1, lp, 1, 4, 3), ShapeError);  // a key/value-cache step
  cfg.causal = false;
  EXPECT_THROW(cfg.validate(), ValueError);  // causal only
}

// ---- CoPE (SPEC-positions-2 §8, test vectors §10.8) ------------------------------------------------

TEST(Cope, SpecTestVectors) {
  // B = 1, H = 2, T = 5, d = 4, npos = 4 (the clamp acts on row 4): q = 3 gen(10), k = 3 gen(11),
  // v = gen(12), E = gen((4, 4), 13); loss = sum(O * gen(14)).
  Tensor q = spec_gen({1, 2, 5, 4}, 10) * 3.0, k = spec_gen({1, 2, 5, 4}, 11) * 3.0;
  const Tensor v = spec_gen({1, 2, 5, 4}, 12);
  Tensor E = spec_gen({4, 4}, 13);
  for (Tensor* t : {&q, &k, &E}) t->set_requires_grad(true);
  ScoreModifier m;
  m.scores = cope_scores(q, k, E, 0.5);
  // Row 4 of head 0: gates, positions 4.13, 3.27 clamped to 3 (floor = ceil = 3), 2.39, 1.53, 0.71.
  const auto S = m.scores.to_vector();
  const auto qv = q.to_vector(), kv = k.to_vector(), ev = E.to_vector();
  auto dot = [&](int64_t i, int64_t j) {
    double s = 0;
    for (int e = 0; e < 4; ++e) s += qv[i * 4 + e] * kv[j * 4 + e];
    return s;
  };
  auto z = [&](int64_t i, int64_t p) {
    double s = 0;
    for (int e = 0; e < 4; ++e) s += qv[i * 4 + e] * ev[e * 4 + p];
    return s;
  };
  const double want_z[] = {0.48871385, -1.15922546, -1.10889676, 0.56596830};  // z[h=0] row 4
  for (int p = 0; p < 4; ++p) EXPECT_NEAR(z(4, p), want_z[p], 1e-8) << p;
  const double pos[] = {3, 3, 2.39034609, 1.52603677, 0.71179134};  // clamped positions of row 4
  for (int j = 0; j < 5; ++j) {
    const double f = std::floor(pos[j]), w = pos[j] - f;
    const double l = w * z(4, static_cast<int64_t>(std::ceil(pos[j]))) + (1 - w) * z(4, static_cast<int64_t>(f));
    EXPECT_NEAR(S[4 * 5 + j], 0.5 * (dot(4, j) + l), 1e-7) << j;
  }
  EXPECT_NEAR(1.0 / (1.0 + std::exp(-0.5 * dot(4, 4))), 0.71179134, 1e-8);  // the gate g_44
  EXPECT_EQ(S[0 * 5 + 1], 0.0);                                             // a future key: 0 (masked by the attention)
  const Tensor O = attention(q, k, v, m, true, 0.5);
  const double want_O[5][4] = {{0.2100835184, 0.4871541802, 0.3878940965, -0.0110174743},
                               {0.2439370332, 0.4889058945, 0.3561907961, -0.0516847203},
                               {0.2647938889, 0.4845599699, 0.3299993549, -0.0794885671},
                               {0.2946224602, 0.4745649347, 0.2879019628, -0.1211677227},
                               {0.3531401107, 0.4433481749, 0.1910660051, -0.2088162779}};
  const auto ov = O.to_vector();
  for (int i = 0; i < 5; ++i)
    for (int e = 0; e < 4; ++e) EXPECT_NEAR(ov[i * 4 + e], want_O[i][e], 1e-9) << i << " " << e;
  sum(O * spec_gen({1, 2, 5, 4}, 14)).backward();
  const double want_dE[4][4] = {{0.0083556066, 0.0460258249, 0.0043401393, -0.0587215708},
                                {0.0277321798, 0.0978905141, -0.0265911091, -0.0990315848},
                                {0.0256854083, 0.0741339490, -0.0369804997, -0.0628388576},
                                {0.0037964406, -0.0068917220, -0.0188021399, 0.0218974212}};
  const double want_dq[5][4] = {{0, 0, 0, 0},
                                {0.0146014001, 0.0085019959, -0.0027036474, -0.0114386954},
                                {0.0189398740, 0.0075840668, -0.0089570048, -0.0196212027},
                                {0.0164991422, 0.0072625725, -0.0075360474, -0.0178958316},
                                {0.0108082501, 0.0001528205, -0.0103378970, -0.0137617425}};
  const double want_dk[5][4] = {{0.0422387270, 0.0007806231, -0.0412805187, -0.0514521089},
                                {-0.0199403048, -0.0124148083, 0.0047012331, 0.0181855320},
                                {-0.0087265529, 0.0002343759, 0.0090142473, 0.0108305360},
                                {-0.0033734010, 0.0051434577, 0.0096869517, 0.0067471931},
                                {-0.0005463234, 0.0046461512, 0.0062494346, 0.0030249766}};
  const auto dE = E.grad().to_vector(), dq = q.grad().to_vector(), dk = k.grad().to_vector();
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_NEAR(dE[r * 4 + c], want_dE[r][c], 1e-10) << r << " " << c;
  for (int i = 0; i < 5; ++i)
    for (int e = 0; e < 4; ++e) {
      EXPECT_NEAR(dq[i * 4 + e], want_dq[i][e], 1e-10) << i << " " << e;
      EXPECT_NEAR(dk[i * 4 + e], want_dk[i][e], 1e-10) << i << " " << e;
    }
}

// The float32 path (gates, counts and interpolation in float, the vectorised sigmoid) against the
// float64 one on the same values at a training size: 2 x 4 heads, T = 64 (several 16-lane pieces and
// ragged rows), P = 40 so the clamp acts on the long rows; logits and the three gradients within
// float rounding (relative to the tensor's largest entry).
TEST(Cope, FloatMatchesDoubleAtTrainingSize) {
  Generator g(21);
  const Tensor q64 = randn({2, 4, 64, 16}, g, DType::Float64) * 2.0,
               k64 = randn({2, 4, 64, 16}, g, DType::Float64) * 2.0;
  const Tensor E64 = randn({16, 40}, g, DType::Float64) * 0.5, w64 = randn({2, 4, 64, 64}, g, DType::Float64);
  auto run = [&](DType dt) {
    Tensor q = q64.to(dt), k = k64.to(dt), E = E64.to(dt);
    for (Tensor* t : {&q, &k, &E}) t->set_requires_grad(true);
    const Tensor S = cope_scores(q, k, E, 0.25);
    sum(S * w64.to(dt)).backward();
    return std::vector<std::vector<double>>{S.to_vector(), q.grad().to_vector(), k.grad().to_vector(),
                                            E.grad().to_vector()};
  };
  const auto f = run(DType::Float32), d = run(DType::Float64);
  const char* names[] = {"logits", "dq", "dk", "dE"};
  for (size_t t = 0; t < d.size(); ++t) {
    double big = 0, worst = 0;
    for (size_t i = 0; i < d[t].size(); ++i) {
      big = std::max(big, std::fabs(d[t][i]));
      worst = std::max(worst, std::fabs(f[t][i] - d[t][i]));
    }
    EXPECT_GT(big, 0.1) << names[t];
    EXPECT_LE(worst, 2e-5 * big) << names[t] << ": largest |float - double| " << worst << " of " << big;
  }
}

TEST(Cope, EncodingStartsAsNopeAndRefusesWhatItCannotDo) {
  PosEncConfig cfg;
  cfg.kind = "cope";
  cfg.n_layer = 2;
  cfg.n_embd = 8;
  cfg.n_head = 2;
  cfg.block_size = 16;
  Generator gen(2);
  auto enc = make_position_encoding(cfg, gen);
  EXPECT_FALSE(enc->supports_kv_cache());
  EXPECT_FALSE(enc->supports_position_ids());
  EXPECT_TRUE(position_encoding_entry("cope").causal_only);
  EXPECT_TRUE(position_encoding_entry("cope").cpu_only);
  // One zero table (D, T + 1) per layer: CoPE starts as NoPE.
  const auto params = enc->named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].second.shape(), (Shape{4, 17}));
  Generator g(4);
  LayerProjections lp;
  EXPECT_THROW(enc->scores(0, lp, 4, 4, 0), ValueError);  // no queries and keys
  lp.q = randn({3, 2, 4, 4}, g, DType::Float64);
  lp.k = randn({3, 2, 4, 4}, g, DType::Float64);
  PosEncConfig dcfg = cfg;
  dcfg.dtype = DType::Float64;
  auto enc64 = make_position_encoding(dcfg, gen);
  const ScoreModifier m = enc64->scores(1, lp, 4, 4, 0);
  ASSERT_TRUE(m.scores.defined());
  const Tensor v = randn({3, 2, 4, 4}, g, DType::Float64);
  const auto with_cope = attention(lp.q, lp.k, v, m, true, 0.5).to_vector();
  const auto nope = attention(lp.q, lp.k, v, ScoreModifier{}, true, 0.5).to_vector();
  for (size_t i = 0; i < nope.size(); ++i) EXPECT_NEAR(with_cope[i], nope[i], 1e-14) << i;
  EXPECT_THROW(enc64->scores(1, lp, 1, 4, 3), ShapeError);  // a key/value-cache step
  // The materialised logits are refused beyond 2^27 entries, before anything is allocated.
  const Tensor big = Tensor::zeros({1, 32, 2049, 1}, DType::Float32);
  EXPECT_THROW(cope_scores(big, big, Tensor::zeros({1, 3}), 1.0), ValueError);
  cfg.causal = false;
  EXPECT_THROW(cfg.validate(), ValueError);  // causal only
  cfg.causal = true;
  EXPECT_THROW(cfg.set("cope_positions", int64_t{-1}), UsageError);
}

// ---- hybrid NoPE/RoPE layers (SPEC-positions-2 §3, test vectors §10.3) --------------------------------

TEST(Hybrid, LayerPatternAndTemperatureSpecVectors) {
  auto pattern = [](int64_t n, int64_t k) {
    std::string s;
    for (const auto& x : hybrid_layer_kinds("", k, n)) s += x == "rope" ? "R" : "N";
    return s;
  };
  EXPECT_EQ(pattern(4, 4), "RRRN");
  EXPECT_EQ(pattern(8, 4), "RRRNRRRN");
  EXPECT_EQ(pattern(6, 2), "RNRNRN");
  EXPECT_EQ(pattern(3, 1), "NNN");  // K = 1: every layer NoPE
  EXPECT_EQ(pattern(48, 4), "RRRNRRRNRRRNRRRNRRRNRRRNRRRNRRRNRRRNRRRNRRRNRRRN");
  const std::vector<std::array<double, 3>> tau = {{8190, 8192, 1},
                                                  {8191, 8192, 1.069314718},
                                                  {16383, 8192, 1.109861229},
                                                  {131071, 8192, 1.283321334},
                                                  {1048575, 8192, 1.48598124},
                                                  {14, 16, 1},
                                                  {15, 16, 1.069314718},
                                                  {63, 16, 1.160943791},
                                                  {1023, 16, 1.417438727},
                                                  {62, 64, 1},
                                                  {63, 64, 1.069314718},
                                                  {1023, 64, 1.283321334}};
  for (const auto& [p, f, v] : tau) EXPECT_NEAR(nope_temperature(int64_t(p), 0.1, f), v, 1e-9) << p << " F " << f;
  EXPECT_THROW(hybrid_layer_kinds("rope,none", 4, 3), ValueError);          // one per layer
  EXPECT_THROW(hybrid_layer_kinds("rope,learned,none", 4, 3), ValueError);  // an absolute table
  EXPECT_THROW(hybrid_layer_kinds("rope,ropes,none", 4, 3), ValueError);    // unknown kind
  EXPECT_EQ(hybrid_layer_kinds("alibi,rope,none", 4, 3), (std::vector<std::string>{"alibi", "rope", "none"}));
}

TEST(Hybrid, EachLayerActsAsItsEncodingAndTheTemperatureScalesNopeQueries) {
  PosEncConfig cfg;
  cfg.kind = "hybrid";
  cfg.n_layer = 4;
  cfg.n_embd = 16;
  cfg.n_head = 2;
  cfg.block_size = 64;  // F = 16
  Generator gen(3);
  auto hyb = make_position_encoding(cfg, gen);
  PosEncConfig r = cfg;
  r.kind = "rope";
  auto rope = make_position_encoding(r, gen);
  Generator g(5);
  const Tensor q = randn({1, 2, 20, 8}, g, DType::Float64), k = randn({1, 2, 20, 8}, g, DType::Float64);
  // Layers 0-2 rotate as RoPE does; layer 3 is NoPE: keys untouched, queries scaled by tau(p).
  for (int64_t l = 0; l < 3; ++l)
    EXPECT_EQ(hyb->rotate(l, q, k, 0).first.to_vector(), rope->rotate(0, q, k, 0).first.to_vector()) << l;
  const auto [q3, k3] = hyb->rotate(3, q, k, 0);
  EXPECT_EQ(k3.to_vector(), k.to_vector());
  const auto qv = q.to_vector(), q3v = q3.to_vector();
  for (int64_t t = 0; t < 20; ++t)
    for (int64_t e = 0; e < 8; ++e)
      EXPECT_DOUBLE_EQ(q3v[(20 + t) * 8 + e], qv[(20 + t) * 8 + e] * nope_temperature(t, 0.1, 16)) << t;
  // A key/value-cache step at positions 15..17 reads the absolute positions' temperature.
  const Tensor q1 = q.narrow(2, 15, 3);
  const auto step = hyb->rotate(3, q1, q1, 15).first.to_vector();
  EXPECT_DOUBLE_EQ(step[0], qv[15 * 8] * nope_temperature(15, 0.1, 16));
  // Off: the NoPE layer is exactly none.
  cfg.set("hybrid_temperature", false);
  auto plain = make_position_encoding(cfg, gen);
  EXPECT_EQ(plain->rotate(3, q, k, 0).first.to_vector(), q.to_vector());
  // A list with a learned bias: its parameters exist for its layers only, named by the kind.
  cfg.set("hybrid_layers", std::string("kerple,rope,kerple,none"));
  auto mixed = make_position_encoding(cfg, gen);
  std::vector<std::string> names;
  for (const auto& [name, t] : mixed->named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"kerple.r1_0", "kerple.r2_0", "kerple.r1_1", "kerple.r2_1"}));
  EXPECT_EQ(mixed->scores(2, LayerProjections{}, 5, 5, 0).kind, ScoreBias::Distance);
  EXPECT_EQ(mixed->scores(1, LayerProjections{}, 5, 5, 0).kind, ScoreBias::None);
  EXPECT_THROW(mixed->scores(4, LayerProjections{}, 5, 5, 0), IndexError);
  // One attention scale per model: T5 unscaled beside RoPE is refused by name.
  cfg.set("hybrid_layers", std::string("t5,rope,rope,none"));
  cfg.set("t5_scaled", false);
  EXPECT_THROW(make_position_encoding(cfg, gen), ValueError);
}

// ---- Sandwich (SPEC-positions-2 §7, test vectors §10.7) ---------------------------------------------

TEST(Sandwich, SpecTestVectors) {
  const int64_t rs[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 63, 64, 100, 1000};
  const double base[] = {4,         3.99495366, 3.97986456, 3.95488198, 3.92025302, 3.8763202,  3.82351797, 3.76236844,
                         3.6934761, 3.6175218,  3.53525597, 3.80588246, 3.7932129,  1.69618494, 1.55855381};
  for (int i = 0; i < 15; ++i) {
    EXPECT_NEAR(sandwich_base(rs[i], 8), base[i], 5e-9) << "r=" << rs[i];
    EXPECT_EQ(sandwich_base(-rs[i], 8), sandwich_base(rs[i], 8));  // symmetric
  }
  const std::vector<double> lambda = sandwich_head_scales(4);
  EXPECT_EQ(lambda, (std::vector<double>{0.5, 0.25, 4.0 / 24.0, 0.125}));
  // bias_by_distance of T = 11 keys, one query at the end (q_offset 10): diagonal d holds r = d - 10.
  Tensor b = sandwich_bias_by_distance(8, 4, 1, 11, 10, DType::Float64, Device::cpu());
  ASSERT_EQ(b.shape(), (Shape{4, 11}));
  const auto v = b.to_vector();
  const double h1[] = {0,           -0.0025231697, -0.010067718, -0.022559011, -0.03987349, -0.061839901, -0.088241013,
                       -0.11881578, -0.15326195,   -0.1912391,   -0.23237201};
  const double h4[] = {0,
                       -0.00063079241,
                       -0.0025169294,
                       -0.0056397528,
                       -0.0099683724,
                       -0.015459975,
                       -0.022060253,
                       -0.029703945,
                       -0.038315488,
                       -0.047809775,
                       -0.058093004};
  for (int r = 0; r <= 10; ++r) {  // printed to 8 significant digits
    EXPECT_NEAR(v[0 * 11 + 10 - r], h1[r], 6e-8 * std::fabs(h1[r]) + 1e-15) << "h=1 r=" << r;
    EXPECT_NEAR(v[3 * 11 + 10 - r], h4[r], 6e-8 * std::fabs(h4[r]) + 1e-15) << "h=4 r=" << r;
  }
  // dbar = 32 (the tiny model's head dim), h = 1 of H = 4.
  const int64_t r32[] = {0, 1, 2, 5, 10, 63, 64, 128};
  const double b32[] = {0, -0.11332656, -0.42685798, -1.7531397, -2.0510012, -3.5692549, -3.3977837, -5.1880472};
  for (int i = 0; i < 8; ++i)
    EXPECT_NEAR(0.5 * (sandwich_base(r32[i], 32) - 16.0), b32[i], 6e-8 * std::fabs(b32[i]) + 1e-15) << r32[i];
  EXPECT_THROW(sandwich_base(0, 7), ValueError);
}

TEST(Sandwich, EncodingUsesHeadDimByDefault) {
  Generator g(0);
  PosEncConfig c;
  c.kind = "sandwich";
  c.n_embd = 32;
  c.n_head = 4;  // D = 8 = dbar
  c.dtype = DType::Float64;
  auto pe = make_position_encoding(c, g);
  EXPECT_EQ(pe->num_parameters(), 0);
  for (bool causal : {true, false}) {
    c.causal = causal;
    auto m = make_position_encoding(c, g)->scores(0, {}, 4, 4, 0);
    ASSERT_EQ(m.kind, ScoreBias::Distance);
    const Tensor want = sandwich_bias_by_distance(8, 4, 4, 4, 0, DType::Float64, Device::cpu());
    EXPECT_EQ(m.bias_by_distance.to_vector(), want.to_vector());
  }
  c.set("sandwich_dbar", int64_t{32});
  const auto m = make_position_encoding(c, g)->scores(0, {}, 1, 2, 1);  // r = -1, 0
  EXPECT_NEAR(m.bias_by_distance.to_vector()[0], -0.11332656, 5e-8);
  c.set("sandwich_dbar", int64_t{5});
  EXPECT_THROW(make_position_encoding(c, g), ValueError);
}

// ---- sinusoidal / learned (spec §7.5, §5.2) -----------------------------------------------------

TEST(Sinusoidal, SpecTestVector) {
  const std::vector<double> e = {0.841470985, 0.540302306, 0.099833417, 0.995004165,
                                 0.009999833, 0.999950000, 0.001000000, 0.999999500};
  auto t = sinusoidal_table(0, 2, 8, DType::Float64).to_vector();
  for (int i = 0; i < 8; ++i) {
    EXPECT_NEAR(t[8 + i], e[i], 1e-9) << i;
    EXPECT_EQ(t[i], i % 2 ? 1.0 : 0.0);  // position 0: sin 0, cos 0
  }
  auto t1 = sinusoidal_table(1, 1, 8, DType::Float64).to_vector();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(t1[i], t[8 + i]);
  auto odd = sinusoidal_table(3, 1, 5, DType::Float64).to_vector();  // odd C: last channel is a sine
  EXPECT_NEAR(odd[4], std::sin(3 * std::pow(10000.0, -4.0 / 5.0)), 1e-15);
}

TEST(Sinusoidal, EmbedScalesTokensAndAddsTable) {
  Generator g(0);
  PosEncConfig c;
  c.kind = "sinusoidal";
  c.n_embd = 8;
  c.n_head = 2;
  auto pe = make_position_encoding(c, g);
  EXPECT_EQ(pe->num_parameters(), 0);
  Tensor x = Tensor::ones({1, 3, 8}, DType::Float64);
  auto y = pe->embed(x, 1000).to_vector();  // far beyond block_size: sinusoidal extrapolates
  auto t = sinusoidal_table(1000, 3, 8, DType::Float64).to_vector();
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], std::sqrt(8.0) + t[i], 1e-12);
  c.set("sinusoidal_scale_embedding", false);
  auto pe2 = make_position_encoding(c, g);
  EXPECT_NEAR(pe2->embed(x, 0).to_vector()[1], 2.0, 1e-12);  // 1 + cos 0
}

TEST(Learned, PositionBeyondTableIsAnError) {
  Generator g(0);
  PosEncConfig c;
  c.kind = "learned";
  c.n_embd = 8;
  c.n_head = 2;
  c.block_size = 16;
  auto pe = make_position_encoding(c, g);
  EXPECT_EQ(pe->max_length(), 16);
  ASSERT_EQ(pe->named_parameters().size(), 1u);
  EXPECT_EQ(pe->named_parameters()[0].first, "weight");
  EXPECT_EQ(pe->named_parameters()[0].second.shape(), (Shape{16, 8}));
  Tensor x = Tensor::zeros({2, 10, 8});
  EXPECT_NO_THROW(pe->embed(x, 6));  // positions 6..15
  try {
    pe->embed(x, 7);  // positions 7..16
    FAIL() << "expected IndexError";
  } catch (const IndexError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("position 16"), std::string::npos) << m;
    EXPECT_NE(m.find("16 positions"), std::string::npos) << m;
  }
  EXPECT_THROW(pe->embed(Tensor::zeros({1, 17, 8}), 0), IndexError);
  EXPECT_THROW(pe->embed(x, -1), IndexError);
  // Initialisation N(0, 0.02).
  auto w = pe->named_parameters()[0].second.to_vector();
  double ss = 0;
  for (double v : w) ss += v * v;
  EXPECT_NEAR(std::sqrt(ss / double(w.size())), 0.02, 0.005);
}

// ---- the registry --------------------------------------------------------------------------------

TEST(Registry, EveryKindAndUnknownKind) {
  const std::vector<std::string> expect = {"none",   "sinusoidal", "learned", "t5",   "deberta", "rope", "alibi",
                                           "kerple", "sandwich",   "xpos",    "fire", "hybrid",  "fox",  "cope"};
  EXPECT_EQ(position_encoding_kinds(), expect);
  for (const auto& k : expect) {
    Generator g(0);
    PosEncConfig c;
    c.kind = k;
    auto pe = make_position_encoding(c, g);
    EXPECT_EQ(pe->kind(), k);
    EXPECT_TRUE(pe->causal());
  }
  Generator g(0);
  PosEncConfig c;
  c.kind = "rotary";
  try {
    make_position_encoding(c, g);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'rotary'"), std::string::npos) << m;
    EXPECT_NE(m.find("none|sinusoidal|learned|t5|deberta|rope|alibi"), std::string::npos) << m;
  }
  c.kind = "t5";
  c.n_embd = 10;
  c.n_head = 4;
  EXPECT_THROW(make_position_encoding(c, g), ValueError);
}

TEST(Registry, ScalesParametersAndOptions) {
  Generator g(0);
  PosEncConfig c;
  c.n_embd = 16;
  c.n_head = 4;
  c.n_layer = 3;
  c.kind = "t5";
  auto t5 = make_position_encoding(c, g);
  EXPECT_DOUBLE_EQ(t5->attention_scale(4), 0.5);
  ASSERT_EQ(t5->named_parameters().size(), 1u);
  EXPECT_EQ(t5->named_parameters()[0].first, "relative_attention_bias");
  EXPECT_EQ(t5->named_parameters()[0].second.shape(), (Shape{32, 4}));
  c.set("t5_scaled", false);
  c.set("t5_shared_layers", false);
  auto t5b = make_position_encoding(c, g);
  EXPECT_DOUBLE_EQ(t5b->attention_scale(4), 1.0);
  EXPECT_EQ(t5b->named_parameters().size(), 3u);
  EXPECT_EQ(t5b->named_parameters()[2].first, "relative_attention_bias_2");
  EXPECT_THROW(t5b->scores(3, {}, 8, 8, 0), IndexError);

  c.kind = "deberta";
  auto deb = make_position_encoding(c, g);
  EXPECT_DOUBLE_EQ(deb->attention_scale(4), 1.0 / std::sqrt(12.0));
  auto names = deb->named_parameters();
  ASSERT_EQ(names.size(), 3u);
  EXPECT_EQ(names[0].first, "rel_embeddings");
  EXPECT_EQ(names[0].second.shape(), (Shape{64, 16}));
  EXPECT_EQ(names[1].first, "rel_norm.weight");
  EXPECT_THROW(deb->scores(0, {}, 8, 8, 0), ValueError);  // share_att_key needs the layer's projections
  c.set("deberta_share_att_key", false);
  c.set("deberta_p2c", false);
  c.set("deberta_layer_norm", false);
  auto deb2 = make_position_encoding(c, g);
  EXPECT_DOUBLE_EQ(deb2->attention_scale(4), 1.0 / std::sqrt(8.0));
  EXPECT_EQ(deb2->named_parameters().size(), 1u + 2u * 3u);  // table + pos_key_proj.{0,1,2}.{weight,bias}
  EXPECT_EQ(deb2->named_parameters()[1].first, "pos_key_proj.0.weight");
  c.set("deberta_c2p", false);
  EXPECT_THROW(make_position_encoding(c, g), ValueError);

  c.kind = "alibi";
  auto al = make_position_encoding(c, g);
  auto m = al->scores(0, {}, 8, 8, 0);
  EXPECT_EQ(m.kind, ScoreBias::Distance);
  ASSERT_EQ(m.bias_by_distance.shape(), (Shape{4, 15}));  // (H, 2T - 1)
  const auto bias = m.bias_by_distance.to_vector();
  const auto slopes = alibi_slopes(4);
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t d = 0; d < 15; ++d)  // relative position d - 7; float32 of -m_h |r|
      EXPECT_EQ(bias[h * 15 + d], double(float(-slopes[h] * std::fabs(double(d - 7))))) << h << " " << d;
  EXPECT_EQ(al->num_parameters(), 0);
}

// ---- every encoding's parameter gradients inside two attention layers (finite differences) ------

struct GradCase {
  std::string name;
  PosEncConfig cfg;
};

std::vector<GradCase> grad_cases() {
  auto base = [](const std::string& kind) {
    PosEncConfig c;
    c.kind = kind;
    c.n_embd = 6;
    c.n_head = 3;
    c.n_layer = 2;
    c.block_size = 12;
    c.dtype = DType::Float64;
    c.set("t5_num_buckets", int64_t{6});
    c.set("t5_max_distance", int64_t{8});
    c.set("deberta_position_buckets", int64_t{4});
    c.set("deberta_max_relative_positions", int64_t{6});
    return c;
  };
  std::vector<GradCase> v;
  for (const std::string& k : position_encoding_kinds()) v.push_back({k, base(k)});
  GradCase t5l{"t5_per_layer_unscaled_bidir", base("t5")};
  t5l.cfg.set("t5_shared_layers", false);
  t5l.cfg.set("t5_scaled", false);
  t5l.cfg.causal = false;
  v.push_back(t5l);
  GradCase deb{"deberta_own_projections_no_ln", base("deberta")};
  deb.cfg.set("deberta_share_att_key", false);
  deb.cfg.set("deberta_layer_norm", false);
  v.push_back(deb);
  GradCase deb2{"deberta_c2p_only_bidir", base("deberta")};
  deb2.cfg.set("deberta_p2c", false);
  deb2.cfg.causal = false;
  v.push_back(deb2);
  GradCase rope{"rope_interleaved_yarn", base("rope")};
  rope.cfg.set("rope_interleaved", true);
  rope.cfg.set("rope_scaling", std::string("yarn"));
  rope.cfg.set("rope_scaling_factor", 2.0);
  v.push_back(rope);
  return v;
}

void PrintTo(const GradCase& c, std::ostream* os) { *os << c.name; }

class EncodingGradients : public ::testing::TestWithParam<GradCase> {};

TEST_P(EncodingGradients, MatchFiniteDifferences) {
  const PosEncConfig& cfg = GetParam().cfg;
  Generator gen(21);
  auto pe = make_position_encoding(cfg, gen);
  nn::CausalSelfAttention l0(6, 3, true, gen, 0.3, DType::Float64), l1(6, 3, true, gen, 0.3, DType::Float64);
  // Larger weights than the 0.02 init, so that attention is far from uniform.
  for (auto* m : {&l0, &l1})
    for (auto& [n, p] : m->named_parameters()) {
      Generator gp(n.size() + 7);
      Tensor r = randn(p.shape(), gp, DType::Float64, Device::cpu(), 0.0, 0.5);
      assign_data(p, r);
    }
  Generator gx(22);
  const int64_t pos0 = 3;
  Tensor x0 = randn({2, 9, 6}, gx, DType::Float64), r = randn({2, 9, 6}, gx, DType::Float64);
  auto loss = [&]() {
    Tensor x = pe->embed(x0, pos0);
    Tensor y = l1.forward(x + l0.forward(x, *pe, 0, pos0), *pe, 1, pos0);
    return sum(y * r);
  };
  loss().backward();
  std::vector<std::pair<std::string, Tensor>> params;
  for (auto& [n, p] : pe->named_parameters()) params.push_back({"pos." + n, p});
  for (auto& [n, p] : l0.named_parameters()) params.push_back({"l0." + n, p});
  int checked = 0;
  for (auto& [name, p] : params) {
    ASSERT_TRUE(p.grad().defined()) << name;
    auto g = p.grad().to_vector();
    double* d = p.data<double>();
    const int64_t n = p.numel(), stride = std::max<int64_t>(1, n / 24);  // at most ~24 elements per tensor
    for (int64_t i = 0; i < n; i += stride) {
      const double orig = d[i], eps = 1e-6;
      double fp, fm;
      {
        NoGradGuard ng;
        d[i] = orig + eps;
        fp = loss().item();
        d[i] = orig - eps;
        fm = loss().item();
        d[i] = orig;
      }
      const double num = (fp - fm) / (2 * eps);
      EXPECT_NEAR(g[i], num, 1e-6 + 1e-4 * std::fabs(num)) << GetParam().name << " " << name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(All, EncodingGradients, ::testing::ValuesIn(grad_cases()),
                         [](const ::testing::TestParamInfo<GradCase>& i) { return i.param.name; });

}  // namespace
