// vec_kernels.cpp — the float loops of vec_kernels.h, each compiled for AVX-512, AVX2 and baseline
// x86-64, and the run-time choice between them.
//
// How a loop gets three compilations without three copies: its body is a lambda marked
// POSGRAD_VEC_BODY (always_inline), handed to run_active(), which calls one of run_avx512 /
// run_avx2 / run_baseline. Those carry GCC/Clang `target` attributes, so the body, inlined into
// each, is vectorised there for that target (its `omp simd` loop gets 16, 8 or 4 float lanes).
// vec_math.h's functions are plain inline code and are inlined into the body the same way. This
// replaces `target_clones`, whose ifunc resolver cannot be overridden at run time, so tests could
// reach only the best path of the machine they ran on.
//
// Not here: double precision (libm in the callers), the GEMM (gemm.cpp has its own selector).
#include "tensor/kernels/cpu/vec_kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "tensor/kernels/cpu/vec_math.h"
#include "tensor/kernels/kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define POSGRAD_VEC_X86 1
#define POSGRAD_VEC_AVX512 __attribute__((target("avx512f")))
#define POSGRAD_VEC_AVX2 __attribute__((target("avx2")))
#else
#define POSGRAD_VEC_X86 0
#endif

// A loop body that must be compiled inside its caller, for the caller's instruction set.
#define POSGRAD_VEC_BODY __attribute__((always_inline))

namespace posgrad::kernels::cpu {

namespace vec_detail {
namespace {

vec_isa detect_isa() {
#if POSGRAD_VEC_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return vec_isa::avx512;
  if (__builtin_cpu_supports("avx2")) return vec_isa::avx2;
#endif
  return vec_isa::baseline;
}

std::atomic<int>& active_slot() {
  static std::atomic<int> slot{static_cast<int>(vec_best_isa())};
  return slot;
}

#if POSGRAD_VEC_X86
template <typename Body>
POSGRAD_VEC_AVX512 auto run_avx512(const Body& body) {
  return body();
}
template <typename Body>
POSGRAD_VEC_AVX2 auto run_avx2(const Body& body) {
  return body();
}
#endif
template <typename Body>
auto run_baseline(const Body& body) {
  return body();
}

// Runs body() compiled for the active instruction set.
template <typename Body>
auto run_active(const Body& body) {
#if POSGRAD_VEC_X86
  switch (static_cast<vec_isa>(active_slot().load(std::memory_order_relaxed))) {
    case vec_isa::avx512: return run_avx512(body);
    case vec_isa::avx2: return run_avx2(body);
    case vec_isa::baseline: break;
  }
#endif
  return run_baseline(body);
}

}  // namespace

vec_isa vec_best_isa() {
  static const vec_isa best = detect_isa();
  return best;
}

vec_isa vec_active_isa() { return static_cast<vec_isa>(active_slot().load(std::memory_order_relaxed)); }

vec_isa vec_set_isa(vec_isa isa) {
  const int clamped = std::min(static_cast<int>(isa), static_cast<int>(vec_best_isa()));
  active_slot().store(clamped < 0 ? 0 : clamped, std::memory_order_relaxed);
  return vec_active_isa();
}

const char* vec_isa_name(vec_isa isa) {
  switch (isa) {
    case vec_isa::avx512: return "avx512";
    case vec_isa::avx2: return "avx2";
    case vec_isa::baseline: return "baseline";
  }
  return "unknown";
}

}  // namespace vec_detail

namespace {
// 1 / sqrt 2 and 1 / sqrt(2 pi), rounded to double and then to float (the constants the float GELU
// has always used, so its bits do not move with this file).
constexpr float kInvSqrt2 = float(0.70710678118654752440);
constexpr float kInvSqrt2Pi = float(0.39894228040143267794);
// Partial sums of exp_shift_sum_f32: one per lane of the widest path, so no path reorders them.
constexpr int kSumLanes = 16;
}  // namespace

void gelu_forward_f32(float* y, const float* x, int64_t n) {
  vec_detail::run_active([=]() POSGRAD_VEC_BODY {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + erf_approx(x[i] * kInvSqrt2));
  });
}

void gelu_backward_f32(float* dx, const float* dy, const float* x, int64_t n) {
  vec_detail::run_active([=]() POSGRAD_VEC_BODY {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      dx[i] += dy[i] * (0.5f * (1.0f + erf_approx(v * kInvSqrt2)) + v * kInvSqrt2Pi * exp_approx(-0.5f * v * v));
    }
  });
}

void gelu_forward_saving_f32(float* y, float* s, const float* x, int64_t n) {
  vec_detail::run_active([=]() POSGRAD_VEC_BODY {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      const float si = 1.0f + erf_approx(v * kInvSqrt2);
      s[i] = si;
      y[i] = 0.5f * v * si;
    }
  });
}

void gelu_backward_saved_f32(float* dx, const float* dy, const float* x, const float* s, int64_t n) {
  vec_detail::run_active([=]() POSGRAD_VEC_BODY {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      dx[i] = 0.0f + dy[i] * (0.5f * s[i] + v * kInvSqrt2Pi * exp_approx(-0.5f * v * v));
    }
  });
}

void exp_shift_axpy_f32(float* y, const float* x, int64_t n, float shift, float shift2, float g) {
  vec_detail::run_active([=]() POSGRAD_VEC_BODY {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] += g * exp_approx((x[i] - shift) - shift2);
  });
}

void sigmoid_scaled_f32(float* g, const float* a, int64_t n, float scale) {
  vec_detail::run_active([=]() POSGRAD_VEC_BODY {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float v = a[i] * scale;
      const bool neg = v < 0.0f;
      const float e = exp_approx(neg ? v : -v);  // e^{-|v|} in (0, 1]
      g[i] = (neg ? e : 1.0f) / (1.0f + e);
    }
  });
}

namespace {

// The 16 partial sums of exp_shift_sum_f32 added pairwise (p[l] += p[l + 8], then + 4, + 2, + 1),
// written as whole halves so that the compiler keeps them in registers.
POSGRAD_VEC_BODY inline float fold_parts(const float* part) {
  float h[kSumLanes / 2], q[kSumLanes / 4];
#pragma omp simd
  for (int l = 0; l < kSumLanes / 2; ++l) h[l] = part[l] + part[l + kSumLanes / 2];
#pragma omp simd
  for (int l = 0; l < kSumLanes / 4; ++l) q[l] = h[l] + h[l + kSumLanes / 4];
  const float r0 = q[0] + q[2], r1 = q[1] + q[3];
  return r0 + r1;
}

// The whole blocks of 16 of exp_shift_sum_f32: part[l] gains the elements i = l (mod 16) in increasing i.
// Returns the index of the first element not done. The inner loop is one AVX-512 vector, two AVX2
// vectors or four SSE2 vectors: the same 16 chains on every path.
POSGRAD_VEC_BODY inline int64_t exp_blocks(float* x, int64_t n, float shift, float shift2, float* part) {
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes) {
#pragma omp simd
    for (int l = 0; l < kSumLanes; ++l) {
      const float e = exp_approx((x[i + l] - shift) - shift2);
      x[i + l] = e;
      part[l] += e;
    }
  }
  return i;
}

// One last block of 16 at b (b[0, 16) readable and writable), of which the first rem < 16 are the
// row's: every lane gets its exponential, and the lanes past rem add +0 to their partial sums, which
// leaves them unchanged (the sums are >= +0 or NaN).
POSGRAD_VEC_BODY inline void exp_last_block(float* b, int64_t rem, float shift, float shift2, float* part) {
#pragma omp simd
  for (int l = 0; l < kSumLanes; ++l) {
    const float e = exp_approx((b[l] - shift) - shift2);
    b[l] = e;
    part[l] += l < rem ? e : 0.0f;
  }
}

}  // namespace

float exp_shift_sum_f32(float* x, int64_t n, float shift, float shift2) {
  return vec_detail::run_active([=]() POSGRAD_VEC_BODY {
    float part[kSumLanes] = {};
    const int64_t i = exp_blocks(x, n, shift, shift2, part);
    // The last n - i < 16 elements through a zero-padded copy, so the tail stays vectorised.
    const int64_t rem = n - i;
    if (rem > 0) {
      float t[kSumLanes] = {};
      std::memcpy(t, x + i, sizeof(float) * static_cast<size_t>(rem));
      exp_last_block(t, rem, shift, shift2, part);
      std::memcpy(x + i, t, sizeof(float) * static_cast<size_t>(rem));
    }
    return fold_parts(part);
  });
}

float exp_shift_sum_padded_f32(float* x, int64_t n, float shift, float shift2) {
  return vec_detail::run_active([=]() POSGRAD_VEC_BODY {
    float part[kSumLanes] = {};
    const int64_t i = exp_blocks(x, n, shift, shift2, part);
    // The last n - i < 16 elements in place: the entries past n keep the exponentials of what they held.
    const int64_t rem = n - i;
    if (rem > 0) exp_last_block(x + i, rem, shift, shift2, part);
    return fold_parts(part);
  });
}

namespace {

// 16 partial sums folded pairwise (p[l] += p[l + 8], then + 4, + 2, + 1), as fold_parts, for
// doubles or floats.
template <typename A>
POSGRAD_VEC_BODY inline A fold16(const A* part) {
  A h[kSumLanes / 2], q[kSumLanes / 4];
#pragma omp simd
  for (int l = 0; l < kSumLanes / 2; ++l) h[l] = part[l] + part[l + kSumLanes / 2];
#pragma omp simd
  for (int l = 0; l < kSumLanes / 4; ++l) q[l] = h[l] + h[l + kSumLanes / 4];
  const A r0 = q[0] + q[2], r1 = q[1] + q[3];
  return r0 + r1;
}

// sum over c < C of f(c) in the 16 partial sums of the norms (vec_kernels.h): the whole blocks of 16
// as one inner vector loop, the last C mod 16 elements into partials 0, 1, ... one at a time.
template <typename A, typename F>
POSGRAD_VEC_BODY inline A sum16(int64_t C, const F& f) {
  A part[kSumLanes] = {};
  int64_t c = 0;
  for (; c + kSumLanes <= C; c += kSumLanes) {
#pragma omp simd
    for (int l = 0; l < kSumLanes; ++l) part[l] += f(c + l);
  }
  for (int l = 0; c + l < C; ++l) part[l] += f(c + l);
  return fold16(part);
}

// Mean and biased variance of a float row by the shifted two-pass algorithm, in double (norm.cpp).
POSGRAD_VEC_BODY inline void row_moments_f32(const float* xr, int64_t C, double& mean, double& var) {
  const double K = static_cast<double>(xr[0]);
  const double md = sum16<double>(C, [&](int64_t c) POSGRAD_VEC_BODY { return static_cast<double>(xr[c]) - K; }) /
                    static_cast<double>(C);
  const double ss = sum16<double>(C, [&](int64_t c) POSGRAD_VEC_BODY {
    const double d = (static_cast<double>(xr[c]) - K) - md;
    return d * d;
  });
  mean = K + md;
  var = ss / static_cast<double>(C);
}

}  // namespace

void layer_norm_forward_rows_f32(float* y, float* mean, float* rstd, const float* x, const float* w, const float* b,
                                 int64_t rows, int64_t C, float eps) {
  vec_detail::run_active([=]() POSGRAD_VEC_BODY {
    for (int64_t n = 0; n < rows; ++n) {
      const float* xr = x + n * C;
      float* yr = y + n * C;
      double mu_d, var;
      row_moments_f32(xr, C, mu_d, var);
      const float hi = static_cast<float>(mu_d), lo = static_cast<float>(mu_d - static_cast<double>(hi));
      const float rs = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
      mean[2 * n] = hi;
      mean[2 * n + 1] = lo;
      rstd[n] = rs;
      if (w && b) {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) yr[c] = ((xr[c] - hi) - lo) * rs * w[c] + b[c];
      } else if (w) {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) yr[c] = ((xr[c] - hi) - lo) * rs * w[c];
      } else if (b) {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) yr[c] = ((xr[c] - hi) - lo) * rs + b[c];
      } else {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) yr[c] = ((xr[c] - hi) - lo) * rs;
      }
    }
  });
}

void layer_norm_backward_rows_f32(float* dx, const float* dy, const float* x, const float* w, const float* mean,
                                  const float* rstd, int64_t rows, int64_t C) {
  vec_detail::run_active([=]() POSGRAD_VEC_BODY {
    const float c_t = static_cast<float>(C);
    for (int64_t n = 0; n < rows; ++n) {
      const float* xr = x + n * C;
      const float* dyr = dy + n * C;
      float* dxr = dx + n * C;
      const float hi = mean[2 * n], lo = mean[2 * n + 1], rs = rstd[n];
      const float sg = sum16<float>(C, [&](int64_t c) POSGRAD_VEC_BODY { return w ? dyr[c] * w[c] : dyr[c]; });
      const float sgx = sum16<float>(
          C, [&](int64_t c) POSGRAD_VEC_BODY { return (w ? dyr[c] * w[c] : dyr[c]) * (((xr[c] - hi) - lo) * rs); });
      const float mg = sg / c_t, mgx = sgx / c_t;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        const float g = w ? dyr[c] * w[c] : dyr[c];
        dxr[c] += rs * (g - mg - ((xr[c] - hi) - lo) * rs * mgx);
      }
    }
  });
}

void rms_norm_forward_rows_f32(float* y, float* rstd, const float* x, const float* w, int64_t rows, int64_t C,
                               float eps) {
  vec_detail::run_active([=]() POSGRAD_VEC_BODY {
    for (int64_t n = 0; n < rows; ++n) {
      const float* xr = x + n * C;
      float* yr = y + n * C;
      const double ss = sum16<double>(
          C, [&](int64_t c) POSGRAD_VEC_BODY { return static_cast<double>(xr[c]) * static_cast<double>(xr[c]); });
      const float rs = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(C) + static_cast<double>(eps)));
      rstd[n] = rs;
      if (w) {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * rs * w[c];
      } else {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * rs;
      }
    }
  });
}

void rms_norm_backward_rows_f32(float* dx, const float* dy, const float* x, const float* w, const float* rstd,
                                int64_t rows, int64_t C) {
  vec_detail::run_active([=]() POSGRAD_VEC_BODY {
    const float c_t = static_cast<float>(C);
    for (int64_t n = 0; n < rows; ++n) {
      const float* xr = x + n * C;
      const float* dyr = dy + n * C;
      float* dxr = dx + n * C;
      const float rs = rstd[n];
      const float sgx =
          sum16<float>(C, [&](int64_t c) POSGRAD_VEC_BODY { return (w ? dyr[c] * w[c] : dyr[c]) * (xr[c] * rs); });
      const float mgx = sgx / c_t;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        const float g = w ? dyr[c] * w[c] : dyr[c];
        dxr[c] += rs * (g - xr[c] * rs * mgx);
      }
    }
  });
}

void norm_param_grads_f32(float* acc_w, float* acc_b, const float* dy, const float* x, const float* mean,
                          const float* rstd, int64_t N, int64_t C, int64_t c0, int64_t width) {
  vec_detail::run_active([=]() POSGRAD_VEC_BODY {
    for (int64_t n = 0; n < N; ++n) {
      const float* dyr = dy + n * C + c0;
      const float* xr = x + n * C + c0;
      const float hi = mean ? mean[2 * n] : 0.0f, lo = mean ? mean[2 * n + 1] : 0.0f, rs = rstd[n];
      if (acc_w) {
#pragma omp simd
        for (int64_t c = 0; c < width; ++c) acc_w[c] += dyr[c] * (((xr[c] - hi) - lo) * rs);
      }
      if (acc_b) {
#pragma omp simd
        for (int64_t c = 0; c < width; ++c) acc_b[c] += dyr[c];
      }
    }
  });
}

void adamw_update_f32(float* p, float* m, float* v, const float* g, int64_t n, float beta1, float beta2, float one_m_b1,
                      float one_m_b2, float decay, float step_size, float bc2_sqrt, float eps) {
  vec_detail::run_active([=]() POSGRAD_VEC_BODY {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float gi = g[i];
      const float mi = beta1 * m[i] + one_m_b1 * gi;
      const float vi = beta2 * v[i] + one_m_b2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      const float denom = std::sqrt(vi) / bc2_sqrt + eps;
      p[i] = p[i] * decay - step_size * (mi / denom);
    }
  });
}

void column_sums_f32(float* y, const float* x, int64_t R, int64_t ld, int64_t width) {
  vec_detail::run_active([=]() POSGRAD_VEC_BODY {
    constexpr int64_t kMax = 64;
    float acc[kMax];
    if (width == kMax) {  // the common whole block: a fixed trip count keeps acc in registers
#pragma omp simd
      for (int64_t i = 0; i < kMax; ++i) acc[i] = 0.0f;
      for (int64_t r = 0; r < R; ++r) {
        const float* xr = x + r * ld;
#pragma omp simd
        for (int64_t i = 0; i < kMax; ++i) acc[i] += xr[i];
      }
    } else {
      for (int64_t i = 0; i < width; ++i) acc[i] = 0.0f;
      for (int64_t r = 0; r < R; ++r) {
        const float* xr = x + r * ld;
#pragma omp simd
        for (int64_t i = 0; i < width; ++i) acc[i] += xr[i];
      }
    }
    for (int64_t i = 0; i < width; ++i) y[i] = acc[i];
  });
}

void binary_forward_f32(float* y, const float* a, const float* b, int64_t n, BinaryOp op) {
  vec_detail::run_active([=]() POSGRAD_VEC_BODY {
    switch (op) {
#define POSGRAD_LOOP(expr)                                         \
  _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) y[i] = expr; \
  break;
      case BinaryOp::Add: POSGRAD_LOOP(a[i] + b[i])
      case BinaryOp::Sub: POSGRAD_LOOP(a[i] - b[i])
      case BinaryOp::Mul: POSGRAD_LOOP(a[i] * b[i])
      case BinaryOp::Div: POSGRAD_LOOP(a[i] / b[i])
#undef POSGRAD_LOOP
    }
  });
}

void binary_backward_f32(float* da, float* db, const float* dy, const float* a, const float* b, int64_t n,
                         BinaryOp op) {
  vec_detail::run_active([=]() POSGRAD_VEC_BODY {
#define POSGRAD_WRITE(ptr, expr)                                                \
  if (ptr) {                                                                    \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) ptr[i] = 0.0f + (expr); \
  }
    switch (op) {
      case BinaryOp::Add: POSGRAD_WRITE(da, dy[i]) POSGRAD_WRITE(db, dy[i]) break;
      case BinaryOp::Sub: POSGRAD_WRITE(da, dy[i]) POSGRAD_WRITE(db, -dy[i]) break;
      case BinaryOp::Mul: POSGRAD_WRITE(da, dy[i] * b[i]) POSGRAD_WRITE(db, dy[i] * a[i]) break;
      case BinaryOp::Div: POSGRAD_WRITE(da, dy[i] / b[i]) POSGRAD_WRITE(db, -dy[i] * ((a[i] / b[i]) / b[i])) break;
    }
#undef POSGRAD_WRITE
  });
}

}  // namespace posgrad::kernels::cpu
