// config.h — the comparison's configuration: CompareConfig, with nothing but its members, defaults
// and declarations (the train layer's TrainConfig is train/config.h). A header of its own for the
// same reason: the runner (compare/compare.cpp) and the option table that describes it
// (compare/options.h) both need it. validate / to_json are defined beside the runner.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare/studies/encoder/encoder_config.h"
#include "compare/studies/passkey/passkey_config.h"
#include "nn/gpt.h"
#include "train/config.h"

namespace posgrad::train {

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
  // length-generalisation suite (compare/studies/suite/length_suite.h; model: the task_n_* sizes).
  // The default (quick): one task, cycle_navigation, that 2-layer models learn in distribution at
  // this budget (its cost and the other tasks' sizing: docs/presets.md).
  std::vector<std::string> suite_tasks = {"cycle_navigation"};
  int64_t suite_length = 6, suite_iters = 600, suite_batch = 32, suite_examples = 36, suite_max_multiplier = 4;
  double suite_lr = 3e-3;
  std::vector<std::string> suite_randomized = {"sinusoidal", "learned", "rope"};  // where among methods
  // position interpolation protocol (compare/studies/pi/pi_protocol.h; Chen et al. 2023): each trained "rope"
  // model copied with each scaling at factor s = M and fine-tuned at M x block_size for pi_iters
  // steps (0: off), then evaluated at every eval multiplier. Runs when "rope" is among methods.
  int64_t pi_iters = 40;
  double pi_lr = 1e-4;  // the base run's final (min_lr): a small constant rate, as PI's 2e-5 for LLaMA
  std::vector<int64_t> pi_multipliers = {2, 4};
  std::vector<std::string> pi_scalings = {"none", "linear", "ntk", "yarn"};
  // passkey retrieval of the fine-tuned language models (compare/studies/passkey/passkey.h)
  PasskeyConfig passkey;
  // cost benchmark (compare/studies/cost/cost.h)
  std::vector<int64_t> cost_lengths = {64, 256, 1024, 2048};
  int64_t cost_rounds = 5;
  std::string out_dir = "runs/compare";
  // Which models are compared: the causal decoder (the default), the bidirectional encoder with
  // masked-LM pretraining and fine-tuning tasks (compare/studies/encoder/encoder.h), or both. The encoder track uses
  // `methods`, `seeds` and the corpus settings of `base`; its own sizes are in `encoder`.
  std::string track = "decoder";
  EncoderTrackConfig encoder;

  void validate() const;
  nlohmann::json to_json() const;
};

}  // namespace posgrad::train
