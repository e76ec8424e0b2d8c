// test_nn_ops.cpp — behaviour of the nn ops beyond the op registry's gradchecks: error messages
// (shapes, ids, targets), the all-ignored cross-entropy, transposed matmul operands going to
// GEMM without a copy, float32-vs-double agreement of a larger matmul, numerical stability, and
// bit-identical parameter gradients across thread counts.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>

#include "autograd/ops.h"
#include "nn/gpt.h"
#include "tensor/storage.h"

using namespace posgrad;

namespace {

// Runs f, expects an exception of type E whose message contains every one of `parts`.
template <typename E, typename F>
void expect_error(F f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception thrown";
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "message '" << msg << "' lacks '" << p << "'";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector(), y = b.to_vector();
  EXPECT_EQ(x.size(), y.size());
  double m = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector(), y = b.to_vector();
  return x == y;
}

Tensor leaf(const Shape& s, uint64_t seed, DType t = DType::Float64, double lo = -1, double hi = 1) {
  Generator g(seed);
  Tensor x = rand(s, g, t, Device::cpu(), lo, hi);
  x.set_requires_grad(true);
  return x;
}

// ---- error messages ------------------------------------------------------------------------------

TEST(NnOpsErrors, MatmulInnerMismatchNamesShapes) {
  Tensor a = Tensor::zeros({3, 4}), b = Tensor::zeros({5, 6});
  expect_error<ShapeError>([&] { matmul(a, b); }, {"(3, 4)", "(5, 6)"});
}

TEST(NnOpsErrors, MatmulBatchMismatchNamesShapes) {
  Tensor a = Tensor::zeros({2, 3, 4}), b = Tensor::zeros({5, 4, 6});
  expect_error<ShapeError>([&] { matmul(a, b); }, {"(2, 3, 4)", "(5, 4, 6)"});
}

TEST(NnOpsErrors, MatmulVectorAndDtype) {
  expect_error<ShapeError>([&] { matmul(Tensor::zeros({3, 4}), Tensor::zeros({4})); }, {"(4,)"});
  expect_error<DTypeError>(
      [&] {
        matmul(Tensor::zeros({3, 4}), Tensor::zeros({4, 2}, DType::Float64));
      },
      {"float32", "float64"});
}

TEST(NnOpsErrors, LinearMismatchNamesShapes) {
  expect_error<ShapeError>([&] { linear(Tensor::zeros({2, 7}), Tensor::zeros({5, 6})); }, {"(2, 7)", "(5, 6)"});
  expect_error<ShapeError>(
      [&] {
        linear(Tensor::zeros({2, 6}), Tensor::zeros({5, 6}), Tensor::zeros({4}));
      },
      {"(4,)", "(5, 6)"});
}

TEST(NnOpsErrors, NormParamShape) {
  expect_error<ShapeError>([&] { layer_norm(Tensor::zeros({2, 7}), Tensor::ones({6}), Tensor()); }, {"(6,)", "(2, 7)"});
  expect_error<ShapeError>([&] { rms_norm(Tensor::zeros({2, 7}), Tensor::ones({8})); }, {"(8,)", "(2, 7)"});
}

TEST(NnOpsErrors, EmbeddingOutOfRangeNamesIdVocabAndPosition) {
  Tensor table = Tensor::zeros({10, 4});
  Tensor idx = Tensor::from_ints({1, 2, 3, 4, 57, 5}, {2, 3});
  expect_error<IndexError>([&] { embedding(table, idx); }, {"57", "10", "(1, 1)"});
  expect_error<IndexError>([&] { embedding(table, Tensor::from_ints({-1}, {1})); }, {"-1", "10"});
  expect_error<DTypeError>([&] { embedding(table, Tensor::zeros({3})); }, {"int64"});
}

TEST(NnOpsErrors, CrossEntropyTargetOutOfRange) {
  Tensor logits = Tensor::zeros({4, 5});
  expect_error<IndexError>([&] { cross_entropy(logits, Tensor::from_ints({0, 1, 5, 2}, {4})); }, {"5", "row 2"});
  expect_error<IndexError>([&] { cross_entropy(logits, Tensor::from_ints({0, -3, 1, 2}, {4})); }, {"-3"});
  expect_error<ShapeError>([&] { cross_entropy(logits, Tensor::from_ints({0, 1, 2}, {3})); }, {"(3,)", "(4, 5)"});
}

TEST(NnOpsErrors, CatMismatchNamesIndexAndShapes) {
  TensorList xs{Tensor::zeros({2, 3}), Tensor::zeros({4, 3}), Tensor::zeros({1, 5})};
  expect_error<ShapeError>([&] { cat(xs, 0); }, {"tensor 2", "(1, 5)", "(2, 3)"});
  expect_error<ShapeError>(
      [&] {
        cat({Tensor::zeros({2, 3}), Tensor::zeros({2, 3, 1})}, 0);
      },
      {"tensor 1", "(2, 3, 1)"});
  expect_error<ShapeError>([&] { cat({}, 0); }, {"at least one"});
}

TEST(NnOpsErrors, SplitSizesMustSum) {
  expect_error<ShapeError>([&] { split(Tensor::zeros({3, 7}), std::vector<int64_t>{2, 2}, 1); }, {"4", "(3, 7)"});
  expect_error<ValueError>([&] { split(Tensor::zeros({3, 7}), int64_t{0}, 1); }, {"0"});
}

TEST(NnOpsErrors, SplitHeadsNamesTheBadShape) {
  expect_error<ShapeError>([&] { split_heads(Tensor::zeros({4, 12}), 3, 2); }, {"(4, 12)", "(B, T, parts * C)"});
  expect_error<ShapeError>([&] { split_heads(Tensor::zeros({2, 4, 10}), 3, 1); }, {"10", "(2, 4, 10)", "3 parts"});
  expect_error<ShapeError>([&] { split_heads(Tensor::zeros({2, 4, 12}), 3, 8); }, {"12", "8 equal heads"});
  expect_error<ValueError>([&] { split_heads(Tensor::zeros({2, 4, 12}), 0, 2); }, {"0"});
  expect_error<ValueError>([&] { split_heads(Tensor::zeros({2, 4, 12}), 3, 0); }, {"0"});
}

// ---- cross-entropy edge cases -------------------------------------------------------------------

TEST(NnOps, CrossEntropyAllIgnoredIsZeroLossZeroGrad) {
  Tensor logits = leaf({3, 4, 6}, 1);
  Tensor targets = Tensor::from_ints(std::vector<int64_t>(12, -100), {3, 4});
  Tensor loss = cross_entropy(logits, targets);
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_EQ(loss.item(), 0.0);
  loss.backward();
  ASSERT_TRUE(logits.grad().defined());
  for (double g : logits.grad().to_vector()) EXPECT_EQ(g, 0.0);
}

TEST(NnOps, CrossEntropyRowsShapeAndIgnoredZero) {
  Tensor logits = leaf({2, 3, 5}, 2);
  Tensor targets = Tensor::from_ints({0, -100, 4, 1, 2, -100}, {2, 3});
  Tensor rows = cross_entropy_rows(logits, targets);
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  auto v = rows.to_vector();
  EXPECT_EQ(v[1], 0.0);
  EXPECT_EQ(v[5], 0.0);
  // The mean is the mean of the non-ignored row losses.
  double s = v[0] + v[2] + v[3] + v[4];
  EXPECT_NEAR(cross_entropy(logits, targets).item(), s / 4, 1e-12);
}

TEST(NnOps, CrossEntropyStableForHugeLogits) {
  Tensor logits = Tensor::from_vector(std::vector<double>{1000, 0, -1000, 1e4, 1e4 - 1, 0}, {2, 3}, DType::Float32);
  logits.set_requires_grad(true);
  Tensor loss = cross_entropy(logits, Tensor::from_ints({0, 1}, {2}));
  EXPECT_TRUE(std::isfinite(loss.item()));
  // lse - logit at magnitude 1e4 keeps float32's absolute precision there (ulp ~1e-3), no worse.
  EXPECT_NEAR(loss.item(), (0.0 + (1.0 + std::log1p(std::exp(-1.0)))) / 2, 2e-3);
  loss.backward();
  for (double g : logits.grad().to_vector()) EXPECT_TRUE(std::isfinite(g));
}

TEST(NnOps, SoftmaxStableForHugeInputs) {
  Tensor x = Tensor::from_vector(std::vector<double>{1000, 1000, -1000, 3e4, 0, 0}, {2, 3}, DType::Float32);
  auto p = softmax(x).to_vector();
  EXPECT_NEAR(p[0], 0.5, 1e-6);
  EXPECT_NEAR(p[1], 0.5, 1e-6);
  EXPECT_EQ(p[2], 0.0);
  EXPECT_NEAR(p[3], 1.0, 1e-6);
  auto lp = log_softmax(x).to_vector();
  for (double v : lp) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NEAR(lp[2], -2000 - std::log(2.0), 1e-2);
}

// ---- matmul layout ------------------------------------------------------------------------------

TEST(NnOps, MatmulTransposedViewsMatchContiguous) {
  // q @ k^T with k^T a transposed view, and a^T @ b with a^T a view; compare with copies.
  Tensor q = leaf({2, 3, 7, 5}, 3), k = leaf({2, 3, 9, 5}, 4);
  Tensor y_view = matmul(q, k.transpose(-2, -1));
  Tensor y_copy = matmul(q, k.transpose(-2, -1).contiguous());
  EXPECT_LE(max_abs_diff(y_view, y_copy), 1e-13);

  Generator g(5);
  Tensor r = randn(y_view.shape(), g, DType::Float64);
  y_view.backward(r);
  Tensor dq1 = q.grad(), dk1 = k.grad();
  q.zero_grad();
  k.zero_grad();
  y_copy.backward(r);
  EXPECT_LE(max_abs_diff(dq1, q.grad()), 1e-13);
  EXPECT_LE(max_abs_diff(dk1, k.grad()), 1e-13);

  Tensor a = leaf({13, 7}, 6), b = leaf({13, 5}, 7);
  EXPECT_LE(max_abs_diff(matmul(a.t(), b), matmul(a.t().contiguous(), b)), 1e-13);
}

TEST(NnOps, MatmulTransposedViewIsNotCopied) {
  NoGradGuard ng;
  Tensor a = leaf({65, 129}, 8).detach(), b = leaf({33, 129}, 9).detach();  // b^T (129, 33) as a view
  matmul(a, b.t());  // warm-up (GEMM packing buffers, if any, are allocated once)
  DeviceBackend& be = backend(DeviceType::CPU);
  be.reset_peak();
  const size_t before = be.current_bytes();
  Tensor y = matmul(a, b.t());
  const size_t grown = be.peak_bytes() - before;
  const size_t out_bytes = 65 * 33 * sizeof(double), b_bytes = 33 * 129 * sizeof(double);
  EXPECT_LT(grown, out_bytes + b_bytes / 2) << "a copy of the transposed operand was made";
  EXPECT_LE(max_abs_diff(y, matmul(a, b.t().contiguous())), 1e-12);
}

TEST(NnOps, MatmulFloatMatchesDouble65x129x33) {
  Tensor a64 = leaf({65, 129}, 10), b64 = leaf({129, 33}, 11);
  Tensor a32 = a64.detach().to(DType::Float32), b32 = b64.detach().to(DType::Float32);
  a32.set_requires_grad(true);
  b32.set_requires_grad(true);
  Tensor y64 = matmul(a64, b64), y32 = matmul(a32, b32);
  EXPECT_EQ(y32.dtype(), DType::Float32);
  EXPECT_LE(max_abs_diff(y64, y32), 1e-4);
  Generator g(12);
  Tensor r = randn({65, 33}, g, DType::Float64);
  y64.backward(r);
  y32.backward(r.to(DType::Float32));
  EXPECT_LE(max_abs_diff(a64.grad(), a32.grad()), 1e-4);
  EXPECT_LE(max_abs_diff(b64.grad(), b32.grad()), 1e-4);
  // And the double result against a plain triple loop.
  auto av = a64.to_vector(), bv = b64.to_vector(), yv = y64.to_vector();
  double err = 0;
  for (int m = 0; m < 65; ++m)
    for (int n = 0; n < 33; ++n) {
      double s = 0;
      for (int k = 0; k < 129; ++k) s += av[m * 129 + k] * bv[k * 33 + n];
      err = std::max(err, std::fabs(s - yv[m * 33 + n]));
    }
  EXPECT_LE(err, 1e-12);
}

TEST(NnOps, LinearMatchesMatmulWithTransposedWeight) {
  Tensor x = leaf({4, 6, 17}, 13), w = leaf({9, 17}, 14), b = leaf({9}, 15);
  Tensor y = linear(x, w, b);
  Tensor ref = matmul(x, w.t()) + b;
  EXPECT_LE(max_abs_diff(y, ref), 1e-13);
}

// linear_residual on the CPU adds the residual inside the product: the bits of residual + linear, forward
// and every gradient, in float (where the fusion runs the production path) and double; a residual that
// broadcasts takes the two ops; an undefined one is refused by name.
TEST(NnOps, LinearResidualHasTheBitsOfTheAddAfterTheProduct) {
  struct Case {
    Shape x;
    int64_t out;
    bool bias;
    DType t;
  };
  const Case cases[] = {{{12, 64, 128}, 128, true, DType::Float32}, {{768, 512}, 128, true, DType::Float32},
                        {{3, 7, 13}, 5, false, DType::Float32},     {{3, 7, 13}, 5, true, DType::Float64},
                        {{4, 0, 9}, 6, true, DType::Float32},       {{2, 5, 0}, 6, true, DType::Float32}};
  uint64_t seed = 100;
  for (const Case& c : cases) {
    Shape ys = c.x;
    ys.back() = c.out;
    const auto make = [&] {
      TensorList l{leaf(c.x, seed, c.t), leaf({c.out, c.x.back()}, seed + 1, c.t),
                   c.bias ? leaf({c.out}, seed + 2, c.t) : Tensor(), leaf(ys, seed + 3, c.t)};
      return l;
    };
    TensorList fused = make(), composed = make();
    const Tensor y1 = linear_residual(fused[0], fused[1], fused[2], fused[3]);
    const Tensor y2 = composed[3] + linear(composed[0], composed[1], composed[2]);
    EXPECT_TRUE(bit_equal(y1, y2)) << shape_str(c.x);
    Generator g(seed + 4);
    const Tensor dy = randn(ys, g, c.t);
    y1.backward(dy);
    y2.backward(dy);
    for (size_t i = 0; i < fused.size(); ++i)
      if (fused[i].defined()) EXPECT_TRUE(bit_equal(fused[i].grad(), composed[i].grad())) << "input " << i;
    seed += 10;
  }
  // A residual of another shape broadcasts through the add op; a mismatch is the add's error.
  Tensor x = leaf({2, 3, 4}, 1, DType::Float32), w = leaf({5, 4}, 2, DType::Float32), r = leaf({5}, 3, DType::Float32);
  EXPECT_TRUE(bit_equal(linear_residual(x, w, Tensor(), r), r + linear(x, w)));
  expect_error<ShapeError>([&] { linear_residual(x, w, Tensor(), leaf({2, 3, 6}, 4, DType::Float32)); }, {"(2, 3, 6)"});
  expect_error<ValueError>([&] { linear_residual(x, w, Tensor(), Tensor()); }, {"linear_residual", "undefined"});
}

// A GPT block without dropout (or in evaluation) adds its residuals inside the output projections: the
// bits of the two ops it replaces, for the output and every parameter's gradient.
TEST(NnOps, GptBlockResidualsInsideTheProjectionsKeepTheBits) {
  for (const std::string kind : {"learned", "rope", "deberta"}) {
    nn::GPTConfig cfg;
    cfg.vocab_size = 11;
    cfg.block_size = 16;
    cfg.n_layer = 1;
    cfg.n_head = 2;
    cfg.n_embd = 24;
    cfg.pos.kind = kind;
    Generator g(3), d(4);
    nn::GPT model(cfg, g, d);
    const nn::Block& block = (*model.blocks)[0];
    ASSERT_TRUE(block.drop->is_identity());
    Tensor x0 = leaf({2, 16, 24}, 9, DType::Float32);
    Generator gy(10);
    const Tensor dy = randn({2, 16, 24}, gy);
    const auto grads = [&] {
      TensorList out;
      for (const auto& [name, p] : model.named_parameters())
        out.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
      return out;
    };
    model.zero_grad();
    const Tensor y1 = block.forward(x0, model.position_encoding(), 0, 0);
    y1.backward(dy);
    const TensorList g1 = grads();
    const Tensor gx1 = x0.grad().clone();
    model.zero_grad();
    x0.zero_grad();
    const Tensor h = x0 + block.attn->forward(block.ln_1->forward(x0), model.position_encoding(), 0, 0);
    const Tensor y2 = h + block.proj->forward(gelu(block.fc->forward(block.ln_2->forward(h))));
    y2.backward(dy);
    const TensorList g2 = grads();
    EXPECT_TRUE(bit_equal(y1, y2)) << kind;
    EXPECT_TRUE(bit_equal(gx1, x0.grad())) << kind;
    ASSERT_EQ(g1.size(), g2.size());
    for (size_t i = 0; i < g1.size(); ++i)
      if (g1[i].defined() || g2[i].defined()) EXPECT_TRUE(bit_equal(g1[i], g2[i])) << kind << " parameter " << i;
  }
}

// ---- determinism across thread counts -----------------------------------------------------------

TEST(NnOps, ParamGradsBitIdenticalAcrossThreadCounts) {
  const int saved = omp_get_max_threads();
  auto run = [](int threads) {
    omp_set_num_threads(threads);
    Tensor x = leaf({64, 33, 130}, 16, DType::Float32), w = leaf({130}, 17, DType::Float32),
           b = leaf({130}, 18, DType::Float32);
    Tensor table = leaf({50, 130}, 19, DType::Float32);
    std::vector<int64_t> ids(64 * 33);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7) % 50);
    Tensor e = embedding(table, Tensor::from_ints(ids, {64, 33}));
    Tensor y = layer_norm(x + e, w, b) + rms_norm(x, w);
    Generator g(20);
    y.backward(randn(y.shape(), g));
    return TensorList{x.grad(), w.grad(), b.grad(), table.grad()};
  };
  TensorList one = run(1), two = run(std::max(2, saved));
  omp_set_num_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(bit_equal(one[i], two[i])) << "gradient " << i;
}

TEST(NnOps, EmbeddingBackwardSumsRepeatedIds) {
  Tensor table = leaf({5, 3}, 21);
  Tensor y = embedding(table, Tensor::from_ints({2, 2, 4, 2}, {4}));
  y.backward(Tensor::ones({4, 3}, DType::Float64));
  auto g = table.grad().to_vector();
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(g[2 * 3 + c], 3.0);
    EXPECT_EQ(g[4 * 3 + c], 1.0);
    EXPECT_EQ(g[0 * 3 + c], 0.0);
  }
}

// split_heads is the split into thirds then reshape (B, T, H, D) and permute (0, 2, 1, 3): the same
// values and the same gradient, bit for bit, also from a non-contiguous input. On the CPU its parts
// are views of x (the fused attention reads the heads where they are), elsewhere one copy each.
TEST(NnOps, SplitHeadsEqualsSplitReshapePermute) {
  const int64_t B = 2, T = 5, H = 3, D = 4, C = H * D;
  Tensor x = leaf({B, T, 3 * C}, 23);
  Tensor xt = leaf({B, 3 * C, T}, 24);  // used as xt^T: strides (3C T, 1, T)
  Generator g(25);
  const TensorList w{randn({B, H, T, D}, g, DType::Float64), randn({B, H, T, D}, g, DType::Float64),
                     randn({B, H, T, D}, g, DType::Float64)};
  for (const bool strided : {false, true}) {
    // A fresh view for each of the two graphs (a view's node is backpropagated once).
    auto input = [&] { return strided ? xt.transpose(1, 2) : x; };
    const TensorList fused = split_heads(input(), 3, H);
    Tensor loss_fused = sum(fused[0] * w[0]) + sum(fused[1] * w[1]) + sum(fused[2] * w[2]);
    loss_fused.backward();
    Tensor leaf_in = strided ? xt : x;
    const Tensor g_fused = leaf_in.grad().clone();
    leaf_in.zero_grad();
    const TensorList thirds = split(input(), std::vector<int64_t>{C, C, C}, 2);
    Tensor loss_ref;
    for (int p = 0; p < 3; ++p) {
      const Tensor ref = thirds[p].reshape({B, T, H, D}).permute({0, 2, 1, 3});
      EXPECT_TRUE(fused[p].shares_storage(leaf_in)) << "part " << p << ": a view of x on the CPU";
      EXPECT_EQ(fused[p].shape(), (Shape{B, H, T, D}));
      EXPECT_TRUE(bit_equal(fused[p], ref.contiguous())) << "part " << p << (strided ? " strided" : "");
      Tensor term = sum(ref * w[p]);
      loss_ref = p == 0 ? term : loss_ref + term;
    }
    loss_ref.backward();
    EXPECT_TRUE(bit_equal(g_fused, leaf_in.grad())) << (strided ? "strided" : "contiguous");
  }
}

TEST(NnOps, SplitThenCatRoundTrip) {
  Tensor x = leaf({3, 10, 4}, 22);
  TensorList parts = split(x, int64_t{4}, 1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].shape(), (Shape{3, 2, 4}));
  EXPECT_TRUE(bit_equal(cat(parts, 1), x));
  // Gradient only through the middle part: the others get zeros.
  sum(parts[1]).backward();
  auto g = x.grad().to_vector();
  for (int64_t i = 0; i < 3 * 10 * 4; ++i) {
    const int64_t row = (i / 4) % 10;
    EXPECT_EQ(g[i], row >= 4 && row < 8 ? 1.0 : 0.0) << i;
  }
}

}  // namespace
