// memory.cpp — fills, strided copies, casts and axpy on the CPU.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "tensor/kernels/kernels.h"

namespace posgrad::kernels {

[[noreturn]] void no_cuda_kernel(const char* name) {
  throw DeviceError(std::string("kernel '") + name +
                    "' was asked to run on a CUDA device, but posgrad was built without CUDA "
                    "(configure with -DPOSGRAD_CUDA=ON)");
}

namespace cpu {

template <typename T>
void fill(T* y, int64_t n, T value) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) y[i] = value;
}

template <typename T>
void copy_strided(T* y, const T* x, int ndim, const int64_t* shape, const int64_t* y_strides,
                  const int64_t* x_strides) {
  // Collapse to (outer index space) x (last dim), iterate the outer space with a counter.
  if (ndim == 0) {
    y[0] = x[0];
    return;
  }
  int64_t total = 1;
  for (int d = 0; d < ndim; ++d) total *= shape[d];
  if (total == 0) return;
  const int64_t inner = shape[ndim - 1];
  const int64_t ys = y_strides[ndim - 1], xs = x_strides[ndim - 1];
  const int64_t rows = total / inner;
#pragma omp parallel for schedule(static) if (total > (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, yo = 0, xo = 0;
    for (int d = ndim - 2; d >= 0; --d) {
      int64_t i = rem % shape[d];
      rem /= shape[d];
      yo += i * y_strides[d];
      xo += i * x_strides[d];
    }
    T* yr = y + yo;
    const T* xr = x + xo;
    if (ys == 1 && xs == 1) {
      std::memcpy(static_cast<void*>(yr), static_cast<const void*>(xr), sizeof(T) * inner);
    } else {
      for (int64_t i = 0; i < inner; ++i) yr[i * ys] = xr[i * xs];
    }
  }
}

template <typename TO, typename TI>
void cast(TO* y, const TI* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<TO, uint8_t>)
      y[i] = x[i] != TI(0);
    else
      y[i] = static_cast<TO>(x[i]);
  }
}

template <typename T>
void axpy(T* y, const T* x, int64_t n, T alpha) {
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

template <typename T>
void sum_squares(double* out, const T* x, int64_t n) {
  // 64 fixed parts summed in order: the result does not depend on the thread count (cpu/optim.cpp).
  sum_squares_multi<T>(out, &x, &n, 1);
}

#define POSGRAD_ALL_TYPES(X) X(float) X(double) X(int64_t) X(uint8_t)
#define INST_MEM(T)                      \
  template void fill<T>(T*, int64_t, T); \
  template void copy_strided<T>(T*, const T*, int, const int64_t*, const int64_t*, const int64_t*);
POSGRAD_ALL_TYPES(INST_MEM)
#define INST_CAST_FROM(TI)                                       \
  template void cast<float, TI>(float*, const TI*, int64_t);     \
  template void cast<double, TI>(double*, const TI*, int64_t);   \
  template void cast<int64_t, TI>(int64_t*, const TI*, int64_t); \
  template void cast<uint8_t, TI>(uint8_t*, const TI*, int64_t);
POSGRAD_ALL_TYPES(INST_CAST_FROM)
template void axpy<float>(float*, const float*, int64_t, float);
template void axpy<double>(double*, const double*, int64_t, double);
template void sum_squares<float>(double*, const float*, int64_t);
template void sum_squares<double>(double*, const double*, int64_t);

}  // namespace cpu
}  // namespace posgrad::kernels
