// rope.cpp — rotary position embedding on the CPU (Su et al., RoFormer, arXiv 2104.09864; the
// layouts of spec §3.2: GPT-NeoX/LLaMA rotate_half and GPT-J/RoFormer interleaved, with partial
// rotary). The angles (and YaRN's attention factor) are folded into the cos/sin tables by the
// caller (nn/posenc/rope.cpp); this file only applies the block-diagonal rotation.
// Backward (spec §3.3): R is orthogonal, so dx = R(theta)^T dy = R(-theta) dy — the same loop with
// the sign of sin flipped; pass-through channels copy the gradient.
#include "tensor/kernels/kernels.h"

namespace posgrad::kernels::cpu {

namespace {

// y (or dx, accumulating) for one (N, T, D) tensor; sgn = +1 forward, -1 backward.
template <typename T, bool kAccumulate>
void rope_apply(T* y, const T* x, const T* cos, const T* sin, int64_t N, int64_t T_, int64_t D, int64_t dr,
                bool interleaved, T sgn) {
  const int64_t half = dr / 2;
#pragma omp parallel for schedule(static) if (N * T_ * D > (1 << 15))
  for (int64_t row = 0; row < N * T_; ++row) {
    const int64_t t = row % T_;
    const T* xr = x + row * D;
    T* yr = y + row * D;
    const T* c = cos + t * half;
    const T* s = sin + t * half;
    // Pair (a, b) -> (a cos - b sin, b cos + a sin) forward; with sgn = -1 the inverse rotation.
    if (interleaved) {
      for (int64_t kk = 0; kk < half; ++kk) {
        const T a = xr[2 * kk], b = xr[2 * kk + 1], ck = c[kk], sk = sgn * s[kk];
        const T ya = a * ck - b * sk, yb = b * ck + a * sk;
        if (kAccumulate) {
          yr[2 * kk] += ya;
          yr[2 * kk + 1] += yb;
        } else {
          yr[2 * kk] = ya;
          yr[2 * kk + 1] = yb;
        }
      }
    } else {
      for (int64_t kk = 0; kk < half; ++kk) {
        const T a = xr[kk], b = xr[kk + half], ck = c[kk], sk = sgn * s[kk];
        const T ya = a * ck - b * sk, yb = b * ck + a * sk;
        if (kAccumulate) {
          yr[kk] += ya;
          yr[kk + half] += yb;
        } else {
          yr[kk] = ya;
          yr[kk + half] = yb;
        }
      }
    }
    for (int64_t e = dr; e < D; ++e) {  // partial rotary: the tail passes through unchanged
      if (kAccumulate)
        yr[e] += xr[e];
      else
        yr[e] = xr[e];
    }
  }
}

}  // namespace

template <typename T>
void rope_forward(T* y, const T* x, const T* cos, const T* sin, int64_t N, int64_t T_, int64_t D, int64_t dr,
                  bool interleaved) {
  rope_apply<T, false>(y, x, cos, sin, N, T_, D, dr, interleaved, T(1));
}

template <typename T>
void rope_backward(T* dx, const T* dy, const T* cos, const T* sin, int64_t N, int64_t T_, int64_t D, int64_t dr,
                   bool interleaved) {
  rope_apply<T, true>(dx, dy, cos, sin, N, T_, D, dr, interleaved, T(-1));
}

template void rope_forward<float>(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                  bool);
template void rope_forward<double>(double*, const double*, const double*, const double*, int64_t, int64_t, int64_t,
                                   int64_t, bool);
template void rope_backward<float>(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                   bool);
template void rope_backward<double>(double*, const double*, const double*, const double*, int64_t, int64_t, int64_t,
                                    int64_t, bool);

}  // namespace posgrad::kernels::cpu
