// denormals.h — flush-to-zero for the duration of a kernel's loop body.
//
// Subnormal floats (below 2^-126 ≈ 1.2e-38 in float, 2^-1022 in double) take a microcode assist
// on x86: an arithmetic instruction that reads or writes one runs tens to hundreds of times slower.
// Attention with a strong distance bias makes them by the million: ALiBi's probabilities
// exp(-m·d - max) fall through 1e-38 for far keys, and their products with dO and V in the
// backward pass are subnormal. Measured with `bench_train --size nanogpt --context 2048 --batch 1
// --threads 1 --profile`: ALiBi's attention backward took 1134 ms per step against 407 ms with the
// MXCSR's FTZ and DAZ bits set, and against 497 ms for NoPE (no bias).
//
// FlushDenormals sets FTZ (results that would be subnormal are 0) and DAZ (subnormal inputs read as
// 0) on the calling thread and restores the previous MXCSR when it goes out of scope, so nothing
// outside the kernel changes. What it changes in the kernel's results: contributions below 2^-126
// relative to each row's largest probability (which is 1 after the max shift) become exactly 0,
// identically on every ISA path (SSE, AVX2 and AVX-512 arithmetic all obey the MXCSR) and thread
// count. A no-op where the target has no MXCSR (non-x86 builds).
#pragma once

#if defined(__SSE2__) || defined(_M_X64)
#include <xmmintrin.h>
#define POSGRAD_HAS_MXCSR 1
#endif

namespace posgrad::kernels::cpu {

class FlushDenormals {
 public:
#ifdef POSGRAD_HAS_MXCSR
  static constexpr unsigned kFtz = 0x8000u, kDaz = 0x0040u;
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtz | kDaz); }
  ~FlushDenormals() { _mm_setcsr(saved_); }
#else
  FlushDenormals() = default;
#endif
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
#ifdef POSGRAD_HAS_MXCSR
  unsigned saved_;
#endif
};

}  // namespace posgrad::kernels::cpu
