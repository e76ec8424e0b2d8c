// flipflop.h — flip-flop language modelling as a study of the comparison (Liu et al., NeurIPS 2023,
// "Exposing Attention Glitches with Flip-Flop Language Modeling"; the language: data/flipflop.h).
//
// Per (method, seed) unit: a small decoder (the task models' sizes, --task-n-layer/-n-embd/-n-head)
// with the unit's position encoding is trained on FFL(p_train) sequences of --flipflop-length tokens,
// the loss on the read bits only, then scored by teacher-forced argmax on fixed test sequences (the
// same for every method and seed) in five cells: in distribution (FFL(p_train)) at the training
// length and at each further --flipflop-multipliers length, sparse (FFL(p_sparse), the rare
// long-range reads where Liu et al. find the glitches) and dense (FFL(p_dense)) at the training
// length. Each cell keeps its counts (sequences, reads, wrong reads, sequences with a wrong read), so
// read accuracy and glitch rate are exact proportions with Wilson intervals per seed.
//
// Position-blind readings: a model that ignores the input answers each read by a constant or a
// coin, read accuracy 1/2 in expectation (the bit of the last write is uniform); NoPE can still solve
// the task (the last write is found by content and the causal mask, not by position), so a
// difference between encodings is what the study reads, not NoPE against 1/2.
//
// Claim f1 (per method): "a Transformer that fits flip-flop in distribution still glitches on sparse
// sequences" (Liu et al. §4: the glitch rate on sparse sequences stays above zero, and above the
// in-distribution rate, while small LSTMs extrapolate perfectly). A method whose mean in-distribution
// read accuracy is below kFlipFlopLearned is "inconclusive" (nothing can glitch beyond a task it has
// not learned); otherwise the sparse glitch rate against the in-distribution one by margin_test
// (compare/studies/study_claims.h; margin 0, the seeds' and the test sequences' noise).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compare/study.h"
#include "data/flipflop.h"

namespace posgrad::train {

struct FlipFlopSettings {
  static constexpr const char* kStudy = "flipflop";
  int64_t iters = 0;  // training steps (0: the study is off)
  int64_t length = 64, batch = 32, sequences = 200;
  double lr = 3e-3;
  double p_train = 0.8, p_sparse = 0.98, p_dense = 0.1;  // Liu et al. §3.1's FFL(0.8), FFL(0.98), FFL(0.1)
  std::vector<int64_t> multipliers = {1, 2, 4};          // in-distribution test lengths, x --flipflop-length
};

// One test cell of one unit: a split at a length, with its counts.
struct FlipFlopCell {
  std::string split;  // "in", "sparse", "dense"
  int64_t multiplier = 1;
  double p_ignore = 0;
  data::FlipFlopScore score;
};

struct FlipFlopResult {
  static constexpr const char* kStudy = "flipflop";
  double final_loss = 0, seconds = 0;
  std::vector<FlipFlopCell> cells;  // empty: not run
};

// The cells of a configuration, in order: ("in", k) for each multiplier, then ("sparse", 1), ("dense", 1).
std::vector<FlipFlopCell> flipflop_cells(const FlipFlopSettings& s);

// The in-distribution read accuracy from which a method counts as having learned the task (claim f1).
inline constexpr double kFlipFlopLearned = 0.95;

// The metric of a cell's read accuracy (glitch = false) or glitch rate (results.csv
// "flipflop_read_accuracy_in_x1", "flipflop_glitch_rate_sparse_x1").
Metric flipflop_metric(const std::string& split, int64_t multiplier, bool glitch);

// The f1 rows of the claims table, one per method with flip-flop results (none when the study is off).
std::vector<ClaimVerdict> judge_flipflop_claims(const ComparisonResult& r);

StudyEntry flipflop_study();

}  // namespace posgrad::train
