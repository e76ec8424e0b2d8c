// config.h — the comparison's configuration: CompareConfig, with the experiment's own members
// (the training settings, methods, seeds, evaluation lengths, where, which track) and each study's
// settings struct in `settings` (compare/study.h; the train layer's TrainConfig is train/config.h).
// A header of its own because the runner (compare/compare.cpp), the option table that describes it
// (compare/options.h) and every study need it. validate / to_json are defined beside the runner.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare/parts.h"
#include "nn/gpt.h"
#include "train/config.h"

namespace posgrad::train {

struct CompareConfig {
  TrainConfig base;  // shared hyperparameters; base.model.pos.kind is replaced per method
  std::vector<std::string> methods = nn::position_encoding_kinds();  // every registered encoding
  std::vector<uint64_t> seeds = {1};
  // The evaluation lengths every study measures at, as multiples of the training length.
  std::vector<int64_t> eval_multipliers = {1, 2, 4, 8, 16};
  int64_t eval_tokens = 16384;          // validation tokens scored per evaluation length
  int64_t per_position_multiplier = 4;  // window length (x block) of the per-position loss
  std::string out_dir = "runs/compare";
  // Units trained at once by this process, each on its share of the threads (0: one per thread on the
  // CPU with one process, else 1; compare_jobs in compare/compare.h). Changes no result.
  int64_t jobs = 0;
  // Which models are compared: the causal decoder (the decoder units), the bidirectional encoder
  // (the encoder track's own units), or both (the quick and full presets; tiny: decoder).
  std::string track = "decoder";
  // Each study's settings (its struct S with S::kStudy, e.g. SuiteSettings in
  // compare/studies/suite/length_suite.h), made with their defaults by the constructor
  // (StudyEntry::init_settings) and bound to its options by the study's rows of the option table.
  Parts settings;

  CompareConfig();
  template <typename S>
  S& of() {
    return settings.get<S>();
  }
  template <typename S>
  const S& of() const {
    const S* s = settings.find<S>();
    if (!s) throw std::logic_error(std::string("no settings of study '") + S::kStudy + "' (not registered?)");
    return *s;
  }

  void validate() const;
  nlohmann::json to_json() const;
};

}  // namespace posgrad::train
