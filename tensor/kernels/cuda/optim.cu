// optim.cu — elementwise AdamW and SGD parameter updates on the GPU; the CUDA twins of
// cpu/optim.cpp, with the same update rules and the same order of operations (see there; PyTorch's
// torch.optim.AdamW / SGD algorithm boxes). Elements are independent: one grid-stride loop.
#include <cmath>

#include "tensor/kernels/cuda/common.cuh"

namespace posgrad::kernels::cuda {

using namespace posgrad::cuda;

namespace {

template <typename T>
__global__ void adamw_kernel(T* p, T* m, T* v, const T* g, int64_t n, T beta1, T beta2, T eps, T decay, T step_size,
                             T bc2_sqrt, T one_m_b1, T one_m_b2) {
  POSGRAD_GRID_STRIDE(i, n) {
    const T gi = g[i];
    const T mi = beta1 * m[i] + one_m_b1 * gi;
    const T vi = beta2 * v[i] + one_m_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const T denom = d_sqrt(vi) / bc2_sqrt + eps;
    p[i] = p[i] * decay - step_size * (mi / denom);
  }
}

template <typename T>
__global__ void sgd_kernel(T* p, T* buf, const T* g, int64_t n, T lr, T momentum, T weight_decay) {
  POSGRAD_GRID_STRIDE(i, n) {
    const T gi = g[i] + weight_decay * p[i];
    if (momentum != T(0)) {
      const T b = momentum * buf[i] + gi;
      buf[i] = b;
      p[i] -= lr * b;
    } else {
      p[i] -= lr * gi;
    }
  }
}

}  // namespace

template <typename T>
void adamw_step(T* p, T* m, T* v, const T* g, int64_t n, T lr, T beta1, T beta2, T eps, T weight_decay,
                T bias_correction1, T bias_correction2) {
  if (n <= 0) return;
  // Host-side scalars exactly as cpu/optim.cpp computes them.
  const T decay = T(1) - lr * weight_decay;
  const T step_size = lr / bias_correction1;
  const T bc2_sqrt = std::sqrt(bias_correction2);
  const T one_m_b1 = T(1) - beta1, one_m_b2 = T(1) - beta2;
  launch("adamw_step", adamw_kernel<T>, grid_for(n, kBlock), kBlock, 0, p, m, v, g, n, beta1, beta2, eps, decay,
         step_size, bc2_sqrt, one_m_b1, one_m_b2);
}

template <typename T>
void sgd_step(T* p, T* buf, const T* g, int64_t n, T lr, T momentum, T weight_decay) {
  if (n <= 0) return;
  launch("sgd_step", sgd_kernel<T>, grid_for(n, kBlock), kBlock, 0, p, buf, g, n, lr, momentum, weight_decay);
}

#define INST(T)                                                                    \
  template void adamw_step<T>(T*, T*, T*, const T*, int64_t, T, T, T, T, T, T, T); \
  template void sgd_step<T>(T*, T*, const T*, int64_t, T, T, T);
INST(float)
INST(double)
#undef INST

}  // namespace posgrad::kernels::cuda
