// cost.h — the comparison's cost benchmark: time and memory of each position encoding measured as
// a benchmark, not read off training. For each length T, every method is timed once per round, in
// interleaved rounds (round 0 is a warm-up), so that a slow spell of the machine hits all methods
// alike: the forward + backward of one attention layer (the encoding's own work: rotation, bias,
// c2p/p2c), and one whole training step (forward, cross-entropy, backward, clipping, AdamW) with a
// batch of about base.batch_size x base.block_size tokens (at least one sequence). Memory is the
// peak of posgrad's allocator during the step, not the process RSS. The models are built with
// block_size = T (a learned table as long as the sequence) and a 256-symbol vocabulary.
#pragma once

#include "compare/config.h"
#include "compare/results.h"

namespace posgrad::train {

CostResult measure_cost(const CompareConfig& cfg);

}  // namespace posgrad::train
