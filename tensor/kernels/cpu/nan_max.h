// nan_max.h — the NaN-propagating maximum shared by the CPU kernels that reduce by comparison
// (max_dim, the row maxima of softmax, log_softmax, cross-entropy and attention).
//
// Why: a NaN compares false with everything, so the usual running maximum `m = x > m ? x : m`
// keeps a NaN only when it comes first ([NaN, 1, 3] -> NaN, but [1, NaN, 3] -> 3). PyTorch and
// NumPy propagate NaN wherever it sits (torch.max, torch.amax, np.max); so do these helpers. The
// SIMD row maximum keeps the vectorised `max` reduction and ORs a separate "saw a NaN" flag, so it
// costs one extra compare per element and stays a fixed-order (deterministic) reduction.
// Not here: argmax with indices (reduce.cpp picks the first NaN itself).
#pragma once

#include <cstdint>
#include <limits>

namespace posgrad::kernels::cpu {

// max(a, b), NaN if either is NaN; a on ties (first wins).
template <typename T>
inline T nan_max(T a, T b) {
  return (b > a || b != b) ? b : a;
}

// Largest of x[0..n) (-inf for n == 0), NaN if any element is NaN.
template <typename T>
inline T nan_row_max(const T* x, int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
  int nan = 0;
#pragma omp simd reduction(max : m) reduction(| : nan)
  for (int64_t i = 0; i < n; ++i) {
    m = x[i] > m ? x[i] : m;
    nan |= x[i] != x[i];
  }
  return nan ? std::numeric_limits<T>::quiet_NaN() : m;
}

}  // namespace posgrad::kernels::cpu
