// lm.h — the language-model evaluation of each trained unit: next-token loss, perplexity and
// accuracy on the validation split at each evaluation length m · block_size (m in
// --eval-multipliers: length extrapolation) under two protocols — non-overlapping windows, and
// sliding windows with stride --eval-stride-fraction × the length (Press et al. 2022, App. B:
// every target after the first window sees a long context) over the same targets — the
// per-position loss inside a --per-position-multiplier window, and evaluation-time variants of each
// model whose encoding takes a RoPE scaling (PosEncEntry::rope_scalings): linear and YaRN scaling
// with s = L / L_train (Chen et al. 2023; Peng et al. 2023), dynamic NTK (s = 1: the base grows with
// the current length), and the rotary angle arithmetic rounded to bf16 / fp16 (claim k). Its rows:
// every method, then "<method>+linear", "+dynamic", "+yarn", "@bf16", "@fp16" (evaluations of that
// method's models, with non-overlapping windows only: sliding windows would double the cost of the
// rope units' 27 variant evaluations). Each length keeps its per-window losses, from which the
// report's bootstrap intervals over seeds and windows are computed (length_bootstrap).
//
// Checks of a result read back (StudyEntry::check_unit): one length per eval multiplier, null only
// where the method cannot run and never at 1x, context = multiplier x block_size, windows >= 1, loss
// finite >= 0, perplexity finite >= 1 and loss = ln(perplexity) within 1e-6 relative (written
// together from one measurement, so a hand edit of one is caught), accuracy in [0, 1]; per-window
// losses, where stored (a result from before they were has none), one finite >= 0 loss and one count
// per window, the counts summing to the scored targets (non-overlapping: each = context), and
// sum(loss) / sum(count) = loss within 1e-9 relative; the sliding lengths, where measured (none with
// --eval-stride-fraction 0; a result from before the protocol existed has none: not measured), the
// same rules, null exactly where the non-overlapping length is, over the same targets, with
// sliding_windows(context, stride, targets) windows of which the first scores context targets and
// the others at most the stride; the derived rows exactly those the configuration builds, each
// checked the same way; the per-position loss one finite >= 0 value per position of its window where
// that length was evaluated.
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

// The study's settings (CompareConfig::of<LmSettings>(); its rows of the option table are in lm.cpp).
struct LmSettings {
  static constexpr const char* kStudy = "lm";
  // The sliding protocol's stride as a fraction f of each evaluation length L: stride
  // max(1, floor(f · L)) tokens (lengths vary from 1x to 32x, so one number of tokens would not fit
  // them all). 0: no sliding-window evaluation; 1: the non-overlapping windows again. The default,
  // half the length, gives every target after the first window at least L / 2 tokens of context at
  // about twice the non-overlapping evaluation's cost (docs/presets.md).
  double eval_stride_fraction = 0.5;
};
// The sliding protocol's stride at evaluation length `context` (tokens): max(1, floor(f · context)),
// 0 when --eval-stride-fraction is 0 (off).
int64_t eval_stride(const CompareConfig& cfg, int64_t context);

// One evaluation at one length: next-token loss, perplexity, accuracy over `windows` windows.
struct LengthResult {
  int64_t context = 0, windows = 0;
  double loss = 0, perplexity = 0, accuracy = 0;
  // Per window (train/evaluate.h, EvalResult): the summed loss of its scored targets (nats) and how
  // many it scored. Empty in a result made before they were stored (no bootstrap interval then).
  std::vector<double> window_loss = {};
  std::vector<int64_t> window_tokens = {};
};
// Index-aligned with the configuration's eval_multipliers; nullopt: the method cannot run there.
using Lengths = std::vector<std::optional<LengthResult>>;

// The study's part of a unit (results.json keys "lengths", "sliding", "variants", "per_position_loss").
struct LmResult {
  static constexpr const char* kStudy = "lm";
  Lengths lengths;  // non-overlapping windows
  // The same lengths and targets scored with sliding windows; empty: not measured (--eval-stride-fraction
  // 0, or a result from before the protocol existed; results.json then has no key "sliding").
  Lengths sliding;
  std::map<std::string, Lengths> variants;  // "rope+yarn", "rope@bf16", ...: same alignment, non-overlapping
  std::vector<double> per_position_loss;    // inside a per_position_multiplier window (non-overlapping)
};

// The two evaluation protocols (train/evaluate.h: evaluate_tokens, evaluate_sliding).
enum class Protocol { NonOverlapping, Sliding };

// What the study measures; a Metric of study "lm" (lm_metric). The sliding quantities are the
// perplexity and its ratio to 1x under the sliding protocol (both of the same protocol).
enum class Quantity {
  Parameters,
  PositionParameters,
  Loss,
  Perplexity,
  Accuracy,
  PerplexityRatio,
  SlidingPerplexity,
  SlidingPerplexityRatio
};
// "val_perplexity" (multiplier 1), "perplexity_x4", "ppl_ratio_x16", "parameters", ...; under
// Protocol::Sliding the perplexity and its ratio: "perplexity_sliding_x1", "ppl_ratio_sliding_x4"
// (std::invalid_argument for the other quantities, which have no sliding form).
Metric lm_metric(Quantity q, int64_t multiplier = 1, Protocol protocol = Protocol::NonOverlapping);

// The report's interval over seeds and evaluation windows (compare/stats.h, perplexity_bootstrap)
// of `row`'s perplexity at multiplier k under `protocol`: its seeds in configured order, each with
// its windows at that length; kBootstrapResamples resamples drawn from kBootstrapSeed, the same for
// every row and length, so the report is bit-identical. Invalid (resamples 0) when no seed of the
// row stored its windows there.
inline constexpr int64_t kBootstrapResamples = 2000;
inline constexpr uint64_t kBootstrapSeed = 20220427;  // fixed: the report states it
BootstrapInterval length_bootstrap(const ComparisonResult& r, const std::string& row, int64_t k, Protocol protocol);

// One pass at each evaluation length m · block_size, m in cfg.eval_multipliers (block_size: the
// model's configured training context): loss, perplexity, accuracy over up to
// max(1, cfg.eval_tokens / context) non-overlapping windows from the start of `val` (the same text
// for every row), and the per-position loss of the cfg.per_position_multiplier window into
// *per_position when given. Index-aligned with cfg.eval_multipliers; nullopt where the context
// exceeds the encoding's max_length() (a learned table) or the split. The model should be in eval mode.
Lengths evaluate_lengths(nn::GPT& model, const data::TokenSpan& val, const CompareConfig& cfg, Device dev,
                         std::vector<double>* per_position);
// The sliding protocol at each length of `plain` (evaluate_lengths' result): the same targets,
// windows x context of them from the start of `val`, scored by train/evaluate.h's evaluate_sliding
// with stride eval_stride(cfg, context). Same alignment, nullopt where plain is; empty when
// --eval-stride-fraction is 0. The model should be in eval mode.
Lengths evaluate_sliding_lengths(nn::GPT& model, const data::TokenSpan& val, const CompareConfig& cfg, Device dev,
                                 const Lengths& plain);

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
// The checks of a row of non-overlapping lengths read back (the rules above); p: its JSON path.
void check_lengths(const ValueCheck& c, const Lengths& v, const CompareConfig& cfg, const std::string& p);
// The checks of the sliding lengths against their non-overlapping row (the rules above).
void check_sliding(const ValueCheck& c, const Lengths& sliding, const Lengths& plain, const CompareConfig& cfg,
                   const std::string& p);

StudyEntry lm_study();

}  // namespace posgrad::train
