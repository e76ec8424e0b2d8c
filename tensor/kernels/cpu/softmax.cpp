// softmax.cpp — softmax and log-softmax over the last dim of x (N, C) on the CPU, forward and
// backward. One row per loop iteration, rows split across OpenMP threads; every row is reduced
// sequentially by one thread (max, then sum), so results do not depend on the thread count.
// Not here: softmax over another dim (autograd/ops/softmax.cpp transposes around it) and the
// fused attention softmax (the attention kernels have their own online softmax).
//
// Numerics: float rows take exp from vec_kernels.h (exp_shift_sum_f32: vec_math.h's exp, relative
// error ~2e-7, the same bits on every instruction-set path); double keeps std::exp. The row max m
// is subtracted before exp (softmax is shift invariant), so exp never
// overflows and at least one term of the sum s is exactly 1. log_softmax is computed as
// (x - m) - log(s), in that order: x - m first (exact when x is within a factor 2 of m, Sterbenz),
// then log(s), which lies in [0, log C]. Forming m + log(s) first and subtracting it from x (the
// textbook lse) rounds log(s) to the ulp of m, so equal logits of 1e4 gave -0.69336 (float32)
// instead of -ln 2 and larger ones gave 0. log(softmax) would lose all precision for probabilities
// below the float range. The row max propagates NaN (nan_max.h): a NaN anywhere in a row makes
// the whole row NaN, as in PyTorch.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "tensor/kernels/cpu/nan_max.h"
#include "tensor/kernels/cpu/vec_kernels.h"
#include "tensor/kernels/kernels.h"

namespace posgrad::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;  // elements; below this a thread team costs more than it saves
}  // namespace

// y (N, C) = exp(x - max) / sum exp(x - max), per row.
template <typename T>
void softmax_forward(T* y, const T* x, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * C;
    T* yr = y + n * C;
    const T m = nan_row_max(xr, C);
    T s = T(0);
    if constexpr (std::is_same_v<T, float>) {
      // The attention's vectorised exp and its fixed order of 16 partial sums (vec_kernels.h): the
      // same bits on every instruction-set path.
      std::copy(xr, xr + C, yr);
      s = exp_shift_sum_f32(yr, C, m, 0.0f);
    } else {
      for (int64_t c = 0; c < C; ++c) {
        const T e = std::exp(xr[c] - m);
        yr[c] = e;
        s += e;
      }
    }
    const T inv = T(1) / s;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) yr[c] *= inv;
  }
}

// dx += y * (dy - <dy, y>): the softmax Jacobian diag(y) - y y^T applied to dy.
template <typename T>
void softmax_backward(T* dx, const T* dy, const T* y, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* dyr = dy + n * C;
    const T* yr = y + n * C;
    T* dxr = dx + n * C;
    T dot = T(0);
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < C; ++c) dot += dyr[c] * yr[c];
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) dxr[c] += yr[c] * (dyr[c] - dot);
  }
}

// y (N, C) = (x - m) - log(sum exp(x - m)), m the row max, per row.
template <typename T>
void log_softmax_forward(T* y, const T* x, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * C;
    T* yr = y + n * C;
    const T m = nan_row_max(xr, C);
    T s = T(0);
    for (int64_t c = 0; c < C; ++c) s += std::exp(xr[c] - m);
    const T log_s = std::log(s);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) - log_s;
  }
}

// dx += dy - softmax * sum(dy), with softmax = exp(y) recomputed from the saved output.
template <typename T>
void log_softmax_backward(T* dx, const T* dy, const T* y, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* dyr = dy + n * C;
    const T* yr = y + n * C;
    T* dxr = dx + n * C;
    T s = T(0);
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; ++c) s += dyr[c];
    for (int64_t c = 0; c < C; ++c) dxr[c] += dyr[c] - std::exp(yr[c]) * s;
  }
}

#define INST(T)                                                                \
  template void softmax_forward<T>(T*, const T*, int64_t, int64_t);            \
  template void softmax_backward<T>(T*, const T*, const T*, int64_t, int64_t); \
  template void log_softmax_forward<T>(T*, const T*, int64_t, int64_t);        \
  template void log_softmax_backward<T>(T*, const T*, const T*, int64_t, int64_t);
INST(float)
INST(double)
#undef INST

}  // namespace posgrad::kernels::cpu
