// gpt.h — the GPT-style decoder-only language model: token embedding, a position encoding from
// the registry (nn/posenc), N pre-LayerNorm blocks (fused attention + GELU MLP), final LayerNorm,
// LM head tied to the token embedding. GPT-2 initialisation: N(0, 0.02) everywhere, residual
// projections N(0, 0.02/sqrt(2·n_layer)) (Radford et al. 2019, §2.3; nanoGPT model.py).
// The model never names a concrete position encoding.
#pragma once

#include <nlohmann/json.hpp>

#include "nn/attention.h"
#include "nn/layers.h"
#include "nn/posenc/position_encoding.h"

namespace posgrad::nn {

struct GPTConfig {
  int64_t vocab_size = 256;
  int64_t block_size = 64;  // training context length
  int64_t n_layer = 4, n_head = 4, n_embd = 128;
  double dropout = 0.0;
  bool bias = true;
  // Learnable attention sinks in every layer (nn/attention.h; SPEC-positions-2 §5), with any encoding.
  bool attention_sinks = false;
  PosEncConfig pos;  // pos.kind selects the encoding; its sizes are filled from the fields above

  // Throws ValueError naming the first invalid field (non-positive sizes, n_embd % n_head, dropout
  // range, an encoding option out of range...). Saved and loaded through train_options().
  void validate() const;
};

class Block : public Module {
 public:
  Block(const GPTConfig& cfg, Generator& gen, Generator& dropout_gen);
  // x (B, T, C) -> (B, T, C); with a cache, see CausalSelfAttention::forward.
  Tensor forward(const Tensor& x, PositionEncoding& pe, int64_t layer, int64_t pos0, KVCacheLayer* cache = nullptr,
                 int64_t capacity = 0) const;
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<Linear> fc, proj;
  std::shared_ptr<Dropout> drop;
};

class GPT : public Module {
 public:
  // gen drives initialisation; dropout_gen drives dropout masks during training (kept by the caller
  // so its state can be checkpointed).
  GPT(const GPTConfig& cfg, Generator& gen, Generator& dropout_gen);
  // idx int64 (B, T) -> logits (B, T, V). pos0 offsets positions (evaluation of a later window).
  Tensor forward(const Tensor& idx, int64_t pos0 = 0) const;
  // The final hidden states before the LM head: idx int64 (B, T) -> (B, T, C) after ln_f (what the
  // encoder's classification heads read; nn/encoder.h). forward() = hidden() · wteᵀ.
  Tensor hidden(const Tensor& idx, int64_t pos0 = 0) const;
  // Incremental decoding: idx (B, T) are the tokens at positions cache.length .. cache.length+T-1;
  // their keys and values are appended to the cache and the logits (B, T, V) returned — the rows
  // forward() gives for those positions over the whole sequence so far, bit for bit. Needs no
  // gradient (NoGradGuard), a causal encoding with supports_kv_cache() (ValueError otherwise) and
  // room in the cache (IndexError).
  Tensor forward(const Tensor& idx, KVCache& cache) const;
  // An empty cache for up to `capacity` positions (at most the encoding's max_length()).
  KVCache make_kv_cache(int64_t capacity) const;
  const GPTConfig& config() const { return cfg_; }
  PositionEncoding& position_encoding() const { return *pos_; }
  // Mean attention weight at each query-key distance 0..T-1, per layer (averaged over batch,
  // heads and the queries that have a key at that distance), for idx int64 (B, T). No graph.
  std::vector<std::vector<double>> attention_by_distance(const Tensor& idx) const;
  // Parameters without the position tables (nanoGPT reports this count).
  int64_t num_non_position_parameters() const;

  std::shared_ptr<Embedding> wte;
  std::shared_ptr<ModuleList<Block>> blocks;
  std::shared_ptr<LayerNorm> ln_f;

 private:
  GPTConfig cfg_;
  std::shared_ptr<PositionEncoding> pos_;
  std::shared_ptr<Dropout> drop_;
};

}  // namespace posgrad::nn
