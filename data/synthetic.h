// synthetic.h — position-sensitive toy tasks for a decoder-only LM: copy and reverse a random symbol
// sequence. One example is the token sequence
//     [BOS] s_1 .. s_L [SEP] t_1 .. t_L          (2L + 2 tokens)
// with t = s (copy) or t = reverse(s) (reverse). As next-token data, x = sequence[0 .. 2L] and
// y = sequence[1 .. 2L+1] (each 2L + 1 long); y is ignore_index (-100, cross-entropy's default) on
// the prompt part — the L + 1 positions whose targets are s_1..s_L and SEP — so only the answer
// t_1..t_L (the last L positions of y) is scored. L is chosen per batch, so a model trained at L can
// be tested at 2L .. 4L (length extrapolation).
//
// Token ids: symbols 0 .. num_symbols-1, BOS = num_symbols, SEP = num_symbols + 1;
// vocab_size = num_symbols + 2. Draws come from a posgrad::Generator (one counter per symbol), so
// the generator state (seed, offset) is the whole task state.
//
// Deliberately not here: decoding a model (the caller produces predictions), padding batches of
// mixed lengths, other tasks (sorting, counting, associative recall).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/random.h"
#include "tensor/tensor.h"

namespace posgrad::data {

enum class SyntheticTask { Copy, Reverse };
SyntheticTask parse_synthetic_task(const std::string& name);  // "copy" | "reverse", else ValueError
const char* synthetic_task_name(SyntheticTask t);

constexpr int64_t kIgnoreIndex = -100;

struct SyntheticBatch {
  Tensor x;            // int64 (B, 2L+1): [BOS] s [SEP] t_1..t_{L-1}
  Tensor y;            // int64 (B, 2L+1): x shifted by one, kIgnoreIndex on the first L+1 positions
  Tensor prompt;       // int64 (B, L+2): [BOS] s [SEP] — what a model continues at test time
  Tensor target;       // int64 (B, L): the answer t
  int64_t length = 0;  // L
};

class SyntheticTaskGenerator {
 public:
  // num_symbols >= 2 (ValueError otherwise).
  SyntheticTaskGenerator(SyntheticTask task, int64_t num_symbols, uint64_t seed);
  SyntheticBatch next(int64_t batch, int64_t length);  // ValueError unless batch, length >= 1

  SyntheticTask task() const { return task_; }
  int64_t num_symbols() const { return num_symbols_; }
  int64_t bos() const { return num_symbols_; }
  int64_t sep() const { return num_symbols_ + 1; }
  int64_t vocab_size() const { return num_symbols_ + 2; }
  GeneratorState state() const { return gen_.state(); }
  void set_state(const GeneratorState& s) { gen_.set_state(s); }

 private:
  SyntheticTask task_;
  int64_t num_symbols_;
  Generator gen_;
};

// Scores predicted answers against targets, example by example (lengths may differ):
//   exact_match     fraction of examples whose prediction equals the target exactly;
//   token_f1        SQuAD-style bag-of-tokens F1 (Rajpurkar et al. 2016, the official evaluate-v1.1
//                   script), averaged over examples: with c = size of the multiset intersection of
//                   predicted and target tokens, P = c / |pred|, R = c / |target|, F1 = 2PR / (P + R);
//                   F1 = 0 when c = 0, and 1 when both are empty. It ignores order, so a reversed
//                   answer to a copy task scores F1 = 1 but exact match 0 — report both;
//   token_accuracy  position-wise: matches pred[i] == target[i] over max(|pred|, |target|) positions,
//                   averaged over examples (the order-sensitive complement to token_f1).
struct SyntheticScore {
  double exact_match = 0, token_f1 = 0, token_accuracy = 0;
  int64_t examples = 0;
};
SyntheticScore score_predictions(const std::vector<std::vector<int64_t>>& predicted,
                                 const std::vector<std::vector<int64_t>>& target);
// Same, rows of int64 (B, L) tensors (pred may have a different L). ShapeError / DTypeError on misuse.
SyntheticScore score_predictions(const Tensor& predicted, const Tensor& target);
double token_f1(const std::vector<int64_t>& predicted, const std::vector<int64_t>& target);

}  // namespace posgrad::data
