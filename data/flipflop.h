// flipflop.h — flip-flop language modelling (Liu et al., NeurIPS 2023, "Exposing Attention Glitches
// with Flip-Flop Language Modeling", §3): the simplest task that needs one bit of memory over an
// arbitrary distance, on which Transformers make rare errors that a small LSTM does not.
//
// A sequence is T/2 instruction–bit pairs over five tokens: `w b` writes the bit b, `i b` ignores
// it, `r b` reads, and its b must be the bit of the last `w`. FFL(p) draws every instruction but the
// first and the last independently: `i` with probability p, `w` and `r` with (1 − p)/2 each; the
// first is always `w` and the last always `r` (so every sequence has a read with something to read).
// The bits of `w` and `i` are uniform; the bit after an `r` is determined. Token ids: w = 0, r = 1,
// i = 2, bit 0 = 3, bit 1 = 4 (kFlipFlopVocab = 5).
//
// The paper's splits (§3.1), each at the training length or longer: in distribution FFL(0.8); sparse
// FFL(0.98) (long gaps between a write and its read: the rare long-range dependencies where the
// glitches show); dense FFL(0.1) (many reads and writes close together).
//
// As next-token data x = tokens[0 .. T-2], y = tokens[1 .. T-1] with y = kFlipFlopIgnore (-100)
// except at the read bits (the positions after an `r`): the loss and the score cover exactly the
// deterministic tokens. (Liu et al. train on every token with the standard LM loss; the random bits
// and instructions then add only irreducible loss. Training on the read bits alone is this
// implementation's choice for small budgets, stated in the comparison's report.)
//
// Scoring (score_flipflop_logits): teacher-forced argmax at each read bit over the whole vocabulary.
// Per-read accuracy = right reads / reads; glitch rate = sequences with any wrong read / sequences
// (Liu et al.'s per-sequence error). Examples come from a posgrad::Generator: the same seed gives the
// same sequences.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/random.h"
#include "tensor/tensor.h"

namespace posgrad::data {

inline constexpr int64_t kFlipFlopWrite = 0, kFlipFlopRead = 1, kFlipFlopIgnore = 2, kFlipFlopBit0 = 3;
inline constexpr int64_t kFlipFlopVocab = 5;
inline constexpr int64_t kFlipFlopIgnoreIndex = -100;

// One FFL(p_ignore) sequence of T tokens (T even, >= 4; p_ignore in [0, 1]: ValueError otherwise).
std::vector<int64_t> flipflop_sequence(int64_t T, double p_ignore, Generator& gen);

struct FlipFlopBatch {
  Tensor x;           // int64 (B, T - 1): tokens 0 .. T-2
  Tensor y;           // int64 (B, T - 1): tokens 1 .. T-1, kFlipFlopIgnoreIndex except at the read bits
  int64_t reads = 0;  // scored positions in the batch
};
// B sequences drawn in order (row 0 first). ValueError as flipflop_sequence, or for B < 1.
FlipFlopBatch make_flipflop_batch(int64_t B, int64_t T, double p_ignore, Generator& gen);

struct FlipFlopScore {
  int64_t sequences = 0, reads = 0, wrong_reads = 0, glitched = 0;  // glitched: sequences with a wrong read
  double read_accuracy() const;                                     // 1 - wrong_reads / reads (NaN without reads)
  double glitch_rate() const;                                       // glitched / sequences (NaN without sequences)
  FlipFlopScore& operator+=(const FlipFlopScore& o);
};
// logits (B, T, V) float of any dtype on the CPU, y int64 (B, T): the argmax (lowest id on ties) at
// every position whose target is not kFlipFlopIgnoreIndex against that target. ShapeError for
// mismatched shapes; IndexError for a target outside [0, V).
FlipFlopScore score_flipflop_logits(const Tensor& logits, const Tensor& y);

}  // namespace posgrad::data
