// flipflop.cpp — see flipflop.h.
#include "data/flipflop.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/errors.h"

namespace posgrad::data {

std::vector<int64_t> flipflop_sequence(int64_t T, double p_ignore, Generator& gen) {
  POSGRAD_CHECK(T >= 4 && T % 2 == 0 && T <= (1 << 24), ValueError,
                "flip-flop: the sequence length must be even and in [4, 2^24] (instruction-bit pairs), got ", T);
  POSGRAD_CHECK(p_ignore >= 0 && p_ignore <= 1, ValueError, "flip-flop: p_ignore must be in [0, 1], got ", p_ignore);
  const int64_t pairs = T / 2;
  std::vector<int64_t> s(static_cast<size_t>(T));
  int64_t stored = 0;
  for (int64_t k = 0; k < pairs; ++k) {
    int64_t instr;
    if (k == 0)
      instr = kFlipFlopWrite;
    else if (k == pairs - 1)
      instr = kFlipFlopRead;
    else {
      const double u = gen.next_unit();
      instr = u < p_ignore ? kFlipFlopIgnore : (u < p_ignore + (1 - p_ignore) / 2 ? kFlipFlopWrite : kFlipFlopRead);
    }
    // One draw per pair for its bit, whatever the instruction (so the instructions' stream does not
    // depend on which were reads).
    const int64_t bit = static_cast<int64_t>(gen.next_u64() & 1u);
    if (instr == kFlipFlopWrite) stored = bit;
    s[2 * k] = instr;
    s[2 * k + 1] = kFlipFlopBit0 + (instr == kFlipFlopRead ? stored : bit);
  }
  return s;
}

FlipFlopBatch make_flipflop_batch(int64_t B, int64_t T, double p_ignore, Generator& gen) {
  POSGRAD_CHECK(B >= 1, ValueError, "flip-flop: a batch needs at least one sequence, got ", B);
  std::vector<int64_t> x, y;
  x.reserve(static_cast<size_t>(B * (T - 1)));
  y.reserve(x.capacity());
  FlipFlopBatch out;
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int64_t> s = flipflop_sequence(T, p_ignore, gen);
    for (int64_t t = 0; t + 1 < T; ++t) {
      x.push_back(s[t]);
      const bool read_bit = s[t] == kFlipFlopRead;  // y[t] = s[t + 1], the bit after an r
      y.push_back(read_bit ? s[t + 1] : kFlipFlopIgnoreIndex);
      out.reads += read_bit;
    }
  }
  out.x = Tensor::empty({B, T - 1}, DType::Int64);
  out.y = Tensor::empty({B, T - 1}, DType::Int64);
  std::copy(x.begin(), x.end(), out.x.data<int64_t>());
  std::copy(y.begin(), y.end(), out.y.data<int64_t>());
  return out;
}

double FlipFlopScore::read_accuracy() const {
  return reads > 0 ? 1.0 - static_cast<double>(wrong_reads) / static_cast<double>(reads)
                   : std::numeric_limits<double>::quiet_NaN();
}

double FlipFlopScore::glitch_rate() const {
  return sequences > 0 ? static_cast<double>(glitched) / static_cast<double>(sequences)
                       : std::numeric_limits<double>::quiet_NaN();
}

FlipFlopScore& FlipFlopScore::operator+=(const FlipFlopScore& o) {
  sequences += o.sequences;
  reads += o.reads;
  wrong_reads += o.wrong_reads;
  glitched += o.glitched;
  return *this;
}

FlipFlopScore score_flipflop_logits(const Tensor& logits, const Tensor& y) {
  POSGRAD_CHECK(logits.defined() && logits.dim() == 3, ShapeError,
                "score_flipflop_logits: logits must be (B, T, V), got ",
                logits.defined() ? logits.str() : std::string("an undefined tensor"));
  POSGRAD_CHECK(y.defined() && y.dim() == 2 && y.size(0) == logits.size(0) && y.size(1) == logits.size(1), ShapeError,
                "score_flipflop_logits: y must be (B, T) = ", logits.size(0), " x ", logits.size(1), ", got ",
                y.defined() ? y.str() : std::string("an undefined tensor"));
  POSGRAD_CHECK(y.dtype() == DType::Int64, DTypeError, "score_flipflop_logits: y must be int64, got ",
                dtype_name(y.dtype()));
  const int64_t B = logits.size(0), T = logits.size(1), V = logits.size(2);
  const std::vector<double> l = logits.to(Device::cpu()).to(DType::Float64).to_vector();
  const std::vector<int64_t> t = y.to(Device::cpu()).to_int_vector();
  FlipFlopScore s;
  s.sequences = B;
  for (int64_t b = 0; b < B; ++b) {
    bool glitch = false;
    for (int64_t j = 0; j < T; ++j) {
      const int64_t target = t[b * T + j];
      if (target == kFlipFlopIgnoreIndex) continue;
      POSGRAD_CHECK(target >= 0 && target < V, IndexError, "score_flipflop_logits: target ", target, " at (", b, ", ",
                    j, ") outside the vocabulary [0, ", V, ")");
      const double* row = l.data() + (b * T + j) * V;
      const int64_t arg = std::max_element(row, row + V) - row;  // ties: the lowest id
      ++s.reads;
      if (arg != target) {
        ++s.wrong_reads;
        glitch = true;
      }
    }
    s.glitched += glitch;
  }
  return s;
}

}  // namespace posgrad::data
