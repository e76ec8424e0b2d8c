// rope.cpp — the rotary-embedding op (RopeFn): y = R(theta) x on the first dr channels of the last
// dim, explicit backward = the inverse rotation (kernels in tensor/kernels/cpu/rope.cpp, spec §3.3).
// The angles, frequency scalings and YaRN's attention factor are the caller's business
// (nn/posenc/rope.cpp builds cos/sin); positions get no gradient.
#include "autograd/ops/attention.h"

namespace posgrad {

namespace {

struct RopeFn : Function<RopeFn> {
  static constexpr const char* kName = "rope";
  struct Saved {
    Tensor cos, sin;
    bool interleaved = false;
  };
  static Tensor forward(Context<Saved>& ctx, const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved) {
    POSGRAD_CHECK(x.dim() >= 2, ShapeError, "rope: x must be (..., T, D), got ", shape_str(x.shape()));
    const int64_t T = x.size(-2), D = x.size(-1);
    POSGRAD_CHECK(cos.dim() == 2 && cos.shape() == sin.shape() && cos.size(0) == T && 2 * cos.size(1) <= D, ShapeError,
                  "rope: cos/sin must be (T = ", T, ", dr/2 <= ", D / 2, "), got ", shape_str(cos.shape()), " and ",
                  shape_str(sin.shape()));
    POSGRAD_CHECK(is_floating(x.dtype()) && cos.dtype() == x.dtype() && sin.dtype() == x.dtype(), DTypeError,
                  "rope: x, cos, sin must share one floating dtype, got ", x.str(), ", ", cos.str(), ", ", sin.str());
    Tensor cc = cos.contiguous(), sc = sin.contiguous();
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
    const int64_t N = T * D == 0 ? 0 : x.numel() / (T * D), dr = 2 * cos.size(1);
    // On the CPU a (B, H, T, D) view with contiguous rows (the heads split_heads leaves in the (B, T, 3C)
    // projection) is read where it is, not copied first.
    const bool strided = x.device().is_cpu() && x.dim() == 4 && x.numel() > 0 && !x.is_contiguous() &&
                         (x.size(-1) == 1 || x.strides()[3] == 1);
    Tensor xc = strided ? x : x.contiguous();
    dispatch_floating(x.dtype(), kName, [&](auto tag) {
      using Tp = decltype(tag);
      if (strided) {
        const kernels::cpu::HeadStrides xs{x.strides()[0], x.strides()[1], x.strides()[2]};
        kernels::cpu::rope_forward_strided<Tp>(y.data<Tp>(), xc.data<Tp>(), xs, cc.data<Tp>(), sc.data<Tp>(), x.size(0),
                                               x.size(1), T, D, dr, interleaved);
        return;
      }
      POSGRAD_KERNEL(x.device(), rope_forward<Tp>, y.data<Tp>(), xc.data<Tp>(), cc.data<Tp>(), sc.data<Tp>(), N, T, D,
                     dr, interleaved);
    });
    ctx.saved = {cc, sc, interleaved};
    return y;
  }
  static TensorList backward(Context<Saved>& ctx, const TensorList& grads) {
    const auto& s = ctx.saved;
    Tensor dy = grads[0].contiguous();
    const bool cpu = dy.device().is_cpu();  // the CPU kernel writes dx (no zero fill first, the same bits)
    Tensor dx =
        cpu ? Tensor::empty(dy.shape(), dy.dtype(), dy.device()) : Tensor::zeros(dy.shape(), dy.dtype(), dy.device());
    const int64_t T = dy.size(-2), D = dy.size(-1);
    const int64_t N = T * D == 0 ? 0 : dy.numel() / (T * D), dr = 2 * s.cos.size(1);
    dispatch_floating(dy.dtype(), kName, [&](auto tag) {
      using Tp = decltype(tag);
      if (cpu) {
        kernels::cpu::rope_backward_overwrite<Tp>(dx.data<Tp>(), dy.data<Tp>(), s.cos.data<Tp>(), s.sin.data<Tp>(), N,
                                                  T, D, dr, s.interleaved);
        return;
      }
      POSGRAD_KERNEL(dy.device(), rope_backward<Tp>, dx.data<Tp>(), dy.data<Tp>(), s.cos.data<Tp>(), s.sin.data<Tp>(),
                     N, T, D, dr, s.interleaved);
    });
    return {dx, Tensor(), Tensor()};
  }
};

}  // namespace

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved) {
  return RopeFn::apply(x, cos, sin, interleaved);
}

}  // namespace posgrad
