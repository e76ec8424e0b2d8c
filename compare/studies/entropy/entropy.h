// entropy.h — attention entropy by query position: how sharply each trained model attends, and
// whether a position encoding makes attention more local as the query moves away from the start.
// Per unit, per layer l and query position i (1 .. block_size - 1), the entropy of query i's
// attention row over the i + 1 keys it sees, averaged over heads and eight validation windows at
// the training length, divided by log(i + 1) (GPT::attention_entropy_by_position, nn/gpt.h):
//   e_l(i) = mean_{b,h} ( -sum_j p_ij log p_ij ) / log(i + 1).
// Position-blind reading: uniform attention over the visible keys — what attention without any
// positional or content preference does — gives e = 1 at every i by construction (pinned in
// tests/test_measurements.cpp); attention on one key gives 0. With --attention-sinks the entropy is
// that of the real keys' share renormalised (the sink's mass does not count). Query 0 sees one key
// and has no entropy to normalise: it is left out (index k of a profile is query position k + 1).
//
// Report: per method, one panel with a line per layer (first seed), and a table of the mean over
// layers at four query positions with its 95% interval over seeds. Checks of a result read back:
// one profile per layer, block_size - 1 values each, every value in [0, 1] up to rounding (1e-9).
#pragma once

#include <vector>

#include "compare/results.h"
#include "compare/study.h"

namespace posgrad::train {

struct EntropyResult {
  static constexpr const char* kStudy = "entropy";
  std::vector<std::vector<double>> by_position;  // (layer, query position - 1); results.json "attention_entropy"
};

// The layer-mean normalised entropy at query position i (>= 1) of each seed's unit of a method: a
// Metric of study "entropy" with multiplier = i.
Metric entropy_metric(int64_t position);

StudyEntry entropy_study();

}  // namespace posgrad::train
