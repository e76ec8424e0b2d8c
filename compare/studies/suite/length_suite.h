// length_suite.h — the comparison's length-generalisation suite (data/length_tasks.h): for each
// task, a small decoder with the unit's position encoding is trained on input lengths 1..N
// (N = suite_length; each step draws one length uniformly and a batch of that length, as in
// Delétang et al. 2023 §4) and scored by teacher-forced argmax (per-sequence accuracy = greedy
// exact match; per-token accuracy) in length buckets [1, N], [N+1, 2N], ..., up to
// suite_max_multiplier · N. The test examples of a (task, bucket) are the same for every method
// and seed (a fixed generator), so rows differ only by their training.
//
// Randomized positions (Ruoss et al. 2023, §3): with the method in suite_randomized, the task is
// trained a second time ("<method>+randomized") where each training batch takes an ordered random
// subset of T positions from [0, L_max), L_max = the longest test sequence, drawn from the unit's
// seeded generator; one subset per batch, shared by its rows (Ruoss et al. draw per sequence; a
// per-batch draw needs no per-row position path and gives every position the same training
// distribution). Evaluation always uses positions 0..T-1, so it is deterministic. Supported by
// every encoding with positions (PositionEncoding::supports_position_ids): the ids become table
// rows (sinusoidal, learned), rotation angles (rope, xpos), or the relative positions ids[j] - ids[i]
// of the fused attention's bias / content-position terms (t5, alibi, kerple, sandwich, deberta: CPU only,
// the CUDA kernels have no per-token position path); "none" is refused when the suite is configured.
//
// The model: task_n_layer / task_n_embd / task_n_head, block_size = the longest test sequence (a
// learned table covers every test position; rows past the training lengths stay untrained unless
// positions are randomized). Deliberately not here: the report (write_suite_csv, write_suite_plots,
// suite_markdown and judge_suite_claims in compare/studies/suite/length_suite_report.h).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare/config.h"
#include "compare/studies/task/task.h"
#include "compare/study.h"
#include "data/length_tasks.h"
#include "tensor/dtype.h"
#include "tensor/random.h"

namespace posgrad::train {

// Its settings (CompareConfig::of<SuiteSettings>(); options --suite-*; the model: the task's sizes,
// TaskSettings in compare/studies/task/task.h). The default (quick): one task, cycle_navigation, that
// 2-layer models learn in distribution at this budget (its cost and the other tasks' sizing:
// docs/presets.md).
struct SuiteSettings {
  static constexpr const char* kStudy = "suite";
  std::vector<std::string> tasks = {"cycle_navigation"};
  int64_t length = 6, iters = 600, batch = 32, examples = 36, max_multiplier = 4;
  double lr = 3e-3;
  std::vector<std::string> randomized = {"sinusoidal", "learned", "rope"};  // where among the methods
};

// One length bucket [lo, hi] of input lengths.
struct SuiteBucket {
  int64_t lo = 0, hi = 0, examples = 0;
  double sequence_accuracy = 0, token_accuracy = 0;
};
// One task trained and scored for one row of one seed.
struct SuiteTaskResult {
  std::string task;
  bool randomized = false;  // row "<method>+randomized"
  double final_loss = 0;
  double seconds = 0;                // wall time of training and scoring, informational
  std::vector<SuiteBucket> buckets;  // 1 .. suite_max_multiplier
};

// The study's part of a unit (results.json "suite"): one entry per (task, plain | randomized) in run order.
struct SuiteResult {
  static constexpr const char* kStudy = "suite";
  std::vector<SuiteTaskResult> tasks;
};

// Row name of a result: the method, or "<method>+randomized".
std::string suite_row(const std::string& method, bool randomized);

// Whether `method` can be trained with randomized positions (its encoding takes position ids).
bool suite_supports_randomized(const std::string& method);

// An ordered random subset of T positions from [0, L) (Ruoss et al. 2023 §3), the positions of one
// training batch of a row trained with randomized positions (the suite's, the addition study's).
// ValueError when T > L.
std::vector<int64_t> random_positions(int64_t T, int64_t L, Generator& g);

// Fine-tunes `model` (finetune, train/finetune.h) on the batches `next` draws; with `randomized`,
// each batch trains at random_positions(T, block_size, pos_gen) (Ruoss et al. 2023 §3). The position
// ids are cleared afterwards, also when training throws, so the model is then evaluated at positions
// 0 .. T-1. Returns the final loss. Throws what finetune throws (Interrupted, NonFiniteLoss).
double finetune_length_model(nn::GPT& model, const FinetuneSpec& spec, Device dev, bool randomized, int64_t block_size,
                             Generator& pos_gen, const std::function<data::LengthBatch()>& next);

// The checks of a list of methods to train with randomized positions (option `flag`, e.g.
// "--suite-randomized"): UsageError naming the flag for an encoding without position ids ("none"),
// or one whose ids enter the fused attention (t5, alibi, kerple, sandwich, deberta) when it is among
// the methods and the device is CUDA.
void validate_randomized_methods(const std::string& flag, const std::vector<std::string>& listed,
                                 const CompareConfig& cfg);

// Checks the suite's options (UsageError naming the option): every suite_randomized method takes
// position ids ("none" does not), and one whose ids enter the fused attention (t5, alibi, kerple,
// deberta) is among the methods only with a CPU device. A listed method that is not among the
// methods is not run.
void validate_length_suite(const CompareConfig& cfg);

// Trains and scores every suite task for `method` (and its randomized row when listed) with seed
// `seed` on `dev`. Interrupted when a stop signal arrives (the unit restarts the suite on resume).
std::vector<SuiteTaskResult> run_length_suite(const CompareConfig& cfg, const std::string& method, uint64_t seed,
                                              Device dev);

// results.json form of a unit's suite results; suite_from_json throws json::exception on a
// malformed entry (unit_from_json turns it into an IoError naming the file).
nlohmann::json suite_to_json(const std::vector<SuiteTaskResult>& s);
std::vector<SuiteTaskResult> suite_from_json(const nlohmann::json& j);

// The input-length buckets of the configuration: [(k-1)N + 1, kN] for k = 1 .. suite_max_multiplier.
std::vector<std::pair<int64_t, int64_t>> suite_buckets(const CompareConfig& cfg);

StudyEntry suite_study();

}  // namespace posgrad::train
