// elementwise.cpp — unary and binary elementwise kernels, masked_fill and dropout on the CPU.
// The op switch sits outside the loops (one tight, vectorisable loop per op).
//
// Derivatives at singular points follow PyTorch (tools/autograd/derivatives.yaml and
// FunctionsManual.cpp), so gradients agree with PyTorch where the maths leaves a choice:
//   pow(x, 0):  0 everywhere, x = 0 included (pow_backward returns zeros for exponent 0; the
//               formula 0 * x^-1 would give NaN at 0). Other exponents: s * x^(s - 1) as is
//               (x = 0: 1 for s = 1, 0 for s > 1, inf for 0 < s < 1).
//   sqrt:       dy / (2 sqrt(x)) -> inf at 0.        log: dy / x -> inf at 0.
//   relu:       threshold_backward: 1 where x > 0, so relu'(0) = 0.
//   div:        da = dy / b, db = -dy * ((a / b) / b) (div_tensor_other_backward), not
//               -dy * a / (b * b), whose b * b underflows to 0 for |b| < 1e-19 (float) and gives
//               an infinite gradient where the true one is finite.
// The exact GELU in float32 runs vec_kernels.cpp's loops (vec_math.h's erf and exp, within 5.7 ulp
// of erf, compiled per instruction set, the same bits on each): a training step spends a quarter of
// its time there with scalar libm calls. double keeps std::erf / std::exp (the gradcheck precision).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "tensor/kernels/cpu/parallel.h"
#include "tensor/kernels/cpu/row_kernels.h"
#include "tensor/kernels/cpu/vec_kernels.h"
#include "tensor/kernels/kernels.h"
#include "tensor/philox.h"

namespace posgrad::kernels {

const char* unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return "neg";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Relu: return "relu";
    case UnaryOp::Gelu: return "gelu";
    case UnaryOp::GeluTanh: return "gelu_tanh";
    case UnaryOp::Silu: return "silu";
    case UnaryOp::Pow: return "pow";
    case UnaryOp::AddScalar: return "add_scalar";
    case UnaryOp::MulScalar: return "mul_scalar";
    case UnaryOp::ClampMin: return "clamp_min";
  }
  return "?";
}

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
  }
  return "?";
}

namespace cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;
// GELU constants: exact form x*Phi(x) = 0.5 x (1 + erf(x/sqrt 2)); tanh form from Hendrycks &
// Gimpel 2016 (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluC = 0.044715;

template <typename T, typename F>
void map1(T* y, const T* x, int64_t n, F f) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}
template <typename T, typename F>
void acc1(T* dx, const T* dy, const T* x, const T* y, int64_t n, F f) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) dx[i] += dy[i] * f(x ? x[i] : T(0), y ? y[i] : T(0));
}

// Runs f(begin, count) over [0, n): static shares with stealing (parallel.h), in chunks of at least
// 4096 elements starting at multiples of 16 (elementwise: the bits do not depend on the split).
template <typename F>
void chunked(int64_t n, F f) {
  parallel_chunks(
      n, 4096, kParallelMin, [&](int64_t b, int64_t e) { f(b, e - b); }, 16);
}
}  // namespace

template <typename T>
void unary_forward(T* y, const T* x, int64_t n, UnaryOp op, T s) {
  switch (op) {
    case UnaryOp::Neg: map1(y, x, n, [](T v) { return -v; }); break;
    case UnaryOp::Exp: map1(y, x, n, [](T v) { return std::exp(v); }); break;
    case UnaryOp::Log: map1(y, x, n, [](T v) { return std::log(v); }); break;
    case UnaryOp::Sqrt: map1(y, x, n, [](T v) { return std::sqrt(v); }); break;
    case UnaryOp::Tanh: map1(y, x, n, [](T v) { return std::tanh(v); }); break;
    case UnaryOp::Relu: map1(y, x, n, [](T v) { return v > T(0) ? v : T(0); }); break;
    case UnaryOp::Gelu:
      if constexpr (std::is_same_v<T, float>) {
        chunked(n, [&](int64_t b, int64_t c) { gelu_forward_f32(y + b, x + b, c); });
      } else {
        map1(y, x, n, [](T v) { return T(0.5) * v * (T(1) + std::erf(v * T(kInvSqrt2))); });
      }
      break;
    case UnaryOp::GeluTanh:
      map1(y, x, n, [](T v) { return T(0.5) * v * (T(1) + std::tanh(T(kSqrt2OverPi) * (v + T(kGeluC) * v * v * v))); });
      break;
    case UnaryOp::Silu: map1(y, x, n, [](T v) { return v / (T(1) + std::exp(-v)); }); break;
    case UnaryOp::Pow: map1(y, x, n, [s](T v) { return std::pow(v, s); }); break;
    case UnaryOp::AddScalar: map1(y, x, n, [s](T v) { return v + s; }); break;
    case UnaryOp::MulScalar: map1(y, x, n, [s](T v) { return v * s; }); break;
    case UnaryOp::ClampMin: map1(y, x, n, [s](T v) { return v < s ? s : v; }); break;
  }
}

template <typename T>
void unary_backward(T* dx, const T* dy, const T* x, const T* y, int64_t n, UnaryOp op, T s) {
  switch (op) {
    case UnaryOp::Neg: acc1(dx, dy, x, y, n, [](T, T) { return T(-1); }); break;
    case UnaryOp::Exp: acc1(dx, dy, x, y, n, [](T, T yv) { return yv; }); break;
    case UnaryOp::Log: acc1(dx, dy, x, y, n, [](T xv, T) { return T(1) / xv; }); break;
    case UnaryOp::Sqrt: acc1(dx, dy, x, y, n, [](T, T yv) { return T(0.5) / yv; }); break;
    case UnaryOp::Tanh: acc1(dx, dy, x, y, n, [](T, T yv) { return T(1) - yv * yv; }); break;
    case UnaryOp::Relu: acc1(dx, dy, x, y, n, [](T xv, T) { return xv > T(0) ? T(1) : T(0); }); break;
    case UnaryOp::Gelu:
      // d/dx x Phi(x) = Phi(x) + x phi(x)
      if constexpr (std::is_same_v<T, float>) {
        chunked(n, [&](int64_t b, int64_t c) { gelu_backward_f32(dx + b, dy + b, x + b, c); });
      } else {
        acc1(dx, dy, x, y, n, [](T v, T) {
          return T(0.5) * (T(1) + std::erf(v * T(kInvSqrt2))) + v * T(kInvSqrt2Pi) * std::exp(T(-0.5) * v * v);
        });
      }
      break;
    case UnaryOp::GeluTanh:
      acc1(dx, dy, x, y, n, [](T v, T) {
        const T u = T(kSqrt2OverPi) * (v + T(kGeluC) * v * v * v);
        const T t = std::tanh(u);
        const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluC) * v * v);
        return T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du;
      });
      break;
    case UnaryOp::Silu:
      acc1(dx, dy, x, y, n, [](T v, T) {
        const T sg = T(1) / (T(1) + std::exp(-v));
        return sg * (T(1) + v * (T(1) - sg));
      });
      break;
    case UnaryOp::Pow:
      if (s == T(0)) break;  // d/dx x^0 = 0 everywhere (PyTorch's pow_backward): nothing to add
      acc1(dx, dy, x, y, n, [s](T v, T) { return s * std::pow(v, s - T(1)); });
      break;
    case UnaryOp::AddScalar: acc1(dx, dy, x, y, n, [](T, T) { return T(1); }); break;
    case UnaryOp::MulScalar: acc1(dx, dy, x, y, n, [s](T, T) { return s; }); break;
    case UnaryOp::ClampMin: acc1(dx, dy, x, y, n, [s](T v, T) { return v < s ? T(0) : T(1); }); break;
  }
}

template <typename T>
void gelu_forward_saving(T* y, T* s, const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    chunked(n, [&](int64_t b, int64_t c) { gelu_forward_saving_f32(y + b, s + b, x + b, c); });
  } else {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const T v = x[i];
      const T si = T(1) + std::erf(v * T(kInvSqrt2));
      s[i] = si;
      y[i] = T(0.5) * v * si;
    }
  }
}

template <typename T>
void gelu_backward_saved(T* dx, const T* dy, const T* x, const T* s, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    chunked(n, [&](int64_t b, int64_t c) { gelu_backward_saved_f32(dx + b, dy + b, x + b, s + b, c); });
  } else {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const T v = x[i];
      dx[i] = T(0) + dy[i] * (T(0.5) * s[i] + v * T(kInvSqrt2Pi) * std::exp(T(-0.5) * v * v));
    }
  }
}

template <typename T>
void binary_forward(T* y, const T* a, const T* b, int64_t n, BinaryOp op) {
  chunked(n, [&](int64_t s, int64_t c) {
    if constexpr (std::is_same_v<T, float>)  // vectorised for the CPU's instruction set (vec_kernels.h)
      binary_forward_f32(y + s, a + s, b + s, c, op);
    else
      row_kernels::binary_forward_elements<T>(y + s, a + s, b + s, c, op);
  });
}

template <typename T>
void binary_backward(T* da, T* db, const T* dy, const T* a, const T* b, int64_t n, BinaryOp op) {
  chunked(n, [&](int64_t s, int64_t c) {
    T* das = da ? da + s : nullptr;
    T* dbs = db ? db + s : nullptr;
    const T* as = a ? a + s : nullptr;
    const T* bs = b ? b + s : nullptr;
    if constexpr (std::is_same_v<T, float>)
      binary_backward_f32(das, dbs, dy + s, as, bs, c, op);
    else
      row_kernels::binary_backward_elements<T>(das, dbs, dy + s, as, bs, c, op);
  });
}

template <typename T>
void masked_fill_forward(T* y, const T* x, const uint8_t* mask, int64_t n, T value) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = mask[i] ? value : x[i];
}

template <typename T>
void masked_fill_backward(T* dx, const T* dy, const uint8_t* mask, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) dx[i] += mask[i] ? T(0) : dy[i];
}

template <typename T>
void dropout_forward(T* y, const T* x, int64_t n, T p, uint64_t seed, uint64_t offset) {
  const T scale = T(1) / (T(1) - p);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = u32_to_unit(philox4x32(offset + static_cast<uint64_t>(i), seed).v[0]) >= double(p);
    y[i] = keep ? x[i] * scale : T(0);
  }
}

template <typename T>
void dropout_backward(T* dx, const T* dy, int64_t n, T p, uint64_t seed, uint64_t offset) {
  const T scale = T(1) / (T(1) - p);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = u32_to_unit(philox4x32(offset + static_cast<uint64_t>(i), seed).v[0]) >= double(p);
    dx[i] += keep ? dy[i] * scale : T(0);
  }
}

#define INST(T)                                                                              \
  template void unary_forward<T>(T*, const T*, int64_t, UnaryOp, T);                         \
  template void unary_backward<T>(T*, const T*, const T*, const T*, int64_t, UnaryOp, T);    \
  template void gelu_forward_saving<T>(T*, T*, const T*, int64_t);                           \
  template void gelu_backward_saved<T>(T*, const T*, const T*, const T*, int64_t);           \
  template void binary_forward<T>(T*, const T*, const T*, int64_t, BinaryOp);                \
  template void binary_backward<T>(T*, T*, const T*, const T*, const T*, int64_t, BinaryOp); \
  template void masked_fill_forward<T>(T*, const T*, const uint8_t*, int64_t, T);            \
  template void masked_fill_backward<T>(T*, const T*, const uint8_t*, int64_t);              \
  template void dropout_forward<T>(T*, const T*, int64_t, T, uint64_t, uint64_t);            \
  template void dropout_backward<T>(T*, const T*, int64_t, T, uint64_t, uint64_t);
INST(float)
INST(double)

}  // namespace cpu
}  // namespace posgrad::kernels
