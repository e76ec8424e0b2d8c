// method.h — a method of the comparison: one registered position encoding, trained with the
// experiment's settings ("rope"), or a variant of one with settings of its own,
//   KIND[NAME=VALUE;NAME=VALUE...]      e.g.  rope[rope_partial=prope;rope_fraction=0.75]
//                                             alibi[attention_sinks=true]
// so that two models of one encoding that differ in an option (p-RoPE against full RoPE, an
// encoding with and without attention sinks) are compared side by side, each with its own units,
// rows and claims. NAME is a position-encoding option of KIND (its --help group: `rope_fraction`
// for rope; any encoding's for an encoding that composes others, the hybrid one) or the model's
// `attention_sinks`; '-' may stand for '_' (`rope-fraction`). VALUE is parsed and checked as the
// option's flag would be. A variant's values replace the experiment's (--rope-fraction ...) for its
// units only.
//
// The name is canonical: the settings sorted by NAME, each VALUE as opt::format writes it
// ("0.750" -> "0.75", "1" -> "true") less an exponent's '+' ("500000" -> "5e05": no '+' in a
// method's name, the separator of its derived rows such as "rope+yarn"), no setting twice and none equal to the value
// the experiment already gives (it would be the plain method under another name). It names the method's run
// directories, rows of results.csv, report tables and plot titles, so VALUE may hold only
// [A-Za-z0-9_.+-] (no ',' ';' '[' ']' '=' quote or space: a text option with commas, such as
// --hybrid-layers, is set for the whole experiment instead).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/gpt.h"
#include "tensor/option_table.h"

namespace posgrad::train {

struct MethodSpec {
  std::string kind;                                          // a registered encoding
  std::vector<std::pair<std::string, opt::Value>> settings;  // sorted by name; empty: the plain method
  std::string name() const;                                  // the canonical text above
};

// The method's parts; UsageError naming the text and what is wrong in it (an unknown kind or option,
// with the nearest known name; a value out of range; a malformed bracket; a character that a name
// cannot hold). Does not compare with an experiment's settings (canonical_method does).
MethodSpec parse_method(const std::string& text);
// The method's canonical name under the experiment's model settings `base` (see above: UsageError
// also for a setting equal to base's value). "all" is not a method (the --methods row expands it).
std::string canonical_method(const std::string& text, const nn::GPTConfig& base);
// The registered encoding of a method ("rope" for "rope[rope_fraction=0.5]").
std::string method_kind(const std::string& method);
// Whether the method is a variant (has settings).
bool is_variant(const std::string& method);
// The model of `method`: `model` (the experiment's settings, or a study's own sizes with the
// experiment's encoding options) with pos.kind set to the method's kind and its settings applied
// (UsageError as parse_method). Every study builds a method's model through this, never by setting
// pos.kind alone.
void apply_method(nn::GPTConfig& model, const std::string& method);
nn::GPTConfig method_model(const nn::GPTConfig& base, const std::string& method);

// A copy of `model` (same weights, on `dev`) with position-encoding options replaced, e.g.
// {{"rope_scaling", "yarn"}, {"rope_scaling_factor", 4.0}} (options without parameters: the weights
// load as they are); its dropout draws from `dropout_seed`. The evaluation-time variants (lm), the
// fine-tuned copies (passkey, pi). Errors: those of GPTConfig's option setters and load_state_dict.
std::unique_ptr<nn::GPT> copy_gpt(const nn::GPT& model,
                                  const std::vector<std::pair<std::string, opt::Value>>& pos_options,
                                  uint64_t dropout_seed, Device dev);

}  // namespace posgrad::train
