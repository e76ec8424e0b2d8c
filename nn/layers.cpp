// layers.cpp — see layers.h.
#include "nn/layers.h"

namespace posgrad::nn {

Linear::Linear(int64_t in, int64_t out, bool with_bias, Generator& gen, double std, DType dtype) {
  POSGRAD_CHECK(in > 0 && out > 0, ValueError, "Linear(", in, ", ", out, "): sizes must be positive");
  weight = register_parameter("weight", randn({out, in}, gen, dtype, Device::cpu(), 0.0, std));
  if (with_bias) bias = register_parameter("bias", Tensor::zeros({out}, dtype));
}

LayerNorm::LayerNorm(int64_t C, double eps_, DType dtype) : eps(eps_) {
  POSGRAD_CHECK(C > 0, ValueError, "LayerNorm(", C, "): size must be positive");
  weight = register_parameter("weight", Tensor::ones({C}, dtype));
  bias = register_parameter("bias", Tensor::zeros({C}, dtype));
}

Embedding::Embedding(int64_t V, int64_t C, Generator& gen, double std, DType dtype) {
  POSGRAD_CHECK(V > 0 && C > 0, ValueError, "Embedding(", V, ", ", C, "): sizes must be positive");
  weight = register_parameter("weight", randn({V, C}, gen, dtype, Device::cpu(), 0.0, std));
}

Dropout::Dropout(double p_, Generator& g) : p(p_), gen(&g) {
  POSGRAD_CHECK(p >= 0.0 && p < 1.0, ValueError, "dropout probability must be in [0, 1), got ", p);
}

}  // namespace posgrad::nn
