// lm.h — the language-model evaluation of each trained unit: next-token loss, perplexity and
// accuracy on the validation split at each evaluation length m · block_size (m in
// --eval-multipliers: length extrapolation), the per-position loss inside a
// --per-position-multiplier window, and evaluation-time variants of each model whose encoding takes
// a RoPE scaling (PosEncEntry::rope_scalings): linear and YaRN scaling with s = L / L_train (Chen et
// al. 2023; Peng et al. 2023), dynamic NTK (s = 1: the base grows with the current length), and the
// rotary angle arithmetic rounded to bf16 / fp16 (claim k). Its rows: every method, then
// "<method>+linear", "+dynamic", "+yarn", "@bf16", "@fp16" (evaluations of that method's models).
//
// Checks of a result read back (StudyEntry::check_unit): one length per eval multiplier, null only
// where the method cannot run and never at 1x, context = multiplier x block_size, windows >= 1, loss
// finite >= 0, perplexity finite >= 1 and loss = ln(perplexity) within 1e-6 relative (written
// together from one measurement, so a hand edit of one is caught), accuracy in [0, 1]; the derived
// rows exactly those the configuration builds, each checked the same way; the per-position loss one
// finite >= 0 value per position of its window where that length was evaluated.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare/config.h"
#include "compare/results.h"
#include "compare/study.h"
#include "compare/value_check.h"
#include "data/dataset.h"
#include "nn/gpt.h"

namespace posgrad::train {

// One evaluation at one length: next-token loss, perplexity, accuracy over `windows` windows.
struct LengthResult {
  int64_t context = 0, windows = 0;
  double loss = 0, perplexity = 0, accuracy = 0;
};
// Index-aligned with the configuration's eval_multipliers; nullopt: the method cannot run there.
using Lengths = std::vector<std::optional<LengthResult>>;

// The study's part of a unit (results.json keys "lengths", "variants", "per_position_loss").
struct LmResult {
  static constexpr const char* kStudy = "lm";
  Lengths lengths;
  std::map<std::string, Lengths> variants;  // "rope+yarn", "rope@bf16", ...: same alignment
  std::vector<double> per_position_loss;    // inside a per_position_multiplier window
};

// What the study measures; a Metric of study "lm" (lm_metric).
enum class Quantity { Parameters, PositionParameters, Loss, Perplexity, Accuracy, PerplexityRatio };
// "val_perplexity" (multiplier 1), "perplexity_x4", "ppl_ratio_x16", "parameters", ...
Metric lm_metric(Quantity q, int64_t multiplier = 1);

// One pass at each evaluation length m · block_size, m in cfg.eval_multipliers (block_size: the
// model's configured training context): loss, perplexity, accuracy over up to
// max(1, cfg.eval_tokens / context) non-overlapping windows from the start of `val` (the same text
// for every row), and the per-position loss of the cfg.per_position_multiplier window into
// *per_position when given. Index-aligned with cfg.eval_multipliers; nullopt where the context
// exceeds the encoding's max_length() (a learned table) or the split. The model should be in eval mode.
Lengths evaluate_lengths(nn::GPT& model, const data::TokenSpan& val, const CompareConfig& cfg, Device dev,
                         std::vector<double>* per_position);

// The derived rows of `method` (evaluation-time variants of its trained models): for an encoding
// that takes a RoPE scaling, "<method>+linear", "+dynamic", "+yarn", "@bf16", "@fp16"; else none.
std::vector<std::string> variant_rows(const std::string& method);
// The derived rows of the configuration's methods that it cannot build, each with the reason (the
// variant's PosEncConfig::validate message, e.g. dynamic NTK with 2 rotary channels). A pure function
// of cfg, so known before training: those rows are not measured (absent from results and tables)
// and the report states why.
std::map<std::string, std::string> skipped_variants(const CompareConfig& cfg);
// The position-encoding configuration of this experiment's `method` models (its sizes and the
// --rope-* and other encoding options), for checking a scaled copy's options before anything is trained.
nn::PosEncConfig method_pos_config(const CompareConfig& cfg, const std::string& method);
// Whether the registered encoding `method` takes the RoPE scalings (linear, dynamic, yarn, ntk): its
// PosEncEntry lists the option rope_scaling. Throws UsageError for an unregistered name.
bool takes_rope_scaling(const std::string& method);
// The methods of cfg whose encoding takes the RoPE scalings (linear, dynamic, yarn, ntk).
std::vector<std::string> rope_scaling_methods(const CompareConfig& cfg);

// results.json form of a row of lengths; lengths_from_json throws json::exception on a malformed value.
nlohmann::json lengths_to_json(const Lengths& v);
Lengths lengths_from_json(const nlohmann::json& j);
// The checks of a row of lengths read back (the rules above); p: its JSON path.
void check_lengths(const ValueCheck& c, const Lengths& v, const CompareConfig& cfg, const std::string& p);

StudyEntry lm_study();

}  // namespace posgrad::train
