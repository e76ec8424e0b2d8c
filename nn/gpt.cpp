// gpt.cpp — see gpt.h.
#include "nn/gpt.h"

#include <algorithm>
#include <cmath>

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

Tensor GPT::hidden(const Tensor& idx, int64_t pos0) const {
  POSGRAD_CHECK(idx.dim() == 2 && idx.dtype() == DType::Int64, ShapeError, "GPT.forward expects int64 (B, T) ids, got ",
                idx.str());
  const int64_t T = idx.size(1);
  const int64_t limit = pos_->max_length();
  const int64_t last = pos_->position_ids().empty() ? pos0 + T - 1 : pos_->position_ids().back();
  POSGRAD_CHECK(limit < 0 || last < limit, IndexError, "sequence positions up to ", last,
                " exceed the ", pos_->kind(), " position encoding's table of ", limit, " positions");
  Tensor x = drop_->forward(pos_->embed(wte->forward(idx), pos0));
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

std::vector<std::vector<double>> GPT::attention_by_distance(const Tensor& idx) const {
  NoGradGuard no_grad;
  const int64_t T = idx.size(1);
  std::vector<std::vector<double>> out;
  Tensor x = drop_->forward(pos_->embed(wte->forward(idx), 0));
  for (size_t l = 0; l < blocks->size(); ++l) {
    const Block& b = (*blocks)[l];
    // (H, T) -> mean over heads
    std::vector<double> per_head = b.attn->attention_by_distance(b.ln_1->forward(x), *pos_, static_cast<int64_t>(l), 0)
                                       .to_vector();
    const int64_t H = static_cast<int64_t>(per_head.size()) / T;
    std::vector<double> mean(static_cast<size_t>(T), 0.0);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < T; ++d) mean[d] += per_head[h * T + d] / static_cast<double>(H);
    out.push_back(mean);
    x = b.forward(x, *pos_, static_cast<int64_t>(l), 0);
  }
  return out;
}

int64_t GPT::num_non_position_parameters() const {
  int64_t n = num_parameters();
  for (const auto& t : pos_->parameters()) n -= t.numel();
  return n;
}

}  // namespace posgrad::nn
