// encoder_config.h — the settings of the encoder track (compare/studies/encoder/encoder.h) as a struct of its own,
// so that the comparison's configuration (train/config.h) can hold one without including the runner.
// validate / to_json / from_json are defined in compare/studies/encoder/encoder.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace posgrad::train {

struct EncoderTrackConfig {
  static constexpr const char* kStudy = "encoder";  // its place in CompareConfig::settings
  std::vector<std::string> methods;                 // position encodings (empty: every registered one)
  std::vector<uint64_t> seeds = {1, 2, 3};
  std::vector<std::string> tasks = {"reversed", "marker_segment", "line_word"};
  std::vector<int64_t> multipliers = {1, 2, 4};  // evaluation lengths as multiples of `length`
  int64_t n_layer = 2, n_head = 4, n_embd = 64;
  int64_t length = 32;  // pretraining and fine-tuning length T (tokens)
  int64_t mlm_iters = 300, task_iters = 150, batch = 16;
  double lr = 2e-3, weight_decay = 0.01, grad_clip = 1.0;
  int64_t warmup = 20;
  int64_t eval_examples = 192;       // held-out examples per task and length (and MLM windows per length)
  int64_t segments = 4, word_k = 1;  // marker_segment's S, line_word's k
  // Where the pretraining text came from ({"corpus", "max_corpus_bytes"}), recorded with each saved
  // encoder for posgrad eval; not a setting (to_json leaves it out).
  nlohmann::json corpus;
  // UsageError naming the option: sizes, unknown methods/tasks, duplicates, multipliers without 1.
  void validate() const;
  nlohmann::json to_json() const;
  static EncoderTrackConfig from_json(const nlohmann::json& j, const std::string& source);
  // to_json() without methods and seeds: what a unit's numbers depend on besides its (method, seed).
  nlohmann::json settings_json() const;
  // methods, or every registered encoding that bidirectional attention accepts (not the causal-only ones)
  std::vector<std::string> method_list() const;
};

}  // namespace posgrad::train
