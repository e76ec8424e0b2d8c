// cross_entropy.cu — fused softmax cross-entropy over logits (N, V) on the GPU; the CUDA twin of
// cpu/cross_entropy.cpp (m the NaN-propagating row max, ls = log(sum exp(logits - m)); saved stats
// (N, 2) = (m, ls); loss = ls - (logits[target] - m), 0 for ignored rows; backward dlogits +=
// dloss[n] * (exp((logits - m) - ls) - onehot) — x - m first, never x - (m + ls), see there).
// Targets are validated on the host by the caller.
// Forward: one block per row with fixed-tree reductions (deterministic). Backward: elementwise over
// (N, V); the target element does (d + g * p) - g in one thread, the CPU's two steps in order.
#include "tensor/kernels/cuda/common.cuh"

namespace posgrad::kernels::cuda {

using namespace posgrad::cuda;

namespace {

template <typename T>
__global__ void cross_entropy_forward_kernel(T* loss, T* stats, const T* logits, const int64_t* targets, int64_t N,
                                             int64_t V, int64_t ignore_index) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* xr = logits + n * V;
    T m = d_neg_inf<T>();
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) m = d_nan_max(m, xr[v]);
    m = block_max(m);
    T s = T(0);
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) s += d_exp(xr[v] - m);
    s = block_sum(s);
    if (threadIdx.x == 0) {
      const T ls = d_log(s);
      stats[2 * n] = m;
      stats[2 * n + 1] = ls;
      const int64_t t = targets[n];
      loss[n] = t == ignore_index ? T(0) : ls - (xr[t] - m);
    }
  }
}

template <typename T>
__global__ void cross_entropy_backward_kernel(T* dlogits, const T* dloss, const T* logits, const T* stats,
                                              const int64_t* targets, int64_t N, int64_t V, int64_t ignore_index) {
  POSGRAD_GRID_STRIDE(j, N * V) {
    const int64_t n = j / V, v = j % V;
    const int64_t t = targets[n];
    if (t == ignore_index) continue;
    const T g = dloss[n];
    T d = dlogits[j] + g * d_exp((logits[j] - stats[2 * n]) - stats[2 * n + 1]);
    if (v == t) d -= g;
    dlogits[j] = d;
  }
}

}  // namespace

template <typename T>
void cross_entropy_forward(T* loss, T* stats, const T* logits, const int64_t* targets, int64_t N, int64_t V,
                           int64_t ignore_index) {
  if (N <= 0) return;
  POSGRAD_CHECK(V > 0, ShapeError, "cross_entropy_forward: empty vocabulary (V = ", V, ")");
  const unsigned grid = static_cast<unsigned>(N < 65535 ? N : 65535);
  launch("cross_entropy_forward", cross_entropy_forward_kernel<T>, grid, kRowBlock, 0, loss, stats, logits, targets, N,
         V, ignore_index);
}

template <typename T>
void cross_entropy_backward(T* dlogits, const T* dloss, const T* logits, const T* stats, const int64_t* targets,
                            int64_t N, int64_t V, int64_t ignore_index) {
  if (N <= 0 || V <= 0) return;
  launch("cross_entropy_backward", cross_entropy_backward_kernel<T>, grid_for(N * V, kBlock), kBlock, 0, dlogits, dloss,
         logits, stats, targets, N, V, ignore_index);
}

#define INST(T)                                                                                        \
  template void cross_entropy_forward<T>(T*, T*, const T*, const int64_t*, int64_t, int64_t, int64_t); \
  template void cross_entropy_backward<T>(T*, const T*, const T*, const T*, const int64_t*, int64_t, int64_t, int64_t);
INST(float)
INST(double)
#undef INST

}  // namespace posgrad::kernels::cuda
