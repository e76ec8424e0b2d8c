// function.h — Function<Fn>: how every differentiable op is written (DESIGN.md §4).
//
//   struct ScaleFn : Function<ScaleFn> {
//     struct Saved { double s; };                        // named saved state, never push/pop order
//     static Tensor forward(Context<Saved>& ctx, const Tensor& x, double s);
//     static TensorList backward(Context<Saved>& ctx, const TensorList& grad_out);  // one slot per tensor input
//   };
//   Tensor y = ScaleFn::apply(x, 2.0);
//
// apply() runs forward with grad mode off and records a node only when grad mode is on and some
// tensor input requires grad. Tensor inputs are the arguments of type Tensor and the elements of
// arguments of type TensorList, in order. forward may return a Tensor or a TensorList; outputs of
// a non-floating dtype never require grad. Saved tensors should be detach()ed (save_tensor does it)
// so that a node never keeps its own outputs' history alive.
#pragma once

#include <tuple>
#include <type_traits>
#include <utility>

#include "autograd/node.h"
#include "autograd/profiler.h"

namespace posgrad {

template <typename S>
struct Context {
  S saved{};
  std::vector<bool> needs_input_grad;  // per tensor input
  bool needs(size_t i) const { return i < needs_input_grad.size() && needs_input_grad[i]; }
};

// History-free handle for saving in a Context (shares data, not the graph).
inline Tensor save_tensor(const Tensor& t) { return t.defined() ? t.detach() : Tensor(); }

namespace detail {

inline void collect_inputs(TensorList&) {}
template <typename A, typename... Rest>
void collect_inputs(TensorList& out, const A& a, const Rest&... rest) {
  if constexpr (std::is_same_v<std::decay_t<A>, Tensor>) {
    out.push_back(a);
  } else if constexpr (std::is_same_v<std::decay_t<A>, TensorList>) {
    out.insert(out.end(), a.begin(), a.end());
  }
  collect_inputs(out, rest...);
}

// Attaches node as grad_fn of outputs (aliasing any output that is literally an input object).
void attach_outputs(const std::shared_ptr<Node>& node, TensorList& outs, const TensorList& inputs, bool record);
bool any_requires_grad(const TensorList& inputs);
void set_next_edges(Node& node, const TensorList& inputs);

template <typename F>
class FunctionNode final : public Node {
 public:
  using Saved = typename F::Saved;
  Context<Saved> ctx;
  TensorList apply(TensorList&& grads) override {
    if (released)
      throw AutogradError(std::string("backward through ") + F::kName +
                          " a second time: its saved tensors were freed (use retain_graph=true)");
    profiler::Scope timed(F::kName, true);
    return F::backward(ctx, grads);
  }
  std::string name() const override { return F::kName; }
  void release_saved() override {
    ctx.saved = Saved{};
    released = true;
  }
};

}  // namespace detail

namespace detail {
// Every tensor input of one op on one device: a kernel given one device's pointer for another's
// memory reads garbage on the CPU and faults on a GPU, so the mix is refused by name instead.
inline void require_one_device(const char* op, const TensorList& inputs) {
  size_t first = inputs.size();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    if (first == inputs.size()) {
      first = i;
    } else if (!(inputs[i].device() == inputs[first].device())) {
      throw DeviceError(concat(op, ": tensor input ", i, " is on ", inputs[i].device().str(), " but input ", first,
                               " is on ", inputs[first].device().str(), "; move them to one device first"));
    }
  }
}
}  // namespace detail

template <typename F>
struct Function {
  // Throws DeviceError when the tensor inputs are not all on one device (detail::require_one_device).
  template <typename... Args>
  static auto apply(const Args&... args) {
    TensorList inputs;
    detail::collect_inputs(inputs, args...);
    detail::require_one_device(F::kName, inputs);
    auto node = std::make_shared<detail::FunctionNode<F>>();
    const bool record = GradMode::is_enabled() && detail::any_requires_grad(inputs);
    node->ctx.needs_input_grad.resize(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i)
      node->ctx.needs_input_grad[i] = record && inputs[i].defined() && inputs[i].requires_grad();
    using Out = decltype(F::forward(node->ctx, args...));
    Out out;
    {
      NoGradGuard guard;
      profiler::Scope timed(F::kName, false);
      out = F::forward(node->ctx, args...);
    }
    if constexpr (std::is_same_v<Out, Tensor>) {
      TensorList outs{out};
      detail::attach_outputs(node, outs, inputs, record);
      if (record) detail::set_next_edges(*node, inputs);
      return outs[0];
    } else {
      detail::attach_outputs(node, out, inputs, record);
      if (record) detail::set_next_edges(*node, inputs);
      return out;
    }
  }
};

}  // namespace posgrad
