// gpt.cpp — see gpt.h.
#include "nn/gpt.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace posgrad::nn {

void GPTConfig::validate() const {
  POSGRAD_CHECK(vocab_size > 0, ValueError, "vocab_size must be positive, got ", vocab_size);
  POSGRAD_CHECK(block_size > 0, ValueError, "block_size must be positive, got ", block_size);
  POSGRAD_CHECK(n_layer > 0, ValueError, "n_layer must be positive, got ", n_layer);
  POSGRAD_CHECK(n_head > 0, ValueError, "n_head must be positive, got ", n_head);
  POSGRAD_CHECK(n_embd > 0, ValueError, "n_embd must be positive, got ", n_embd);
  POSGRAD_CHECK(n_embd % n_head == 0, ValueError, "n_embd (", n_embd, ") must be divisible by n_head (", n_head, ")");
  POSGRAD_CHECK(dropout >= 0.0 && dropout < 1.0, ValueError, "dropout must be in [0, 1), got ", dropout);
  const auto kinds = position_encoding_kinds();
  POSGRAD_CHECK(std::find(kinds.begin(), kinds.end(), pos.kind) != kinds.end(), ValueError,
                "unknown position encoding '", pos.kind, "'");
  PosEncConfig sized = pos;  // the encoding's checks see the model's sizes (GPT fills them the same way)
  sized.n_embd = n_embd;
  sized.n_head = n_head;
  sized.n_layer = n_layer;
  sized.block_size = block_size;
  sized.validate();
}

Block::Block(const GPTConfig& cfg, Generator& gen, Generator& dropout_gen) {
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg.n_layer));
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(cfg.n_embd));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(cfg.n_embd, cfg.n_head, cfg.bias, gen, proj_std,
                                                                       DType::Float32, cfg.attention_sinks));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(cfg.n_embd));
  fc = register_module("fc", std::make_shared<Linear>(cfg.n_embd, 4 * cfg.n_embd, cfg.bias, gen));
  proj = register_module("proj", std::make_shared<Linear>(4 * cfg.n_embd, cfg.n_embd, cfg.bias, gen, proj_std));
  drop = register_module("drop", std::make_shared<Dropout>(cfg.dropout, dropout_gen));
}

Tensor Block::forward(const Tensor& x, PositionEncoding& pe, int64_t layer, int64_t pos0, KVCacheLayer* cache,
                      int64_t capacity) const {
  if (drop->is_identity()) {
    // The residual adds inside the output projections' products: the same bits, two passes fewer.
    const Tensor h = attn->forward_residual(ln_1->forward(x), x, pe, layer, pos0, cache, capacity);
    return proj->forward(gelu(fc->forward(ln_2->forward(h))), h);
  }
  Tensor h = x + drop->forward(attn->forward(ln_1->forward(x), pe, layer, pos0, cache, capacity));
  return h + drop->forward(proj->forward(gelu(fc->forward(ln_2->forward(h)))));
}

GPT::GPT(const GPTConfig& cfg_in, Generator& gen, Generator& dropout_gen) : cfg_(cfg_in) {
  cfg_.pos.n_embd = cfg_.n_embd;
  cfg_.pos.n_head = cfg_.n_head;
  cfg_.pos.n_layer = cfg_.n_layer;
  cfg_.pos.block_size = cfg_.block_size;
  cfg_.validate();
  wte = register_module("wte", std::make_shared<Embedding>(cfg_.vocab_size, cfg_.n_embd, gen));
  pos_ = register_module("pos", make_position_encoding(cfg_.pos, gen));
  blocks = register_module("blocks", std::make_shared<ModuleList<Block>>());
  for (int64_t l = 0; l < cfg_.n_layer; ++l) blocks->push_back(std::make_shared<Block>(cfg_, gen, dropout_gen));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(cfg_.n_embd));
  drop_ = register_module("drop", std::make_shared<Dropout>(cfg_.dropout, dropout_gen));
}

Tensor GPT::forward(const Tensor& idx, int64_t pos0) const {
  return linear(hidden(idx, pos0), wte->weight);  // tied LM head: logits = x · wteᵀ
}

Tensor GPT::embed(const Tensor& idx, int64_t pos0) const {
  POSGRAD_CHECK(idx.dim() == 2 && idx.dtype() == DType::Int64, ShapeError, "GPT.forward expects int64 (B, T) ids, got ",
                idx.str());
  const int64_t T = idx.size(1);
  const int64_t limit = pos_->max_length();
  const int64_t last = pos_->position_ids().empty() ? pos0 + T - 1 : pos_->position_ids().back();
  POSGRAD_CHECK(limit < 0 || last < limit, IndexError, "sequence positions up to ", last, " exceed the ", pos_->kind(),
                " position encoding's table of ", limit, " positions");
  return pos_->embed(wte->forward(idx), pos0);
}

Tensor GPT::hidden(const Tensor& idx, int64_t pos0) const {
  Tensor x = drop_->forward(embed(idx, pos0));
  for (size_t l = 0; l < blocks->size(); ++l) x = (*blocks)[l].forward(x, *pos_, static_cast<int64_t>(l), pos0);
  return ln_f->forward(x);
}

KVCache GPT::make_kv_cache(int64_t capacity) const {
  const int64_t limit = pos_->max_length();
  POSGRAD_CHECK(capacity > 0 && (limit < 0 || capacity <= limit), ValueError, "key/value cache capacity ", capacity,
                " must be positive", limit < 0 ? "" : " and at most the position table's length");
  KVCache c;
  c.layers.resize(blocks->size());
  c.capacity = capacity;
  return c;
}

Tensor GPT::forward(const Tensor& idx, KVCache& cache) const {
  POSGRAD_CHECK(idx.dim() == 2 && idx.dtype() == DType::Int64, ShapeError, "GPT.forward expects int64 (B, T) ids, got ",
                idx.str());
  POSGRAD_CHECK(cache.layers.size() == blocks->size(), ValueError, "key/value cache made for ", cache.layers.size(),
                " layers used with a model of ", blocks->size(), " (GPT::make_kv_cache)");
  POSGRAD_CHECK(pos_->position_ids().empty(), ValueError,
                "key/value cache: position ids are set on the encoding (a training option); clear them to decode");
  const int64_t pos0 = cache.length;
  Tensor x = drop_->forward(pos_->embed(wte->forward(idx), pos0));
  for (size_t l = 0; l < blocks->size(); ++l)
    x = (*blocks)[l].forward(x, *pos_, static_cast<int64_t>(l), pos0, &cache.layers[l], cache.capacity);
  cache.length += idx.size(1);
  return linear(ln_f->forward(x), wte->weight);
}

void GPT::check_measurable(const char* what) const {
  POSGRAD_CHECK(!is_training() || cfg_.dropout == 0.0, ValueError, what,
                ": the model is in training mode with dropout ", cfg_.dropout,
                "; call eval() first (the measurement is of the deterministic model)");
  POSGRAD_CHECK(pos_->position_ids().empty(), ValueError, what,
                ": position ids are set on the encoding (a training option); clear them to measure positions 0..T-1");
}

std::vector<std::vector<double>> GPT::attention_entropy_by_position(const Tensor& idx) const {
  check_measurable("GPT::attention_entropy_by_position");
  NoGradGuard no_grad;
  Tensor x = embed(idx, 0);  // no dropout: check_measurable
  const int64_t T = idx.size(1);
  std::vector<std::vector<double>> out;
  for (size_t l = 0; l < blocks->size(); ++l) {
    const Block& b = (*blocks)[l];
    // (H, T) entropies in nats -> mean over heads, over log n_i
    const std::vector<double> per_head =
        b.attn->attention_entropy(b.ln_1->forward(x), *pos_, static_cast<int64_t>(l), 0).to_vector();
    const int64_t H = static_cast<int64_t>(per_head.size()) / T;
    std::vector<double> row(static_cast<size_t>(T));
    for (int64_t i = 0; i < T; ++i) {
      double e = 0;
      for (int64_t h = 0; h < H; ++h) e += per_head[h * T + i];
      const int64_t n = pos_->causal() ? i + 1 : T;  // keys query i sees
      row[i] = n > 1 ? e / static_cast<double>(H) / std::log(static_cast<double>(n))
                     : std::numeric_limits<double>::quiet_NaN();
    }
    out.push_back(std::move(row));
    x = b.forward(x, *pos_, static_cast<int64_t>(l), 0);
  }
  return out;
}

std::vector<std::vector<double>> GPT::attention_over_uniform_by_distance(const Tensor& idx) const {
  check_measurable("GPT::attention_over_uniform_by_distance");
  NoGradGuard no_grad;
  Tensor x = embed(idx, 0);  // no dropout: check_measurable
  const int64_t T = idx.size(1);
  std::vector<std::vector<double>> out;
  for (size_t l = 0; l < blocks->size(); ++l) {
    const Block& b = (*blocks)[l];
    // (H, T - 1) -> mean over heads, in head order
    const std::vector<double> per_head =
        b.attn->attention_over_uniform(b.ln_1->forward(x), *pos_, static_cast<int64_t>(l), 0).to_vector();
    const int64_t H = b.attn->n_head, n = T - 1;
    std::vector<double> row(static_cast<size_t>(n), 0.0);
    for (int64_t d = 0; d < n; ++d) {
      for (int64_t h = 0; h < H; ++h) row[d] += per_head[h * n + d];
      row[d] /= static_cast<double>(H);
    }
    out.push_back(std::move(row));
    x = b.forward(x, *pos_, static_cast<int64_t>(l), 0);
  }
  return out;
}

std::vector<double> GPT::first_token_share_by_layer(const Tensor& idx) const {
  check_measurable("GPT::first_token_share_by_layer");
  NoGradGuard no_grad;
  Tensor x = embed(idx, 0);  // no dropout: check_measurable
  std::vector<double> out;
  for (size_t l = 0; l < blocks->size(); ++l) {
    const Block& b = (*blocks)[l];
    const std::vector<double> per_head =
        b.attn->first_key_share(b.ln_1->forward(x), *pos_, static_cast<int64_t>(l), 0).to_vector();
    double s = 0;
    for (double v : per_head) s += v;
    out.push_back(s / static_cast<double>(per_head.size()));
    x = b.forward(x, *pos_, static_cast<int64_t>(l), 0);
  }
  return out;
}

namespace {

// Turns requires_grad off on the parameters for a scope and restores every flag when it ends (also
// by an exception), so that a backward inside neither reads nor writes their .grad. Restored in
// reverse, so a tensor listed twice gets its original flag back.
class FrozenParameters {
 public:
  explicit FrozenParameters(std::vector<Tensor> params) : params_(std::move(params)) {
    for (Tensor& p : params_) {
      flags_.push_back(p.requires_grad());
      p.set_requires_grad(false);
    }
  }
  ~FrozenParameters() {
    for (size_t i = params_.size(); i-- > 0;) params_[i].set_requires_grad(flags_[i]);
  }
  FrozenParameters(const FrozenParameters&) = delete;
  FrozenParameters& operator=(const FrozenParameters&) = delete;

 private:
  std::vector<Tensor> params_;
  std::vector<bool> flags_;
};

// Grad mode on for a scope (a measurement called inside NoGradGuard), restored when it ends.
class GradModeOn {
 public:
  GradModeOn() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~GradModeOn() { GradMode::set_enabled(prev_); }
  GradModeOn(const GradModeOn&) = delete;
  GradModeOn& operator=(const GradModeOn&) = delete;

 private:
  bool prev_;
};

}  // namespace

std::vector<Tensor> GPT::last_position_gradients(const Tensor& idx, const Tensor& targets) const {
  check_measurable("GPT::last_position_gradients");
  POSGRAD_CHECK(idx.dim() == 2 && idx.dtype() == DType::Int64 && targets.dtype() == DType::Int64 &&
                    targets.shape() == idx.shape(),
                ShapeError, "GPT::last_position_gradients: idx and targets must be int64 (B, T) of one shape, got ",
                idx.str(), ", ", targets.str());
  const int64_t B = idx.size(0), T = idx.size(1), V = cfg_.vocab_size, C = cfg_.n_embd;
  POSGRAD_CHECK(B > 0 && T > 0, ShapeError, "GPT::last_position_gradients: empty batch ", idx.str());
  const Tensor last_target = targets.narrow(1, T - 1, 1).contiguous().reshape({B});  // (B)
  const std::vector<int64_t> lt = last_target.to(Device::cpu()).to_int_vector();
  for (int64_t b = 0; b < B; ++b)
    POSGRAD_CHECK(lt[b] >= 0 && lt[b] < V, IndexError, "GPT::last_position_gradients: window ", b, "'s last target ",
                  lt[b], " is not a token id in [0, ", V, ")");
  FrozenParameters frozen(parameters());
  GradModeOn grad_on;
  Tensor x = embed(idx, 0).detach();  // x_0 (B, T, C): a leaf (no dropout: check_measurable)
  x.set_requires_grad(true);
  std::vector<Tensor> inputs;  // x_l, l = 0..n_layer-1
  for (size_t l = 0; l < blocks->size(); ++l) {
    if (l > 0) x.retain_grad();
    inputs.push_back(x);
    x = (*blocks)[l].forward(x, *pos_, static_cast<int64_t>(l), 0);
  }
  // Only the last position's logits: ln_f and the head act per position.
  const Tensor logits = linear(ln_f->forward(x.narrow(1, T - 1, 1)), wte->weight).reshape({B, V});  // (B, V)
  sum(cross_entropy_rows(logits, last_target)).backward();
  std::vector<Tensor> out;
  for (const Tensor& t : inputs) {
    const Tensor g = t.grad();
    // Every x_l reaches the loss (the residual stream); a missing gradient would be an engine bug.
    POSGRAD_CHECK(g.defined() && g.shape() == Shape({B, T, C}), AutogradError,
                  "GPT::last_position_gradients: no gradient reached a block input");
    out.push_back(g.detach());
  }
  return out;
}

std::vector<std::vector<double>> GPT::gradient_by_distance(const Tensor& idx, const Tensor& targets) const {
  const std::vector<Tensor> grads = last_position_gradients(idx, targets);
  const int64_t B = idx.size(0), T = idx.size(1), C = cfg_.n_embd;
  std::vector<std::vector<double>> out;
  for (const Tensor& g : grads) {
    const std::vector<double> v = g.to(Device::cpu()).to_vector();  // (B, T, C) row-major, in float64
    std::vector<double> by_d(static_cast<size_t>(T), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < T; ++j) {
        double ss = 0;
        for (int64_t c = 0; c < C; ++c) ss += v[(b * T + j) * C + c] * v[(b * T + j) * C + c];
        by_d[T - 1 - j] += std::sqrt(ss) / static_cast<double>(B);
      }
    out.push_back(std::move(by_d));
  }
  return out;
}

int64_t GPT::num_non_position_parameters() const {
  int64_t n = num_parameters();
  for (const auto& t : pos_->parameters()) n -= t.numel();
  return n;
}

}  // namespace posgrad::nn
