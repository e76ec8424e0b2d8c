// compare_eval.h — the comparison's evaluation at several lengths, shared by the units of
// compare.cpp and the fine-tuned rows of the position-interpolation protocol (compare/studies/pi/pi_protocol.h).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "nn/gpt.h"
#include "compare/config.h"
#include "compare/results.h"

namespace posgrad::train {

// One pass at each evaluation length m · block_size, m in cfg.eval_multipliers (block_size: the
// model's configured training context): loss, perplexity, accuracy over up to
// max(1, cfg.eval_tokens / context) non-overlapping windows from the start of `val` (the same text
// for every row), and the per-position loss of the cfg.per_position_multiplier window into
// *per_position when given. Index-aligned with cfg.eval_multipliers; nullopt where the context
// exceeds the encoding's max_length() (a learned table) or the split. The model should be in eval mode.
std::vector<std::optional<LengthResult>> evaluate_lengths(nn::GPT& model, const data::TokenSpan& val,
                                                          const CompareConfig& cfg, Device dev,
                                                          std::vector<double>* per_position);

// The derived RoPE rows (rope+linear, rope+dynamic, rope+yarn, rope@bf16, rope@fp16: evaluation-time
// variants of each trained RoPE model) that this configuration cannot build, each with the reason
// (the variant's PosEncConfig::validate message, e.g. dynamic NTK with 2 rotary channels). A pure
// function of cfg, so known before training: those rows are not measured (absent from results and
// tables) and the report states why.
std::map<std::string, std::string> skipped_rope_variants(const CompareConfig& cfg);
// The position-encoding configuration of this experiment's rope models (its sizes and --rope-* options),
// for checking a scaled copy's options before anything is trained.
nn::PosEncConfig rope_config(const CompareConfig& cfg);
// Every derived RoPE row, in the order above.
const std::vector<std::string>& rope_variant_rows();

}  // namespace posgrad::train
