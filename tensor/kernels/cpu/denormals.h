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

// The MXCSR bits FlushDenormals sets: flush-to-zero and denormals-are-zero.
inline constexpr unsigned kFtz = 0x8000u, kDaz = 0x0040u;

// Worker threads and the floating-point mode. libgomp's threads keep the MXCSR they were created with,
// and it creates them at the start of a region (again when a team's size changes) as copies of the
// thread opening it: a region opened under FlushDenormals would leave threads that go on flushing in
// every later region, while the thread that opens those regions does not. Two rules keep every thread
// of a kernel in the caller's mode:
//  - a kernel called while its caller flushes runs on the calling thread alone
//    (caller_flushes_denormals: the GEMM's and parallel_chunks' thread choice), so posgrad never starts
//    threads in that mode (the attention's serial path calls gemm() under FlushDenormals);
//  - the regions whose parts may run on any thread (parallel.h's stealing, the GEMM) set the caller's
//    mode on each thread for the region (TeamFpMode), in case threads were started otherwise.
// Usage: `const unsigned mode = caller_fp_mode();` before the region, `const TeamFpMode fp(mode);`
// first thing inside it. Restores the thread's own mode at the end; a no-op without an MXCSR.
inline bool caller_flushes_denormals() {
#ifdef POSGRAD_HAS_MXCSR
  return (_mm_getcsr() & (kFtz | kDaz)) != 0;
#else
  return false;
#endif
}

inline unsigned caller_fp_mode() {
#ifdef POSGRAD_HAS_MXCSR
  return _mm_getcsr();
#else
  return 0;
#endif
}

class TeamFpMode {
 public:
#ifdef POSGRAD_HAS_MXCSR
  explicit TeamFpMode(unsigned mode) : saved_(_mm_getcsr()) {
    if (mode != saved_) _mm_setcsr(mode);
  }
  ~TeamFpMode() {
    if (_mm_getcsr() != saved_) _mm_setcsr(saved_);
  }
#else
  explicit TeamFpMode(unsigned) {}
#endif
  TeamFpMode(const TeamFpMode&) = delete;
  TeamFpMode& operator=(const TeamFpMode&) = delete;

 private:
#ifdef POSGRAD_HAS_MXCSR
  unsigned saved_;
#endif
};

// The calling thread's mode with FTZ and DAZ added, for the scope (see the top of this file).
class FlushDenormals {
 public:
  FlushDenormals() : mode_(caller_fp_mode() | kFtz | kDaz) {}

 private:
  TeamFpMode mode_;
};

}  // namespace posgrad::kernels::cpu
