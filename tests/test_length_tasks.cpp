// test_length_tasks.cpp — the length-generalisation suite's generators (known inputs give known
// answers; the answer follows from the input by the task's rule at every length; same seed, same
// examples), the batch layout (tokens, padding, which targets are scored) and the scorer
// (per-sequence and per-token accuracy on hand-made logits; bad input).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "data/length_tasks.h"
#include "tensor/errors.h"

using namespace posgrad;
using namespace posgrad::data;

namespace {

// An independent statement of each task's rule (written from Deletang et al. App. A, not from the
// generator's code path): the answer for a given input.
std::vector<int64_t> rule(const std::string& task, const std::vector<int64_t>& in) {
  std::vector<int64_t> out;
  if (task == "parity_check") {
    int64_t odd = 0;
    for (int64_t v : in) odd ^= (v == 1);
    return {odd ? 3 : 2};
  }
  if (task == "even_pairs") return {in.front() == in.back() ? 2 : 3};
  if (task == "cycle_navigation") {
    int64_t s = 0;
    for (int64_t v : in) s += v == 1 ? 1 : v == 2 ? -1 : 0;
    return {3 + ((s % 5) + 5) % 5};
  }
  if (task == "reverse_string") return {in.rbegin(), in.rend()};
  if (task == "duplicate_string") {
    out = in;
    out.insert(out.end(), in.begin(), in.end());
    return out;
  }
  if (task == "odd_first") {
    for (size_t i = 0; i < in.size(); ++i)
      if (i % 2 == 0) out.push_back(in[i]);
    for (size_t i = 0; i < in.size(); ++i)
      if (i % 2 == 1) out.push_back(in[i]);
    return out;
  }
  if (task == "bucket_sort") {
    for (int64_t sym = 0; sym < 5; ++sym)
      for (int64_t v : in)
        if (v == sym) out.push_back(v);
    return out;
  }
  if (task == "stack_manipulation") {
    // The initial stack is the leading run of a/b symbols; from the first action on, every symbol is an action.
    std::vector<int64_t> st;
    bool actions = false;
    for (int64_t v : in) {
      actions = actions || v >= 2;
      if (!actions)
        st.push_back(v);
      else if (v == 2) {
        if (!st.empty()) st.pop_back();
      } else
        st.push_back(v == 3 ? 0 : 1);
    }
    out.assign(st.rbegin(), st.rend());
    out.push_back(5);
    return out;
  }
  ADD_FAILURE() << "no rule for " << task;
  return out;
}

}  // namespace

TEST(LengthTasks, SuiteSpansTheThreeLevelsAndNamesItsSources) {
  std::set<ChomskyLevel> levels;
  ASSERT_GE(length_task_names().size(), 6u);
  for (const auto& name : length_task_names()) {
    auto t = make_length_task(name);
    EXPECT_EQ(t->name(), name);
    EXPECT_NE(t->source().find("Deletang"), std::string::npos) << name;
    EXPECT_FALSE(t->description().empty());
    EXPECT_EQ(t->vocab_size(), t->num_symbols() + 3);
    levels.insert(t->level());
  }
  EXPECT_EQ(levels.size(), 3u);
  EXPECT_STREQ(chomsky_level_name(ChomskyLevel::ContextSensitive), "context-sensitive");
  EXPECT_THROW(
      {
        try {
          make_length_task("sorting");
        } catch (const ValueError& e) {
          EXPECT_NE(std::string(e.what()).find("'sorting'"), std::string::npos);
          EXPECT_NE(std::string(e.what()).find("bucket_sort"), std::string::npos);
          throw;
        }
      },
      ValueError);
}

TEST(LengthTasks, EveryAnswerFollowsTheTaskRuleAtEveryLength) {
  for (const auto& name : length_task_names()) {
    auto t = make_length_task(name);
    Generator g(42);
    for (int64_t n = 1; n <= 40; ++n)
      for (int rep = 0; rep < 5; ++rep) {
        const LengthExample e = t->example(n, g);
        ASSERT_EQ(static_cast<int64_t>(e.input.size()), n) << name;
        for (int64_t v : e.input) ASSERT_TRUE(v >= 0 && v < t->num_symbols()) << name;
        EXPECT_EQ(e.output, rule(name, e.input)) << name << " n=" << n;
        EXPECT_LE(static_cast<int64_t>(e.output.size()), t->max_answer_length(n)) << name;
      }
  }
}

TEST(LengthTasks, KnownExamples) {
  // Hand-worked answers, through the same rule the generators are checked against.
  EXPECT_EQ(rule("parity_check", {1, 0, 1, 1}), std::vector<int64_t>({3}));          // three b: odd
  EXPECT_EQ(rule("even_pairs", {0, 1, 1, 0}), std::vector<int64_t>({2}));            // ab, ba: two pairs
  EXPECT_EQ(rule("cycle_navigation", {2, 2, 0, 1}), std::vector<int64_t>({3 + 4}));  // 0 -1 -1 +0 +1 = -1 = 4
  EXPECT_EQ(rule("odd_first", {0, 1, 1, 0, 1}), std::vector<int64_t>({0, 1, 1, 1, 0}));
  EXPECT_EQ(rule("stack_manipulation", {0, 1, 2, 4, 3}),
            std::vector<int64_t>({0, 1, 0, 5}));  // ab, pop, push b, push a
  // And the generators produce answers for inputs of their own: check one complete draw per task
  // against a rule applied by hand to the drawn input.
  auto t = make_length_task("bucket_sort");
  Generator g(7);
  LengthExample e = t->example(6, g);
  std::vector<int64_t> sorted = e.input;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(e.output, sorted);
  EXPECT_TRUE(std::is_sorted(e.output.begin(), e.output.end()));
}

TEST(LengthTasks, SameSeedSameExamplesOtherSeedOthers) {
  for (const auto& name : length_task_names()) {
    auto t = make_length_task(name);
    Generator a(5), b(5), c(6);
    const LengthBatch x = make_length_batch(*t, {3, 9, 17}, a);
    const LengthBatch y = make_length_batch(*t, {3, 9, 17}, b);
    const LengthBatch z = make_length_batch(*t, {3, 9, 17}, c);
    EXPECT_EQ(x.x.to_int_vector(), y.x.to_int_vector()) << name;
    EXPECT_EQ(x.y.to_int_vector(), y.y.to_int_vector()) << name;
    EXPECT_EQ(a.state().offset, b.state().offset);
    EXPECT_NE(x.x.to_int_vector(), z.x.to_int_vector()) << name;
  }
}

TEST(LengthTasks, BatchLayoutPadsAndScoresOnlyTheAnswer) {
  auto t = make_length_task("reverse_string");  // S = 2: BOS 2, SEP 3, PAD 4
  const LengthBatch b = length_batch_from(*t, {{{0, 1, 1}, {1, 1, 0}}, {{1}, {1}}});
  ASSERT_EQ(b.x.shape(), Shape({2, 7}));  // 1 + 3 + 1 + 3 - 1 = 7 inputs for the longer row
  EXPECT_EQ(b.x.to_int_vector(), std::vector<int64_t>({2, 0, 1, 1, 3, 1, 1,  //
                                                       2, 1, 3, 4, 4, 4, 4}));
  const int64_t I = kLengthIgnore;
  EXPECT_EQ(b.y.to_int_vector(), std::vector<int64_t>({I, I, I, I, 1, 1, 0,  // SEP and the answer predict it
                                                       I, I, 1, I, I, I, I}));
  EXPECT_EQ(b.lengths, std::vector<int64_t>({3, 1}));
  EXPECT_THROW(length_batch_from(*t, {}), ValueError);
  EXPECT_THROW(length_batch_from(*t, {{{0}, {}}}), ValueError);
  EXPECT_THROW(length_batch_from(*t, {{{7}, {0}}}), ValueError);
  Generator g(1);
  EXPECT_THROW(make_length_batch(*t, {2, 0}, g), ValueError);
  EXPECT_THROW(t->example(0, g), ValueError);
}

TEST(LengthTasks, ScoresSequenceAndTokenAccuracyFromLogits) {
  // Two rows, T = 4, V = 3. Row 0 scores positions 1..3 (targets 2, 0, 1); row 1 scores position 3 (target 1).
  const int64_t I = kLengthIgnore;
  Tensor y = Tensor::from_ints({I, 2, 0, 1, I, I, I, 1}, {2, 4});
  std::vector<double> l(2 * 4 * 3, 0.0);
  auto set = [&](int64_t b, int64_t j, int64_t v) { l[(b * 4 + j) * 3 + v] = 1.0; };
  set(0, 0, 1);  // unscored, wrong: ignored
  set(0, 1, 2);
  set(0, 2, 1);  // wrong
  set(0, 3, 1);
  set(1, 3, 1);
  LengthScore s = score_length_logits(Tensor::from_vector(l, {2, 4, 3}), y);
  EXPECT_EQ(s.examples, 2);
  EXPECT_EQ(s.correct, std::vector<int64_t>({2, 1}));
  EXPECT_EQ(s.scored, std::vector<int64_t>({3, 1}));
  EXPECT_DOUBLE_EQ(s.sequence_accuracy, 0.5);
  EXPECT_DOUBLE_EQ(s.token_accuracy, (2.0 / 3.0 + 1.0) / 2.0);
  // Ties go to the lowest id: all-zero logits predict 0.
  LengthScore z = score_length_logits(Tensor::zeros({2, 4, 3}), Tensor::from_ints({I, 0, I, I, I, I, 1, I}, {2, 4}));
  EXPECT_EQ(z.correct, std::vector<int64_t>({1, 0}));
  // Misuse.
  EXPECT_THROW(score_length_logits(Tensor::zeros({2, 4}), y), ShapeError);
  EXPECT_THROW(score_length_logits(Tensor::zeros({2, 5, 3}), y), ShapeError);
  EXPECT_THROW(score_length_logits(Tensor::zeros({2, 4, 3}), Tensor::zeros({2, 4})), DTypeError);
  EXPECT_THROW(score_length_logits(Tensor::zeros({1, 2, 3}), Tensor::from_ints({I, I}, {1, 2})), ValueError);
  EXPECT_THROW(score_length_logits(Tensor::zeros({1, 2, 3}), Tensor::from_ints({I, 5}, {1, 2})), ValueError);
}
