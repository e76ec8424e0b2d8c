// attention.h — the multi-head self-attention layer (GPT-2 / nanoGPT layout): a fused qkv Linear
// (3C, C) + bias, the position encoding's hooks (rotate, scores, attention_scale), the fused
// attention op (autograd/ops/attention.h) and the output projection. The name is kept from GPT,
// but the mask follows the position encoding's `causal()` (bidirectional is an option).
// A key/value cache (KVCache) lets a decoder attend new tokens to the keys and values of the tokens
// it has already seen instead of recomputing them.
// Optional learnable attention sinks (gpt-oss gpt_oss/torch/model.py AttentionBlock.sinks; HF
// modeling_gpt_oss.py; StreamingLLM, Xiao et al. 2024; SPEC-positions-2 §5): one logit per head,
// `sinks` (H), a virtual key with value 0 in every row's softmax, whatever the position encoding;
// the fused attention carries it and returns its gradient (ScoreModifier::sinks).
// Not here: attention dropout (the model applies dropout to the layer's output).
#pragma once

#include "autograd/ops/attention.h"
#include "nn/layers.h"
#include "nn/posenc/position_encoding.h"

namespace posgrad::nn {

// One layer's cached keys and values, after the position encoding's rotation: (B, H, capacity, D)
// each, the first `length` positions filled (KVCache::length). Allocated on first use.
struct KVCacheLayer {
  Tensor k, v;
};

// Keys and values of the `length` tokens a decoder has processed, per layer, for incremental
// decoding (GPT::forward with a cache). `capacity` bounds the positions it can hold.
struct KVCache {
  std::vector<KVCacheLayer> layers;
  int64_t length = 0, capacity = 0;
};

class CausalSelfAttention : public Module {
 public:
  // proj_std: init std of the output projection (GPT-2 scales residual projections by
  // 1/sqrt(2 n_layer)); qkv uses N(0, 0.02). sinks: register `sinks` (H), drawn N(0, 0.02^2) after
  // qkv and proj (HF GptOss _init_weights, initializer_range 0.02), so a model without sinks draws
  // exactly what it drew before they existed.
  CausalSelfAttention(int64_t n_embd, int64_t n_head, bool bias, Generator& gen, double proj_std = 0.02,
                      DType dtype = DType::Float32, bool sinks = false);
  // x (B, T, C) at positions pos0 .. pos0+T-1 -> (B, T, C). With a cache (causal encodings that
  // supports_kv_cache(), no gradient): the cache holds the keys and values of positions 0 .. pos0-1;
  // this call appends those of its T tokens and attends them to all pos0 + T (capacity checked,
  // IndexError). The same numbers as the uncached forward over all pos0 + T tokens, row for row.
  Tensor forward(const Tensor& x, PositionEncoding& pe, int64_t layer, int64_t pos0, KVCacheLayer* cache = nullptr,
                 int64_t capacity = 0) const;
  // residual + forward(x, ...), residual (B, T, C) added by the output projection's product
  // (Linear::forward with a residual): the bits of the two, without a pass of its own.
  Tensor forward_residual(const Tensor& x, const Tensor& residual, PositionEncoding& pe, int64_t layer, int64_t pos0,
                          KVCacheLayer* cache = nullptr, int64_t capacity = 0) const;
  // Diagnostics (no gradient): attention weight by query-key distance |i - j| = 1..T-1 over its
  // uniform share among the keys other than the query's own (attention_weight_over_uniform: 1 =
  // uniform attention), averaged over batch and query positions, heads kept: (H, T - 1) float64,
  // computed on the host in float64.
  Tensor attention_over_uniform(const Tensor& x, PositionEncoding& pe, int64_t layer, int64_t pos0) const;
  // Diagnostics (no gradient): entropy in nats of each query's attention over the keys it sees,
  // averaged over the batch, heads kept: (H, T) float64 (attention_row_entropy: with sinks, over the
  // real keys only; computed on the host in float64).
  Tensor attention_entropy(const Tensor& x, PositionEncoding& pe, int64_t layer, int64_t pos0) const;
  // Diagnostics (no gradient): the first key's share of each query's attention over its uniform
  // share, queries 1..T-1 and the batch averaged, heads kept: (H) float64
  // (attention_first_key_share: 1 = uniform; with sinks, over the real keys only).
  Tensor first_key_share(const Tensor& x, PositionEncoding& pe, int64_t layer, int64_t pos0) const;

  std::shared_ptr<Linear> qkv, proj;
  Tensor sinks;  // (H) sink logits, or undefined (no sinks)
  int64_t n_embd, n_head;
  // Use the naive materialising reference instead of the fused op (tests and benchmarks only).
  bool naive = false;

 private:
  struct Heads {
    Tensor q, k, v;  // (B, H, T, D)
    ScoreModifier mod;
    double scale = 1.0;
  };
  // forward() before the output projection: the heads' outputs merged, (B, T, C).
  Tensor mixed(const Tensor& x, PositionEncoding& pe, int64_t layer, int64_t pos0, KVCacheLayer* cache,
               int64_t capacity) const;
  // The heads of x's T tokens at pos0 .., and the modifier for Tk keys with queries at q_offset.
  Heads heads(const Tensor& x, PositionEncoding& pe, int64_t layer, int64_t pos0, int64_t Tk, int64_t q_offset) const;
};

}  // namespace posgrad::nn
