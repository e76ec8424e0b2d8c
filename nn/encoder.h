// encoder.h — the bidirectional (BERT-style) encoder of the encoder track: the GPT blocks of
// nn/gpt.h with the position encoding built for bidirectional attention (PosEncConfig::causal =
// false: no mask, T5's bidirectional buckets, ALiBi's symmetric -m|i - j|, DeBERTa's c2p/p2c in both
// directions), one extra token id [MASK] past the corpus vocabulary, and three heads:
//   - the masked-LM head, TIED to the token embedding (logits = h · wteᵀ, the decoder's head; BERT
//     ties its output embedding too but adds a dense + LayerNorm transform and an output bias,
//     Devlin et al. 2019 / the reference run_pretraining.py — left out here to keep the encoder and
//     the decoder identical but for the mask);
//   - a sequence-classification head: a Linear (C -> classes) on the MEAN of the final hidden
//     states over the T positions (no [CLS] token: mean pooling keeps the inputs the pretraining saw);
//   - a token-classification head: a Linear (C -> tags) on every position's hidden state.
// The encoder never names a concrete position encoding. NoPE in this encoder sees a multiset:
// permuting the input permutes every hidden state (tests/test_encoder.cpp checks it), so mean
// pooling makes its sequence classifier exactly order-blind — the control of the order tasks.
// Not here: segment (token-type) embeddings, next-sentence prediction, padding masks (every batch
// holds sequences of one length).
#pragma once

#include "nn/gpt.h"

namespace posgrad::nn {

struct EncoderConfig {
  GPTConfig model;          // model.vocab_size counts [MASK]; model.pos.causal is forced to false
  int64_t num_classes = 0;  // sequence-classification head (0: none)
  int64_t num_tags = 0;     // token-classification head (0: none)
  // ValueError naming the field: the GPT checks, and non-negative head sizes.
  void validate() const;
};

class Encoder : public Module {
 public:
  // gen initialises the backbone then the heads (N(0, 0.02) weights, zero biases).
  Encoder(const EncoderConfig& cfg, Generator& gen, Generator& dropout_gen);
  // idx int64 (B, T) -> final hidden states (B, T, C).
  Tensor hidden(const Tensor& idx) const { return backbone->hidden(idx, 0); }
  // idx int64 (B, T) -> masked-LM logits (B, T, V) (tied head).
  Tensor mlm_logits(const Tensor& idx) const { return backbone->forward(idx, 0); }
  // idx int64 (B, T) -> sequence logits (B, classes) from the mean hidden state; ValueError when the
  // encoder was built without a sequence head.
  Tensor sequence_logits(const Tensor& idx) const;
  // idx int64 (B, T) -> token logits (B, T, tags); ValueError without a token head.
  Tensor token_logits(const Tensor& idx) const;
  const EncoderConfig& config() const { return cfg_; }

  std::shared_ptr<GPT> backbone;
  std::shared_ptr<Linear> seq_head, tok_head;  // null when the size is 0

 private:
  EncoderConfig cfg_;
};

}  // namespace posgrad::nn
