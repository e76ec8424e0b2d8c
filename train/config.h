// config.h — the configuration structs of the train layer: TrainConfig (one training run) and
// CompareConfig (the comparison experiment), with nothing but their members, defaults and
// declarations. They are a header of their own because both the code that runs them (trainer,
// compare) and the code that describes them (the option tables, train/options.h; checkpoints,
// results) need them, and the runners use the descriptions: keeping the structs here keeps the
// train/ include graph acyclic. Their validate / to_json / from_json are defined beside the code
// that runs them (trainer.cpp, compare.cpp), as loops over the option tables.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/gpt.h"
#include "train/encoder_config.h"
#include "train/passkey_config.h"

namespace posgrad::train {

// The settings of one training run. The member initialisers are the defaults; the option table
// (train_options() in train/options.h) gives every member its name, range, unit and help, and
// generates the CLI flags, config.json and validation from them.
struct TrainConfig {
  // data
  std::string corpus = "kjv";      // path, "kjv" or "shakespeare"
  std::string tokenizer = "char";  // char | byte
  std::string data_dir;            // where "shakespeare" is looked up ("" = $POSGRAD_DATA_DIR or ../shared/data)
  int64_t max_corpus_bytes = int64_t{1} << 30;  // a larger corpus file is refused before it is read
  // model (model.vocab_size is set from the tokenizer)
  nn::GPTConfig model;
  // optimisation
  std::string optimizer = "adamw";  // adamw | sgd
  double lr = 1e-3, min_lr = 1e-4;
  int64_t warmup_iters = 100, max_iters = 2000, lr_decay_iters = 0;  // 0: = max_iters
  bool cosine = true;
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.99, momentum = 0.9, grad_clip = 1.0;
  int64_t batch_size = 12, grad_accum = 1;
  // evaluation, logging, checkpoints
  int64_t eval_interval = 250, eval_windows = 64, log_interval = 10, checkpoint_interval = 0;  // 0: = eval_interval
  uint64_t seed = 1337;
  std::string device = "cpu";
  std::string out_dir = "runs/train";
  int64_t threads = 0;  // 0: OpenMP default

  // Every option in its range (the table), then the relations between options (min_lr <= lr,
  // n_embd % n_head, the device exists) and the memory estimate against this machine's memory.
  // UsageError naming the option(s).
  void validate() const;
  // The flat {option: value} object of config.json and state.json (keys: train_options()).
  nlohmann::json to_json() const;
  // Reads a complete saved configuration; UsageError naming `source` and the key.
  static TrainConfig from_json(const nlohmann::json& j, const std::string& source = "configuration");
};

struct CompareConfig {
  TrainConfig base;  // shared hyperparameters; base.model.pos.kind is replaced per method
  std::vector<std::string> methods = nn::position_encoding_kinds();  // every registered encoding
  std::vector<uint64_t> seeds = {1};
  std::vector<int64_t> eval_multipliers = {1, 2, 4, 8, 16};
  int64_t eval_tokens = 16384;          // validation tokens scored per evaluation length
  int64_t per_position_multiplier = 4;  // window length (x block) of the per-position loss
  // synthetic task
  std::string task = "copy";
  int64_t task_length = 8, task_symbols = 16, task_iters = 300, task_batch = 32, task_examples = 64;
  int64_t task_n_layer = 2, task_n_embd = 64, task_n_head = 4;
  std::vector<int64_t> task_multipliers = {1, 2, 3, 4};
  // length-generalisation suite (train/length_suite.h; model: the task_n_* sizes)
  // The default (quick): one task, cycle_navigation, that 2-layer models learn in distribution at
  // this budget (~10 s per training on a quiet 2-core machine: 8 methods x 3 seeds plus 3 randomized
  // rows x 3 seeds add about 5 minutes). reverse_string and bucket_sort also reach >= 0.94 here but
  // would triple that; they run in the full preset (see compare_preset).
  std::vector<std::string> suite_tasks = {"cycle_navigation"};
  int64_t suite_length = 6, suite_iters = 600, suite_batch = 32, suite_examples = 36, suite_max_multiplier = 4;
  double suite_lr = 3e-3;
  std::vector<std::string> suite_randomized = {"sinusoidal", "learned", "rope"};  // where among methods
  // position interpolation protocol (train/pi_protocol.h; Chen et al. 2023): each trained "rope"
  // model copied with each scaling at factor s = M and fine-tuned at M x block_size for pi_iters
  // steps (0: off), then evaluated at every eval multiplier. Runs when "rope" is among methods.
  int64_t pi_iters = 40;
  double pi_lr = 1e-4;  // the base run's final (min_lr): a small constant rate, as PI's 2e-5 for LLaMA
  std::vector<int64_t> pi_multipliers = {2, 4};
  std::vector<std::string> pi_scalings = {"none", "linear", "ntk", "yarn"};
  // passkey retrieval of the fine-tuned language models (train/passkey.h)
  PasskeyConfig passkey;
  // cost benchmark (train/cost.h)
  std::vector<int64_t> cost_lengths = {64, 256, 1024, 2048};
  int64_t cost_rounds = 5;
  std::string out_dir = "runs/compare";
  // Which models are compared: the causal decoder (the default), the bidirectional encoder with
  // masked-LM pretraining and fine-tuning tasks (train/encoder.h), or both. The encoder track uses
  // `methods`, `seeds` and the corpus settings of `base`; its own sizes are in `encoder`.
  std::string track = "decoder";
  EncoderTrackConfig encoder;

  void validate() const;
  nlohmann::json to_json() const;
};

}  // namespace posgrad::train
