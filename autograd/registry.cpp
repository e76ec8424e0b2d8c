// registry.cpp — assembles the op registry from the families, and the case-builder helpers.
#include "autograd/registry.h"

namespace posgrad {

const std::vector<OpCase>& op_registry() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> v;
    register_view_cases(v);
    register_elementwise_cases(v);
    register_reduce_cases(v);
    register_nn_cases(v);
    register_attention_cases(v);
    return v;
  }();
  return cases;
}

Tensor make_input(const Shape& shape, Generator& gen, DType dtype, bool requires_grad, double lo, double hi) {
  Tensor t = rand(shape, gen, dtype, Device::cpu(), lo, hi);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

std::vector<double> host(const Tensor& t) { return t.to_vector(); }

Tensor edge_input(const std::vector<double>& values, const Shape& shape, DType dtype, bool requires_grad) {
  Tensor t = Tensor::from_vector(values, shape, dtype);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

}  // namespace posgrad
