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

// erf(z), within 2.4 ulp of the correctly rounded value over all floats (checked against
// scipy.special.erf in double on a dense grid of [-6, 6] and logarithmic grids down to 1e-30).
//   |z| <= 1:     z P(z^2), P of degree 6 (Chebyshev fit of erf(z)/z; relative error 1.4e-9);
//   1 < |z| < 4:  1 - e^{-z^2} Q(t), t = 1 / (1 + z/2), Q of degree 7 (least-squares fit of
//                 erfc(z) e^{z^2} on Chebyshev nodes; relative error 6e-10, the form of Abramowitz &
//                 Stegun 7.1.26 with new coefficients);
//   |z| >= 4:     1 (erf(4) = 1 - 1.5e-8 rounds to 1 in float). NaN stays NaN.
POSGRAD_VEC_MATH_INLINE float erf_approx(float z) {
  uint32_t zb;
  std::memcpy(&zb, &z, 4);
  const uint32_t sign = zb & 0x80000000u, ab = zb & 0x7fffffffu;
  float a;
  std::memcpy(&a, &ab, 4);
  const float w = a * a;
  float pa = 7.882500441017736e-05f;
  pa = pa * w + -0.000801885901292935f;
  pa = pa * w + 0.005189312812402543f;
  pa = pa * w + -0.02685432953821466f;
  pa = pa * w + 0.11283597491559882f;
  pa = pa * w + -0.37612626907892643f;
  pa = pa * w + 1.1283791658833295f;
  const float near = a * pa;
  const float t = 1.0f / (1.0f + 0.5f * a);
  float pb = 0.12005968468751427f;
  pb = pb * t + -0.4737494842121817f;
  pb = pb * t + 0.5671382896285277f;
  pb = pb * t + -0.1068320658564735f;
  pb = pb * t + 0.34938920822943653f;
  pb = pb * t + 0.259225242647792f;
  pb = pb * t + 0.28498636596811433f;
  pb = pb * t + -0.0001591664542353044f;
  const float far = 1.0f - exp_approx(-w) * pb;
  const float r = a <= 1.0f ? near : a < 4.0f ? far : a >= 4.0f ? 1.0f : a;  // the last: NaN
  uint32_t rb;
  std::memcpy(&rb, &r, 4);
  rb |= sign;
  float out;
  std::memcpy(&out, &rb, 4);
  return out;
}

}  // namespace posgrad::kernels::cpu
