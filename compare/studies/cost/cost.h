// cost.h — the comparison's cost benchmark (compare/study.h: once per experiment, on rank 0): time and memory of each
// position encoding measured as a benchmark, not read off training. For each length T, every method is timed once per
// round, in interleaved rounds (round 0 is a warm-up), so that a slow spell of the machine hits all methods alike: the
// forward + backward of one attention layer (the encoding's own work: rotation, bias, c2p/p2c), and one whole training
// step (forward, cross-entropy, backward, clipping, AdamW) with a batch of about base.batch_size x base.block_size
// tokens (at least one sequence). Memory is the peak of posgrad's allocator during the step, not the process RSS. The
// models are built with block_size = T (a learned table as long as the sequence) and a 256-symbol vocabulary.
#pragma once

#include "compare/config.h"
#include "compare/results.h"
#include "compare/study.h"

namespace posgrad::train {

// Its settings (CompareConfig::of<CostSettings>(); options --cost-*).
struct CostSettings {
  static constexpr const char* kStudy = "cost";
  std::vector<int64_t> lengths = {64, 256, 1024, 2048};
  // 12: the step ratios' median 95% half-width was 10.1% at 5 rounds in the quick default (2 cores);
  // it shrinks about as t(n-1)/sqrt(n), to about 5% at 12, so that 10% differences are resolved.
  // A round of the quick preset's 8 methods x 4 lengths takes about 6 s.
  int64_t rounds = 12;
};

// Seconds per round of one measurement.
struct CostRow {
  std::string method, what;  // what: "attention" (one layer, forward + backward) or "step" (a training step)
  int64_t T = 0, batch = 0;
  std::vector<double> seconds;  // one per round
  int64_t peak_bytes = 0;       // posgrad's allocator peak during the measurement
  int64_t parameters = 0;
  double median() const;
  double spread() const;  // (max - min) / median
};
// The experiment's part (results.json "cost"). Checks of a result read back: --cost-rounds rounds,
// --cost-lengths lengths, one attention and one step row per method and length with one time per
// round, methods configured, times, sizes and counts >= 0.
struct CostResult {
  static constexpr const char* kStudy = "cost";
  int64_t rounds = 0, threads = 0;
  std::vector<int64_t> lengths;
  std::vector<CostRow> rows;
  double noise() const;  // the median spread over all rows: differences below it are inside the noise
  const CostRow* find(const std::string& method, const std::string& what, int64_t T) const;
  // The per-round log ratios ln(seconds(method) / seconds(reference)) of one measurement ("step" or
  // "attention") at T. Both were timed in the same round, one after the other, so a slow spell of
  // the machine that hits both divides out: the ratio's spread is far below each time's. Empty when
  // either row is absent or their round counts differ.
  std::vector<double> log_ratios(const std::string& method, const std::string& reference, const std::string& what,
                                 int64_t T) const;
};

// A ratio from per-round log ratios: the geometric mean exp(mean) with the 95% interval
// exp(mean ± t · std / sqrt(n)) (Student's t on the logs), "1.23 [1.20, 1.26]"; "n/a" without rounds.
std::string ratio_text(const std::vector<double>& log_ratios, int prec = 3);

CostResult measure_cost(const CompareConfig& cfg);

StudyEntry cost_study();

}  // namespace posgrad::train
