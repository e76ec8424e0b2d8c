// presets.cpp — see presets.h.
#include "train/presets.h"

namespace posgrad::train {

const std::vector<std::string>& train_preset_names() {
  static const std::vector<std::string> names = {"default", "nanogpt-shakespeare", "tiny"};
  return names;
}

void set_model(TrainConfig& c, int64_t n_layer, int64_t n_head, int64_t n_embd, int64_t block_size) {
  c.model.n_layer = n_layer;
  c.model.n_head = n_head;
  c.model.n_embd = n_embd;
  c.model.block_size = block_size;
}

void set_run(TrainConfig& c, int64_t batch_size, int64_t max_iters, int64_t warmup_iters, int64_t eval_interval) {
  c.batch_size = batch_size;
  c.max_iters = max_iters;
  c.lr_decay_iters = 0;  // decay over the whole run
  c.warmup_iters = warmup_iters;
  c.eval_interval = eval_interval;
}

void unknown_name(const std::string& what, const std::string& name, const std::vector<std::string>& known) {
  std::string all;
  for (const auto& n : known) all += (all.empty() ? "" : ", ") + n;
  throw ValueError("unknown " + what + " '" + name + "' (known: " + all + ")");
}

TrainConfig train_preset(const std::string& name) {
  TrainConfig c;  // the struct defaults are nanoGPT's CPU configuration
  set_model(c, 4, 4, 128, 64);
  c.model.dropout = 0.0;
  c.model.pos.kind = "learned";
  if (name == "default") {
    c.corpus = "kjv";
    set_run(c, 12, 1000, 100, 200);
    c.out_dir = "runs/train";
    return c;
  }
  if (name == "nanogpt-shakespeare") {
    c.corpus = "shakespeare";
    set_run(c, 12, 2000, 100, 250);
    c.eval_windows = 200;
    c.out_dir = "runs/nanogpt-shakespeare";
    return c;
  }
  if (name == "tiny") {
    set_model(c, 2, 2, 16, 16);
    set_run(c, 4, 20, 2, 10);
    c.eval_windows = 4;
    c.log_interval = 5;
    c.out_dir = "runs/tiny";
    return c;
  }
  unknown_name("preset", name, train_preset_names());
}

}  // namespace posgrad::train
