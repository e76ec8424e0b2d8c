// rope.cu — rotary position embedding on the GPU; the CUDA twin of cpu/rope.cpp (Su et al.,
// RoFormer, arXiv 2104.09864; spec §3.2 layouts: rotate_half pairs (k, k + dr/2), interleaved pairs
// (2k, 2k + 1); channels [dr, D) pass through). Backward applies R(-theta) (spec §3.3): the same
// code with the sign of sin flipped, accumulating. One thread per rotated pair or pass-through
// channel, so y == x (in place) is safe: a thread reads both members of its pair before writing.
#include "tensor/kernels/cuda/common.cuh"

namespace posgrad::kernels::cuda {

using namespace posgrad::cuda;

namespace {

// x, y (rows = N * T_, D); cos, sin (T_, dr / 2). Item q of a row: q < half is pair q, else
// pass-through channel dr + (q - half). sgn = +1 forward, -1 backward (accumulate).
template <typename T>
__global__ void rope_kernel(T* y, const T* x, const T* cos, const T* sin, int64_t rows, int64_t T_, int64_t D,
                            int64_t dr, bool interleaved, T sgn, bool accumulate) {
  const int64_t half = dr / 2, items = half + (D - dr);
  POSGRAD_GRID_STRIDE(idx, rows * items) {
    const int64_t row = idx / items, q = idx % items, t = row % T_;
    const T* xr = x + row * D;
    T* yr = y + row * D;
    if (q < half) {
      const int64_t ia = interleaved ? 2 * q : q, ib = interleaved ? 2 * q + 1 : q + half;
      const T a = xr[ia], b = xr[ib], ck = cos[t * half + q], sk = sgn * sin[t * half + q];
      const T ya = a * ck - b * sk, yb = b * ck + a * sk;
      if (accumulate) {
        yr[ia] += ya;
        yr[ib] += yb;
      } else {
        yr[ia] = ya;
        yr[ib] = yb;
      }
    } else {
      const int64_t e = dr + (q - half);
      if (accumulate)
        yr[e] += xr[e];
      else
        yr[e] = xr[e];
    }
  }
}

void check_rope(int64_t T_, int64_t D, int64_t dr, const char* what) {
  POSGRAD_CHECK(dr >= 0 && dr % 2 == 0 && dr <= D && T_ > 0, ShapeError, what, ": rotary dims dr = ", dr,
                " must be even and <= D = ", D, " (T = ", T_, ")");
}

}  // namespace

template <typename T>
void rope_forward(T* y, const T* x, const T* cos, const T* sin, int64_t N, int64_t T_, int64_t D, int64_t dr,
                  bool interleaved) {
  if (N <= 0 || T_ <= 0 || D <= 0) return;
  check_rope(T_, D, dr, "rope_forward");
  require_device_pointer(cos, "rope_forward", "cos");
  require_device_pointer(sin, "rope_forward", "sin");
  const int64_t n = N * T_ * (dr / 2 + (D - dr));
  launch("rope_forward", rope_kernel<T>, grid_for(n, kBlock), kBlock, 0, y, x, cos, sin, N * T_, T_, D, dr, interleaved,
         T(1), false);
}

template <typename T>
void rope_backward(T* dx, const T* dy, const T* cos, const T* sin, int64_t N, int64_t T_, int64_t D, int64_t dr,
                   bool interleaved) {
  if (N <= 0 || T_ <= 0 || D <= 0) return;
  check_rope(T_, D, dr, "rope_backward");
  require_device_pointer(cos, "rope_backward", "cos");
  require_device_pointer(sin, "rope_backward", "sin");
  const int64_t n = N * T_ * (dr / 2 + (D - dr));
  launch("rope_backward", rope_kernel<T>, grid_for(n, kBlock), kBlock, 0, dx, dy, cos, sin, N * T_, T_, D, dr,
         interleaved, T(-1), true);
}

template void rope_forward<float>(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                  bool);
template void rope_forward<double>(double*, const double*, const double*, const double*, int64_t, int64_t, int64_t,
                                   int64_t, bool);
template void rope_backward<float>(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                   bool);
template void rope_backward<double>(double*, const double*, const double*, const double*, int64_t, int64_t, int64_t,
                                    int64_t, bool);

}  // namespace posgrad::kernels::cuda
