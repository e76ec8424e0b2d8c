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

// What a position encoding adds to the attention scores s(i,j) = scale q_i.k_j + bias_h(i,j), in
// one of the shapes the kernels know (kernels.h, ScoreBias). The op names no encoding.
// Relative position r = key position - query position (T5's convention; DeBERTa's i - j = -r).
struct ScoreModifier {
  ScoreBias kind = ScoreBias::None;
  // Distance: bias_by_distance (H, Tq + Tk - 1), differentiable, same dtype and device as q: entry
  // [h, d] is added to every pair (i, j) on the diagonal d = j - i + Tq - 1, whose relative position
  // is r = d - (Tq - 1) - q_offset (diagonal_relative_positions). The encoding computes it with
  // ordinary ops (T5: a gather of its bucket table; ALiBi: slope x distance; KERPLE: its kernel),
  // so autograd carries the kernel's gradient back to the encoding's parameters.
  Tensor bias_by_distance;
  // Dense: bias_dense (H, Tq, Tk), differentiable, same dtype and device as q: entry [h, i, j] is
  // added to pair (i, j) of every batch element (SPEC-positions-2 §0.2, K1). For a bias that depends
  // on the query position as well as the distance (FIRE's normaliser max(i, L)); the encoding builds
  // it with ordinary ops and applies per-token positions itself (the modifier then carries none:
  // ValueError otherwise). The fused op's gradient is dS summed over the batch. CPU only (DeviceError
  // on a CUDA device). Memory: H Tq Tk elements, and as many for its gradient.
  Tensor bias_dense;
  // Separable: bias_separable (B, H, Tq + Tk) = [a | c], differentiable, same dtype and device as q:
  // pair (i, j) of batch element b and head h gains a[b, h, i] + c[b, h, j] (SPEC-positions-2 §0.2,
  // K2; FoX's F_i - F_j: a = F, c = -F). The fused op's gradient is the row sums of dS into a and its
  // column sums into c. No per-token positions (ValueError); CPU only (DeviceError). Memory: B H (Tq + Tk).
  Tensor bias_separable;
  // ContentPosition: projected relative embeddings (R, H, D), differentiable; undefined = term off.
  // kr gives c2p = q_i . kr[c], qr gives p2c = k_j . qr[c], both scaled by `scale` (DeBERTa, spec §2.4),
  // c = bucket(r), which must lie in [0, R).
  Tensor kr, qr;
  std::function<int64_t(int64_t r)> bucket;
  // Per-token positions (randomized positions, Ruoss et al. 2023 §3; CPU only): empty = query i at
  // i + q_offset, key j at j. Set: query_positions (Tq) and key_positions (Tk), each strictly
  // increasing and >= 0, q_offset 0; pair (i, j) has r = key_positions[j] - query_positions[i], and
  // the causal mask stays the index order (keys j > i hidden: the same thing when queries and keys
  // are one sequence). Distance: bias_by_distance is then (H, Pq + Pk - 1), Pq = query_positions.back()
  // + 1, Pk = key_positions.back() + 1, column d the diagonal of the virtual window 0..Pq-1 x 0..Pk-1
  // (r = d - (Pq - 1): diagonal_relative_positions(Pq, Pk)); ContentPosition: row bucket(r).
  // ValueError for positions that are not increasing, negative, of the wrong length or with a query
  // offset; DeviceError on a CUDA device (no CUDA kernel for it).
  std::vector<int64_t> query_positions, key_positions;
  bool has_positions() const { return !query_positions.empty() || !key_positions.empty(); }
  // Learnable attention sinks (gpt-oss; StreamingLLM; SPEC-positions-2 §5), combinable with any
  // kind above: sinks (H), differentiable, same dtype and device as q, or undefined (none). Head h's
  // softmax gains a virtual key of logit sinks[h] (not multiplied by `scale`) and value 0:
  // P_ij = exp(s_ij) / (exp(sinks[h]) + sum_j' exp(s_ij')), rows sum to 1 - P_sink. A row that sees
  // no key outputs 0. Set by the attention layer (an option of the attention, not of the encoding).
  // The gradient is the fused kernel's: dsinks[h] = -sum_{b,i} P_sink[b,h,i] dO_i . O_i.
  Tensor sinks;
  // Materialised scores (SPEC-positions-2 §0.2, K4): scores (B, H, Tq, Tk), differentiable, same dtype
  // and device as q — the complete pre-softmax logits s(i, j), content term and scale included, built
  // by the encoding from q and k (LayerProjections::q, k) where its positions depend on the scores of
  // the whole row before the softmax (CoPE's gated positions), which no fused kernel case can express.
  // Then kind must be None and the modifier carries no per-token positions (ValueError otherwise), and
  // `scale` and q.k are not used again: attention() masks, softmaxes (with the sinks) and multiplies by
  // v with ordinary ops, as attention_reference does, so the whole path is O(B H Tq Tk) memory and its
  // backward is those ops' and the encoding's own. Undefined: the fused kernels.
  Tensor scores;
};

// The relative position r = j - (i + q_offset) of each diagonal d = j - i + Tq - 1, d in
// [0, Tq + Tk - 1): r_d = d - (Tq - 1) - q_offset. Sizes must be positive (ShapeError).
std::vector<int64_t> diagonal_relative_positions(int64_t Tq, int64_t Tk, int64_t q_offset = 0);

// Fused attention (FlashAttention-style, explicit backward). q (B, H, Tq, D), k, v (B, H, Tk, D)
// -> (B, H, Tq, D). Query i is at position i + q_offset, key j at j; `causal` hides keys with
// j > i + q_offset (a query that sees no key outputs 0). Memory: O(B H T) beyond inputs/outputs;
// with materialised scores (ScoreModifier::scores) the materialising path instead, O(B H Tq Tk).
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const ScoreModifier& mod, bool causal, double scale,
                 int64_t q_offset = 0);

// The same function built from ordinary ops (matmul, embedding-gather, masked_fill, softmax): it
// materialises the (B, H, Tq, Tk) scores, bias and probabilities. The oracle for tests/benchmarks.
Tensor attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, const ScoreModifier& mod, bool causal,
                           double scale, int64_t q_offset = 0);

// Non-differentiable diagnostic: attention weight by query-key distance d = |i - j| = 1 .. T-1 as a
// multiple of its uniform share among the keys other than the query's own, per head.
// q, k (B, H, T, D) -> (H, T - 1) float64 (T = 1: (H, 0)), entry [h, d - 1] =
//   mean over the pairs (b, i, j) with |i - j| = d that attention sees (j = i - d under the causal
//   mask: B (T - d) pairs; bidirectionally both sides: 2 B (T - d)) of  n_i · p'_ij,
//   p'_ij = exp s(i, j) / sum_{j' != i} exp s(i, j')   (softmax over the visible keys but the query's own),
//   n_i = the number of those keys (i under the causal mask, T - 1 bidirectionally).
// Dimensionless: 1 = the share uniform attention gives. p'_ij = P_ij / (1 - P_ii), the row's
// attention without its self-attention renormalised; the query's own key is left out because it is
// the one key a model without positions can single out (by its content, the query's own token).
// Position-blind reading: equal scores over the visible keys (uniform attention) give exactly 1 at
// every d (n_i e / z with e = 1, z = n_i, so 1 to the last bit); and attention whose scores over the
// keys other than the query's own are exchangeable gives 1 in expectation, each of those n_i keys
// receiving 1/n_i of the row on average by symmetry (e.g. the first layer of a model without
// position encoding on i.i.d. tokens; not deeper causal layers, whose key j summarises its own
// prefix 0..j: how decoders without position encoding learn positions, Haviv et al. 2022). Unlike the
// plain mean of P(i, i - d), which falls with d under uniform causal attention (row i spreads over
// i + 1 keys, and only the long rows reach far), it reads what the model does beyond the mask.
// Entries with no pair (B = 0) are NaN. With sinks it is over the real keys alone (the sink takes the
// same factor from every key of a row, so it cancels in p'; the sinks are ignored). Computed on the
// host in float64 whatever q's dtype and device (the scores are attention_reference's; CUDA tensors
// are copied), one batch element at a time: O(H T^2) memory. ValueError for a modifier with per-token
// positions (positions 0..T-1 are measured); ShapeError for q, k of different shapes.
Tensor attention_weight_over_uniform(const Tensor& q, const Tensor& k, const ScoreModifier& mod, bool causal,
                                     double scale);

// Non-differentiable diagnostic: the Shannon entropy (nats) of each query's attention distribution,
// averaged over the batch, per head. q, k (B, H, T, D) -> (H, T) float64, entry [h, i] =
// mean_b H(b, h, i), H = -sum_j p_ij log p_ij over the keys query i sees (j <= i causal: i + 1 keys;
// all T bidirectional), p_ij = softmax_j s(i, j) (Shannon 1948; the attention entropy of Zhai et al.
// 2023, "Stabilizing Transformer Training by Preventing Attention Entropy Collapse").
// Uniform attention over n keys gives log n; attention on one key gives 0. With sinks it is the
// entropy over the real keys alone, p_ij = P_ij / sum_j' P_ij': the sink takes the same factor
// 1 - P_sink from every key of a row, so this is softmax_j s(i, j) without the sink, and the sink's
// share does not count (the sinks are ignored). Computed on the host in float64 whatever q's dtype
// and device (the scores are built as attention_reference builds them; CUDA tensors are copied),
// one batch element at a time: O(H T^2) memory. ValueError for a modifier with per-token positions
// (positions 0..T-1 are measured); ShapeError for q, k of different shapes.
Tensor attention_row_entropy(const Tensor& q, const Tensor& k, const ScoreModifier& mod, bool causal, double scale);

// Non-differentiable diagnostic: the first key's share of each query's attention over its uniform
// share, averaged over the batch and the queries i = 1 .. T-1, per head. q, k (B, H, T, D) -> (H)
// float64, entry [h] = mean over b and i >= 1 of  n_i · p_i0,  p_i0 = exp s(i, 0) / sum_j exp s(i, j)
// over the n_i keys query i sees (n_i = i + 1 under the causal mask, T bidirectionally). The
// attention-sink reading of StreamingLLM (Xiao et al. 2024, §3.1: most heads of a trained decoder
// put far more than their share on the first token, whatever it is). Dimensionless: 1 = the share
// uniform attention gives (exactly, for equal scores: n_i e / z with e = 1, z = n_i); > 1 = the
// first token gets more. Query 0 is left out (under the causal mask it sees key 0 alone: 1 by
// construction). With sinks it is over the real keys alone, p_i0 = P_i0 / sum_j P_ij (the sink takes
// the same factor from every key of a row; the sinks are ignored), so a sink lowers it only where
// the model stops parking weight on the first token. Computed on the host in float64 whatever q's
// dtype and device, one batch element at a time: O(H T^2) memory. NaN with T < 2 or B = 0.
// ValueError for a modifier with per-token positions; ShapeError for q, k of different shapes.
Tensor attention_first_key_share(const Tensor& q, const Tensor& k, const ScoreModifier& mod, bool causal, double scale);

// Rotary embedding (explicit backward = inverse rotation). x (..., T, D); cos, sin (T, dr/2)
// constants for the T positions (angles times the attention factor), dr = 2 * cos.size(1) <= D.
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved);

}  // namespace posgrad
