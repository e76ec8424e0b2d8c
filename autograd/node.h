// node.h — the autograd graph: a Node is one recorded operation; its edges point at the nodes
// that produced its inputs. The graph is built by Function<T>::apply during the forward pass and
// consumed by the engine (engine.cpp). Leaves accumulate into .grad through AccumulateGrad.
// Not here: any math (that is in the ops' explicit backward kernels).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace posgrad {

// Thread-local switch that Function<T>::apply consults: no graph is recorded while it is off.
struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

struct NoGradGuard {
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

struct Edge {
  std::shared_ptr<Node> fn;  // null: that input needs no gradient
  uint32_t input_nr = 0;     // which output slot of fn this gradient belongs to
};

// What a missing output gradient should look like (materialised as zeros by the engine).
struct OutputMeta {
  Shape shape;
  DType dtype = DType::Float32;
  Device device;
};

class Node {
 public:
  Node();
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // grads: one per output (all defined: the engine fills missing ones with zeros).
  // Returns one gradient per input edge (undefined where no gradient flows).
  virtual TensorList apply(TensorList&& grads) = 0;
  virtual std::string name() const = 0;
  // Frees saved tensors after a backward without retain_graph.
  virtual void release_saved() {}

  std::vector<Edge> next_edges;
  std::vector<OutputMeta> outputs;
  std::vector<std::vector<GradHook>> pre_hooks;  // per output slot, run before apply
  uint64_t sequence_nr;                          // creation order; later nodes run first
  bool released = false;
};

// Leaf sink: adds the incoming gradient into the leaf's .grad.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf);
  TensorList apply(TensorList&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// The gradient edge for a tensor: its grad_fn slot, or its leaf accumulator, or none.
Edge gradient_edge(const Tensor& t);

// Runs backward from roots (each with its gradient) through the recorded graph.
void run_backward(const TensorList& roots, const TensorList& grads, bool retain_graph);

}  // namespace posgrad
