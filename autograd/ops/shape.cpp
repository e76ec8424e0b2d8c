// shape.cpp — cat and split as autograd Functions. Both move data with the strided copy kernel
// (ops::copy_into -> copy_strided) between whole tensors and narrow() views along `dim`, so
// inputs of any layout are copied in one pass without a contiguous() first. Each is the other's
// backward: the gradient of cat is the slices of its gradient (views, no copy), the gradient of
// split is the cat of its outputs' gradients (the engine supplies zeros for outputs that received
// none). Not here: stack (unsqueeze + cat), chunk into n pieces (split with a computed size).
#include <algorithm>

#include "autograd/ops.h"
#include "autograd/ops/view.h"

namespace posgrad {

namespace {

struct CatFn : Function<CatFn> {
  static constexpr const char* kName = "cat";
  struct Saved {
    std::vector<int64_t> sizes;
    int64_t dim = 0;
  };  // extent of each input along dim

  // xs[i] (..., n_i, ...) -> (..., sum n_i, ...)
  static Tensor forward(Context<Saved>& ctx, const TensorList& xs, int64_t dim) {
    POSGRAD_CHECK(!xs.empty(), ShapeError, "cat: needs at least one tensor");
    const Tensor& x0 = xs[0];
    POSGRAD_CHECK(x0.defined(), ValueError, "cat: tensor 0 is undefined");
    POSGRAD_CHECK(x0.dim() >= 1, ShapeError, "cat: cannot concatenate 0-dim tensors, tensor 0 has shape ",
                  shape_str(x0.shape()));
    const int64_t d = x0.wrap_dim(dim);
    Shape out = x0.shape();
    out[d] = 0;
    std::vector<int64_t> sizes;
    for (size_t i = 0; i < xs.size(); ++i) {
      const Tensor& x = xs[i];
      POSGRAD_CHECK(x.defined(), ValueError, "cat: tensor ", i, " is undefined");
      POSGRAD_CHECK(x.dtype() == x0.dtype(), DTypeError, "cat: tensor ", i, " is ", x.str(), " but tensor 0 is ",
                    x0.str());
      POSGRAD_CHECK(x.device() == x0.device(), DeviceError, "cat: tensor ", i, " is on ", x.device().str(),
                    " but tensor 0 is on ", x0.device().str());
      bool ok = x.dim() == x0.dim();
      for (int64_t k = 0; ok && k < x.dim(); ++k) ok = k == d || x.shape()[k] == x0.shape()[k];
      POSGRAD_CHECK(ok, ShapeError, "cat: tensor ", i, " has shape ", shape_str(x.shape()), " but tensor 0 has shape ",
                    shape_str(x0.shape()), "; shapes must match except in dim ", d);
      sizes.push_back(x.shape()[d]);
      out[d] += x.shape()[d];
    }
    Tensor y = Tensor::empty(out, x0.dtype(), x0.device());
    int64_t off = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (sizes[i] > 0) ops::copy_into(y.narrow(d, off, sizes[i]), xs[i]);
      off += sizes[i];
    }
    ctx.saved = {sizes, d};
    return y;
  }

  static TensorList backward(Context<Saved>& ctx, const TensorList& grads) {
    const auto& s = ctx.saved;
    TensorList dx;
    int64_t off = 0;
    for (size_t i = 0; i < s.sizes.size(); ++i) {
      dx.push_back(ctx.needs(i) ? grads[0].narrow(s.dim, off, s.sizes[i]) : Tensor());
      off += s.sizes[i];
    }
    return dx;
  }
};

struct SplitFn : Function<SplitFn> {
  static constexpr const char* kName = "split";
  struct Saved {
    std::vector<int64_t> sizes;
    int64_t dim = 0;
    Shape in_shape;
  };

  // x (..., sum n_i, ...) -> [(..., n_i, ...)], each a fresh contiguous tensor.
  static TensorList forward(Context<Saved>& ctx, const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
    POSGRAD_CHECK(x.dim() >= 1, ShapeError, "split: cannot split a 0-dim tensor");
    const int64_t d = x.wrap_dim(dim);
    int64_t total = 0;
    for (int64_t n : sizes) {
      POSGRAD_CHECK(n >= 0, ValueError, "split: negative size ", n, " for shape ", shape_str(x.shape()));
      total += n;
    }
    POSGRAD_CHECK(total == x.shape()[d], ShapeError, "split: sizes sum to ", total, " but dim ", d, " of shape ",
                  shape_str(x.shape()), " is ", x.shape()[d]);
    TensorList ys;
    int64_t off = 0;
    for (int64_t n : sizes) {
      Shape s = x.shape();
      s[d] = n;
      Tensor y = Tensor::empty(s, x.dtype(), x.device());
      if (n > 0) ops::copy_into(y, x.narrow(d, off, n));
      ys.push_back(y);
      off += n;
    }
    ctx.saved = {sizes, d, x.shape()};
    return ys;
  }

  static TensorList backward(Context<Saved>& ctx, const TensorList& grads) {
    const auto& s = ctx.saved;
    Tensor dx = Tensor::empty(s.in_shape, grads[0].dtype(), grads[0].device());
    int64_t off = 0;
    for (size_t i = 0; i < s.sizes.size(); ++i) {
      if (s.sizes[i] > 0) {
        Tensor slot = dx.narrow(s.dim, off, s.sizes[i]);
        if (grads[i].defined())
          ops::copy_into(slot, grads[i]);
        else
          ops::copy_into(slot, Tensor::zeros(slot.shape(), dx.dtype(), dx.device()));
      }
      off += s.sizes[i];
    }
    return {dx};
  }
};

// x (B, T, parts * C) -> parts tensors (B, H, T, D), D = C / H, each contiguous (ops.h, split_heads).
struct SplitHeadsFn : Function<SplitHeadsFn> {
  static constexpr const char* kName = "split_heads";
  struct Saved {
    Shape in_shape;
    int64_t parts = 0, heads = 0, D = 0;
    DType dtype = DType::Float32;
    Device device;
  };

  // Part p of x read as (B, H, T, D): element [b, h, t, d] is x[b, t, p C + h D + d].
  static Tensor part_view(const Tensor& x, int64_t p, int64_t H, int64_t D) {
    const Shape& st = x.strides();
    return x.as_strided_nograd({x.size(0), H, x.size(1), D}, {st[0], D * st[2], st[1], st[2]},
                               x.offset() + p * H * D * st[2]);
  }

  static TensorList forward(Context<Saved>& ctx, const Tensor& x, int64_t parts, int64_t heads) {
    POSGRAD_CHECK(parts >= 1 && heads >= 1, ValueError, "split_heads: parts and heads must be >= 1, got ", parts,
                  " and ", heads);
    POSGRAD_CHECK(x.dim() == 3, ShapeError, "split_heads: x must be (B, T, parts * C), got ", shape_str(x.shape()));
    POSGRAD_CHECK(x.size(2) % (parts * heads) == 0, ShapeError, "split_heads: last dim ", x.size(2), " of ",
                  shape_str(x.shape()), " is not ", parts, " parts of ", heads, " equal heads");
    const int64_t B = x.size(0), T = x.size(1), D = x.size(2) / (parts * heads);
    TensorList ys;
    for (int64_t p = 0; p < parts; ++p) {
      if (!x.device().is_cuda()) {  // the CPU attention reads the heads where they are (AttentionFn)
        ys.push_back(part_view(x, p, heads, D));
        continue;
      }
      Tensor y = Tensor::empty({B, heads, T, D}, x.dtype(), x.device());
      if (y.numel() > 0) ops::copy_into(y, part_view(x, p, heads, D));
      ys.push_back(y);
    }
    ctx.saved = {x.shape(), parts, heads, D, x.dtype(), x.device()};
    return ys;
  }

  // The gradient of x itself when the parts' gradients are the parts of one contiguous (B, T, parts C)
  // buffer, as the CPU attention's backward writes them (each grads[p] laid out as part_view of that
  // buffer): nothing to copy. Else undefined.
  static Tensor packed_gradient(const Saved& s, const TensorList& grads) {
    const Tensor& g0 = grads[0];
    if (!g0.defined() || g0.shape() != Shape{s.in_shape[0], s.heads, s.in_shape[1], s.D}) return Tensor();
    const Shape whole = contiguous_strides(s.in_shape);  // (B, T, parts C): {T parts C, parts C, 1}
    const Shape part_strides{whole[0], s.D * whole[2], whole[1], whole[2]};
    for (int64_t p = 0; p < s.parts; ++p) {
      const Tensor& g = grads[static_cast<size_t>(p)];
      if (!g.defined() || !g.shares_storage(g0) || g.dtype() != s.dtype || g.shape() != g0.shape() ||
          g.strides() != part_strides || g.offset() != g0.offset() + p * s.heads * s.D)
        return Tensor();
    }
    // The parts tile [g0.offset(), g0.offset() + numel) of one storage: that range is x's gradient.
    return g0.as_strided_nograd(s.in_shape, whole, g0.offset());
  }

  // A part whose output was not used may come without a gradient: its slot is zeros.
  static TensorList backward(Context<Saved>& ctx, const TensorList& grads) {
    const Saved& s = ctx.saved;
    if (const Tensor whole = packed_gradient(s, grads); whole.defined()) return {whole};
    Tensor dx = Tensor::empty(s.in_shape, s.dtype, s.device);
    if (dx.numel() == 0) return {dx};
    for (int64_t p = 0; p < s.parts; ++p) {
      Tensor slot = part_view(dx, p, s.heads, s.D);
      const Tensor& g = grads[static_cast<size_t>(p)];
      ops::copy_into(slot, g.defined() ? g : Tensor::zeros(slot.shape(), dx.dtype(), dx.device()));
    }
    return {dx};
  }
};

}  // namespace

Tensor cat(const TensorList& xs, int64_t dim) { return CatFn::apply(xs, dim); }

TensorList split_heads(const Tensor& x, int64_t parts, int64_t heads) { return SplitHeadsFn::apply(x, parts, heads); }

TensorList split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  return SplitFn::apply(x, sizes, dim);
}

TensorList split(const Tensor& x, int64_t size, int64_t dim) {
  POSGRAD_CHECK(size > 0, ValueError, "split: chunk size must be positive, got ", size);
  const int64_t n = x.size(dim);
  std::vector<int64_t> sizes;
  for (int64_t off = 0; off < n; off += size) sizes.push_back(std::min(size, n - off));
  if (sizes.empty()) sizes.push_back(0);
  return SplitFn::apply(x, sizes, dim);
}

}  // namespace posgrad
