// presets.h — named training configurations. `default` is what `posgrad train` runs with no
// arguments (a small character-level model on the offline KJV corpus); `nanogpt-shakespeare`
// is nanoGPT's documented CPU configuration (README of karpathy/nanoGPT, "I only have a macbook":
// char-level TinyShakespeare, 4 layers, 4 heads, 128 wide, block 64, batch 12, 2000 iterations,
// lr 1e-3 with 100 warm-up steps and cosine decay to 1e-4, beta2 0.99, weight decay 0.1, clip 1,
// no dropout, learned absolute positions; reported val loss 1.88); `tiny` is for tests.
#pragma once

#include <string>
#include <vector>

#include "train/trainer.h"

namespace posgrad::train {

TrainConfig train_preset(const std::string& name);  // ValueError listing the names
const std::vector<std::string>& train_preset_names();

}  // namespace posgrad::train
