// view.cpp — views (view/reshape, permute/transpose, narrow, expand) and copies (contiguous,
// clone, dtype and device conversion) as autograd Functions. Views share storage with their input;
// their backward maps the gradient back to the input's shape: reshape, inverse permutation,
// zero-padding (narrow) and summing over broadcast dims (expand).
#include "autograd/ops/view.h"

#include "autograd/ops.h"
#include "tensor/kernels/kernels.h"

namespace posgrad::ops {

void copy_into(const Tensor& dst, const Tensor& src) {
  POSGRAD_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype() && dst.device() == src.device(),
                ShapeError, "copy_into: ", dst.str(), " <- ", src.str());
  const int nd = static_cast<int>(dst.dim());
  const int64_t* shape = dst.shape().data();
  const int64_t* ds = dst.strides().data();
  const int64_t* ss = src.strides().data();
  Device dev = dst.device();
  switch (dst.dtype()) {
    case DType::Float32: POSGRAD_KERNEL(dev, copy_strided<float>, dst.data<float>(), src.data<float>(), nd, shape, ds, ss); break;
    case DType::Float64: POSGRAD_KERNEL(dev, copy_strided<double>, dst.data<double>(), src.data<double>(), nd, shape, ds, ss); break;
    case DType::Int64: POSGRAD_KERNEL(dev, copy_strided<int64_t>, dst.data<int64_t>(), src.data<int64_t>(), nd, shape, ds, ss); break;
    case DType::Bool: POSGRAD_KERNEL(dev, copy_strided<uint8_t>, dst.data<uint8_t>(), src.data<uint8_t>(), nd, shape, ds, ss); break;
  }
}

namespace {

struct ViewFn : Function<ViewFn> {
  static constexpr const char* kName = "view";
  struct Saved { Shape in_shape; };
  static Tensor forward(Context<Saved>& ctx, const Tensor& x, const Shape& shape, const Shape& strides) {
    ctx.saved.in_shape = x.shape();
    return x.as_strided_nograd(shape, strides, x.offset());
  }
  static TensorList backward(Context<Saved>& ctx, const TensorList& g) { return {g[0].reshape(ctx.saved.in_shape)}; }
};

struct PermuteFn : Function<PermuteFn> {
  static constexpr const char* kName = "permute";
  struct Saved { std::vector<int64_t> inverse; };
  static Tensor forward(Context<Saved>& ctx, const Tensor& x, const std::vector<int64_t>& dims) {
    Shape s(dims.size()), st(dims.size());
    ctx.saved.inverse.resize(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) {
      s[i] = x.shape()[dims[i]];
      st[i] = x.strides()[dims[i]];
      ctx.saved.inverse[dims[i]] = static_cast<int64_t>(i);
    }
    return x.as_strided_nograd(s, st, x.offset());
  }
  static TensorList backward(Context<Saved>& ctx, const TensorList& g) { return {g[0].permute(ctx.saved.inverse)}; }
};

struct NarrowFn : Function<NarrowFn> {
  static constexpr const char* kName = "narrow";
  struct Saved { Shape in_shape; int64_t dim = 0, start = 0, length = 0; };
  static Tensor forward(Context<Saved>& ctx, const Tensor& x, int64_t dim, int64_t start, int64_t length) {
    ctx.saved = {x.shape(), dim, start, length};
    Shape s = x.shape();
    s[dim] = length;
    return x.as_strided_nograd(s, x.strides(), x.offset() + start * x.strides()[dim]);
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
  struct Saved { Shape in_shape; };
  static Tensor forward(Context<Saved>& ctx, const Tensor& x, const Shape& shape) {
    ctx.saved.in_shape = x.shape();
    Shape st(shape.size(), 0);
    size_t lead = shape.size() - x.shape().size();
    for (size_t i = lead; i < shape.size(); ++i)
      st[i] = x.shape()[i - lead] == shape[i] ? x.strides()[i - lead] : 0;
    return x.as_strided_nograd(shape, st, x.offset());
  }
  static TensorList backward(Context<Saved>& ctx, const TensorList& g) { return {sum_to(g[0], ctx.saved.in_shape)}; }
};

struct CopyFn : Function<CopyFn> {
  static constexpr const char* kName = "copy";
  struct Saved {};
  static Tensor forward(Context<Saved>&, const Tensor& x) {
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
    copy_into(y, x);
    return y;
  }
  static TensorList backward(Context<Saved>&, const TensorList& g) { return {g[0]}; }
};

struct ToDTypeFn : Function<ToDTypeFn> {
  static constexpr const char* kName = "to_dtype";
  struct Saved { DType from = DType::Float32; };
  static Tensor forward(Context<Saved>& ctx, const Tensor& x, DType t) {
    ctx.saved.from = x.dtype();
    Tensor c = x.contiguous();
    Tensor y = Tensor::empty(x.shape(), t, x.device());
    const int64_t n = x.numel();
    auto run = [&](auto* out) {
      switch (c.dtype()) {
        case DType::Float32: POSGRAD_KERNEL(x.device(), cast, out, c.data<float>(), n); break;
        case DType::Float64: POSGRAD_KERNEL(x.device(), cast, out, c.data<double>(), n); break;
        case DType::Int64: POSGRAD_KERNEL(x.device(), cast, out, c.data<int64_t>(), n); break;
        case DType::Bool: POSGRAD_KERNEL(x.device(), cast, out, c.data<uint8_t>(), n); break;
      }
    };
    switch (t) {
      case DType::Float32: run(y.data<float>()); break;
      case DType::Float64: run(y.data<double>()); break;
      case DType::Int64: run(y.data<int64_t>()); break;
      case DType::Bool: run(y.data<uint8_t>()); break;
    }
    return y;
  }
  static TensorList backward(Context<Saved>& ctx, const TensorList& g) {
    return {is_floating(ctx.saved.from) ? g[0].to(ctx.saved.from) : Tensor()};
  }
};

struct ToDeviceFn : Function<ToDeviceFn> {
  static constexpr const char* kName = "to_device";
  struct Saved { Device from; };
  static Tensor forward(Context<Saved>& ctx, const Tensor& x, Device d) {
    ctx.saved.from = x.device();
    Tensor c = x.contiguous();
    Tensor y = Tensor::empty(x.shape(), x.dtype(), d);
    size_t n = static_cast<size_t>(x.numel()) * dtype_size(x.dtype());
    Device gpu = d.is_cuda() ? d : x.device();
    backend(gpu.type).copy(y.raw_data(), d, c.raw_data(), x.device(), n);
    return y;
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
