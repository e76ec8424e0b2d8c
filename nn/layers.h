// layers.h — the basic layers: Linear, LayerNorm, Embedding, Dropout. Each is a thin Module
// over one functional op (autograd/ops.h); the math and the backward live in those ops.
#pragma once

#include "autograd/ops.h"
#include "nn/module.h"

namespace posgrad::nn {

// y = x W^T + b, W (out, in) as in PyTorch. Init: N(0, std) for W (GPT-2 style), zeros for b.
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias, Generator& gen, double std = 0.02, DType dtype = DType::Float32);
  Tensor forward(const Tensor& x) const { return linear(x, weight, bias); }
  // residual + forward(x), the residual (..., out) added inside the product (linear_residual).
  Tensor forward(const Tensor& x, const Tensor& residual) const { return linear_residual(x, weight, bias, residual); }
  Tensor weight, bias;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t C, double eps = 1e-5, DType dtype = DType::Float32);
  Tensor forward(const Tensor& x) const { return layer_norm(x, weight, bias, eps); }
  Tensor weight, bias;
  double eps;
};

class Embedding : public Module {
 public:
  Embedding(int64_t V, int64_t C, Generator& gen, double std = 0.02, DType dtype = DType::Float32);
  Tensor forward(const Tensor& idx) const { return embedding(weight, idx); }
  Tensor weight;
};

class Dropout : public Module {
 public:
  Dropout(double p, Generator& gen);
  Tensor forward(const Tensor& x) const { return dropout(x, p, is_training(), *gen); }
  // forward() returns its input unchanged (and draws nothing): p == 0 or evaluation mode.
  bool is_identity() const { return p == 0.0 || !is_training(); }
  double p;

 private:
  Generator* gen;
};

}  // namespace posgrad::nn
