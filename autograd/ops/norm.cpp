// norm.cpp — layer_norm and rms_norm over the last dim as autograd Functions over the norm
// kernels (formulas and their sources in tensor/kernels/cpu/norm.cpp). x (..., C) is viewed as
// (N, C); the per-row statistics (mean as hi + lo, rstd) are saved so the backward needs no second
// pass over the statistics. The affine weight and bias are optional (undefined tensors).
// Not here: normalisation over several trailing dims (PyTorch's normalized_shape with > 1 dim).
#include "autograd/ops.h"
#include "tensor/kernels/kernels.h"

namespace posgrad {

namespace {

void check_param(const Tensor& x, const Tensor& p, const char* op, const char* what) {
  if (!p.defined()) return;
  POSGRAD_CHECK(p.dtype() == x.dtype(), DTypeError, op, ": ", what, " ", p.str(), " does not match x ", x.str());
  POSGRAD_CHECK(p.device() == x.device(), DeviceError, op, ": ", what, " ", p.str(), " is not on x's device ",
                x.device().str());
  POSGRAD_CHECK(p.dim() == 1 && p.size(0) == x.size(-1), ShapeError, op, ": ", what, " has shape ",
                shape_str(p.shape()), ", expected ", shape_str({x.size(-1)}), " for x ", shape_str(x.shape()));
}

void check_x(const Tensor& x, const char* op, double eps) {
  POSGRAD_CHECK(is_floating(x.dtype()), DTypeError, op, ": expected a floating tensor, got ", x.str());
  POSGRAD_CHECK(x.dim() >= 1 && x.size(-1) > 0, ShapeError, op, ": needs a non-empty last dim, got shape ",
                shape_str(x.shape()));
  POSGRAD_CHECK(eps >= 0, ValueError, op, ": eps must be >= 0, got ", eps);
}

struct LayerNormFn : Function<LayerNormFn> {
  static constexpr const char* kName = "layer_norm";
  struct Saved {
    Tensor x, w, mean, rstd;
  };  // x (N, C) contiguous; mean (N, 2) as hi + lo; rstd (N)

  static Tensor forward(Context<Saved>& ctx, const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
    check_x(x, kName, eps);
    check_param(x, w, kName, "weight");
    check_param(x, b, kName, "bias");
    const int64_t C = x.size(-1), N = x.numel() / C;
    Tensor xc = x.contiguous();
    Tensor wc = w.defined() ? w.contiguous() : w, bc = b.defined() ? b.contiguous() : b;
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
    Tensor mean = Tensor::empty({N, 2}, x.dtype(), x.device()), rstd = Tensor::empty({N}, x.dtype(), x.device());
    dispatch_floating(x.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      POSGRAD_KERNEL(x.device(), layer_norm_forward<T>, y.data<T>(), mean.data<T>(), rstd.data<T>(), xc.data<T>(),
                     data_or_null<T>(wc), data_or_null<T>(bc), N, C, T(eps));
    });
    ctx.saved = {save_tensor(xc), save_tensor(wc), mean, rstd};
    return y;
  }

  static TensorList backward(Context<Saved>& ctx, const TensorList& grads) {
    const auto& s = ctx.saved;
    Tensor dy = grads[0].contiguous();
    const int64_t C = s.x.size(-1), N = s.x.numel() / C;
    Tensor dx, dw, db;
    // dx is always computed: the kernel contract makes only the parameter gradients optional. On the
    // CPU the kernel writes it (no zero fill first, the same bits).
    const bool cpu = dy.device().is_cpu();
    dx =
        cpu ? Tensor::empty(s.x.shape(), dy.dtype(), dy.device()) : Tensor::zeros(s.x.shape(), dy.dtype(), dy.device());
    if (ctx.needs(1)) dw = Tensor::zeros({C}, dy.dtype(), dy.device());
    if (ctx.needs(2)) db = Tensor::zeros({C}, dy.dtype(), dy.device());
    dispatch_floating(dy.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      if (cpu) {
        kernels::cpu::layer_norm_backward_overwrite<T>(dx.data<T>(), data_or_null<T>(dw), data_or_null<T>(db),
                                                       dy.data<T>(), s.x.data<T>(), data_or_null<T>(s.w),
                                                       s.mean.data<T>(), s.rstd.data<T>(), N, C);
        return;
      }
      POSGRAD_KERNEL(dy.device(), layer_norm_backward<T>, data_or_null<T>(dx), data_or_null<T>(dw), data_or_null<T>(db),
                     dy.data<T>(), s.x.data<T>(), data_or_null<T>(s.w), s.mean.data<T>(), s.rstd.data<T>(), N, C);
    });
    return {dx, dw, db};
  }
};

struct RmsNormFn : Function<RmsNormFn> {
  static constexpr const char* kName = "rms_norm";
  struct Saved {
    Tensor x, w, rstd;
  };  // x (N, C) contiguous; rstd (N)

  static Tensor forward(Context<Saved>& ctx, const Tensor& x, const Tensor& w, double eps) {
    check_x(x, kName, eps);
    check_param(x, w, kName, "weight");
    const int64_t C = x.size(-1), N = x.numel() / C;
    Tensor xc = x.contiguous();
    Tensor wc = w.defined() ? w.contiguous() : w;
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
    Tensor rstd = Tensor::empty({N}, x.dtype(), x.device());
    dispatch_floating(x.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      POSGRAD_KERNEL(x.device(), rms_norm_forward<T>, y.data<T>(), rstd.data<T>(), xc.data<T>(), data_or_null<T>(wc), N,
                     C, T(eps));
    });
    ctx.saved = {save_tensor(xc), save_tensor(wc), rstd};
    return y;
  }

  static TensorList backward(Context<Saved>& ctx, const TensorList& grads) {
    const auto& s = ctx.saved;
    Tensor dy = grads[0].contiguous();
    const int64_t C = s.x.size(-1), N = s.x.numel() / C;
    Tensor dx, dw;
    // dx is always computed: the kernel contract makes only the parameter gradients optional.
    const bool cpu = dy.device().is_cpu();  // the CPU kernel writes dx (no zero fill first, the same bits)
    dx =
        cpu ? Tensor::empty(s.x.shape(), dy.dtype(), dy.device()) : Tensor::zeros(s.x.shape(), dy.dtype(), dy.device());
    if (ctx.needs(1)) dw = Tensor::zeros({C}, dy.dtype(), dy.device());
    dispatch_floating(dy.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      if (cpu) {
        kernels::cpu::rms_norm_backward_overwrite<T>(dx.data<T>(), data_or_null<T>(dw), dy.data<T>(), s.x.data<T>(),
                                                     data_or_null<T>(s.w), s.rstd.data<T>(), N, C);
        return;
      }
      POSGRAD_KERNEL(dy.device(), rms_norm_backward<T>, data_or_null<T>(dx), data_or_null<T>(dw), dy.data<T>(),
                     s.x.data<T>(), data_or_null<T>(s.w), s.rstd.data<T>(), N, C);
    });
    return {dx, dw};
  }
};

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  return LayerNormFn::apply(x, w, b, eps);
}

Tensor rms_norm(const Tensor& x, const Tensor& w, double eps) { return RmsNormFn::apply(x, w, eps); }

}  // namespace posgrad
