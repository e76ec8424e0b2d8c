// attention.h — the multi-head self-attention layer (GPT-2 / nanoGPT layout): a fused qkv Linear
// (3C, C) + bias, the position encoding's hooks (rotate, scores, attention_scale), the fused
// attention op (autograd/ops/attention.h) and the output projection. The name is kept from GPT,
// but the mask follows the position encoding's `causal()` (bidirectional is an option).
// Not here: attention dropout (the model applies dropout to the layer's output), KV caching.
#pragma once

#include "autograd/ops/attention.h"
#include "nn/layers.h"
#include "nn/posenc/position_encoding.h"

namespace posgrad::nn {

class CausalSelfAttention : public Module {
 public:
  // proj_std: init std of the output projection (GPT-2 scales residual projections by
  // 1/sqrt(2 n_layer)); qkv uses N(0, 0.02).
  CausalSelfAttention(int64_t n_embd, int64_t n_head, bool bias, Generator& gen, double proj_std = 0.02,
                      DType dtype = DType::Float32);
  // x (B, T, C) at positions pos0 .. pos0+T-1 -> (B, T, C).
  Tensor forward(const Tensor& x, PositionEncoding& pe, int64_t layer, int64_t pos0) const;
  // Diagnostics (no gradient): average attention weight per query-key distance |i - j| = 0..T-1,
  // averaged over batch and query positions, heads kept: (H, T) float64.
  Tensor attention_by_distance(const Tensor& x, PositionEncoding& pe, int64_t layer, int64_t pos0) const;

  std::shared_ptr<Linear> qkv, proj;
  int64_t n_embd, n_head;
  // Use the naive materialising reference instead of the fused op (tests and benchmarks only).
  bool naive = false;

 private:
  struct Heads {
    Tensor q, k, v;  // (B, H, T, D)
    ScoreModifier mod;
    double scale = 1.0;
  };
  Heads heads(const Tensor& x, PositionEncoding& pe, int64_t layer, int64_t pos0) const;
};

}  // namespace posgrad::nn
