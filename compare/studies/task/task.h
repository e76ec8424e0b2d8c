// task.h — the synthetic copy / reverse task (data/synthetic.h): a small decoder with the unit's
// position encoding (--task-n-layer / --task-n-embd / --task-n-head, block_size = 2 · task_length + 1,
// the training sequence: a learned table cannot go beyond it) trained for --task-iters steps on
// sequences of --task-length symbols, then scored by greedy decoding at each --task-multipliers
// length: exact match, bag-of-tokens F1 and per-token accuracy over --task-examples prompts that are
// the same for every method and seed. n/a where the encoding's table is shorter than the prompt.
//
// Checks of a result read back: one score per task multiplier (null only where the method cannot
// run, never at 1x), length = multiplier x --task-length, examples >= 0, exact match / F1 / accuracy
// in [0, 1], the final training loss finite >= 0.
#pragma once

#include <optional>
#include <vector>

#include "compare/results.h"
#include "compare/study.h"

namespace posgrad::train {

// Its settings (CompareConfig::of<TaskSettings>(); options --task, --task-*). The length-generalisation
// suite trains models of these sizes too.
struct TaskSettings {
  static constexpr const char* kStudy = "task";
  std::string kind = "copy";  // --task: copy | reverse
  int64_t length = 8, symbols = 16, iters = 300, batch = 32, examples = 64;
  int64_t n_layer = 2, n_embd = 64, n_head = 4;
  std::vector<int64_t> multipliers = {1, 2, 3, 4};
};

// The task scored at one length.
struct TaskScore {
  int64_t length = 0, examples = 0;
  double exact_match = 0, token_f1 = 0, token_accuracy = 0;
};

struct TaskResult {
  static constexpr const char* kStudy = "task";
  std::vector<std::optional<TaskScore>> scores;  // index-aligned with task_multipliers; results.json "task"
  double final_loss = 0;                         // "task_final_loss"
};

enum class TaskQuantity { ExactMatch, TokenF1 };
// "task_exact_match_x2", "task_token_f1_x1" (a Metric of study "task"; higher is better).
Metric task_metric(TaskQuantity q, int64_t multiplier);

StudyEntry task_study();

}  // namespace posgrad::train
