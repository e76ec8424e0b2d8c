// test_layering.cpp — the seam between the tensor and autograd layers (tensor/autograd_hooks.h):
// the autograd layer's hooks are linked in and installed in every program that links posgrad; a
// view or copy of a tensor that does not require grad takes the autograd-free path and records
// nothing, one of a tensor that requires grad records its node (under grad mode only); and with no
// hooks installed — a program with the tensor layer alone — the autograd-free path still works
// while every method that needs autograd throws an AutogradError naming itself.
// Not here: the include and link layering itself (the layering.* CTest tests, tests/layering.cmake).
#include <gtest/gtest.h>

#include <string>

#include "autograd/node.h"
#include "support/test_util.h"
#include "tensor/autograd_hooks.h"
#include "tensor/tensor.h"

using namespace posgrad;
using posgrad::test::thrown_message;

namespace {

Tensor iota(const Shape& shape) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return Tensor::from_vector(v, shape);
}

// Uninstalls the hooks for one test and puts them back whatever happens.
class WithoutAutogradHooks {
 public:
  WithoutAutogradHooks() : saved_(&autograd_hooks("test")) { set_autograd_hooks(nullptr); }
  ~WithoutAutogradHooks() { set_autograd_hooks(saved_); }
  WithoutAutogradHooks(const WithoutAutogradHooks&) = delete;
  WithoutAutogradHooks& operator=(const WithoutAutogradHooks&) = delete;

 private:
  const AutogradHooks* saved_;
};

}  // namespace

TEST(Layering, AutogradHooksAreLinkedAndInstalled) { EXPECT_TRUE(has_autograd_hooks()); }

TEST(Layering, ViewsOfATensorWithoutGradRecordNothing) {
  Tensor x = iota({2, 3, 4});
  for (const Tensor& y : {x.view({6, 4}), x.reshape({4, 6}), x.permute({2, 0, 1}), x.transpose(0, 2), x.narrow(1, 1, 2),
                          x.unsqueeze(0).expand({5, 2, 3, 4}), x.unsqueeze(1).squeeze(1), x.flatten(),
                          x.transpose(0, 1).contiguous(), x.clone(), x.to(DType::Float64)}) {
    EXPECT_FALSE(y.requires_grad()) << y.str();
    EXPECT_EQ(y.grad_fn(), nullptr) << y.str();
  }
  EXPECT_TRUE(x.narrow(1, 1, 2).shares_storage(x));
  EXPECT_EQ(x.permute({2, 0, 1}).contiguous().to_vector()[1], 4.0);  // element (1, 0, 0) of the permuted view
}

TEST(Layering, ViewsOfATensorThatRequiresGradRecordTheirNode) {
  Tensor x = iota({2, 3}).set_requires_grad(true);
  EXPECT_EQ(x.view({3, 2}).grad_fn()->name(), "view");
  EXPECT_EQ(x.transpose(0, 1).grad_fn()->name(), "permute");
  EXPECT_EQ(x.narrow(0, 1, 1).grad_fn()->name(), "narrow");
  EXPECT_EQ(x.expand({4, 2, 3}).grad_fn()->name(), "expand");
  EXPECT_EQ(x.clone().grad_fn()->name(), "copy");
  EXPECT_EQ(x.to(DType::Float64).grad_fn()->name(), "to_dtype");
  {
    NoGradGuard guard;
    EXPECT_EQ(x.view({3, 2}).grad_fn(), nullptr);
    EXPECT_EQ(x.clone().grad_fn(), nullptr);
  }
  Tensor y = x.transpose(0, 1).reshape({6});
  y.retain_grad();
  Tensor s = y.narrow(0, 2, 3).clone();
  s.backward(Tensor::ones({3}));
  EXPECT_EQ(y.grad().to_vector(), (std::vector<double>{0, 0, 1, 1, 1, 0}));
  // y[k] is x[k % 2][k / 2]: y[2], y[3], y[4] are x[0][1], x[1][1], x[0][2]
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{0, 1, 1, 0, 1, 0}));
}

TEST(Layering, WithoutTheAutogradLayerTheTensorLayerStillWorks) {
  WithoutAutogradHooks no_hooks;
  EXPECT_FALSE(has_autograd_hooks());
  Tensor x = iota({2, 3});
  EXPECT_EQ(x.t().contiguous().to_vector(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(x.reshape({3, 2}).narrow(0, 1, 1).flatten().clone().to(DType::Int64).to_int_vector(),
            (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(x.narrow(1, 2, 1).narrow(0, 1, 1).item(), 5.0);
  EXPECT_EQ(x.unsqueeze(0).expand({4, 2, 3}).contiguous().to_vector().size(), 24u);
  EXPECT_EQ(x.view({6}).unsqueeze(1).squeeze(1).to(DType::Float64).to_vector(), x.to_vector());
}

TEST(Layering, WithoutTheAutogradLayerAutogradMethodsThrowNamingThemselves) {
  WithoutAutogradHooks no_hooks;
  Tensor x = iota({2, 3}).set_requires_grad(true);
  auto message = [](auto&& fn) { return thrown_message<AutogradError>(fn); };
  EXPECT_NE(message([&] { x.view({3, 2}); }).find("view: "), std::string::npos);
  EXPECT_NE(message([&] { x.reshape({6}); }).find("view: "), std::string::npos);
  EXPECT_NE(message([&] { x.transpose(0, 1); }).find("permute: "), std::string::npos);
  EXPECT_NE(message([&] { x.narrow(0, 0, 1); }).find("narrow: "), std::string::npos);
  EXPECT_NE(message([&] { x.expand({2, 2, 3}); }).find("expand: "), std::string::npos);
  EXPECT_NE(message([&] { x.clone(); }).find("copy: "), std::string::npos);
  EXPECT_NE(message([&] { x.to(DType::Float64); }).find("to(dtype): "), std::string::npos);
  EXPECT_NE(message([&] { x.backward(Tensor::ones({2, 3})); }).find("backward: "), std::string::npos);
  EXPECT_NE(message([&] { x.register_hook([](const Tensor& g) { return g; }); }).find("register_hook: "),
            std::string::npos);
  EXPECT_NE(message([&] { x.grad_accumulator(); }).find("grad_accumulator: "), std::string::npos);
  // What needs no autograd still works on it: metadata, detach, reading the data.
  EXPECT_EQ(x.detach().t().contiguous().to_vector(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(x.to_vector(), (std::vector<double>{0, 1, 2, 3, 4, 5}));  // to_vector detaches first
  x.retain_grad();                                                    // a leaf: nothing to do, so no autograd needed
}
