// evaluate.h — evaluation and sampling of a trained model: next-token loss, perplexity and accuracy
// over deterministic, non-overlapping validation windows of any length (the length-extrapolation
// measurements), the per-position loss inside a window, and temperature / top-k sampling.
#pragma once

#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/tokenizer.h"
#include "nn/gpt.h"

namespace posgrad::train {

struct EvalResult;

// Windows of context+1 tokens starting at 0, context, 2·context, ... of `tokens` (at most max_windows).
// Throws ValueError when not even one window fits, naming both lengths.
EvalResult evaluate_tokens(nn::GPT& model, const data::TokenSpan& tokens, int64_t context, int64_t max_windows,
                           int64_t pos0, Device dev, int64_t batch = 8);
std::string sample_text(nn::GPT& model, const data::Tokenizer& tok, const std::string& prompt, int64_t n,
                        double temperature, int64_t top_k, uint64_t seed, Device dev);

}  // namespace posgrad::train
