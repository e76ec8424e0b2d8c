// addition.h — reversed multi-digit addition with length generalisation as a study of the comparison
// (Zhou et al. 2024, "Transformers Can Achieve Length Generalization But Not Robustly", arXiv
// 2402.09371; the data: data/addition.h).
//
// Its own units and seeds. Zhou et al.'s finding is about the spread over seeds, which three seeds
// (the comparison's default --seeds) barely show, and the study needs nothing of the language model
// that a decoder unit trains. So, like the encoder track, it has (method, seed) units of its own
// (StudyEntry::own_units: methods outer, --addition-seeds inner, default 1..5), which the runner
// distributes over the job's processes like the decoder units. A finished unit keeps its result in
// <out_dir>/addition/<method>/seed<k>/result.json and is not measured again by a re-run; the
// experiment directory refuses other --addition-* settings once units are finished (compare/compare.cpp,
// check_same_experiment), --addition-seeds included.
//
// Per unit: for each variant in --addition-variants (plain: digits only; hints: index hints, Zhou et
// al. §3) a small decoder (the task models' sizes, --task-n-layer/-n-embd/-n-head) with the method's
// encoding is trained for --addition-iters steps on batches whose operand lengths are drawn
// independently and uniformly in 1..N (N = --addition-length; one draw per example); where the
// method is in --addition-randomized (and takes position ids) the same again with randomized
// positions (Ruoss et al. 2023 §3, the suite's machinery: random_positions in
// compare/studies/suite/length_suite.h), row "<method>+randomized". Each model is then scored by exact
// match (the whole answer, hints and end token included, right under teacher-forced argmax = greedy
// decoding) on --addition-examples fixed test examples at each operand length n = 1 .. 3N (both operands
// n digits; the same examples for every method and seed). The hint set has 3N + 1 symbols (the longest
// test answer): training offsets cover it, test offsets are 0.
//
// Report: per row, variant and length the exact match over seeds as mean, min, max and sd
// (addition.csv; every seed's count in addition_seeds.csv), a Markdown table per method and variant,
// and plots/addition_<variant>.png (mean with the min–max range over seeds, by length).
//
// Claim z1 (Zhou et al. abstract and §5: length generalisation "remains fragile, significantly
// influenced by factors like random weight initialization and training data order, leading to large
// variances across different random seeds"). Per row and variant that learns the task in distribution
// (every seed's exact match pooled over lengths 1..N at least kAdditionLearned) and whose best seed
// generalises at all beyond N (pooled exact match over N+1..2N above the margin): the measure is the
// spread of the per-seed exact match over N+1..2N, max − min over seeds. Supported when two seeds
// differ by more than the margin (--addition-spread-margin, default 0.2) significantly: the largest
// pair's one-sided z test of p_i − p_j > margin with the test examples' binomial variance (Agresti–
// Caffo), Bonferroni over the S(S−1)/2 pairs. Contradicted when every pair's |p_i − p_j| is
// significantly below the margin (two one-sided tests per pair, the largest p over the pairs:
// intersection–union), i.e. the seeds agree. Inconclusive otherwise, and for rows that did not learn
// in distribution or that no seed generalises beyond N (nothing to be fragile about). Not measured
// when the study is off. A model that ignores position cannot align the digits: it answers only the
// one-digit sums (symmetric in the operands) and reads 0 beyond length 1 at every seed, so it does not
// learn in distribution (N >= 2) and its spread reads 0 (tests/test_addition.cpp pins both).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compare/study.h"

namespace posgrad::train {

struct AdditionSettings {
  static constexpr const char* kStudy = "addition";
  int64_t iters = 0;                              // training steps per model (0: the study is off)
  int64_t length = 3, batch = 32, examples = 40;  // N = 3: learned at 2000 steps (docs/presets.md)
  double lr = 3e-3;
  std::vector<std::string> variants = {"plain", "hints"};
  std::vector<std::string> randomized = {"sinusoidal", "learned", "rope", "fire"};  // where among the methods
  std::vector<uint64_t> seeds = {1, 2, 3, 4, 5};
  double spread_margin = 0.2;
};

// One model's exact matches at one operand length.
struct AdditionLength {
  int64_t n = 0, examples = 0, correct = 0;
  double exact() const { return examples ? static_cast<double>(correct) / static_cast<double>(examples) : 0.0; }
};
// One trained model: a variant, plain or randomized positions, scored at lengths 1..3N.
struct AdditionRow {
  std::string variant;  // "plain", "hints"
  bool randomized = false;
  double final_loss = 0, seconds = 0;
  std::vector<AdditionLength> lengths;
};
// One (method, seed) unit: its rows, in run order (variants, each plain then randomized).
struct AdditionUnit {
  std::string method;
  uint64_t seed = 0;
  std::vector<AdditionRow> rows;
};
// The experiment's result (results.json "addition"): every unit, methods outer, seeds inner.
struct AdditionResult {
  static constexpr const char* kStudy = "addition";
  std::vector<AdditionUnit> units;
};

// The in-distribution exact match from which a row counts as having learned the task (claim z1).
inline constexpr double kAdditionLearned = 0.95;

// The rows a unit of `method` trains: (variant, randomized) in run order.
std::vector<std::pair<std::string, bool>> addition_rows(const CompareConfig& cfg, const std::string& method);

// Per seed, the exact match of (method, variant, randomized) pooled over lengths lo..hi, with the
// examples it is over.
struct AdditionSeedScore {
  uint64_t seed = 0;
  int64_t correct = 0, examples = 0;
  double value() const { return examples ? static_cast<double>(correct) / static_cast<double>(examples) : 0.0; }
};
std::vector<AdditionSeedScore> addition_scores(const AdditionResult& r, const std::string& method,
                                               const std::string& variant, bool randomized, int64_t lo, int64_t hi);

// The spread of per-seed values: max − min (0 for fewer than 2 values).
double addition_spread(const std::vector<AdditionSeedScore>& s);

// Claim z1's rows: one per (row, variant) with results; one "not measured" row when the study is off.
std::vector<ClaimVerdict> judge_addition_claims(const ComparisonResult& r);

// Per-unit JSON (the unit's result.json, and what a process sends to rank 0); from_json throws
// json::exception on a malformed value.
nlohmann::json addition_unit_to_json(const AdditionUnit& u);
AdditionUnit addition_unit_from_json(const nlohmann::json& j);

// Report pieces (addition_report.cpp): addition.csv, addition_seeds.csv, the plots (names drawn), the
// section.
void write_addition_csv(const ComparisonResult& r, const std::string& path);
void write_addition_seeds_csv(const ComparisonResult& r, const std::string& path);
std::vector<std::string> write_addition_plots(const ComparisonResult& r, const std::string& dir);
std::string addition_markdown(const ComparisonResult& r, const std::string& plots_dir);

StudyEntry addition_study();

}  // namespace posgrad::train
