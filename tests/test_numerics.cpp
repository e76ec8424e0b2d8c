// test_numerics.cpp — numerical robustness, with exact expected values (not finite differences):
//  - log-sum-exp cancellation: cross_entropy / log_softmax of equal large logits is ln 2 with
//    gradients -+1/2 at every magnitude (the kernels form x - m first, then subtract log s);
//  - LayerNorm / RMSNorm statistics: constant rows give var = 0 exactly (y = b, dw = 0), large
//    offsets do not leak into y or dw, RMSNorm's squares do not overflow float32;
//  - NaN in comparison reductions: max / argmax and softmax propagate NaN wherever it sits;
//  - derivatives at singular points (PyTorch's conventions), e.g. d/dx x^0 at 0 = 0;
//  - sizes: element counts, strides and byte counts are overflow-checked (ShapeError naming the
//    shape), failed allocations are OutOfMemoryError naming the bytes — never a segfault or a
//    silently empty tensor.
// The registry sweep (test_op_registry.cpp, OpRegistryEdges) checks the per-op edge points in both
// dtypes; this file holds the examples and the members of each kind that need more setup.
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "autograd/ops/attention.h"
#include "support/test_util.h"
#include "tensor/kernels/cpu/vec_math.h"
#include "tensor/kernels/kernels.h"
#include "tensor/random.h"
#include "tensor/storage.h"
#include "tensor/tensor.h"
#include "train/optim.h"

// The OOM tests ask the allocator for 2^50 bytes and expect a null pointer (turned into
// OutOfMemoryError). Under AddressSanitizer that request is a fatal "allocation-size-too-big"
// unless the sanitizer is told to return null as glibc does.
#if defined(__SANITIZE_ADDRESS__)
#define POSGRAD_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POSGRAD_ASAN 1
#endif
#endif
#ifdef POSGRAD_ASAN
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
#endif

using namespace posgrad;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
const double kLn2 = std::log(2.0);

double eps_of(DType dt) { return dt == DType::Float32 ? FLT_EPSILON : DBL_EPSILON; }

// |got - want| <= ulps * eps(dt) * |want| (want == 0: exactly 0).
void expect_ulps(double got, double want, DType dt, double ulps, const std::string& what) {
  EXPECT_LE(std::fabs(got - want), ulps * eps_of(dt) * std::fabs(want))
      << what << " (" << dtype_name(dt) << "): got " << got << ", want " << want;
}

Tensor leaf(const std::vector<double>& v, const Shape& s, DType dt) {
  Tensor t = Tensor::from_vector(v, s, dt);
  t.set_requires_grad(true);
  return t;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

// ---- log-sum-exp cancellation ---------------------------------------------------------------------

// Issue 10: cross_entropy([[1e4, 1e4]], 0) was 0.6933594 in float32; with larger equal logits the
// loss collapsed to 0 and the gradient to [0, 1].
TEST(Numerics, CrossEntropyOfEqualLargeLogitsIsLn2) {
  for (DType dt : {DType::Float32, DType::Float64})
    for (double v : {1e4, 1e6, 1e8, 1e16, 1e30, 3e38, -1e30}) {
      Tensor logits = leaf({v, v}, {1, 2}, dt);
      Tensor loss = cross_entropy(logits, Tensor::from_ints({0}, {1}));
      const std::string what = "logits " + std::to_string(v);
      expect_ulps(loss.item(), kLn2, dt, 1, what + " loss");
      loss.backward();
      auto g = logits.grad().to_vector();
      expect_ulps(g[0], -0.5, dt, 2, what + " dlogit[target]");
      expect_ulps(g[1], 0.5, dt, 2, what + " dlogit[other]");
    }
}

// Rows with the same gaps at growing offsets all have the same loss and gradient.
// The float cross-entropy's exponentials run the vectorised exp (vec_kernels.h: exp_shift_sum_f32 in
// the forward, exp_shift_axpy_f32 in the backward): over vocabularies shorter than, equal to and longer
// than its 16-wide blocks, with a masked (-inf) and an underflowing logit, the float loss and gradient
// stay within 1e-6 relative and 3e-7 absolute (exp_approx's 2e-7 on probabilities <= 1) of the
// double kernel's on the same logits, and each row's gradient sums to 0.
TEST(Numerics, FloatCrossEntropyAgreesWithDouble) {
  std::mt19937 rng(5);
  std::normal_distribution<double> normal(0.0, 4.0);
  for (int64_t V : {1, 7, 16, 83}) {
    const int64_t N = 9;
    std::vector<double> l(static_cast<size_t>(N * V));
    for (auto& v : l) v = double(float(normal(rng)));  // float values, so both kernels see the same logits
    if (V > 3) l[1] = -INFINITY, l[V + 2] = -150.0;
    std::vector<int64_t> t(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) t[n] = (n * 5 + 3) % V;
    std::vector<double> loss[2], grad[2];
    for (int k = 0; k < 2; ++k) {
      Tensor logits = leaf(l, {N, V}, k == 0 ? DType::Float32 : DType::Float64);
      Tensor rows = cross_entropy_rows(logits, Tensor::from_ints(t, {N}));
      loss[k] = rows.to_vector();
      rows.backward(Tensor::ones({N}, rows.dtype()));
      grad[k] = logits.grad().to_vector();
    }
    for (int64_t n = 0; n < N; ++n) {
      EXPECT_NEAR(loss[0][n], loss[1][n], 1e-6 * std::max(1.0, std::fabs(loss[1][n]))) << "V=" << V << " row " << n;
      double row_sum = 0;
      for (int64_t v = 0; v < V; ++v) {
        EXPECT_NEAR(grad[0][n * V + v], grad[1][n * V + v], 3e-7) << "V=" << V << " row " << n << " logit " << v;
        row_sum += grad[0][n * V + v];
      }
      EXPECT_NEAR(row_sum, 0.0, 1e-6) << "V=" << V << " row " << n;
    }
  }
}

TEST(Numerics, CrossEntropyIsShiftInvariantAtLargeOffsets) {
  const std::vector<double> offsets{0, 1e3, 1e4, 1e6, -1e6, 1e7};  // integers: exact in float32
  const double z = 1 + std::exp(-1.0) + std::exp(-2.0);
  for (DType dt : {DType::Float32, DType::Float64}) {
    std::vector<double> l;
    for (double o : offsets)
      for (double d : {0.0, -1.0, -2.0}) l.push_back(o + d);
    const int64_t N = static_cast<int64_t>(offsets.size());
    Tensor logits = leaf(l, {N, 3}, dt);
    Tensor rows = cross_entropy_rows(logits, Tensor::from_ints(std::vector<int64_t>(N, 2), {N}));
    auto r = rows.to_vector();
    rows.backward(Tensor::ones({N}, dt));
    auto g = logits.grad().to_vector();
    for (int64_t n = 0; n < N; ++n) {
      const std::string what = "offset " + std::to_string(offsets[n]);
      expect_ulps(r[n], 2 + std::log(z), dt, 2, what + " loss");
      expect_ulps(g[n * 3 + 0], 1 / z, dt, 4, what + " p0");
      expect_ulps(g[n * 3 + 1], std::exp(-1.0) / z, dt, 4, what + " p1");
      expect_ulps(g[n * 3 + 2], std::exp(-2.0) / z - 1, dt, 4, what + " p2 - 1");
    }
  }
}

TEST(Numerics, LogSoftmaxOfEqualLargeLogitsIsMinusLn2) {
  for (DType dt : {DType::Float32, DType::Float64})
    for (double v : {1e4, 1e8, 1e30, -1e30}) {
      for (int64_t dim : {int64_t(-1), int64_t(0)}) {  // the last dim and a transposed one
        Tensor x = leaf({v, v}, dim == -1 ? Shape{1, 2} : Shape{2, 1}, dt);
        Tensor y = log_softmax(x, dim);
        for (double e : y.to_vector()) expect_ulps(e, -kLn2, dt, 1, "log_softmax of " + std::to_string(v));
        y.backward(Tensor::from_vector(std::vector<double>{1, 0}, x.shape(), dt));
        auto g = x.grad().to_vector();
        expect_ulps(g[0], 0.5, dt, 2, "dx[0]");
        expect_ulps(g[1], -0.5, dt, 2, "dx[1]");
      }
    }
}

// ---- normalisation statistics ---------------------------------------------------------------------

// Issue 10: a row of 768 equal values near 1e5 gave |y| ~ 1 and weight gradients of several units.
TEST(Numerics, LayerNormConstantRowsGiveBiasAndZeroWeightGradient) {
  const int64_t N = 5, C = 768;
  const std::vector<double> values{1e5, 100000.3, -123456.7, 0.1, 3e38};
  for (DType dt : {DType::Float32, DType::Float64}) {
    std::vector<double> xv;
    for (double v : values) xv.insert(xv.end(), C, v);
    Generator g(3);
    Tensor x = leaf(xv, {N, C}, dt);
    Tensor w = rand({C}, g, dt, Device::cpu(), 0.5, 1.5), b = rand({C}, g, dt, Device::cpu(), -1, 1);
    w.set_requires_grad(true);
    b.set_requires_grad(true);
    Tensor y = layer_norm(x, w, b, 1e-5);
    auto yv = y.to_vector(), bv = b.to_vector();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        ASSERT_EQ(yv[n * C + c], bv[c]) << dtype_name(dt) << " row of " << values[n] << ", column " << c;
    Tensor dy = rand({N, C}, g, dt, Device::cpu(), -1, 1);
    y.backward(dy);
    for (double e : w.grad().to_vector()) ASSERT_EQ(e, 0.0) << dtype_name(dt) << " dw";
    // db = column sums of dy; dx = rstd (g - <g>), g = dy w, rstd = 1 / sqrt(eps) (var = 0 exactly).
    auto dyv = dy.to_vector(), wv = w.to_vector(), dbv = b.grad().to_vector(), dxv = x.grad().to_vector();
    const double rs = 1 / std::sqrt(static_cast<double>(dt == DType::Float32 ? double(float(1e-5)) : 1e-5));
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n) s += dyv[n * C + c];
      ASSERT_NEAR(dbv[c], s, 8 * eps_of(dt) * N) << "db " << c;
    }
    for (int64_t n = 0; n < N; ++n) {
      double mg = 0;
      for (int64_t c = 0; c < C; ++c) mg += dyv[n * C + c] * wv[c] / C;
      for (int64_t c = 0; c < C; ++c)
        ASSERT_NEAR(dxv[n * C + c], rs * (dyv[n * C + c] * wv[c] - mg), 64 * eps_of(dt) * rs) << "dx " << n << "," << c;
    }
  }
  // Without affine parameters the output is exactly 0.
  Tensor y0 = layer_norm(Tensor::full({2, 768}, 100000.3), Tensor(), Tensor(), 1e-5);
  for (double e : y0.to_vector()) ASSERT_EQ(e, 0.0);
}

// Rows 1e5 + noise in float32: y, dx, dw and db must match a double evaluation of the same float
// inputs to float rounding — the offset must not leak through the mean or the variance.
TEST(Numerics, LayerNormLargeOffsetDoesNotLeak) {
  const int64_t N = 6, C = 768;
  Generator g(11);
  std::vector<double> xv = rand({N, C}, g, DType::Float32, Device::cpu(), -1, 1).to_vector();
  const std::vector<double> offsets{1e5, -1e5, 3e5, 1e6, 0, 7.5e4};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) xv[n * C + c] = double(float(xv[n * C + c] + offsets[n]));  // exact floats
  Tensor x = leaf(xv, {N, C}, DType::Float32);
  Tensor w = rand({C}, g, DType::Float32, Device::cpu(), 0.5, 1.5), b = rand({C}, g, DType::Float32);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor dy = rand({N, C}, g, DType::Float32);
  Tensor y = layer_norm(x, w, b, 1e-5);
  y.backward(dy);

  // Reference in double from the same float values.
  auto wv = w.to_vector(), bv = b.to_vector(), dyv = dy.to_vector();
  const double eps = double(float(1e-5));
  std::vector<double> yr(N * C), dxr(N * C), dwr(C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const double* r = xv.data() + n * C;
    double mu = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) mu += r[c];
    mu /= C;
    for (int64_t c = 0; c < C; ++c) var += (r[c] - mu) * (r[c] - mu);
    var /= C;
    const double rs = 1 / std::sqrt(var + eps);
    double mg = 0, mgx = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double xh = (r[c] - mu) * rs, gg = dyv[n * C + c] * wv[c];
      yr[n * C + c] = xh * wv[c] + bv[c];
      dwr[c] += dyv[n * C + c] * xh;
      mg += gg / C;
      mgx += gg * xh / C;
    }
    for (int64_t c = 0; c < C; ++c) {
      const double xh = (r[c] - mu) * rs;
      dxr[n * C + c] = rs * (dyv[n * C + c] * wv[c] - mg - xh * mgx);
    }
  }
  auto yv = y.to_vector(), dxv = x.grad().to_vector(), dwv = w.grad().to_vector();
  double ey = 0, edx = 0, edw = 0;
  for (int64_t i = 0; i < N * C; ++i) {
    ey = std::max(ey, std::fabs(yv[i] - yr[i]));
    edx = std::max(edx, std::fabs(dxv[i] - dxr[i]));
  }
  for (int64_t c = 0; c < C; ++c) edw = std::max(edw, std::fabs(dwv[c] - dwr[c]));
  // |y| <~ 3, |dx| <~ 10, |dw| <~ 10: a few float ulps each. (Rounding the mean to float alone gave
  // errors of ~4e-3 / std; the old float statistics gave errors of order 1.)
  EXPECT_LE(ey, 2e-6) << "y";
  EXPECT_LE(edx, 1e-5) << "dx";
  EXPECT_LE(edw, 2e-5) << "dw";
}

TEST(Numerics, RmsNormZeroRowsAndHugeValues) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    // Zero row: y = 0, dw = 0, dx = w / sqrt(eps).
    Tensor x = leaf({0, 0, 0, 1e20, -1e20, 1e20}, {2, 3}, dt);
    Tensor w = leaf({1, 2, 3}, {3}, dt);
    Tensor y = rms_norm(x, w, 1e-6);
    auto yv = y.to_vector();
    for (int c = 0; c < 3; ++c) EXPECT_EQ(yv[c], 0.0);
    // 1e20: x^2 = 1e40 overflowed float32 (rstd 0, y 0); in double the row normalises to +-w.
    expect_ulps(yv[3], 1, dt, 4, "y[1,0]");
    expect_ulps(yv[4], -2, dt, 4, "y[1,1]");
    expect_ulps(yv[5], 3, dt, 4, "y[1,2]");
    y.backward(Tensor::ones({2, 3}, dt));
    auto dw = w.grad().to_vector();  // row 0 adds 0, row 1 adds x * rstd = +-1
    expect_ulps(dw[0], 1, dt, 4, "dw0");
    expect_ulps(dw[1], -1, dt, 4, "dw1");
    expect_ulps(dw[2], 1, dt, 4, "dw2");
    auto dx = x.grad().to_vector();
    for (int c = 0; c < 3; ++c) expect_ulps(dx[c], (c + 1) * 1000.0, dt, 4, "dx of the zero row");
  }
}

// ---- NaN in comparison reductions -------------------------------------------------------------------

// Issue 10: max([1, NaN, 3], 0) returned 3 at index 2 (and NaN only when the NaN came first).
TEST(Numerics, MaxPropagatesNaNAtTheFirstNaN) {
  struct Case {
    std::vector<double> x;
    int64_t idx;
  };
  for (DType dt : {DType::Float32, DType::Float64})
    for (const Case& c : {Case{{1, kNaN, 3}, 1}, Case{{kNaN, 1, 3}, 0}, Case{{1, 3, kNaN}, 2}, Case{{kNaN, kNaN, 3}, 0},
                          Case{{3, kNaN, kNaN}, 1}, Case{{-kInf, kNaN}, 1}}) {
      Tensor x = leaf(c.x, {static_cast<int64_t>(c.x.size())}, dt);
      auto [v, i] = max(x, 0);
      EXPECT_TRUE(std::isnan(v.item())) << dtype_name(dt);
      EXPECT_EQ(i.to_int_vector()[0], c.idx);
      v.backward();
      auto g = x.grad().to_vector();
      for (size_t k = 0; k < g.size(); ++k) EXPECT_EQ(g[k], static_cast<int64_t>(k) == c.idx ? 1.0 : 0.0) << k;
    }
  // Without NaN, ties keep the first maximum.
  auto [v, i] = max(Tensor::from_vector(std::vector<double>{1, 4, 4, -kInf}, {4}), 0);
  EXPECT_EQ(v.item(), 4.0);
  EXPECT_EQ(i.to_int_vector()[0], 1);
}

// The evaluation's accuracy takes max(logits, -1).second: a row with a NaN predicts that index.
TEST(Numerics, ArgmaxOverRowsAndStridedDimsWithNaN) {
  const int64_t R = 300;  // several threads per row in the CUDA kernel
  std::vector<double> v(2 * R, 0.0);
  v[17] = 9;  // row 0: maximum at 17, NaN at 250
  v[250] = kNaN;
  v[R + 3] = 5;  // row 1: maximum at 3 and 299 (tie)
  v[R + 299] = 5;
  Tensor x = Tensor::from_vector(v, {2, R});
  EXPECT_EQ(max(x, -1).second.to_int_vector(), (std::vector<int64_t>{250, 3}));
  EXPECT_EQ(max(x.t().contiguous(), 0).second.to_int_vector(), (std::vector<int64_t>{250, 3}));
}

TEST(Numerics, SoftmaxAndCrossEntropyPropagateNaNWhereverItSits) {
  for (DType dt : {DType::Float32, DType::Float64})
    for (int pos = 0; pos < 3; ++pos) {
      std::vector<double> v{1, 2, 3};
      v[pos] = kNaN;
      for (double e : softmax(Tensor::from_vector(v, {1, 3}, dt)).to_vector()) EXPECT_TRUE(std::isnan(e));
      for (double e : log_softmax(Tensor::from_vector(v, {1, 3}, dt)).to_vector()) EXPECT_TRUE(std::isnan(e));
      EXPECT_TRUE(std::isnan(cross_entropy(Tensor::from_vector(v, {1, 3}, dt), Tensor::from_ints({0}, {1})).item()));
    }
}

// Gradient clipping's norm is a sum of squares (in double): a NaN or inf anywhere is reported.
TEST(Numerics, GradNormReportsNaNAndInfWhereverTheySit) {
  for (double bad : {kNaN, kInf})
    for (int pos : {0, 500, 999}) {
      Tensor p = Tensor::zeros({1000});
      p.set_requires_grad(true);
      std::vector<double> g(1000, 0.5);
      g[pos] = bad;
      p.set_grad(Tensor::from_vector(g, {1000}));
      const double n = train::grad_norm({p});
      if (std::isnan(bad))
        EXPECT_TRUE(std::isnan(n)) << pos;
      else
        EXPECT_EQ(n, kInf) << pos;
      // clip_grad_norm reports it and leaves the gradients alone (the trainer stops on it).
      const double c = train::clip_grad_norm({p}, 1.0);
      EXPECT_FALSE(std::isfinite(c));
      EXPECT_EQ(p.grad().to_vector()[pos == 0 ? 1 : 0], 0.5);
    }
}

// ---- derivatives at singular points -----------------------------------------------------------------

// Issue 10: d/dx x^0 at x = 0 was NaN (0 * inf). PyTorch's pow_backward returns zeros for exponent 0.
TEST(Numerics, PowZeroExponentHasZeroGradientEverywhere) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor x = leaf({0, -0.0, 1e-30, -2, kInf}, {5}, dt);
    Tensor y = pow(x, 0.0);
    for (double e : y.to_vector()) EXPECT_EQ(e, 1.0);
    y.backward(Tensor::ones({5}, dt));
    for (double e : x.grad().to_vector()) EXPECT_EQ(e, 0.0) << dtype_name(dt);
  }
}

TEST(Numerics, SingularPointsFollowPyTorch) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    auto grad_at = [dt](double x0, const std::function<Tensor(const Tensor&)>& f) {
      Tensor x = leaf({x0}, {1}, dt);
      f(x).backward(Tensor::ones({1}, dt));
      return x.grad().item();
    };
    EXPECT_EQ(grad_at(0, [](const Tensor& x) { return relu(x); }), 0.0);   // relu'(0) = 0
    EXPECT_EQ(grad_at(0, [](const Tensor& x) { return sqrt(x); }), kInf);  // sqrt'(0) = inf
    EXPECT_EQ(grad_at(0, [](const Tensor& x) { return log(x); }), kInf);   // log'(0) = inf
    EXPECT_EQ(grad_at(0, [](const Tensor& x) { return pow(x, 1.0); }), 1.0);
    EXPECT_EQ(grad_at(0, [](const Tensor& x) { return pow(x, 3.0); }), 0.0);
    EXPECT_EQ(grad_at(0, [](const Tensor& x) { return pow(x, 0.5); }), kInf);
  }
}

// div's divisor gradient is -dy (a / b) / b: b * b underflowing must not turn it infinite.
TEST(Numerics, DivGradientForTinyDivisors) {
  const double t = std::ldexp(1.0, -80);
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor a = leaf({t, 3 * t}, {2}, dt), b = leaf({t, t}, {2}, dt);
    Tensor y = div(a, b);
    EXPECT_EQ(y.to_vector(), (std::vector<double>{1, 3}));
    y.backward(Tensor::ones({2}, dt));
    EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{std::ldexp(1.0, 80), std::ldexp(1.0, 80)}));
    EXPECT_EQ(b.grad().to_vector(), (std::vector<double>{-std::ldexp(1.0, 80), -3 * std::ldexp(1.0, 80)}));
  }
}

// ---- size safety ----------------------------------------------------------------------------------

// Issue 10: ones({1 << 62}) segfaulted (the byte count wrapped to 0); zeros({1 << 32, 1 << 32})
// returned a tensor with numel() == 0.
TEST(Numerics, ImpossibleSizesAreShapeErrorsNamingTheShape) {
  const int64_t k62 = int64_t(1) << 62, k32 = int64_t(1) << 32;
  std::string m = posgrad::test::thrown_message<ShapeError>([&] { (void)Tensor::ones({k62}); });
  EXPECT_TRUE(contains(m, "(4611686018427387904,)")) << m;
  m = posgrad::test::thrown_message<ShapeError>([&] { (void)Tensor::zeros({k32, k32}); });
  EXPECT_TRUE(contains(m, "(4294967296, 4294967296)")) << m;
  // Other members of the kind: more elements than int64, bytes beyond ptrdiff_t, strides that
  // overflow although the tensor is empty, negative sizes.
  EXPECT_THROW((void)Tensor::empty({k32, k32, 4}), ShapeError);
  EXPECT_THROW((void)Tensor::empty({int64_t(1) << 61}, DType::Float32), ShapeError);  // 2^63 bytes
  EXPECT_THROW((void)Tensor::empty({int64_t(1) << 60}, DType::Float64), ShapeError);
  EXPECT_THROW((void)Tensor::full({k62, 2}, 1.0), ShapeError);
  EXPECT_THROW((void)Tensor::empty({0, int64_t(1) << 40, int64_t(1) << 40}), ShapeError);
  EXPECT_THROW((void)Tensor::empty({-1, 3}), ShapeError);
  EXPECT_THROW((void)Tensor::arange(k62), ShapeError);
  EXPECT_THROW((void)Tensor::from_vector(std::vector<double>{}, {k32, k32}), ShapeError);  // was numel 0 == 0 values
  EXPECT_THROW((void)shape_numel({k32, k32}), ShapeError);
  EXPECT_THROW((void)contiguous_strides({2, k32, k32}), ShapeError);
  // An empty tensor whose other dims multiply past int64 is still a valid empty tensor.
  Tensor e = Tensor::empty({int64_t(1) << 40, int64_t(1) << 40, 0});
  EXPECT_EQ(e.numel(), 0);
}

TEST(Numerics, ViewsAndBroadcastsOfImpossibleSizesAreShapeErrors) {
  const int64_t k32 = int64_t(1) << 32, k33 = int64_t(1) << 33;
  Tensor one = Tensor::ones({1, 1});
  std::string m = posgrad::test::thrown_message<ShapeError>([&] { (void)one.expand({k32, k32}); });
  EXPECT_TRUE(contains(m, "(4294967296, 4294967296)")) << m;
  // Broadcasting two cheap expanded views to a (2^31, 2^33) result: named with both operands.
  Tensor a = one.expand({int64_t(1) << 31, 1}), b = one.expand({1, k33});
  m = posgrad::test::thrown_message<ShapeError>([&] { (void)add(a, b); });
  EXPECT_TRUE(contains(m, "(2147483648, 1)") && contains(m, "(1, 8589934592)")) << m;
  EXPECT_THROW((void)Tensor::ones({4}).view({k32, k32, -1}), ShapeError);
  EXPECT_THROW((void)Tensor::ones({4}).reshape({int64_t(1) << 62, 8}), ShapeError);
  // narrow's start + length must not overflow into a "valid" range.
  EXPECT_THROW((void)Tensor::ones({4}).narrow(0, 2, std::numeric_limits<int64_t>::max()), IndexError);
}

// The vectorised float erf and exp (vec_math.h) against libm in double: erf within 3.6 ulp of the
// float-rounded value for |x| < 1 and 5.7 ulp everywhere (the bounds its header states) (dense grid over [-6, 6],
// logarithmic grids to 1e-30, the region seams, signed zeros, infinities, NaN); exp within 3e-7 relative on [-87, 88]
// and 0 below -87.3. And the float GELU kernel (which uses them) against the double formula.
TEST(Numerics, VectorisedErfExpAndGelu) {
  using kernels::cpu::erf_approx;
  using kernels::cpu::exp_approx;
  std::vector<float> xs;
  for (int i = -600000; i <= 600000; ++i) xs.push_back(float(i) * 1e-5f);
  for (double e = -30; e <= 0.8; e += 0.001)
    xs.push_back(float(std::pow(10.0, e))), xs.push_back(-float(std::pow(10.0, e)));
  for (float seam : {1.0f, 4.0f})
    for (float x = std::nextafter(seam, 0.0f), k = 0; k < 5; ++k, x = std::nextafter(x, 10.0f)) xs.push_back(x);
  double worst = 0, worst_inner = 0;
  float at = 0, at_inner = 0;
  for (float x : xs) {
    const double want = std::erf(double(x));
    const double ulp = std::max(double(std::nextafter(float(std::fabs(want)), 2.0f) - float(std::fabs(want))), 1e-45);
    const double err = std::fabs(double(erf_approx(x)) - want) / ulp;
    if (err > worst) worst = err, at = x;
    if (std::fabs(x) < 1.0f && err > worst_inner) worst_inner = err, at_inner = x;
  }
  EXPECT_LE(worst, 5.7) << "erf_approx at " << at;
  EXPECT_LE(worst_inner, 3.6) << "erf_approx at " << at_inner;
  EXPECT_EQ(erf_approx(4.0f), 1.0f);
  EXPECT_EQ(erf_approx(-1e30f), -1.0f);
  EXPECT_EQ(erf_approx(1e-30f), 1e-30f * 1.12837911f);
  EXPECT_EQ(erf_approx(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(erf_approx(-0.0f)));
  EXPECT_EQ(erf_approx(INFINITY), 1.0f);
  EXPECT_EQ(erf_approx(-INFINITY), -1.0f);
  EXPECT_TRUE(std::isnan(erf_approx(NAN)));
  double worst_exp = 0;
  for (float v = -87.0f; v <= 88.0f; v += 0.0013f)
    worst_exp = std::max(worst_exp, std::fabs(double(exp_approx(v)) / std::exp(double(v)) - 1.0));
  EXPECT_LE(worst_exp, 3e-7);
  EXPECT_EQ(exp_approx(-88.0f), 0.0f);
  EXPECT_EQ(exp_approx(0.0f), 1.0f);

  Generator g(3);
  const Tensor x = randn({4099}, g, DType::Float32, Device::cpu(), 0.0, 3.0).set_requires_grad(true);
  const Tensor y = gelu(x);
  y.backward(Tensor::ones({4099}));
  const auto xv = x.to_vector(), yv = y.to_vector(), gv = x.grad().to_vector();
  for (size_t i = 0; i < xv.size(); ++i) {
    const double v = xv[i], phi = 0.5 * (1 + std::erf(v / std::sqrt(2.0)));
    const double dphi = std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
    EXPECT_NEAR(yv[i], v * phi, 4e-7 * std::max(1.0, std::fabs(v))) << "gelu(" << v << ")";
    EXPECT_NEAR(gv[i], phi + v * dphi, 4e-7 * std::max(1.0, std::fabs(v))) << "gelu'(" << v << ")";
  }
}

// On the CPU autograd's exact GELU keeps 1 + erf from its forward for its backward
// (kernels::cpu::gelu_forward_saving / gelu_backward_saved). Its output and gradient must be the
// bits of the kernels it replaced, unary_forward and unary_backward onto a zero-filled dx, in float
// and double, signed zeros, infinities and NaN included; and without a tape (no grad) the forward
// is unary_forward itself.
template <typename T>
void expect_gelu_autograd_equals_unary_kernels(DType dt) {
  std::vector<T> xs = {T(0), -T(0), T(INFINITY), -T(INFINITY), T(NAN), T(1e-30), T(-40), T(40), T(1.4142), T(-5.6)};
  std::vector<T> dys = {T(1), -T(0), T(0), T(0.5), T(2), T(-1), T(0), T(-0.0), T(3), T(1)};
  std::mt19937 rng(5);
  std::normal_distribution<double> d(0.0, 3.0);
  for (int i = 0; i < 70000; ++i) {  // > elementwise.cpp's parallel threshold
    xs.push_back(T(d(rng)));
    dys.push_back(i % 9 == 0 ? -T(0) : T(d(rng)));
  }
  const int64_t n = static_cast<int64_t>(xs.size());
  std::vector<T> want_y(xs.size()), want_dx(xs.size(), T(0));
  kernels::cpu::unary_forward<T>(want_y.data(), xs.data(), n, kernels::UnaryOp::Gelu, T(0));
  kernels::cpu::unary_backward<T>(want_dx.data(), dys.data(), xs.data(), want_y.data(), n, kernels::UnaryOp::Gelu,
                                  T(0));
  // to_vector widens to double, which keeps every value, sign of zero and NaN of T.
  const auto bits_equal = [](const std::vector<double>& got, const std::vector<T>& want) {
    const std::vector<double> w(want.begin(), want.end());
    return got.size() == w.size() && std::memcmp(got.data(), w.data(), sizeof(double) * w.size()) == 0;
  };
  const Tensor x = Tensor::from_vector(std::vector<double>(xs.begin(), xs.end()), {n}, dt).set_requires_grad(true);
  const Tensor dy = Tensor::from_vector(std::vector<double>(dys.begin(), dys.end()), {n}, dt);
  const Tensor y = gelu(x);
  y.backward(dy);
  EXPECT_TRUE(bits_equal(y.to_vector(), want_y)) << dtype_name(dt);
  EXPECT_TRUE(bits_equal(x.grad().to_vector(), want_dx)) << dtype_name(dt);
  NoGradGuard no_grad;
  // Without a tape the forward keeps nothing: it allocates y alone (no 1 + erf buffer).
  auto& cpu = backend(DeviceType::CPU);
  const size_t before = cpu.current_bytes();
  cpu.reset_peak();
  const Tensor y_no_tape = gelu(x);
  EXPECT_EQ(cpu.peak_bytes() - before, (static_cast<size_t>(n) * sizeof(T) + 63) / 64 * 64) << dtype_name(dt);
  EXPECT_TRUE(bits_equal(y_no_tape.to_vector(), want_y)) << dtype_name(dt) << " without a tape";
}

TEST(Numerics, GeluAutogradKeepsTheBitsOfTheUnaryKernels) {
  expect_gelu_autograd_equals_unary_kernels<float>(DType::Float32);
  expect_gelu_autograd_equals_unary_kernels<double>(DType::Float64);
}

// sum_dim_forward sums each output element over R front to back, whatever the thread count; rows of
// many columns are split over the team in runs of columns (a bias gradient has outer = 1). Bits
// against that order written out, at 1 and 2 threads, with ragged runs and the inner = 1 path.
template <typename T>
void check_sum_dim_order(int64_t outer, int64_t R, int64_t inner, int threads) {
  std::mt19937 gen(static_cast<unsigned>(outer * 7919 + R * 31 + inner));
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> x(static_cast<size_t>(outer * R * inner)), y(static_cast<size_t>(outer * inner), T(-7));
  for (auto& v : x) v = T(u(gen) * (u(gen) > 0.9 ? 1e4 : 1));  // a wide range, so the order shows
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  kernels::cpu::sum_dim_forward<T>(y.data(), x.data(), outer, R, inner);
  omp_set_num_threads(saved);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      T s = T(0);
      for (int64_t r = 0; r < R; ++r) s += x[static_cast<size_t>((o * R + r) * inner + i)];
      const T got = y[static_cast<size_t>(o * inner + i)];
      ASSERT_EQ(std::memcmp(&got, &s, sizeof(T)), 0)
          << "(" << outer << ", " << R << ", " << inner << ") threads " << threads << " at o=" << o << " i=" << i;
    }
}

TEST(Numerics, SumDimKeepsTheRowOrderForAnyThreadCount) {
  for (int threads : {1, 2})
    for (auto [outer, R, inner] : std::vector<std::array<int64_t, 3>>{
             {1, 300, 200}, {1, 768, 128}, {3, 129, 70}, {3, 400, 70}, {2, 50, 1}, {1, 1000, 64}, {5, 7, 3}}) {
      check_sum_dim_order<float>(outer, R, inner, threads);
      check_sum_dim_order<double>(outer, R, inner, threads);
    }
}

// binary_backward writes da = +0 + dy * d/da (and db likewise) instead of accumulating into a zero-filled
// buffer: the same bits, including +0 where the product is -0, and nothing of what the buffer held
// before (NaN here) survives. Reference: zeros, then the accumulation written out.
template <typename T>
void check_binary_backward_writes() {
  const T nz = -T(0), inf = std::numeric_limits<T>::infinity();
  const std::vector<T> dy{T(1.5), nz, T(0), T(-2.25), T(3), nz, inf, T(1e-30)};
  const std::vector<T> a{T(2), T(3), nz, T(-1.5), T(0.1), T(-4), T(2), T(7)};
  const std::vector<T> b{T(0.5), T(-2), T(5), nz, T(0.3), T(1), T(-3), T(1e-10)};
  const int64_t n = static_cast<int64_t>(dy.size());
  for (kernels::BinaryOp op :
       {kernels::BinaryOp::Add, kernels::BinaryOp::Sub, kernels::BinaryOp::Mul, kernels::BinaryOp::Div}) {
    std::vector<T> da(dy.size(), std::numeric_limits<T>::quiet_NaN()), db = da;
    kernels::cpu::binary_backward<T>(da.data(), db.data(), dy.data(), a.data(), b.data(), n, op);
    for (size_t i = 0; i < dy.size(); ++i) {
      T ra = T(0), rb = T(0);
      switch (op) {
        case kernels::BinaryOp::Add: ra += dy[i], rb += dy[i]; break;
        case kernels::BinaryOp::Sub: ra += dy[i], rb += -dy[i]; break;
        case kernels::BinaryOp::Mul: ra += dy[i] * b[i], rb += dy[i] * a[i]; break;
        case kernels::BinaryOp::Div: ra += dy[i] / b[i], rb += -dy[i] * ((a[i] / b[i]) / b[i]); break;
      }
      EXPECT_EQ(std::memcmp(&da[i], &ra, sizeof(T)), 0) << kernels::binary_op_name(op) << " da[" << i << "] " << da[i];
      EXPECT_EQ(std::memcmp(&db[i], &rb, sizeof(T)), 0) << kernels::binary_op_name(op) << " db[" << i << "] " << db[i];
    }
  }
  // A -0 gradient through an addition arrives as +0 on both sides.
  std::vector<T> da(1, T(5)), db(1, T(5));
  const T g = nz, one = T(1);
  kernels::cpu::binary_backward<T>(da.data(), db.data(), &g, &one, &one, 1, kernels::BinaryOp::Add);
  EXPECT_FALSE(std::signbit(da[0]));
  EXPECT_FALSE(std::signbit(db[0]));
}

TEST(Numerics, BinaryBackwardWritesWhatAccumulatingOntoZerosGave) {
  check_binary_backward_writes<float>();
  check_binary_backward_writes<double>();
}

TEST(Numerics, ScratchSizesAreOverflowChecked) {
  const int64_t big = int64_t(1) << 20;
  using kernels::ScoreBias;
  // (B H Tq U) = 2^80 elements of DeBERTa scratch.
  std::string m = posgrad::test::thrown_message<ShapeError>(
      [&] { (void)kernels::cpu::attention_scratch_elems(ScoreBias::ContentPosition, 1, big, big, big, big, 64, big); });
  EXPECT_TRUE(contains(m, "attention scratch")) << m;
  EXPECT_THROW((void)kernels::checked_elems({big, big, big, big}, "test"), ShapeError);
  EXPECT_EQ(kernels::checked_elems({big, big, big}, "test"), int64_t(1) << 60);
  EXPECT_EQ(kernels::checked_elems({big, 0, big, big, big}, "test"), 0);
  EXPECT_THROW((void)kernels::checked_add(std::numeric_limits<int64_t>::max(), 1, "test"), ShapeError);
}

// A representable size the machine cannot hold: OutOfMemoryError naming the bytes (2^50 bytes is
// beyond x86-64's 47-bit user address space, so the allocation fails on any machine).
TEST(Numerics, FailedAllocationsAreOutOfMemoryErrorsNamingTheBytes) {
  std::string m =
      posgrad::test::thrown_message<OutOfMemoryError>([] { (void)Tensor::empty({int64_t(1) << 47}, DType::Float64); });
  EXPECT_TRUE(contains(m, "1125899906842624 bytes")) << m;
  m = posgrad::test::thrown_message<OutOfMemoryError>([] {
    (void)Tensor::zeros({int64_t(1) << 24, int64_t(1) << 24}, DType::Int64);
  });
  EXPECT_TRUE(contains(m, "2251799813685248 bytes")) << m;
  // The allocator's accounting is unchanged by the failures.
  Tensor ok = Tensor::ones({3});
  EXPECT_EQ(ok.to_vector(), (std::vector<double>{1, 1, 1}));
}

TEST(Numerics, CudaOutOfMemoryIsOutOfMemoryError) {
  POSGRAD_REQUIRE_CUDA();
  EXPECT_THROW((void)Tensor::empty({int64_t(1) << 47}, DType::Float64, Device::cuda()), OutOfMemoryError);
  EXPECT_THROW((void)Tensor::ones({int64_t(1) << 62}, DType::Float32, Device::cuda()), ShapeError);
}

// copy_strided: every element lands where the index formula puts it, for layouts that merge (a
// contiguous block, a slice of rows), that do not (the attention's head split: rows of D under a
// (B, T, 3C) stride; a transpose; a step > 1 on both sides), size-1 dims, a broadcast source (stride
// 0), uint8 and int64, at 1 and 2 threads and above the parallel threshold; and nothing of the
// destination buffer outside the copied positions changes.
template <typename T>
void check_copy_strided(const std::vector<int64_t>& shape, const std::vector<int64_t>& ys,
                        const std::vector<int64_t>& xs, int threads) {
  const int nd = static_cast<int>(shape.size());
  int64_t total = 1, y_span = 1, x_span = 1;
  for (int d = 0; d < nd; ++d) {
    total *= shape[d];
    y_span += (shape[d] - 1) * ys[d];
    x_span += (shape[d] - 1) * xs[d];
  }
  std::vector<T> x(static_cast<size_t>(x_span)), y(static_cast<size_t>(y_span) + 16, T(99));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<T>(i % 97 + 1);
  std::vector<T> want = y;
  std::vector<int64_t> idx(static_cast<size_t>(nd), 0);
  for (int64_t n = 0; n < total; ++n) {
    int64_t yo = 0, xo = 0, rem = n;
    for (int d = nd - 1; d >= 0; --d) {
      const int64_t i = rem % shape[d];
      rem /= shape[d];
      yo += i * ys[d];
      xo += i * xs[d];
    }
    want[static_cast<size_t>(yo)] = x[static_cast<size_t>(xo)];
  }
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  kernels::cpu::copy_strided<T>(y.data(), x.data(), nd, shape.data(), ys.data(), xs.data());
  omp_set_num_threads(saved);
  for (size_t i = 0; i < y.size(); ++i)
    ASSERT_EQ(y[i], want[i]) << "shape " << shape_str(shape) << " threads " << threads << " at " << i;
}

TEST(Numerics, CopyStridedPutsEveryElementWhereTheStridesSay) {
  struct Layout {
    std::vector<int64_t> shape, ys, xs;
  };
  const int64_t B = 20, T = 64, H = 4, D = 16, C = H * D;  // B * T * C > 1 << 16: the team splits the rows
  const std::vector<Layout> layouts = {
      {{5, 7, 3}, {21, 3, 1}, {21, 3, 1}},                                 // contiguous: one run
      {{B, H, T, D}, {H * T * D, T * D, D, 1}, {T * 3 * C, D, 3 * C, 1}},  // head split, part 0
      {{B, T, H, D}, {T * C, C, D, 1}, {H * T * D, D, T * D, 1}},          // heads merged back
      {{300, 70}, {70, 1}, {1, 300}},                                      // transpose
      {{1, 9, 1, 11}, {99, 11, 11, 1}, {1, 1, 1, 9}},                      // size-1 dims, transpose
      {{40, 33}, {66, 2}, {99, 3}},                                        // steps > 1 both sides
      {{6, 50, 40}, {2000, 40, 1}, {0, 40, 1}},                            // broadcast over dim 0
      {{17, 300}, {300, 1}, {400, 1}},                                     // rows of a wider matrix
      {{2, 3, 2, 5, 2, 3, 2, 3},
       {1080, 360, 180, 36, 18, 6, 3, 1},  // kMaxDims dims
       {1, 2, 6, 12, 60, 120, 360, 720}},
      {{0, 5}, {5, 1}, {5, 1}},  // empty
  };
  for (int threads : {1, 2})
    for (const Layout& l : layouts) {
      check_copy_strided<float>(l.shape, l.ys, l.xs, threads);
      check_copy_strided<double>(l.shape, l.ys, l.xs, threads);
      check_copy_strided<int64_t>(l.shape, l.ys, l.xs, threads);
      check_copy_strided<uint8_t>(l.shape, l.ys, l.xs, threads);
    }
  // 0 dims: one element.
  float one = 3.5f, out = 0.0f;
  kernels::cpu::copy_strided<float>(&out, &one, 0, nullptr, nullptr, nullptr);
  EXPECT_EQ(out, 3.5f);
  // More dims than the kernels take: a ShapeError, nothing written.
  const std::vector<int64_t> nine(9, 1);
  EXPECT_THROW(kernels::cpu::copy_strided<float>(&out, &one, 9, nine.data(), nine.data(), nine.data()), ShapeError);
}
