// pi_protocol.h — the Position Interpolation protocol for RoPE (Chen et al. 2023, "Extending
// Context Window of Large Language Models via Positional Interpolation", §2.3, §3): a trained RoPE
// model is extended to M times its training length L by scaling its rotary frequencies with factor
// s = M and *fine-tuning briefly at M·L*, then evaluated at every evaluation length. The comparison's
// untuned rows (rope+linear, rope+yarn, rope+dynamic: scaled at evaluation time only) test something
// PI never claimed; these rows test what it did — interpolated-then-fine-tuned beats fine-tuned
// without interpolation — beside the alternatives proposed since: static NTK-aware scaling
// (bloc97 2023; YaRN §3.1) and YaRN (Peng et al. 2023).
//
// Per (M, scaling): a copy of the model with rope_scaling = scaling, rope_scaling_factor = M (none:
// plain RoPE, factor 1). The model's block_size stays L, so YaRN's original length L0 stays the
// training length and the evaluation lengths stay m·L; only the training windows grow to M·L.
// Fine-tuning: AdamW (the base run's betas and weight decay, its gradient clipping and grad_accum)
// at pi_lr after a linear warm-up of max(1, pi_iters / 10) steps, then constant (PI §3.1: lr 2e-5,
// 20 warm-up steps, constant); max(1, batch_size / M) windows of M·L tokens per micro-batch, so a
// step sees as many tokens as a training step whenever M divides batch_size. The windows come from
// the training split, drawn by a sampler seeded from (unit seed, M): every scaling at one M sees the
// same batches (a paired comparison), and the same seed gives bit-identical rows.
//
// DroPE (Gelberg & Cetin, ICLR 2026, "Extending the Context of Pretrained LLMs by Dropping Their
// Positional Embeddings", §4): with --pi-drope, one more row per unit: the trained model with its
// rotary embedding removed (the same weights under the NoPE encoding, `none`; every other setting of
// the method kept, its sinks among them) and recalibrated at the training length L — not at M·L —
// for the same pi_iters steps of batch_size windows of L tokens (as many tokens as a training step),
// at the same rate and warm-up, its batches from the sampler of M = 1. Evaluated zero-shot at every
// length. The paper's recalibration budget is under 1% of pretraining; here it is pi_iters over the
// training run's steps, stated in the report. Its temperature or normalisation variants are not
// implemented.
//
// Row names: "rope ft<M>x" (plain RoPE fine-tuned at M·L), "rope+<scaling> ft<M>x"
// ("rope+linear ft2x"): "ft" for fine-tuned, <M>x the fine-tuning length over the training length;
// "rope+drope ft1x" (RoPE dropped, recalibrated at 1x).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compare/config.h"
#include "compare/results.h"
#include "compare/studies/lm/lm.h"
#include "compare/study.h"
#include "data/dataset.h"
#include "nn/gpt.h"

namespace posgrad::train {

// Its settings (CompareConfig::of<PiSettings>(); options --pi-*): each trained `rope` model copied
// with each scaling at factor s = M and fine-tuned at M x block_size for `iters` steps (0: off).
struct PiSettings {
  static constexpr const char* kStudy = "pi";
  int64_t iters = 40;
  double lr = 1e-4;  // the base run's final (min_lr): a small constant rate, as PI's 2e-5 for LLaMA
  std::vector<int64_t> multipliers = {2, 4};
  std::vector<std::string> scalings = {"none", "linear", "ntk", "yarn"};
  bool drope = true;  // the DroPE row (above)
};

// One fine-tuned row: the unit's trained RoPE model with `scaling` at factor s = multiplier,
// fine-tuned at multiplier x block_size.
struct PiResult {
  std::string scaling;     // none | linear | ntk | yarn | drope (multiplier 1: recalibrated at L)
  int64_t multiplier = 0;  // M
  int64_t iters = 0, batch = 0;
  double first_loss = 0, final_loss = 0;  // training loss of the first and the last fine-tuning step
  double seconds = 0;                     // wall time of fine-tuning and evaluation, informational
  Lengths lengths;                        // index-aligned with eval_multipliers
};
// The study's part of a unit (results.json "pi"), in run order: --pi-multipliers x --pi-scalings, then
// the DroPE row with --pi-drope.
// Checks of a result read back: those rows exactly on rope units with --pi-iters > 0, iters =
// --pi-iters, batch >= 1, losses and seconds finite >= 0, lengths as the lm study's (lm.h).
struct PiResults {
  static constexpr const char* kStudy = "pi";
  std::vector<PiResult> rows;
};

// The row of `method` fine-tuned at `multiplier` x with `scaling` (compare/rows.h): "rope ft2x"
// (scaling none), "rope+linear ft2x".
std::string pi_row_name(const std::string& method, const std::string& scaling, int64_t multiplier);

// Called once per row after it is fine-tuned and evaluated, with the fine-tuned model (eval mode),
// e.g. to score further tasks on it. An empty function is allowed.
using PiCallback = std::function<void(const std::string& row, nn::GPT& tuned)>;

// Runs the protocol on `trained`, the model of `method` (its rows are named from it: a method
// variant's, compare/method.h, as well as a plain encoding's), a GPT whose encoding takes the RoPE scalings,
// takes_rope_scaling in compare/studies/lm/lm.h; left unchanged) for every cfg.of<PiSettings>().multipliers x
// cfg.of<PiSettings>().scalings, in that order: fine-tunes on windows of `train_split`, evaluates on `val` with
// evaluate_lengths (compare/compare_eval.h) at cfg.eval_multipliers. cfg.of<PiSettings>().iters = 0: no rows.
// Errors: UsageError when `trained`'s encoding takes no RoPE scaling; ValueError when train_split holds fewer than
// M·L + 1 tokens; NonFiniteLoss naming the row; Interrupted (train/interrupt.h) after a SIGINT /
// SIGTERM, between steps (the protocol restarts on resume: nothing of it is saved).
std::vector<PiResult> run_pi_protocol(const nn::GPT& trained, const std::string& method,
                                      const data::TokenSpan& train_split, const data::TokenSpan& val,
                                      const CompareConfig& cfg, uint64_t seed, Device dev,
                                      const PiCallback& on_row = {});

// Why the protocol does not run on `method`'s units ("" when it does): its encoding takes no RoPE
// scaling, it is scaled already (a variant with its own rope_scaling), or one of --pi-scalings at one
// of --pi-multipliers is not defined for its rotary configuration (p-RoPE defines only linear; an
// NTK-aware base needs more than 2 rotary channels).
std::string pi_refusal(const CompareConfig& cfg, const std::string& method);
// The methods whose units the protocol runs on: those of rope_scaling_methods without a refusal.
std::vector<std::string> pi_methods(const CompareConfig& cfg);

// The protocol's checks of a comparison configuration (called by CompareConfig::validate): no
// duplicate in --pi-multipliers or --pi-scalings (UsageError naming the option), a plain method
// (not a variant) with a refusal (UsageError with the reason: the options do not fit it), and the fine-tuning
// batch at the longest M·L within this machine's memory (check_memory, train/options.h).
void validate_pi(const CompareConfig& cfg);
// ValueError when the training split cannot hold a fine-tuning window of M x L tokens (+1) for each of
// --pi-multipliers (nothing with --pi-iters 0). run_pi_protocol and check_compare_data (before training) call it.
void check_pi_data(const CompareConfig& cfg, int64_t L, const data::TokenSpan& train_split);

// Publishes each fine-tuned model in UnitContext::models under its row name, for the studies after
// it (the passkey test scores them).
StudyEntry pi_study();

}  // namespace posgrad::train
