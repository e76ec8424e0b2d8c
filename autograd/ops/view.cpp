// view.cpp — views (view/reshape, permute/transpose, narrow, expand) and copies (contiguous,
// clone, dtype and device conversion) as autograd Functions. Views share storage with their input;
// their backward maps the gradient back to the input's shape: reshape, inverse permutation,
// zero-padding (narrow) and summing over broadcast dims (expand). Each forward is the
// autograd-free primitive of tensor/nograd.h, which Tensor's methods also run directly for a tensor
// that does not require grad.
#include "autograd/ops/view.h"

#include "autograd/ops.h"
#include "tensor/nograd.h"

namespace posgrad::ops {

namespace {

struct ViewFn : Function<ViewFn> {
  static constexpr const char* kName = "view";
  struct Saved {
    Shape in_shape;
  };
  static Tensor forward(Context<Saved>& ctx, const Tensor& x, const Shape& shape, const Shape& strides) {
    ctx.saved.in_shape = x.shape();
    return nograd::view_as(x, shape, strides);
  }
  static TensorList backward(Context<Saved>& ctx, const TensorList& g) { return {g[0].reshape(ctx.saved.in_shape)}; }
};

struct PermuteFn : Function<PermuteFn> {
  static constexpr const char* kName = "permute";
  struct Saved {
    std::vector<int64_t> inverse;
  };
  static Tensor forward(Context<Saved>& ctx, const Tensor& x, const std::vector<int64_t>& dims) {
    ctx.saved.inverse.resize(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) ctx.saved.inverse[dims[i]] = static_cast<int64_t>(i);
    return nograd::permute(x, dims);
  }
  static TensorList backward(Context<Saved>& ctx, const TensorList& g) { return {g[0].permute(ctx.saved.inverse)}; }
};

struct NarrowFn : Function<NarrowFn> {
  static constexpr const char* kName = "narrow";
  struct Saved {
    Shape in_shape;
    int64_t dim = 0, start = 0, length = 0;
  };
  static Tensor forward(Context<Saved>& ctx, const Tensor& x, int64_t dim, int64_t start, int64_t length) {
    ctx.saved = {x.shape(), dim, start, length};
    return nograd::narrow(x, dim, start, length);
  }
  static TensorList backward(Context<Saved>& ctx, const TensorList& g) {
    const auto& sv = ctx.saved;
    Tensor dx = Tensor::zeros(sv.in_shape, g[0].dtype(), g[0].device());
    copy_into(dx.narrow(sv.dim, sv.start, sv.length), g[0]);
    return {dx};
  }
};

struct ExpandFn : Function<ExpandFn> {
  static constexpr const char* kName = "expand";
  struct Saved {
    Shape in_shape;
  };
  static Tensor forward(Context<Saved>& ctx, const Tensor& x, const Shape& shape) {
    ctx.saved.in_shape = x.shape();
    return nograd::expand(x, shape);
  }
  static TensorList backward(Context<Saved>& ctx, const TensorList& g) { return {sum_to(g[0], ctx.saved.in_shape)}; }
};

struct CopyFn : Function<CopyFn> {
  static constexpr const char* kName = "copy";
  struct Saved {};
  static Tensor forward(Context<Saved>&, const Tensor& x) { return nograd::copy(x); }
  static TensorList backward(Context<Saved>&, const TensorList& g) { return {g[0]}; }
};

struct ToDTypeFn : Function<ToDTypeFn> {
  static constexpr const char* kName = "to_dtype";
  struct Saved {
    DType from = DType::Float32;
  };
  static Tensor forward(Context<Saved>& ctx, const Tensor& x, DType t) {
    ctx.saved.from = x.dtype();
    return nograd::to_dtype(x, t);
  }
  static TensorList backward(Context<Saved>& ctx, const TensorList& g) {
    return {is_floating(ctx.saved.from) ? g[0].to(ctx.saved.from) : Tensor()};
  }
};

struct ToDeviceFn : Function<ToDeviceFn> {
  static constexpr const char* kName = "to_device";
  struct Saved {
    Device from;
  };
  static Tensor forward(Context<Saved>& ctx, const Tensor& x, Device d) {
    ctx.saved.from = x.device();
    return nograd::to_device(x, d);
  }
  static TensorList backward(Context<Saved>& ctx, const TensorList& g) { return {g[0].to(ctx.saved.from)}; }
};

}  // namespace

Tensor view_as(const Tensor& x, const Shape& shape, const Shape& strides) { return ViewFn::apply(x, shape, strides); }
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) { return PermuteFn::apply(x, dims); }
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  return NarrowFn::apply(x, dim, start, length);
}
Tensor expand(const Tensor& x, const Shape& shape) { return ExpandFn::apply(x, shape); }
Tensor copy(const Tensor& x) { return CopyFn::apply(x); }
Tensor to_dtype(const Tensor& x, DType t) { return ToDTypeFn::apply(x, t); }
Tensor to_device(const Tensor& x, Device d) { return ToDeviceFn::apply(x, d); }

}  // namespace posgrad::ops
