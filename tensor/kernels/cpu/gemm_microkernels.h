// gemm_microkernels.h — private building blocks of the packed CPU GEMM (gemm.cpp only).
//
// What it is: the register-tiled micro-kernels and the panel-packing routines for three
// instruction sets -- AVX-512 and AVX2+FMA (x86-64, compiled per function with GCC
// `target` attributes so the library itself needs no -march flag) and portable scalar C++.
// What it is not: a public header, nor a driver. Blocking, threading and dispatch live in
// gemm.cpp; nothing here allocates but aligned_scratch (the per-thread pack buffers, grown once), and
// nothing here may be included by other files.
//
// Conventions (the "packed" formats of Goto & van de Geijn, TOMS 2008, and BLIS, Van Zee &
// van de Geijn, TOMS 2015):
//   * a packed A micro-panel holds MR rows of op(A) for kc steps: element (i, k) sits at
//     a[k * MR + i]; rows beyond the valid m are zero.
//   * a packed B micro-panel holds NR columns of op(B) for kc steps: element (k, j) sits at
//     b[k * NR + j]; columns beyond the valid n are zero.
//   * The micro-kernel computes the MR x NR product of one A and one B micro-panel with the
//     k loop strictly sequential (one FMA chain per C element, k = 0, 1, ..., kc-1), then
//     writes C = alpha * acc + beta * C for the valid m x n corner. beta == 0 means C is
//     not read (it may hold NaN). Row-major C with row stride ldc; vectors run along N.
//
// The two packing primitives every pack reduces to (W = MR or NR, the panel width; one version per
// ISA, pack_panel_*_generic / _avx2 / _avx512):
//   pack_panel_contig:     element (k, x) is at src[k * ld + x]   -> straight row copies.
//   pack_panel_transposed: element (k, x) is at src[x * ld + k]   -> in-register transposes.
// Packing op(A) with trans_a == false and op(B) with trans_b == true need the transpose;
// the other two cases are copies. No full transposed copy of a matrix is ever made.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define POSGRAD_GEMM_X86 1
#else
#define POSGRAD_GEMM_X86 0
#endif

#define POSGRAD_GEMM_INLINE inline __attribute__((always_inline))

// GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 shuffle intrinsics (the
// deliberately undefined pass-through operand of _mm512_undefined_*; GCC bug 105593, fixed
// in GCC 13). The warning is attributed through the inlining stack to this header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace posgrad::kernels::cpu::gemm_detail {

// A 64-byte aligned scratch area that only grows. One per thread (thread_local), so calls
// after warm-up allocate nothing; OpenMP pool threads keep theirs between calls.
class aligned_scratch {
 public:
  aligned_scratch() = default;
  aligned_scratch(const aligned_scratch&) = delete;
  aligned_scratch& operator=(const aligned_scratch&) = delete;
  ~aligned_scratch() { std::free(ptr_); }

  void* get(std::size_t bytes) {
    if (bytes > capacity_) {
      const std::size_t rounded = (bytes + 4095) / 4096 * 4096;
      void* fresh = std::aligned_alloc(64, rounded);
      if (fresh == nullptr) throw std::bad_alloc();
      std::free(ptr_);
      ptr_ = fresh;
      capacity_ = rounded;
    }
    return ptr_;
  }

 private:
  void* ptr_ = nullptr;
  std::size_t capacity_ = 0;
};

// P is the packed element: T itself, or uint32_t for the bf16 pair path (a pair of k steps per
// element; `kc` of the micro-kernel then counts pair steps).
template <typename T, typename P = T>
using ukr_fn = void (*)(int64_t kc, const P* a, const P* b, T* c, int64_t ldc, int64_t m, int64_t n, T alpha, T beta);

// Packs the block element (k, x), x < w valid, k < kc, into ceil(w / W) panels of width W.
// `trans == false` means src[k * ld + x] (copy), `true` means src[x * ld + k] (transpose).
template <typename T, typename P = T>
using pack_fn = void (*)(const T* src, int64_t ld, bool trans, int64_t w, int64_t kc, P* dst);

// ------------------------------------------------------------------------------------------
// Portable pieces (also inlined into the ISA-specific wrappers, where GCC vectorises them
// for the wrapper's target).
// ------------------------------------------------------------------------------------------

// One panel, copy layout. With W a compile-time constant the full-width case is a fixed-size
// copy that the compiler turns into a few vector moves.
template <typename T, int W>
POSGRAD_GEMM_INLINE void pack_panel_contig_generic(const T* src, int64_t ld, int64_t w, int64_t kc, T* dst) {
  if (w == W) {
    for (int64_t k = 0; k < kc; ++k) {
      std::memcpy(dst + k * W, src + k * ld, sizeof(T) * W);
    }
  } else {
    for (int64_t k = 0; k < kc; ++k) {
      for (int x = 0; x < W; ++x) dst[k * W + x] = x < w ? src[k * ld + x] : T(0);
    }
  }
}

// One panel, transposed layout, scalar. Walks k in the outer loop so the W source rows are
// read as W forward streams and every destination line is written once.
template <typename T, int W>
POSGRAD_GEMM_INLINE void pack_panel_transposed_generic(const T* src, int64_t ld, int64_t w, int64_t kc, T* dst) {
  for (int64_t k = 0; k < kc; ++k) {
    for (int x = 0; x < W; ++x) dst[k * W + x] = x < w ? src[x * ld + k] : T(0);
  }
}

// Rows of the copy layout that pack_block deals out to every panel before moving on: 8 rows of a
// panel are 8 W elements, whole cache lines for every W and T here (float W = 6: 192 bytes).
inline constexpr int64_t kPackRowChunk = 8;

// Loops a panel routine over all the panels of a block. The copy layout is walked in chunks of
// kPackRowChunk source rows, each chunk read front to back and dealt out to the panels: walking one
// panel down its kc rows instead touches a new page per row when ld is large (a 4 KiB row stride at
// N = 1024), which cost about a tenth of the GEMM's time at 1024^3 in TLB misses; dealing out one row
// at a time writes a panel W elements per visit, and the panels lie W * kc elements apart (6 KiB for
// float W = 6, kc = 256), so a 64-byte destination line that is only a third written is evicted from
// its L1 set by the other panels' lines and fetched again for each of its next parts (the A panels of
// the weight gradient's TN products spent about 1.3 cycles per element packing). A chunk writes
// whole lines.
template <typename T, int W, typename Contig, typename Transposed>
POSGRAD_GEMM_INLINE void pack_block(const T* src, int64_t ld, bool trans, int64_t w, int64_t kc, T* dst, Contig contig,
                                    Transposed transposed) {
  if (!trans) {
    for (int64_t k0 = 0; k0 < kc; k0 += kPackRowChunk) {
      const int64_t rows = kc - k0 < kPackRowChunk ? kc - k0 : kPackRowChunk;
      T* d = dst + k0 * W;
      for (int64_t x0 = 0; x0 < w; x0 += W) {
        contig(src + k0 * ld + x0, ld, w - x0 < W ? w - x0 : W, rows, d);
        d += W * kc;
      }
    }
    return;
  }
  for (int64_t x0 = 0; x0 < w; x0 += W) {
    transposed(src + x0 * ld, ld, w - x0 < W ? w - x0 : W, kc, dst);
    dst += W * kc;
  }
}

template <typename T, int W>
void pack_scalar(const T* src, int64_t ld, bool trans, int64_t w, int64_t kc, T* dst) {
  pack_block<T, W>(
      src, ld, trans, w, kc, dst,
      [](const T* s, int64_t l, int64_t wp, int64_t k, T* d) { pack_panel_contig_generic<T, W>(s, l, wp, k, d); },
      [](const T* s, int64_t l, int64_t wp, int64_t k, T* d) { pack_panel_transposed_generic<T, W>(s, l, wp, k, d); });
}

// Writes alpha * acc + beta * C for the valid corner of a tile held in a plain array.
template <typename T, int MR, int NR>
POSGRAD_GEMM_INLINE void write_tile_generic(const T* acc, T* c, int64_t ldc, int64_t m, int64_t n, T alpha, T beta) {
  for (int64_t i = 0; i < m; ++i) {
    T* ci = c + i * ldc;
    const T* ai = acc + i * NR;
    if (beta == T(0)) {
      for (int64_t j = 0; j < n; ++j) ci[j] = alpha * ai[j];
    } else {
      for (int64_t j = 0; j < n; ++j) ci[j] = alpha * ai[j] + beta * ci[j];
    }
  }
}

// Portable micro-kernel: no intrinsics, used when neither AVX2 nor AVX-512 is available.
template <typename T, int MR, int NR>
void ukr_scalar(int64_t kc, const T* __restrict a, const T* __restrict b, T* c, int64_t ldc, int64_t m, int64_t n,
                T alpha, T beta) {
  T acc[MR * NR] = {};
  for (int64_t k = 0; k < kc; ++k) {
    for (int i = 0; i < MR; ++i) {
      const T ai = a[k * MR + i];
      for (int j = 0; j < NR; ++j) acc[i * NR + j] += ai * b[k * NR + j];
    }
  }
  write_tile_generic<T, MR, NR>(acc, c, ldc, m, n, alpha, beta);
}

// ------------------------------------------------------------------------------------------
// bf16 operands (gemm.cpp's bf16 matmul precision)
// ------------------------------------------------------------------------------------------

// The bf16 bits of x: round to nearest, ties to even, as VCVTNEPS2BF16 does (Intel SDM, "VCVTNEPS2BF16",
// and the AVX512-BF16 convert_fp32_to_bfloat16 pseudo-code): a denormal input becomes a zero of its
// sign, a NaN stays a quiet NaN, a finite value beyond the bf16 range rounds to infinity.
POSGRAD_GEMM_INLINE uint32_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7F800000u) == 0) return (u >> 16) & 0x8000u;                     // zero, denormal
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return ((u >> 16) | 0x40u) & 0xFFFFu;  // NaN, made quiet
  return ((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16) & 0xFFFFu;                  // RNE
}

// x rounded to bf16 and widened back to float (exact: bf16 is the top half of a float).
POSGRAD_GEMM_INLINE float bf16_round(float x) {
  const uint32_t u = bf16_bits(x) << 16;
  float r;
  std::memcpy(&r, &u, sizeof r);
  return r;
}

// The converting path: the ISA's own float packer, then every packed element rounded to bf16 in
// place, so the float micro-kernel multiplies bf16 values (the products are exact in float: 8 x 8
// significant bits) and accumulates in float. Used where the CPU has no bf16 dot-product instruction.
template <pack_fn<float> Pack, int W>
void pack_rounded(const float* src, int64_t ld, bool trans, int64_t w, int64_t kc, float* dst) {
  Pack(src, ld, trans, w, kc, dst);
  const int64_t n = (w + W - 1) / W * W * kc;
  for (int64_t e = 0; e < n; ++e) dst[e] = bf16_round(dst[e]);
}

#if POSGRAD_GEMM_X86

#define POSGRAD_GEMM_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,fma")))
#define POSGRAD_GEMM_AVX2 __attribute__((target("avx2,fma")))

// ------------------------------------------------------------------------------------------
// AVX-512
// ------------------------------------------------------------------------------------------

template <typename T>
struct avx512_vec;

template <>
struct avx512_vec<float> {
  using reg = __m512;
  using mask = __mmask16;
  static constexpr int lanes = 16;
  POSGRAD_GEMM_AVX512 static POSGRAD_GEMM_INLINE reg zero() { return _mm512_setzero_ps(); }
  POSGRAD_GEMM_AVX512 static POSGRAD_GEMM_INLINE reg set1(float x) { return _mm512_set1_ps(x); }
  POSGRAD_GEMM_AVX512 static POSGRAD_GEMM_INLINE reg load(const float* p) { return _mm512_load_ps(p); }
  POSGRAD_GEMM_AVX512 static POSGRAD_GEMM_INLINE reg loadu(const float* p) { return _mm512_loadu_ps(p); }
  POSGRAD_GEMM_AVX512 static POSGRAD_GEMM_INLINE reg maskz_loadu(mask k, const float* p) {
    return _mm512_maskz_loadu_ps(k, p);
  }
  POSGRAD_GEMM_AVX512 static POSGRAD_GEMM_INLINE void storeu(float* p, reg v) { _mm512_storeu_ps(p, v); }
  POSGRAD_GEMM_AVX512 static POSGRAD_GEMM_INLINE void mask_storeu(float* p, mask k, reg v) {
    _mm512_mask_storeu_ps(p, k, v);
  }
  POSGRAD_GEMM_AVX512 static POSGRAD_GEMM_INLINE reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  POSGRAD_GEMM_AVX512 static POSGRAD_GEMM_INLINE reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static constexpr mask first_n(int64_t n) { return n >= lanes ? mask(0xFFFF) : mask((1u << (n > 0 ? n : 0)) - 1u); }

  // In-register transpose of a 16 x 16 block: r[i] holds row i on entry, column i on exit.
  POSGRAD_GEMM_AVX512 static POSGRAD_GEMM_INLINE void transpose(reg* r) {
    __m512 t[16];
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // u[4g + q]: rows 4g..4g+3, columns q, q+4, q+8, q+12 (one per 128-bit lane).
    __m512 u[16];
    for (int g = 0; g < 4; ++g) {
      const __m512d lo = _mm512_castps_pd(t[4 * g]), hi = _mm512_castps_pd(t[4 * g + 1]);
      const __m512d lo2 = _mm512_castps_pd(t[4 * g + 2]);
      const __m512d hi2 = _mm512_castps_pd(t[4 * g + 3]);
      u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo, lo2));
      u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo, lo2));
      u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi, hi2));
      u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi, hi2));
    }
    for (int q = 0; q < 4; ++q) {
      const __m512 v0 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x88);
      const __m512 v1 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x88);
      const __m512 w0 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xDD);
      const __m512 w1 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xDD);
      r[q] = _mm512_shuffle_f32x4(v0, v1, 0x88);
      r[q + 8] = _mm512_shuffle_f32x4(v0, v1, 0xDD);
      r[q + 4] = _mm512_shuffle_f32x4(w0, w1, 0x88);
      r[q + 12] = _mm512_shuffle_f32x4(w0, w1, 0xDD);
    }
  }
};

template <>
struct avx512_vec<double> {
  using reg = __m512d;
  using mask = __mmask8;
  static constexpr int lanes = 8;
  POSGRAD_GEMM_AVX512 static POSGRAD_GEMM_INLINE reg zero() { return _mm512_setzero_pd(); }
  POSGRAD_GEMM_AVX512 static POSGRAD_GEMM_INLINE reg set1(double x) { return _mm512_set1_pd(x); }
  POSGRAD_GEMM_AVX512 static POSGRAD_GEMM_INLINE reg load(const double* p) { return _mm512_load_pd(p); }
  POSGRAD_GEMM_AVX512 static POSGRAD_GEMM_INLINE reg loadu(const double* p) { return _mm512_loadu_pd(p); }
  POSGRAD_GEMM_AVX512 static POSGRAD_GEMM_INLINE reg maskz_loadu(mask k, const double* p) {
    return _mm512_maskz_loadu_pd(k, p);
  }
  POSGRAD_GEMM_AVX512 static POSGRAD_GEMM_INLINE void storeu(double* p, reg v) { _mm512_storeu_pd(p, v); }
  POSGRAD_GEMM_AVX512 static POSGRAD_GEMM_INLINE void mask_storeu(double* p, mask k, reg v) {
    _mm512_mask_storeu_pd(p, k, v);
  }
  POSGRAD_GEMM_AVX512 static POSGRAD_GEMM_INLINE reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_pd(a, b, c); }
  POSGRAD_GEMM_AVX512 static POSGRAD_GEMM_INLINE reg mul(reg a, reg b) { return _mm512_mul_pd(a, b); }
  static constexpr mask first_n(int64_t n) { return n >= lanes ? mask(0xFF) : mask((1u << (n > 0 ? n : 0)) - 1u); }

  // In-register transpose of an 8 x 8 block of doubles.
  POSGRAD_GEMM_AVX512 static POSGRAD_GEMM_INLINE void transpose(reg* r) {
    __m512d t[8];
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm512_unpacklo_pd(r[2 * i], r[2 * i + 1]);      // cols 0,2,4,6
      t[2 * i + 1] = _mm512_unpackhi_pd(r[2 * i], r[2 * i + 1]);  // cols 1,3,5,7
    }
    for (int odd = 0; odd < 2; ++odd) {
      const __m512d u0 = _mm512_shuffle_f64x2(t[odd], t[2 + odd], 0x88);
      const __m512d u1 = _mm512_shuffle_f64x2(t[4 + odd], t[6 + odd], 0x88);
      const __m512d u2 = _mm512_shuffle_f64x2(t[odd], t[2 + odd], 0xDD);
      const __m512d u3 = _mm512_shuffle_f64x2(t[4 + odd], t[6 + odd], 0xDD);
      r[odd + 0] = _mm512_shuffle_f64x2(u0, u1, 0x88);
      r[odd + 4] = _mm512_shuffle_f64x2(u0, u1, 0xDD);
      r[odd + 2] = _mm512_shuffle_f64x2(u2, u3, 0x88);
      r[odd + 6] = _mm512_shuffle_f64x2(u2, u3, 0xDD);
    }
  }
};

// MR x (NV * lanes) micro-kernel. The MR * NV accumulators stay in zmm registers for the
// whole k loop (MR * NV <= 28 of the 32 registers); per k step it loads NV vectors of B and
// broadcasts MR scalars of A, then issues MR * NV independent FMAs. The FMA chain
// of every C element runs over k in order, so the result does not depend on how the caller
// splits M or N across threads.
template <typename T, int MR, int NV>
POSGRAD_GEMM_AVX512 void ukr_avx512(int64_t kc, const T* __restrict a, const T* __restrict b, T* c, int64_t ldc,
                                    int64_t m, int64_t n, T alpha, T beta) {
  using V = avx512_vec<T>;
  using reg = typename V::reg;
  constexpr int L = V::lanes;

  reg acc[MR][NV];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = V::zero();
  }

  // Warm the C tile while the k loop runs: it is read (beta != 0) or written at the end.
  const int64_t last_col = (n < NV * L ? n : NV * L) - 1;
  for (int64_t i = 0; i < m; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + last_col), _MM_HINT_T0);
  }

#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    reg bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = V::load(b + v * L);
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      const reg ai = V::set1(a[i]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = V::fmadd(ai, bv[v], acc[i][v]);
    }
    a += MR;
    b += NV * L;
  }

  const reg va = V::set1(alpha);
  const reg vb = V::set1(beta);
  if (n == NV * L) {
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      if (i < m) {
        T* ci = c + i * ldc;
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          const reg r =
              beta == T(0) ? V::mul(va, acc[i][v]) : V::fmadd(va, acc[i][v], V::mul(vb, V::loadu(ci + v * L)));
          V::storeu(ci + v * L, r);
        }
      }
    }
  } else {
    // Right edge: masked loads/stores touch only the n valid columns.
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      if (i < m) {
        T* ci = c + i * ldc;
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          const auto k = V::first_n(n - v * L);
          const reg r =
              beta == T(0) ? V::mul(va, acc[i][v]) : V::fmadd(va, acc[i][v], V::mul(vb, V::maskz_loadu(k, ci + v * L)));
          V::mask_storeu(ci + v * L, k, r);
        }
      }
    }
  }
}

// Copy-layout panel: each k row is W contiguous elements, moved with (masked) vector ops.
template <typename T, int W>
POSGRAD_GEMM_AVX512 POSGRAD_GEMM_INLINE void pack_panel_contig_avx512(const T* src, int64_t ld, int64_t w, int64_t kc,
                                                                      T* dst) {
  using V = avx512_vec<T>;
  constexpr int L = V::lanes;
  constexpr int G = (W + L - 1) / L;
  typename V::mask load_mask[G], store_mask[G];
  for (int g = 0; g < G; ++g) {
    load_mask[g] = V::first_n(w - g * L);
    store_mask[g] = V::first_n(W - g * L);
  }
  for (int64_t k = 0; k < kc; ++k) {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      V::mask_storeu(dst + k * W + g * L, store_mask[g], V::maskz_loadu(load_mask[g], src + k * ld + g * L));
    }
  }
}

// Transposed-layout panel: L source rows (contiguous along k) are loaded, transposed in
// registers, and stored as L consecutive k rows of the panel. Rows x >= w load as zero;
// lanes x >= W are masked off the store, so W need not be a multiple of L (e.g. MR = 12).
template <typename T, int W>
POSGRAD_GEMM_AVX512 POSGRAD_GEMM_INLINE void pack_panel_transposed_avx512(const T* src, int64_t ld, int64_t w,
                                                                          int64_t kc, T* dst) {
  using V = avx512_vec<T>;
  using reg = typename V::reg;
  constexpr int L = V::lanes;
  constexpr int G = (W + L - 1) / L;
  for (int g = 0; g < G; ++g) {
    const int64_t x0 = int64_t(g) * L;
    const int64_t rows = w - x0 < L ? (w - x0 > 0 ? w - x0 : 0) : L;
    const auto smask = V::first_n(W - x0);
    int64_t k = 0;
    for (; k + L <= kc; k += L) {
      reg r[L];
#pragma GCC unroll 16
      for (int i = 0; i < L; ++i) {
        r[i] = i < rows ? V::loadu(src + (x0 + i) * ld + k) : V::zero();
      }
      V::transpose(r);
#pragma GCC unroll 16
      for (int i = 0; i < L; ++i) V::mask_storeu(dst + (k + i) * W + x0, smask, r[i]);
    }
    if (k < kc) {
      const int64_t rem = kc - k;
      const auto lmask = V::first_n(rem);
      reg r[L];
#pragma GCC unroll 16
      for (int i = 0; i < L; ++i) {
        r[i] = i < rows ? V::maskz_loadu(lmask, src + (x0 + i) * ld + k) : V::zero();
      }
      V::transpose(r);
      for (int i = 0; i < rem; ++i) V::mask_storeu(dst + (k + i) * W + x0, smask, r[i]);
    }
  }
}

template <typename T, int W>
POSGRAD_GEMM_AVX512 void pack_avx512(const T* src, int64_t ld, bool trans, int64_t w, int64_t kc, T* dst) {
  pack_block<T, W>(
      src, ld, trans, w, kc, dst,
      [](const T* s, int64_t l, int64_t wp, int64_t k, T* d)
          POSGRAD_GEMM_AVX512 { pack_panel_contig_avx512<T, W>(s, l, wp, k, d); },
      [](const T* s, int64_t l, int64_t wp, int64_t k, T* d)
          POSGRAD_GEMM_AVX512 { pack_panel_transposed_avx512<T, W>(s, l, wp, k, d); });
}

// ------------------------------------------------------------------------------------------
// AVX-512 with AVX512-BF16: VDPBF16PS on k-pairs
// ------------------------------------------------------------------------------------------
//
// Packed format of the pair path (element type uint32_t, one bf16 pair along k): a micro-panel of
// width W holds ceil(kc / 2) pair steps; pair step p, column x sits at dst[p * W + x], its low half
// the bf16 of element (2p, x) and its high half that of (2p + 1, x) (zero past kc). VDPBF16PS then
// adds a_lo * b_lo + a_hi * b_hi to each float lane (Intel SDM, "VDPBF16PS": products of bf16 are
// exact in float, each addition rounded to nearest even; denormal inputs and outputs are zero).

#define POSGRAD_GEMM_AVX512BF16 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512bf16,fma")))

// Rounds lo and hi to bf16 (round to nearest even, denormals to zero: VCVTNE2PS2BF16) and interleaves
// them into pairs: 32-bit lane x holds lo[x] in its low half and hi[x] in its high half.
POSGRAD_GEMM_AVX512BF16 POSGRAD_GEMM_INLINE __m512i bf16_pairs(__m512 lo, __m512 hi) {
  // Words 0-15 of `both` are lo's bf16, words 16-31 hi's; word 2x of the result is word x, word 2x + 1
  // is word 16 + x.
  const __m512i both = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                              6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(interleave, both);
}

// Pairs the copy layout (element (k, x) at src[k * ld + x], x < w) into ceil(w / W) pair panels. As in
// pack_block, the rows are walked in chunks of kPackRowChunk (kPackRowChunk / 2 pair steps), each chunk
// read front to back and dealt out to the panels, so that a visit writes whole lines (W = 12: four pair
// steps are 192 bytes) rather than one pair step's W elements (48 bytes, a partial line that the other
// panels' lines evict from its L1 set before its next part arrives).
template <int W>
POSGRAD_GEMM_AVX512BF16 POSGRAD_GEMM_INLINE void pair_rows_avx512bf16(const float* src, int64_t ld, int64_t w,
                                                                      int64_t kc, uint32_t* dst) {
  constexpr int L = 16;
  constexpr int G = (W + L - 1) / L;
  constexpr int64_t chunk = kPackRowChunk / 2;
  static_assert(kPackRowChunk % 2 == 0, "a chunk holds whole pair steps");
  const int64_t kp = (kc + 1) / 2, panels = (w + W - 1) / W;
  for (int64_t p0 = 0; p0 < kp; p0 += chunk) {
    const int64_t p_end = kp - p0 < chunk ? kp : p0 + chunk;
    for (int64_t q = 0; q < panels; ++q) {
      const int64_t x0 = q * W;
      __mmask16 lm[G], sm[G];
      for (int g = 0; g < G; ++g) {
        lm[g] = avx512_vec<float>::first_n(w - x0 - g * L);
        sm[g] = avx512_vec<float>::first_n(W - g * L);
      }
      for (int64_t p = p0; p < p_end; ++p) {
        const float* even = src + 2 * p * ld + x0;
        const bool has_odd = 2 * p + 1 < kc;
        uint32_t* d = dst + q * W * kp + p * W;
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g) {
          const __m512 lo = _mm512_maskz_loadu_ps(lm[g], even + g * L);
          const __m512 hi = has_odd ? _mm512_maskz_loadu_ps(lm[g], even + ld + g * L) : _mm512_setzero_ps();
          _mm512_mask_storeu_epi32(d + g * L, sm[g], bf16_pairs(lo, hi));
        }
      }
    }
  }
}

// One pair panel of the transposed layout (element (k, x) at src[x * ld + k], x < w <= W): blocks of 16
// source rows by 16 k steps are loaded, transposed in registers (r[i] then holds k step k + i of 16
// columns) and paired straight from the registers, k steps 2j and 2j + 1 into pair step k / 2 + j.
// Rows x >= w and k steps >= kc load as zero, so the pairs past kc are zero as the format requires.
template <int W>
POSGRAD_GEMM_AVX512BF16 POSGRAD_GEMM_INLINE void pair_panel_transposed_avx512bf16(const float* src, int64_t ld,
                                                                                  int64_t w, int64_t kc,
                                                                                  uint32_t* dst) {
  using V = avx512_vec<float>;
  constexpr int L = 16;
  constexpr int G = (W + L - 1) / L;
  for (int g = 0; g < G; ++g) {
    const int64_t x0 = int64_t(g) * L;
    const int64_t rows = w - x0 < L ? (w - x0 > 0 ? w - x0 : 0) : L;
    const __mmask16 smask = V::first_n(W - x0);
    for (int64_t k = 0; k < kc; k += L) {
      const __mmask16 lmask = V::first_n(kc - k);
      __m512 r[L];
#pragma GCC unroll 16
      for (int i = 0; i < L; ++i) r[i] = i < rows ? V::maskz_loadu(lmask, src + (x0 + i) * ld + k) : V::zero();
      V::transpose(r);
      const int64_t steps = kc - k >= L ? L / 2 : (kc - k + 1) / 2;
#pragma GCC unroll 8
      for (int j = 0; j < L / 2; ++j) {
        if (j < steps) _mm512_mask_storeu_epi32(dst + (k / 2 + j) * W + x0, smask, bf16_pairs(r[2 * j], r[2 * j + 1]));
      }
    }
  }
}

// Packs a block like pack_avx512<float, W> (same arguments, same panels), in the pair format.
template <int W>
POSGRAD_GEMM_AVX512BF16 void pack_pairs_avx512bf16(const float* src, int64_t ld, bool trans, int64_t w, int64_t kc,
                                                   uint32_t* dst) {
  if (!trans) {
    pair_rows_avx512bf16<W>(src, ld, w, kc, dst);
    return;
  }
  const int64_t kp = (kc + 1) / 2;
  for (int64_t x0 = 0; x0 < w; x0 += W) {
    pair_panel_transposed_avx512bf16<W>(src + x0 * ld, ld, w - x0 < W ? w - x0 : W, kc, dst);
    dst += int64_t(W) * kp;
  }
}

// MR x (NV * 16) micro-kernel over kp pair steps: as ukr_avx512<float>, with a 32-bit broadcast of
// A's pair and one VDPBF16PS per accumulator and pair step (two multiply-adds per lane).
template <int MR, int NV>
POSGRAD_GEMM_AVX512BF16 void ukr_avx512bf16(int64_t kp, const uint32_t* __restrict a, const uint32_t* __restrict b,
                                            float* c, int64_t ldc, int64_t m, int64_t n, float alpha, float beta) {
  using V = avx512_vec<float>;
  constexpr int L = 16;
  __m512 acc[MR][NV];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  const int64_t last_col = (n < NV * L ? n : NV * L) - 1;
  for (int64_t i = 0; i < m; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + last_col), _MM_HINT_T0);
  }

#pragma GCC unroll 4
  for (int64_t p = 0; p < kp; ++p) {
    __m512bh bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = reinterpret_cast<__m512bh>(_mm512_load_si512(b + v * L));
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      const __m512bh ai = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(a[i])));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], ai, bv[v]);
    }
    a += MR;
    b += NV * L;
  }

  const __m512 va = V::set1(alpha);
  const __m512 vb = V::set1(beta);
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i) {
    if (i < m) {
      float* ci = c + i * ldc;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        const auto k = V::first_n(n - v * L);
        const __m512 r =
            beta == 0.0f ? V::mul(va, acc[i][v]) : V::fmadd(va, acc[i][v], V::mul(vb, V::maskz_loadu(k, ci + v * L)));
        V::mask_storeu(ci + v * L, k, r);
      }
    }
  }
}

// ------------------------------------------------------------------------------------------
// AVX2 + FMA
// ------------------------------------------------------------------------------------------

template <typename T>
struct avx2_vec;

template <>
struct avx2_vec<float> {
  using reg = __m256;
  static constexpr int lanes = 8;
  POSGRAD_GEMM_AVX2 static POSGRAD_GEMM_INLINE reg zero() { return _mm256_setzero_ps(); }
  POSGRAD_GEMM_AVX2 static POSGRAD_GEMM_INLINE reg set1(float x) { return _mm256_set1_ps(x); }
  POSGRAD_GEMM_AVX2 static POSGRAD_GEMM_INLINE reg load(const float* p) { return _mm256_load_ps(p); }
  POSGRAD_GEMM_AVX2 static POSGRAD_GEMM_INLINE reg loadu(const float* p) { return _mm256_loadu_ps(p); }
  POSGRAD_GEMM_AVX2 static POSGRAD_GEMM_INLINE void storeu(float* p, reg v) { _mm256_storeu_ps(p, v); }
  POSGRAD_GEMM_AVX2 static POSGRAD_GEMM_INLINE reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  POSGRAD_GEMM_AVX2 static POSGRAD_GEMM_INLINE reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  // Stores the first `count` lanes (1..8) without touching memory beyond them.
  POSGRAD_GEMM_AVX2 static POSGRAD_GEMM_INLINE void store_first(float* p, reg v, int count) {
    if (count == 8) {
      _mm256_storeu_ps(p, v);
    } else if (count == 6) {
      _mm_storeu_ps(p, _mm256_castps256_ps128(v));
      _mm_storel_pi(reinterpret_cast<__m64*>(p + 4), _mm256_extractf128_ps(v, 1));
    } else if (count == 4) {
      _mm_storeu_ps(p, _mm256_castps256_ps128(v));
    } else {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, v);
      for (int i = 0; i < count; ++i) p[i] = tmp[i];
    }
  }
  // 8 x 8 in-register transpose.
  POSGRAD_GEMM_AVX2 static POSGRAD_GEMM_INLINE void transpose(reg* r) {
    __m256 t[8], s[8];
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int h = 0; h < 2; ++h) {  // rows 0-3, rows 4-7
      const __m256 lo = t[4 * h], hi = t[4 * h + 1], lo2 = t[4 * h + 2], hi2 = t[4 * h + 3];
      s[4 * h + 0] = _mm256_shuffle_ps(lo, lo2, 0x44);  // cols 0 | 4
      s[4 * h + 1] = _mm256_shuffle_ps(lo, lo2, 0xEE);  // cols 1 | 5
      s[4 * h + 2] = _mm256_shuffle_ps(hi, hi2, 0x44);  // cols 2 | 6
      s[4 * h + 3] = _mm256_shuffle_ps(hi, hi2, 0xEE);  // cols 3 | 7
    }
    for (int q = 0; q < 4; ++q) {
      r[q] = _mm256_permute2f128_ps(s[q], s[4 + q], 0x20);
      r[q + 4] = _mm256_permute2f128_ps(s[q], s[4 + q], 0x31);
    }
  }
};

template <>
struct avx2_vec<double> {
  using reg = __m256d;
  static constexpr int lanes = 4;
  POSGRAD_GEMM_AVX2 static POSGRAD_GEMM_INLINE reg zero() { return _mm256_setzero_pd(); }
  POSGRAD_GEMM_AVX2 static POSGRAD_GEMM_INLINE reg set1(double x) { return _mm256_set1_pd(x); }
  POSGRAD_GEMM_AVX2 static POSGRAD_GEMM_INLINE reg load(const double* p) { return _mm256_load_pd(p); }
  POSGRAD_GEMM_AVX2 static POSGRAD_GEMM_INLINE reg loadu(const double* p) { return _mm256_loadu_pd(p); }
  POSGRAD_GEMM_AVX2 static POSGRAD_GEMM_INLINE void storeu(double* p, reg v) { _mm256_storeu_pd(p, v); }
  POSGRAD_GEMM_AVX2 static POSGRAD_GEMM_INLINE reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_pd(a, b, c); }
  POSGRAD_GEMM_AVX2 static POSGRAD_GEMM_INLINE reg mul(reg a, reg b) { return _mm256_mul_pd(a, b); }
  POSGRAD_GEMM_AVX2 static POSGRAD_GEMM_INLINE void store_first(double* p, reg v, int count) {
    if (count == 4) {
      _mm256_storeu_pd(p, v);
    } else if (count == 2) {
      _mm_storeu_pd(p, _mm256_castpd256_pd128(v));
    } else {
      alignas(32) double tmp[4];
      _mm256_store_pd(tmp, v);
      for (int i = 0; i < count; ++i) p[i] = tmp[i];
    }
  }
  // 4 x 4 in-register transpose.
  POSGRAD_GEMM_AVX2 static POSGRAD_GEMM_INLINE void transpose(reg* r) {
    const __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]);  // a0 b0 | a2 b2
    const __m256d t1 = _mm256_unpackhi_pd(r[0], r[1]);  // a1 b1 | a3 b3
    const __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]);
    const __m256d t3 = _mm256_unpackhi_pd(r[2], r[3]);
    r[0] = _mm256_permute2f128_pd(t0, t2, 0x20);
    r[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
    r[2] = _mm256_permute2f128_pd(t0, t2, 0x31);
    r[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
  }
};

// MR x (NV * lanes) AVX2 micro-kernel: MR * NV <= 12 accumulators of the 16 ymm registers,
// NV for B, one for the A broadcast. Edge tiles go through a small stack tile.
template <typename T, int MR, int NV>
POSGRAD_GEMM_AVX2 void ukr_avx2(int64_t kc, const T* __restrict a, const T* __restrict b, T* c, int64_t ldc, int64_t m,
                                int64_t n, T alpha, T beta) {
  using V = avx2_vec<T>;
  using reg = typename V::reg;
  constexpr int L = V::lanes;
  constexpr int NR = NV * L;

  reg acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = V::zero();
  }
  const int64_t last_col = (n < NR ? n : NR) - 1;
  for (int64_t i = 0; i < m; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + last_col), _MM_HINT_T0);
  }

#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    reg bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = V::load(b + v * L);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const reg ai = V::set1(a[i]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = V::fmadd(ai, bv[v], acc[i][v]);
    }
    a += MR;
    b += NR;
  }

  const reg va = V::set1(alpha);
  const reg vb = V::set1(beta);
  if (n == NR) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      if (i < m) {
        T* ci = c + i * ldc;
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          const reg r =
              beta == T(0) ? V::mul(va, acc[i][v]) : V::fmadd(va, acc[i][v], V::mul(vb, V::loadu(ci + v * L)));
          V::storeu(ci + v * L, r);
        }
      }
    }
  } else {
    alignas(32) T tile[MR * NR];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) V::storeu(tile + i * NR + v * L, acc[i][v]);
    }
    write_tile_generic<T, MR, NR>(tile, c, ldc, m, n, alpha, beta);
  }
}

template <typename T, int W>
POSGRAD_GEMM_AVX2 POSGRAD_GEMM_INLINE void pack_panel_transposed_avx2(const T* src, int64_t ld, int64_t w, int64_t kc,
                                                                      T* dst) {
  using V = avx2_vec<T>;
  using reg = typename V::reg;
  constexpr int L = V::lanes;
  constexpr int G = (W + L - 1) / L;
  int64_t k = 0;
  for (; k + L <= kc; k += L) {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const int64_t x0 = int64_t(g) * L;
      const int store_count = W - x0 < L ? int(W - x0) : L;
      reg r[L];
#pragma GCC unroll 8
      for (int i = 0; i < L; ++i) {
        r[i] = x0 + i < w ? V::loadu(src + (x0 + i) * ld + k) : V::zero();
      }
      V::transpose(r);
      if constexpr (G == 1 && W < L) {
        // A panel narrower than a register (float W = 6): row k + i is r[i]'s first W lanes, and its
        // last L - W lanes are zeros that land on the next row's first slots, which the next store (or
        // the scalar k tail) writes afterwards. Only the panel's very last row is stored narrow, so
        // nothing past the panel is touched: L full stores instead of 2 L narrow ones and L extracts.
#pragma GCC unroll 8
        for (int i = 0; i < L; ++i) {
          if (k + i + 1 < kc)
            V::storeu(dst + (k + i) * W, r[i]);
          else
            V::store_first(dst + (k + i) * W, r[i], W);
        }
        continue;
      }
#pragma GCC unroll 8
      for (int i = 0; i < L; ++i) V::store_first(dst + (k + i) * W + x0, r[i], store_count);
    }
  }
  // k tail (< L steps): scalar.
  for (; k < kc; ++k) {
    for (int x = 0; x < W; ++x) dst[k * W + x] = x < w ? src[x * ld + k] : T(0);
  }
}

template <typename T, int W>
POSGRAD_GEMM_AVX2 void pack_avx2(const T* src, int64_t ld, bool trans, int64_t w, int64_t kc, T* dst) {
  pack_block<T, W>(
      src, ld, trans, w, kc, dst,
      [](const T* s, int64_t l, int64_t wp, int64_t k, T* d)
          POSGRAD_GEMM_AVX2 { pack_panel_contig_generic<T, W>(s, l, wp, k, d); },
      [](const T* s, int64_t l, int64_t wp, int64_t k, T* d)
          POSGRAD_GEMM_AVX2 { pack_panel_transposed_avx2<T, W>(s, l, wp, k, d); });
}

#endif  // POSGRAD_GEMM_X86

}  // namespace posgrad::kernels::cpu::gemm_detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
