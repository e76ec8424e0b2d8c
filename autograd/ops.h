// ops.h — the differentiable operations (functional API). Each is an autograd Function in
// autograd/ops/<family>.cpp whose forward and backward call explicit kernels (tensor/kernels).
// Broadcasting follows NumPy/PyTorch rules. Every op here is entered in the op registry
// (autograd/registry.h) so the test suite gradchecks it in double precision.
#pragma once

#include <optional>
#include <utility>

#include "autograd/function.h"
#include "tensor/random.h"
#include "tensor/tensor.h"

namespace posgrad {

// ---- elementwise (autograd/ops/elementwise.cpp) ------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add_scalar(const Tensor& x, double s);
Tensor mul_scalar(const Tensor& x, double s);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor tanh(const Tensor& x);
Tensor relu(const Tensor& x);
// max(x, lo) elementwise, NaN kept (torch.clamp_min); the gradient is 1 where x >= lo, 0 below.
Tensor clamp_min(const Tensor& x, double lo);
Tensor gelu(const Tensor& x, bool tanh_approximation = false);
Tensor silu(const Tensor& x);
// mask (Bool) broadcast to x: y = mask ? value : x.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
// Bool (T, T): true where key j > query i (the entries a causal model must not see).
Tensor causal_mask(int64_t T, Device dev = Device::cpu());
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& a, double s) { return add_scalar(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return add_scalar(a, -s); }
inline Tensor operator*(const Tensor& a, double s) { return mul_scalar(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return mul_scalar(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return mul_scalar(a, 1.0 / s); }

// ---- reductions (autograd/ops/reduce.cpp) -------------------------------------------------------
Tensor sum(const Tensor& x);  // all elements -> shape ()
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
// Values (differentiable) and int64 argmax indices along dim.
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
// Sums a broadcast gradient back down to `shape` (the backward of broadcasting).
Tensor sum_to(const Tensor& x, const Shape& shape);
Shape broadcast_shapes(const Shape& a, const Shape& b);  // ShapeError names both

// ---- linear algebra (autograd/ops/matmul.cpp) ---------------------------------------------------
// a (..., M, K) @ b (..., K, N); batch dims broadcast; 1-D b is not supported (use unsqueeze).
// Transposed views (last two strides swapped) are passed to GEMM as transposes, not copied.
Tensor matmul(const Tensor& a, const Tensor& b);
// x (..., in) @ w (out, in)^T + b (out) — PyTorch's nn.Linear layout. b may be undefined.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());
// residual + linear(x, w, b): a linear layer with its residual connection (the two residual adds of a
// pre-LN transformer block; GPT-2, Radford et al. 2019, §2.3). residual has the output's shape (..., out).
// On the CPU one GEMM adds the residual to each tile of the product as it finishes (gemm_bias_add, no
// pass of its own over the output), with the bits of the two ops; elsewhere, or for a residual of
// another shape, dtype or device, it is the two ops (whose errors it then gives). Its gradient is the
// upstream gradient itself, as the add op's. Throws ValueError for an undefined residual.
Tensor linear_residual(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& residual);

// ---- softmax, norms (autograd/ops/softmax.cpp, norm.cpp) ---------------------------------------
Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);
// Over the last dim. w, b (C) may be undefined.
Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps = 1e-5);
Tensor rms_norm(const Tensor& x, const Tensor& w, double eps = 1e-6);

// ---- embedding, loss (autograd/ops/embedding.cpp, cross_entropy.cpp) ----------------------------
// table (V, C), idx int64 (...) -> (..., C). Out-of-range ids are an IndexError naming the id.
Tensor embedding(const Tensor& table, const Tensor& idx);
// logits (N, V) or (B, T, V), targets int64 (N) or (B, T): mean over non-ignored rows.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);
// Same, but per row (N) (0 for ignored rows): the evaluation's per-position loss.
Tensor cross_entropy_rows(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);

// ---- shape ops (autograd/ops/shape.cpp) ---------------------------------------------------------
Tensor cat(const TensorList& xs, int64_t dim);
TensorList split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
TensorList split(const Tensor& x, int64_t size, int64_t dim);  // chunks of `size` (last may be smaller)
// x (B, T, parts * C) -> `parts` tensors (B, H, T, D), D = C / H with H = heads: part p, head h is
// x[:, :, p C + h D : p C + (h + 1) D] with T and H swapped. The fused query/key/value projection's
// split into heads (GPT-2's c_attn output split into three, each viewed (B, T, H, D) and
// transposed(1, 2): nanoGPT model.py, CausalSelfAttention.forward). On the CPU each part is a view of
// x (strides (T parts C, D, parts C, 1)), which the fused attention reads in place; on CUDA one
// contiguous copy per part. The backward writes each part's gradient into its slot of one
// (B, T, parts * C) (a missing one as zeros), or, when the parts' gradients already are the slots
// of one such buffer (the CPU attention's backward writes them so), returns that buffer uncopied. Throws ValueError
// (parts or heads < 1) and ShapeError (x not 3-d, its last dim not parts x heads equal slices).
TensorList split_heads(const Tensor& x, int64_t parts, int64_t heads);

}  // namespace posgrad
