// compare.h — the comparison experiment: the same GPT trained with each position encoding on
// identical data order, initialisation seed and hyperparameters, then measured: validation
// perplexity and next-token accuracy, perplexity at 1x..16x the training length on the same
// validation text, per-position loss inside a long window, RoPE with linear / dynamic-NTK / YaRN
// scaling as extra rows, training speed and memory, attention weight versus query-key distance,
// and a synthetic copy/reverse task (exact match and token F1 at 1x..4x its training length).
// Each (method, seed) lives in its own run directory with a result.json; an interrupted
// experiment resumes (finished units are skipped, a half-trained one continues from its checkpoint).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/trainer.h"

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
  // cost benchmark (train/cost.h)
  std::vector<int64_t> cost_lengths = {64, 256, 1024, 2048};
  int64_t cost_rounds = 5;
  std::string out_dir = "runs/compare";

  void validate() const;
  nlohmann::json to_json() const;
};

CompareConfig compare_preset(const std::string& name);  // quick | full | tiny; ValueError otherwise
const std::vector<std::string>& compare_preset_names();

// Runs (or resumes) every unit, then the cost benchmark, writes results.json (the typed
// ComparisonResult, train/results.h) and renders report.md, results.csv, cost.csv and the plots
// from it (train/report.h) into cfg.out_dir. Returns the path of report.md.
std::string run_compare(const CompareConfig& cfg);

}  // namespace posgrad::train
