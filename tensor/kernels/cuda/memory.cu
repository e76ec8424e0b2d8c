// memory.cu — fills, strided copies, casts, axpy and the sum of squares on the GPU; the CUDA
// twins of cpu/memory.cpp, with the same semantics (cast to bool is x != 0).
//
// copy_strided receives its shape and strides as HOST arrays (they come from the Tensor's
// metadata), so they travel to the kernel by value in a fixed-size struct, not through memory.
// sum_squares is two fixed passes (kParts block partials in a static device buffer, then one block
// adding them in order): deterministic, allocation-free, but a different order from the CPU's.
#include <type_traits>

#include "tensor/kernels/cuda/common.cuh"

namespace posgrad::kernels::cuda {

using namespace posgrad::cuda;

namespace {

template <typename T>
__global__ void fill_kernel(T* y, int64_t n, T value) {
  POSGRAD_GRID_STRIDE(i, n) y[i] = value;
}

struct StridedDesc {
  int ndim;
  int64_t shape[kMaxDims], ys[kMaxDims], xs[kMaxDims];
};

// Element i of the row-major index space over `shape`: y at sum(idx*ys), x at sum(idx*xs).
template <typename T>
__global__ void copy_strided_kernel(T* y, const T* x, int64_t total, StridedDesc d) {
  POSGRAD_GRID_STRIDE(i, total) {
    int64_t rem = i, yo = 0, xo = 0;
    for (int k = d.ndim - 1; k >= 0; --k) {
      const int64_t idx = rem % d.shape[k];
      rem /= d.shape[k];
      yo += idx * d.ys[k];
      xo += idx * d.xs[k];
    }
    y[yo] = x[xo];
  }
}

template <typename TO, typename TI>
__global__ void cast_kernel(TO* y, const TI* x, int64_t n) {
  POSGRAD_GRID_STRIDE(i, n) {
    if constexpr (std::is_same_v<TO, uint8_t>)
      y[i] = x[i] != TI(0);
    else
      y[i] = static_cast<TO>(x[i]);
  }
}

template <typename T>
__global__ void axpy_kernel(T* y, const T* x, int64_t n, T alpha) {
  POSGRAD_GRID_STRIDE(i, n) y[i] += alpha * x[i];
}

constexpr int kParts = 256;  // blocks of the first sum_squares pass
__device__ double g_sum_squares_parts[kParts];

// Pass 1: block b sums x^2 over its grid-stride subset (in double) into g_sum_squares_parts[b].
template <typename T>
__global__ void sum_squares_parts_kernel(const T* x, int64_t n) {
  double s = 0;
  POSGRAD_GRID_STRIDE(i, n) {
    const double v = static_cast<double>(x[i]);
    s += v * v;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) g_sum_squares_parts[blockIdx.x] = s;
}

// Pass 2: one block adds the kParts partials.
__global__ void sum_squares_final_kernel(double* out) {
  double s = 0;
  for (int i = threadIdx.x; i < kParts; i += blockDim.x) s += g_sum_squares_parts[i];
  s = block_sum(s);
  if (threadIdx.x == 0) out[0] = s;
}

}  // namespace

template <typename T>
void fill(T* y, int64_t n, T value) {
  if (n <= 0) return;
  launch("fill", fill_kernel<T>, grid_for(n, kBlock), kBlock, 0, y, n, value);
}

template <typename T>
void copy_strided(T* y, const T* x, int ndim, const int64_t* shape, const int64_t* y_strides,
                  const int64_t* x_strides) {
  POSGRAD_CHECK(ndim >= 0 && ndim <= kMaxDims, ShapeError, "copy_strided: ", ndim, " dims (at most ", kMaxDims,
                " supported)");
  StridedDesc d{};
  d.ndim = ndim;
  int64_t total = 1;
  for (int k = 0; k < ndim; ++k) {
    d.shape[k] = shape[k];
    d.ys[k] = y_strides[k];
    d.xs[k] = x_strides[k];
    total *= shape[k];
  }
  if (total <= 0) return;
  launch("copy_strided", copy_strided_kernel<T>, grid_for(total, kBlock), kBlock, 0, y, x, total, d);
}

template <typename TO, typename TI>
void cast(TO* y, const TI* x, int64_t n) {
  if (n <= 0) return;
  launch("cast", cast_kernel<TO, TI>, grid_for(n, kBlock), kBlock, 0, y, x, n);
}

template <typename T>
void axpy(T* y, const T* x, int64_t n, T alpha) {
  if (n <= 0) return;
  launch("axpy", axpy_kernel<T>, grid_for(n, kBlock), kBlock, 0, y, x, n, alpha);
}

// out: a DEVICE pointer to one double (the caller reads it back with item()).
template <typename T>
void sum_squares(double* out, const T* x, int64_t n) {
  if (n <= 0) {
    fill<double>(out, 1, 0.0);
    return;
  }
  launch("sum_squares", sum_squares_parts_kernel<T>, kParts, kRowBlock, 0, x, n);
  launch("sum_squares", sum_squares_final_kernel, 1, kRowBlock, 0, out);
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

#undef INST_CAST_FROM
#undef INST_MEM
#undef POSGRAD_ALL_TYPES
}  // namespace posgrad::kernels::cuda
