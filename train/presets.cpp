// presets.cpp — see presets.h.
#include "train/presets.h"

namespace posgrad::train {

const std::vector<std::string>& train_preset_names() {
  static const std::vector<std::string> names = {"default", "nanogpt-shakespeare", "tiny"};
  return names;
}

TrainConfig train_preset(const std::string& name) {
  TrainConfig c;  // the struct defaults are nanoGPT's CPU configuration
  c.model.block_size = 64;
  c.model.n_layer = 4;
  c.model.n_head = 4;
  c.model.n_embd = 128;
  c.model.dropout = 0.0;
  c.model.pos.kind = "learned";
  if (name == "default") {
    c.corpus = "kjv";
    c.max_iters = 1000;
    c.lr_decay_iters = 1000;
    c.eval_interval = 200;
    c.out_dir = "runs/train";
    return c;
  }
  if (name == "nanogpt-shakespeare") {
    c.corpus = "shakespeare";
    c.max_iters = 2000;
    c.lr_decay_iters = 2000;
    c.eval_interval = 250;
    c.eval_windows = 200;
    c.out_dir = "runs/nanogpt-shakespeare";
    return c;
  }
  if (name == "tiny") {
    c.model.block_size = 16;
    c.model.n_layer = 2;
    c.model.n_head = 2;
    c.model.n_embd = 16;
    c.batch_size = 4;
    c.max_iters = 20;
    c.lr_decay_iters = 20;
    c.warmup_iters = 2;
    c.eval_interval = 10;
    c.eval_windows = 4;
    c.log_interval = 5;
    c.out_dir = "runs/tiny";
    return c;
  }
  std::string all;
  for (const auto& n : train_preset_names()) all += (all.empty() ? "" : ", ") + n;
  throw ValueError("unknown preset '" + name + "' (known: " + all + ")");
}

}  // namespace posgrad::train
