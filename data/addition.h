// addition.h — multi-digit addition in the reversed format, with and without index hints, as a
// length-generalisation task (Zhou et al. 2024, "Transformers Can Achieve Length Generalization But
// Not Robustly", arXiv 2402.09371, §3 "data format"): trained on operands of 1..N digits, tested on
// longer ones.
//
// Reversed format (Zhou et al. §3, after Lee et al. 2023): the two operands and the sum are all written
// least-significant digit first, so the k-th digit of the answer depends only on the k-th digits of the
// operands and the carry out of digit k - 1, which the model has just written: 42 + 39 = 81 is
// "2 4 + 9 3 = 1 8". The sum has no leading zeros: it has max(len a, len b) digits, one more when the
// last column carries.
//
// Index hints (Zhou et al. §3): every digit is preceded by a hint token naming its place, the same hint
// for the digits of the same place in both operands and in the sum, so that attention can find the
// digits to add by content instead of by position: "h0 2 h1 4 + h0 9 h1 3 = h0 1 h1 8". The hints are
// consecutive symbols of an ordered set of `hint_count` symbols starting at an offset: in training the
// offset is drawn uniformly from every offset at which the example's hints fit in the set, so that
// every hint of the set is trained even though the training sums are short; at test time the offset
// is 0 (Zhou et al. sample consecutive hints from an ordered set larger than the training length, as
// this implementation reads §3; the paper's hint set has 102 symbols for test lengths up to 100 digits).
// hint_count must cover the longest answer tested (ValueError otherwise).
//
// Token ids: digits 0..9 are 0..9, '+' = 10, '=' = 11, BOS = 12, EOS = 13 (ends the answer, so the
// answer's length is part of what is scored), PAD = 14 (right padding; never scored), hints 15 ..
// 15 + hint_count - 1. A sequence is
//     BOS  a  +  b  =  sum  EOS          (without hints: each part its digits; with hints: hint, digit pairs)
// As next-token data (LengthBatch of data/length_tasks.h) x = sequence[0 .. end-1], y = sequence[1 ..]
// with y = kLengthIgnore except at the positions that predict the answer (every token after '=', the
// hints and EOS included), so the loss and the exact match cover the whole answer; score with
// data::score_length_logits, whose per-sequence accuracy is greedy decoding's exact match (data/
// length_tasks.h explains why).
//
// Operands of n digits have a non-zero leading digit (n = 1: any digit); digits are uniform otherwise.
// Examples come from a posgrad::Generator: the same seed gives the same examples. Deliberately not here:
// the model, training, carries as a curriculum.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "data/length_tasks.h"
#include "tensor/random.h"

namespace posgrad::data {

inline constexpr int64_t kAddPlus = 10, kAddEquals = 11, kAddBos = 12, kAddEos = 13, kAddPad = 14, kAddHint0 = 15;

struct AdditionFormat {
  bool hints = false;
  int64_t hint_count = 0;  // size of the ordered hint set (with hints: >= the longest answer, in digits)
};
// 15 without hints, 15 + hint_count with them.
int64_t addition_vocab_size(const AdditionFormat& f);

// Two operands' digits, least significant first (a[0] is the units digit).
struct AdditionOperands {
  std::vector<int64_t> a, b;
};
// Operands of len_a and len_b digits (each in [1, 2^20]; ValueError otherwise).
AdditionOperands addition_operands(int64_t len_a, int64_t len_b, Generator& gen);
// The digits of a + b, least significant first, no leading zeros (digits in [0, 9]: ValueError
// otherwise; empty operands: ValueError).
std::vector<int64_t> add_reversed(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

// The token sequence of one example (the layout above) with hints starting at hint `offset`
// (ignored without hints; with them offset + the longest part must fit in hint_count: ValueError).
// *answer_start (if given) is the index of the answer's first token (after '=').
std::vector<int64_t> addition_tokens(const AdditionOperands& ops, const AdditionFormat& f, int64_t offset,
                                     int64_t* answer_start = nullptr);
// Tokens of the longest example whose operands have at most n digits (sizes the model's block).
int64_t addition_max_tokens(int64_t n, const AdditionFormat& f);

// A batch of examples, operand lengths (len_a, len_b) per row, drawn in order (row 0 first), right-padded
// with PAD. random_offset: each example's hint offset drawn uniformly in [0, hint_count - answer
// length] (training); else 0 (test). LengthBatch::lengths holds max(len_a, len_b) per row.
LengthBatch make_addition_batch(const std::vector<std::pair<int64_t, int64_t>>& lengths, const AdditionFormat& f,
                                bool random_offset, Generator& gen);

}  // namespace posgrad::data
