// test_optim_kernels.cpp — the adamw_step / sgd_step CPU kernels against a scalar
// re-implementation of PyTorch's documented update rules (torch.optim.AdamW / SGD "Algorithm"
// boxes), over several steps, in float and double, for sizes below and above the kernels'
// OpenMP threshold. The reference is written independently of the kernel, in long double.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tensor/kernels/kernels.h"
#include "tensor/random.h"

using namespace posgrad;

namespace {

struct AdamHp {
  double lr, b1, b2, eps, wd;
};

// One AdamW step for one element at step t (1-based), PyTorch semantics.
void adamw_ref(long double& p, long double& m, long double& v, long double g, int t, const AdamHp& h) {
  p = p * (1 - static_cast<long double>(h.lr) * h.wd);
  m = h.b1 * m + (1 - static_cast<long double>(h.b1)) * g;
  v = h.b2 * v + (1 - static_cast<long double>(h.b2)) * g * g;
  const long double mhat = m / (1 - std::pow(static_cast<long double>(h.b1), t));
  const long double vhat = v / (1 - std::pow(static_cast<long double>(h.b2), t));
  p = p - h.lr * mhat / (std::sqrt(vhat) + h.eps);
}

// One SGD step (dampening 0, no Nesterov), PyTorch semantics; buf starts at 0 (so step 1 gives buf = g).
void sgd_ref(long double& p, long double& buf, long double g, double lr, double mu, double wd) {
  g = g + wd * p;
  if (mu != 0) {
    buf = mu * buf + g;
    g = buf;
  }
  p = p - lr * g;
}

std::vector<double> draws(size_t n, uint64_t seed, double lo, double hi) {
  Generator gen(seed);
  return rand({static_cast<int64_t>(n)}, gen, DType::Float64, Device::cpu(), lo, hi).to_vector();
}

template <typename T>
double tol() {
  return std::is_same_v<T, float> ? 2e-6 : 1e-13;
}

template <typename T>
void check_adamw(size_t n, const AdamHp& h) {
  std::vector<T> p(n), m(n, T(0)), v(n, T(0));
  auto p0 = draws(n, 1, -1, 1);
  for (size_t i = 0; i < n; ++i) p[i] = T(p0[i]);
  std::vector<long double> rp(n), rm(n, 0), rv(n, 0);
  for (size_t i = 0; i < n; ++i) rp[i] = p[i];
  for (int t = 1; t <= 5; ++t) {
    auto gd = draws(n, 100 + t, -2, 2);
    std::vector<T> g(n);
    for (size_t i = 0; i < n; ++i) {
      g[i] = T(gd[i]);
      if (i % 97 == 3) g[i] = T(0);  // zero gradients: the update is then decay + momentum only
    }
    const double bc1 = 1 - std::pow(h.b1, t), bc2 = 1 - std::pow(h.b2, t);
    kernels::cpu::adamw_step<T>(p.data(), m.data(), v.data(), g.data(), static_cast<int64_t>(n), T(h.lr), T(h.b1),
                                T(h.b2), T(h.eps), T(h.wd), T(bc1), T(bc2));
    for (size_t i = 0; i < n; ++i) adamw_ref(rp[i], rm[i], rv[i], g[i], t, h);
    double ep = 0, em = 0, ev = 0;
    for (size_t i = 0; i < n; ++i) {
      ep = std::max(ep, static_cast<double>(std::fabs(p[i] - rp[i])));
      em = std::max(em, static_cast<double>(std::fabs(m[i] - rm[i])));
      ev = std::max(ev, static_cast<double>(std::fabs(v[i] - rv[i])));
    }
    EXPECT_LE(ep, tol<T>()) << "p at step " << t << " n=" << n;
    EXPECT_LE(em, tol<T>()) << "m at step " << t << " n=" << n;
    EXPECT_LE(ev, tol<T>()) << "v at step " << t << " n=" << n;
  }
}

template <typename T>
void check_sgd(size_t n, double lr, double mu, double wd, bool null_buf) {
  std::vector<T> p(n), buf(n, T(0));
  auto p0 = draws(n, 2, -1, 1);
  for (size_t i = 0; i < n; ++i) p[i] = T(p0[i]);
  std::vector<long double> rp(n), rb(n, 0);
  for (size_t i = 0; i < n; ++i) rp[i] = p[i];
  for (int t = 1; t <= 5; ++t) {
    auto gd = draws(n, 200 + t, -2, 2);
    std::vector<T> g(n);
    for (size_t i = 0; i < n; ++i) g[i] = T(gd[i]);
    kernels::cpu::sgd_step<T>(p.data(), null_buf ? nullptr : buf.data(), g.data(), static_cast<int64_t>(n), T(lr),
                              T(mu), T(wd));
    for (size_t i = 0; i < n; ++i) sgd_ref(rp[i], rb[i], g[i], lr, mu, wd);
    double ep = 0, eb = 0;
    for (size_t i = 0; i < n; ++i) {
      ep = std::max(ep, static_cast<double>(std::fabs(p[i] - rp[i])));
      if (mu != 0) eb = std::max(eb, static_cast<double>(std::fabs(buf[i] - rb[i])));
    }
    EXPECT_LE(ep, tol<T>()) << "p at step " << t << " n=" << n;
    EXPECT_LE(eb, tol<T>()) << "buf at step " << t << " n=" << n;
  }
}

TEST(OptimKernels, AdamWDouble) {
  for (size_t n : {1u, 13u, 40001u}) check_adamw<double>(n, {1e-2, 0.9, 0.95, 1e-8, 0.1});
  check_adamw<double>(257, {3e-4, 0.8, 0.999, 1e-6, 0.0});
}

TEST(OptimKernels, AdamWFloat) {
  for (size_t n : {7u, 40001u}) check_adamw<float>(n, {1e-2, 0.9, 0.95, 1e-8, 0.1});
  check_adamw<float>(257, {3e-4, 0.8, 0.999, 1e-6, 0.0});
}

TEST(OptimKernels, AdamWFirstStepIsSignedLr) {
  // With zero moments, step 1 moves every parameter by lr * g / (|g| + eps) ~ lr * sign(g).
  std::vector<double> p{0.5, -0.5}, m(2, 0), v(2, 0), g{3.0, -0.25};
  kernels::cpu::adamw_step<double>(p.data(), m.data(), v.data(), g.data(), 2, 0.1, 0.9, 0.999, 1e-12, 0.0, 0.1, 0.001);
  EXPECT_NEAR(p[0], 0.4, 1e-9);
  EXPECT_NEAR(p[1], -0.4, 1e-9);
}

TEST(OptimKernels, SgdDouble) {
  for (size_t n : {1u, 13u, 40001u}) check_sgd<double>(n, 0.1, 0.9, 1e-2, false);
  check_sgd<double>(31, 0.05, 0.0, 0.0, false);
  check_sgd<double>(31, 0.05, 0.0, 0.1, true);  // no momentum: the buffer may be null
}

TEST(OptimKernels, SgdFloat) {
  for (size_t n : {7u, 40001u}) check_sgd<float>(n, 0.1, 0.9, 1e-2, false);
  check_sgd<float>(40001, 0.05, 0.0, 0.1, true);
}

}  // namespace
