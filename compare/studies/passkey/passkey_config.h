// passkey_config.h — the settings of the comparison's passkey retrieval test (compare/studies/passkey/passkey.h),
// nothing but members and defaults, a header of its own so that train/config.h can hold them
// without depending on the code that runs them (as compare/studies/encoder/encoder_config.h). The option table
// (compare_options() in compare/options.cpp, group "Passkey retrieval") names and checks them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace posgrad::train {

struct PasskeyConfig {
  static constexpr const char* kStudy = "passkey";  // its place in CompareConfig::settings
  // Fine-tuning steps on passkey examples at the training length after pretraining (0: none; with
  // pretrain_fraction also 0, no passkey test). 150 is the option's own default; each preset sets
  // its own (docs/presets.md).
  int64_t iters = 150;
  // The share of each pretraining batch's rows that are passkey examples at the training length
  // instead of corpus windows (0: none; passkey_pretrain_mix in passkey.h). With iters = 0 and a
  // share above 0, the study scores the pretrained model itself.
  double pretrain_fraction = 0;
  double lr = 1e-3;      // peak learning rate of the fine-tuning (warm-up, cosine to lr / 10)
  int64_t batch = 16;    // examples per fine-tuning step, and per forward pass when scoring
  int64_t examples = 8;  // test examples per (length, depth) cell
  std::vector<int64_t> multipliers = {1, 2, 4, 8, 16};   // test lengths, x the training length
  std::vector<double> depths = {0, 0.25, 0.5, 0.75, 1};  // needle depths (fraction of the filler before it)
  int64_t key_length = 5;                                // symbols of the key
  std::string template_name = "short";                   // data/passkey.h: standard | short
  // The encodings whose units run the test ({"all"}: every method; else kinds, so "rope" covers
  // "rope[rope_fraction=0.5]"): the fine-tuning that teaches retrieval costs more than most studies.
  std::vector<std::string> methods = {"all"};
  // Whether the models an earlier study derived (the position-interpolation and DroPE rows) are
  // fine-tuned and scored too, or only the unit's own model and its evaluation-time scalings.
  bool derived = true;
};

// Whether `method`'s units run the passkey test under cfg.methods (not whether the test is on).
bool passkey_selects(const PasskeyConfig& cfg, const std::string& method);

}  // namespace posgrad::train
