// optim.cpp — elementwise parameter updates of AdamW and SGD on the CPU (p, g, m, v, buf all (n)).
// Not here: step counting, bias-correction factors, learning-rate schedules, parameter groups
// (train/optim.cpp computes those and calls these kernels once per parameter tensor).
//
// Update rules follow PyTorch's torch.optim.AdamW / torch.optim.SGD documentation (the
// "Algorithm" boxes), with the same order of floating-point operations so that results track
// PyTorch closely:
//   AdamW (Loshchilov & Hutter 2019, Alg. 2; decoupled weight decay):
//     p <- p * (1 - lr * wd)
//     m <- beta1 * m + (1 - beta1) * g
//     v <- beta2 * v + (1 - beta2) * g^2
//     p <- p - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)      bc_i = 1 - beta_i^t
//   SGD (dampening 0, no Nesterov; coupled L2 decay):
//     g <- g + wd * p
//     buf <- momentum * buf + g        (buf starts at 0, so the first step gives buf = g)
//     p <- p - lr * buf                (p <- p - lr * g when momentum == 0; buf may then be null)
// Elements are independent: a plain parallel loop, bit-identical for any thread count.
#include <cmath>

#include "tensor/kernels/kernels.h"

namespace posgrad::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;  // elements
}  // namespace

template <typename T>
void adamw_step(T* p, T* m, T* v, const T* g, int64_t n, T lr, T beta1, T beta2, T eps, T weight_decay,
                T bias_correction1, T bias_correction2) {
  const T decay = T(1) - lr * weight_decay;
  const T step_size = lr / bias_correction1;
  const T bc2_sqrt = std::sqrt(bias_correction2);
  const T one_m_b1 = T(1) - beta1, one_m_b2 = T(1) - beta2;
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const T gi = g[i];
    const T mi = beta1 * m[i] + one_m_b1 * gi;
    const T vi = beta2 * v[i] + one_m_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const T denom = std::sqrt(vi) / bc2_sqrt + eps;
    p[i] = p[i] * decay - step_size * (mi / denom);
  }
}

template <typename T>
void sgd_step(T* p, T* buf, const T* g, int64_t n, T lr, T momentum, T weight_decay) {
  if (momentum != T(0)) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const T gi = g[i] + weight_decay * p[i];
      const T b = momentum * buf[i] + gi;
      buf[i] = b;
      p[i] -= lr * b;
    }
  } else {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + weight_decay * p[i]);
  }
}

#define INST(T)                                                                    \
  template void adamw_step<T>(T*, T*, T*, const T*, int64_t, T, T, T, T, T, T, T); \
  template void sgd_step<T>(T*, T*, const T*, int64_t, T, T, T);
INST(float)
INST(double)
#undef INST

}  // namespace posgrad::kernels::cpu
