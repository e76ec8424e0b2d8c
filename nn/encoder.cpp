// encoder.cpp — see encoder.h.
#include "nn/encoder.h"

namespace posgrad::nn {

void EncoderConfig::validate() const {
  model.validate();
  POSGRAD_CHECK(num_classes >= 0, ValueError, "encoder: num_classes must be >= 0, got ", num_classes);
  POSGRAD_CHECK(num_tags >= 0, ValueError, "encoder: num_tags must be >= 0, got ", num_tags);
}

Encoder::Encoder(const EncoderConfig& cfg, Generator& gen, Generator& dropout_gen) : cfg_(cfg) {
  cfg_.model.pos.causal = false;
  cfg_.validate();
  backbone = register_module("backbone", std::make_shared<GPT>(cfg_.model, gen, dropout_gen));
  const int64_t C = cfg_.model.n_embd;
  if (cfg_.num_classes > 0)
    seq_head = register_module("seq_head", std::make_shared<Linear>(C, cfg_.num_classes, true, gen));
  if (cfg_.num_tags > 0) tok_head = register_module("tok_head", std::make_shared<Linear>(C, cfg_.num_tags, true, gen));
}

Tensor Encoder::sequence_logits(const Tensor& idx) const {
  POSGRAD_CHECK(seq_head != nullptr, ValueError,
                "encoder built without a sequence-classification head (num_classes 0)");
  return seq_head->forward(mean(hidden(idx), {1}));  // (B, T, C) -> (B, C) -> (B, classes)
}

Tensor Encoder::token_logits(const Tensor& idx) const {
  POSGRAD_CHECK(tok_head != nullptr, ValueError, "encoder built without a token-classification head (num_tags 0)");
  return tok_head->forward(hidden(idx));
}

}  // namespace posgrad::nn
