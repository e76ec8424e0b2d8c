// row_kernels.h — the loop bodies of the norms (norm.cpp), AdamW (optim.cpp), the binary elementwise
// ops (elementwise.cpp) and the fixed-order row sums, as templates over the element type, written once for both of
// their callers: vec_kernels.cpp compiles the float instances inside its per-instruction-set bodies (AVX-512, AVX2,
// baseline; every function here is always_inline, so it is vectorised for the caller's target), and norm.cpp and
// optim.cpp and elementwise.cpp call the double instances directly (baseline). Not a public API: kernels.h's
// layer_norm_* / rms_norm_* / adamw_* are.
//
// Formulas and numerics are norm.cpp's and optim.cpp's (see their file comments): LayerNorm (Ba, Kiros
// & Hinton 2016, eq. 3-4) with the shifted two-pass statistics in double (Chan, Golub & LeVeque 1983,
// §3) and the mean kept as hi + lo; RMSNorm (Zhang & Sennrich 2019, eq. 4); AdamW (Loshchilov & Hutter
// 2019, Alg. 2) in PyTorch's order of operations.
//
// Order of the row sums: element c goes to partial sum c mod 16 in increasing c (whole blocks of 16 as
// one inner vector loop, the last C mod 16 elements one at a time), and the 16 partials are added
// pairwise (p[l] += p[l + 8], then + 4, + 2, + 1). The order does not depend on the vector width, so
// every instruction set returns the same bits. The elementwise loops perform the same operations per
// element whatever the width. Nothing here throws.
#pragma once

#include <cmath>
#include <cstdint>

#include "tensor/kernels/kernels.h"

// Inlined into its caller, so compiled for the caller's instruction set (vec_kernels.cpp): functions,
// and the lambdas they pass to sum16.
#define POSGRAD_ROW_LAMBDA __attribute__((always_inline))
#define POSGRAD_ROW_INLINE POSGRAD_ROW_LAMBDA inline

namespace posgrad::kernels::cpu::row_kernels {

constexpr int kSumLanes = 16;

// The 16 partial sums part[0..16) added pairwise (p[l] += p[l + 8], then + 4, + 2, + 1), written as
// whole halves so that the compiler keeps them in registers.
template <typename A>
POSGRAD_ROW_INLINE A fold16(const A* part) {
  A h[kSumLanes / 2], q[kSumLanes / 4];
#pragma omp simd
  for (int l = 0; l < kSumLanes / 2; ++l) h[l] = part[l] + part[l + kSumLanes / 2];
#pragma omp simd
  for (int l = 0; l < kSumLanes / 4; ++l) q[l] = h[l] + h[l + kSumLanes / 4];
  const A r0 = q[0] + q[2], r1 = q[1] + q[3];
  return r0 + r1;
}

// The sum over c < C of f(c) in the order above, in A.
template <typename A, typename F>
POSGRAD_ROW_INLINE A sum16(int64_t C, const F& f) {
  A part[kSumLanes] = {};
  int64_t c = 0;
  for (; c + kSumLanes <= C; c += kSumLanes) {
#pragma omp simd
    for (int l = 0; l < kSumLanes; ++l) part[l] += f(c + l);
  }
  for (int l = 0; c + l < C; ++l) part[l] += f(c + l);
  return fold16(part);
}

// Mean and biased variance of the row xr (C >= 1) in double: d = x - K with K = xr[0],
// mean = K + <d>, var = <(d - <d>)^2>.
template <typename T>
POSGRAD_ROW_INLINE void row_moments(const T* xr, int64_t C, double& mean, double& var) {
  const double K = static_cast<double>(xr[0]);
  const double md = sum16<double>(C, [&](int64_t c) POSGRAD_ROW_LAMBDA { return static_cast<double>(xr[c]) - K; }) /
                    static_cast<double>(C);
  const double ss = sum16<double>(C, [&](int64_t c) POSGRAD_ROW_LAMBDA {
    const double d = (static_cast<double>(xr[c]) - K) - md;
    return d * d;
  });
  mean = K + md;
  var = ss / static_cast<double>(C);
}

// LayerNorm forward of rows [0, rows): y = ((x - hi) - lo) rstd w + b; mean (rows, 2) = (hi, lo), rstd
// (rows) written. x, y (rows, C); w, b (C) or null.
template <typename T>
POSGRAD_ROW_INLINE void layer_norm_forward_rows(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b,
                                                int64_t rows, int64_t C, T eps) {
  for (int64_t n = 0; n < rows; ++n) {
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

// A backward row's store: dx[c] += term(c) (accumulate) or dx[c] = 0 + term(c) (dx unread: the bits of
// accumulating into zeros), c < C.
template <typename T, typename F>
POSGRAD_ROW_INLINE void store_row(T* dx, int64_t C, bool accumulate, const F& term) {
  if (accumulate) {
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) dx[c] += term(c);
  } else {
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) dx[c] = T(0) + term(c);
  }
}

// LayerNorm backward of rows [0, rows): dx += rstd (g - <g> - xhat <g xhat>), g = dy w (dy without w);
// <.> divides by C (not a rounded 1 / C: a constant g gives g - <g> = 0 exactly). accumulate false:
// dx = 0 + (the same term), the bits of accumulating into zeros, dx's contents unread.
template <typename T>
POSGRAD_ROW_INLINE void layer_norm_backward_rows(T* dx, const T* dy, const T* x, const T* w, const T* mean,
                                                 const T* rstd, int64_t rows, int64_t C, bool accumulate) {
  const T c_t = static_cast<T>(C);
  for (int64_t n = 0; n < rows; ++n) {
    const T* xr = x + n * C;
    const T* dyr = dy + n * C;
    T* dxr = dx + n * C;
    const T hi = mean[2 * n], lo = mean[2 * n + 1], rs = rstd[n];
    const T sg = sum16<T>(C, [&](int64_t c) POSGRAD_ROW_LAMBDA { return w ? dyr[c] * w[c] : dyr[c]; });
    const T sgx = sum16<T>(
        C, [&](int64_t c) POSGRAD_ROW_LAMBDA { return (w ? dyr[c] * w[c] : dyr[c]) * (((xr[c] - hi) - lo) * rs); });
    const T mg = sg / c_t, mgx = sgx / c_t;
    auto term = [&](int64_t c) POSGRAD_ROW_LAMBDA {
      const T g = w ? dyr[c] * w[c] : dyr[c];
      return rs * (g - mg - ((xr[c] - hi) - lo) * rs * mgx);
    };
    store_row<T>(dxr, C, accumulate, term);
  }
}

// RMSNorm forward of rows [0, rows): rstd = 1 / sqrt(<x^2> + eps) (x^2 summed in double), y = x rstd w.
template <typename T>
POSGRAD_ROW_INLINE void rms_norm_forward_rows(T* y, T* rstd, const T* x, const T* w, int64_t rows, int64_t C, T eps) {
  for (int64_t n = 0; n < rows; ++n) {
    const T* xr = x + n * C;
    T* yr = y + n * C;
    const double ss = sum16<double>(
        C, [&](int64_t c) POSGRAD_ROW_LAMBDA { return static_cast<double>(xr[c]) * static_cast<double>(xr[c]); });
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

// RMSNorm backward of rows [0, rows): dx += rstd (g - xhat <g xhat>), xhat = x rstd; accumulate
// false: dx = 0 + (the same term), as layer_norm_backward_rows.
template <typename T>
POSGRAD_ROW_INLINE void rms_norm_backward_rows(T* dx, const T* dy, const T* x, const T* w, const T* rstd, int64_t rows,
                                               int64_t C, bool accumulate) {
  const T c_t = static_cast<T>(C);
  for (int64_t n = 0; n < rows; ++n) {
    const T* xr = x + n * C;
    const T* dyr = dy + n * C;
    T* dxr = dx + n * C;
    const T rs = rstd[n];
    const T sgx =
        sum16<T>(C, [&](int64_t c) POSGRAD_ROW_LAMBDA { return (w ? dyr[c] * w[c] : dyr[c]) * (xr[c] * rs); });
    const T mgx = sgx / c_t;
    auto term = [&](int64_t c) POSGRAD_ROW_LAMBDA {
      const T g = w ? dyr[c] * w[c] : dyr[c];
      return rs * (g - xr[c] * rs * mgx);
    };
    store_row<T>(dxr, C, accumulate, term);
  }
}

// The norms' parameter gradients over one block of `width` columns from column c0: for n = 0 .. N - 1
// in order, acc_w[c] += dy[n, c0 + c] xhat(n, c0 + c) and acc_b[c] += dy[n, c0 + c] (either null:
// skipped); xhat = ((x - hi) - lo) rstd, or with mean null (RMSNorm) ((x - 0) - 0) rstd = x rstd. Each
// column is one chain of additions in row order. dy, x (N, C).
template <typename T>
POSGRAD_ROW_INLINE void norm_param_grads(T* acc_w, T* acc_b, const T* dy, const T* x, const T* mean, const T* rstd,
                                         int64_t N, int64_t C, int64_t c0, int64_t width) {
  for (int64_t n = 0; n < N; ++n) {
    const T* dyr = dy + n * C + c0;
    const T* xr = x + n * C + c0;
    const T hi = mean ? mean[2 * n] : T(0), lo = mean ? mean[2 * n + 1] : T(0), rs = rstd[n];
    if (acc_w) {
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) acc_w[c] += dyr[c] * (((xr[c] - hi) - lo) * rs);
    }
    if (acc_b) {
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) acc_b[c] += dyr[c];
    }
  }
}

// The AdamW update of n elements: m = beta1 m + one_m_b1 g, v = beta2 v + one_m_b2 g g,
// p = p decay - step_size (m / (sqrt(v) / bc2_sqrt + eps)).
template <typename T>
POSGRAD_ROW_INLINE void adamw_update(T* p, T* m, T* v, const T* g, int64_t n, T beta1, T beta2, T one_m_b1, T one_m_b2,
                                     T decay, T step_size, T bc2_sqrt, T eps) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const T gi = g[i];
    const T mi = beta1 * m[i] + one_m_b1 * gi;
    const T vi = beta2 * v[i] + one_m_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const T denom = std::sqrt(vi) / bc2_sqrt + eps;
    p[i] = p[i] * decay - step_size * (mi / denom);
  }
}

// y = a op b over n elements (op: +, -, *, /).
template <typename T>
POSGRAD_ROW_INLINE void binary_forward_elements(T* y, const T* a, const T* b, int64_t n, BinaryOp op) {
  switch (op) {
#define POSGRAD_LOOP(expr)                                         \
  _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) y[i] = expr; \
  break;
    case BinaryOp::Add: POSGRAD_LOOP(a[i] + b[i])
    case BinaryOp::Sub: POSGRAD_LOOP(a[i] - b[i])
    case BinaryOp::Mul: POSGRAD_LOOP(a[i] * b[i])
    case BinaryOp::Div: POSGRAD_LOOP(a[i] / b[i])
#undef POSGRAD_LOOP
  }
}

// da = +0 + d(a op b)/da dy, db likewise, written (either null: skipped; the +0 turns a -0 into +0,
// as an accumulation into zeros would).
template <typename T>
POSGRAD_ROW_INLINE void binary_backward_elements(T* da, T* db, const T* dy, const T* a, const T* b, int64_t n,
                                                 BinaryOp op) {
#define POSGRAD_WRITE(ptr, expr)                                                \
  if (ptr) {                                                                    \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) ptr[i] = T(0) + (expr); \
  }
  switch (op) {
    case BinaryOp::Add: POSGRAD_WRITE(da, dy[i]) POSGRAD_WRITE(db, dy[i]) break;
    case BinaryOp::Sub: POSGRAD_WRITE(da, dy[i]) POSGRAD_WRITE(db, -dy[i]) break;
    case BinaryOp::Mul: POSGRAD_WRITE(da, dy[i] * b[i]) POSGRAD_WRITE(db, dy[i] * a[i]) break;
    case BinaryOp::Div: POSGRAD_WRITE(da, dy[i] / b[i]) POSGRAD_WRITE(db, -dy[i] * ((a[i] / b[i]) / b[i])) break;
  }
#undef POSGRAD_WRITE
}

}  // namespace posgrad::kernels::cpu::row_kernels
