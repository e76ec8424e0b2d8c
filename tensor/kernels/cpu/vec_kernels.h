// vec_kernels.h — the float loops that are compiled once per x86 instruction set (AVX-512, AVX2,
// baseline x86-64) and picked at run time, and the private hook that forces the choice.
//
// What it is: the loops whose time is their transcendental functions — the exact GELU forward and
// backward (elementwise.cpp), the attention's exponentials with their row sum (attention.cpp) and the
// cross-entropy's (cross_entropy.cpp) — and CoPE's gates (cope.cpp), written with vec_math.h's exp and erf;
// the float rows of LayerNorm and RMSNorm (norm.cpp), the float AdamW update (optim.cpp), the float
// binary ops (elementwise.cpp) and the float column sums of sum_dim (reduce.cpp), which the baseline
// build ran four lanes wide (the norms', AdamW's and the binary ops' loop bodies are row_kernels.h's,
// shared with the double paths); plus the
// selector of their instruction set, exposed (like the GEMM's, gemm_internal.h) so that tests and benchmarks run every
// path on one machine. What it is not: part of the public kernel API (kernels.h's unary GELU and the attention kernels
// call these for float; double keeps libm in the callers), nor the GEMM's selector: the two are independent, and
// gemm_set_isa does not move this one.
//
// Determinism: every path performs the same IEEE float operations per element in the same order —
// the build compiles without contraction into FMA (-ffp-contract=off) and without reassociation,
// and exp_shift_sum_f32 and the norms add their elements in one fixed order of 16 partial sums
// whatever the vector width — so the three paths return the same bits (tests/test_isa_paths.cpp checks it on
// every path the machine has, against a scalar evaluation of vec_math.h).
#pragma once

#include <cstdint>

namespace posgrad::kernels {
enum class BinaryOp : uint8_t;  // kernels.h
}

namespace posgrad::kernels::cpu {

// Exact GELU in float: y[i] = 0.5 x[i] (1 + erf(x[i] / sqrt 2)) with vec_math.h's erf_approx
// (within 5.7 ulp of erf, 3.4e-7 absolute). y, x (n); y == x allowed. No errors (NaN in, NaN out).
void gelu_forward_f32(float* y, const float* x, int64_t n);

// Its backward, accumulated: dx[i] += dy[i] (Phi(x) + x phi(x)) with
// Phi(x) = 0.5 (1 + erf(x / sqrt 2)) and phi(x) = e^{-x^2/2} / sqrt(2 pi) (erf_approx, exp_approx).
// dx, dy, x (n). No errors.
void gelu_backward_f32(float* dx, const float* dy, const float* x, int64_t n);

// (GELU: Hendrycks & Gimpel 2016, §2; kernels.h's gelu_forward_saving / gelu_backward_saved call these.)
// The forward that also keeps what its backward would recompute: y[i] as gelu_forward_f32 (the same
// bits) and s[i] = 1 + erf(x[i] / sqrt 2) = 2 Phi(x[i]). y, s, x (n); y == x allowed, s distinct.
// No errors.
void gelu_forward_saving_f32(float* y, float* s, const float* x, int64_t n);

// The backward from that saved s, written rather than accumulated: dx[i] = +0 + dy[i] (0.5 s[i] +
// x phi(x)), the bits gelu_backward_f32 leaves in a zero-filled dx (the +0 turns a -0 product into
// +0, as the accumulation does) at the cost of one exp_approx per element where that one also
// evaluates erf_approx. dx, dy, x, s (n); dx may alias dy. No errors.
void gelu_backward_saved_f32(float* dx, const float* dy, const float* x, const float* s, int64_t n);

// x[i] <- e^{(x[i] - shift) - shift2} for i < n (exp_approx: relative error ~2e-7, arguments below
// -87.3 give 0), and returns the sum of the new values, added in this order on every path: element
// i goes to partial sum i mod 16 (in increasing i), and the 16 partial sums are then added pairwise
// (p[l] += p[l + 8], then + 4, + 2, + 1). x (n), in place; n >= 0 (0: returns 0). No errors.
float exp_shift_sum_f32(float* x, int64_t n, float shift, float shift2);

// The same for a row stored with room to spare: x holds at least n rounded up to a multiple of 16
// elements, all initialised. x[0, n) and the returned sum have exactly exp_shift_sum_f32's bits; the
// elements [n, round_up(n, 16)) are overwritten with the exponentials of what they held (callers
// ignore them). The last partial block of 16 is then one full vector step instead of a copy
// through a padded buffer, which at the attention's short rows (T <= 64: at most 4 blocks) took
// about 40% of the call. x as above; n >= 0. No errors.
float exp_shift_sum_padded_f32(float* x, int64_t n, float shift, float shift2);

// y[i] += g e^{(x[i] - shift) - shift2} for i < n (exp_approx, as above): the softmax cross-entropy's
// backward row, dlogits += dloss (softmax - onehot) without the onehot (cross_entropy.cpp). y, x (n),
// not overlapping; n >= 0. No errors.
void exp_shift_axpy_f32(float* y, const float* x, int64_t n, float shift, float shift2, float g);

// g[i] = sigmoid(scale a[i]) = 1 / (1 + e^{-scale a[i]}), evaluated as e / (1 + e) with e = e^{scale a[i]}
// for negative arguments so that neither form overflows (exp_approx). CoPE's gates (cope.cpp).
// g, a (n); g == a allowed. No errors (NaN in, NaN out).
void sigmoid_scaled_f32(float* g, const float* a, int64_t n, float scale);

// ---- LayerNorm and RMSNorm rows in float (norm.cpp's float path; the formulas, the shifted two-pass
// statistics in double and the (hi, lo) mean are described there). Every sum over a row's C elements
// is taken in 16 partial sums — element c goes to partial c mod 16, in increasing c — that are then
// added pairwise (p[l] += p[l + 8], then + 4, + 2, + 1): exp_shift_sum_f32's order, so every path
// returns the same bits (the statistics' partial sums are doubles, the backward's floats). The
// elementwise loops perform norm.cpp's operations per element, in its order.
// Rows [0, rows) of x, y, dy, dx (rows, C), C >= 1; mean (rows, 2) = (hi, lo); rstd (rows); w, b (C)
// or null. No errors (NaN in, NaN out).

// y = ((x - hi) - lo) rstd w + b, writing mean and rstd.
void layer_norm_forward_rows_f32(float* y, float* mean, float* rstd, const float* x, const float* w, const float* b,
                                 int64_t rows, int64_t C, float eps);
// dx += rstd (g - <g> - xhat <g xhat>), g = dy w (dy without w); accumulate false: dx = 0 + (that
// term), dx unread.
void layer_norm_backward_rows_f32(float* dx, const float* dy, const float* x, const float* w, const float* mean,
                                  const float* rstd, int64_t rows, int64_t C, bool accumulate);
// y = x rstd w, rstd = 1 / sqrt(<x^2> + eps), writing rstd.
void rms_norm_forward_rows_f32(float* y, float* rstd, const float* x, const float* w, int64_t rows, int64_t C,
                               float eps);
// dx += rstd (g - xhat <g xhat>), xhat = x rstd; accumulate false: dx = 0 + (that term), dx unread.
void rms_norm_backward_rows_f32(float* dx, const float* dy, const float* x, const float* w, const float* rstd,
                                int64_t rows, int64_t C, bool accumulate);
// The parameter gradients' column sums over one block of `width` columns starting at column c0:
// for n = 0 .. N - 1 in order, acc_w[c] += dy[n, c0 + c] xhat(n, c0 + c) (acc_w null: skipped) and
// acc_b[c] += dy[n, c0 + c] (acc_b null: skipped), c < width; xhat = ((x - hi) - lo) rstd, or x rstd
// when mean is null (RMSNorm). dy, x (N, C). Each column is one chain of additions in row order, so
// the vector width changes nothing.
void norm_param_grads_f32(float* acc_w, float* acc_b, const float* dy, const float* x, const float* mean,
                          const float* rstd, int64_t N, int64_t C, int64_t c0, int64_t width);

// The AdamW update of n float elements (optim.cpp's adamw_range, whose operations it performs per
// element in the same order: the same bits on every path): m = beta1 m + one_m_b1 g,
// v = beta2 v + one_m_b2 g g, p = p decay - step_size (m / (sqrt(v) / bc2_sqrt + eps)). p, m, v, g (n).
// No errors.
void adamw_update_f32(float* p, float* m, float* v, const float* g, int64_t n, float beta1, float beta2, float one_m_b1,
                      float one_m_b2, float decay, float step_size, float bc2_sqrt, float eps);

// Column sums of a block of at most 64 columns: y[i] = sum over r = 0 .. R - 1, in order, of
// x[r ld + i], i < width <= 64, starting from +0 (reduce.cpp's sum over a middle dim; a bias
// gradient). Each column is one chain of additions in row order, so the vector width changes
// nothing. y (width), x (R rows of stride ld). No errors.
void column_sums_f32(float* y, const float* x, int64_t R, int64_t ld, int64_t width);

// elementwise.cpp's float binary_forward and binary_backward on n elements, the same operations per
// element: y = a op b (op: +, -, *, /); da = +0 + d(a op b)/da dy, db likewise (da or db null: not
// written; the +0 turns a -0 into +0, as an accumulation into zeros would). y may alias a or b, da
// and db may alias dy. No errors.
void binary_forward_f32(float* y, const float* a, const float* b, int64_t n, BinaryOp op);
void binary_backward_f32(float* da, float* db, const float* dy, const float* a, const float* b, int64_t n, BinaryOp op);

namespace vec_detail {

// The instruction sets the loops above are compiled for, in increasing order: baseline x86-64
// (SSE2: 4 float lanes), AVX2 (8 lanes), AVX-512F (16 lanes). Elsewhere than x86-64 only baseline.
enum class vec_isa : int { baseline = 0, avx2 = 1, avx512 = 2 };

// Best instruction set of the running CPU and OS (__builtin_cpu_supports("avx512f" / "avx2"),
// which include the OS saving the zmm / ymm state).
vec_isa vec_best_isa();

// Instruction set the loops run now (vec_best_isa() unless vec_set_isa changed it).
vec_isa vec_active_isa();

// Forces the loops onto `isa`, clamped to vec_best_isa() (a path the CPU lacks is never run);
// returns what was set. For tests and benchmarks: do not call it while another thread runs them.
vec_isa vec_set_isa(vec_isa isa);

// "baseline", "avx2" or "avx512".
const char* vec_isa_name(vec_isa isa);

}  // namespace vec_detail

}  // namespace posgrad::kernels::cpu
