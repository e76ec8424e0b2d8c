// tensor_hooks.cpp — the autograd layer's implementation of tensor/autograd_hooks.h, installed at
// static initialisation: the differentiable views and copies are the Functions of
// autograd/ops/view.cpp, and backward / register_hook / retain_grad / grad_accumulator act on the
// graph (node.h) and the engine (engine.cpp).
//
// Nothing calls into this file by name, so a static archive would leave its object out of a
// program and the hooks would never be installed. The extern "C" anchor below is what the build
// names with `-Wl,--undefined=posgrad_autograd_hooks_anchor` on everything that links
// posgrad_autograd (CMakeLists.txt), which makes the linker take this object.
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/ops/view.h"
#include "tensor/autograd_hooks.h"

extern "C" const char posgrad_autograd_hooks_anchor = 0;

namespace posgrad {

namespace {

class TensorHooks final : public AutogradHooks {
 public:
  Tensor view_as(const Tensor& x, const Shape& shape, const Shape& strides) const override {
    return ops::view_as(x, shape, strides);
  }
  Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) const override { return ops::permute(x, dims); }
  Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) const override {
    return ops::narrow(x, dim, start, length);
  }
  Tensor expand(const Tensor& x, const Shape& shape) const override { return ops::expand(x, shape); }
  Tensor copy(const Tensor& x) const override { return ops::copy(x); }
  Tensor to_dtype(const Tensor& x, DType dtype) const override { return ops::to_dtype(x, dtype); }
  Tensor to_device(const Tensor& x, Device dev) const override { return ops::to_device(x, dev); }

  void backward(const Tensor& root, const Tensor& grad, bool retain_graph) const override {
    run_backward({root}, {grad}, retain_graph);
  }

  void register_hook(const Tensor& t, GradHook fn) const override {
    std::shared_ptr<Node> node = t.is_leaf() ? t.grad_accumulator() : t.grad_fn();
    uint32_t slot = t.is_leaf() ? 0 : t.output_nr();
    if (node->pre_hooks.size() <= slot) node->pre_hooks.resize(slot + 1);
    node->pre_hooks[slot].push_back(std::move(fn));
  }

  void retain_grad(const Tensor& t) const override {
    std::weak_ptr<TensorImpl> weak = t.impl_ptr();
    t.register_hook([weak](const Tensor& g) {
      if (auto self = weak.lock()) {
        if (self->grad) {
          NoGradGuard guard;
          self->grad = add(Tensor(self->grad), g).impl_ptr();
        } else {
          self->grad = g.clone().impl_ptr();
        }
      }
      return Tensor();
    });
  }

  std::shared_ptr<Node> make_grad_accumulator(const std::shared_ptr<TensorImpl>& leaf) const override {
    return std::make_shared<AccumulateGrad>(leaf);
  }
};

// Stateless and trivially destructible: constant-initialised, and valid until the program ends.
constinit const TensorHooks g_hooks{};
[[maybe_unused]] const bool g_installed = (set_autograd_hooks(&g_hooks), true);

}  // namespace

}  // namespace posgrad
