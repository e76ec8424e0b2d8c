// registry.h — the op registry: one entry per differentiable op (and per interesting variant:
// broadcasting, masks, odd shapes). The test suite sweeps it (gradcheck in double, forward against
// a naive reference, CPU-vs-CUDA parity where a GPU exists) and `posgrad gradcheck` prints it.
// An op missing from here is a bug.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "tensor/random.h"

namespace posgrad {

struct OpCase {
  std::string name;  // "family/op[/variant]"
  // Builds the inputs in the given dtype on the CPU; floating inputs to be checked have
  // requires_grad set. Generators keep inputs away from kinks (relu at 0, max ties, ...).
  std::function<TensorList(Generator&, DType)> inputs;
  std::function<Tensor(const TensorList&)> fn;         // the op under test
  std::function<Tensor(const TensorList&)> reference;  // naive loops on CPU in double; null if none
  GradcheckOptions grad{};  // tolerances of the double-precision gradcheck
  double forward_tol = 1e-9;  // max abs error of fn vs reference in double (relative to max |ref|)
  bool cuda = true;           // has a CUDA kernel to compare against
};

// All registered cases, in a fixed order.
const std::vector<OpCase>& op_registry();

// Each op family contributes its cases (autograd/registry_<family>.cpp).
void register_elementwise_cases(std::vector<OpCase>& out);
void register_reduce_cases(std::vector<OpCase>& out);
void register_view_cases(std::vector<OpCase>& out);
void register_nn_cases(std::vector<OpCase>& out);         // matmul, softmax, norms, embedding, loss, shape ops
void register_attention_cases(std::vector<OpCase>& out);  // fused attention and the position encodings

// Helpers for case builders.
Tensor make_input(const Shape& shape, Generator& gen, DType dtype, bool requires_grad = true, double lo = -1.0,
                  double hi = 1.0);
// Row-major element access on a contiguous CPU double copy (for naive references).
std::vector<double> host(const Tensor& t);

}  // namespace posgrad
