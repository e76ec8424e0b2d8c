// addition.cpp — see addition.h.
#include "data/addition.h"

#include <algorithm>

#include "tensor/errors.h"

namespace posgrad::data {

namespace {

constexpr int64_t kMaxDigits = 1 << 20;

int64_t draw(Generator& gen, int64_t n) { return static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(n)); }

std::vector<int64_t> operand(int64_t len, Generator& gen) {
  POSGRAD_CHECK(len >= 1 && len <= kMaxDigits, ValueError, "addition: an operand needs 1 to ", kMaxDigits,
                " digits, got ", len);
  std::vector<int64_t> d(static_cast<size_t>(len));
  for (int64_t i = 0; i < len; ++i) d[static_cast<size_t>(i)] = draw(gen, 10);
  // The most significant digit (the last, reversed) is not 0, so the number has len digits.
  if (len > 1) d.back() = 1 + draw(gen, 9);
  return d;
}

// One part of the sequence: its digits, each after its hint when the format has them.
void append_part(std::vector<int64_t>& seq, const std::vector<int64_t>& digits, const AdditionFormat& f,
                 int64_t offset) {
  for (size_t k = 0; k < digits.size(); ++k) {
    if (f.hints) seq.push_back(kAddHint0 + offset + static_cast<int64_t>(k));
    seq.push_back(digits[k]);
  }
}

}  // namespace

int64_t addition_vocab_size(const AdditionFormat& f) { return kAddHint0 + (f.hints ? f.hint_count : 0); }

AdditionOperands addition_operands(int64_t len_a, int64_t len_b, Generator& gen) {
  AdditionOperands o;
  o.a = operand(len_a, gen);
  o.b = operand(len_b, gen);
  return o;
}

std::vector<int64_t> add_reversed(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  POSGRAD_CHECK(!a.empty() && !b.empty(), ValueError, "addition: an operand has no digits");
  const size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> s;
  s.reserve(n + 1);
  int64_t carry = 0;
  for (size_t k = 0; k < n; ++k) {
    const int64_t x = k < a.size() ? a[k] : 0, y = k < b.size() ? b[k] : 0;
    POSGRAD_CHECK(x >= 0 && x <= 9 && y >= 0 && y <= 9, ValueError, "addition: digit ", (x < 0 || x > 9 ? x : y),
                  " at place ", k, " is not in [0, 9]");
    const int64_t t = x + y + carry;
    s.push_back(t % 10);
    carry = t / 10;
  }
  if (carry) s.push_back(carry);
  while (s.size() > 1 && s.back() == 0) s.pop_back();  // operands with leading zeros given by a caller
  return s;
}

std::vector<int64_t> addition_tokens(const AdditionOperands& ops, const AdditionFormat& f, int64_t offset,
                                     int64_t* answer_start) {
  const std::vector<int64_t> sum = add_reversed(ops.a, ops.b);
  if (f.hints) {
    const int64_t longest = static_cast<int64_t>(std::max({ops.a.size(), ops.b.size(), sum.size()}));
    POSGRAD_CHECK(offset >= 0 && offset + longest <= f.hint_count, ValueError, "addition: hints ", offset, " .. ",
                  offset + longest - 1, " do not fit in the hint set of ", f.hint_count,
                  " (it must cover the longest answer tested)");
  }
  std::vector<int64_t> seq{kAddBos};
  append_part(seq, ops.a, f, offset);
  seq.push_back(kAddPlus);
  append_part(seq, ops.b, f, offset);
  seq.push_back(kAddEquals);
  if (answer_start) *answer_start = static_cast<int64_t>(seq.size());
  append_part(seq, sum, f, offset);
  seq.push_back(kAddEos);
  return seq;
}

int64_t addition_max_tokens(int64_t n, const AdditionFormat& f) {
  const int64_t per_digit = f.hints ? 2 : 1;
  // BOS, a, '+', b, '=', sum (n + 1 digits), EOS.
  return 1 + per_digit * n + 1 + per_digit * n + 1 + per_digit * (n + 1) + 1;
}

LengthBatch make_addition_batch(const std::vector<std::pair<int64_t, int64_t>>& lengths, const AdditionFormat& f,
                                bool random_offset, Generator& gen) {
  POSGRAD_CHECK(!lengths.empty(), ValueError, "addition: a batch needs at least one example");
  POSGRAD_CHECK(!f.hints || f.hint_count >= 1, ValueError, "addition: index hints need a hint set, got ", f.hint_count,
                " hints");
  std::vector<std::vector<int64_t>> seqs;
  std::vector<int64_t> starts;
  LengthBatch out;
  int64_t T = 0;
  for (const auto& [la, lb] : lengths) {
    const AdditionOperands ops = addition_operands(la, lb, gen);
    int64_t offset = 0;
    if (f.hints && random_offset) {
      // Every offset at which the example's longest part (the sum, or an operand) still fits.
      const int64_t longest =
          std::max<int64_t>(std::max(la, lb), static_cast<int64_t>(add_reversed(ops.a, ops.b).size()));
      POSGRAD_CHECK(longest <= f.hint_count, ValueError, "addition: ", longest, " hints needed, the set has ",
                    f.hint_count);
      offset = draw(gen, f.hint_count - longest + 1);
    }
    int64_t start = 0;
    seqs.push_back(addition_tokens(ops, f, offset, &start));
    starts.push_back(start);
    T = std::max<int64_t>(T, static_cast<int64_t>(seqs.back().size()) - 1);
    out.lengths.push_back(std::max(la, lb));
  }
  const int64_t B = static_cast<int64_t>(seqs.size());
  out.x = Tensor::empty({B, T}, DType::Int64);  // (B, T)
  out.y = Tensor::empty({B, T}, DType::Int64);  // (B, T)
  int64_t* px = out.x.data<int64_t>();
  int64_t* py = out.y.data<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int64_t>& s = seqs[static_cast<size_t>(b)];
    const int64_t len = static_cast<int64_t>(s.size());
    for (int64_t j = 0; j < T; ++j) {
      px[b * T + j] = j + 1 < len ? s[static_cast<size_t>(j)] : kAddPad;
      // Position j predicts s[j + 1]: an answer token from the '=' (answer_start - 1) on.
      py[b * T + j] =
          (j + 1 >= starts[static_cast<size_t>(b)] && j + 1 < len) ? s[static_cast<size_t>(j + 1)] : kLengthIgnore;
    }
  }
  return out;
}

}  // namespace posgrad::data
