// mlm.h — masked-language-model corruption for encoder pretraining (BERT, Devlin et al. 2019 §3.1
// "Task #1: Masked LM"): each token is selected for prediction with probability 15%; a selected
// token is replaced by [MASK] 80% of the time, by a uniformly random token 10% of the time and kept
// unchanged 10% of the time; the loss is computed only on the selected positions (label = the
// original token), every other label is ignore_index (-100, cross-entropy's default).
// Selection is per token (Bernoulli(p), as HF transformers' DataCollatorForLanguageModeling; the
// original create_pretraining_data.py picks round(p T) positions per sequence); a row in which no
// token was drawn gets one selected position, drawn uniformly, so that every sequence is scored.
// Deterministic: every draw comes from the posgrad::Generator passed in (its state is the whole
// masking state), three counters per token. Not here: whole-word masking, span masking (T5/SpanBERT).
#pragma once

#include <cstdint>

#include "tensor/random.h"
#include "tensor/tensor.h"

namespace posgrad::data {

struct MlmOptions {
  double select_prob = 0.15;  // fraction of tokens predicted
  double mask_prob = 0.8;     // of the selected: replaced by [MASK]
  double random_prob = 0.1;   // of the selected: replaced by a random token (the rest stay unchanged)
};

struct MlmBatch {
  Tensor input;   // int64 (B, T): the corrupted ids the encoder reads
  Tensor labels;  // int64 (B, T): the original id at selected positions, -100 elsewhere
  int64_t selected = 0, masked = 0, randomised = 0, kept = 0;  // counts over the batch
};

// ids int64 (B, T) with values in [0, vocab_size); mask_id is the [MASK] token (any id, usually
// vocab_size: the encoder's vocabulary is the corpus's plus one). Random replacements are drawn from
// [0, vocab_size). Errors: ShapeError (ids not int64 2-D, empty), ValueError (probabilities outside
// [0, 1], mask_prob + random_prob > 1, select_prob 0, vocab_size < 1, an id out of range).
MlmBatch mask_tokens(const Tensor& ids, int64_t vocab_size, int64_t mask_id, Generator& gen,
                     const MlmOptions& opt = {});

}  // namespace posgrad::data
