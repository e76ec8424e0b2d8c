// softmax.cpp — softmax and log-softmax over the last dim of x (N, C) on the CPU, forward and
// backward. One row per loop iteration, rows split across OpenMP threads; every row is reduced
// sequentially by one thread (max, then sum), so results do not depend on the thread count.
// Not here: softmax over another dim (autograd/ops/softmax.cpp transposes around it) and the
// fused attention softmax (the attention kernels have their own online softmax).
//
// Numerics: the row max is subtracted before exp (softmax is shift invariant), so exp never
// overflows and at least one term of the sum is exactly 1. log_softmax is computed as
// (x - max) - log(sum exp(x - max)) rather than log(softmax), which would lose all precision
// (and give -inf) for probabilities below the float range.
#include <cmath>
#include <limits>

#include "tensor/kernels/kernels.h"

namespace posgrad::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;  // elements; below this a thread team costs more than it saves

template <typename T>
T row_max(const T* x, int64_t C) {
  T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t c = 0; c < C; ++c) m = x[c] > m ? x[c] : m;
  return m;
}
}  // namespace

// y (N, C) = exp(x - max) / sum exp(x - max), per row.
template <typename T>
void softmax_forward(T* y, const T* x, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * C;
    T* yr = y + n * C;
    const T m = row_max(xr, C);
    T s = T(0);
    for (int64_t c = 0; c < C; ++c) {
      const T e = std::exp(xr[c] - m);
      yr[c] = e;
      s += e;
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

// y (N, C) = x - max - log(sum exp(x - max)), per row.
template <typename T>
void log_softmax_forward(T* y, const T* x, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * C;
    T* yr = y + n * C;
    const T m = row_max(xr, C);
    T s = T(0);
    for (int64_t c = 0; c < C; ++c) s += std::exp(xr[c] - m);
    const T shift = m + std::log(s);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] - shift;
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

#define INST(T)                                                                    \
  template void softmax_forward<T>(T*, const T*, int64_t, int64_t);                \
  template void softmax_backward<T>(T*, const T*, const T*, int64_t, int64_t);     \
  template void log_softmax_forward<T>(T*, const T*, int64_t, int64_t);            \
  template void log_softmax_backward<T>(T*, const T*, const T*, int64_t, int64_t);
INST(float)
INST(double)
#undef INST

}  // namespace posgrad::kernels::cpu
