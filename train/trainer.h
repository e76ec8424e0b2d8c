// trainer.h — pretraining loop: data -> GPT -> cross-entropy -> backward -> clip -> optimizer ->
// schedule, with periodic evaluation, gradient-norm logging, metrics files, atomic checkpoints and
// bit-identical resume. One step function (Trainer::step) holds forward, backward, clip and update
// so that a data-parallel gradient all-reduce (MPI / NCCL) slots in between backward and clip.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "data/process.h"
#include "data/tokenizer.h"
#include "nn/gpt.h"
#include "tensor/kernels/kernels.h"
#include "tensor/option_table.h"
#include "train/config.h"
#include "train/evaluate.h"
#include "train/optim.h"
#include "train/threads.h"

namespace posgrad::dist {
class Communicator;
}

namespace posgrad::train {

class DataParallel;  // train/data_parallel.h

struct StepStats {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0, seconds = 0;
  int64_t tokens = 0;
};

// The one training step of posgrad (the trainer's; train/finetune.h's loop takes the same step, bit
// for bit, without the data-parallel part — test_finetune.cpp holds them together): the
// learning rate from the schedule, zero_grad, grad_accum micro-batches from next_batch() (forward,
// mean cross-entropy, backward of loss / grad_accum), clipping of the global gradient norm (0: off),
// the optimizer step. x, y int64 (B, T) on any device (moved to dev). NonFiniteLoss, naming the step,
// when a loss or the gradient norm is not finite — before the optimizer changes anything.
// With dp (data-parallel, train/data_parallel.h): next_batch() returns the global batch, this rank
// trains on its slice with its loss weighted by its share, and the gradients and the loss are summed
// over the ranks before clipping; a non-finite loss is detected after that sum, on every rank alike.
// StepStats then holds the global batch's loss and tokens.
using BatchFn = std::function<std::pair<Tensor, Tensor>()>;

// A change to the training batches (Trainer::set_batch_mix): called with the step (0-based, the
// step being taken), the micro-batch (0 .. grad_accum-1) and that micro-batch's global x, y, int64
// (B, T) on the CPU as the sampler drew them, before they are sliced over data-parallel ranks or
// moved to the device; it may overwrite rows of x and y in place (y = -100 at a target leaves it out
// of the loss, cross_entropy's ignore index), never change their shapes. It must be a function of
// (step, micro) and of what it was built with, holding no state that advances from call to call: a
// resumed run calls it again from the checkpoint's step and must train on the same batches, and
// every data-parallel rank calls it on the same global batch. An exception it throws ends the step
// before the model changes.
using BatchMix = std::function<void(int64_t step, int64_t micro, Tensor& x, Tensor& y)>;
StepStats training_step(nn::GPT& model, Optimizer& opt, const LRSchedule& sched, int64_t step, int64_t grad_accum,
                        double grad_clip, Device dev, const BatchFn& next_batch, DataParallel* dp = nullptr);

// The configuration a resumed run continues with: `saved` (from the checkpoint) with the options
// given explicitly (name, value) applied. Returns one line per change ("--max-iters 1000 -> 2000")
// for the log; an unchanged value is not a change. UsageError for an option fixed on resume
// (model, data, seed, optimizer) that would change.
std::vector<std::string> apply_resume_overrides(TrainConfig& saved,
                                                const std::vector<std::pair<std::string, opt::Value>>& overrides);

class Trainer {
 public:
  // Validates cfg (UsageError), removes temporary files a killed run left in cfg.out_dir, builds
  // data, model and optimizer. With resume, loads the run directory's checkpoint: cfg must agree
  // with it on every option fixed on resume (UsageError; see apply_resume_overrides), and a
  // missing, corrupt or mismatched checkpoint is an IoError. With a communicator of more than one
  // process, training is data-parallel over it (train/data_parallel.h): every rank builds the same
  // model and reads the same checkpoint, and only rank 0 writes (config.json, metrics.jsonl,
  // checkpoints) and evaluates; UsageError when --batch-size is smaller than the number of processes.
  // The writer holds cfg.out_dir for its lifetime (DirectoryLock, data/process.h): IoError naming the
  // directory and the holder's pid when another process holds it. The other ranks share rank 0's hold.
  Trainer(TrainConfig cfg, bool resume, dist::Communicator* comm = nullptr);
  ~Trainer();

  // Trains up to cfg.max_iters, evaluating and checkpointing on the way. stop_after (tests): stop
  // abruptly after that many steps in this process, without a final checkpoint.
  void run(int64_t stop_after = -1);
  StepStats step();
  // Every later step's micro-batches pass through `mix` after the sampler (BatchMix above); an
  // empty function (the default) leaves the sampler's batches as they are. The mix is no part of
  // TrainConfig or the checkpoint: a caller that resumes a run sets the same mix again (the
  // comparison refuses a resume with other settings, compare/compare.cpp).
  void set_batch_mix(BatchMix mix) { mix_ = std::move(mix); }
  // Mean next-token loss / perplexity / accuracy on up to max_windows non-overlapping validation
  // windows of `context` tokens, plus the per-position loss.
  EvalResult evaluate(int64_t context, int64_t max_windows, int64_t pos0 = 0);
  void save_checkpoint();

  nn::GPT& model() { return *model_; }
  const TrainConfig& config() const { return cfg_; }
  int64_t current_step() const { return step_; }
  const data::Tokenizer& tokenizer() const { return *tok_; }
  const data::TokenDataset& dataset() const { return *data_; }
  // Gradient L2 norm per parameter group ("wte", "blocks.0.attn", "blocks.0.fc", ...) of the last step.
  std::vector<std::pair<std::string, double>> group_grad_norms() const;
  // (step, loss) at every progress line and every evaluation of the whole run (restored from
  // metrics.jsonl on resume).
  const std::vector<std::pair<int64_t, double>>& train_curve() const { return train_curve_; }
  const std::vector<std::pair<int64_t, double>>& val_curve() const { return val_curve_; }

 private:
  void build();
  void load_checkpoint();
  void log_metrics(const nlohmann::json& row);

  TrainConfig cfg_;
  Device device_;
  std::unique_ptr<data::Tokenizer> tok_;
  std::unique_ptr<data::TokenDataset> data_;
  nlohmann::json corpus_record_;  // data::corpus_record of the text trained on (saved in the checkpoint)
  std::unique_ptr<data::BatchSampler> sampler_;
  BatchMix mix_;                            // empty: the sampler's batches unchanged
  std::optional<ThreadGovernor> governor_;  // the OpenMP thread count (threads.h)
  // cfg_.precision for the trainer's lifetime (the process-wide setting of tensor/kernels/kernels.h).
  std::optional<kernels::MatmulPrecisionScope> precision_;
  Generator init_gen_, dropout_gen_;
  std::unique_ptr<nn::GPT> model_;
  std::unique_ptr<Optimizer> opt_;
  LRSchedule sched_;
  int64_t step_ = 0;
  std::vector<std::pair<int64_t, double>> train_curve_, val_curve_;
  std::unique_ptr<DataParallel> dp_;     // null: one process
  bool writes_ = true;                   // rank 0 (or the one process) writes files and evaluates
  std::unique_ptr<DirectoryLock> lock_;  // the writer's hold on out_dir (data/process.h)

 public:
  // The data-parallel state (null for one process), for benchmarks.
  DataParallel* data_parallel() const { return dp_.get(); }
};

// A trained decoder read back from a run directory's checkpoint: what `posgrad eval` and `posgrad
// sample` run. The one loaded-model type of a decoder run; LoadedCheckpoint (train/checkpoint.h) is
// the checkpoint's raw contents that this is built from (and that a resume restores). An encoder of
// the comparison's encoder track is another model kind with its own file (LoadedEncoder,
// compare/studies/encoder/encoder.h).
struct LoadedModel {
  TrainConfig config;  // the run's configuration (config.model.vocab_size: the tokenizer's)
  std::unique_ptr<data::Tokenizer> tokenizer;
  Generator init{0}, dropout{0};   // the model's generators, kept alive with it (the weights are loaded)
  std::unique_ptr<nn::GPT> model;  // on the CPU, in training mode: move it with model->to(device)
  int64_t step = 0;
  nlohmann::json corpus;  // data::corpus_record of the text trained on (null: an older checkpoint)
};
// Reads and verifies run_dir's checkpoint (without the optimizer state) and builds its model.
// longest_context(config): the longest sequence the caller will run; the memory estimate (the model
// plus one batch at that length) is checked against physical memory before the model is allocated
// (UsageError, check_memory). IoError: a missing, corrupt or mismatched checkpoint.
std::unique_ptr<LoadedModel> load_model(const std::string& run_dir,
                                        const std::function<int64_t(const TrainConfig&)>& longest_context);

// A duration for progress lines: "0m42s", "3m07s", "1h05m" (negative or non-finite: "?").
std::string format_eta(double seconds);

}  // namespace posgrad::train
