// finetune.h — the short fine-tuning loop of the comparison's studies (synthetic task, length suite,
// passkey, position interpolation, encoder track): a fresh AdamW over a model's parameters, a
// warm-up and schedule, clipping, gradient accumulation, stop signals and non-finite losses handled
// in one place. The caller keeps its own data: a callback gives the loss (or the batch) of each step.
//
// Not the pretraining loop (train/trainer.h): no checkpoints, no evaluation, no metrics files, no
// data parallelism, no resume — an interrupted fine-tuning is run again from its start. Its step is
// the trainer's training_step (trainer.h) without the data-parallel part: the same operations in the
// same order, so that a GPT fine-tuned here takes bit-identically the steps training_step takes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "nn/gpt.h"
#include "nn/module.h"
#include "tensor/tensor.h"
#include "train/optim.h"

namespace posgrad::train {

// The learning rate after warm-up.
enum class FinetuneSchedule {
  constant,  // lr until the end
  cosine,    // cosine decay from lr to min_lr at the last step (nanoGPT's get_lr)
};

struct FinetuneSpec {
  std::string label;       // names the run in messages: "synthetic task (rope seed 1)"
  int64_t iterations = 0;  // optimizer steps (0: nothing is trained)
  double lr = 1e-3;        // peak learning rate, reached at the end of the warm-up
  int64_t warmup = 0;      // steps of linear warm-up: step k < warmup runs at lr·(k+1)/(warmup+1)
  FinetuneSchedule schedule = FinetuneSchedule::cosine;
  double min_lr = 1e-4;               // the cosine's floor (unused by constant)
  double beta1 = 0.9, beta2 = 0.999;  // AdamW's betas (eps: PyTorch's 1e-8)
  double weight_decay = 0.0;          // decoupled, on parameters of >= 2 dims only (decay_groups, optim.h)
  double grad_clip = 1.0;             // the global gradient L2 norm is clipped to this (0: no clipping)
  int64_t grad_accum = 1;             // micro-batches per step, each loss scaled by 1/grad_accum before backward
  // Interrupted::run_dir of a stop signal ("" when the caller has none), and what a re-run of the
  // command does, appended to the message in parentheses ("" for nothing).
  std::string run_dir, on_interrupt;

  // The rate of each step (train/optim.h): decay_steps = iterations.
  LRSchedule lr_schedule() const;
  // ValueError naming the label and the field: iterations, warmup < 0; grad_accum < 1; lr, min_lr,
  // weight_decay, grad_clip negative or not finite; a beta outside [0, 1).
  void validate() const;
};

// The warm-up of the comparison's short loops: a tenth of the steps, at least one.
inline int64_t tenth_warmup(int64_t iterations) { return std::max<int64_t>(1, iterations / 10); }

struct FinetuneResult {
  int64_t steps = 0;      // steps taken (= spec.iterations)
  double first_loss = 0;  // the loss of the first step: mean over its micro-batches (0 without steps)
  double final_loss = 0;  // the loss of the last step
  // The mean loss of the last max(1, iterations/10) steps, each step's loss divided by that count
  // and summed in step order (0 without steps).
  double tail_loss = 0;
};

// One micro-batch's loss at `step` (0-based): a scalar tensor whose graph reaches the parameters
// (a mean over the micro-batch's targets). Called grad_accum times per step, in order.
using StepLossFn = std::function<Tensor(int64_t step)>;
// One micro-batch of next-token data at `step`: x, y int64 (B, T) on any device.
using StepBatchFn = std::function<std::pair<Tensor, Tensor>(int64_t step)>;

// Fine-tunes `model` for spec.iterations steps, logging its step and ETA at each quarter of them once
// it has run 10 s (spdlog info). Each step, in this order: a stop signal received
// since the last step (train/interrupt.h) throws Interrupted — "<label> interrupted by SIGINT after
// k of n steps (<on_interrupt>)", Interrupted::step = k, the model as step k left it —;
// the rate from lr_schedule(); model.train(); zero_grad; grad_accum times: loss_of(step), its value
// checked, backward of loss / grad_accum; the global gradient norm clipped; AdamW's step. A loss or
// gradient norm that is NaN or infinite throws NonFiniteLoss "<label>: loss is nan at step k
// (micro-batch m)" / "<label>: gradient norm is inf at step k" (k 1-based) before the optimizer
// changes anything. Returns with the model in eval mode. ValueError from spec.validate().
FinetuneResult finetune(nn::Module& model, const FinetuneSpec& spec, const StepLossFn& loss_of);

// The same for a decoder on next-token data: the loss of a micro-batch is the mean cross-entropy of
// model.forward(x) against y (targets -100 ignored), with x and y moved to dev.
FinetuneResult finetune(nn::GPT& model, const FinetuneSpec& spec, Device dev, const StepBatchFn& batch_of);

}  // namespace posgrad::train
