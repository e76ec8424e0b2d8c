// softmax.cu — softmax and log-softmax over the last dim of x (N, C) on the GPU, forward and
// backward; the CUDA twins of cpu/softmax.cpp (same formulas: the row max m, NaN-propagating, is
// subtracted before exp; log_softmax = (x - m) - log(sum exp(x - m)), x - m first and then the log,
// never x - (m + log s), which rounds the gap away for large x; backward dx += y (dy - <dy, y>) and
// dx += dy - exp(y) sum(dy)). One block per row (grid-strided over rows), block-wide fixed-tree
// reductions (common.cuh): deterministic, not the CPU's sequential order.
#include "tensor/kernels/cuda/common.cuh"

namespace posgrad::kernels::cuda {

using namespace posgrad::cuda;

namespace {

template <typename T>
__global__ void softmax_forward_kernel(T* y, const T* x, int64_t N, int64_t C, bool log_out) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* xr = x + n * C;
    T* yr = y + n * C;
    T m = d_neg_inf<T>();
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) m = d_nan_max(m, xr[c]);
    m = block_max(m);
    T s = T(0);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += d_exp(xr[c] - m);
    s = block_sum(s);
    if (log_out) {
      const T log_s = d_log(s);
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = (xr[c] - m) - log_s;
    } else {
      const T inv = T(1) / s;
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = d_exp(xr[c] - m) * inv;
    }
  }
}

template <typename T>
__global__ void softmax_backward_kernel(T* dx, const T* dy, const T* y, int64_t N, int64_t C) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* dyr = dy + n * C;
    const T* yr = y + n * C;
    T* dxr = dx + n * C;
    T dot = T(0);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dot += dyr[c] * yr[c];
    dot = block_sum(dot);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dxr[c] += yr[c] * (dyr[c] - dot);
  }
}

template <typename T>
__global__ void log_softmax_backward_kernel(T* dx, const T* dy, const T* y, int64_t N, int64_t C) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* dyr = dy + n * C;
    const T* yr = y + n * C;
    T* dxr = dx + n * C;
    T s = T(0);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += dyr[c];
    s = block_sum(s);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dxr[c] += dyr[c] - d_exp(yr[c]) * s;
  }
}

}  // namespace

template <typename T>
void softmax_forward(T* y, const T* x, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  launch("softmax_forward", softmax_forward_kernel<T>, row_grid(N), kRowBlock, 0, y, x, N, C, false);
}

template <typename T>
void softmax_backward(T* dx, const T* dy, const T* y, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  launch("softmax_backward", softmax_backward_kernel<T>, row_grid(N), kRowBlock, 0, dx, dy, y, N, C);
}

template <typename T>
void log_softmax_forward(T* y, const T* x, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  launch("log_softmax_forward", softmax_forward_kernel<T>, row_grid(N), kRowBlock, 0, y, x, N, C, true);
}

template <typename T>
void log_softmax_backward(T* dx, const T* dy, const T* y, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  launch("log_softmax_backward", log_softmax_backward_kernel<T>, row_grid(N), kRowBlock, 0, dx, dy, y, N, C);
}

#define INST(T)                                                                \
  template void softmax_forward<T>(T*, const T*, int64_t, int64_t);            \
  template void softmax_backward<T>(T*, const T*, const T*, int64_t, int64_t); \
  template void log_softmax_forward<T>(T*, const T*, int64_t, int64_t);        \
  template void log_softmax_backward<T>(T*, const T*, const T*, int64_t, int64_t);
INST(float)
INST(double)
#undef INST

}  // namespace posgrad::kernels::cuda
