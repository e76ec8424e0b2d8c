// cross_entropy.cpp — fused softmax cross-entropy over logits (N, V) on the CPU: the forward
// gives each row's loss and saves its log-sum-exp in two parts; the backward forms
// (softmax - onehot) scaled by the row's incoming gradient directly from the logits and the saved
// parts, so the (N, V) probabilities are never stored. Not here: the mean over rows and the
// validation of targets (autograd/ops/cross_entropy.cpp), label smoothing, class weights.
//
// Numerics: with m the row max and ls = log(sum_v exp(logits_v - m)) (shift by the row max: no
// overflow, the sum is >= 1 so ls is finite and in [0, log V]):
//   loss      = ls - (logits[target] - m)
//   softmax_v = exp((logits_v - m) - ls)
// x - m is formed first and ls subtracted after. The textbook lse = m + ls is never formed: it
// rounds ls to the ulp of m, which is the whole gap between a logit and the lse once logits are
// large (float32, equal logits 1e4: loss 0.69336 instead of ln 2; equal logits 1e8: loss 0 and
// gradient [0, 1] instead of [-0.5, 0.5]). So the saved statistic is the pair (m, ls).
// The row max propagates NaN (nan_max.h): a NaN logit gives a NaN loss and NaN gradients.
// Rows are independent: one thread per row, fixed order inside a row.
// Exponentials: float rows run vec_kernels.cpp's loops (exp_approx, relative error ~2e-7, 0 below
// e^-87.3; the sum in exp_shift_sum_f32's 16 partial sums, the same bits on every instruction set),
// which at a character vocabulary took the kernel from about 3.5% of the compare-size training step,
// one libm exp per logit, to a fraction of that. double keeps std::exp (the gradcheck precision).
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "tensor/kernels/cpu/nan_max.h"
#include "tensor/kernels/cpu/vec_kernels.h"
#include "tensor/kernels/kernels.h"

namespace posgrad::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;  // elements
}  // namespace

// loss (N); stats (N, 2) = (m, ls) per row; logits (N, V); targets (N).
template <typename T>
void cross_entropy_forward(T* loss, T* stats, const T* logits, const int64_t* targets, int64_t N, int64_t V,
                           int64_t ignore_index) {
#pragma omp parallel for schedule(static) if (N * V > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = logits + n * V;
    const T m = nan_row_max(xr, V);
    T s = T(0);
    if constexpr (std::is_same_v<T, float>) {
      // The sum through a copy of the row (the kernel writes its exponentials in place); (x - m) - 0 = x - m.
      thread_local std::vector<float> row;
      row.resize(static_cast<size_t>(V));
      std::memcpy(row.data(), xr, sizeof(float) * static_cast<size_t>(V));
      s = exp_shift_sum_f32(row.data(), V, m, 0.0f);
    } else {
      for (int64_t v = 0; v < V; ++v) s += std::exp(xr[v] - m);
    }
    const T ls = std::log(s);
    stats[2 * n] = m;
    stats[2 * n + 1] = ls;
    const int64_t t = targets[n];
    loss[n] = t == ignore_index ? T(0) : ls - (xr[t] - m);
  }
}

// dlogits (N, V) += dloss[n] * (softmax(logits[n]) - onehot(targets[n])); ignored rows get nothing.
template <typename T>
void cross_entropy_backward(T* dlogits, const T* dloss, const T* logits, const T* stats, const int64_t* targets,
                            int64_t N, int64_t V, int64_t ignore_index) {
#pragma omp parallel for schedule(static) if (N * V > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = targets[n];
    if (t == ignore_index) continue;
    const T* xr = logits + n * V;
    T* dr = dlogits + n * V;
    const T g = dloss[n], m = stats[2 * n], ls = stats[2 * n + 1];
    if constexpr (std::is_same_v<T, float>) {
      exp_shift_axpy_f32(dr, xr, V, m, ls, g);
    } else {
      for (int64_t v = 0; v < V; ++v) dr[v] += g * std::exp((xr[v] - m) - ls);
    }
    dr[t] -= g;
  }
}

// The mean over the rows not ignored (the CUDA op's device-side mean; the CPU op validates and counts
// the targets on the host, so this is the reference the CUDA kernels are tested against): row order.
template <typename T>
void cross_entropy_mean(T* out, int64_t* count, const T* loss, const int64_t* targets, int64_t N,
                        int64_t ignore_index) {
  T s = T(0);
  int64_t c = 0;
  for (int64_t n = 0; n < N; ++n) {
    s += loss[n];
    c += targets[n] != ignore_index ? 1 : 0;
  }
  out[0] = c == 0 ? T(0) : s * static_cast<T>(1.0 / static_cast<double>(c));
  count[0] = c;
}

template <typename T>
void cross_entropy_mean_backward(T* dloss, const T* dy, const int64_t* count, int64_t N) {
  const T g = count[0] == 0 ? T(0) : static_cast<T>(static_cast<double>(dy[0]) / static_cast<double>(count[0]));
  for (int64_t n = 0; n < N; ++n) dloss[n] = g;
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

}  // namespace posgrad::kernels::cpu
