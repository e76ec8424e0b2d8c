// presets.h — named training configurations. `default` is what `posgrad train` runs with no
// arguments (a small character-level model on the offline KJV corpus); `nanogpt-shakespeare`
// is nanoGPT's documented CPU configuration (README of karpathy/nanoGPT, "I only have a macbook":
// char-level TinyShakespeare, 4 layers, 4 heads, 128 wide, block 64, batch 12, 2000 iterations,
// lr 1e-3 with 100 warm-up steps and cosine decay to 1e-4, beta2 0.99, weight decay 0.1, clip 1,
// no dropout, learned absolute positions; reported val loss 1.88); `tiny` is for tests.
#pragma once

#include <string>
#include <vector>

#include "train/config.h"

namespace posgrad::train {

TrainConfig train_preset(const std::string& name);  // ValueError listing the names
const std::vector<std::string>& train_preset_names();

// Model shape and run length of a preset in one call (the learning rate decays over max_iters).
void set_model(TrainConfig& c, int64_t n_layer, int64_t n_head, int64_t n_embd, int64_t block_size);
void set_run(TrainConfig& c, int64_t batch_size, int64_t max_iters, int64_t warmup_iters, int64_t eval_interval);
// "unknown <what> '<name>' (known: a, b, c)" as a ValueError.
[[noreturn]] void unknown_name(const std::string& what, const std::string& name, const std::vector<std::string>& known);

}  // namespace posgrad::train
