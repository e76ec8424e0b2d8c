// study.h — a study of the comparison, the twin of a position encoding's PosEncEntry
// (nn/posenc/position_encoding.h): one entry holds everything the comparison needs to know about
// one measurement — its name and source, the checks of its settings and of the corpus, which
// methods it applies to, the work it does per (method, seed) unit or once per experiment, its typed
// result's JSON and checks, its rows of results.csv, its files (CSV, plots), its report section
// and its claims. The registry (compare/studies/registry.cpp) lists the studies, one line each, in
// the order they run and appear in the report; nothing registers itself.
//
// The runner (compare/compare.cpp), results.json (compare/results.cpp), the report
// (compare/report.cpp) and the claims table go through these entries and name no study. A study
// lives in compare/studies/<name>/: its result type R (Parts, compare/parts.h), its code, and its
// entry `StudyEntry <name>_study()`.
//
// Every member but name and summary may be empty: the study has nothing of that kind.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare/claims.h"
#include "compare/config.h"
#include "compare/results.h"
#include "compare/value_check.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "nn/gpt.h"
#include "train/finetune.h"
#include "train/trainer.h"

namespace posgrad::train {

// What a study's per-unit work sees: one trained language model of the experiment, in eval mode,
// with the data it was trained on. Earlier studies' results are in `unit.parts`; models they
// derived (a fine-tuned copy, by row name) are in `models`, for later studies to score too.
struct UnitContext {
  const CompareConfig& cfg;
  const std::string& method;
  uint64_t seed;
  Device dev;
  nn::GPT& model;
  const data::TokenDataset& data;
  const data::Tokenizer& tokenizer;
  UnitResult& unit;
  std::map<std::string, std::shared_ptr<nn::GPT>> models;  // row name -> derived model (eval mode)
};

// The short training loop of a study's own small model (the synthetic task, the length suite, passkey
// fine-tuning, flip-flop): spec.iterations steps at lr after a linear warm-up of a tenth of them
// (tenth_warmup), a cosine to lr / 10, AdamW betas (0.9, 0.98) without weight decay, the gradient
// norm clipped at 1 (train/finetune.h); an interruption names `run_dir` (the experiment's directory,
// or "" where the caller has none) and says what a re-run does. `label` names the run in messages
// ("flip-flop (rope seed 1)").
inline FinetuneSpec study_finetune_spec(std::string label, int64_t iterations, double lr, std::string run_dir) {
  FinetuneSpec spec;
  spec.label = std::move(label);
  spec.iterations = iterations;
  spec.lr = lr;
  spec.min_lr = lr / 10;
  spec.warmup = tenth_warmup(iterations);
  spec.schedule = FinetuneSchedule::cosine;
  spec.beta1 = 0.9;
  spec.beta2 = 0.98;
  spec.weight_decay = 0.0;
  spec.grad_clip = 1.0;
  spec.run_dir = std::move(run_dir);
  spec.on_interrupt =
      "on resume the unit keeps its trained model and the studies it finished before this one "
      "(<unit>/studies/), and runs this study and the ones after it again";
  return spec;
}

// The corpus as the decoder units read it (the experiment's --corpus and --tokenizer at --block-size).
struct CorpusData {
  const data::TokenDataset& dataset;
  const data::Tokenizer& tokenizer;
};

// Where a report section is written: `dir` is the staging folder of the report (compare/report.h),
// `plots` its plots folder. A section's files are named relative to them.
struct ReportDir {
  std::string dir, plots;
};

struct StudyEntry {
  std::string name;     // the results.json key of its experiment-level result, and its folder
  std::string summary;  // one line: what it measures, and the source (paper section)

  // ---- settings -------------------------------------------------------------------------------
  // Makes its settings struct, with its defaults, in CompareConfig::settings (the constructor).
  std::function<void(Parts&)> init_settings;
  // Its rows of the comparison's option table (compare/options.h: --help, JSON, validation, the
  // report's settings), under its --help group, bound to its members of CompareConfig.
  std::function<void(opt::Table<CompareConfig>&)> options;
  // Its values in the named preset (compare_preset: quick | full | tiny; the measurements behind
  // each budget: docs/presets.md).
  std::function<void(CompareConfig&, const std::string& preset)> preset;
  // Relations between options that no single range expresses; UsageError naming the option.
  // CompareConfig::validate calls it (so do --dry-run and posgrad report on a file's config).
  std::function<void(const CompareConfig&)> validate;
  // Whether the study runs at all in this configuration (its steps > 0, its track chosen).
  // Empty: always.
  std::function<bool(const CompareConfig&)> enabled;
  // Whether it applies to the units of `method` (e.g. only encodings with a rotary scaling).
  // Empty: every method.
  std::function<bool(const CompareConfig&, const std::string& method)> applies;
  // The checks that need the corpus, before anything is trained (check_compare_data): ValueError or
  // UsageError naming the option. `decoder` is null when no decoder unit is trained (--track encoder).
  std::function<void(const CompareConfig&, const CorpusData* decoder)> check_data;

  // ---- work -----------------------------------------------------------------------------------
  // Rows of its own in the pretraining batches of a decoder unit (a data mix: e.g. passkey-format
  // sequences among the corpus windows), as the Trainer's batch mix for the unit of `method` and
  // `seed` (BatchMix, train/trainer.h: a function of the step and micro-batch alone, so that a
  // resumed unit trains on the same batches). Called once per unit that trains, after the corpus is
  // read (`decoder`: the unit's own data, which the mix may keep referring to while the unit trains)
  // and before the first step, where the study is enabled and applies to the method; an empty
  // function: the study adds nothing. The runner applies the studies' mixes in registry order (a
  // later one may overwrite an earlier one's rows); where none returns a mix, the batches are exactly
  // the sampler's. The settings that shape a mix change results, so they are refused on resume like
  // any option not marked result-neutral (check_same_experiment).
  std::function<BatchMix(const CompareConfig&, const std::string& method, uint64_t seed, const CorpusData& decoder)>
      pretrain_mix;
  // Per (method, seed) decoder unit, after the language model is trained, in registry order.
  // Fills its part of ctx.unit.parts. May throw Interrupted (train/interrupt.h) or NonFiniteLoss.
  std::function<void(UnitContext& ctx)> run_unit;
  // A study with units of its own, which it trains itself (the encoder track): its (method, seed)
  // units in its order, the work of one (its result as JSON: the runner distributes these units over
  // the job's processes like the decoder units, compare/compare_dist.h), and, on rank 0, its
  // experiment-level result from every unit's JSON in that order.
  std::function<std::vector<std::pair<std::string, uint64_t>>(const CompareConfig&)> own_units;
  std::function<nlohmann::json(const CompareConfig&, const std::string& method, uint64_t seed)> run_own_unit;
  std::function<void(const CompareConfig&, const std::vector<nlohmann::json>& units, ComparisonResult&)> collect;
  // Checks the finished units of its own that a run in cfg.out_dir would keep, before any unit trains
  // (and under --dry-run): IoError or UsageError naming the file. Empty: they are checked when their
  // turn comes.
  std::function<void(const CompareConfig&)> check_kept;
  // Which options of the experiment's own rows (model, training, corpus, encodings; not another
  // study's) its own units' results depend on, so that a re-run in a directory holding its finished
  // units refuses a change of them (check_same_experiment in compare/compare.cpp; its own options
  // are always checked then). Empty: none.
  std::function<bool(const std::string& option)> own_units_read;
  // true: run_unit puts models in UnitContext::models that later studies use (so it runs again on a
  // resume whenever a later study does; compare/compare.cpp).
  bool derives_models = false;
  // Once per experiment, on rank 0, after every unit (the cost benchmark).
  std::function<void(const CompareConfig&, ComparisonResult&)> run_experiment;

  // ---- results --------------------------------------------------------------------------------
  // The unit's result.json keys this study owns, written from and read into its part of
  // unit.parts (read: json::exception on a malformed value; a missing key is a result made before
  // the study existed, where the study allows it).
  std::function<void(const UnitResult&, nlohmann::json& unit)> unit_to_json;
  std::function<void(const nlohmann::json& unit, UnitResult&)> unit_from_json;
  // The same for its experiment-level result (results.json key `name`).
  std::function<void(const ComparisonResult&, nlohmann::json& results)> to_json;
  std::function<void(const nlohmann::json& results, ComparisonResult&, const std::string& source)> from_json;
  // The checks of a result read back (compare/results.h, check_unit / check_comparison): values in
  // range and consistent with the configuration. Each failure is c.fail(<JSON path>, value, rule).
  std::function<void(const UnitResult&, const CompareConfig&, const ValueCheck& c, const std::string& path)> check_unit;
  std::function<void(const ComparisonResult&, const ValueCheck& c, const std::string& source,
                     const std::string& advice)>
      check;

  // ---- report ---------------------------------------------------------------------------------
  // Its rows (row names beyond the methods, e.g. "rope+yarn") and its metrics in results.csv.
  std::function<std::vector<std::string>(const ComparisonResult&)> rows;
  std::function<std::vector<Metric>(const CompareConfig&)> metrics;
  // The value of one of its metrics for one unit and row (row: a method or one of its rows).
  std::function<std::optional<double>(const CompareConfig&, const UnitResult&, const std::string& row, const Metric&)>
      value;
  // Lines of the report's Settings list ("- ...\n") that describe this study's configuration.
  std::function<std::string(const ComparisonResult&)> settings_markdown;
  // Its files in the report folder (CSV, plots); returns the names of the plots drawn for the
  // report's Plots section (others are referred to from the study's own section).
  std::function<std::vector<std::string>(const ComparisonResult&, const ReportDir&)> write_files;
  // The report's opening section, before the claims (only the article's table has one).
  std::function<std::string(const ComparisonResult&)> lead_markdown;
  // Its section of report.md, after the claims; `files` says which of its files exist.
  std::function<std::string(const ComparisonResult&, const ReportDir&)> markdown;
  // Its rows of the claims table.
  std::function<std::vector<ClaimVerdict>(const ComparisonResult&)> claims;
  // The whole report.md of an experiment that trains no decoder units (--track encoder), from the
  // one study that runs then.
  std::function<std::string(const ComparisonResult&)> report_alone;
  // Plots the Plots section lists (write_files' return) that a complete report has; fewer drawn
  // means gnuplot failed (the report says so).
  size_t gallery_plots = 0;
};

// Every study, in run and report order (compare/studies/registry.cpp).
const std::vector<StudyEntry>& studies();
// The entry of a registered study (std::logic_error otherwise: a programming error).
const StudyEntry& study_entry(const std::string& name);

}  // namespace posgrad::train
