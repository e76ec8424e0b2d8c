// length_tasks.h — a length-generalisation suite for a decoder-only LM: algorithmic tasks from
// Delétang et al. 2023 ("Neural Networks and the Chomsky Hierarchy", ICLR; Table 1 and App. A),
// the suite Ruoss et al. 2023 ("Randomized Positional Encodings Boost Length Generalization of
// Transformers", ACL) also use. Trained on input lengths 1..N, tested on N+1 .. several times N.
//
// Every task writes one example as the token sequence
//     [BOS] input_1 .. input_n [SEP] output_1 .. output_m
// where n is the example's length (the input's length, as in Delétang et al.) and m follows from
// the task (1 for a classification such as parity, n for reverse, 2n for duplicate, the stack's
// size + 1 for stack manipulation). As next-token data x = sequence[0 .. end-1], y = sequence[1 ..]
// with y = ignore_index (-100) except at the m positions that predict an output token, so the loss
// and the score cover only the answer. Token ids: the task's symbols 0 .. S-1 (inputs and outputs
// share them), BOS = S, SEP = S + 1, PAD = S + 2 (right padding of a batch whose answers differ in
// length; never scored), vocab_size = S + 3.
//
// Scoring (score_length_logits): teacher forcing, the argmax of the logits at each scored position.
// per-token accuracy = correct answer tokens / answer tokens of the example, averaged over
// examples; per-sequence accuracy = fraction of examples whose every answer token is the argmax.
// An example is all-correct under teacher forcing exactly when greedy decoding reproduces it
// (each greedy step then sees the true prefix), so per-sequence accuracy equals greedy decoding's
// exact match (ties of the argmax go to the lowest id in both). The per-token accuracy is that of
// Delétang et al. §4 (every output position scored against its target, no compounding of errors).
//
// Examples come from a posgrad::Generator, so (seed, offset) is the whole state: the same seed
// gives the same examples. Deliberately not here: the model, training, padding on the left.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/random.h"
#include "tensor/tensor.h"

namespace posgrad::data {

enum class ChomskyLevel { Regular, DeterministicContextFree, ContextSensitive };
const char* chomsky_level_name(ChomskyLevel l);  // "regular", "context-free", "context-sensitive"

struct LengthExample {
  std::vector<int64_t> input, output;  // symbol ids in [0, num_symbols)
};

class LengthTask {
 public:
  virtual ~LengthTask() = default;
  virtual std::string name() const = 0;  // "parity_check", ...
  virtual ChomskyLevel level() const = 0;
  virtual std::string source() const = 0;       // the paper (and table) the task is taken from
  virtual std::string description() const = 0;  // one line: what the input and the answer are
  virtual int64_t num_symbols() const = 0;      // S
  // One example of input length n (>= 1; ValueError otherwise).
  virtual LengthExample example(int64_t n, Generator& gen) const = 0;
  // The longest answer an input of length n can have (m above): sizes the model's position range.
  virtual int64_t max_answer_length(int64_t n) const = 0;
  // The shortest input length the task is defined for.
  virtual int64_t min_length() const { return 1; }
  // Tokens of the longest example at input length n: BOS, input, SEP, answer.
  int64_t max_sequence_length(int64_t n) const { return n + max_answer_length(n) + 2; }

  int64_t bos() const { return num_symbols(); }
  int64_t sep() const { return num_symbols() + 1; }
  int64_t pad() const { return num_symbols() + 2; }
  int64_t vocab_size() const { return num_symbols() + 3; }
};

// The suite, in the order of Delétang et al.'s Table 1 within each level.
const std::vector<std::string>& length_task_names();
// ValueError naming the task and listing the known ones.
std::unique_ptr<LengthTask> make_length_task(const std::string& name);

// A batch of examples as next-token data, right-padded to the longest sequence.
struct LengthBatch {
  Tensor x;                      // int64 (B, T): [BOS] input [SEP] output_1 .. output_{m-1}, then PAD
  Tensor y;                      // int64 (B, T): x shifted by one; kLengthIgnore except at the m answer positions
  std::vector<int64_t> lengths;  // input length n of each example
};
constexpr int64_t kLengthIgnore = -100;
// Examples are drawn in order (row 0 first). Each length must be >= task.min_length() (ValueError);
// lengths must not be empty (ValueError).
LengthBatch make_length_batch(const LengthTask& task, const std::vector<int64_t>& lengths, Generator& gen);
// The same batch from examples already drawn (tests; the generator draws nothing).
LengthBatch length_batch_from(const LengthTask& task, const std::vector<LengthExample>& examples);

// Scores of a batch. logits (B, T, V) float32 or float64 on the CPU, y int64 (B, T) as made above.
// ShapeError / DTypeError on misuse; ValueError for a row with no scored position.
struct LengthScore {
  int64_t examples = 0;
  double sequence_accuracy = 0, token_accuracy = 0;  // means over examples
  std::vector<int64_t> correct, scored;              // per example: correct and scored answer tokens
};
LengthScore score_length_logits(const Tensor& logits, const Tensor& y);

}  // namespace posgrad::data
