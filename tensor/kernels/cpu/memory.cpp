// memory.cpp — fills, strided copies, casts and axpy on the CPU.
#include <omp.h>

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

// The copy walks rows of the last dim. Adjacent dims that are one run on both sides (stride[d] ==
// shape[d + 1] * stride[d + 1] in x and in y) are merged first and size-1 dims dropped, so a row is as
// long as the layouts allow; then each thread takes a static share of the rows and steps through them
// with an odometer over the outer dims: a div and a mod per outer dim happen once per thread, not once
// per row. (With one of each per dim and row, the attention's head split — rows of D = 16 floats —
// spent about 100 cycles per 64-byte row.) Short contiguous rows are copied by an inline loop; a call
// to memcpy costs more than moving 64 bytes.
template <typename T>
void copy_strided(T* y, const T* x, int ndim, const int64_t* shape, const int64_t* y_strides,
                  const int64_t* x_strides) {
  POSGRAD_CHECK(ndim >= 0 && ndim <= kMaxDims, ShapeError, "copy_strided: ", ndim, " dims (at most ", kMaxDims,
                " supported)");
  if (ndim == 0) {
    y[0] = x[0];
    return;
  }
  int64_t total = 1;
  for (int d = 0; d < ndim; ++d) total *= shape[d];
  if (total == 0) return;
  // Merged layout, outermost first.
  int64_t sh[kMaxDims], ys[kMaxDims], xs[kMaxDims];
  int nd = 0;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    if (nd > 0 && ys[nd - 1] == shape[d] * y_strides[d] && xs[nd - 1] == shape[d] * x_strides[d]) {
      sh[nd - 1] *= shape[d];
      ys[nd - 1] = y_strides[d];
      xs[nd - 1] = x_strides[d];
      continue;
    }
    sh[nd] = shape[d];
    ys[nd] = y_strides[d];
    xs[nd] = x_strides[d];
    ++nd;
  }
  if (nd == 0) {  // every dim of size 1: one element
    y[0] = x[0];
    return;
  }
  const int64_t inner = sh[nd - 1], y_step = ys[nd - 1], x_step = xs[nd - 1];
  const int64_t rows = total / inner;
  const int outer = nd - 1;
#pragma omp parallel if (total > (1 << 16))
  {
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t r0 = rows * tid / nt, r1 = rows * (tid + 1) / nt;
    if (r0 < r1) {
      int64_t idx[kMaxDims];
      int64_t yo = 0, xo = 0, rem = r0;
      for (int d = outer - 1; d >= 0; --d) {
        idx[d] = rem % sh[d];
        rem /= sh[d];
        yo += idx[d] * ys[d];
        xo += idx[d] * xs[d];
      }
      for (int64_t r = r0; r < r1; ++r) {
        T* yr = y + yo;
        const T* xr = x + xo;
        if (y_step == 1 && x_step == 1) {
          if (inner >= 256) {
            std::memcpy(static_cast<void*>(yr), static_cast<const void*>(xr), sizeof(T) * inner);
          } else {
#pragma omp simd
            for (int64_t i = 0; i < inner; ++i) yr[i] = xr[i];
          }
        } else {
          for (int64_t i = 0; i < inner; ++i) yr[i * y_step] = xr[i * x_step];
        }
        for (int d = outer - 1; d >= 0; --d) {  // next row: the odometer over the outer dims
          yo += ys[d];
          xo += xs[d];
          if (++idx[d] < sh[d]) break;
          yo -= sh[d] * ys[d];
          xo -= sh[d] * xs[d];
          idx[d] = 0;
        }
      }
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
