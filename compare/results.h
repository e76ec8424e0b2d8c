// results.h — the comparison's results as types: one UnitResult per (method, seed), produced once
// by the experiment, and one ComparisonResult holding the configuration, the provenance, every unit
// and the cost benchmark. results.json is their one serialisation (to_json / from_json here);
// `posgrad report` reads it back with the same schema, and the CSV, plots, claims and markdown are
// all computed from these structs — never from JSON paths.
//
// A metric is typed (Quantity + evaluation multiplier); values() gathers it over the seeds of one
// row ("rope", or an evaluation-time variant of it such as "rope+yarn" or "rope@bf16").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare/config.h"
#include "compare/studies/suite/length_suite.h"
#include "compare/studies/passkey/passkey.h"
#include "compare/studies/encoder/encoder.h"
#include "compare/stats.h"

namespace posgrad::train {

// One evaluation at one length: next-token loss, perplexity, accuracy over `windows` windows.
struct LengthResult {
  int64_t context = 0, windows = 0;
  double loss = 0, perplexity = 0, accuracy = 0;
};

// The synthetic task scored at one length.
struct TaskScore {
  int64_t length = 0, examples = 0;
  double exact_match = 0, token_f1 = 0, token_accuracy = 0;
};

// One fine-tuned row of the position-interpolation protocol (compare/studies/pi/pi_protocol.h): the unit's
// trained RoPE model with `scaling` at factor s = multiplier, fine-tuned at multiplier x block_size.
struct PiResult {
  std::string scaling;     // none | linear | ntk | yarn
  int64_t multiplier = 0;  // M
  int64_t iters = 0, batch = 0;
  double first_loss = 0, final_loss = 0;  // training loss of the first and the last fine-tuning step
  double seconds = 0;                     // wall time of fine-tuning and evaluation, informational
  std::vector<std::optional<LengthResult>> lengths;  // index-aligned with eval_multipliers
};

struct UnitResult {
  std::string method;
  uint64_t seed = 0;
  int64_t parameters = 0, position_parameters = 0;
  std::vector<std::pair<int64_t, double>> train_curve, val_curve;  // (step, loss)
  // Index-aligned with the configuration's eval_multipliers; nullopt: the method cannot run there.
  std::vector<std::optional<LengthResult>> lengths;
  // Evaluation-time variants of this trained model ("rope+yarn", "rope@bf16", ...), same alignment.
  std::map<std::string, std::vector<std::optional<LengthResult>>> variants;
  std::vector<double> per_position_loss;                  // inside a per_position_multiplier window
  std::vector<std::vector<double>> attention_by_distance;  // (layer, distance)
  // Index-aligned with task_multipliers.
  std::vector<std::optional<TaskScore>> task;
  double task_final_loss = 0;
  // The length-generalisation suite: one entry per (task, plain | randomized) (compare/studies/suite/length_suite.h).
  std::vector<SuiteTaskResult> suite;
  // The position-interpolation protocol's rows (rope units with pi_iters > 0), in run order.
  std::vector<PiResult> pi;
  // Passkey retrieval of the fine-tuned model, by row (method, and "rope+<scaling>"; compare/studies/passkey/passkey.h).
  std::map<std::string, PasskeyResult> passkey;
  double train_seconds = 0;  // wall time, informational (cost comes from the benchmark)
  bool resumed = false;
};

// Where and how the numbers were made.
struct Provenance {
  std::string git_commit, cpu, simd, compiler, libraries, cuda, config_hash;
  int64_t threads = 0;
};
Provenance collect_provenance(const CompareConfig& cfg);

// The cost benchmark (compare/studies/cost/cost.h): seconds per round of one measurement.
struct CostRow {
  std::string method, what;  // what: "attention" (one layer, forward + backward) or "step" (a training step)
  int64_t T = 0, batch = 0;
  std::vector<double> seconds;  // one per round
  int64_t peak_bytes = 0;       // posgrad's allocator peak during the measurement
  int64_t parameters = 0;
  double median() const;
  double spread() const;  // (max - min) / median
};
struct CostResult {
  int64_t rounds = 0, threads = 0;
  std::vector<int64_t> lengths;
  std::vector<CostRow> rows;
  double noise() const;  // the median spread over all rows: differences below it are inside the noise
  const CostRow* find(const std::string& method, const std::string& what, int64_t T) const;
};

struct ComparisonResult {
  CompareConfig config;
  Provenance provenance;
  std::vector<UnitResult> units;
  CostResult cost;
  // The encoder track (--track encoder|both); absent for a decoder-only comparison. Serialised under
  // "encoder" (compare/studies/encoder/encoder.h's to_json).
  std::optional<EncoderTrackResult> encoder;
};

nlohmann::json to_json(const UnitResult& u);
UnitResult unit_from_json(const nlohmann::json& j, const std::string& source);  // IoError naming source and key
nlohmann::json to_json(const ComparisonResult& r);
ComparisonResult comparison_from_json(const nlohmann::json& j, const std::string& source);

// ---- checks of results read back ---------------------------------------------------------------------
// The readers above check the schema (types and keys); these check the values and their agreement
// with the configuration. Each failure is an IoError "<source>: <JSON path> = <value>: <rule><advice>".
// Rules, per unit (check_unit; path: the unit's JSON path, "" for a unit's own result.json):
//   method among cfg.methods, seed among cfg.seeds; parameters >= 0, position_parameters in [0, parameters];
//   curves: steps increasing in [0, max_iters], losses finite >= 0;
//   lengths (and each variant "<method>+x" / "<method>@x", each PI row's): one per eval multiplier, null
//     only where the method cannot run and never at 1x, context = multiplier x block_size, windows >= 1,
//     loss finite >= 0, perplexity finite >= 1 and loss = ln(perplexity) within 1e-6 relative (both are
//     written together from one measurement, so a hand edit of one is caught), accuracy in [0, 1];
//   per-position losses and attention weights finite >= 0; task: one per task multiplier, length =
//     multiplier x task_length, examples >= 0, exact match / F1 / accuracy in [0, 1], loss finite >= 0;
//   suite rows present iff configured (suite_iters > 0), in run order, buckets as suite_buckets(cfg);
//   PI rows iff rope and pi_iters > 0, pi_multipliers x pi_scalings in order; passkey rows iff
//     passkey.iters > 0, with the method's own row, cells = passkey multipliers x depths in order;
//   seconds finite >= 0.
void check_unit(const UnitResult& u, const CompareConfig& cfg, const std::string& source, const std::string& path,
                const std::string& advice);
// The whole result: every unit (check_unit), exactly one unit per configured (method, seed) for a track
// with decoders and none for --track encoder (a missing, unknown or duplicate unit is named), the cost
// rows' methods configured and values >= 0, and the encoder track present iff config.track is not
// "decoder", its settings those of config (--encoder-*), its methods and seeds the config's, one unit per
// (method, seed), each passing check_encoder_unit (compare/studies/encoder/encoder.h).
void check_comparison(const ComparisonResult& r, const std::string& source);
void check_encoder_track(const EncoderTrackResult& e, const CompareConfig& cfg, const std::string& source,
                         const std::string& advice);
// What `posgrad report` reads: results.json's text parsed (size and depth limited), comparison_from_json,
// check_comparison. IoError naming `source` on any failure.
ComparisonResult read_comparison(const std::string& text, const std::string& source);

// ---- metrics -----------------------------------------------------------------------------------------

enum class Quantity { Parameters, PositionParameters, Loss, Perplexity, Accuracy, PerplexityRatio, TaskExactMatch, TaskTokenF1 };

struct Metric {
  Quantity q = Quantity::Perplexity;
  int64_t multiplier = 1;  // evaluation (or task) length as a multiple of the training length
  std::string name() const;           // "val_perplexity", "perplexity_x4", "ppl_ratio_x16", "task_token_f1_x2"
  bool lower_is_better() const;
  int precision() const;              // digits shown
};

// Row names: every method, then each evaluation-time variant present ("rope+yarn").
std::vector<std::string> rows(const ComparisonResult& r);
// The metric's value for each seed of `row` that has one (n/a values are left out).
std::vector<double> values(const ComparisonResult& r, const std::string& row, const Metric& m);
Summary summary(const ComparisonResult& r, const std::string& row, const Metric& m);
// The metrics of results.csv, in order.
std::vector<Metric> csv_metrics(const CompareConfig& c);

}  // namespace posgrad::train
