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
  // Fine-tuning steps on passkey examples at the training length (0: no passkey test). The default
  // is the budget measured for the quick preset's model (docs/presets.md), which leaves the test off.
  int64_t iters = 150;
  double lr = 1e-3;      // peak learning rate of the fine-tuning (warm-up, cosine to lr / 10)
  int64_t batch = 16;    // examples per fine-tuning step, and per forward pass when scoring
  int64_t examples = 8;  // test examples per (length, depth) cell
  std::vector<int64_t> multipliers = {1, 2, 4, 8, 16};   // test lengths, x the training length
  std::vector<double> depths = {0, 0.25, 0.5, 0.75, 1};  // needle depths (fraction of the filler before it)
  int64_t key_length = 5;                                // symbols of the key
  std::string template_name = "short";                   // data/passkey.h: standard | short
};

}  // namespace posgrad::train
