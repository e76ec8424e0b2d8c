// test_optim_kernels.cpp — the adamw_step / sgd_step CPU kernels against a scalar
// re-implementation of PyTorch's documented update rules (torch.optim.AdamW / SGD "Algorithm"
// boxes), over several steps, in float and double, for sizes below and above the kernels'
// OpenMP threshold. The reference is written independently of the kernel, in long double.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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

// The multi-tensor forms (one thread team for many tensors) must give every element the bits of the
// documented order of operations, whichever thread owns it: tensors of sizes below and above the
// parallel threshold, one empty, each with its own weight decay, at 1 and 2 threads. The reference is
// that order written out in T.
template <typename T>
void check_adamw_multi(int threads) {
  const std::vector<int64_t> sizes{13, 0, 40001, 1, 70000, 5};
  const T lr = T(3e-3), b1 = T(0.9), b2 = T(0.95), eps = T(1e-8), bc1 = T(0.271), bc2 = T(0.1426);
  std::vector<std::vector<T>> p, m, v, g, rp, rm, rv;
  std::vector<kernels::cpu::AdamWTensor<T>> list;
  for (size_t t = 0; t < sizes.size(); ++t) {
    const size_t n = static_cast<size_t>(sizes[t]);
    auto d = draws(4 * n + 1, 300 + t, -1, 1);
    p.emplace_back(n), m.emplace_back(n), v.emplace_back(n), g.emplace_back(n);
    for (size_t i = 0; i < n; ++i) {
      p[t][i] = T(d[i]);
      m[t][i] = T(0.1 * d[n + i]);
      v[t][i] = T(0.01 * std::fabs(d[2 * n + i]));
      g[t][i] = T(2 * d[3 * n + i]);
    }
    rp.push_back(p[t]), rm.push_back(m[t]), rv.push_back(v[t]);
  }
  for (size_t t = 0; t < sizes.size(); ++t)
    list.push_back({p[t].data(), m[t].data(), v[t].data(), g[t].data(), sizes[t], T(0.05 * double(t))});
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  kernels::cpu::adamw_step_multi<T>(list.data(), static_cast<int64_t>(list.size()), lr, b1, b2, eps, bc1, bc2);
  omp_set_num_threads(saved);
  for (size_t t = 0; t < sizes.size(); ++t) {
    const T decay = T(1) - lr * list[t].weight_decay, step_size = lr / bc1, bc2_sqrt = std::sqrt(bc2);
    for (size_t i = 0; i < static_cast<size_t>(sizes[t]); ++i) {
      const T gi = g[t][i];
      const T mi = b1 * rm[t][i] + (T(1) - b1) * gi;
      const T vi = b2 * rv[t][i] + (T(1) - b2) * gi * gi;
      const T pi = rp[t][i] * decay - step_size * (mi / (std::sqrt(vi) / bc2_sqrt + eps));
      ASSERT_EQ(std::memcmp(&p[t][i], &pi, sizeof(T)), 0) << "p, tensor " << t << " element " << i;
      ASSERT_EQ(std::memcmp(&m[t][i], &mi, sizeof(T)), 0) << "m, tensor " << t << " element " << i;
      ASSERT_EQ(std::memcmp(&v[t][i], &vi, sizeof(T)), 0) << "v, tensor " << t << " element " << i;
    }
  }
}

TEST(OptimKernels, AdamWMultiGivesEveryElementTheOneTensorBits) {
  for (int threads : {1, 2}) {
    check_adamw_multi<float>(threads);
    check_adamw_multi<double>(threads);
  }
}

// sum_squares: 64 fixed parts of ceil(n / 64) elements, each summed front to back in double, the parts
// then added in order (so the gradient norm does not depend on the thread count). The reference
// writes that rule out; the multi-tensor form must give each tensor exactly its bits.
template <typename T>
double sum_squares_ref(const T* x, int64_t n) {
  const int64_t block = (n + 63) / 64;
  double total = 0;
  for (int64_t part = 0; part < 64; ++part) {
    double s = 0;
    for (int64_t i = std::min(n, part * block); i < std::min(n, (part + 1) * block); ++i)
      s += double(x[i]) * double(x[i]);
    total += s;
  }
  return total;
}

template <typename T>
void check_sum_squares_multi(int threads) {
  const std::vector<int64_t> sizes{0, 1, 63, 64, 65, 1000, 70001, 131073, 7};
  std::vector<std::vector<T>> xs;
  std::vector<const T*> ptrs;
  for (size_t t = 0; t < sizes.size(); ++t) {
    auto d = draws(static_cast<size_t>(sizes[t]) + 1, 400 + t, -3, 3);
    xs.emplace_back(static_cast<size_t>(sizes[t]));
    for (int64_t i = 0; i < sizes[t]; ++i) xs[t][i] = T(d[i]) * T(i % 17 == 0 ? 1e3 : 1);  // a wide range of terms
  }
  for (auto& x : xs) ptrs.push_back(x.data());
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  std::vector<double> out(sizes.size(), -1.0);
  kernels::cpu::sum_squares_multi<T>(out.data(), ptrs.data(), sizes.data(), static_cast<int64_t>(sizes.size()));
  std::vector<double> one(sizes.size(), -1.0);
  for (size_t t = 0; t < sizes.size(); ++t) kernels::cpu::sum_squares<T>(&one[t], ptrs[t], sizes[t]);
  omp_set_num_threads(saved);
  for (size_t t = 0; t < sizes.size(); ++t) {
    const double ref = sum_squares_ref(ptrs[t], sizes[t]);
    EXPECT_EQ(std::memcmp(&out[t], &ref, sizeof ref), 0) << "n=" << sizes[t] << ": " << out[t] << " vs " << ref;
    EXPECT_EQ(std::memcmp(&one[t], &ref, sizeof ref), 0) << "n=" << sizes[t] << ": " << one[t] << " vs " << ref;
  }
  EXPECT_EQ(out[0], 0.0);
}

TEST(OptimKernels, SumSquaresMultiKeepsTheFixedPartsOfEachTensor) {
  for (int threads : {1, 2}) {
    check_sum_squares_multi<float>(threads);
    check_sum_squares_multi<double>(threads);
  }
}

}  // namespace
