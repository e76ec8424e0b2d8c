// cross_entropy.cpp — fused softmax cross-entropy over logits (N, V) on the CPU: the forward
// gives each row's loss and saves its log-sum-exp; the backward forms (softmax - onehot) scaled
// by the row's incoming gradient directly from the logits and the saved lse, so the (N, V)
// probabilities are never stored. Not here: the mean over rows and the validation of targets
// (autograd/ops/cross_entropy.cpp), label smoothing, class weights.
//
// Numerics: loss = lse - logits[target] with lse = max + log(sum exp(logits - max)) (shift by
// the row max: no overflow, the sum is >= 1 so its log is finite). The backward uses
// softmax_v = exp(logits_v - lse), which is the forward's normalised probability.
// Rows are independent: one thread per row, fixed order inside a row.
#include <cmath>
#include <limits>

#include "tensor/kernels/kernels.h"

namespace posgrad::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;  // elements
}  // namespace

// loss, lse (N); logits (N, V); targets (N).
template <typename T>
void cross_entropy_forward(T* loss, T* lse, const T* logits, const int64_t* targets, int64_t N, int64_t V,
                           int64_t ignore_index) {
#pragma omp parallel for schedule(static) if (N * V > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = logits + n * V;
    T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
    for (int64_t v = 0; v < V; ++v) m = xr[v] > m ? xr[v] : m;
    T s = T(0);
    for (int64_t v = 0; v < V; ++v) s += std::exp(xr[v] - m);
    const T l = m + std::log(s);
    lse[n] = l;
    const int64_t t = targets[n];
    loss[n] = t == ignore_index ? T(0) : l - xr[t];
  }
}

// dlogits (N, V) += dloss[n] * (softmax(logits[n]) - onehot(targets[n])); ignored rows get nothing.
template <typename T>
void cross_entropy_backward(T* dlogits, const T* dloss, const T* logits, const T* lse, const int64_t* targets,
                            int64_t N, int64_t V, int64_t ignore_index) {
#pragma omp parallel for schedule(static) if (N * V > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = targets[n];
    if (t == ignore_index) continue;
    const T* xr = logits + n * V;
    T* dr = dlogits + n * V;
    const T g = dloss[n], l = lse[n];
    for (int64_t v = 0; v < V; ++v) dr[v] += g * std::exp(xr[v] - l);
    dr[t] -= g;
  }
}

#define INST(T)                                                                                             \
  template void cross_entropy_forward<T>(T*, T*, const T*, const int64_t*, int64_t, int64_t, int64_t);       \
  template void cross_entropy_backward<T>(T*, const T*, const T*, const T*, const int64_t*, int64_t, int64_t, \
                                          int64_t);
INST(float)
INST(double)
#undef INST

}  // namespace posgrad::kernels::cpu
