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

// An exact check at a chosen point — a singular point of the derivative, a tie, a NaN, an extreme
// magnitude — where finite differences say nothing useful. It states the inputs, the exact expected
// output and the exact expected gradient of each input for a given upstream gradient: the
// mathematically right values, and PyTorch's convention where the derivative is a choice (e.g.
// d/dx x^0 = 0 at x = 0, relu'(0) = 0, max's gradient to the returned index). The sweep
// (tests/test_op_registry.cpp, EdgePoints) checks every point in float32 and float64 on the CPU,
// and on CUDA where a GPU exists. Expected values are given in double and must be exactly
// representable or be compared within `ulps` (see below) of the dtype's epsilon.
struct EdgePoint {
  std::string what;  // the point and the rule it checks, e.g. "x^0 at x = 0: d/dx = 0 (pow_backward)"
  // The inputs in the given dtype on the CPU; floating inputs whose gradient is checked have
  // requires_grad set (edge_input below).
  std::function<TensorList(DType)> inputs;
  std::function<Tensor(const TensorList&)> fn;  // null: the case's fn
  std::vector<double> output;                   // expected fn(inputs), row-major; NaN = expect NaN
  std::vector<double> grad_out;                 // upstream gradient (row-major, y's shape); empty: ones
  // Expected gradient of each input, by input position; an empty vector (or a missing entry) is not
  // checked. NaN = expect NaN; infinities must match exactly.
  std::vector<std::vector<double>> grads;
  // Tolerance: |got - want| <= ulps * epsilon(dtype) * |want| + atol (so want == 0 means exactly 0).
  double ulps = 4, atol = 0;
};

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
  std::vector<EdgePoint> edges;  // exact checks at singular / extreme points (may be empty)
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
// An edge-point input: the values (row-major) in `shape` and dtype, requiring grad when asked.
Tensor edge_input(const std::vector<double>& values, const Shape& shape, DType dtype, bool requires_grad = true);

}  // namespace posgrad
