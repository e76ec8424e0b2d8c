// matmul.cpp — batched matrix products: matmul(a, b) with broadcast batch dims and linear(x, w, b)
// in PyTorch's nn.Linear layout, as autograd Functions over the GEMM kernels (gemm, gemm_batched).
// Not here: the GEMM itself (tensor/kernels/cpu/gemm.cpp, cuBLAS on CUDA), 1-D operands
// (matrix-vector products: unsqueeze first), integer matmul.
//
// Layout without copies. A GEMM operand is a matrix stored row-major with a leading dimension,
// optionally read transposed. An operand whose last two dims are row-major (stride(-1) == 1,
// stride(-2) >= cols) is passed as is; one whose last two dims are a transposed row-major
// matrix (stride(-2) == 1, stride(-1) >= rows — e.g. k.transpose(-2, -1)) is passed with the
// trans flag and ld = stride(-1); anything else is made contiguous first. Batch dims are
// described by per-dim element strides (0 for a broadcast dim). The innermost batch dims whose
// strides collapse to a single stride for every operand go to one gemm_batched call (stride 0
// for a broadcast operand); any remaining outer batch dims are looped over.
//
// Backward (the standard identities, e.g. PyTorch's derivatives.yaml for mm/bmm):
//   dA = dC @ B^T,  dB = A^T @ dC
// expressed as GEMM trans flags on the saved operands — no transposed copies. The gradient of a
// broadcast operand sums over its broadcast batch dims: either as one GEMM whose inner dimension
// runs over the stacked batch (dB = A_all^T dC_all when A and dC are stacked row-major, e.g. the
// weight of (B, T, C) @ (C, N)), or as a sequential loop of GEMMs accumulating with beta = 1.
// Both orders are fixed, so results are deterministic for a given thread count.
#include <algorithm>

#include "autograd/ops.h"
#include "autograd/ops/view.h"
#include "tensor/kernels/kernels.h"

namespace posgrad {

namespace {

void check_pair(const Tensor& a, const Tensor& b, const char* op, const char* an, const char* bn) {
  POSGRAD_CHECK(a.dtype() == b.dtype(), DTypeError, op, ": dtype mismatch, ", an, " is ", a.str(), " but ", bn, " is ",
                b.str());
  POSGRAD_CHECK(a.device() == b.device(), DeviceError, op, ": device mismatch, ", an, " is ", a.str(), " but ", bn,
                " is ", b.str());
  POSGRAD_CHECK(is_floating(a.dtype()), DTypeError, op, ": expected floating tensors, got ", a.str());
}

// How a matrix operand is handed to GEMM: the (possibly copied) tensor, whether its last two dims
// are a transposed row-major matrix, and the row stride of the stored matrix.
struct GemmLayout {
  Tensor t;
  bool trans = false;
  int64_t ld = 1;
};

// x (..., R, C): use x as is when its last two dims are row-major or a transposed row-major
// matrix, else a contiguous copy.
GemmLayout gemm_layout(const Tensor& x) {
  const int64_t d = x.dim();
  const int64_t R = x.shape()[d - 2], C = x.shape()[d - 1];
  const int64_t sr = x.strides()[d - 2], sc = x.strides()[d - 1];
  if ((sc == 1 || C <= 1) && (sr >= std::max<int64_t>(C, 1) || R <= 1))
    return {x, false, R <= 1 ? std::max<int64_t>(C, 1) : sr};
  if ((sr == 1 || R <= 1) && (sc >= std::max<int64_t>(R, 1) || C <= 1))
    return {x, true, C <= 1 ? std::max<int64_t>(R, 1) : sc};
  Tensor c = x.contiguous();
  return {c, false, std::max<int64_t>(C, 1)};
}

// Element strides of x's batch dims aligned to the broadcast batch shape `bs` (0 where x is
// broadcast). x has at least 2 dims; its batch dims are all but the last two.
std::vector<int64_t> batch_strides(const Tensor& x, const Shape& bs) {
  const int64_t nb = static_cast<int64_t>(bs.size());
  const int64_t xb = x.dim() - 2, lead = nb - xb;
  std::vector<int64_t> st(static_cast<size_t>(nb), 0);
  for (int64_t i = 0; i < xb; ++i)
    if (x.shape()[i] == bs[lead + i] && bs[lead + i] != 1) st[lead + i] = x.strides()[i];
  return st;
}

// Batch strides of a contiguous tensor of shape `shape` (..., R, C), aligned to `bs`.
std::vector<int64_t> contiguous_batch_strides(const Shape& shape, const Shape& bs) {
  Shape st = contiguous_strides(shape);
  const int64_t nb = static_cast<int64_t>(bs.size());
  const int64_t xb = static_cast<int64_t>(shape.size()) - 2, lead = nb - xb;
  std::vector<int64_t> out(static_cast<size_t>(nb), 0);
  for (int64_t i = 0; i < xb; ++i)
    if (shape[i] == bs[lead + i] && bs[lead + i] != 1) out[lead + i] = st[i];
  return out;
}

// One operand of a batched product: pointer to matrix 0, layout, per-batch-dim strides.
template <typename T>
struct MatArg {
  const T* ptr;
  bool trans;
  int64_t ld;
  std::vector<int64_t> bst;
};

// Whether strides st collapse to one stride over batch dims [p, nb) of bs.
bool collapses(const std::vector<int64_t>& st, const Shape& bs, size_t p) {
  for (size_t d = p; d + 1 < bs.size(); ++d)
    if (st[d] != st[d + 1] * bs[d + 1]) return false;
  return true;
}

// out_b (M, N) = op(L_b) (M, K) @ op(R_b) (K, N) + beta * out_b for every batch index b of bs.
// Batch dims where out's stride is 0 are reductions: their products are summed into the same
// out matrix (beta must then be 1 with out zero-filled, or out pre-filled). ldo is out's row stride.
template <typename T>
void batched_product(Device dev, T* out, std::vector<int64_t> ost, int64_t ldo, MatArg<T> L, MatArg<T> R, Shape bs,
                     int64_t M, int64_t N, int64_t K, T beta) {
  // Drop size-1 batch dims: they contribute nothing.
  {
    Shape b2;
    std::vector<int64_t> o2, l2, r2;
    for (size_t d = 0; d < bs.size(); ++d)
      if (bs[d] != 1) {
        b2.push_back(bs[d]);
        o2.push_back(ost[d]);
        l2.push_back(L.bst[d]);
        r2.push_back(R.bst[d]);
      }
    bs = b2;
    ost = o2;
    L.bst = l2;
    R.bst = r2;
  }
  const size_t nb = bs.size();
  const int64_t total = shape_numel(bs);
  if (total == 0 || M == 0 || N == 0 || K == 0) return;  // callers zero-fill when K == 0

  // Fully reduced output whose sum over the batch is one GEMM with the batch folded into K:
  // sum_b op(L_b) op(R_b) = [op(L_0) .. op(L_n)] @ [op(R_0); ..; op(R_n)] when L is stored
  // transposed with its matrices stacked by rows (stride K * ld) and R row-major likewise.
  const bool all_reduced = nb > 0 && std::all_of(ost.begin(), ost.end(), [](int64_t s) { return s == 0; });
  if (all_reduced && total > 1 && L.trans && !R.trans && collapses(L.bst, bs, 0) && collapses(R.bst, bs, 0) &&
      L.bst[nb - 1] == K * L.ld && R.bst[nb - 1] == K * R.ld) {
    POSGRAD_KERNEL(dev, gemm<T>, out, L.ptr, R.ptr, M, N, K * total, ldo, L.ld, R.ld, L.trans, R.trans, T(1), beta);
    return;
  }

  // Smallest p such that dims [p, nb) collapse for every operand and out is not reduced there.
  size_t p = 0;
  for (; p < nb; ++p) {
    const bool out_ok = collapses(ost, bs, p) && ost[nb - 1] != 0;
    if (out_ok && collapses(L.bst, bs, p) && collapses(R.bst, bs, p)) break;
  }
  int64_t inner = 1, outer = 1;
  for (size_t d = p; d < nb; ++d) inner *= bs[d];
  for (size_t d = 0; d < p; ++d) outer *= bs[d];
  const int64_t so = p < nb ? ost[nb - 1] : 0, sl = p < nb ? L.bst[nb - 1] : 0, sr = p < nb ? R.bst[nb - 1] : 0;
  for (int64_t o = 0; o < outer; ++o) {  // outer batch dims, row-major order (fixed summation order)
    int64_t rem = o, oo = 0, lo = 0, ro = 0;
    for (size_t d = p; d-- > 0;) {
      const int64_t i = rem % bs[d];
      rem /= bs[d];
      oo += i * ost[d];
      lo += i * L.bst[d];
      ro += i * R.bst[d];
    }
    POSGRAD_KERNEL(dev, gemm_batched<T>, out + oo, L.ptr + lo, R.ptr + ro, inner, M, N, K, ldo, L.ld, R.ld, so, sl, sr,
                   L.trans, R.trans, T(1), beta);
  }
}

// Whether a gradient buffer with batch strides st (over bs) receives several products per matrix.
bool is_reduced(const std::vector<int64_t>& st, const Shape& bs) {
  for (size_t d = 0; d < bs.size(); ++d)
    if (bs[d] != 1 && st[d] == 0) return true;
  return false;
}

struct MatmulFn : Function<MatmulFn> {
  static constexpr const char* kName = "matmul";
  struct Saved {
    Tensor a, b;  // the GEMM operands as used in forward (views or contiguous copies)
    bool ta = false, tb = false;
    int64_t lda = 1, ldb = 1;
    Shape a_shape, b_shape, bs;  // bs: broadcast batch shape
  };

  // a (..., M, K), b (..., K, N) -> (bs..., M, N)
  static Tensor forward(Context<Saved>& ctx, const Tensor& a, const Tensor& b) {
    check_pair(a, b, "matmul", "a", "b");
    POSGRAD_CHECK(a.dim() >= 2 && b.dim() >= 2, ShapeError, "matmul: both operands need >= 2 dims, got a ",
                  shape_str(a.shape()), " and b ", shape_str(b.shape()), " (unsqueeze a vector first)");
    const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
    POSGRAD_CHECK(b.size(-2) == K, ShapeError, "matmul: inner dims differ, a ", shape_str(a.shape()), " @ b ",
                  shape_str(b.shape()), " (", K, " vs ", b.size(-2), ")");
    Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
    Shape bs;
    try {
      bs = broadcast_shapes(ba, bb);
    } catch (const ShapeError&) {
      throw ShapeError(detail::concat("matmul: batch dims of a ", shape_str(a.shape()), " and b ", shape_str(b.shape()),
                                      " cannot be broadcast together"));
    }
    GemmLayout la = gemm_layout(a), lb = gemm_layout(b);
    Shape out_shape = bs;
    out_shape.push_back(M);
    out_shape.push_back(N);
    // K == 0: an empty sum, the product is 0 (the GEMM is skipped).
    Tensor y =
        K == 0 ? Tensor::zeros(out_shape, a.dtype(), a.device()) : Tensor::empty(out_shape, a.dtype(), a.device());
    dispatch_floating(a.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      batched_product<T>(a.device(), y.data<T>(), contiguous_batch_strides(out_shape, bs), N,
                         {la.t.data<T>(), la.trans, la.ld, batch_strides(la.t, bs)},
                         {lb.t.data<T>(), lb.trans, lb.ld, batch_strides(lb.t, bs)}, bs, M, N, K, T(0));
    });
    auto& s = ctx.saved;
    if (ctx.needs(1)) s.a = save_tensor(la.t);
    if (ctx.needs(0)) s.b = save_tensor(lb.t);
    s.ta = la.trans;
    s.tb = lb.trans;
    s.lda = la.ld;
    s.ldb = lb.ld;
    s.a_shape = a.shape();
    s.b_shape = b.shape();
    s.bs = bs;
    return y;
  }

  static TensorList backward(Context<Saved>& ctx, const TensorList& grads) {
    const auto& s = ctx.saved;
    Tensor dc = grads[0].contiguous();  // (bs..., M, N)
    const int64_t M = s.a_shape[s.a_shape.size() - 2], K = s.a_shape.back(), N = s.b_shape.back();
    Shape c_shape = s.bs;
    c_shape.push_back(M);
    c_shape.push_back(N);
    const std::vector<int64_t> cst = contiguous_batch_strides(c_shape, s.bs);
    Tensor da, db;
    dispatch_floating(dc.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      const MatArg<T> dC{dc.data<T>(), false, N, cst};
      if (ctx.needs(0)) {  // dA (M, K) = dC (M, N) @ op(B)^T (N, K)
        const auto st = contiguous_batch_strides(s.a_shape, s.bs);
        const bool red = is_reduced(st, s.bs) || N == 0;
        da =
            red ? Tensor::zeros(s.a_shape, dc.dtype(), dc.device()) : Tensor::empty(s.a_shape, dc.dtype(), dc.device());
        batched_product<T>(dc.device(), da.data<T>(), st, K, dC,
                           {s.b.data<T>(), !s.tb, s.ldb, batch_strides(s.b, s.bs)}, s.bs, M, K, N, red ? T(1) : T(0));
      }
      if (ctx.needs(1)) {  // dB (K, N) = op(A)^T (K, M) @ dC (M, N)
        const auto st = contiguous_batch_strides(s.b_shape, s.bs);
        const bool red = is_reduced(st, s.bs) || M == 0;
        db =
            red ? Tensor::zeros(s.b_shape, dc.dtype(), dc.device()) : Tensor::empty(s.b_shape, dc.dtype(), dc.device());
        batched_product<T>(dc.device(), db.data<T>(), st, N, {s.a.data<T>(), !s.ta, s.lda, batch_strides(s.a, s.bs)},
                           dC, s.bs, K, N, M, red ? T(1) : T(0));
      }
    });
    return {da, db};
  }
};

// y (R, out) = x (R, in) @ w^T + b, one GEMM; the bias is broadcast into y first (strided copy)
// and the GEMM accumulates onto it with beta = 1. With a residual (CPU only: linear_residual below),
// y = residual + (x @ w^T + b), the residual added to each tile of the GEMM (gemm_bias_add); its
// gradient is dy itself, as the add op's.
struct LinearFn : Function<LinearFn> {
  static constexpr const char* kName = "linear";
  struct Saved {
    Tensor x, w;      // x (R, in) contiguous; w as stored (see wt)
    bool wt = false;  // w's last two dims are a transposed row-major (in, out) matrix
    int64_t ldw = 1;
    Shape x_shape, w_shape;
    bool has_bias = false;
  };

  static Tensor forward(Context<Saved>& ctx, const Tensor& x, const Tensor& w, const Tensor& b,
                        const Tensor& residual) {
    check_pair(x, w, "linear", "x", "weight");
    POSGRAD_CHECK(w.dim() == 2, ShapeError, "linear: weight must be (out, in), got ", shape_str(w.shape()));
    POSGRAD_CHECK(x.dim() >= 1 && x.size(-1) == w.size(1), ShapeError, "linear: x ", shape_str(x.shape()),
                  " does not match weight ", shape_str(w.shape()), " (expected last dim ", w.size(1), ")");
    const int64_t in = w.size(1), out = w.size(0);
    if (b.defined()) {
      check_pair(x, b, "linear", "x", "bias");
      POSGRAD_CHECK(b.dim() == 1 && b.size(0) == out, ShapeError, "linear: bias ", shape_str(b.shape()),
                    " does not match weight ", shape_str(w.shape()), " (expected ", shape_str({out}), ")");
    }
    Tensor xc = x.contiguous();
    const int64_t R = in == 0 ? shape_numel(Shape(x.shape().begin(), x.shape().end() - 1)) : xc.numel() / in;
    GemmLayout lw = gemm_layout(w);
    Shape y_shape = x.shape();
    y_shape.back() = out;
    Tensor y;
    if (residual.defined()) {
      POSGRAD_CHECK(x.device().is_cpu() && residual.device() == x.device() && residual.dtype() == x.dtype() &&
                        residual.shape() == y_shape,
                    ShapeError, "linear: residual ", residual.str(), " does not match the output ", shape_str(y_shape),
                    " (", dtype_name(x.dtype()), " on the CPU)");
    }
    // On the CPU the bias goes in with the product (gemm_bias: each tile of y gets its bias rows as the
    // micro-kernel reaches it); elsewhere it is copied into every row first and the product added.
    // The same bits either way.
    const bool fused_bias = b.defined() && x.device().is_cpu();
    if (b.defined() && !fused_bias) {
      y = Tensor::empty(y_shape, x.dtype(), x.device());
      ops::copy_into(y.view({R, out}), b.as_strided_nograd({R, out}, {0, b.strides()[0]}, b.offset()));
    } else {
      y = in == 0 && !fused_bias && !residual.defined() ? Tensor::zeros(y_shape, x.dtype(), x.device())
                                                        : Tensor::empty(y_shape, x.dtype(), x.device());
    }
    Tensor bc = fused_bias ? b.contiguous() : Tensor();
    const Tensor rc = residual.defined() ? residual.contiguous() : Tensor();
    if (R > 0 && out > 0 && (in > 0 || fused_bias || rc.defined()))
      dispatch_floating(x.dtype(), kName, [&](auto tag) {
        using T = decltype(tag);
        // op(w) must be w^T (in, out): w stored (out, in) -> trans; stored transposed -> as is.
        if (rc.defined())  // CPU (checked above): the residual added to each finished tile
          kernels::cpu::gemm_bias_add<T>(y.data<T>(), xc.data<T>(), lw.t.data<T>(), fused_bias ? bc.data<T>() : nullptr,
                                         rc.data<T>(), out, R, out, in, out, in, lw.ld, false, !lw.trans);
        else if (fused_bias)
          kernels::cpu::gemm_bias<T>(y.data<T>(), xc.data<T>(), lw.t.data<T>(), bc.data<T>(), R, out, in, out, in,
                                     lw.ld, false, !lw.trans);
        else
          POSGRAD_KERNEL(x.device(), gemm<T>, y.data<T>(), xc.data<T>(), lw.t.data<T>(), R, out, in, out, in, lw.ld,
                         false, !lw.trans, T(1), b.defined() ? T(1) : T(0));
      });
    auto& s = ctx.saved;
    if (ctx.needs(1)) s.x = save_tensor(xc);
    if (ctx.needs(0)) s.w = save_tensor(lw.t);
    s.wt = lw.trans;
    s.ldw = lw.ld;
    s.x_shape = x.shape();
    s.w_shape = w.shape();
    s.has_bias = b.defined();
    return y;
  }

  static TensorList backward(Context<Saved>& ctx, const TensorList& grads) {
    const auto& s = ctx.saved;
    const int64_t out = s.w_shape[0], in = s.w_shape[1];
    Tensor dy = grads[0].contiguous();  // (..., out) = (R, out)
    const int64_t R = out == 0 ? shape_numel(Shape(s.x_shape.begin(), s.x_shape.end() - 1)) : dy.numel() / out;
    Tensor dx, dw, db;
    const Device dev = dy.device();
    const Tensor dresidual = ctx.needs(3) ? dy : Tensor();
    dispatch_floating(dy.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      // The products write their outputs with beta = 0 (no zero fill first); an empty product is zeros.
      // On the CPU the same bits as accumulating onto zeros: the GEMM's sums start from +0, so they are
      // never -0, and acc + 0 is acc. (cuBLAS may differ from before in the sign of an exact zero.)
      const bool any = R > 0 && in > 0 && out > 0;
      if (ctx.needs(0)) {  // dx (R, in) = dy (R, out) @ w (out, in)
        dx = any ? Tensor::empty(s.x_shape, dy.dtype(), dev) : Tensor::zeros(s.x_shape, dy.dtype(), dev);
        if (any)
          POSGRAD_KERNEL(dev, gemm<T>, dx.data<T>(), dy.data<T>(), s.w.data<T>(), R, in, out, in, out, s.ldw, false,
                         s.wt, T(1), T(0));
      }
      if (ctx.needs(1)) {  // dw (out, in) = dy^T (out, R) @ x (R, in)
        dw = any ? Tensor::empty(s.w_shape, dy.dtype(), dev) : Tensor::zeros(s.w_shape, dy.dtype(), dev);
        if (any)
          POSGRAD_KERNEL(dev, gemm<T>, dw.data<T>(), dy.data<T>(), s.x.data<T>(), out, in, R, in, out, in, true, false,
                         T(1), T(0));
      }
      if (s.has_bias && ctx.needs(2)) {  // db (out) = sum over the R rows of dy (R, out), rows in order
        // The column-sum kernel streams dy once with a vectorised row loop; a GEMM against a ones
        // vector (M = 1) wastes most of each register tile and measured ~50x slower.
        db = Tensor::empty({out}, dy.dtype(), dev);
        POSGRAD_KERNEL(dev, sum_dim_forward<T>, db.data<T>(), dy.data<T>(), int64_t(1), R, out);
      }
    });
    return {dx, dw, db, dresidual};
  }
};

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) { return MatmulFn::apply(a, b); }

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) { return LinearFn::apply(x, w, b, Tensor()); }

Tensor linear_residual(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& residual) {
  POSGRAD_CHECK(residual.defined(), ValueError, "linear_residual: the residual is an undefined tensor");
  if (x.device().is_cpu() && residual.device() == x.device() && residual.dtype() == x.dtype() && w.dim() == 2 &&
      x.dim() >= 1 && x.size(-1) == w.size(1)) {
    Shape y_shape = x.shape();
    y_shape.back() = w.size(0);
    if (residual.shape() == y_shape) return LinearFn::apply(x, w, b, residual);
  }
  return residual + linear(x, w, b);
}

}  // namespace posgrad
