// vec_math.h — float exp and erf written to vectorise inside `#pragma omp simd` loops (branch-free
// selects, integer work through memcpy, no libm calls), for the kernels whose time is their
// transcendental functions: the attention's softmax exponentials and the exact GELU
// (vec_kernels.cpp, which compiles them for AVX-512, AVX2 and baseline x86-64).
//
// Bits: plain IEEE float operations in the written order. The build compiles with
// -ffp-contract=off (CMakeLists.txt; GCC's C++ default, even in ISO mode, is to contract), so no
// `a * b + c` here becomes an FMA on a path that has one, and nothing is reassociated (no
// -ffast-math). Every lane of every instruction-set path therefore computes the same function of
// its argument: the AVX-512, AVX2 and baseline paths give the same bits as a scalar call
// (tests/test_isa_paths.cpp, GCC 12; Clang 14 also emits no FMA for them). A build with
// -ffast-math or -ffp-contract=fast would not keep it. double keeps std::exp / std::erf: it is the
// gradcheck precision.
#pragma once

#include <cstdint>
#include <cstring>

// Always inlined: a call left inside a `#pragma omp simd` loop keeps it scalar (Clang 14 declined
// to inline erf_approx into the GELU loops on its own).
#if defined(__GNUC__) || defined(__clang__)
#define POSGRAD_VEC_MATH_INLINE inline __attribute__((always_inline))
#else
#define POSGRAD_VEC_MATH_INLINE inline
#endif

namespace posgrad::kernels::cpu {

// e^v: Cephes-style expf (range reduction by ln 2 in two parts, degree-5 polynomial, 2^n through
// the exponent bits); relative error ~2e-7. Arguments below -87.3 give 0, above 88 are clamped
// (e^88 ~ 1.7e38); NaN propagates.
POSGRAD_VEC_MATH_INLINE float exp_approx(float v) {
  const bool underflow = v < -87.3f;
  v = underflow ? -87.3f : v;
  v = v > 88.0f ? 88.0f : v;
  // n = round(v / ln 2) by the 1.5 * 2^23 trick (no rounding instruction needed). Integer work
  // is unsigned so that even a NaN argument (which propagates through p) is no UB.
  const float kMagic = 12582912.0f;
  const float t = v * 1.44269504088896341f + kMagic;
  uint32_t tb, mb;
  std::memcpy(&tb, &t, 4);
  std::memcpy(&mb, &kMagic, 4);
  const uint32_t eb = (tb - mb + 127u) << 23;
  const float fk = t - kMagic;
  float r = v - fk * 0.693359375f;
  r = r - fk * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  float scale;
  std::memcpy(&scale, &eb, 4);
  return underflow ? 0.0f : p * scale;
}

// erf(z) = z P(z^2) / Q(z^2) for |z| < 4, P and Q of degree 5: a rational fit of erf(z)/z on
// z^2 in [0, 16] (relative error 2.5e-8 in exact arithmetic; scripts/fit_erf.py fits it by
// iteratively reweighted least squares on Chebyshev nodes and checks the float evaluation below).
// One form for every lane: no second branch to evaluate and select, no exponential, one division
// (about 25 operations; the earlier two-branch form, a polynomial for |z| <= 1 and
// 1 - e^{-z^2} Q(1 / (1 + z/2)) beyond, took about 70 and was within 2.4 ulp). The float
// evaluation's roundings dominate the error, against erf in double: within 3.6 ulp (1.7e-7
// absolute) for |z| < 1 and 5.7 ulp (3.4e-7 absolute) for 1 <= |z| < 4, the worst near |z| = 3.7,
// where erf is 1 - 2e-7 (a form that ends in 1 - small would need the exponential back). Tiny z
// give z * 1.12837911 (2/sqrt(pi) in float). |z| >= 4: +-1 (erf(4) = 1 - 1.5e-8 rounds to 1 in
// float); the result is clamped to [-1, 1]. Signed zeros keep their sign; NaN stays NaN.
POSGRAD_VEC_MATH_INLINE float erf_approx(float z) {
  uint32_t zb;
  std::memcpy(&zb, &z, 4);
  const uint32_t sign = zb & 0x80000000u, ab = zb & 0x7fffffffu;
  float a;
  std::memcpy(&a, &ab, 4);
  a = a > 4.0f ? 4.0f : a;  // NaN stays NaN
  const float w = a * a;
  float p = 1.98678322e-06f;
  p = p * w + 0.000284566864f;
  p = p * w + 0.00388336903f;
  p = p * w + 0.053101819f;
  p = p * w + 0.193545595f;
  p = p * w + 1.12837911f;
  float q = 3.74202355e-05f;
  q = q * w + 0.00118557806f;
  q = q * w + 0.015207299f;
  q = q * w + 0.115350224f;
  q = q * w + 0.504857898f;
  q = q * w + 1.0f;
  const float r0 = a * (p / q);
  const float r = r0 > 1.0f ? 1.0f : r0;  // NaN stays NaN
  uint32_t rb;
  std::memcpy(&rb, &r, 4);
  rb |= sign;
  float out;
  std::memcpy(&out, &rb, 4);
  return out;
}

}  // namespace posgrad::kernels::cpu
