// cope.cpp — CoPE's O(T^2) loops on the CPU (Golovneva, Wang, Weston, Sukhbaatar, "Contextual Position
// Encoding", arXiv 2405.18719 §3; SPEC-positions-2 §8.3 for the forward, §8.4 for the backward): the
// gates, their suffix-sum counts and the interpolated positional logits, given the products a = q k^T
// and z = q E, which the op (nn/posenc/cope.cpp) computes by matmul. The contract is in
// kernels_decl.inc.
//
// Backward (SPEC-2 §8.4): the interpolation weight carries the only gradient into the gates; the
// transpose of the suffix sum is a prefix sum along the keys; the clamp p <= P - 1 passes the
// gradient at equality (torch.clamp's convention).
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "tensor/kernels/cpu/vec_kernels.h"
#include "tensor/kernels/kernels.h"

namespace posgrad::kernels::cpu {

namespace {

// g_j = sigmoid(scale a_j) for j < n.
template <typename T>
void gates(T* g, const T* a, int64_t n, T scale) {
  if constexpr (std::is_same_v<T, float>) {
    sigmoid_scaled_f32(g, a, n, scale);
  } else {
    for (int64_t j = 0; j < n; ++j) {
      const T v = a[j] * scale;
      g[j] = v >= 0 ? T(1) / (T(1) + std::exp(-v)) : std::exp(v) / (T(1) + std::exp(v));
    }
  }
}

// One query row's gates g_j and positions p_j = sum_{t=j..i} g_t (unclamped), for keys j = 0..i.
template <typename T>
void gate_row(const T* a, int64_t i, T scale, T* g, T* p) {
  gates<T>(g, a, i + 1, scale);
  T acc = 0;
  for (int64_t j = i; j >= 0; --j) p[j] = acc += g[j];  // suffix sum: keys j..i
}

// Interpolation of the clamped position p: floor, ceil, weight.
template <typename T>
struct Interp {
  int64_t f, c;
  T w;
};
template <typename T>
Interp<T> interp(T p, int64_t P) {
  const T ph = std::min(p, static_cast<T>(P - 1));
  const T f = std::floor(ph);
  return {static_cast<int64_t>(f), static_cast<int64_t>(std::ceil(ph)), ph - f};
}

}  // namespace

template <typename T>
void cope_forward(T* a, const T* z, int64_t BH, int64_t T_, int64_t P, T scale, T pos_scale) {
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < BH; ++bh) {
    std::vector<T> g(static_cast<size_t>(T_)), p(static_cast<size_t>(T_));
    for (int64_t i = 0; i < T_; ++i) {
      T* s = a + (bh * T_ + i) * T_;
      const T* zi = z + (bh * T_ + i) * P;
      gate_row<T>(s, i, scale, g.data(), p.data());
      for (int64_t j = 0; j <= i; ++j) {
        const Interp<T> t = interp<T>(p[j], P);
        s[j] = s[j] * scale + (t.w * zi[t.c] + (T(1) - t.w) * zi[t.f]) * pos_scale;
      }
      std::fill(s + i + 1, s + T_, T(0));  // masked entries (j > i)
    }
  }
}

template <typename T>
void cope_backward(T* da, T* dz, const T* a, const T* z, const T* dS, int64_t BH, int64_t T_, int64_t P, T scale,
                   T pos_scale) {
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < BH; ++bh) {
    std::vector<T> g(static_cast<size_t>(T_)), p(static_cast<size_t>(T_)), dp(static_cast<size_t>(T_));
    for (int64_t i = 0; i < T_; ++i) {
      const size_t row = static_cast<size_t>(bh * T_ + i);
      const T* ai = a + row * T_;
      const T* zi = z + row * P;
      const T* gs = dS + row * T_;
      T* dai = da + row * T_;
      T* dzi = dz + row * P;
      gate_row<T>(ai, i, scale, g.data(), p.data());
      for (int64_t j = 0; j <= i; ++j) {
        const Interp<T> t = interp<T>(p[j], P);
        const T dl = gs[j] * pos_scale;  // d/d(positional logit)
        dai[j] = gs[j] * scale;          // content path
        dzi[t.f] += dl * (T(1) - t.w);
        dzi[t.c] += dl * t.w;
        dp[j] = p[j] <= static_cast<T>(P - 1) ? dl * (zi[t.c] - zi[t.f]) : T(0);  // dw, through the clamp
      }
      T acc = 0;  // dg_t = sum_{j <= t} dp_j: the transpose of the suffix sum
      for (int64_t t = 0; t <= i; ++t) {
        acc += dp[t];
        dai[t] += acc * g[t] * (T(1) - g[t]) * scale;
      }
      std::fill(dai + i + 1, dai + T_, T(0));
    }
  }
}

template void cope_forward<float>(float*, const float*, int64_t, int64_t, int64_t, float, float);
template void cope_forward<double>(double*, const double*, int64_t, int64_t, int64_t, double, double);
template void cope_backward<float>(float*, float*, const float*, const float*, const float*, int64_t, int64_t, int64_t,
                                   float, float);
template void cope_backward<double>(double*, double*, const double*, const double*, const double*, int64_t, int64_t,
                                    int64_t, double, double);

}  // namespace posgrad::kernels::cpu
