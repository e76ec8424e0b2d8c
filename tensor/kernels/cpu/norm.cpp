// norm.cpp — LayerNorm and RMSNorm over the last dim of x (N, C) on the CPU, forward and
// backward. Not here: normalisation over other dims (nobody needs it), running statistics.
//
// Formulas. LayerNorm (Ba, Kiros & Hinton 2016, eq. 3-4; PyTorch's nn.LayerNorm uses the biased
// variance): xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps), y = xhat * w + b.
// RMSNorm (Zhang & Sennrich 2019, eq. 4): rstd = 1 / sqrt(mean(x^2) + eps), y = x * rstd * w.
// Backward, with g = dy * w (or dy without an affine weight) and <.> the mean over the row:
//   LayerNorm: dx = rstd * (g - <g> - xhat * <g xhat>)
//   RMSNorm:   dx = rstd * (g - xhat * <g xhat>)
//   dw = sum over rows of dy * xhat,  db = sum over rows of dy.
//
// Parallelism and determinism: forward and dx work row by row (rows split across threads). The
// parameter gradients dw, db are column sums over all rows: they are split into column blocks,
// and each block sums its rows in order 0..N-1 by one thread, so every column sees the same
// sequence of additions whatever the thread count (no atomics, no per-thread partials).
// Statistics (row_kernels.h, row_moments): accumulated in double whatever T, two passes over data shifted by the
// row's first element K (Chan, Golub & LeVeque, "Algorithms for computing the sample variance",
// Am. Stat. 1983, §3 — the shifted two-pass algorithm): d = x - K, mean = K + <d>,
// var = <(d - <d>)^2>. Why each part:
//  - two passes: no E[x^2] - E[x]^2 cancellation when |mean| >> std;
//  - the shift: a constant row has d = 0 exactly, so its mean is exactly K and its variance exactly
//    0 (y = b, dw = 0), in float and in double. Without it the mean of 768 float32 values near 1e5
//    came out a few ulps off, the variance was then tiny but not 0, and rstd = 1/sqrt(var + eps)
//    blew those ulps up to |y| ~ 1 and weight gradients of several units;
//  - double: float rows near a large offset keep their deviations exactly (a float difference is
//    exact in double), and sums over wide rows do not drift.
// The row pass in double costs a conversion per element on a row that is in cache.
// The row loops are written once, in row_kernels.h: every sum over a row (the statistics in double, the
// backward's <g> and <g xhat> in T) is taken in 16 partial sums in a fixed order. Float rows run them
// through vec_kernels.cpp, compiled for AVX-512, AVX2 and baseline x86-64 (the three give the same
// bits); double rows call them here. The mean is
// saved as an unevaluated sum hi + lo of two T values (hi = mean rounded to T, lo = the rest), and
// every xhat, forward and backward, is ((x - hi) - lo) * rstd: x - hi is exact near the mean
// (Sterbenz) and lo restores what rounding the mean to T lost. With the mean rounded to float
// alone, a row 1e5 + O(1) noise was normalised about a centre up to 0.004 off (half an ulp of
// 1e5), an error in y of 0.004 / std: the offset leaking in. y, dx, dw and db are computed in T
// from (hi, lo, rstd). RMSNorm's mean of squares is likewise accumulated in double (no overflow of
// x^2 for float |x| > 1.8e19).
#include <omp.h>

#include <algorithm>
#include <type_traits>

#include "tensor/kernels/cpu/parallel.h"
#include "tensor/kernels/cpu/row_kernels.h"
#include "tensor/kernels/cpu/vec_kernels.h"
#include "tensor/kernels/kernels.h"

namespace posgrad::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;  // elements
constexpr int64_t kColBlock = 64;          // columns per parameter-gradient block (fits a stack buffer)

// f(n0, n1) on rows [n0, n1) of N: static shares of the rows with stealing (parallel.h), in chunks of
// at least 2048 elements, when N * C elements are enough to pay for a team, else all rows on the
// calling thread. The float rows' instruction set (vec_kernels.h) is then chosen once per chunk rather
// than once per row. Each row's arithmetic is its own: the bits do not depend on the split.
template <typename F>
void for_row_shares(int64_t N, int64_t C, const F& f) {
  if (N * C <= kParallelMin || omp_in_parallel()) {
    f(int64_t{0}, N);
    return;
  }
  parallel_chunks(N, (2048 + C - 1) / C, 0, f);
}

// Column sums for the parameter gradients: for c in [0, C), dw[c] += sum_n dy[n,c] * xhat(n,c),
// db[c] += sum_n dy[n,c], with xhat(n, c) = ((x[n,c] - hi[n]) - lo[n]) * rstd[n], (hi, lo) = mean (N, 2)
// (mean null: RMSNorm, xhat = x * rstd). Each block of columns sums its rows in order into a stack
// buffer started at 0, then adds it to dw, db.
template <typename T>
void param_grads(T* dw, T* db, const T* dy, const T* x, const T* mean, const T* rstd, int64_t N, int64_t C) {
  const int64_t blocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kColBlock, w = std::min(kColBlock, C - c0);
    T acc_w[kColBlock] = {}, acc_b[kColBlock] = {};
    T* aw = dw ? acc_w : nullptr;
    T* ab = db ? acc_b : nullptr;
    if constexpr (std::is_same_v<T, float>)
      norm_param_grads_f32(aw, ab, dy, x, mean, rstd, N, C, c0, w);
    else
      row_kernels::norm_param_grads<T>(aw, ab, dy, x, mean, rstd, N, C, c0, w);
    if (dw)
      for (int64_t c = 0; c < w; ++c) dw[c0 + c] += acc_w[c];
    if (db)
      for (int64_t c = 0; c < w; ++c) db[c0 + c] += acc_b[c];
  }
}
}  // namespace

// y (N, C); mean (N, 2) = (hi, lo), rstd (N) saved for backward; w, b (C) or null.
template <typename T>
void layer_norm_forward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t N, int64_t C, T eps) {
  for_row_shares(N, C, [&](int64_t n0, int64_t n1) {
    if constexpr (std::is_same_v<T, float>)
      layer_norm_forward_rows_f32(y + n0 * C, mean + 2 * n0, rstd + n0, x + n0 * C, w, b, n1 - n0, C, eps);
    else
      row_kernels::layer_norm_forward_rows<T>(y + n0 * C, mean + 2 * n0, rstd + n0, x + n0 * C, w, b, n1 - n0, C, eps);
  });
}

// dx (N, C) += ... (accumulate false: dx = 0 + ..., unread); dw, db (C) += ... or null when not needed.
template <typename T>
void layer_norm_backward_impl(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                              int64_t N, int64_t C, bool accumulate) {
  if (dx)
    for_row_shares(N, C, [&](int64_t n0, int64_t n1) {
      if constexpr (std::is_same_v<T, float>)
        layer_norm_backward_rows_f32(dx + n0 * C, dy + n0 * C, x + n0 * C, w, mean + 2 * n0, rstd + n0, n1 - n0, C,
                                     accumulate);
      else
        row_kernels::layer_norm_backward_rows<T>(dx + n0 * C, dy + n0 * C, x + n0 * C, w, mean + 2 * n0, rstd + n0,
                                                 n1 - n0, C, accumulate);
    });
  if (dw || db) param_grads(dw, db, dy, x, mean, rstd, N, C);
}

template <typename T>
void layer_norm_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                         int64_t N, int64_t C) {
  layer_norm_backward_impl(dx, dw, db, dy, x, w, mean, rstd, N, C, true);
}

template <typename T>
void layer_norm_backward_overwrite(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean,
                                   const T* rstd, int64_t N, int64_t C) {
  layer_norm_backward_impl(dx, dw, db, dy, x, w, mean, rstd, N, C, false);
}

// y (N, C); rstd (N) saved; w (C) or null.
template <typename T>
void rms_norm_forward(T* y, T* rstd, const T* x, const T* w, int64_t N, int64_t C, T eps) {
  for_row_shares(N, C, [&](int64_t n0, int64_t n1) {
    if constexpr (std::is_same_v<T, float>)
      rms_norm_forward_rows_f32(y + n0 * C, rstd + n0, x + n0 * C, w, n1 - n0, C, eps);
    else
      row_kernels::rms_norm_forward_rows<T>(y + n0 * C, rstd + n0, x + n0 * C, w, n1 - n0, C, eps);
  });
}

// dx (N, C) += ... (accumulate false: dx = 0 + ..., unread); dw (C) += ... or null.
template <typename T>
void rms_norm_backward_impl(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t N, int64_t C,
                            bool accumulate) {
  if (dx)
    for_row_shares(N, C, [&](int64_t n0, int64_t n1) {
      if constexpr (std::is_same_v<T, float>)
        rms_norm_backward_rows_f32(dx + n0 * C, dy + n0 * C, x + n0 * C, w, rstd + n0, n1 - n0, C, accumulate);
      else
        row_kernels::rms_norm_backward_rows<T>(dx + n0 * C, dy + n0 * C, x + n0 * C, w, rstd + n0, n1 - n0, C,
                                               accumulate);
    });
  if (dw) param_grads<T>(dw, nullptr, dy, x, nullptr, rstd, N, C);
}

template <typename T>
void rms_norm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t N, int64_t C) {
  rms_norm_backward_impl(dx, dw, dy, x, w, rstd, N, C, true);
}

template <typename T>
void rms_norm_backward_overwrite(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t N,
                                 int64_t C) {
  rms_norm_backward_impl(dx, dw, dy, x, w, rstd, N, C, false);
}

#define INST(T)                                                                                                \
  template void layer_norm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, T);          \
  template void layer_norm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int64_t,  \
                                       int64_t);                                                               \
  template void rms_norm_forward<T>(T*, T*, const T*, const T*, int64_t, int64_t, T);                          \
  template void rms_norm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t);        \
  template void layer_norm_backward_overwrite<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, \
                                                 int64_t, int64_t);                                            \
  template void rms_norm_backward_overwrite<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t);
INST(float)
INST(double)
#undef INST

}  // namespace posgrad::kernels::cpu
