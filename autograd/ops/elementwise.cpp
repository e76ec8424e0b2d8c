// elementwise.cpp — broadcasting binary ops, unary and scalar ops, masked_fill, dropout.
// Broadcasting is resolved here, not in the kernels: inputs are expanded to the output shape
// (contiguous) and a broadcast input's gradient is summed back with sum_to.
#include <cmath>

#include "autograd/ops.h"
#include "tensor/kernels/kernels.h"

namespace posgrad {

using kernels::BinaryOp;
using kernels::UnaryOp;

namespace {

void check_same_kind(const Tensor& a, const Tensor& b, const char* op) {
  POSGRAD_CHECK(a.dtype() == b.dtype(), DTypeError, op, ": dtype mismatch ", a.str(), " vs ", b.str());
  POSGRAD_CHECK(a.device() == b.device(), DeviceError, op, ": device mismatch ", a.str(), " vs ", b.str());
  POSGRAD_CHECK(is_floating(a.dtype()), DTypeError, op, ": expected floating tensors, got ", a.str());
}

constexpr const char* binary_name(BinaryOp op) {
  return op == BinaryOp::Add ? "add" : op == BinaryOp::Sub ? "sub" : op == BinaryOp::Mul ? "mul" : "div";
}

template <BinaryOp OP>
struct BinaryFn : Function<BinaryFn<OP>> {
  static constexpr const char* kName = binary_name(OP);
  static constexpr bool kNeedsInputs = OP == BinaryOp::Mul || OP == BinaryOp::Div;
  struct Saved {
    Tensor a, b;
    Shape a_shape, b_shape, out_shape;
  };
  static Tensor forward(Context<Saved>& ctx, const Tensor& a, const Tensor& b) {
    check_same_kind(a, b, kName);
    Shape out = broadcast_shapes(a.shape(), b.shape());
    Tensor ac = a.expand(out).contiguous(), bc = b.expand(out).contiguous();
    Tensor y = Tensor::empty(out, a.dtype(), a.device());
    dispatch_floating(a.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      POSGRAD_KERNEL(a.device(), binary_forward<T>, y.data<T>(), ac.data<T>(), bc.data<T>(), y.numel(), OP);
    });
    ctx.saved.a_shape = a.shape();
    ctx.saved.b_shape = b.shape();
    ctx.saved.out_shape = out;
    if (kNeedsInputs) {
      ctx.saved.a = save_tensor(ac);
      ctx.saved.b = save_tensor(bc);
    }
    return y;
  }
  static TensorList backward(Context<Saved>& ctx, const TensorList& grads) {
    const auto& s = ctx.saved;
    Tensor dy = grads[0].contiguous();
    if constexpr (OP == BinaryOp::Add) {
      // d(a + b)/da = d(a + b)/db = 1: both inputs get dy itself (summed over broadcast dimensions),
      // as PyTorch's AddBackward passes its gradient on, instead of two copies of it. Gradients are
      // never written in place (the engine accumulates out of place, AccumulateGrad keeps a leaf's
      // gradient only when nothing else holds it), so sharing one tensor is safe.
      return {ctx.needs(0) ? sum_to(dy, s.a_shape) : Tensor(), ctx.needs(1) ? sum_to(dy, s.b_shape) : Tensor()};
    }
    Tensor da, db;
    // Written by the kernel (no zero fill first).
    if (ctx.needs(0)) da = Tensor::empty(s.out_shape, dy.dtype(), dy.device());
    if (ctx.needs(1)) db = Tensor::empty(s.out_shape, dy.dtype(), dy.device());
    dispatch_floating(dy.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      POSGRAD_KERNEL(dy.device(), binary_backward<T>, data_or_null<T>(da), data_or_null<T>(db), dy.data<T>(),
                     data_or_null<T>(s.a), data_or_null<T>(s.b), dy.numel(), OP);
    });
    return {da.defined() ? sum_to(da, s.a_shape) : Tensor(), db.defined() ? sum_to(db, s.b_shape) : Tensor()};
  }
};

template <UnaryOp OP>
struct UnaryFn : Function<UnaryFn<OP>> {
  static constexpr const char* kName = "unary";
  struct Saved {
    Tensor x, y;
    Tensor erf1;  // exact GELU on the CPU: 1 + erf(x / sqrt 2), which its backward would recompute
    double s = 0;
  };
  static Tensor forward(Context<Saved>& ctx, const Tensor& x, double s) {
    POSGRAD_CHECK(is_floating(x.dtype()), DTypeError, kernels::unary_op_name(OP), ": expected a floating tensor, got ",
                  x.str());
    Tensor xc = x.contiguous();
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
    if constexpr (OP == UnaryOp::Gelu) {
      // On the CPU the exact GELU's cost is its erf: when a backward will run, keep it (one
      // activation-sized buffer) rather than evaluate it again there. Same bits either way.
      if (x.device().is_cpu() && ctx.needs_input_grad[0]) {
        Tensor erf1 = Tensor::empty(x.shape(), x.dtype(), x.device());
        dispatch_floating(x.dtype(), kName, [&](auto tag) {
          using T = decltype(tag);
          kernels::cpu::gelu_forward_saving<T>(y.data<T>(), erf1.data<T>(), xc.data<T>(), y.numel());
        });
        ctx.saved.x = save_tensor(xc);
        ctx.saved.erf1 = erf1;
        return y;
      }
    }
    dispatch_floating(x.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      POSGRAD_KERNEL(x.device(), unary_forward<T>, y.data<T>(), xc.data<T>(), y.numel(), OP, T(s));
    });
    ctx.saved.s = s;
    constexpr bool uses_y = OP == UnaryOp::Exp || OP == UnaryOp::Sqrt || OP == UnaryOp::Tanh;
    constexpr bool uses_x = !uses_y && OP != UnaryOp::Neg && OP != UnaryOp::AddScalar && OP != UnaryOp::MulScalar;
    if (uses_y) ctx.saved.y = save_tensor(y);
    if (uses_x) ctx.saved.x = save_tensor(xc);
    return y;
  }
  static TensorList backward(Context<Saved>& ctx, const TensorList& grads) {
    const auto& s = ctx.saved;
    Tensor dy = grads[0].contiguous();
    if (s.erf1.defined()) {  // exact GELU, CPU (forward above): dx written, not accumulated
      Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
      dispatch_floating(dy.dtype(), kName, [&](auto tag) {
        using T = decltype(tag);
        kernels::cpu::gelu_backward_saved<T>(dx.data<T>(), dy.data<T>(), s.x.template data<T>(),
                                             s.erf1.template data<T>(), dy.numel());
      });
      return {dx};
    }
    Tensor dx = Tensor::zeros(dy.shape(), dy.dtype(), dy.device());
    dispatch_floating(dy.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      POSGRAD_KERNEL(dy.device(), unary_backward<T>, dx.data<T>(), dy.data<T>(), data_or_null<T>(s.x),
                     data_or_null<T>(s.y), dy.numel(), OP, T(s.s));
    });
    return {dx};
  }
};

struct MaskedFillFn : Function<MaskedFillFn> {
  static constexpr const char* kName = "masked_fill";
  struct Saved {
    Tensor mask;
  };
  static Tensor forward(Context<Saved>& ctx, const Tensor& x, const Tensor& mask, double value) {
    POSGRAD_CHECK(mask.dtype() == DType::Bool, DTypeError, "masked_fill: mask must be bool, got ", mask.str());
    POSGRAD_CHECK(is_floating(x.dtype()), DTypeError, "masked_fill: expected a floating tensor, got ", x.str());
    POSGRAD_CHECK(broadcast_shapes(x.shape(), mask.shape()) == x.shape(), ShapeError, "masked_fill: mask ",
                  shape_str(mask.shape()), " does not broadcast to ", shape_str(x.shape()));
    Tensor m = mask.expand(x.shape()).contiguous(), xc = x.contiguous();
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
    dispatch_floating(x.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      POSGRAD_KERNEL(x.device(), masked_fill_forward<T>, y.data<T>(), xc.data<T>(), m.data<uint8_t>(), y.numel(),
                     T(value));
    });
    ctx.saved.mask = m;
    return y;
  }
  static TensorList backward(Context<Saved>& ctx, const TensorList& grads) {
    Tensor dy = grads[0].contiguous();
    Tensor dx = Tensor::zeros(dy.shape(), dy.dtype(), dy.device());
    dispatch_floating(dy.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      POSGRAD_KERNEL(dy.device(), masked_fill_backward<T>, dx.data<T>(), dy.data<T>(), ctx.saved.mask.data<uint8_t>(),
                     dy.numel());
    });
    return {dx, Tensor()};
  }
};

struct DropoutFn : Function<DropoutFn> {
  static constexpr const char* kName = "dropout";
  struct Saved {
    double p = 0;
    uint64_t seed = 0, offset = 0;
  };
  static Tensor forward(Context<Saved>& ctx, const Tensor& x, double p, uint64_t seed, uint64_t offset) {
    ctx.saved = {p, seed, offset};
    Tensor xc = x.contiguous();
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
    dispatch_floating(x.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      POSGRAD_KERNEL(x.device(), dropout_forward<T>, y.data<T>(), xc.data<T>(), y.numel(), T(p), seed, offset);
    });
    return y;
  }
  static TensorList backward(Context<Saved>& ctx, const TensorList& grads) {
    const auto& s = ctx.saved;
    Tensor dy = grads[0].contiguous();
    Tensor dx = Tensor::zeros(dy.shape(), dy.dtype(), dy.device());
    dispatch_floating(dy.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      POSGRAD_KERNEL(dy.device(), dropout_backward<T>, dx.data<T>(), dy.data<T>(), dy.numel(), T(s.p), s.seed,
                     s.offset);
    });
    return {dx};
  }
};

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return BinaryFn<BinaryOp::Add>::apply(a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return BinaryFn<BinaryOp::Sub>::apply(a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return BinaryFn<BinaryOp::Mul>::apply(a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return BinaryFn<BinaryOp::Div>::apply(a, b); }
Tensor add_scalar(const Tensor& x, double s) { return UnaryFn<UnaryOp::AddScalar>::apply(x, s); }
Tensor mul_scalar(const Tensor& x, double s) { return UnaryFn<UnaryOp::MulScalar>::apply(x, s); }
Tensor neg(const Tensor& x) { return UnaryFn<UnaryOp::Neg>::apply(x, 0.0); }
Tensor exp(const Tensor& x) { return UnaryFn<UnaryOp::Exp>::apply(x, 0.0); }
Tensor log(const Tensor& x) { return UnaryFn<UnaryOp::Log>::apply(x, 0.0); }
Tensor sqrt(const Tensor& x) { return UnaryFn<UnaryOp::Sqrt>::apply(x, 0.0); }
Tensor pow(const Tensor& x, double e) { return UnaryFn<UnaryOp::Pow>::apply(x, e); }
Tensor tanh(const Tensor& x) { return UnaryFn<UnaryOp::Tanh>::apply(x, 0.0); }
Tensor relu(const Tensor& x) { return UnaryFn<UnaryOp::Relu>::apply(x, 0.0); }
Tensor gelu(const Tensor& x, bool tanh_approx) {
  return tanh_approx ? UnaryFn<UnaryOp::GeluTanh>::apply(x, 0.0) : UnaryFn<UnaryOp::Gelu>::apply(x, 0.0);
}
Tensor silu(const Tensor& x) { return UnaryFn<UnaryOp::Silu>::apply(x, 0.0); }
Tensor clamp_min(const Tensor& x, double lo) { return UnaryFn<UnaryOp::ClampMin>::apply(x, lo); }
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) { return MaskedFillFn::apply(x, mask, value); }

Tensor causal_mask(int64_t T, Device dev) {
  POSGRAD_CHECK(T >= 0, ValueError, "causal_mask: negative length ", T);
  Tensor m = Tensor::zeros({T, T}, DType::Bool);
  uint8_t* p = m.data<uint8_t>();
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = i + 1; j < T; ++j) p[i * T + j] = 1;
  return m.to(dev);
}

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  POSGRAD_CHECK(p >= 0.0 && p < 1.0, ValueError, "dropout: probability must be in [0, 1), got ", p);
  if (!training || p == 0.0) return x;
  uint64_t offset = gen.advance(static_cast<uint64_t>(x.numel()));
  return DropoutFn::apply(x, p, gen.seed(), offset);
}

}  // namespace posgrad
