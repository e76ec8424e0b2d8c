// cross_entropy.cu — fused softmax cross-entropy over logits (N, V) on the GPU; the CUDA twin of
// cpu/cross_entropy.cpp (m the NaN-propagating row max, ls = log(sum exp(logits - m)); saved stats
// (N, 2) = (m, ls); loss = ls - (logits[target] - m), 0 for ignored rows; backward dlogits +=
// dloss[n] * (exp((logits - m) - ls) - onehot) — x - m first, never x - (m + ls), see there).
// Targets are validated here, not on the host (that would read them back at every call): a target out
// of range is reported through index_fault() (common.cuh) and its row's loss is NaN. The mean over
// the rows not ignored is formed on the device too (cross_entropy_mean), so the host never needs the
// count of those rows.
// Forward: one block per row with fixed-tree reductions (deterministic). Backward: elementwise over
// (N, V); the target element does (d + g * p) - g in one thread, the CPU's two steps in order.
#include "tensor/kernels/cuda/common.cuh"

namespace posgrad::kernels::cuda {

using namespace posgrad::cuda;

namespace {

template <typename T>
__global__ void cross_entropy_forward_kernel(T* loss, T* stats, const T* logits, const int64_t* targets, int64_t N,
                                             int64_t V, int64_t ignore_index, IndexFault* fault) {
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
      if (t != ignore_index && (t < 0 || t >= V)) {
        report_index_fault(fault, kCrossEntropyTarget, n, t, V);
        loss[n] = static_cast<T>(NAN);
      } else {
        loss[n] = t == ignore_index ? T(0) : ls - (xr[t] - m);
      }
    }
  }
}

template <typename T>
__global__ void cross_entropy_backward_kernel(T* dlogits, const T* dloss, const T* logits, const T* stats,
                                              const int64_t* targets, int64_t N, int64_t V, int64_t ignore_index) {
  POSGRAD_GRID_STRIDE(j, N * V) {
    const int64_t n = j / V, v = j % V;
    const int64_t t = targets[n];
    if (t == ignore_index || t < 0 || t >= V) continue;  // out of range: reported by the forward
    const T g = dloss[n];
    T d = dlogits[j] + g * d_exp((logits[j] - stats[2 * n]) - stats[2 * n + 1]);
    if (v == t) d -= g;
    dlogits[j] = d;
  }
}

// One block: the rows' losses summed in a fixed tree and the rows not ignored counted; out = sum /
// count (0 when every row is ignored), the count kept for the backward.
template <typename T>
__global__ void cross_entropy_mean_kernel(T* out, int64_t* count, const T* loss, const int64_t* targets, int64_t N,
                                          int64_t ignore_index) {
  T s = T(0);
  long long c = 0;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) {
    s += loss[n];
    c += targets[n] != ignore_index ? 1 : 0;
  }
  s = block_sum(s);
  c = block_sum(c);
  if (threadIdx.x == 0) {
    out[0] = c == 0 ? T(0) : s * static_cast<T>(1.0 / static_cast<double>(c));
    count[0] = c;
  }
}

template <typename T>
__global__ void cross_entropy_mean_backward_kernel(T* dloss, const T* dy, const int64_t* count, int64_t N) {
  POSGRAD_GRID_STRIDE(n, N) {
    const int64_t c = count[0];
    dloss[n] = c == 0 ? T(0) : static_cast<T>(static_cast<double>(dy[0]) / static_cast<double>(c));
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
         V, ignore_index, index_fault());
}

template <typename T>
void cross_entropy_mean(T* out, int64_t* count, const T* loss, const int64_t* targets, int64_t N,
                        int64_t ignore_index) {
  launch("cross_entropy_mean", cross_entropy_mean_kernel<T>, 1, kRowBlock, 0, out, count, loss, targets, N,
         ignore_index);
}

template <typename T>
void cross_entropy_mean_backward(T* dloss, const T* dy, const int64_t* count, int64_t N) {
  if (N <= 0) return;
  launch("cross_entropy_mean_backward", cross_entropy_mean_backward_kernel<T>, grid_for(N, kBlock), kBlock, 0, dloss,
         dy, count, N);
}

template <typename T>
void cross_entropy_backward(T* dlogits, const T* dloss, const T* logits, const T* stats, const int64_t* targets,
                            int64_t N, int64_t V, int64_t ignore_index) {
  if (N <= 0 || V <= 0) return;
  launch("cross_entropy_backward", cross_entropy_backward_kernel<T>, grid_for(N * V, kBlock), kBlock, 0, dlogits, dloss,
         logits, stats, targets, N, V, ignore_index);
}

#define INST(T)                                                                                               \
  template void cross_entropy_forward<T>(T*, T*, const T*, const int64_t*, int64_t, int64_t, int64_t);        \
  template void cross_entropy_backward<T>(T*, const T*, const T*, const T*, const int64_t*, int64_t, int64_t, \
                                          int64_t);                                                           \
  template void cross_entropy_mean<T>(T*, int64_t*, const T*, const int64_t*, int64_t, int64_t);              \
  template void cross_entropy_mean_backward<T>(T*, const T*, const int64_t*, int64_t);
INST(float)
INST(double)
#undef INST

}  // namespace posgrad::kernels::cuda
