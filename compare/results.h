// results.h — the comparison's results as types: one UnitResult per (method, seed), produced once
// by the experiment, and one ComparisonResult holding the configuration, the provenance, every unit
// and the studies' experiment-level results. Each study's part is its own typed struct (compare/
// parts.h), written and read by its entry (compare/study.h). results.json is their one
// serialisation (to_json / from_json here, each study's keys by its entry); `posgrad report` reads
// it back with the same schema, and the CSV, plots, claims and markdown are all computed from these
// structs — never from JSON paths.
//
// A metric is typed (its study, quantity and evaluation multiplier); values() gathers it over the
// seeds of one row (`rope`, or a row of a study such as "rope+yarn" or "rope@bf16").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare/config.h"
#include "compare/parts.h"
#include "compare/stats.h"

namespace posgrad::train {

// One (method, seed) unit: the language model the runner trained, and each study's typed result
// (compare/parts.h; the study's own header names the type, e.g. compare/studies/lm/lm.h).
struct UnitResult {
  std::string method;
  uint64_t seed = 0;
  int64_t parameters = 0, position_parameters = 0;
  std::vector<std::pair<int64_t, double>> train_curve, val_curve;  // (step, loss)
  Parts parts;               // per study (compare/study.h), filled in registry order
  double train_seconds = 0;  // wall time, informational (cost comes from the benchmark)
  bool resumed = false;
  // How it trained: OpenMP threads and units at once (--jobs) of the invocation that trained it, which
  // may not be the last one (0: not recorded, a result written before these keys).
  int64_t threads = 0, jobs = 0;
};

// Where and how the numbers were made.
struct Provenance {
  std::string git_commit, cpu, simd, compiler, libraries, cuda, config_hash;
  int64_t threads = 0;  // OpenMP threads training each unit
  int64_t jobs = 1;     // units trained at once by each process (--jobs; 1 in results written before it)
};
Provenance collect_provenance(const CompareConfig& cfg);

struct ComparisonResult {
  CompareConfig config;
  Provenance provenance;
  std::vector<UnitResult> units;
  Parts parts;  // the studies' experiment-level results (the cost benchmark, the encoder track)
};

// The unit of `method` with the first configured seed that has one (the plots of one seed), or nullptr.
const UnitResult* first_unit(const ComparisonResult& r, const std::string& method);

nlohmann::json to_json(const UnitResult& u);
UnitResult unit_from_json(const nlohmann::json& j, const std::string& source);  // IoError naming source and key
nlohmann::json to_json(const ComparisonResult& r);
ComparisonResult comparison_from_json(const nlohmann::json& j, const std::string& source);

// ---- checks of results read back ---------------------------------------------------------------------
// The readers above check the schema (types and keys); these check the values and their agreement
// with the configuration. Each failure is an IoError "<source>: <JSON path> = <value>: <rule><advice>".
// Per unit (check_unit; path: the unit's JSON path, "" for a unit's own result.json): method among
// cfg.methods, seed among cfg.seeds; parameters >= 0, position_parameters in [0, parameters]; curves:
// steps increasing in [0, max_iters], losses finite >= 0, a training curve when trained, validation
// points past --eval-interval; seconds finite >= 0; then each study's rules (StudyEntry::check_unit,
// stated in the study's header).
void check_unit(const UnitResult& u, const CompareConfig& cfg, const std::string& source, const std::string& path,
                const std::string& advice);
// The whole result: the configuration one posgrad compare accepts (memory estimate aside), every unit
// (check_unit), exactly one unit per configured (method, seed) for a track with decoders and none for
// --track encoder (a missing, unknown or duplicate unit is named), then each study's experiment-level
// rules (StudyEntry::check: the cost benchmark, the encoder track).
void check_comparison(const ComparisonResult& r, const std::string& source);
// What `posgrad report` reads: results.json's text parsed (size and depth limited), comparison_from_json,
// check_comparison. IoError naming `source` on any failure.
ComparisonResult read_comparison(const std::string& text, const std::string& source);

// ---- metrics -----------------------------------------------------------------------------------------

// One number per unit and row that a study measures (its StudyEntry::value reads it), e.g. the
// language-model evaluation's perplexity at 4x the training length, named "perplexity_x4" in
// results.csv. The study that owns it builds it (lm_metric in compare/studies/lm/lm.h, ...).
struct Metric {
  std::string study;       // the study whose value() computes it
  int quantity = 0;        // the study's own enumeration of what it measures
  int64_t multiplier = 1;  // evaluation (or task) length as a multiple of the training length
  std::string label;       // results.csv name: "val_perplexity", "perplexity_x4", "task_token_f1_x2"
  bool lower_better = false;
  int digits = 3;  // digits shown
  const std::string& name() const { return label; }
  bool lower_is_better() const { return lower_better; }
  int precision() const { return digits; }
};

// Row names: every method, then each study's further rows present (StudyEntry::rows, "rope+yarn").
std::vector<std::string> rows(const ComparisonResult& r);
// The method a row belongs to: "rope+yarn" and "rope@bf16" are measurements of the rope units.
std::string method_of(const std::string& row);
// The metric's value for each seed of `row` that has one (n/a values are left out), in seed order.
std::vector<double> values(const ComparisonResult& r, const std::string& row, const Metric& m);
Summary summary(const ComparisonResult& r, const std::string& row, const Metric& m);
// The same values keyed by seed, for tests that pair two rows measured on the same seeds (a scaled
// row and its plain model, a fine-tuned row and its base).
std::map<uint64_t, double> values_by_seed(const ComparisonResult& r, const std::string& row, const Metric& m);
// The metrics of results.csv, in order: each study's (StudyEntry::metrics), in registry order.
std::vector<Metric> csv_metrics(const CompareConfig& c);

}  // namespace posgrad::train
