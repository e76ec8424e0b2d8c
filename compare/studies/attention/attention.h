// attention.h — attention weight by query-key distance of each trained unit: per layer, the mean
// of P(i, i - d) over the rows i >= d, heads and eight validation windows at the training length
// (GPT::attention_by_distance, nn/gpt.h), and its Spearman rank correlation with the distance, the
// measure of claim (g) ("RoPE's influence decays with distance"; Su et al. 2021 §3.4.3).
//
// Checks of a result read back: one profile per layer (--n-layer), one finite weight >= 0 per
// distance 0 .. --block-size - 1.
#pragma once

#include <vector>

#include "compare/results.h"
#include "compare/study.h"

namespace posgrad::train {

struct AttentionResult {
  static constexpr const char* kStudy = "attention";
  std::vector<std::vector<double>> by_distance;  // (layer, distance); results.json "attention_by_distance"
};

// Spearman's rank correlation of (distance, mean attention weight), attention averaged over layers;
// 0 with fewer than two distances.
double attention_distance_correlation(const std::vector<std::vector<double>>& by_layer);
// The metric of that correlation per unit (a Metric of study "attention"; higher: less decay).
Metric attention_decay_metric();

StudyEntry attention_study();

}  // namespace posgrad::train
