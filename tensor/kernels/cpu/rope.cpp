// rope.cpp — rotary position embedding on the CPU (Su et al., RoFormer, arXiv 2104.09864; the
// layouts of spec §3.2: GPT-NeoX/LLaMA rotate_half and GPT-J/RoFormer interleaved, with partial
// rotary). The angles (and YaRN's attention factor) are folded into the cos/sin tables by the
// caller (nn/posenc/rope.cpp); this file only applies the block-diagonal rotation.
// Backward (spec §3.3): R is orthogonal, so dx = R(theta)^T dy = R(-theta) dy — the same loop with
// the sign of sin flipped; pass-through channels copy the gradient.
#include "tensor/kernels/kernels.h"

namespace posgrad::kernels::cpu {

namespace {

// How rope_apply stores a result: y = v (the forward), y += v (rope_backward's contract), y = 0 + v (its
// overwriting variant: the bits of accumulating into zeros).
enum class Store { assign, accumulate, zero_plus };

// y (or dx) for one (N, T, D) tensor, y dense; sgn = +1 forward, -1 backward. Row (n, t) of x at
// x + (n / H) xs.batch + (n % H) xs.head + t xs.row (a dense x: H = 1, xs = {T D, 0, D}).
template <typename T, Store kStore>
void rope_apply(T* y, const T* x, const T* cos, const T* sin, int64_t N, int64_t T_, int64_t D, int64_t dr,
                bool interleaved, T sgn, int64_t H, const HeadStrides& xs) {
  const int64_t half = dr / 2;
#pragma omp parallel for schedule(static) if (N * T_ * D > (1 << 15))
  for (int64_t row = 0; row < N * T_; ++row) {
    const int64_t t = row % T_, n = row / T_;
    const T* xr = x + (n / H) * xs.batch + (n % H) * xs.head + t * xs.row;
    T* yr = y + row * D;
    auto put = [](T& out, T v) {
      if constexpr (kStore == Store::accumulate)
        out += v;
      else if constexpr (kStore == Store::zero_plus)
        out = T(0) + v;
      else
        out = v;
    };
    const T* c = cos + t * half;
    const T* s = sin + t * half;
    // Pair (a, b) -> (a cos - b sin, b cos + a sin) forward; with sgn = -1 the inverse rotation.
    if (interleaved) {
      for (int64_t kk = 0; kk < half; ++kk) {
        const T a = xr[2 * kk], b = xr[2 * kk + 1], ck = c[kk], sk = sgn * s[kk];
        const T ya = a * ck - b * sk, yb = b * ck + a * sk;
        put(yr[2 * kk], ya);
        put(yr[2 * kk + 1], yb);
      }
    } else {
      for (int64_t kk = 0; kk < half; ++kk) {
        const T a = xr[kk], b = xr[kk + half], ck = c[kk], sk = sgn * s[kk];
        const T ya = a * ck - b * sk, yb = b * ck + a * sk;
        put(yr[kk], ya);
        put(yr[kk + half], yb);
      }
    }
    for (int64_t e = dr; e < D; ++e) put(yr[e], xr[e]);  // partial rotary: the tail passes through unchanged
  }
}

}  // namespace

template <typename T>
void rope_forward(T* y, const T* x, const T* cos, const T* sin, int64_t N, int64_t T_, int64_t D, int64_t dr,
                  bool interleaved) {
  rope_apply<T, Store::assign>(y, x, cos, sin, N, T_, D, dr, interleaved, T(1), 1, HeadStrides{T_ * D, 0, D});
}

template <typename T>
void rope_backward(T* dx, const T* dy, const T* cos, const T* sin, int64_t N, int64_t T_, int64_t D, int64_t dr,
                   bool interleaved) {
  rope_apply<T, Store::accumulate>(dx, dy, cos, sin, N, T_, D, dr, interleaved, T(-1), 1, HeadStrides{T_ * D, 0, D});
}

template <typename T>
void rope_forward_strided(T* y, const T* x, const HeadStrides& xs, const T* cos, const T* sin, int64_t B, int64_t H,
                          int64_t T_, int64_t D, int64_t dr, bool interleaved) {
  rope_apply<T, Store::assign>(y, x, cos, sin, B * H, T_, D, dr, interleaved, T(1), H, xs);
}

template <typename T>
void rope_backward_overwrite(T* dx, const T* dy, const T* cos, const T* sin, int64_t N, int64_t T_, int64_t D,
                             int64_t dr, bool interleaved) {
  rope_apply<T, Store::zero_plus>(dx, dy, cos, sin, N, T_, D, dr, interleaved, T(-1), 1, HeadStrides{T_ * D, 0, D});
}

template void rope_forward<float>(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                  bool);
template void rope_forward<double>(double*, const double*, const double*, const double*, int64_t, int64_t, int64_t,
                                   int64_t, bool);
template void rope_backward<float>(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                   bool);
template void rope_backward<double>(double*, const double*, const double*, const double*, int64_t, int64_t, int64_t,
                                    int64_t, bool);
template void rope_forward_strided<float>(float*, const float*, const HeadStrides&, const float*, const float*, int64_t,
                                          int64_t, int64_t, int64_t, int64_t, bool);
template void rope_forward_strided<double>(double*, const double*, const HeadStrides&, const double*, const double*,
                                           int64_t, int64_t, int64_t, int64_t, int64_t, bool);
template void rope_backward_overwrite<float>(float*, const float*, const float*, const float*, int64_t, int64_t,
                                             int64_t, int64_t, bool);
template void rope_backward_overwrite<double>(double*, const double*, const double*, const double*, int64_t, int64_t,
                                              int64_t, int64_t, bool);

}  // namespace posgrad::kernels::cpu
