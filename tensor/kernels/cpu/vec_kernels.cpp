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

#include "tensor/kernels/cpu/row_kernels.h"
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
    return row_kernels::fold16(part);
  });
}

float exp_shift_sum_padded_f32(float* x, int64_t n, float shift, float shift2) {
  return vec_detail::run_active([=]() POSGRAD_VEC_BODY {
    float part[kSumLanes] = {};
    const int64_t i = exp_blocks(x, n, shift, shift2, part);
    // The last n - i < 16 elements in place: the entries past n keep the exponentials of what they held.
    const int64_t rem = n - i;
    if (rem > 0) exp_last_block(x + i, rem, shift, shift2, part);
    return row_kernels::fold16(part);
  });
}

void layer_norm_forward_rows_f32(float* y, float* mean, float* rstd, const float* x, const float* w, const float* b,
                                 int64_t rows, int64_t C, float eps) {
  vec_detail::run_active(
      [=]() POSGRAD_VEC_BODY { row_kernels::layer_norm_forward_rows<float>(y, mean, rstd, x, w, b, rows, C, eps); });
}

void layer_norm_backward_rows_f32(float* dx, const float* dy, const float* x, const float* w, const float* mean,
                                  const float* rstd, int64_t rows, int64_t C, bool accumulate) {
  vec_detail::run_active([=]() POSGRAD_VEC_BODY {
    row_kernels::layer_norm_backward_rows<float>(dx, dy, x, w, mean, rstd, rows, C, accumulate);
  });
}

void rms_norm_forward_rows_f32(float* y, float* rstd, const float* x, const float* w, int64_t rows, int64_t C,
                               float eps) {
  vec_detail::run_active(
      [=]() POSGRAD_VEC_BODY { row_kernels::rms_norm_forward_rows<float>(y, rstd, x, w, rows, C, eps); });
}

void rms_norm_backward_rows_f32(float* dx, const float* dy, const float* x, const float* w, const float* rstd,
                                int64_t rows, int64_t C, bool accumulate) {
  vec_detail::run_active(
      [=]() POSGRAD_VEC_BODY { row_kernels::rms_norm_backward_rows<float>(dx, dy, x, w, rstd, rows, C, accumulate); });
}

void norm_param_grads_f32(float* acc_w, float* acc_b, const float* dy, const float* x, const float* mean,
                          const float* rstd, int64_t N, int64_t C, int64_t c0, int64_t width) {
  vec_detail::run_active([=]() POSGRAD_VEC_BODY {
    row_kernels::norm_param_grads<float>(acc_w, acc_b, dy, x, mean, rstd, N, C, c0, width);
  });
}

void adamw_update_f32(float* p, float* m, float* v, const float* g, int64_t n, float beta1, float beta2, float one_m_b1,
                      float one_m_b2, float decay, float step_size, float bc2_sqrt, float eps) {
  vec_detail::run_active([=]() POSGRAD_VEC_BODY {
    row_kernels::adamw_update<float>(p, m, v, g, n, beta1, beta2, one_m_b1, one_m_b2, decay, step_size, bc2_sqrt, eps);
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
  vec_detail::run_active([=]() POSGRAD_VEC_BODY { row_kernels::binary_forward_elements<float>(y, a, b, n, op); });
}

void binary_backward_f32(float* da, float* db, const float* dy, const float* a, const float* b, int64_t n,
                         BinaryOp op) {
  vec_detail::run_active(
      [=]() POSGRAD_VEC_BODY { row_kernels::binary_backward_elements<float>(da, db, dy, a, b, n, op); });
}

}  // namespace posgrad::kernels::cpu
