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
// Statistics (row_moments): accumulated in double whatever T, two passes over data shifted by the
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
// Float rows run in vec_kernels.cpp (layer_norm_*_rows_f32, rms_norm_*_rows_f32, norm_param_grads_f32),
// compiled for AVX-512, AVX2 and baseline x86-64: there every sum over a row (the statistics in
// double, the backward's <g> and <g xhat> in float) is taken in 16 partial sums in a fixed order
// (vec_kernels.h), so all three paths give the same bits, and the double rows stay here. The mean is
// saved as an unevaluated sum hi + lo of two T values (hi = mean rounded to T, lo = the rest), and
// every xhat, forward and backward, is ((x - hi) - lo) * rstd: x - hi is exact near the mean
// (Sterbenz) and lo restores what rounding the mean to T lost. With the mean rounded to float
// alone, a row 1e5 + O(1) noise was normalised about a centre up to 0.004 off (half an ulp of
// 1e5), an error in y of 0.004 / std: the offset leaking in. y, dx, dw and db are computed in T
// from (hi, lo, rstd). RMSNorm's mean of squares is likewise accumulated in double (no overflow of
// x^2 for float |x| > 1.8e19).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "tensor/kernels/cpu/vec_kernels.h"
#include "tensor/kernels/kernels.h"

namespace posgrad::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;  // elements
constexpr int64_t kColBlock = 64;          // columns per parameter-gradient block (fits a stack buffer)

// f(n0, n1) on rows [n0, n1) of N: one contiguous share per thread of a team when N * C elements
// are enough to pay for one, else all rows on the calling thread. For the float rows of vec_kernels.h,
// whose instruction set is then chosen once per share rather than once per row.
template <typename F>
void for_row_shares(int64_t N, int64_t C, const F& f) {
  if (N * C <= kParallelMin || omp_in_parallel()) {
    f(int64_t{0}, N);
    return;
  }
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t n0 = N * t / nt, n1 = N * (t + 1) / nt;
    if (n0 < n1) f(n0, n1);
  }
}

// Mean and biased variance of one row xr (C >= 1), in double (see the file comment).
template <typename T>
void row_moments(const T* xr, int64_t C, double& mean, double& var) {
  const double K = static_cast<double>(xr[0]);
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < C; ++c) s += static_cast<double>(xr[c]) - K;
  const double md = s / static_cast<double>(C);
  double ss = 0.0;
#pragma omp simd reduction(+ : ss)
  for (int64_t c = 0; c < C; ++c) {
    const double d = (static_cast<double>(xr[c]) - K) - md;
    ss += d * d;
  }
  mean = K + md;
  var = ss / static_cast<double>(C);
}

// Column sums for the parameter gradients: for c in [0, C), dw[c] += sum_n dy[n,c] * xhat(n,c),
// db[c] += sum_n dy[n,c], with xhat(n, c) = ((x[n,c] - hi[n]) - lo[n]) * rstd[n], (hi, lo) = mean (N, 2)
// (mean null: RMSNorm, xhat = x * rstd).
template <typename T>
void param_grads(T* dw, T* db, const T* dy, const T* x, const T* mean, const T* rstd, int64_t N, int64_t C) {
  const int64_t blocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kColBlock, w = std::min(kColBlock, C - c0);
    T acc_w[kColBlock] = {}, acc_b[kColBlock] = {};
    if constexpr (std::is_same_v<T, float>)
      norm_param_grads_f32(dw ? acc_w : nullptr, db ? acc_b : nullptr, dy, x, mean, rstd, N, C, c0, w);
    else
      for (int64_t n = 0; n < N; ++n) {
        const T* dyr = dy + n * C + c0;
        const T* xr = x + n * C + c0;
        const T hi = mean ? mean[2 * n] : T(0), lo = mean ? mean[2 * n + 1] : T(0), rs = rstd[n];
        if (dw) {
#pragma omp simd
          for (int64_t c = 0; c < w; ++c) acc_w[c] += dyr[c] * (((xr[c] - hi) - lo) * rs);
        }
        if (db) {
#pragma omp simd
          for (int64_t c = 0; c < w; ++c) acc_b[c] += dyr[c];
        }
      }
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
  if constexpr (std::is_same_v<T, float>) {
    for_row_shares(N, C, [&](int64_t n0, int64_t n1) {
      layer_norm_forward_rows_f32(y + n0 * C, mean + 2 * n0, rstd + n0, x + n0 * C, w, b, n1 - n0, C, eps);
    });
    return;
  }
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * C;
    T* yr = y + n * C;
    double mu_d, var;
    row_moments(xr, C, mu_d, var);
    const T hi = static_cast<T>(mu_d), lo = static_cast<T>(mu_d - static_cast<double>(hi));
    const T rs = static_cast<T>(1.0 / std::sqrt(var + static_cast<double>(eps)));
    mean[2 * n] = hi;
    mean[2 * n + 1] = lo;
    rstd[n] = rs;
    if (w && b) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] = ((xr[c] - hi) - lo) * rs * w[c] + b[c];
    } else if (w) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] = ((xr[c] - hi) - lo) * rs * w[c];
    } else if (b) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] = ((xr[c] - hi) - lo) * rs + b[c];
    } else {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] = ((xr[c] - hi) - lo) * rs;
    }
  }
}

// dx (N, C) += ...; dw, db (C) += ... or null when not needed.
template <typename T>
void layer_norm_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                         int64_t N, int64_t C) {
  const T c_t = T(C);  // <.> divides by C (not a rounded 1/C): a constant g gives g - <g> = 0 exactly
  if constexpr (std::is_same_v<T, float>) {
    if (dx)
      for_row_shares(N, C, [&](int64_t n0, int64_t n1) {
        layer_norm_backward_rows_f32(dx + n0 * C, dy + n0 * C, x + n0 * C, w, mean + 2 * n0, rstd + n0, n1 - n0, C);
      });
  } else if (dx) {
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      const T* xr = x + n * C;
      const T* dyr = dy + n * C;
      T* dxr = dx + n * C;
      const T hi = mean[2 * n], lo = mean[2 * n + 1], rs = rstd[n];
      // <g> and <g xhat> with g = dy * w.
      T sg = T(0), sgx = T(0);
#pragma omp simd reduction(+ : sg, sgx)
      for (int64_t c = 0; c < C; ++c) {
        const T g = w ? dyr[c] * w[c] : dyr[c];
        sg += g;
        sgx += g * (((xr[c] - hi) - lo) * rs);
      }
      const T mg = sg / c_t, mgx = sgx / c_t;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        const T g = w ? dyr[c] * w[c] : dyr[c];
        dxr[c] += rs * (g - mg - ((xr[c] - hi) - lo) * rs * mgx);
      }
    }
  }
  if (dw || db) param_grads(dw, db, dy, x, mean, rstd, N, C);
}

// y (N, C); rstd (N) saved; w (C) or null.
template <typename T>
void rms_norm_forward(T* y, T* rstd, const T* x, const T* w, int64_t N, int64_t C, T eps) {
  if constexpr (std::is_same_v<T, float>) {
    for_row_shares(N, C, [&](int64_t n0, int64_t n1) {
      rms_norm_forward_rows_f32(y + n0 * C, rstd + n0, x + n0 * C, w, n1 - n0, C, eps);
    });
    return;
  }
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * C;
    T* yr = y + n * C;
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += static_cast<double>(xr[c]) * static_cast<double>(xr[c]);
    const T rs = static_cast<T>(1.0 / std::sqrt(ss / static_cast<double>(C) + static_cast<double>(eps)));
    rstd[n] = rs;
    if (w) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * rs * w[c];
    } else {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * rs;
    }
  }
}

// dx (N, C) += ...; dw (C) += ... or null.
template <typename T>
void rms_norm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t N, int64_t C) {
  const T c_t = T(C);  // <.> divides by C (not a rounded 1/C): a constant g gives g - <g> = 0 exactly
  if constexpr (std::is_same_v<T, float>) {
    if (dx)
      for_row_shares(N, C, [&](int64_t n0, int64_t n1) {
        rms_norm_backward_rows_f32(dx + n0 * C, dy + n0 * C, x + n0 * C, w, rstd + n0, n1 - n0, C);
      });
  } else if (dx) {
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      const T* xr = x + n * C;
      const T* dyr = dy + n * C;
      T* dxr = dx + n * C;
      const T rs = rstd[n];
      T sgx = T(0);
#pragma omp simd reduction(+ : sgx)
      for (int64_t c = 0; c < C; ++c) sgx += (w ? dyr[c] * w[c] : dyr[c]) * (xr[c] * rs);
      const T mgx = sgx / c_t;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        const T g = w ? dyr[c] * w[c] : dyr[c];
        dxr[c] += rs * (g - xr[c] * rs * mgx);
      }
    }
  }
  if (dw) param_grads<T>(dw, nullptr, dy, x, nullptr, rstd, N, C);
}

#define INST(T)                                                                                               \
  template void layer_norm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, T);         \
  template void layer_norm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int64_t, \
                                       int64_t);                                                              \
  template void rms_norm_forward<T>(T*, T*, const T*, const T*, int64_t, int64_t, T);                         \
  template void rms_norm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t);
INST(float)
INST(double)
#undef INST

}  // namespace posgrad::kernels::cpu
