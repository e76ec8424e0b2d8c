// gradient.h — gradient flow by distance: how far back each position encoding lets the learning
// signal reach. Per unit, the norm of the gradient of the last position's next-token loss with
// respect to the residual stream entering each block l (block 0: the input embeddings), at each
// input position j, by distance d = (T - 1) - j from the last position (T = block_size), averaged
// over eight validation windows (GPT::gradient_by_distance, nn/gpt.h):
//   g_l(d) = mean_b || dL_b / dx_l[b, T-1-d, :] ||_2,  L_b the last position's loss of window b (nats).
// The trained model is measured in eval mode; its parameters' gradients are not touched.
// Position-blind reading (no position encoding, uniform attention, a window of one repeated token):
// the last block's profile is flat for d >= 1 at (1/T)||J^T u|| (the value path alone carries the
// signal back, evenly), pinned in tests/test_measurements.cpp; a profile that falls with d means
// the model's attention lets less of the signal reach far-back inputs. d = 0 includes the residual
// path and is excluded from the table's reach.
//
// Report: per method, one panel with a line per layer (first seed, log scale), and a table of the
// input-embedding profile (layer 0) at four distances and its reach g_0(T-1) / g_0(1), mean [95%
// interval] over seeds. Checks of a result read back: one profile per layer, block_size values each,
// finite >= 0.
#pragma once

#include <vector>

#include "compare/results.h"
#include "compare/study.h"

namespace posgrad::train {

struct GradientResult {
  static constexpr const char* kStudy = "gradient";
  std::vector<std::vector<double>> by_distance;  // (layer, distance); results.json "gradient_by_distance"
};

// Layer 0's gradient norm at distance d (>= 0), or with reach = true its ratio g_0(T-1) / g_0(1):
// a Metric of study "gradient" (multiplier = d).
Metric gradient_metric(int64_t distance, bool reach = false);

StudyEntry gradient_study();

}  // namespace posgrad::train
