// registry.h — the op registry: one entry per differentiable op (and per interesting variant:
// broadcasting, masks, odd shapes). The test suite sweeps it (gradcheck in double, forward against
// a naive reference, CPU-vs-CUDA parity where a GPU exists) and `posgrad gradcheck` prints it.
// An op missing from here is a bug.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops/attention.h"
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
  GradcheckOptions grad{};                             // tolerances of the double-precision gradcheck
  double forward_tol = 1e-9;     // max abs error of fn vs reference in double (relative to max |ref|)
  bool cuda = true;              // has a CUDA kernel to compare against
  std::vector<EdgePoint> edges;  // exact checks at singular / extreme points (may be empty)
};

// The autograd ops' cases, in a fixed order. The position encodings add theirs beside their code
// (nn/posenc/, PosEncEntry::op_cases); nn::all_op_cases() is both lists, which the test sweep and
// `posgrad gradcheck` run.
const std::vector<OpCase>& op_registry();

// Each op family contributes its cases (autograd/registry_<family>.cpp).
void register_elementwise_cases(std::vector<OpCase>& out);
void register_reduce_cases(std::vector<OpCase>& out);
void register_view_cases(std::vector<OpCase>& out);
void register_nn_cases(std::vector<OpCase>& out);         // matmul, softmax, norms, embedding, loss, shape ops
void register_attention_cases(std::vector<OpCase>& out);  // fused attention, every modifier shape

// Helpers for case builders.
Tensor make_input(const Shape& shape, Generator& gen, DType dtype, bool requires_grad = true, double lo = -1.0,
                  double hi = 1.0);
// Row-major element access on a contiguous CPU double copy (for naive references).
std::vector<double> host(const Tensor& t);
// An edge-point input: the values (row-major) in `shape` and dtype, requiring grad when asked.
Tensor edge_input(const std::vector<double>& values, const Shape& shape, DType dtype, bool requires_grad = true);

// ---- attention case builders (registry_attention.cpp), also used by the encodings' cases ------------
// Bias added to the score of (b, h, i, j) by a naive reference.
using AttentionBiasFn = std::function<double(int64_t b, int64_t h, int64_t i, int64_t j)>;
// Naive attention in double on the CPU: out[b,h,i] = sum_j softmax_j(scale q.k + bias) v_j; keys with
// j > i + q_offset are hidden when causal; a row that sees nothing is 0. q (B, H, Tq, D), k, v (B, H, Tk, D).
// sinks (H values, or empty): the softmax denominator gains exp(sinks[h]) (a key of value 0).
Tensor naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionBiasFn& bias, bool causal,
                       double scale, int64_t q_offset, const std::vector<double>& sinks = {});
// A fused-attention case "attention/<name>" or, for an encoding, "posenc/<kind>/<name>": inputs q, k, v
// then extra_inputs; fn = attention(q, k, v, modifier(inputs), ...); reference = naive_attention with
// reference_bias(inputs).
struct AttentionCase {
  std::string name;  // the full case name
  Shape q, k;        // (B, H, Tq, D), (B, H, Tk, D)
  bool causal = true;
  int64_t q_offset = 0;
  double scale = 0;                                                         // 0: 1/sqrt(D)
  std::function<TensorList(Generator&, DType)> extra_inputs;                // null: none
  std::function<ScoreModifier(const TensorList& inputs)> modifier;          // null: no modifier
  std::function<AttentionBiasFn(const TensorList& inputs)> reference_bias;  // null: no bias
  // Learnable attention sinks: one more input, sinks (H) drawn in [-1.5, 1.5) after the extra inputs,
  // set as the modifier's sinks and added to the reference's softmax denominators.
  bool sinks = false;
};
void add_attention_case(std::vector<OpCase>& out, const AttentionCase& c);
// A content-position case: inputs q, k, v then kr and/or qr (rows, H, D); the modifier's table row
// of relative position r = j - i - q_offset is bucket(r); the reference adds
// scale (q_i . kr[c] + k_j . qr[c]) naively. With `positions` (self-attention: Tq = Tk =
// positions.size(), q_offset 0) the modifier carries them as query and key positions and
// r = positions[j] - positions[i] (a CPU-only case). sinks: with attention sinks (AttentionCase::sinks).
void add_content_position_case(std::vector<OpCase>& out, const std::string& name, const Shape& q, const Shape& k,
                               bool causal, int64_t q_offset, double scale, int64_t rows, bool c2p, bool p2c,
                               std::function<int64_t(int64_t r)> bucket, std::vector<int64_t> positions = {},
                               bool sinks = false);
// A case whose fn is f(inputs, false) and whose reference is f(inputs, true) without a graph (the
// fused ops against the materialising ones, e.g. attention vs attention_reference).
void add_composite(std::vector<OpCase>& out, const std::string& name, std::function<TensorList(Generator&, DType)> in,
                   std::function<Tensor(const TensorList&, bool naive)> f);
// attention_reference when naive, else the fused attention.
Tensor run_attention(const Tensor& q, const Tensor& k, const Tensor& v, const ScoreModifier& m, bool causal,
                     double scale, bool naive);

}  // namespace posgrad
