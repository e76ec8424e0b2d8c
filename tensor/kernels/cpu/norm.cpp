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
// The variance is computed in two passes (mean first, then squares of deviations), which does
// not suffer the cancellation of E[x^2] - E[x]^2 when |mean| >> std.
#include <algorithm>
#include <cmath>

#include "tensor/kernels/kernels.h"

namespace posgrad::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;  // elements
constexpr int64_t kColBlock = 64;          // columns per parameter-gradient block (fits a stack buffer)

// Column sums for the parameter gradients: for c in [0, C), dw[c] += sum_n dy[n,c] * xhat(n,c),
// db[c] += sum_n dy[n,c], with xhat(n, c) = (x[n,c] - mean[n]) * rstd[n] (mean null: RMSNorm).
template <typename T>
void param_grads(T* dw, T* db, const T* dy, const T* x, const T* mean, const T* rstd, int64_t N, int64_t C) {
  const int64_t blocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kColBlock, w = std::min(kColBlock, C - c0);
    T acc_w[kColBlock] = {}, acc_b[kColBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const T* dyr = dy + n * C + c0;
      const T* xr = x + n * C + c0;
      const T mu = mean ? mean[n] : T(0), rs = rstd[n];
      if (dw) {
#pragma omp simd
        for (int64_t c = 0; c < w; ++c) acc_w[c] += dyr[c] * ((xr[c] - mu) * rs);
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

// y (N, C); mean, rstd (N) saved for backward; w, b (C) or null.
template <typename T>
void layer_norm_forward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t N, int64_t C, T eps) {
  const T inv_c = T(1) / T(C);
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * C;
    T* yr = y + n * C;
    T s = T(0);
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; ++c) s += xr[c];
    const T mu = s * inv_c;
    T ss = T(0);
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += (xr[c] - mu) * (xr[c] - mu);
    const T rs = T(1) / std::sqrt(ss * inv_c + eps);
    mean[n] = mu;
    rstd[n] = rs;
    if (w && b) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - mu) * rs * w[c] + b[c];
    } else if (w) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - mu) * rs * w[c];
    } else if (b) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - mu) * rs + b[c];
    } else {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - mu) * rs;
    }
  }
}

// dx (N, C) += ...; dw, db (C) += ... or null when not needed.
template <typename T>
void layer_norm_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                         int64_t N, int64_t C) {
  const T inv_c = T(1) / T(C);
  if (dx) {
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      const T* xr = x + n * C;
      const T* dyr = dy + n * C;
      T* dxr = dx + n * C;
      const T mu = mean[n], rs = rstd[n];
      // <g> and <g xhat> with g = dy * w.
      T sg = T(0), sgx = T(0);
#pragma omp simd reduction(+ : sg, sgx)
      for (int64_t c = 0; c < C; ++c) {
        const T g = w ? dyr[c] * w[c] : dyr[c];
        sg += g;
        sgx += g * ((xr[c] - mu) * rs);
      }
      const T mg = sg * inv_c, mgx = sgx * inv_c;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        const T g = w ? dyr[c] * w[c] : dyr[c];
        dxr[c] += rs * (g - mg - (xr[c] - mu) * rs * mgx);
      }
    }
  }
  if (dw || db) param_grads(dw, db, dy, x, mean, rstd, N, C);
}

// y (N, C); rstd (N) saved; w (C) or null.
template <typename T>
void rms_norm_forward(T* y, T* rstd, const T* x, const T* w, int64_t N, int64_t C, T eps) {
  const T inv_c = T(1) / T(C);
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * C;
    T* yr = y + n * C;
    T ss = T(0);
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += xr[c] * xr[c];
    const T rs = T(1) / std::sqrt(ss * inv_c + eps);
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
  const T inv_c = T(1) / T(C);
  if (dx) {
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      const T* xr = x + n * C;
      const T* dyr = dy + n * C;
      T* dxr = dx + n * C;
      const T rs = rstd[n];
      T sgx = T(0);
#pragma omp simd reduction(+ : sgx)
      for (int64_t c = 0; c < C; ++c) sgx += (w ? dyr[c] * w[c] : dyr[c]) * (xr[c] * rs);
      const T mgx = sgx * inv_c;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        const T g = w ? dyr[c] * w[c] : dyr[c];
        dxr[c] += rs * (g - xr[c] * rs * mgx);
      }
    }
  }
  if (dw) param_grads<T>(dw, nullptr, dy, x, nullptr, rstd, N, C);
}

#define INST(T)                                                                                                \
  template void layer_norm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, T);          \
  template void layer_norm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int64_t, \
                                       int64_t);                                                               \
  template void rms_norm_forward<T>(T*, T*, const T*, const T*, int64_t, int64_t, T);                          \
  template void rms_norm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t);
INST(float)
INST(double)
#undef INST

}  // namespace posgrad::kernels::cpu
