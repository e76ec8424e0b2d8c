// length_tasks.cpp — see length_tasks.h. Task definitions follow Delétang et al. 2023, App. A
// (each class cites its entry); the answer tokens are the task's own symbols.
#include "data/length_tasks.h"

#include <algorithm>
#include <cmath>

#include "tensor/errors.h"

namespace posgrad::data {

const char* chomsky_level_name(ChomskyLevel l) {
  switch (l) {
    case ChomskyLevel::Regular: return "regular";
    case ChomskyLevel::DeterministicContextFree: return "context-free";
    case ChomskyLevel::ContextSensitive: return "context-sensitive";
  }
  return "?";
}

namespace {

constexpr const char* kDeletang = "Deletang et al. 2023, Table 1 / App. A";

int64_t draw(Generator& g, int64_t n) { return static_cast<int64_t>(g.next_u64() % static_cast<uint64_t>(n)); }

void check_length(const LengthTask& t, int64_t n) {
  POSGRAD_CHECK(n >= t.min_length(), ValueError, "length task ", t.name(), ": input length must be >= ", t.min_length(),
                ", got ", n);
}

std::vector<int64_t> random_string(Generator& g, int64_t n, int64_t alphabet) {
  std::vector<int64_t> s(static_cast<size_t>(n));
  for (auto& v : s) v = draw(g, alphabet);
  return s;
}

// ---- regular --------------------------------------------------------------------------------------

// Parity Check (R): a string over {a, b}; is the number of b even? Symbols a=0, b=1, EVEN=2, ODD=3.
class ParityCheck : public LengthTask {
 public:
  std::string name() const override { return "parity_check"; }
  ChomskyLevel level() const override { return ChomskyLevel::Regular; }
  std::string source() const override { return std::string(kDeletang) + " (Parity Check)"; }
  std::string description() const override { return "string over {a,b} -> EVEN/ODD number of b"; }
  int64_t num_symbols() const override { return 4; }
  int64_t max_answer_length(int64_t n) const override {
    (void)n;
    return 1;
  }
  LengthExample example(int64_t n, Generator& g) const override {
    check_length(*this, n);
    LengthExample e;
    e.input = random_string(g, n, 2);
    const int64_t bs = std::count(e.input.begin(), e.input.end(), 1);
    e.output = {bs % 2 == 0 ? 2 : 3};
    return e;
  }
};

// Even Pairs (R): a string over {a, b}; is the number of "ab" and "ba" substrings together even?
// (It is exactly when the first and last symbols agree.) Symbols a=0, b=1, EVEN=2, ODD=3.
class EvenPairs : public LengthTask {
 public:
  std::string name() const override { return "even_pairs"; }
  ChomskyLevel level() const override { return ChomskyLevel::Regular; }
  std::string source() const override { return std::string(kDeletang) + " (Even Pairs)"; }
  std::string description() const override { return "string over {a,b} -> EVEN/ODD number of ab and ba pairs"; }
  int64_t num_symbols() const override { return 4; }
  int64_t max_answer_length(int64_t n) const override {
    (void)n;
    return 1;
  }
  LengthExample example(int64_t n, Generator& g) const override {
    check_length(*this, n);
    LengthExample e;
    e.input = random_string(g, n, 2);
    int64_t pairs = 0;
    for (size_t i = 1; i < e.input.size(); ++i) pairs += e.input[i] != e.input[i - 1];
    e.output = {pairs % 2 == 0 ? 2 : 3};
    return e;
  }
};

// Cycle Navigation (R): moves STAY=0, INC=1, DEC=2 on a cycle of 5 states starting at state 0; the
// answer is the final state (symbols 3 .. 7 for states 0 .. 4).
class CycleNavigation : public LengthTask {
 public:
  std::string name() const override { return "cycle_navigation"; }
  ChomskyLevel level() const override { return ChomskyLevel::Regular; }
  std::string source() const override { return std::string(kDeletang) + " (Cycle Navigation)"; }
  std::string description() const override { return "moves {stay,+1,-1} on a 5-cycle from 0 -> final state"; }
  int64_t num_symbols() const override { return 8; }
  int64_t max_answer_length(int64_t n) const override {
    (void)n;
    return 1;
  }
  LengthExample example(int64_t n, Generator& g) const override {
    check_length(*this, n);
    LengthExample e;
    e.input = random_string(g, n, 3);
    int64_t state = 0;
    for (int64_t m : e.input) state = (state + (m == 1 ? 1 : m == 2 ? 4 : 0)) % 5;
    e.output = {3 + state};
    return e;
  }
};

// ---- deterministic context-free ---------------------------------------------------------------------

// Reverse String (DCF): a string over {a, b} -> the string reversed.
class ReverseString : public LengthTask {
 public:
  std::string name() const override { return "reverse_string"; }
  ChomskyLevel level() const override { return ChomskyLevel::DeterministicContextFree; }
  std::string source() const override { return std::string(kDeletang) + " (Reverse String)"; }
  std::string description() const override { return "string over {a,b} -> the string reversed"; }
  int64_t num_symbols() const override { return 2; }
  int64_t max_answer_length(int64_t n) const override { return n; }
  LengthExample example(int64_t n, Generator& g) const override {
    check_length(*this, n);
    LengthExample e;
    e.input = random_string(g, n, 2);
    e.output.assign(e.input.rbegin(), e.input.rend());
    return e;
  }
};

// Stack Manipulation (DCF): an initial stack over {a, b} (written bottom to top) followed by
// actions POP, PUSH a, PUSH b; the answer is the final stack read from the top, then END. The
// initial stack takes k ~ U{0..n} of the n input symbols, the actions the rest; POP on an empty
// stack does nothing. Symbols a=0, b=1, POP=2, PUSH_a=3, PUSH_b=4, END=5.
class StackManipulation : public LengthTask {
 public:
  std::string name() const override { return "stack_manipulation"; }
  ChomskyLevel level() const override { return ChomskyLevel::DeterministicContextFree; }
  std::string source() const override { return std::string(kDeletang) + " (Stack Manipulation)"; }
  std::string description() const override {
    return "stack over {a,b} + pop/push actions -> final stack, top first, END";
  }
  int64_t num_symbols() const override { return 6; }
  int64_t max_answer_length(int64_t n) const override { return n + 1; }
  LengthExample example(int64_t n, Generator& g) const override {
    check_length(*this, n);
    LengthExample e;
    const int64_t k = draw(g, n + 1);
    std::vector<int64_t> stack = random_string(g, k, 2);
    e.input = stack;
    for (int64_t i = k; i < n; ++i) {
      const int64_t a = 2 + draw(g, 3);
      e.input.push_back(a);
      if (a == 2) {
        if (!stack.empty()) stack.pop_back();
      } else {
        stack.push_back(a - 3);
      }
    }
    e.output.assign(stack.rbegin(), stack.rend());
    e.output.push_back(5);
    return e;
  }
};

// ---- context-sensitive -----------------------------------------------------------------------------

// Duplicate String (CS): a string s over {a, b} -> s s.
class DuplicateString : public LengthTask {
 public:
  std::string name() const override { return "duplicate_string"; }
  ChomskyLevel level() const override { return ChomskyLevel::ContextSensitive; }
  std::string source() const override { return std::string(kDeletang) + " (Duplicate String)"; }
  std::string description() const override { return "string s over {a,b} -> s s"; }
  int64_t num_symbols() const override { return 2; }
  int64_t max_answer_length(int64_t n) const override { return 2 * n; }
  LengthExample example(int64_t n, Generator& g) const override {
    check_length(*this, n);
    LengthExample e;
    e.input = random_string(g, n, 2);
    e.output = e.input;
    e.output.insert(e.output.end(), e.input.begin(), e.input.end());
    return e;
  }
};

// Odd First (CS): s_1 .. s_n over {a, b} -> the symbols at odd positions (1, 3, ...), then those at
// even positions (2, 4, ...).
class OddFirst : public LengthTask {
 public:
  std::string name() const override { return "odd_first"; }
  ChomskyLevel level() const override { return ChomskyLevel::ContextSensitive; }
  std::string source() const override { return std::string(kDeletang) + " (Odd First)"; }
  std::string description() const override { return "s_1..s_n over {a,b} -> s_1 s_3 .. then s_2 s_4 .."; }
  int64_t num_symbols() const override { return 2; }
  int64_t max_answer_length(int64_t n) const override { return n; }
  LengthExample example(int64_t n, Generator& g) const override {
    check_length(*this, n);
    LengthExample e;
    e.input = random_string(g, n, 2);
    for (size_t i = 0; i < e.input.size(); i += 2) e.output.push_back(e.input[i]);
    for (size_t i = 1; i < e.input.size(); i += 2) e.output.push_back(e.input[i]);
    return e;
  }
};

// Bucket Sort (CS): a string over 5 symbols -> the string sorted (ascending ids).
class BucketSort : public LengthTask {
 public:
  std::string name() const override { return "bucket_sort"; }
  ChomskyLevel level() const override { return ChomskyLevel::ContextSensitive; }
  std::string source() const override { return std::string(kDeletang) + " (Bucket Sort)"; }
  std::string description() const override { return "string over 5 symbols -> sorted"; }
  int64_t num_symbols() const override { return 5; }
  int64_t max_answer_length(int64_t n) const override { return n; }
  LengthExample example(int64_t n, Generator& g) const override {
    check_length(*this, n);
    LengthExample e;
    e.input = random_string(g, n, 5);
    e.output = e.input;
    std::sort(e.output.begin(), e.output.end());
    return e;
  }
};

}  // namespace

const std::vector<std::string>& length_task_names() {
  static const std::vector<std::string> n = {"parity_check",   "even_pairs",         "cycle_navigation",
                                             "reverse_string", "stack_manipulation", "duplicate_string",
                                             "odd_first",      "bucket_sort"};
  return n;
}

std::unique_ptr<LengthTask> make_length_task(const std::string& name) {
  if (name == "parity_check") return std::make_unique<ParityCheck>();
  if (name == "even_pairs") return std::make_unique<EvenPairs>();
  if (name == "cycle_navigation") return std::make_unique<CycleNavigation>();
  if (name == "reverse_string") return std::make_unique<ReverseString>();
  if (name == "stack_manipulation") return std::make_unique<StackManipulation>();
  if (name == "duplicate_string") return std::make_unique<DuplicateString>();
  if (name == "odd_first") return std::make_unique<OddFirst>();
  if (name == "bucket_sort") return std::make_unique<BucketSort>();
  std::string all;
  for (const auto& n : length_task_names()) all += (all.empty() ? "" : ", ") + n;
  throw ValueError("unknown length task '" + name + "' (known: " + all + ")");
}

LengthBatch length_batch_from(const LengthTask& task, const std::vector<LengthExample>& examples) {
  POSGRAD_CHECK(!examples.empty(), ValueError, "length task ", task.name(), ": a batch needs at least one example");
  const int64_t S = task.num_symbols();
  int64_t T = 0;
  for (const auto& e : examples) {
    POSGRAD_CHECK(!e.output.empty(), ValueError, "length task ", task.name(), ": an example has an empty answer");
    for (const auto* part : {&e.input, &e.output})
      for (int64_t v : *part)
        POSGRAD_CHECK(v >= 0 && v < S, ValueError, "length task ", task.name(), ": symbol ", v, " outside [0, ", S,
                      ")");
    T = std::max<int64_t>(T, static_cast<int64_t>(e.input.size() + e.output.size()) + 1);
  }
  const int64_t B = static_cast<int64_t>(examples.size());
  LengthBatch out;
  out.x = Tensor::empty({B, T}, DType::Int64);  // (B, T)
  out.y = Tensor::empty({B, T}, DType::Int64);  // (B, T)
  int64_t* px = out.x.data<int64_t>();
  int64_t* py = out.y.data<int64_t>();
  std::vector<int64_t> seq;
  for (int64_t b = 0; b < B; ++b) {
    const LengthExample& e = examples[static_cast<size_t>(b)];
    const int64_t n = static_cast<int64_t>(e.input.size());
    seq.assign(1, task.bos());
    seq.insert(seq.end(), e.input.begin(), e.input.end());
    seq.push_back(task.sep());
    seq.insert(seq.end(), e.output.begin(), e.output.end());
    const int64_t len = static_cast<int64_t>(seq.size());  // n + m + 2
    for (int64_t j = 0; j < T; ++j) {
      px[b * T + j] = j + 1 < len ? seq[j] : task.pad();  // the last answer token is only a target
      // Position j predicts seq[j + 1]; positions n + 1 .. len - 2 (SEP and the answer but its last
      // token) predict the answer.
      py[b * T + j] = (j >= n + 1 && j + 1 < len) ? seq[j + 1] : kLengthIgnore;
    }
    out.lengths.push_back(n);
  }
  return out;
}

LengthBatch make_length_batch(const LengthTask& task, const std::vector<int64_t>& lengths, Generator& gen) {
  POSGRAD_CHECK(!lengths.empty(), ValueError, "length task ", task.name(), ": a batch needs at least one length");
  std::vector<LengthExample> ex;
  ex.reserve(lengths.size());
  for (int64_t n : lengths) ex.push_back(task.example(n, gen));
  return length_batch_from(task, ex);
}

LengthScore score_length_logits(const Tensor& logits, const Tensor& y) {
  POSGRAD_CHECK(logits.defined() && logits.dim() == 3, ShapeError,
                "score_length_logits: logits must be (B, T, V), got ",
                logits.defined() ? logits.str() : std::string("an undefined tensor"));
  POSGRAD_CHECK(y.defined() && y.dim() == 2 && y.size(0) == logits.size(0) && y.size(1) == logits.size(1), ShapeError,
                "score_length_logits: y must be (B, T) = ", logits.size(0), " x ", logits.size(1), ", got ",
                y.defined() ? y.str() : std::string("an undefined tensor"));
  POSGRAD_CHECK(y.dtype() == DType::Int64, DTypeError, "score_length_logits: y must be int64, got ",
                dtype_name(y.dtype()));
  POSGRAD_CHECK(logits.dtype() == DType::Float32 || logits.dtype() == DType::Float64, DTypeError,
                "score_length_logits: logits must be float32 or float64, got ", dtype_name(logits.dtype()));
  const int64_t B = logits.size(0), T = logits.size(1), V = logits.size(2);
  const std::vector<double> l = logits.to(Device::cpu()).to_vector();
  const std::vector<int64_t> t = y.to(Device::cpu()).to_int_vector();
  LengthScore s;
  s.examples = B;
  for (int64_t b = 0; b < B; ++b) {
    int64_t correct = 0, scored = 0;
    for (int64_t j = 0; j < T; ++j) {
      const int64_t target = t[b * T + j];
      if (target == kLengthIgnore) continue;
      POSGRAD_CHECK(target >= 0 && target < V, ValueError, "score_length_logits: target ", target, " at (", b, ", ", j,
                    ") outside the vocabulary [0, ", V, ")");
      const double* row = l.data() + (b * T + j) * V;
      const int64_t arg = std::max_element(row, row + V) - row;  // ties: the lowest id
      correct += arg == target;
      ++scored;
    }
    POSGRAD_CHECK(scored > 0, ValueError, "score_length_logits: row ", b, " has no scored position");
    s.correct.push_back(correct);
    s.scored.push_back(scored);
    s.sequence_accuracy += correct == scored ? 1.0 : 0.0;
    s.token_accuracy += static_cast<double>(correct) / static_cast<double>(scored);
  }
  s.sequence_accuracy /= static_cast<double>(B);
  s.token_accuracy /= static_cast<double>(B);
  return s;
}

}  // namespace posgrad::data
