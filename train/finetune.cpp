// finetune.cpp — see finetune.h.
#include "train/finetune.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>

#include "autograd/ops.h"
#include "tensor/errors.h"
#include "train/evaluate.h"
#include "train/interrupt.h"
#include "train/threads.h"

namespace posgrad::train {

LRSchedule FinetuneSpec::lr_schedule() const {
  return LRSchedule{lr, schedule == FinetuneSchedule::cosine ? min_lr : lr, warmup, iterations,
                    schedule == FinetuneSchedule::cosine};
}

void FinetuneSpec::validate() const {
  auto check_rate = [&](double v, const char* name) {
    POSGRAD_CHECK(std::isfinite(v) && v >= 0, ValueError, label, ": the fine-tuning's ", name,
                  " must be finite and >= 0, got ", v);
  };
  POSGRAD_CHECK(iterations >= 0, ValueError, label, ": the fine-tuning's iterations must be >= 0, got ", iterations);
  POSGRAD_CHECK(warmup >= 0, ValueError, label, ": the fine-tuning's warm-up must be >= 0 steps, got ", warmup);
  POSGRAD_CHECK(grad_accum >= 1, ValueError, label, ": the fine-tuning's grad_accum must be >= 1, got ", grad_accum);
  check_rate(lr, "lr");
  check_rate(min_lr, "min_lr");
  check_rate(weight_decay, "weight_decay");
  check_rate(grad_clip, "grad_clip");
  POSGRAD_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, ValueError, label,
                ": the fine-tuning's betas must lie in [0, 1), got (", beta1, ", ", beta2, ")");
}

FinetuneResult finetune(nn::Module& model, const FinetuneSpec& spec, const StepLossFn& loss_of) {
  spec.validate();
  FinetuneResult r;
  const int64_t n = spec.iterations;
  model.train();
  AdamW opt(decay_groups(model.named_parameters(), spec.weight_decay),
            AdamWOptions(spec.lr).betas(spec.beta1, spec.beta2));
  const LRSchedule sched = spec.lr_schedule();
  const int64_t tail = std::max<int64_t>(1, n / 10);
  // 1/grad_accum, applied only when it is not 1 so that a single micro-batch backpropagates the loss
  // itself (training_step, trainer.cpp, does the same).
  const double scale = 1.0 / static_cast<double>(spec.grad_accum);
  // Progress at each quarter of the steps, once the loop has run kProgressAfter seconds: the
  // minute-long fine-tunings (the passkey test's) say where they are, the second-long ones stay quiet.
  constexpr double kProgressAfter = 10;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t quarter = std::max<int64_t>(1, n / 4);
  for (int64_t it = 0; it < n; ++it) {
    if (it > 0 && it % quarter == 0) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s >= kProgressAfter)
        spdlog::info("{}: step {}/{}, ETA {:.0f} s", spec.label, it, n,
                     s * static_cast<double>(n - it) / static_cast<double>(it));
    }
    follow_job_share();  // a job of compare --jobs takes threads other jobs freed (threads.h)
    if (interrupt_requested())
      throw Interrupted(
          detail::concat(spec.label, " interrupted by ", signal_name(interrupt_signal()), " after ", it, " of ", n,
                         " steps", spec.on_interrupt.empty() ? "" : " (" + spec.on_interrupt + ")"),
          spec.run_dir, it, interrupt_signal());
    opt.set_lr(sched.at(it));
    model.train();
    opt.zero_grad();
    double loss_sum = 0;
    for (int64_t micro = 0; micro < spec.grad_accum; ++micro) {
      Tensor loss = loss_of(it);
      const double l = loss.item();
      if (!std::isfinite(l))
        throw NonFiniteLoss(
            detail::concat(spec.label, ": loss is ", l, " at step ", it + 1, " (micro-batch ", micro, ")"));
      loss_sum += l;
      (scale != 1.0 ? loss * scale : loss).backward();
    }
    const double norm = clip_grad_norm(model.parameters(), spec.grad_clip);
    if (!std::isfinite(norm))
      throw NonFiniteLoss(detail::concat(spec.label, ": gradient norm is ", norm, " at step ", it + 1));
    opt.step();
    const double loss = loss_sum / static_cast<double>(spec.grad_accum);
    if (it == 0) r.first_loss = loss;
    r.final_loss = loss;
    if (it >= n - tail) r.tail_loss += loss / static_cast<double>(tail);
    r.steps = it + 1;
  }
  model.eval();
  return r;
}

FinetuneResult finetune(nn::GPT& model, const FinetuneSpec& spec, Device dev, const StepBatchFn& batch_of) {
  return finetune(static_cast<nn::Module&>(model), spec, [&](int64_t step) {
    auto [x, y] = batch_of(step);
    x = x.to(dev);
    y = y.to(dev);
    return cross_entropy(model.forward(x), y);
  });
}

}  // namespace posgrad::train
