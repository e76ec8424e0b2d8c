// optim.cpp — see optim.h.
#include "train/optim.h"

#include <cmath>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "autograd/node.h"
#include "tensor/kernels/kernels.h"

namespace posgrad::train {

std::vector<ParamGroup> decay_groups(const nn::NamedTensors& params, double weight_decay) {
  ParamGroup decay{{}, weight_decay}, no_decay{{}, 0.0};
  for (const auto& p : params) (p.second.dim() >= 2 ? decay : no_decay).params.push_back(p);
  return {decay, no_decay};
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr) : groups_(std::move(groups)), lr_(lr) {
  POSGRAD_CHECK(lr > 0 && std::isfinite(lr), ValueError, "learning rate must be positive, got ", lr);
  // A tensor listed twice would be updated twice per step (and, in one multi-tensor AdamW call, by two
  // threads at once); PyTorch refuses it too ("some parameters appear in more than one parameter group").
  std::map<const void*, std::string> seen;
  for (const auto& g : groups_)
    for (const auto& [name, p] : g.params) {
      POSGRAD_CHECK(p.is_contiguous() && is_floating(p.dtype()), ValueError, "parameter '", name,
                    "' must be a contiguous floating tensor, got ", p.str());
      if (p.numel() == 0) continue;
      const auto [it, fresh] = seen.emplace(p.raw_data(), name);
      POSGRAD_CHECK(fresh, ValueError, "parameters '", it->second, "' and '", name,
                    "' are the same tensor: a parameter may appear only once in an optimizer");
    }
}

void Optimizer::for_each_with_grad(
    const std::function<void(size_t, size_t, const Tensor&, const Tensor&, double)>& f) const {
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t i = 0; i < groups_[gi].params.size(); ++i) {
      const Tensor& p = groups_[gi].params[i].second;
      Tensor grad = p.grad();
      if (grad.defined()) f(gi, i, p, grad.contiguous(), groups_[gi].weight_decay);
    }
}

void Optimizer::zero_grad() {
  for (auto& g : groups_)
    for (auto& p : g.params) p.second.zero_grad();
}

AdamW::AdamW(const nn::NamedTensors& params, const AdamWOptions& opt)
    : AdamW({ParamGroup{params, opt.weight_decay()}}, opt) {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& opt)
    : Optimizer(std::move(groups), opt.lr()), opt_(opt) {
  POSGRAD_CHECK(opt.beta1() >= 0 && opt.beta1() < 1, ValueError, "AdamW beta1 must be in [0, 1), got ", opt.beta1());
  POSGRAD_CHECK(opt.beta2() >= 0 && opt.beta2() < 1, ValueError, "AdamW beta2 must be in [0, 1), got ", opt.beta2());
  POSGRAD_CHECK(opt.eps() > 0, ValueError, "AdamW eps must be positive, got ", opt.eps());
  for (auto& g : groups_) {
    POSGRAD_CHECK(g.weight_decay >= 0, ValueError, "weight decay must be >= 0, got ", g.weight_decay);
    m_.emplace_back();
    v_.emplace_back();
    for (auto& [n, p] : g.params) {
      m_.back().push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
      v_.back().push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
    }
  }
}

void AdamW::step() {
  ++steps_;
  const double bc1 = 1.0 - std::pow(opt_.beta1(), static_cast<double>(steps_));
  const double bc2 = 1.0 - std::pow(opt_.beta2(), static_cast<double>(steps_));
  // CPU tensors go to one multi-tensor call per dtype (one thread team for the whole model), the others
  // to one kernel each. Every element gets the same arithmetic either way.
  std::vector<Tensor> keep;  // the contiguous gradients the CPU lists point into
  std::vector<kernels::cpu::AdamWTensor<float>> cpu_f32;
  std::vector<kernels::cpu::AdamWTensor<double>> cpu_f64;
  for_each_with_grad([&](size_t gi, size_t i, const Tensor& p, const Tensor& grad, double wd) {
    dispatch_floating(p.dtype(), "AdamW", [&](auto tag) {
      using T = decltype(tag);
      if (p.device().is_cpu() && grad.device().is_cpu()) {
        keep.push_back(grad);
        const kernels::cpu::AdamWTensor<T> a{p.data<T>(),    m_[gi][i].data<T>(), v_[gi][i].data<T>(),
                                             grad.data<T>(), p.numel(),           T(wd)};
        if constexpr (std::is_same_v<T, float>)
          cpu_f32.push_back(a);
        else
          cpu_f64.push_back(a);
        return;
      }
      POSGRAD_KERNEL(p.device(), adamw_step<T>, p.data<T>(), m_[gi][i].data<T>(), v_[gi][i].data<T>(), grad.data<T>(),
                     p.numel(), T(lr_), T(opt_.beta1()), T(opt_.beta2()), T(opt_.eps()), T(wd), T(bc1), T(bc2));
    });
  });
  auto run_cpu = [&](const auto& list) {
    using T = decltype(list.front().weight_decay);
    if (!list.empty())
      kernels::cpu::adamw_step_multi<T>(list.data(), static_cast<int64_t>(list.size()), T(lr_), T(opt_.beta1()),
                                        T(opt_.beta2()), T(opt_.eps()), T(bc1), T(bc2));
  };
  run_cpu(cpu_f32);
  run_cpu(cpu_f64);
}

nn::NamedTensors AdamW::state() const {
  nn::NamedTensors s;
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t i = 0; i < groups_[gi].params.size(); ++i) {
      s.emplace_back("exp_avg." + groups_[gi].params[i].first, m_[gi][i]);
      s.emplace_back("exp_avg_sq." + groups_[gi].params[i].first, v_[gi][i]);
    }
  return s;
}

static const Tensor& find_state(const nn::NamedTensors& s, const std::string& name, const Tensor& like) {
  for (const auto& [n, t] : s)
    if (n == name) {
      POSGRAD_CHECK(t.shape() == like.shape() && t.dtype() == like.dtype(), IoError, "optimizer state '", name,
                    "' has ", t.str(), ", expected ", like.str());
      return t;
    }
  throw IoError("optimizer state is missing '" + name + "'");
}

void AdamW::load_state(const nn::NamedTensors& s, int64_t steps) {
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t i = 0; i < groups_[gi].params.size(); ++i) {
      const auto& name = groups_[gi].params[i].first;
      nn::assign_data(m_[gi][i], find_state(s, "exp_avg." + name, m_[gi][i]));
      nn::assign_data(v_[gi][i], find_state(s, "exp_avg_sq." + name, v_[gi][i]));
    }
  steps_ = steps;
}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& opt) : Optimizer(std::move(groups), opt.lr()), opt_(opt) {
  POSGRAD_CHECK(opt.momentum() >= 0 && opt.momentum() < 1, ValueError, "SGD momentum must be in [0, 1), got ",
                opt.momentum());
  for (auto& g : groups_) {
    buf_.emplace_back();
    for (auto& [n, p] : g.params) buf_.back().push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
  }
}

void SGD::step() {
  ++steps_;
  for_each_with_grad([&](size_t gi, size_t i, const Tensor& p, const Tensor& grad, double wd) {
    dispatch_floating(p.dtype(), "SGD", [&](auto tag) {
      using T = decltype(tag);
      POSGRAD_KERNEL(p.device(), sgd_step<T>, p.data<T>(), buf_[gi][i].data<T>(), grad.data<T>(), p.numel(), T(lr_),
                     T(opt_.momentum()), T(wd));
    });
  });
}

nn::NamedTensors SGD::state() const {
  nn::NamedTensors s;
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t i = 0; i < groups_[gi].params.size(); ++i)
      s.emplace_back("momentum_buffer." + groups_[gi].params[i].first, buf_[gi][i]);
  return s;
}

void SGD::load_state(const nn::NamedTensors& s, int64_t steps) {
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t i = 0; i < groups_[gi].params.size(); ++i)
      nn::assign_data(buf_[gi][i], find_state(s, "momentum_buffer." + groups_[gi].params[i].first, buf_[gi][i]));
  steps_ = steps;
}

namespace {

// The CPU gradients of one dtype, for one sum_squares_multi call; their sums land at sums[index[k]].
template <typename T>
struct CpuSquares {
  std::vector<size_t> index;
  std::vector<const T*> xs;
  std::vector<int64_t> n;
  void add(size_t i, const Tensor& g) {
    index.push_back(i);
    xs.push_back(g.data<T>());
    n.push_back(g.numel());
  }
  void run(std::vector<double>& sums) const {
    std::vector<double> out(xs.size());
    if (!xs.empty())
      kernels::cpu::sum_squares_multi<T>(out.data(), xs.data(), n.data(), static_cast<int64_t>(xs.size()));
    for (size_t k = 0; k < out.size(); ++k) sums[index[k]] = out[k];
  }
};

// The gradients' norm, and `also_read` (scalars) as doubles into *read, with one read of the device:
// each gradient's sum of squares in double, added on the host in parameter order (the same bits for any
// device placement of the kernels). The CUDA sums and the extra scalars go to one device buffer, read
// back with one copy: one synchronisation per call, not one per parameter.
double norm_and_read(const std::vector<Tensor>& params, const std::vector<Tensor>& also_read,
                     std::vector<double>* read) {
  const size_t P = params.size(), E = also_read.size();
  std::vector<double> sums(P, 0.0);
  std::vector<char> on_device(P + E, 0);
  Tensor device_sums;  // (P + E) doubles on the gradients' CUDA device
  // CPU gradients: one multi-tensor call per dtype.
  std::vector<Tensor> keep;  // the contiguous gradients the lists point into
  CpuSquares<float> cpu_f32;
  CpuSquares<double> cpu_f64;
  for (size_t i = 0; i < P; ++i) {
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    g = g.contiguous();
    dispatch_floating(g.dtype(), "grad_norm", [&](auto tag) {
      using T = decltype(tag);
      if (g.device().is_cpu()) {
        keep.push_back(g);
        if constexpr (std::is_same_v<T, float>)
          cpu_f32.add(i, g);
        else
          cpu_f64.add(i, g);
        return;
      }
      if (!device_sums.defined())
        device_sums = Tensor::empty({static_cast<int64_t>(P + E)}, DType::Float64, g.device());
      if (!(device_sums.device() == g.device())) {  // gradients on two GPUs: read this one on its own
        Tensor out = Tensor::empty({1}, DType::Float64, g.device());
        POSGRAD_KERNEL(g.device(), sum_squares<T>, out.data<double>(), g.data<T>(), g.numel());
        sums[i] = out.item();
        return;
      }
      POSGRAD_KERNEL(g.device(), sum_squares<T>, device_sums.data<double>() + i, g.data<T>(), g.numel());
      on_device[i] = 1;
    });
  }
  cpu_f32.run(sums);
  cpu_f64.run(sums);
  if (read) read->assign(E, 0.0);
  for (size_t e = 0; e < E; ++e) {
    const Tensor& v = also_read[e];
    POSGRAD_CHECK(v.defined() && v.numel() == 1, ShapeError, "clip_grad_norm: value ", e, " to read is not a scalar");
    if (device_sums.defined() && v.device() == device_sums.device() && is_floating(v.dtype())) {
      Tensor vc = v.contiguous();
      dispatch_floating(vc.dtype(), "clip_grad_norm", [&](auto tag) {
        using T = decltype(tag);
        POSGRAD_KERNEL(vc.device(), cast, device_sums.data<double>() + P + e, vc.data<T>(), int64_t(1));
      });
      on_device[P + e] = 1;
    } else {
      (*read)[e] = v.item();
    }
  }
  if (device_sums.defined()) {
    const std::vector<double> host = device_sums.to_vector();  // the one synchronisation
    for (size_t i = 0; i < P; ++i)
      if (on_device[i]) sums[i] = host[i];
    for (size_t e = 0; e < E; ++e)
      if (on_device[P + e]) (*read)[e] = host[P + e];
  }
  double total = 0;
  for (const double s : sums) total += s;
  return std::sqrt(total);
}

}  // namespace

double grad_norm(const std::vector<Tensor>& params) { return norm_and_read(params, {}, nullptr); }

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  return clip_grad_norm(params, max_norm, {}, nullptr);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, const std::vector<Tensor>& also_read,
                      std::vector<double>* read) {
  POSGRAD_CHECK(also_read.empty() || read != nullptr, ValueError,
                "clip_grad_norm: values to read but nowhere to put them");
  const double norm = norm_and_read(params, also_read, read);
  if (max_norm <= 0 || !std::isfinite(norm) || norm <= max_norm) return norm;
  const double scale = max_norm / (norm + 1e-6);  // PyTorch's clip_grad_norm_ convention
  for (const auto& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    POSGRAD_CHECK(g.is_contiguous(), ShapeError, "clip_grad_norm: non-contiguous gradient ", g.str());
    dispatch_floating(g.dtype(), "clip_grad_norm", [&](auto tag) {
      using T = decltype(tag);
      POSGRAD_KERNEL(g.device(), unary_forward<T>, g.data<T>(), g.data<T>(), g.numel(), kernels::UnaryOp::MulScalar,
                     T(scale));
    });
  }
  return norm;
}

double LRSchedule::at(int64_t step) const {
  if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup + 1);
  if (!cosine) return lr;
  if (step > decay_steps) return min_lr;
  const double ratio =
      static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, decay_steps - warmup));
  const double coeff = 0.5 * (1.0 + std::cos(M_PI * ratio));
  return min_lr + coeff * (lr - min_lr);
}

}  // namespace posgrad::train
