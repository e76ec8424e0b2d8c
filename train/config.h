// config.h — the configuration struct of the train layer: TrainConfig (one training run), with
// nothing but its members, defaults and declarations. It is a header of its own because both the
// code that runs it (the trainer) and the code that describes it (the option table, train/options.h;
// checkpoints) need it, and the runner uses the description: keeping the struct here keeps the
// train/ include graph acyclic. Its validate / to_json / from_json are defined beside the trainer
// (trainer.cpp), as loops over the option table. The comparison's configuration is compare/config.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/gpt.h"

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
  // Matrix products: "fp32", or "bf16" operands with float accumulation (kernels::MatmulPrecision).
  std::string precision = "fp32";

  // Every option in its range (the table), then the relations between options (min_lr <= lr,
  // n_embd % n_head, the device exists) and the memory estimate against this machine's memory.
  // UsageError naming the option(s).
  void validate() const;
  // The flat {option: value} object of config.json and state.json (keys: train_options()).
  nlohmann::json to_json() const;
  // Reads a complete saved configuration; UsageError naming `source` and the key.
  static TrainConfig from_json(const nlohmann::json& j, const std::string& source = "configuration");
};

// The device a model with position encoding `pos_kind` runs on, from --device `device` ("cpu",
// "cuda", "cuda:N"). UsageError for an unparsable device, or a CUDA device with an encoding that has no
// CUDA attention kernel (nn::PosEncEntry::cpu_only). Used by validate() and by the commands that load
// a run (eval, sample).
Device parse_run_device(const std::string& device, const std::string& pos_kind);

}  // namespace posgrad::train
