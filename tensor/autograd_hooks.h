// autograd_hooks.h — what Tensor's methods need from the autograd layer, as an interface that the
// autograd layer implements and installs (autograd/tensor_hooks.cpp). The tensor layer sits below
// autograd and includes nothing from it, yet some Tensor methods are autograd operations: the views
// and copies (view/reshape, permute/transpose, narrow, expand, unsqueeze/squeeze, flatten,
// contiguous, clone, to) record a node when their input requires grad, and backward(),
// register_hook(), retain_grad() and grad_accumulator() drive the engine. Those methods validate
// their arguments in tensor.cpp and then call through this interface: dependency inversion, so that
// the link and include dependencies point down only.
//
// Precedent: PyTorch's at::impl::VariableHooksInterface (ATen's TensorBase::backward,
// register_hook, retain_grad, ... call an interface that torch/csrc/autograd registers with
// SetVariableHooks at static initialisation).
//
// Not here: the graph types (autograd/node.h) — Node stays an opaque, forward-declared type to this
// layer. A tensor that does not require grad has no history to record under any grad mode, so the
// view and copy methods take the autograd-free primitives of tensor/nograd.h themselves and never
// need the hooks; a method that needs autograd when no hooks are installed (a program that links
// the tensor layer alone) throws an AutogradError naming the operation.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tensor/tensor.h"

namespace posgrad {

class AutogradHooks {
 public:
  // The differentiable views and copies (autograd/ops/view.h): arguments already validated by the
  // Tensor method; a node is recorded when grad mode is on and x requires grad.
  virtual Tensor view_as(const Tensor& x, const Shape& shape, const Shape& strides) const = 0;
  virtual Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) const = 0;
  virtual Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) const = 0;
  virtual Tensor expand(const Tensor& x, const Shape& shape) const = 0;
  virtual Tensor copy(const Tensor& x) const = 0;
  virtual Tensor to_dtype(const Tensor& x, DType dtype) const = 0;
  virtual Tensor to_device(const Tensor& x, Device dev) const = 0;

  // The autograd entry points of Tensor, after the Tensor method's checks (see tensor.h).
  // Runs the engine from `root` with its gradient `grad` (same shape as root).
  virtual void backward(const Tensor& root, const Tensor& grad, bool retain_graph) const = 0;
  // Adds fn to the pre-hooks of the node slot that receives t's gradient (t requires grad).
  virtual void register_hook(const Tensor& t, GradHook fn) const = 0;
  // Registers the hook that keeps a non-leaf t's gradient in t.grad() (called once per tensor).
  virtual void retain_grad(const Tensor& t) const = 0;
  // A new AccumulateGrad node for a leaf (Tensor::grad_accumulator caches it in the TensorImpl).
  virtual std::shared_ptr<Node> make_grad_accumulator(const std::shared_ptr<TensorImpl>& leaf) const = 0;

 protected:
  // Never deleted through this interface; non-virtual so that an implementation without state is
  // trivially destructible and can be a constant-initialised static that outlives every user.
  ~AutogradHooks() = default;
};

// Installs the autograd layer's implementation (null uninstalls). The object must outlive every use.
void set_autograd_hooks(const AutogradHooks* hooks);
bool has_autograd_hooks();
// The installed hooks; AutogradError naming `op` when none are installed.
const AutogradHooks& autograd_hooks(const char* op);

}  // namespace posgrad
