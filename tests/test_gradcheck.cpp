// test_gradcheck.cpp — the public finite-difference checker: it passes correct ops, FAILS a
// deliberately wrong backward (tiny Functions with wrong backwards are defined below) and names the
// worst element, prefers a failing element over a passing one with a larger absolute error when
// it reports, checks only inputs that require grad, and never touches the caller's tensors.
// Not here: the sweep of every registered op (test_op_registry).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "autograd/function.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "support/test_util.h"
#include "tensor/random.h"

using namespace posgrad;

namespace {

// y = x^2 elementwise (double only), with a backward that is right except at flat index
// `bad_index`, where it adds `error` to the gradient.
struct SquareWithWrongElementFn : Function<SquareWithWrongElementFn> {
  static constexpr const char* kName = "square_with_wrong_element";
  struct Saved {
    Tensor x;
    int64_t bad_index = -1;
    double error = 0;
  };
  static Tensor forward(Context<Saved>& ctx, const Tensor& x, int64_t bad_index, double error) {
    Tensor xc = x.contiguous();
    Tensor y = Tensor::empty(x.shape(), DType::Float64);
    for (int64_t i = 0; i < x.numel(); ++i) y.data<double>()[i] = xc.data<double>()[i] * xc.data<double>()[i];
    ctx.saved = {save_tensor(xc), bad_index, error};
    return y;
  }
  static TensorList backward(Context<Saved>& ctx, const TensorList& g) {
    Tensor dy = g[0].contiguous();
    Tensor dx = Tensor::zeros(dy.shape(), DType::Float64);
    for (int64_t i = 0; i < dx.numel(); ++i) {
      dx.data<double>()[i] = 2 * ctx.saved.x.data<double>()[i] * dy.data<double>()[i];
      if (i == ctx.saved.bad_index) dx.data<double>()[i] += ctx.saved.error;
    }
    return {dx};
  }
};

// y = a * x elementwise with a fixed per-element scale a; the backward returns
// a * dy * (1 + rel) + abs_err[i].
struct ScaleWithErrorsFn : Function<ScaleWithErrorsFn> {
  static constexpr const char* kName = "scale_with_errors";
  struct Saved {
    std::vector<double> a, abs_err;
    double rel = 0;
  };
  static Tensor forward(Context<Saved>& ctx, const Tensor& x, const std::vector<double>& a, double rel,
                        const std::vector<double>& abs_err) {
    Tensor xc = x.contiguous();
    Tensor y = Tensor::empty(x.shape(), DType::Float64);
    for (int64_t i = 0; i < x.numel(); ++i) y.data<double>()[i] = a[i] * xc.data<double>()[i];
    ctx.saved = {a, abs_err, rel};
    return y;
  }
  static TensorList backward(Context<Saved>& ctx, const TensorList& g) {
    Tensor dy = g[0].contiguous();
    Tensor dx = Tensor::zeros(dy.shape(), DType::Float64);
    for (int64_t i = 0; i < dx.numel(); ++i)
      dx.data<double>()[i] = ctx.saved.a[i] * dy.data<double>()[i] * (1 + ctx.saved.rel) + ctx.saved.abs_err[i];
    return {dx};
  }
};

// A binary op whose backward forgets the second input entirely (returns no gradient for it).
struct ForgetsSecondInputFn : Function<ForgetsSecondInputFn> {
  static constexpr const char* kName = "forgets_second_input";
  struct Saved {};
  static Tensor forward(Context<Saved>&, const Tensor& a, const Tensor& b) {
    Tensor y = Tensor::empty(a.shape(), DType::Float64);
    Tensor ac = a.contiguous(), bc = b.contiguous();
    for (int64_t i = 0; i < a.numel(); ++i) y.data<double>()[i] = ac.data<double>()[i] + 3 * bc.data<double>()[i];
    return y;
  }
  static TensorList backward(Context<Saved>&, const TensorList& g) { return {g[0], Tensor()}; }
};

Tensor input(const Shape& s, uint64_t seed, bool requires_grad = true) {
  Generator gen(seed);
  Tensor t = randn(s, gen, DType::Float64);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

TEST(Gradcheck, PassesCorrectOps) {
  Tensor a = input({3, 7}, 1), b = input({7}, 2);
  GradcheckResult r = gradcheck([](const TensorList& x) { return tanh(x[0] * x[1]) + exp(x[1] * 0.5); }, {a, b});
  EXPECT_TRUE(r.ok) << r.summary();
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.inputs[0].input, 0u);
  EXPECT_EQ(r.inputs[0].shape, (Shape{3, 7}));
  EXPECT_EQ(r.inputs[1].input, 1u);
  EXPECT_EQ(r.inputs[1].shape, (Shape{7}));
  for (const auto& in : r.inputs) {
    EXPECT_TRUE(in.ok);
    EXPECT_LT(in.max_abs_err, 1e-7);
  }
  // The summary has one line per input and no failure marker.
  EXPECT_EQ(r.summary().find("FAILED"), std::string::npos);
  EXPECT_NE(r.summary().find("input 1 (7,)"), std::string::npos) << r.summary();

  // The correct test Function passes too (bad_index -1 means no error).
  Tensor x = input({4, 5}, 3);
  r = gradcheck([](const TensorList& in) { return SquareWithWrongElementFn::apply(in[0], int64_t{-1}, 0.0); }, {x});
  EXPECT_TRUE(r.ok) << r.summary();
}

TEST(Gradcheck, FailsAWrongBackwardAndReportsTheWorstElement) {
  Tensor x = input({3, 5}, 4);
  const int64_t bad = 7;
  GradcheckResult r =
      gradcheck([&](const TensorList& in) { return SquareWithWrongElementFn::apply(in[0], bad, 0.25); }, {x});
  EXPECT_FALSE(r.ok);
  ASSERT_EQ(r.inputs.size(), 1u);
  const auto& rep = r.inputs[0];
  EXPECT_FALSE(rep.ok);
  EXPECT_EQ(rep.worst_index, bad);
  EXPECT_NEAR(rep.max_abs_err, 0.25, 1e-6);
  EXPECT_NEAR(rep.worst_analytic - rep.worst_numeric, 0.25, 1e-6);
  // The numeric side is the true gradient 2 x r at that element.
  Generator rg(GradcheckOptions{}.seed);
  double r_bad = randn({3, 5}, rg, DType::Float64).to_vector()[bad];
  EXPECT_NEAR(rep.worst_numeric, 2 * x.to_vector()[bad] * r_bad, 1e-6);
  std::string s = r.summary();
  EXPECT_NE(s.find("FAILED at flat index 7"), std::string::npos) << s;
  EXPECT_NE(s.find("(3, 5)"), std::string::npos) << s;

  // The error is caught at any element, including the first and the last.
  for (int64_t at : {int64_t{0}, int64_t{14}}) {
    r = gradcheck([&](const TensorList& in) { return SquareWithWrongElementFn::apply(in[0], at, -0.1); }, {x});
    EXPECT_FALSE(r.ok) << r.summary();
    EXPECT_EQ(r.inputs[0].worst_index, at) << r.summary();
  }
}

TEST(Gradcheck, ReportsAFailingElementRatherThanALargerPassingError) {
  // Element 0: true gradient 0, analytic 1e-3 -> fails (beyond atol). Elements 1..3: true gradient
  // 1000 r_i, analytic off by 5e-4 relative -> an absolute error of 0.5 |r_i| that is larger than
  // element 0's but within rtol. The report must name element 0, the one that failed.
  Tensor x = input({4}, 5);
  const std::vector<double> a{0, 1000, 1000, 1000}, abs_err{1e-3, 0, 0, 0};
  Generator rg(GradcheckOptions{}.seed);
  auto r_vals = randn({4}, rg, DType::Float64).to_vector();
  double biggest_passing = 0;
  for (int i = 1; i < 4; ++i) biggest_passing = std::max(biggest_passing, 0.5 * std::fabs(r_vals[i]));
  ASSERT_GT(biggest_passing, 2e-3) << "test premise: some passing element has a larger absolute error";

  GradcheckResult r =
      gradcheck([&](const TensorList& in) { return ScaleWithErrorsFn::apply(in[0], a, 5e-4, abs_err); }, {x});
  EXPECT_FALSE(r.ok);
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_EQ(r.inputs[0].worst_index, 0) << r.summary();
  EXPECT_NEAR(r.inputs[0].worst_analytic, 1e-3, 1e-12);
  EXPECT_NEAR(r.inputs[0].worst_numeric, 0.0, 1e-7);
  EXPECT_NEAR(r.inputs[0].max_abs_err, biggest_passing, 1e-6);  // still the max over all elements
  EXPECT_NE(r.summary().find("FAILED at flat index 0"), std::string::npos) << r.summary();

  // Only relative errors within tolerance: passes.
  const std::vector<double> no_err{0, 0, 0, 0};
  r = gradcheck([&](const TensorList& in) { return ScaleWithErrorsFn::apply(in[0], a, 5e-4, no_err); }, {x});
  EXPECT_TRUE(r.ok) << r.summary();
  // A relative error of 1% does not.
  r = gradcheck([&](const TensorList& in) { return ScaleWithErrorsFn::apply(in[0], a, 1e-2, no_err); }, {x});
  EXPECT_FALSE(r.ok);
  // A non-finite analytic gradient always fails.
  const std::vector<double> nan_err{0, std::nan(""), 0, 0};
  r = gradcheck([&](const TensorList& in) { return ScaleWithErrorsFn::apply(in[0], a, 0.0, nan_err); }, {x});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.inputs[0].worst_index, 1) << r.summary();
}

TEST(Gradcheck, MissingGradientForOneInputFailsThatInputOnly) {
  Tensor a = input({2, 3}, 6), b = input({2, 3}, 7);
  GradcheckResult r = gradcheck([](const TensorList& in) { return ForgetsSecondInputFn::apply(in[0], in[1]); }, {a, b});
  EXPECT_FALSE(r.ok);
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_TRUE(r.inputs[0].ok) << r.summary();
  EXPECT_FALSE(r.inputs[1].ok) << r.summary();
  EXPECT_EQ(r.inputs[1].worst_analytic, 0.0);
}

TEST(Gradcheck, ChecksOnlyInputsThatRequireGradAndLeavesCallerTensorsAlone) {
  Tensor a = input({3, 4}, 8), c = input({3, 4}, 9, /*requires_grad=*/false);
  const auto a_before = a.to_vector(), c_before = c.to_vector();
  GradcheckResult r = gradcheck([](const TensorList& in) { return in[0] * exp(in[1]); }, {c, a});
  EXPECT_TRUE(r.ok) << r.summary();
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_EQ(r.inputs[0].input, 1u);
  EXPECT_EQ(a.to_vector(), a_before);
  EXPECT_EQ(c.to_vector(), c_before);
  EXPECT_FALSE(a.grad().defined());
  // Non-contiguous inputs are fine (gradcheck works on its own contiguous copies).
  Tensor tv = input({5, 3}, 11).detach().t();  // (3, 5) strided
  tv.set_requires_grad(true);
  r = gradcheck([](const TensorList& in) { return tanh(in[0]); }, {tv});
  EXPECT_TRUE(r.ok) << r.summary();
}

TEST(Gradcheck, RejectsNonDoubleOrNonCpuInputs) {
  Generator g(1);
  Tensor f = randn({3}, g, DType::Float32);
  f.set_requires_grad(true);
  EXPECT_THROW(gradcheck([](const TensorList& in) { return in[0] * 2.0; }, {f}), DTypeError);
  // A float32 output is rejected too.
  Tensor d = input({3}, 2);
  EXPECT_THROW(gradcheck([](const TensorList& in) { return in[0].to(DType::Float32); }, {d}), DTypeError);
}

}  // namespace

TEST(Gradcheck, FailsWhenTheOpDropsItsHistory) {
  Tensor x = Tensor::from_vector(std::vector<double>{1, 2}, {2}, DType::Float64);
  x.set_requires_grad(true);
  // An "op" that returns a detached result: no gradient can flow, which gradcheck must flag.
  GradcheckResult r = gradcheck([](const TensorList& in) { return (in[0] * 2.0).detach(); }, {x});
  EXPECT_FALSE(r.ok);
}
