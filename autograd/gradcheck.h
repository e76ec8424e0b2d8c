// gradcheck.h — finite-difference check of a backward pass, in double precision.
// For f: inputs -> y and a fixed random projection r (same shape as y), it compares the analytic
// vector-Jacobian product (backward with grad r) with central differences of <f(x), r>
// element by element. Public: the tests use it and `posgrad gradcheck` prints its table.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace posgrad {

struct GradcheckOptions {
  double eps = 1e-6;   // central-difference step
  double atol = 1e-5;  // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-3;
  uint64_t seed = 1234;  // for the projection r
};

struct GradcheckInputReport {
  size_t input = 0;  // position in the input list
  Shape shape;
  double max_abs_err = 0;  // over elements
  double max_rel_err = 0;  // abs err / max(|numeric|, 1e-12)
  int64_t worst_index = -1;
  double worst_analytic = 0, worst_numeric = 0;
  bool ok = true;
};

struct GradcheckResult {
  bool ok = true;
  std::vector<GradcheckInputReport> inputs;  // one per input that requires grad
  std::string summary() const;               // one line per input; names the worst element
};

// Inputs must be float64 CPU tensors; those with requires_grad are checked (others are constants).
GradcheckResult gradcheck(const std::function<Tensor(const TensorList&)>& f, const TensorList& inputs,
                          const GradcheckOptions& opt = {});

}  // namespace posgrad
