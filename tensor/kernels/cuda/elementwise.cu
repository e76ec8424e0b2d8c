// elementwise.cu — unary and binary elementwise kernels, masked_fill and dropout on the GPU: the
// CUDA twins of cpu/elementwise.cpp with the same formulas (GELU exact and tanh forms, SiLU,
// derivatives written out). One kernel per family with the op switch inside: the op is the same
// for every thread (no divergence), and it keeps the number of instantiations, and build time, low.
// Dropout regenerates its keep mask from Philox (seed, offset + i) exactly as the CPU does, so
// the same elements are dropped on both backends. Singular points as on the CPU (PyTorch's
// conventions, listed in cpu/elementwise.cpp): pow(x, 0)' = 0 everywhere, relu'(0) = 0, and the
// divisor's gradient -dy * ((a / b) / b).
#include "tensor/kernels/cuda/common.cuh"
#include "tensor/philox.h"

namespace posgrad::kernels::cuda {

using namespace posgrad::cuda;

namespace {

// GELU constants as in cpu/elementwise.cpp (Hendrycks & Gimpel 2016).
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluC = 0.044715;

template <typename T>
__device__ __forceinline__ T unary_value(UnaryOp op, T v, T s) {
  switch (op) {
    case UnaryOp::Neg: return -v;
    case UnaryOp::Exp: return d_exp(v);
    case UnaryOp::Log: return d_log(v);
    case UnaryOp::Sqrt: return d_sqrt(v);
    case UnaryOp::Tanh: return d_tanh(v);
    case UnaryOp::Relu: return v > T(0) ? v : T(0);
    case UnaryOp::Gelu: return T(0.5) * v * (T(1) + d_erf(v * T(kInvSqrt2)));
    case UnaryOp::GeluTanh: return T(0.5) * v * (T(1) + d_tanh(T(kSqrt2OverPi) * (v + T(kGeluC) * v * v * v)));
    case UnaryOp::Silu: return v / (T(1) + d_exp(-v));
    case UnaryOp::Pow: return d_pow(v, s);
    case UnaryOp::AddScalar: return v + s;
    case UnaryOp::MulScalar: return v * s;
    case UnaryOp::ClampMin: return v < s ? s : v;
  }
  return v;
}

// f'(x) given x and the saved output y (only read by exp, sqrt, tanh; may be null otherwise).
template <typename T>
__device__ __forceinline__ T unary_derivative(UnaryOp op, T xv, T yv, T s) {
  switch (op) {
    case UnaryOp::Neg: return T(-1);
    case UnaryOp::Exp: return yv;
    case UnaryOp::Log: return T(1) / xv;
    case UnaryOp::Sqrt: return T(0.5) / yv;
    case UnaryOp::Tanh: return T(1) - yv * yv;
    case UnaryOp::Relu: return xv > T(0) ? T(1) : T(0);
    case UnaryOp::Gelu:  // d/dx x Phi(x) = Phi(x) + x phi(x)
      return T(0.5) * (T(1) + d_erf(xv * T(kInvSqrt2))) + xv * T(kInvSqrt2Pi) * d_exp(T(-0.5) * xv * xv);
    case UnaryOp::GeluTanh: {
      const T u = T(kSqrt2OverPi) * (xv + T(kGeluC) * xv * xv * xv);
      const T t = d_tanh(u);
      const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluC) * xv * xv);
      return T(0.5) * (T(1) + t) + T(0.5) * xv * (T(1) - t * t) * du;
    }
    case UnaryOp::Silu: {
      const T sg = T(1) / (T(1) + d_exp(-xv));
      return sg * (T(1) + xv * (T(1) - sg));
    }
    case UnaryOp::Pow: return s * d_pow(xv, s - T(1));
    case UnaryOp::AddScalar: return T(1);
    case UnaryOp::MulScalar: return s;
    case UnaryOp::ClampMin: return xv < s ? T(0) : T(1);
  }
  return T(0);
}

template <typename T>
__global__ void unary_forward_kernel(T* y, const T* x, int64_t n, UnaryOp op, T s) {
  POSGRAD_GRID_STRIDE(i, n) y[i] = unary_value(op, x[i], s);
}

template <typename T>
__global__ void unary_backward_kernel(T* dx, const T* dy, const T* x, const T* y, int64_t n, UnaryOp op, T s) {
  if (op == UnaryOp::Pow && s == T(0)) return;  // d/dx x^0 = 0 everywhere (PyTorch's pow_backward)
  POSGRAD_GRID_STRIDE(i, n) dx[i] += dy[i] * unary_derivative(op, x ? x[i] : T(0), y ? y[i] : T(0), s);
}

template <typename T>
__global__ void binary_forward_kernel(T* y, const T* a, const T* b, int64_t n, BinaryOp op) {
  POSGRAD_GRID_STRIDE(i, n) {
    const T av = a[i], bv = b[i];
    T r;
    switch (op) {
      case BinaryOp::Add: r = av + bv; break;
      case BinaryOp::Sub: r = av - bv; break;
      case BinaryOp::Mul: r = av * bv; break;
      default: r = av / bv; break;
    }
    y[i] = r;
  }
}

template <typename T>
__global__ void binary_backward_kernel(T* da, T* db, const T* dy, const T* a, const T* b, int64_t n, BinaryOp op) {
  POSGRAD_GRID_STRIDE(i, n) {
    const T g = dy[i];
    switch (op) {
      case BinaryOp::Add:
        if (da) da[i] = T(0) + g;
        if (db) db[i] = T(0) + g;
        break;
      case BinaryOp::Sub:
        if (da) da[i] = T(0) + g;
        if (db) db[i] = T(0) + -g;
        break;
      case BinaryOp::Mul:
        if (da) da[i] = T(0) + g * b[i];
        if (db) db[i] = T(0) + g * a[i];
        break;
      case BinaryOp::Div:
        if (da) da[i] = T(0) + g / b[i];
        if (db) db[i] = T(0) + -g * ((a[i] / b[i]) / b[i]);
        break;
    }
  }
}

template <typename T>
__global__ void masked_fill_forward_kernel(T* y, const T* x, const uint8_t* mask, int64_t n, T value) {
  POSGRAD_GRID_STRIDE(i, n) y[i] = mask[i] ? value : x[i];
}

template <typename T>
__global__ void masked_fill_backward_kernel(T* dx, const T* dy, const uint8_t* mask, int64_t n) {
  POSGRAD_GRID_STRIDE(i, n) dx[i] += mask[i] ? T(0) : dy[i];
}

// accumulate = false: y = keep ? x * scale : 0;  true: y += keep ? x * scale : 0 (backward).
template <typename T>
__global__ void dropout_kernel(T* y, const T* x, int64_t n, T p, T scale, uint64_t seed, uint64_t offset,
                               bool accumulate) {
  POSGRAD_GRID_STRIDE(i, n) {
    const bool keep = u32_to_unit(philox4x32(offset + static_cast<uint64_t>(i), seed).v[0]) >= double(p);
    const T v = keep ? x[i] * scale : T(0);
    if (accumulate)
      y[i] += v;
    else
      y[i] = v;
  }
}

}  // namespace

template <typename T>
void unary_forward(T* y, const T* x, int64_t n, UnaryOp op, T scalar) {
  if (n <= 0) return;
  launch("unary_forward", unary_forward_kernel<T>, grid_for(n, kBlock), kBlock, 0, y, x, n, op, scalar);
}

template <typename T>
void unary_backward(T* dx, const T* dy, const T* x, const T* y, int64_t n, UnaryOp op, T scalar) {
  if (n <= 0) return;
  launch("unary_backward", unary_backward_kernel<T>, grid_for(n, kBlock), kBlock, 0, dx, dy, x, y, n, op, scalar);
}

template <typename T>
void binary_forward(T* y, const T* a, const T* b, int64_t n, BinaryOp op) {
  if (n <= 0) return;
  launch("binary_forward", binary_forward_kernel<T>, grid_for(n, kBlock), kBlock, 0, y, a, b, n, op);
}

template <typename T>
void binary_backward(T* da, T* db, const T* dy, const T* a, const T* b, int64_t n, BinaryOp op) {
  if (n <= 0 || (!da && !db)) return;
  launch("binary_backward", binary_backward_kernel<T>, grid_for(n, kBlock), kBlock, 0, da, db, dy, a, b, n, op);
}

template <typename T>
void masked_fill_forward(T* y, const T* x, const uint8_t* mask, int64_t n, T value) {
  if (n <= 0) return;
  launch("masked_fill_forward", masked_fill_forward_kernel<T>, grid_for(n, kBlock), kBlock, 0, y, x, mask, n, value);
}

template <typename T>
void masked_fill_backward(T* dx, const T* dy, const uint8_t* mask, int64_t n) {
  if (n <= 0) return;
  launch("masked_fill_backward", masked_fill_backward_kernel<T>, grid_for(n, kBlock), kBlock, 0, dx, dy, mask, n);
}

template <typename T>
void dropout_forward(T* y, const T* x, int64_t n, T p, uint64_t seed, uint64_t offset) {
  if (n <= 0) return;
  const T scale = T(1) / (T(1) - p);
  launch("dropout_forward", dropout_kernel<T>, grid_for(n, kBlock), kBlock, 0, y, x, n, p, scale, seed, offset, false);
}

template <typename T>
void dropout_backward(T* dx, const T* dy, int64_t n, T p, uint64_t seed, uint64_t offset) {
  if (n <= 0) return;
  const T scale = T(1) / (T(1) - p);
  launch("dropout_backward", dropout_kernel<T>, grid_for(n, kBlock), kBlock, 0, dx, dy, n, p, scale, seed, offset,
         true);
}

#define INST(T)                                                                              \
  template void unary_forward<T>(T*, const T*, int64_t, UnaryOp, T);                         \
  template void unary_backward<T>(T*, const T*, const T*, const T*, int64_t, UnaryOp, T);    \
  template void binary_forward<T>(T*, const T*, const T*, int64_t, BinaryOp);                \
  template void binary_backward<T>(T*, T*, const T*, const T*, const T*, int64_t, BinaryOp); \
  template void masked_fill_forward<T>(T*, const T*, const uint8_t*, int64_t, T);            \
  template void masked_fill_backward<T>(T*, const T*, const uint8_t*, int64_t);              \
  template void dropout_forward<T>(T*, const T*, int64_t, T, uint64_t, uint64_t);            \
  template void dropout_backward<T>(T*, const T*, int64_t, T, uint64_t, uint64_t);
INST(float)
INST(double)

#undef INST
}  // namespace posgrad::kernels::cuda
