// test_autograd.cpp — the reverse-mode engine: accumulation into leaves, a tensor used twice,
// no_grad and detach, backward(grad) for non-scalars and its errors, retain_graph, gradient hooks
// on leaves and non-leaves (inspecting and replacing gradients), retain_grad, deep chains (no stack
// overflow in backward or in destruction), non-floating outputs, gradients through chains of views,
// and determinism (bit-identical values and gradients across runs and OpenMP thread counts).
// Not here: per-op gradients (test_op_registry sweeps them), gradcheck itself (test_gradcheck).
#include <gtest/gtest.h>
#include <omp.h>

#include <pthread.h>

#include <cmath>
#include <functional>
#include <numeric>
#include <string>

#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "support/test_util.h"
#include "tensor/random.h"

using namespace posgrad;
using posgrad::test::thrown_message;

namespace {

Tensor leaf(std::vector<double> v, const Shape& s) {
  Tensor t = Tensor::from_vector(v, s, DType::Float64);
  t.set_requires_grad(true);
  return t;
}

std::vector<double> iota_vec(int64_t n, double start = 0.0) {
  std::vector<double> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

struct OmpThreads {
  int prev;
  explicit OmpThreads(int n) : prev(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(prev); }
};

// ---- basics ----------------------------------------------------------------------------------------

TEST(Autograd, RequiresGradPropagationAndLeaves) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor c = Tensor::from_vector(std::vector<double>{4, 5, 6}, {3}, DType::Float64);
  EXPECT_TRUE(x.is_leaf());
  EXPECT_TRUE(x.requires_grad());
  EXPECT_FALSE(c.requires_grad());
  Tensor y = x * c;
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_EQ(y.grad_fn()->name(), "mul");
  Tensor z = c * c;
  EXPECT_FALSE(z.requires_grad());
  EXPECT_EQ(z.grad_fn(), nullptr);
  // A non-leaf cannot have requires_grad changed.
  std::string m = thrown_message<AutogradError>([&] { y.set_requires_grad(false); });
  EXPECT_NE(m.find("(3,)"), std::string::npos) << m;
  // Unused leaves get no gradient.
  Tensor unused = leaf({1}, {1});
  sum(y).backward();
  EXPECT_FALSE(unused.grad().defined());
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{4, 5, 6}));
  EXPECT_FALSE(c.grad().defined());
  // A non-leaf keeps no .grad unless asked.
  EXPECT_FALSE(y.grad().defined());
}

TEST(Autograd, GradientsAccumulateIntoLeavesAcrossBackwardCalls) {
  Tensor x = leaf({1, -2, 3}, {3});
  sum(x * x).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{2, -4, 6}));
  Tensor g1 = x.grad();
  sum(x * 3.0).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{5, -1, 9}));
  sum(x * x).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{7, -5, 15}));
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
  sum(x).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{1, 1, 1}));
  // The earlier handle was the accumulated buffer (PyTorch semantics: in-place accumulation); it is
  // not disturbed by the fresh gradient after zero_grad.
  EXPECT_EQ(g1.to_vector(), (std::vector<double>{7, -5, 15}));
}

TEST(Autograd, AccumulatesIntoAStridedOrPresetGradient) {
  // A gradient installed with set_grad may be a strided view; accumulation must follow the logical
  // layout, not memory order.
  Tensor x = leaf({0, 0, 0, 0, 0, 0}, {2, 3});
  Tensor preset = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {3, 2}, DType::Float64).t();  // (2, 3)
  x.set_grad(preset);
  Tensor w = Tensor::from_vector(std::vector<double>{10, 20, 30, 40, 50, 60}, {2, 3}, DType::Float64);
  sum(x * w).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{11, 23, 35, 42, 54, 66}));
  // A preset gradient of the wrong shape is an error, not a silent broadcast.
  Tensor y = leaf({1, 2}, {2});
  y.set_grad(Tensor::ones({1}, DType::Float64));
  EXPECT_THROW(sum(y * 2.0).backward(), ShapeError);
}

TEST(Autograd, LeafGradientDoesNotAliasCallerTensors) {
  // The gradient handed to backward() must be copied, not adopted, by the leaf: accumulating into
  // x.grad later must not modify the caller's tensor, and vice versa.
  Tensor x = leaf({1, 2}, {2});
  Tensor g = Tensor::from_vector(std::vector<double>{10, 20}, {2}, DType::Float64);
  x.backward(g);  // x is its own root
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{10, 20}));
  g.data<double>()[0] = -1;
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{10, 20}));
  x.backward(g);
  EXPECT_EQ(g.to_vector(), (std::vector<double>{-1, 20}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{9, 40}));

  // Same through a view and through clone (whose backward passes the gradient through unchanged).
  Tensor y = leaf({1, 2, 3, 4}, {2, 2});
  Tensor gy = Tensor::from_vector(std::vector<double>{1, 1, 1, 1}, {4}, DType::Float64);
  y.view({4}).backward(gy);
  y.clone().view({4}).backward(gy);
  EXPECT_EQ(gy.to_vector(), (std::vector<double>{1, 1, 1, 1}));
  EXPECT_EQ(y.grad().to_vector(), (std::vector<double>{2, 2, 2, 2}));
}

TEST(Autograd, SameTensorUsedTwice) {
  Tensor x = leaf({1, -2, 3.5}, {3});
  Tensor y = x * x;
  y.backward(Tensor::ones({3}, DType::Float64));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{2, -4, 7}));

  // Two branches that meet again: z = x*2 + exp(x)... d/dx = 2 + exp(x).
  Tensor a = leaf({0.5, -1}, {2});
  Tensor z = sum(a * 2.0 + exp(a));
  z.backward();
  auto g = a.grad().to_vector();
  EXPECT_DOUBLE_EQ(g[0], 2 + std::exp(0.5));
  EXPECT_DOUBLE_EQ(g[1], 2 + std::exp(-1.0));

  // x + x and x - x.
  Tensor b = leaf({1, 2}, {2});
  sum(b + b).backward();
  EXPECT_EQ(b.grad().to_vector(), (std::vector<double>{2, 2}));
  b.zero_grad();
  sum(b - b).backward();
  EXPECT_EQ(b.grad().to_vector(), (std::vector<double>{0, 0}));
  // x * x * x through an intermediate used twice: d/dx x^3 = 3x^2.
  Tensor c = leaf({2, -3}, {2});
  Tensor c2 = c * c;
  sum(c2 * c).backward();
  EXPECT_EQ(c.grad().to_vector(), (std::vector<double>{12, 27}));
}

// add's backward hands one gradient tensor to both inputs (no copies). Nothing may then see another
// tensor's gradient change: two leaves (and a retained non-leaf) fed by one add get gradients that do
// not share memory, so that writing into one of them (as clipping or zero_grad do) leaves the others
// alone; broadcast inputs get their sums; and a gradient reaching a node twice through the shared
// tensor is accumulated, not doubled in place.
TEST(Autograd, AddSharesItsGradientWithoutAliasingLeafGradients) {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor y = leaf({5, 6, 7, 8}, {2, 2});
  Tensor r = leaf({10, 20}, {2});  // broadcast over rows
  Tensor m = y * 1.0;
  m.retain_grad();
  Tensor s = x + m;
  Tensor g = Tensor::from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}, DType::Float64);
  (s + r).backward(g);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(y.grad().to_vector(), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(r.grad().to_vector(), (std::vector<double>{4, 6}));
  EXPECT_FALSE(x.grad().shares_storage(y.grad()));
  EXPECT_FALSE(x.grad().shares_storage(m.grad()));
  EXPECT_FALSE(y.grad().shares_storage(m.grad()));
  EXPECT_FALSE(x.grad().shares_storage(g));
  x.grad().data<double>()[0] = -100;  // an in-place write into one gradient
  EXPECT_EQ(y.grad().to_vector(), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(m.grad().to_vector(), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(g.to_vector(), (std::vector<double>{1, 2, 3, 4}));
  // One tensor reaching the same node along two paths: d/da (a + a) + (a + a) = 4.
  Tensor a = leaf({1, -1}, {2});
  Tensor b = a + a;
  sum(b + b).backward();
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{4, 4}));
}

TEST(Autograd, NoGradGuard) {
  Tensor x = leaf({1, 2}, {2});
  EXPECT_TRUE(GradMode::is_enabled());
  {
    NoGradGuard g;
    EXPECT_FALSE(GradMode::is_enabled());
    Tensor y = x * x + 1.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_EQ(y.to_vector(), (std::vector<double>{2, 5}));
    Tensor v = x.unsqueeze(0).t();  // views too
    EXPECT_FALSE(v.requires_grad());
    EXPECT_EQ(v.grad_fn(), nullptr);
    {
      NoGradGuard nested;
      EXPECT_FALSE(GradMode::is_enabled());
    }
    EXPECT_FALSE(GradMode::is_enabled());  // the inner guard restores "off", not "on"
    EXPECT_THROW(y.backward(Tensor::ones({2}, DType::Float64)), AutogradError);
  }
  EXPECT_TRUE(GradMode::is_enabled());
  Tensor y = x * x;
  EXPECT_TRUE(y.requires_grad());
  // The guard is restored when an exception leaves its scope.
  try {
    NoGradGuard g;
    throw std::runtime_error("x");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(GradMode::is_enabled());
}

TEST(Autograd, Detach) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = x * 2.0;
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_TRUE(d.shares_storage(y));
  EXPECT_EQ(d.to_vector(), (std::vector<double>{2, 4, 6}));
  // Writes through the detached handle are visible in y (shared storage).
  d.data<double>()[0] = 7;
  EXPECT_EQ(y.to_vector()[0], 7);
  // No gradient flows through the detached factor: d/dx (x * stopgrad(x)) = x.
  Tensor a = leaf({3, -4}, {2});
  sum(a * a.detach()).backward();
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{3, -4}));
  // A detached tensor may be made a new leaf.
  Tensor e = y.detach();
  e.set_requires_grad(true);
  sum(e * e).backward();
  EXPECT_TRUE(e.grad().defined());
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, BackwardWithGradientForNonScalars) {
  Tensor x = leaf(iota_vec(6, 1), {2, 3});
  Tensor y = x * x;  // dy/dx = 2x
  Tensor g = Tensor::from_vector(std::vector<double>{1, 0, -1, 2, 0.5, 3}, {2, 3}, DType::Float64);
  y.backward(g);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{2, 0, -6, 16, 5, 36}));

  // backward() without a gradient on a non-scalar is an AutogradError naming the shape.
  Tensor y2 = x * 2.0;
  std::string m = thrown_message<AutogradError>([&] { y2.backward(); });
  EXPECT_NE(m.find("(2, 3)"), std::string::npos) << m;
  // A wrong-shaped gradient is a ShapeError naming both shapes.
  m = thrown_message<ShapeError>([&] { y2.backward(Tensor::ones({3, 2}, DType::Float64)); });
  EXPECT_NE(m.find("(3, 2)"), std::string::npos) << m;
  EXPECT_NE(m.find("(2, 3)"), std::string::npos) << m;
  // backward on a tensor that does not require grad.
  EXPECT_THROW(Tensor::ones({1}).backward(), AutogradError);
  // A one-element non-0-d tensor gets an implicit gradient of 1.
  Tensor s = leaf({2}, {1, 1});
  (s * s).backward();
  EXPECT_EQ(s.grad().to_vector(), (std::vector<double>{4}));
}

TEST(Autograd, BackwardTwiceNeedsRetainGraph) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = sum(exp(x) * x);
  y.backward();
  std::string m = thrown_message<AutogradError>([&] { y.backward(); });
  EXPECT_NE(m.find("retain_graph"), std::string::npos) << m;

  // With retain_graph the second pass works and accumulates: d/dx x e^x = (1 + x) e^x.
  Tensor a = leaf({1, 2}, {2});
  Tensor z = sum(exp(a) * a);
  z.backward(Tensor(), /*retain_graph=*/true);
  auto g1 = a.grad().to_vector();
  EXPECT_DOUBLE_EQ(g1[0], 2 * std::exp(1.0));
  EXPECT_DOUBLE_EQ(g1[1], 3 * std::exp(2.0));
  z.backward(Tensor(), true);
  auto g2 = a.grad().to_vector();
  EXPECT_DOUBLE_EQ(g2[0], 2 * g1[0]);
  EXPECT_DOUBLE_EQ(g2[1], 2 * g1[1]);
  z.backward();  // last pass frees the graph
  EXPECT_THROW(z.backward(), AutogradError);
  EXPECT_DOUBLE_EQ(a.grad().to_vector()[0], 3 * g1[0]);
}

// ---- hooks and retain_grad -------------------------------------------------------------------------

TEST(AutogradHooks, LeafHookInspectsAndReplaces) {
  Tensor x = leaf({1, 2, 3}, {3});
  std::vector<double> seen;
  int calls = 0;
  x.register_hook([&](const Tensor& g) {
    seen = g.to_vector();
    ++calls;
    return Tensor();  // keep
  });
  sum(x * x).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, (std::vector<double>{2, 4, 6}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{2, 4, 6}));

  Tensor w = leaf({1, 2, 3}, {3});
  w.register_hook([](const Tensor& g) { return g * 2.0; });
  sum(w * w).backward();
  EXPECT_EQ(w.grad().to_vector(), (std::vector<double>{4, 8, 12}));
  // Hooks run on every backward, before accumulation.
  sum(w).backward();
  EXPECT_EQ(w.grad().to_vector(), (std::vector<double>{6, 10, 14}));
  // Hooks registered before the graph exists apply too (same accumulator node).
  Tensor v = leaf({1}, {1});
  v.register_hook([](const Tensor& g) { return g * 10.0; });
  (v * 3.0).backward();
  EXPECT_EQ(v.grad().to_vector(), (std::vector<double>{30}));
}

TEST(AutogradHooks, NonLeafHookSeesTheRightGradientAndCanReplaceIt) {
  // L = sum(y * w), y = 3x: dL/dy = w, dL/dx = 3w.
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor w = Tensor::from_vector(std::vector<double>{0.5, -1, 4}, {3}, DType::Float64);
  Tensor y = x * 3.0;
  std::vector<double> seen;
  y.register_hook([&](const Tensor& g) {
    seen = g.to_vector();
    return g * 2.0;  // replace: doubled
  });
  sum(y * w).backward();
  EXPECT_EQ(seen, (std::vector<double>{0.5, -1, 4}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{3, -6, 24}));  // 2 * 3w

  // Hooks on the same tensor chain in registration order; an intermediate used twice sees the
  // summed gradient once.
  Tensor a = leaf({1, 2}, {2});
  Tensor b = a * 1.0;
  std::vector<std::vector<double>> order;
  int calls = 0;
  b.register_hook([&](const Tensor& g) {
    order.push_back(g.to_vector());
    ++calls;
    return g + 1.0;
  });
  b.register_hook([&](const Tensor& g) {
    order.push_back(g.to_vector());
    ++calls;
    return Tensor();
  });
  sum(b * b).backward();  // dL/db = 2b = (2, 4)
  EXPECT_EQ(calls, 2);
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], (std::vector<double>{2, 4}));
  EXPECT_EQ(order[1], (std::vector<double>{3, 5}));
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{3, 5}));

  // A hook that returns a wrong shape is a ShapeError.
  Tensor p = leaf({1, 2}, {2});
  Tensor q = p * 2.0;
  q.register_hook([](const Tensor&) { return Tensor::ones({3}, DType::Float64); });
  std::string m = thrown_message<ShapeError>([&] { sum(q).backward(); });
  EXPECT_NE(m.find("(3,)"), std::string::npos) << m;
  EXPECT_NE(m.find("(2,)"), std::string::npos) << m;
  EXPECT_TRUE(GradMode::is_enabled()) << "an exception in backward must restore grad mode";

  // register_hook on a tensor that does not require grad.
  EXPECT_THROW(Tensor::ones({2}).register_hook([](const Tensor& g) { return g; }), AutogradError);
}

TEST(AutogradHooks, HookOnOneOutputOfAMultiOutputOp) {
  // max returns (values, indices); a hook on the values sees dL/dvalues.
  Tensor x = leaf({1, 5, 2, 7, 3, 0}, {2, 3});
  auto [v, idx] = max(x, 1);
  EXPECT_FALSE(idx.requires_grad());
  std::vector<double> seen;
  v.register_hook([&](const Tensor& g) {
    seen = g.to_vector();
    return Tensor();
  });
  sum(v * v).backward();  // dL/dv = 2v = (10, 14)
  EXPECT_EQ(seen, (std::vector<double>{10, 14}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{0, 10, 0, 14, 0, 0}));
}

TEST(AutogradHooks, RetainGrad) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = x * 2.0;
  y.retain_grad();
  y.retain_grad();  // a second call must not retain the gradient twice
  Tensor z = y * y;
  z.retain_grad();
  sum(z).backward();
  ASSERT_TRUE(y.grad().defined());
  EXPECT_EQ(y.grad().to_vector(), (std::vector<double>{4, 8, 12}));  // 2y
  EXPECT_EQ(z.grad().to_vector(), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{8, 16, 24}));
  // Retained gradients accumulate across backward calls like a leaf's.
  Tensor a = leaf({1, 2}, {2});
  Tensor b = a * 3.0;
  b.retain_grad();
  Tensor l = sum(b * b);
  l.backward(Tensor(), true);
  l.backward();
  EXPECT_EQ(b.grad().to_vector(), (std::vector<double>{12, 24}));  // 2 * 2b
  // On a leaf retain_grad is a no-op.
  Tensor c = leaf({1}, {1});
  c.retain_grad();
  (c * 2.0).backward();
  EXPECT_EQ(c.grad().to_vector(), (std::vector<double>{2}));
}

// ---- deep graphs -----------------------------------------------------------------------------------

// Runs fn on a thread with a small stack (256 KiB), so that any recursion proportional to the
// graph depth (in backward or in destroying the graph) overflows here even where the main thread's
// 8 MiB would have absorbed it.
void run_with_small_stack(const std::function<void()>& fn) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 256 * 1024), 0);
  pthread_t th;
  auto tramp = [](void* p) -> void* {
    (*static_cast<const std::function<void()>*>(p))();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&th, &attr, tramp, const_cast<std::function<void()>*>(&fn)), 0);
  pthread_join(th, nullptr);
  pthread_attr_destroy(&attr);
}

TEST(AutogradDeep, TenThousandOpChainBackwardAndDestruction) {
  run_with_small_stack([] {
    const int n = 10000;
    {
      Tensor x = leaf({1.0, -2.0}, {2});
      Tensor y = x;
      for (int i = 0; i < n; ++i) y = y * 1.0001;
      sum(y).backward();
      const double want = std::pow(1.0001, n);
      auto g = x.grad().to_vector();
      EXPECT_NEAR(g[0], want, 1e-9 * want);
      EXPECT_NEAR(g[1], want, 1e-9 * want);
    }
    {
      Tensor x = leaf({0.5}, {1});
      Tensor y = x;
      for (int i = 0; i < n; ++i) y = y + 1.0;
      EXPECT_DOUBLE_EQ(y.item(), 0.5 + n);
      y.backward();
      EXPECT_EQ(x.grad().item(), 1.0);
    }
    {
      // Alternating binary ops with a constant, keeping the graph alive (retain_graph) and then
      // dropping it without ever running backward again.
      Tensor x = leaf({1.0, 2.0}, {2});
      Tensor c = Tensor::from_vector(std::vector<double>{1.0, 1.0}, {2}, DType::Float64);
      Tensor y = x;
      for (int i = 0; i < n; ++i) y = (i % 2) ? y * c : y + c;
      sum(y).backward(Tensor(), true);
      EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{1, 1}));
    }
    {
      // A graph that is built and destroyed without any backward (destruction alone must be iterative).
      Tensor x = leaf({1.0}, {1});
      Tensor y = x;
      for (int i = 0; i < 5 * n; ++i) y = exp(y * 0.0);
      EXPECT_EQ(y.item(), 1.0);
    }
    {
      // A deep chain of views.
      Tensor x = leaf({1, 2, 3, 4}, {2, 2});
      Tensor y = x;
      for (int i = 0; i < n; ++i) y = y.t();
      sum(y * y).backward();
      EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{2, 4, 6, 8}));
    }
  });
}

// ---- memory: saved tensors are freed, graphs leave nothing behind -----------------------------------

size_t cpu_bytes() { return backend(DeviceType::CPU).current_bytes(); }

TEST(AutogradMemory, BackwardFreesSavedTensorsUnlessRetained) {
  const int64_t n = 1 << 16;  // 512 KiB per float64 tensor
  const size_t one = static_cast<size_t>(n) * sizeof(double);
  for (bool retain : {false, true}) {
    Tensor x = Tensor::zeros({n}, DType::Float64);
    x.set_requires_grad(true);
    Tensor t = x;
    for (int i = 0; i < 8; ++i) t = exp(t * 0.5);  // each exp saves its output, each mul nothing
    Tensor loss = sum(t);
    t = Tensor();  // only the graph keeps the intermediates alive now
    const size_t before = cpu_bytes();
    loss.backward(Tensor(), retain);
    const size_t after = cpu_bytes();
    // Before: x and the 8 exp outputs the graph saved. After: x.grad is one new tensor and, without
    // retain_graph, the 8 saved outputs are gone.
    if (!retain)
      EXPECT_LE(after + 6 * one, before + one) << "saved tensors were not released";
    else
      EXPECT_GE(after + one / 2, before + one) << "retain_graph must keep the saved tensors";
  }
}

TEST(AutogradMemory, GraphsWithHooksAndRetainedGradsLeaveNothingBehind) {
  const size_t base = cpu_bytes();
  {
    Tensor x = Tensor::ones({1000}, DType::Float64);
    x.set_requires_grad(true);
    Tensor y = x * 2.0;
    y.retain_grad();
    y.register_hook([](const Tensor& g) { return g * 1.0; });
    x.register_hook([](const Tensor& g) { return g + 0.0; });
    Tensor z = sum(exp(y) * y);
    z.backward(Tensor(), true);
    z.backward();
    EXPECT_TRUE(y.grad().defined());
    EXPECT_TRUE(x.grad().defined());
  }
  EXPECT_EQ(cpu_bytes(), base) << "a reference cycle (e.g. retain_grad holding its own tensor) leaks the graph";
}

// ---- dtypes ---------------------------------------------------------------------------------------

TEST(Autograd, NonFloatingOutputsNeverRequireGrad) {
  Tensor x = leaf({1, 3, 2, 0}, {2, 2});
  auto [v, idx] = max(x, -1);
  EXPECT_TRUE(v.requires_grad());
  EXPECT_EQ(idx.dtype(), DType::Int64);
  EXPECT_FALSE(idx.requires_grad());
  EXPECT_EQ(idx.grad_fn(), nullptr);
  EXPECT_EQ(idx.to_int_vector(), (std::vector<int64_t>{1, 0}));
  Tensor i = x.to(DType::Int64);
  EXPECT_FALSE(i.requires_grad());
  EXPECT_EQ(i.grad_fn(), nullptr);
  EXPECT_THROW(i.backward(Tensor::ones({2, 2}, DType::Int64)), AutogradError);
  Tensor b = x.to(DType::Bool);
  EXPECT_FALSE(b.requires_grad());
  // float64 -> float32 -> float64 is differentiable and the gradient comes back in float64.
  Tensor y = x.to(DType::Float32) * 2.0;
  EXPECT_TRUE(y.requires_grad());
  EXPECT_EQ(y.dtype(), DType::Float32);
  sum(y.to(DType::Float64)).backward();
  EXPECT_EQ(x.grad().dtype(), DType::Float64);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{2, 2, 2, 2}));
}

// ---- gradients through views -----------------------------------------------------------------------

TEST(AutogradViews, NarrowOfTransposeAndFriends) {
  // x (3, 4); y = x.t() (4, 3); n = y.narrow(0, 1, 2) (2, 3) = rows 1..2 of x^T = columns 1..2 of x.
  Tensor x = leaf(iota_vec(12), {3, 4});
  Tensor w = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}, DType::Float64);
  Tensor n = x.t().narrow(0, 1, 2);
  EXPECT_TRUE(n.shares_storage(x));
  EXPECT_EQ(n.to_vector(), (std::vector<double>{1, 5, 9, 2, 6, 10}));
  sum(n * w).backward();
  // d/dx[i][j] = w[j-1][i] for j in {1, 2}, else 0.
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{0, 1, 4, 0,  //
                                                       0, 2, 5, 0,  //
                                                       0, 3, 6, 0}));

  // expand sums the gradient over broadcast dims; unsqueeze/squeeze/permute/view pass it through.
  Tensor b = leaf({1, 2, 3}, {3});
  Tensor e = b.unsqueeze(0).expand({4, 3});        // (4, 3)
  Tensor pe = e.unsqueeze(-1).permute({2, 1, 0});  // (1, 3, 4)
  Tensor s = pe.squeeze(0).reshape({12});          // non-contiguous -> reshape copies
  Tensor wv = Tensor::from_vector(iota_vec(12), {12}, DType::Float64);
  sum(s * wv).backward();
  // s[k] = pe[0][k / 4][k % 4] = b[k / 4], so db[j] = sum_{k: k/4 == j} k.
  EXPECT_EQ(b.grad().to_vector(), (std::vector<double>{0 + 1 + 2 + 3, 4 + 5 + 6 + 7, 8 + 9 + 10 + 11}));
}

TEST(AutogradViews, GradcheckThroughViewChains) {
  Generator gen(17);
  Tensor x = randn({3, 5, 4}, gen, DType::Float64);
  x.set_requires_grad(true);
  Tensor w = randn({5, 2, 3}, gen, DType::Float64);
  auto f = [&](const TensorList& in) {
    const Tensor& a = in[0];
    Tensor v = a.permute({1, 2, 0})   // (5, 4, 3)
                   .narrow(1, 1, 2)   // (5, 2, 3), non-contiguous
                   .reshape({10, 3})  // copy
                   .view({5, 2, 3});
    Tensor u = a.transpose(0, 2).narrow(0, 2, 1).squeeze(0).t().unsqueeze(1);  // (3, 1, 5)
    Tensor z = v * w + sum(u, {0, 1}).view({5, 1, 1}).expand({5, 2, 3});
    return tanh(z).flatten();
  };
  GradcheckResult r = gradcheck(f, {x});
  EXPECT_TRUE(r.ok) << r.summary();
  ASSERT_EQ(r.inputs.size(), 1u);
}

TEST(AutogradViews, WritesThroughAViewAreSeenByTheBase) {
  // Views of a leaf alias it; a no-grad write through a view changes what the next forward sees.
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  {
    NoGradGuard g;
    Tensor col = x.t().narrow(0, 1, 1);  // column 1 of x: elements 1 and 3
    col.data<double>()[0] = 20;
    col.data<double>()[col.strides()[1]] = 40;
  }
  EXPECT_EQ(x.to_vector(), (std::vector<double>{1, 20, 3, 40}));
}

// ---- determinism ----------------------------------------------------------------------------------

struct RunResult {
  std::vector<double> out, gx, gw;
};

// Elementwise + reductions + views, sized so that the kernels take their parallel branches.
RunResult run_small_model(uint64_t seed) {
  Generator gen(seed);
  Tensor x = randn({64, 1024}, gen, DType::Float32);
  Tensor w = randn({1024}, gen, DType::Float32, Device::cpu(), 0.0, 0.5);
  Tensor drop_gen_probe = rand({8}, gen);  // advances the generator like a training step would
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  Tensor h = tanh(x * w + 0.25);  // (64, 1024)
  Tensor a = gelu(h) * silu(h.t().contiguous().t()) - exp(h * -0.5);
  Tensor m = mean(a, {1}, true);                  // (64, 1)
  Tensor c = a - m;                               // broadcast
  Tensor v = sum(c * c, {0});                     // (1024)
  auto [mx, idx] = max(c.view({64, 32, 32}), 2);  // (64, 32)
  Tensor loss = sum(sqrt(v + 1.0)) + mean(mx.t().narrow(0, 3, 20)) + sum(drop_gen_probe);
  loss.backward();
  return {{loss.item()}, x.grad().to_vector(), w.grad().to_vector()};
}

TEST(AutogradDeterminism, SameSeedSameBitsAcrossRunsAndThreadCounts) {
  RunResult a, b, c;
  {
    OmpThreads th(2);
    a = run_small_model(123);
    b = run_small_model(123);
  }
  {
    OmpThreads th(1);
    c = run_small_model(123);
  }
  // Bit-identical: compare with ==, not a tolerance.
  EXPECT_TRUE(a.out == b.out);
  EXPECT_TRUE(a.gx == b.gx);
  EXPECT_TRUE(a.gw == b.gw);
  EXPECT_TRUE(a.out == c.out) << a.out[0] << " vs " << c.out[0];
  EXPECT_TRUE(a.gx == c.gx);
  EXPECT_TRUE(a.gw == c.gw);
  // And a different seed gives something different (the test is not vacuous).
  RunResult d = run_small_model(124);
  EXPECT_FALSE(a.out == d.out);
}

}  // namespace
