// engine.cpp — grad mode, graph bookkeeping and the backward engine.
//
// The engine is iterative (no recursion anywhere, so a 10,000-op chain cannot overflow the stack):
// 1. walk the graph from the roots with an explicit stack and count each node's incoming edges;
// 2. run nodes whose count reached zero, latest-created first (a max-heap on sequence_nr, which is
//    a topological order and the same order on every run: determinism);
// 3. sum gradients arriving at the same slot in arrival order (fixed by 2).
// Node destruction is iterative too (see ~Node). Higher-order gradients are not supported: the
// engine runs with grad mode off.
#include <algorithm>
#include <atomic>
#include <queue>
#include <unordered_map>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/profiler.h"
#include "tensor/kernels/kernels.h"

namespace posgrad {

namespace {
thread_local bool g_grad_enabled = true;
std::atomic<uint64_t> g_next_sequence{0};
}  // namespace

bool GradMode::is_enabled() { return g_grad_enabled; }
void GradMode::set_enabled(bool enabled) { g_grad_enabled = enabled; }

Node::Node() : sequence_nr(g_next_sequence.fetch_add(1)) {}

// Releasing the head of a long chain would destroy the chain recursively (each node owns the next
// through its edges). Instead, children are moved onto a thread-local list and destroyed by the
// outermost destructor in a loop.
Node::~Node() {
  thread_local std::vector<std::shared_ptr<Node>> pending;
  thread_local bool draining = false;
  for (auto& e : next_edges)
    if (e.fn) pending.push_back(std::move(e.fn));
  if (draining) return;
  draining = true;
  while (!pending.empty()) {
    std::shared_ptr<Node> n = std::move(pending.back());
    pending.pop_back();
    n.reset();  // may push that node's children
  }
  draining = false;
}

AccumulateGrad::AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : leaf_(leaf) {
  outputs.push_back({leaf->shape, leaf->dtype, leaf->storage->device()});
}

TensorList AccumulateGrad::apply(TensorList&& grads) {
  profiler::Scope timed("accumulate_grad", true);
  auto leaf = leaf_.lock();
  if (!leaf || !grads[0].defined()) return {};
  Tensor g = grads[0];
  POSGRAD_CHECK(g.shape() == leaf->shape, ShapeError, "gradient of shape ", shape_str(g.shape()), " for leaf of shape ",
                shape_str(leaf->shape));
  if (!leaf->grad) {
    // Own the gradient: a fresh contiguous tensor nobody else references can be kept as is.
    bool owned = g.is_contiguous() && g.impl_ptr().use_count() <= 2 && g.impl().storage.use_count() == 1 &&
                 g.offset() == 0 && g.impl().grad_fn == nullptr;
    leaf->grad = (owned ? g : g.clone()).detach().impl_ptr();
  } else {
    Tensor acc(leaf->grad);
    POSGRAD_CHECK(acc.shape() == g.shape() && acc.dtype() == g.dtype(), ShapeError, "accumulated gradient ", acc.str(),
                  " does not match incoming gradient ", g.str(), " (set_grad with a wrong tensor?)");
    if (!acc.is_contiguous()) {  // e.g. set_grad(t.t()): the in-place axpy below assumes row-major memory
      leaf->grad = add(acc, g).impl_ptr();
      return {};
    }
    Tensor gc = g.contiguous();
    dispatch_floating(acc.dtype(), "AccumulateGrad", [&](auto tag) {
      using T = decltype(tag);
      POSGRAD_KERNEL(acc.device(), axpy<T>, acc.data<T>(), gc.data<T>(), acc.numel(), T(1));
    });
  }
  return {};
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (t.grad_fn()) return {t.grad_fn(), t.output_nr()};
  return {t.grad_accumulator(), 0};
}

namespace detail {

bool any_requires_grad(const TensorList& inputs) {
  for (const auto& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void set_next_edges(Node& node, const TensorList& inputs) {
  node.next_edges.reserve(inputs.size());
  for (const auto& t : inputs) node.next_edges.push_back(gradient_edge(t));
}

void attach_outputs(const std::shared_ptr<Node>& node, TensorList& outs, const TensorList& inputs, bool record) {
  for (size_t i = 0; i < outs.size(); ++i) {
    Tensor& o = outs[i];
    if (!o.defined()) {
      if (record) node->outputs.push_back({});
      continue;
    }
    // An output that is literally an input object must not have its history overwritten.
    for (const auto& in : inputs)
      if (in.defined() && in.same(o)) {
        o = o.detach();
        break;
      }
    if (!record) continue;
    node->outputs.push_back({o.shape(), o.dtype(), o.device()});
    if (!is_floating(o.dtype())) continue;
    o.impl().requires_grad = true;
    o.impl().grad_fn = node;
    o.impl().output_nr = static_cast<uint32_t>(i);
  }
}

}  // namespace detail

void run_backward(const TensorList& roots, const TensorList& grads, bool retain_graph) {
  NoGradGuard no_grad;
  struct Pending {
    TensorList grads;
  };
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, Pending> buffers;
  std::vector<std::shared_ptr<Node>> keep;  // owns every node until the end of backward

  // 1. dependency counts, iteratively.
  std::vector<Node*> stack;
  std::unordered_map<Node*, bool> seen;
  for (const auto& r : roots) {
    Edge e = gradient_edge(r);
    if (e.fn && !seen[e.fn.get()]) {
      seen[e.fn.get()] = true;
      stack.push_back(e.fn.get());
      keep.push_back(e.fn);
    }
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& e : n->next_edges) {
      if (!e.fn) continue;
      deps[e.fn.get()] += 1;
      if (!seen[e.fn.get()]) {
        seen[e.fn.get()] = true;
        stack.push_back(e.fn.get());
        keep.push_back(e.fn);
      }
    }
  }

  auto accumulate = [&](Node* n, uint32_t slot, const Tensor& g) {
    auto& buf = buffers[n].grads;
    if (buf.size() < n->outputs.size()) buf.resize(std::max<size_t>(n->outputs.size(), slot + 1));
    if (buf.size() <= slot) buf.resize(slot + 1);
    if (!buf[slot].defined())
      buf[slot] = g;
    else
      buf[slot] = add(buf[slot], g);
  };

  auto cmp = [](Node* a, Node* b) { return a->sequence_nr < b->sequence_nr; };
  std::priority_queue<Node*, std::vector<Node*>, decltype(cmp)> ready(cmp);
  for (size_t i = 0; i < roots.size(); ++i) {
    Edge e = gradient_edge(roots[i]);
    if (!e.fn) continue;
    accumulate(e.fn.get(), e.input_nr, grads[i]);
  }
  for (auto& n : keep)
    if (deps[n.get()] == 0) ready.push(n.get());

  // 2. execute.
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    if (!buffers.count(n)) {  // no gradient reached this node: only release its dependants
      for (auto& e : n->next_edges)
        if (e.fn && --deps[e.fn.get()] == 0) ready.push(e.fn.get());
      continue;
    }
    TensorList in = std::move(buffers[n].grads);
    buffers.erase(n);
    in.resize(n->outputs.size());
    for (size_t s = 0; s < in.size(); ++s) {
      if (s < n->pre_hooks.size() && in[s].defined())
        for (auto& hook : n->pre_hooks[s]) {
          Tensor r = hook(in[s]);
          if (r.defined()) {
            POSGRAD_CHECK(r.shape() == in[s].shape(), ShapeError, "gradient hook on ", n->name(), " returned shape ",
                          shape_str(r.shape()), ", expected ", shape_str(in[s].shape()));
            in[s] = r;
          }
        }
      if (!in[s].defined() && is_floating(n->outputs[s].dtype))
        in[s] = Tensor::zeros(n->outputs[s].shape, n->outputs[s].dtype, n->outputs[s].device);
    }
    TensorList out = n->apply(std::move(in));
    if (!retain_graph) n->release_saved();
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.fn) continue;
      if (i < out.size() && out[i].defined()) accumulate(e.fn.get(), e.input_nr, out[i]);
      if (--deps[e.fn.get()] == 0) ready.push(e.fn.get());
    }
  }
}

}  // namespace posgrad
