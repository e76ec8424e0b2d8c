// attention.cpp — see attention.h.
#include "nn/attention.h"

#include <tuple>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/ops/view.h"

namespace posgrad::nn {

CausalSelfAttention::CausalSelfAttention(int64_t n_embd_, int64_t n_head_, bool bias, Generator& gen, double proj_std,
                                         DType dtype, bool with_sinks)
    : n_embd(n_embd_), n_head(n_head_) {
  POSGRAD_CHECK(n_embd > 0 && n_head > 0 && n_embd % n_head == 0, ValueError, "CausalSelfAttention: n_embd (", n_embd,
                ") must be a positive multiple of n_head (", n_head, ")");
  qkv = register_module("qkv", std::make_shared<Linear>(n_embd, 3 * n_embd, bias, gen, 0.02, dtype));
  proj = register_module("proj", std::make_shared<Linear>(n_embd, n_embd, bias, gen, proj_std, dtype));
  if (with_sinks) sinks = register_parameter("sinks", randn({n_head}, gen, dtype, Device::cpu(), 0.0, 0.02));
}

CausalSelfAttention::Heads CausalSelfAttention::heads(const Tensor& x, PositionEncoding& pe, int64_t layer,
                                                      int64_t pos0, int64_t Tk, int64_t q_offset) const {
  POSGRAD_CHECK(x.dim() == 3 && x.size(2) == n_embd, ShapeError, "CausalSelfAttention: x must be (B, T, ", n_embd,
                "), got ", shape_str(x.shape()));
  const int64_t T = x.size(1), C = n_embd, H = n_head, D = C / H;
  // (B, T, 3C) -> q, k, v, each (B, H, T, D): on the CPU views the fused attention reads in place, its
  // output (B, H, T, D) a view of (B, T, H, D) memory (the merge below copies nothing), and its
  // gradients the thirds of one (B, T, 3C) buffer that split_heads' backward passes on. Three narrow
  // views instead would each fill a whole (B, T, 3C) with zeros in backward, and the engine would add
  // the three.
  const TensorList parts = split_heads(qkv->forward(x), 3, H);
  Heads h;
  h.q = parts[0];
  h.k = parts[1];
  h.v = parts[2];
  std::tie(h.q, h.k) = pe.rotate(layer, h.q, h.k, pos0);
  // The q/k rows of the fused weight (PyTorch layout (3C, C): rows [0, C) = q, [C, 2C) = k).
  LayerProjections lp;
  lp.input = x;
  lp.q = h.q;
  lp.k = h.k;
  lp.w_q = qkv->weight.narrow(0, 0, C);
  lp.w_k = qkv->weight.narrow(0, C, C);
  if (qkv->bias.defined()) {
    lp.b_q = qkv->bias.narrow(0, 0, C);
    lp.b_k = qkv->bias.narrow(0, C, C);
  }
  h.mod = pe.scores(layer, lp, T, Tk, q_offset);
  h.mod.sinks = sinks;  // undefined without sinks
  h.scale = pe.attention_scale(D);
  return h;
}

Tensor CausalSelfAttention::forward(const Tensor& x, PositionEncoding& pe, int64_t layer, int64_t pos0,
                                    KVCacheLayer* cache, int64_t capacity) const {
  return proj->forward(mixed(x, pe, layer, pos0, cache, capacity));
}

Tensor CausalSelfAttention::forward_residual(const Tensor& x, const Tensor& residual, PositionEncoding& pe,
                                             int64_t layer, int64_t pos0, KVCacheLayer* cache, int64_t capacity) const {
  return proj->forward(mixed(x, pe, layer, pos0, cache, capacity), residual);
}

Tensor CausalSelfAttention::mixed(const Tensor& x, PositionEncoding& pe, int64_t layer, int64_t pos0,
                                  KVCacheLayer* cache, int64_t capacity) const {
  const int64_t B = x.dim() == 3 ? x.size(0) : 0, T = x.dim() == 3 ? x.size(1) : 0;
  if (!cache) {
    const Heads h = heads(x, pe, layer, pos0, T, 0);
    const Tensor o = naive ? attention_reference(h.q, h.k, h.v, h.mod, pe.causal(), h.scale)
                           : attention(h.q, h.k, h.v, h.mod, pe.causal(), h.scale);  // (B, H, T, D)
    return o.permute({0, 2, 1, 3}).reshape({B, T, n_embd});
  }
  // Incremental decoding: queries at pos0 .. pos0 + T - 1 against the keys of positions 0 .. pos0 + T - 1.
  POSGRAD_CHECK(pe.causal() && pe.supports_kv_cache(), ValueError, "a key/value cache needs a causal position ",
                "encoding whose keys do not change as the sequence grows; ", pe.kind(), " is not");
  POSGRAD_CHECK(!GradMode::is_enabled(), AutogradError, "a key/value cache is for inference: use NoGradGuard");
  POSGRAD_CHECK(pos0 >= 0 && pos0 + T <= capacity, IndexError, "key/value cache: positions up to ", pos0 + T - 1,
                " exceed its capacity of ", capacity);
  const Heads h = heads(x, pe, layer, pos0, pos0 + T, pos0);
  if (!cache->k.defined()) {
    const Shape s{B, n_head, capacity, n_embd / n_head};
    cache->k = Tensor::zeros(s, h.k.dtype(), h.k.device());
    cache->v = Tensor::zeros(s, h.v.dtype(), h.v.device());
  }
  POSGRAD_CHECK(cache->k.size(0) == B, ShapeError, "key/value cache of batch ", cache->k.size(0), " used with batch ",
                B);
  ops::copy_into(cache->k.narrow(2, pos0, T), h.k);
  ops::copy_into(cache->v.narrow(2, pos0, T), h.v);
  const Tensor k = cache->k.narrow(2, 0, pos0 + T), v = cache->v.narrow(2, 0, pos0 + T);
  const Tensor o = attention(h.q, k, v, h.mod, true, h.scale, pos0);  // (B, H, T, D)
  return o.permute({0, 2, 1, 3}).reshape({B, T, n_embd});
}

Tensor CausalSelfAttention::attention_over_uniform(const Tensor& x, PositionEncoding& pe, int64_t layer,
                                                   int64_t pos0) const {
  NoGradGuard guard;
  const Heads h = heads(x, pe, layer, pos0, x.size(1), 0);
  return attention_weight_over_uniform(h.q, h.k, h.mod, pe.causal(), h.scale);
}

Tensor CausalSelfAttention::first_key_share(const Tensor& x, PositionEncoding& pe, int64_t layer, int64_t pos0) const {
  NoGradGuard guard;
  const Heads h = heads(x, pe, layer, pos0, x.size(1), 0);
  return attention_first_key_share(h.q, h.k, h.mod, pe.causal(), h.scale);
}

Tensor CausalSelfAttention::attention_entropy(const Tensor& x, PositionEncoding& pe, int64_t layer,
                                              int64_t pos0) const {
  NoGradGuard guard;
  const Heads h = heads(x, pe, layer, pos0, x.size(1), 0);
  return attention_row_entropy(h.q, h.k, h.mod, pe.causal(), h.scale);
}

}  // namespace posgrad::nn
