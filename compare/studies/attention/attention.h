// attention.h — attention weight by query-key distance of each trained unit, over its uniform
// share, and the decay statistic of claim (g) ("RoPE's influence decays with distance"; Su et al.
// 2021 §3.4.3 derive a decaying upper bound of the rotated score with the relative distance).
//
// The profile: per layer l and distance d = 1 .. T-1 (T = --block-size),
//   a_l(d) = mean over heads, eight validation windows b and the pairs (i, j = i - d) of  i · p'_ij,
//   p'_ij = query i's attention over its i visible keys other than itself (P_ij / (1 - P_ii))
// (GPT::attention_over_uniform_by_distance, nn/gpt.h; attention_weight_over_uniform,
// autograd/ops/attention.h). Dimensionless: a multiple of the share 1/i that uniform attention
// gives each of those keys. Why not the plain mean of P(i, i - d): row i spreads its mass over i + 1
// keys and only the rows i >= d reach distance d, so uniform attention — no position information at
// all — gives a mean that falls strictly with d (Spearman -1): the causal mask, not the model,
// would decide the claim. The query's own key is left out (d = 0) because it is the one key a model
// without positions can single out by content; with it kept, a model that attends to itself and
// spreads the rest evenly would read as decaying.
//
// The decay statistic of a unit: the layers' mean profile a(d) = mean_l a_l(d), the near half of
// the distances N = mean a(d) over d = 1 .. h and the far half F = mean a(d) over d = h+1 .. T-1,
// h = floor((T - 1) / 2), and their contrast
//   C = (N - F) / (N + F) = tanh(ln(N / F) / 2)   in [-1, 1], dimensionless;
// C > 0: nearer keys get more than their uniform share relative to farther ones (decay), C < 0:
// the reverse (growth). Position-blind readings: uniform attention gives a(d) = 1 exactly at every
// d, so C = 0 exactly (pinned in tests/test_measurements.cpp and tests/test_compare.cpp); attention
// whose scores over the other keys are exchangeable (a first layer without position encoding on
// i.i.d. tokens) gives a(d) = 1 and C = 0 in expectation. A decoder without position encoding is not
// position-blind beyond its first layer (a causal key summarises its own prefix; Haviv et al. 2022),
// and text is locally correlated, so learned content locality also reads C > 0: claim (g) compares
// RoPE against the measured NoPE units as well as against 0. Known confound: a head that parks its
// weight on the first key (an attention sink) raises a(d) at the largest distances (key 0 is at
// distance i from row i), lowering C. NaN (n/a) with fewer than two distances (T < 3).
//
// The first token's share (StreamingLLM's attention sink, Xiao et al. 2024 §3.1), per layer l:
//   f_l = mean over heads, the same eight windows and the queries i = 1 .. T-1 of  n_i · p_i0
// (GPT::first_token_share_by_layer; attention_first_key_share, autograd/ops/attention.h), n_i the i + 1
// keys query i sees: 1 = the share uniform attention gives (exactly, pinned in
// tests/test_measurements.cpp), > 1 = the first token draws more. With attention sinks it is over the
// real keys alone (the sink takes the same fraction from every key), so a sink lowers it only where
// the model stops parking weight on the first token, not by taking its own share. A unit's value is
// the mean over layers; the claim that sinks lower it (papers study, claim n6) pairs each method
// variant with sinks with the same method without (compare/method.h), seed by seed.
//
// Checks of a result read back: one profile per layer (--n-layer), one finite weight in
// [0, --block-size - 1] per distance 1 .. --block-size - 1 (n_i p' is at most n_i <= T - 1); the
// first-token share (absent in results written before it: n/a), one per layer in [0, --block-size].
#pragma once

#include <string>
#include <vector>

#include "compare/results.h"
#include "compare/study.h"

namespace posgrad::train {

struct AttentionResult {
  static constexpr const char* kStudy = "attention";
  // (layer, distance - 1): a_l(d), d = 1 .. block_size - 1; results.json "attention_over_uniform"
  std::vector<std::vector<double>> over_uniform;
  // (layer): f_l; results.json "attention_first_token_share" (empty: measured before it existed)
  std::vector<double> first_token_share;
};

// The decay contrast C of one unit's profile (layer, distance - 1) as above; NaN with no layer or
// fewer than two distances.
double attention_decay_contrast(const std::vector<std::vector<double>>& by_layer);
// The metric of that contrast per unit (a Metric of study "attention", results.csv
// "attention_decay_contrast"; higher: more decay; 0 = position-blind).
Metric attention_decay_metric();
// The metric of the first-token share per unit, the mean of f_l over layers (results.csv
// "attention_first_token_share"; 1 = position-blind, lower: less weight parked on the first token).
Metric attention_first_token_metric();

// The margin of claim (g)'s decision, in units of C: a contrast within ±0.01 of another (N/F within
// about 1.02 of it) is too small a difference to count either way, however tight the seeds
// (a statistically significant 1e-5 says nothing about decay).
constexpr double kDecayMargin = 0.01;

// The rule of claim (g): does `name` (per-seed contrasts x) decay with distance more than attention
// without position information? A family of two tests, each two-sided at 5% (no correction), each
// also asking for a difference beyond kDecayMargin:
//   vs the position-blind value 0: x's 95% Student-t interval (summarize, compare/stats.h) above
//   +margin (or below -margin);
//   vs the control (`control_name`, the per-seed contrasts of the units without a position
//   encoding): Welch's t-test (welch_test, significant_order) with the difference of means beyond
//   the margin in the same direction.
// supported: both in the claimed direction — an intersection-union rule: under no effect its rate
//   is at most 2.5% (one tail of either test);
// contradicted: either the other way (interval below -margin, or x significantly below the control
//   by more than the margin) — at most 2.5% + 2.5% = 5% under no effect;
// inconclusive otherwise: fewer than two seeds of x, the control absent or with one seed (not
//   testable), an interval reaching inside ±margin, or no difference from the control beyond it;
//   `why` says which, with the numbers. The rates are bounds; tests/test_compare.cpp checks them
//   by simulated null experiments.
Judgement judge_decay(const std::vector<double>& x, const std::vector<double>& control, const std::string& name,
                      const std::string& control_name);

StudyEntry attention_study();

}  // namespace posgrad::train
