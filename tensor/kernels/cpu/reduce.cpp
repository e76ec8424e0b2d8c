// reduce.cpp — sum and max along one dim of x (outer, R, inner) on the CPU. Each output element
// is summed sequentially over R by one thread: the order is fixed whatever the thread count.
// max follows torch.max(x, dim): the first maximum on ties, and NaN propagates — a NaN anywhere
// along R is the result, at the index of the first NaN (a plain `x > best` scan skips a NaN that
// does not come first). Its backward routes the gradient to that one index (PyTorch's
// value_selecting_reduction_backward): ties and NaN positions need no special case.
#include <algorithm>
#include <type_traits>

#include "tensor/kernels/cpu/vec_kernels.h"
#include "tensor/kernels/kernels.h"

namespace posgrad::kernels::cpu {

template <typename T>
void sum_dim_forward(T* y, const T* x, int64_t outer, int64_t R, int64_t inner) {
  if (inner == 1) {
#pragma omp parallel for schedule(static) if (outer * R > (1 << 15))
    for (int64_t o = 0; o < outer; ++o) {
      const T* xr = x + o * R;
      T s = T(0);
      for (int64_t r = 0; r < R; ++r) s += xr[r];
      y[o] = s;
    }
    return;
  }
  // Work items are (o, a run of kColumns columns): a bias gradient (outer = 1) still spreads over the
  // team. Each output element is summed over R in order by one thread either way.
  constexpr int64_t kColumns = 64;
  const int64_t runs = (inner + kColumns - 1) / kColumns;
#pragma omp parallel for schedule(static) if (outer * R * inner > (1 << 15))
  for (int64_t w = 0; w < outer * runs; ++w) {
    const int64_t o = w / runs, c0 = (w % runs) * kColumns, c1 = std::min(inner, c0 + kColumns);
    T* yo = y + o * inner;
    if constexpr (std::is_same_v<T, float>) {  // the same additions, vectorised for the CPU's instruction set
      column_sums_f32(yo + c0, x + o * R * inner + c0, R, inner, c1 - c0);
      continue;
    }
    for (int64_t i = c0; i < c1; ++i) yo[i] = T(0);
    for (int64_t r = 0; r < R; ++r) {
      const T* xr = x + (o * R + r) * inner;
#pragma omp simd
      for (int64_t i = c0; i < c1; ++i) yo[i] += xr[i];
    }
  }
}

template <typename T>
void sum_dim_backward(T* dx, const T* dy, int64_t outer, int64_t R, int64_t inner) {
#pragma omp parallel for schedule(static) if (outer * R * inner > (1 << 15))
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < R; ++r) {
      T* dxr = dx + (o * R + r) * inner;
      const T* dyo = dy + o * inner;
#pragma omp simd
      for (int64_t i = 0; i < inner; ++i) dxr[i] += dyo[i];
    }
}

template <typename T>
void max_dim_forward(T* y, int64_t* idx, const T* x, int64_t outer, int64_t R, int64_t inner) {
#pragma omp parallel for schedule(static) if (outer * R * inner > (1 << 15))
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const T* xo = x + o * R * inner + i;
      T best = xo[0];
      int64_t arg = 0;
      for (int64_t r = 1; r < R && best == best; ++r) {  // stop at the first NaN
        const T v = xo[r * inner];
        if (v > best || v != v) {
          best = v;
          arg = r;
        }
      }
      y[o * inner + i] = best;
      idx[o * inner + i] = arg;
    }
}

template <typename T>
void max_dim_backward(T* dx, const T* dy, const int64_t* idx, int64_t outer, int64_t R, int64_t inner) {
#pragma omp parallel for schedule(static) if (outer * inner > (1 << 15))
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) dx[(o * R + idx[o * inner + i]) * inner + i] += dy[o * inner + i];
}

#define INST(T)                                                                        \
  template void sum_dim_forward<T>(T*, const T*, int64_t, int64_t, int64_t);           \
  template void sum_dim_backward<T>(T*, const T*, int64_t, int64_t, int64_t);          \
  template void max_dim_forward<T>(T*, int64_t*, const T*, int64_t, int64_t, int64_t); \
  template void max_dim_backward<T>(T*, const T*, const int64_t*, int64_t, int64_t, int64_t);
INST(float)
INST(double)

}  // namespace posgrad::kernels::cpu
