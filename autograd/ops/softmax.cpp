// softmax.cpp — softmax and log_softmax over any dim as autograd Functions. The kernels work on
// the last dim of a contiguous (N, C) array; for another dim the input is transposed so that dim
// comes last and made contiguous, and the result is returned as the transposed-back view (its
// gradient is transposed the same way in backward). Both backwards use the saved output only.
// Not here: masking (masked_fill before softmax), the fused attention softmax, cross-entropy
// (cross_entropy.cpp fuses log_softmax with the loss).
#include "autograd/ops.h"
#include "tensor/kernels/kernels.h"

namespace posgrad {

namespace {

template <bool LOG>
struct SoftmaxFn : Function<SoftmaxFn<LOG>> {
  static constexpr const char* kName = LOG ? "log_softmax" : "softmax";
  struct Saved {
    Tensor y;
    int64_t dim = -1;
  };  // y: the output with `dim` moved last, contiguous (N, C)

  static Tensor forward(Context<Saved>& ctx, const Tensor& x, int64_t dim) {
    POSGRAD_CHECK(is_floating(x.dtype()), DTypeError, kName, ": expected a floating tensor, got ", x.str());
    POSGRAD_CHECK(x.dim() >= 1, ShapeError, kName, ": needs at least one dim, got shape ", shape_str(x.shape()));
    const int64_t d = x.wrap_dim(dim), last = x.dim() - 1;
    Tensor xt = (d == last ? x : x.transpose(d, last)).contiguous();  // (..., C)
    const int64_t C = xt.shape().back(), N = C == 0 ? 0 : xt.numel() / C;
    Tensor yt = Tensor::empty(xt.shape(), x.dtype(), x.device());
    if (N > 0)
      dispatch_floating(x.dtype(), kName, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (LOG)
          POSGRAD_KERNEL(x.device(), log_softmax_forward<T>, yt.data<T>(), xt.data<T>(), N, C);
        else
          POSGRAD_KERNEL(x.device(), softmax_forward<T>, yt.data<T>(), xt.data<T>(), N, C);
      });
    ctx.saved.y = save_tensor(yt);
    ctx.saved.dim = d;
    return d == last ? yt : yt.transpose(d, last);
  }

  static TensorList backward(Context<Saved>& ctx, const TensorList& grads) {
    const Tensor& yt = ctx.saved.y;
    const int64_t d = ctx.saved.dim, last = yt.dim() - 1;
    Tensor dyt = (d == last ? grads[0] : grads[0].transpose(d, last)).contiguous();
    Tensor dxt = Tensor::zeros(yt.shape(), yt.dtype(), yt.device());
    const int64_t C = yt.shape().back(), N = C == 0 ? 0 : yt.numel() / C;
    if (N > 0)
      dispatch_floating(yt.dtype(), kName, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (LOG)
          POSGRAD_KERNEL(yt.device(), log_softmax_backward<T>, dxt.data<T>(), dyt.data<T>(), yt.data<T>(), N, C);
        else
          POSGRAD_KERNEL(yt.device(), softmax_backward<T>, dxt.data<T>(), dyt.data<T>(), yt.data<T>(), N, C);
      });
    return {d == last ? dxt : dxt.transpose(d, last)};
  }
};

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return SoftmaxFn<false>::apply(x, dim); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return SoftmaxFn<true>::apply(x, dim); }

}  // namespace posgrad
