// attention.h — the attention ops (functional API): the fused multi-head attention with a score
// modifier (autograd/ops/attention.cpp), the rotary embedding (autograd/ops/rope.cpp) and the naive
// materialising attention that serves as the oracle in tests and benchmarks. The position
// encodings (nn/posenc/) build the ScoreModifier; the attention layer (nn/attention.h) calls these.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "autograd/function.h"
#include "tensor/kernels/kernels.h"
#include "tensor/tensor.h"

namespace posgrad {

using kernels::ScoreBias;

// What a position encoding adds to the attention scores s(i,j) = scale q_i.k_j + bias_h(i,j).
// Relative position r = key position - query position (T5's convention; DeBERTa's i - j = -r).
struct ScoreModifier {
  ScoreBias kind = ScoreBias::None;
  // T5: (R, H) learned table, bias = table[bucket(r), h] (spec §1.3). Differentiable.
  Tensor table;
  // ALiBi: one slope per head; bias = -slope_h |r| (spec §4). Constants.
  std::vector<double> slopes;
  // DeBERTa: projected relative embeddings (R, H, D), differentiable; undefined = term off.
  // kr gives c2p = q_i . kr[c], qr gives p2c = k_j . qr[c], both scaled by `scale` (spec §2.4).
  Tensor kr, qr;
  // T5 / DeBERTa: table row of relative position r (must lie in [0, R)).
  std::function<int64_t(int64_t r)> bucket;
};

// Fused attention (FlashAttention-style, explicit backward). q (B, H, Tq, D), k, v (B, H, Tk, D)
// -> (B, H, Tq, D). Query i is at position i + q_offset, key j at j; `causal` hides keys with
// j > i + q_offset (a query that sees no key outputs 0). Memory: O(B H T) beyond inputs/outputs.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const ScoreModifier& mod, bool causal,
                 double scale, int64_t q_offset = 0);

// The same function built from ordinary ops (matmul, embedding-gather, masked_fill, softmax): it
// materialises the (B, H, Tq, Tk) scores, bias and probabilities. The oracle for tests/benchmarks.
Tensor attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, const ScoreModifier& mod, bool causal,
                           double scale, int64_t q_offset = 0);

// Non-differentiable diagnostic: average attention probability per query-key distance |i - j|,
// averaged over batch and query positions, per head. q, k (B, H, T, D) -> (H, T) float64.
Tensor attention_distance_profile(const Tensor& q, const Tensor& k, const ScoreModifier& mod, bool causal,
                                  double scale);

// Rotary embedding (explicit backward = inverse rotation). x (..., T, D); cos, sin (T, dr/2)
// constants for the T positions (angles times the attention factor), dr = 2 * cos.size(1) <= D.
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved);

}  // namespace posgrad
