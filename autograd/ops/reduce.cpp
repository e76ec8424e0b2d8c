// reduce.cpp — sum / mean over dims (keepdim), max over a dim, and sum_to (the backward of
// broadcasting). A multi-dim sum reduces one dim at a time, highest first, with the same kernel;
// its backward broadcasts back one dim at a time with the matching backward kernel.
#include <algorithm>
#include <numeric>

#include "autograd/ops.h"
#include "tensor/kernels/kernels.h"

namespace posgrad {

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    POSGRAD_CHECK(da == db || da == 1 || db == 1, ShapeError, "shapes ", shape_str(a), " and ", shape_str(b),
                  " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  // The result must be countable (shape_numel's rule: empty if any dim is 0), named with both operands.
  if (std::find(out.begin(), out.end(), int64_t(0)) != out.end()) return out;
  int64_t numel = 1;
  for (int64_t d : out)
    POSGRAD_CHECK(d > 0 && !__builtin_mul_overflow(numel, d, &numel), ShapeError, "shapes ", shape_str(a), " and ",
                  shape_str(b), " broadcast to ", shape_str(out), ", whose element count overflows int64");
  return out;
}

namespace {

struct Extents {
  int64_t outer, R, inner;
};
Extents extents(const Shape& s, int64_t d) {
  Extents e{1, s[d], 1};
  for (int64_t i = 0; i < d; ++i) e.outer *= s[i];
  for (size_t i = d + 1; i < s.size(); ++i) e.inner *= s[i];
  return e;
}

struct SumFn : Function<SumFn> {
  static constexpr const char* kName = "sum";
  struct Saved {
    Shape in_shape;
    std::vector<int64_t> dims;
  };  // dims sorted descending
  static Tensor forward(Context<Saved>& ctx, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
    POSGRAD_CHECK(is_floating(x.dtype()), DTypeError, "sum: expected a floating tensor, got ", x.str());
    std::vector<int64_t> ds;
    for (int64_t d : dims) ds.push_back(x.wrap_dim(d));
    std::sort(ds.rbegin(), ds.rend());
    POSGRAD_CHECK(std::adjacent_find(ds.begin(), ds.end()) == ds.end(), ShapeError, "sum: repeated dim for shape ",
                  shape_str(x.shape()));
    ctx.saved = {x.shape(), ds};
    Tensor cur = x.contiguous();
    for (int64_t d : ds) {
      Shape s = cur.shape();
      Extents e = extents(s, d);
      s[d] = 1;
      Tensor y = Tensor::empty(s, x.dtype(), x.device());
      dispatch_floating(x.dtype(), kName, [&](auto tag) {
        using T = decltype(tag);
        POSGRAD_KERNEL(x.device(), sum_dim_forward<T>, y.data<T>(), cur.data<T>(), e.outer, e.R, e.inner);
      });
      cur = y;
    }
    if (keepdim) return cur;
    Shape out;
    for (int64_t i = 0; i < x.dim(); ++i)
      if (std::find(ds.begin(), ds.end(), i) == ds.end()) out.push_back(x.shape()[i]);
    return cur.view(out);
  }
  static TensorList backward(Context<Saved>& ctx, const TensorList& grads) {
    const auto& s = ctx.saved;
    Shape kept = s.in_shape;
    for (int64_t d : s.dims) kept[d] = 1;
    Tensor g = grads[0].contiguous().view(kept);
    for (auto it = s.dims.rbegin(); it != s.dims.rend(); ++it) {  // lowest dim first: reverse of forward
      Shape target = g.shape();
      target[*it] = s.in_shape[*it];
      Extents e = extents(target, *it);
      Tensor dx = Tensor::zeros(target, g.dtype(), g.device());
      dispatch_floating(g.dtype(), kName, [&](auto tag) {
        using T = decltype(tag);
        POSGRAD_KERNEL(g.device(), sum_dim_backward<T>, dx.data<T>(), g.data<T>(), e.outer, e.R, e.inner);
      });
      g = dx;
    }
    return {g};
  }
};

struct MaxFn : Function<MaxFn> {
  static constexpr const char* kName = "max";
  struct Saved {
    Tensor idx;
    Shape in_shape;
    int64_t dim = 0;
  };
  static TensorList forward(Context<Saved>& ctx, const Tensor& x, int64_t dim, bool keepdim) {
    POSGRAD_CHECK(is_floating(x.dtype()), DTypeError, "max: expected a floating tensor, got ", x.str());
    dim = x.wrap_dim(dim);
    POSGRAD_CHECK(x.shape()[dim] > 0, ShapeError, "max over empty dim ", dim, " of shape ", shape_str(x.shape()));
    Tensor xc = x.contiguous();
    Extents e = extents(x.shape(), dim);
    Shape s = x.shape();
    s[dim] = 1;
    Tensor y = Tensor::empty(s, x.dtype(), x.device()), idx = Tensor::empty(s, DType::Int64, x.device());
    dispatch_floating(x.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      POSGRAD_KERNEL(x.device(), max_dim_forward<T>, y.data<T>(), idx.data<int64_t>(), xc.data<T>(), e.outer, e.R,
                     e.inner);
    });
    ctx.saved = {idx, x.shape(), dim};
    if (!keepdim) {
      y = y.squeeze(dim);
      idx = idx.squeeze(dim);
    }
    return {y, idx};
  }
  static TensorList backward(Context<Saved>& ctx, const TensorList& grads) {
    const auto& s = ctx.saved;
    Shape kept = s.in_shape;
    kept[s.dim] = 1;
    Tensor g = grads[0].contiguous().view(kept);
    Extents e = extents(s.in_shape, s.dim);
    Tensor dx = Tensor::zeros(s.in_shape, g.dtype(), g.device());
    dispatch_floating(g.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      POSGRAD_KERNEL(g.device(), max_dim_backward<T>, dx.data<T>(), g.data<T>(), s.idx.data<int64_t>(), e.outer, e.R,
                     e.inner);
    });
    return {dx};
  }
};

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  if (dims.empty()) return x;
  return SumFn::apply(x, dims, keepdim);
}

Tensor sum(const Tensor& x) {
  std::vector<int64_t> all(static_cast<size_t>(x.dim()));
  std::iota(all.begin(), all.end(), 0);
  if (all.empty()) return x;
  return SumFn::apply(x, all, false);
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  int64_t count = 1;
  for (int64_t d : dims) count *= x.size(d);
  POSGRAD_CHECK(count > 0, ShapeError, "mean over an empty dim of shape ", shape_str(x.shape()));
  return mul_scalar(sum(x, dims, keepdim), 1.0 / static_cast<double>(count));
}

Tensor mean(const Tensor& x) {
  POSGRAD_CHECK(x.numel() > 0, ShapeError, "mean of an empty tensor ", x.str());
  return mul_scalar(sum(x), 1.0 / static_cast<double>(x.numel()));
}

std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  TensorList r = MaxFn::apply(x, dim, keepdim);
  return {r[0], r[1]};
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  POSGRAD_CHECK(shape.size() <= x.shape().size(), ShapeError, "sum_to: cannot reduce ", shape_str(x.shape()), " to ",
                shape_str(shape));
  const size_t lead = x.shape().size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < x.shape().size(); ++i) {
    if (i < lead)
      dims.push_back(static_cast<int64_t>(i));
    else if (shape[i - lead] == 1 && x.shape()[i] != 1)
      dims.push_back(static_cast<int64_t>(i));
    else
      POSGRAD_CHECK(shape[i - lead] == x.shape()[i], ShapeError, "sum_to: cannot reduce ", shape_str(x.shape()), " to ",
                    shape_str(shape));
  }
  return sum(x, dims, true).reshape(shape);
}

}  // namespace posgrad
