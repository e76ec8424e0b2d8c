// optim.h — optimizers (AdamW, SGD), gradient clipping by global norm, and the LR schedule.
// Updates run as fused kernels (tensor/kernels: adamw_step, sgd_step) over each parameter; on the CPU,
// AdamW and the gradient norm take all parameters in one call (adamw_step_multi, sum_squares_multi:
// one thread team for the model, the same bits as one call per tensor).
// Options follow PyTorch's names and defaults (torch.optim.AdamW: lr 1e-3, betas (0.9, 0.999),
// eps 1e-8, weight_decay 1e-2).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "nn/module.h"

namespace posgrad::train {

struct ParamGroup {
  nn::NamedTensors params;
  double weight_decay = 0.0;
};

// nanoGPT's grouping: weight decay on parameters with >= 2 dims (matmul weights, embeddings),
// none on 1-D parameters (biases, LayerNorm gains).
std::vector<ParamGroup> decay_groups(const nn::NamedTensors& params, double weight_decay);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  void zero_grad();
  void set_lr(double lr) { lr_ = lr; }
  double lr() const { return lr_; }
  int64_t steps() const { return steps_; }
  // Named state tensors ("<kind>.<param name>") and the step count, for checkpoints.
  virtual nn::NamedTensors state() const = 0;
  virtual void load_state(const nn::NamedTensors& s, int64_t steps) = 0;
  const std::vector<ParamGroup>& groups() const { return groups_; }

 protected:
  Optimizer(std::vector<ParamGroup> groups, double lr);
  // Calls f(group index, parameter index, parameter, contiguous gradient, group weight decay) for
  // every parameter that received a gradient (the shared loop of the step() functions).
  void for_each_with_grad(const std::function<void(size_t, size_t, const Tensor&, const Tensor&, double)>& f) const;
  std::vector<ParamGroup> groups_;
  double lr_;
  int64_t steps_ = 0;
};

// AdamW's hyper-parameters, built the libtorch way: AdamWOptions(lr).betas(b1, b2).eps(e).weight_decay(w),
// each setter returning the options, each read by the getter of the same name. PyTorch's defaults.
class AdamWOptions {
 public:
  explicit AdamWOptions(double lr = 1e-3) : lr_(lr) {}
  AdamWOptions& betas(double b1, double b2) {
    beta1_ = b1;
    beta2_ = b2;
    return *this;
  }
  AdamWOptions& eps(double e) {
    eps_ = e;
    return *this;
  }
  AdamWOptions& weight_decay(double w) {
    weight_decay_ = w;
    return *this;
  }
  double lr() const { return lr_; }
  double beta1() const { return beta1_; }
  double beta2() const { return beta2_; }
  double eps() const { return eps_; }
  double weight_decay() const { return weight_decay_; }

 private:
  double lr_, beta1_ = 0.9, beta2_ = 0.999, eps_ = 1e-8, weight_decay_ = 1e-2;
};

class AdamW final : public Optimizer {
 public:
  // PyTorch's AdamW(params, ...): one group, options.weight_decay() on every parameter.
  AdamW(const nn::NamedTensors& params, const AdamWOptions& opt);
  // Groups carry their own weight decay (decay_groups: nanoGPT's grouping); options.weight_decay()
  // is not used.
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& opt);
  void step() override;
  nn::NamedTensors state() const override;
  void load_state(const nn::NamedTensors& s, int64_t steps) override;

 private:
  AdamWOptions opt_;
  std::vector<std::vector<Tensor>> m_, v_;  // per group, per parameter
};

// SGD's hyper-parameters, built as AdamWOptions: SGDOptions(lr).momentum(m).
class SGDOptions {
 public:
  explicit SGDOptions(double lr) : lr_(lr) {}
  SGDOptions& momentum(double m) {
    momentum_ = m;
    return *this;
  }
  double lr() const { return lr_; }
  double momentum() const { return momentum_; }

 private:
  double lr_, momentum_ = 0.0;
};

class SGD final : public Optimizer {
 public:
  // Groups carry their own weight decay (decay_groups).
  SGD(std::vector<ParamGroup> groups, const SGDOptions& opt);
  void step() override;
  nn::NamedTensors state() const override;
  void load_state(const nn::NamedTensors& s, int64_t steps) override;

 private:
  SGDOptions opt_;
  std::vector<std::vector<Tensor>> buf_;
};

// Scales all gradients so that their global L2 norm is at most max_norm (when max_norm > 0).
// Returns the norm before clipping (accumulated in double, fixed order). A non-finite norm is
// returned as is and nothing is scaled — the caller decides (the trainer stops on it).
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);
// The same, reading the scalar tensors `also_read` (e.g. the step's losses, still on the device) in
// the same transfer as the norm: *read gets them as doubles, in order. On a GPU the whole call costs
// one copy to the host and one synchronisation. ShapeError for a value that is not a scalar.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, const std::vector<Tensor>& also_read,
                      std::vector<double>* read);
// L2 norm of the gradients of a set of parameters (for per-group logging): each gradient's sum of squares
// in double, added in parameter order. CUDA gradients are reduced on the device into one buffer that is
// read back once (one synchronisation per call; per parameter only for gradients on a second GPU).
double grad_norm(const std::vector<Tensor>& params);

// Linear warm-up from lr/warmup to lr over `warmup` steps, then cosine decay to min_lr at
// `decay_steps`, then min_lr (nanoGPT's get_lr).
struct LRSchedule {
  double lr = 1e-3, min_lr = 1e-4;
  int64_t warmup = 100, decay_steps = 2000;
  bool cosine = true;  // false: constant lr after warm-up
  double at(int64_t step) const;
};

}  // namespace posgrad::train
