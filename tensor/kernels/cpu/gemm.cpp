// gemm.cpp — posgrad's CPU matrix multiply: C = alpha * op(A) @ op(B) + beta * C (float and
// double, row-major, optional transposes, strided batches), parallelised with OpenMP.
//
// What it is: a packed, cache-blocked, register-tiled GEMM in the style of
//   K. Goto and R. A. van de Geijn, "Anatomy of High-Performance Matrix Multiplication",
//   ACM TOMS 34(3), 2008, and
//   F. G. Van Zee and R. A. van de Geijn, "BLIS: A Framework for Rapidly Instantiating BLAS
//   Functionality", ACM TOMS 41(3), 2015.
// The loop nest is theirs: jc (NC columns of C) -> pc (KC-deep rank-k update; a KC x NC panel
// of op(B) is packed) -> ic (MC rows; an MC x KC block of op(A) is packed) -> jr (NR) -> ir (MR)
// -> micro-kernel. The micro-kernels and packing routines are in gemm_microkernels.h, written
// from the papers, not taken from any library. AVX-512 and AVX2+FMA variants are compiled
// with function-level target attributes and chosen at run time (__builtin_cpu_supports), so
// the library needs no -march flag; a scalar variant covers everything else.
//
// What it is not: a BLAS. No complex types, no column-major interface, no argument checking
// beyond the documented preconditions (ldx >= the stored row width, non-aliasing C), and it
// never calls an external BLAS. It does not print.
//
// Numerics and determinism: every C element is one sequential multiply-add chain over k
// inside a K block (fused FMAs in the SIMD kernels), and the blocks are folded into C in
// increasing k: the first as alpha * acc + beta * C, the rest as alpha * acc + C. The blocks are
// ceil(K / KC) of them, as even as multiples of 16 allow (kc_step): a function of K alone. Where the
// blocks are dealt to threads (split_k, alpha == 1 only), each block's accumulators are stored
// exactly and folded in the same order with the same single rounding. So results are bit-identical
// for any number of OpenMP threads. They can differ in the last bits between
// instruction sets (FMA vs. separate multiply and add, different KC): the scalar path's
// `acc += a * b` is two roundings, as the build compiles with -ffp-contract=off, and the AVX2 and
// AVX-512 paths' only FMAs are the intrinsics written in gemm_microkernels.h. The error bound is that
// of a sequential dot product, |error| <= ~K * eps * sum_k |a_ik * b_kj|; typically ~sqrt(K) eps.

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <new>
#include <optional>
#include <type_traits>
#include <vector>

#include "tensor/kernels/cpu/denormals.h"
#include "tensor/kernels/cpu/gemm_internal.h"
#include "tensor/kernels/cpu/gemm_microkernels.h"
#include "tensor/kernels/cpu/gemm_tile.h"
#include "tensor/kernels/cpu/parallel.h"
#include "tensor/kernels/kernels.h"

namespace posgrad::kernels::cpu {

// Declarations as in tensor/kernels/kernels.h.
template <typename T>
void gemm(T* C, const T* A, const T* B, int64_t M, int64_t N, int64_t K, int64_t ldc, int64_t lda, int64_t ldb,
          bool trans_a, bool trans_b, T alpha, T beta);

template <typename T>
void gemm_batched(T* C, const T* A, const T* B, int64_t batch, int64_t M, int64_t N, int64_t K, int64_t ldc,
                  int64_t lda, int64_t ldb, int64_t stride_c, int64_t stride_a, int64_t stride_b, bool trans_a,
                  bool trans_b, T alpha, T beta);

namespace gemm_detail {
namespace {

// ---- the work tally (matmul_work) -----------------------------------------------------------------
// Each thread adds to its own counters (no shared cache line on the products' path); matmul_work sums
// the live threads' counters and what exited threads left behind.
enum WorkKind { kWorkFp32, kWorkBf16, kWorkFp64, kWorkKinds };

struct ThreadWork;
struct WorkTally {
  std::mutex mutex;
  std::vector<ThreadWork*> live;
  uint64_t retired[kWorkKinds] = {};
};
WorkTally& work_tally() {
  static WorkTally* t = new WorkTally;  // never destroyed: threads may exit after static destruction
  return *t;
}

struct ThreadWork {
  std::atomic<uint64_t> flops[kWorkKinds] = {};
  ThreadWork() {
    std::lock_guard<std::mutex> lock(work_tally().mutex);
    work_tally().live.push_back(this);
  }
  ~ThreadWork() {
    WorkTally& t = work_tally();
    std::lock_guard<std::mutex> lock(t.mutex);
    for (int i = 0; i < kWorkKinds; ++i) t.retired[i] += flops[i].load(std::memory_order_relaxed);
    t.live.erase(std::find(t.live.begin(), t.live.end(), this));
  }
};

void count_work(WorkKind kind, int64_t M, int64_t N, int64_t K) {
  thread_local ThreadWork w;
  std::atomic<uint64_t>& c = w.flops[kind];  // written by this thread only
  c.store(c.load(std::memory_order_relaxed) + 2 * uint64_t(M) * uint64_t(N) * uint64_t(K), std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------
// Kernel configurations
// ---------------------------------------------------------------------------------------------

// One instruction set's micro-kernel, packers and cache blocking for one element type.
// mc and nc are multiples of mr and nr. kc is the only blocking size that affects rounding.
// P is the packed element (T, or uint32_t bf16 pairs); k_pack is how many k steps one packed
// element holds (1, or 2 for pairs), so a packed micro-panel is ceil(kc / k_pack) elements deep.
template <typename T, typename P = T>
struct kernel_config {
  int64_t mr, nr;
  int64_t mc, kc, nc;
  ukr_fn<T, P> ukr;
  pack_fn<T, P> pack_a;  // panels of width mr
  pack_fn<T, P> pack_b;  // panels of width nr
  int64_t k_pack = 1;
};

// Register tiles: AVX-512 12 x 32 floats / 12 x 16 doubles (24 of the 32 zmm registers
// accumulate, which covers the FMA latency x throughput of current cores with room to
// spare); AVX2 the classic 6 x 16 / 6 x 8 (12 of 16 ymm registers).
// Block sizes were measured on a Zen 5 core (48 KiB L1d, 1 MiB L2, 32 MiB shared L3): the
// MC x KC block of A (288 KiB for float) lives in L2, the KC x NC panel of B in L3, and the
// KC x NR micro-panel of B that the ir loop reuses streams from L2 at a small fraction of
// the L2 bandwidth. A deeper KC (512 rather than 256) halves the passes over C for large K,
// worth a few percent there; within +-3% the sizes were otherwise insensitive.
template <typename T>
kernel_config<T> make_config(gemm_isa isa);

template <>
kernel_config<float> make_config<float>(gemm_isa isa) {
#if POSGRAD_GEMM_X86
  if (isa == gemm_isa::avx512) {
    // mr, nr, mc, kc, nc, micro-kernel, packing of A, packing of B
    return {12, 32, 144, 512, 2048, &ukr_avx512<float, 12, 2>, &pack_avx512<float, 12>, &pack_avx512<float, 32>};
  }
  if (isa == gemm_isa::avx2) {
    // mr, nr, mc, kc, nc, micro-kernel, packing of A, packing of B
    return {6, 16, 144, 256, 4096, &ukr_avx2<float, 6, 2>, &pack_avx2<float, 6>, &pack_avx2<float, 16>};
  }
#endif
  (void)isa;
  // mr, nr, mc, kc, nc, micro-kernel, packing of A, packing of B
  return {4, 8, 128, 256, 2048, &ukr_scalar<float, 4, 8>, &pack_scalar<float, 4>, &pack_scalar<float, 8>};
}

template <>
kernel_config<double> make_config<double>(gemm_isa isa) {
#if POSGRAD_GEMM_X86
  if (isa == gemm_isa::avx512) {
    // mr, nr, mc, kc, nc, micro-kernel, packing of A, packing of B
    return {12, 16, 144, 256, 2048, &ukr_avx512<double, 12, 2>, &pack_avx512<double, 12>, &pack_avx512<double, 16>};
  }
  if (isa == gemm_isa::avx2) {
    // mr, nr, mc, kc, nc, micro-kernel, packing of A, packing of B
    return {6, 8, 96, 256, 2048, &ukr_avx2<double, 6, 2>, &pack_avx2<double, 6>, &pack_avx2<double, 8>};
  }
#endif
  (void)isa;
  // mr, nr, mc, kc, nc, micro-kernel, packing of A, packing of B
  return {4, 8, 128, 256, 2048, &ukr_scalar<double, 4, 8>, &pack_scalar<double, 4>, &pack_scalar<double, 8>};
}

// bf16 operands, float accumulation. The pair path (AVX512-BF16's VDPBF16PS) uses the AVX-512 float
// tile and blocking with KC counted in k steps (256 pair steps); the converting path is the active ISA's
// float configuration with packers that round each packed element to bf16.
kernel_config<float, uint32_t> make_bf16_pair_config() {
#if POSGRAD_GEMM_X86
  // mr, nr, mc, kc, nc, micro-kernel, packing of A, packing of B, k steps per packed element
  return {12, 32, 144, 512, 2048, &ukr_avx512bf16<12, 2>, &pack_pairs_avx512bf16<12>, &pack_pairs_avx512bf16<32>, 2};
#else
  return {};
#endif
}

kernel_config<float> make_bf16_converting_config(gemm_isa isa) {
  kernel_config<float> cfg = make_config<float>(isa);
#if POSGRAD_GEMM_X86
  if (isa == gemm_isa::avx512) {
    cfg.pack_a = &pack_rounded<&pack_avx512<float, 12>, 12>;
    cfg.pack_b = &pack_rounded<&pack_avx512<float, 32>, 32>;
    return cfg;
  }
  if (isa == gemm_isa::avx2) {
    cfg.pack_a = &pack_rounded<&pack_avx2<float, 6>, 6>;
    cfg.pack_b = &pack_rounded<&pack_avx2<float, 16>, 16>;
    return cfg;
  }
#endif
  cfg.pack_a = &pack_rounded<&pack_scalar<float, 4>, 4>;
  cfg.pack_b = &pack_rounded<&pack_scalar<float, 8>, 8>;
  return cfg;
}

gemm_isa detect_isa() {
#if POSGRAD_GEMM_X86
  __builtin_cpu_init();
  // libgcc's checks include the OS enabling the ymm/zmm state (XGETBV).
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma")) {
    return gemm_isa::avx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return gemm_isa::avx2;
#endif
  return gemm_isa::scalar;
}

bool detect_bf16_dot() {
#if POSGRAD_GEMM_X86
  __builtin_cpu_init();
  return detect_isa() == gemm_isa::avx512 && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

std::atomic<int>& active_isa_slot() {
  static std::atomic<int> slot{static_cast<int>(gemm_best_isa())};
  return slot;
}

template <typename T>
const kernel_config<T>& active_config() {
  static const kernel_config<T> configs[3] = {make_config<T>(gemm_isa::scalar), make_config<T>(gemm_isa::avx2),
                                              make_config<T>(gemm_isa::avx512)};
  return configs[active_isa_slot().load(std::memory_order_relaxed)];
}

const kernel_config<float>& active_bf16_converting_config() {
  static const kernel_config<float> configs[3] = {make_bf16_converting_config(gemm_isa::scalar),
                                                  make_bf16_converting_config(gemm_isa::avx2),
                                                  make_bf16_converting_config(gemm_isa::avx512)};
  return configs[active_isa_slot().load(std::memory_order_relaxed)];
}

std::atomic<bool>& bf16_dot_slot() {
  static std::atomic<bool> slot{detect_bf16_dot()};
  return slot;
}

std::atomic<int>& precision_slot() {
  static std::atomic<int> slot{static_cast<int>(MatmulPrecision::fp32)};
  return slot;
}

// ---------------------------------------------------------------------------------------------
// Pack buffers
// ---------------------------------------------------------------------------------------------

// The packed A and B blocks of a call (aligned_scratch: gemm_microkernels.h).
aligned_scratch& thread_scratch() {
  thread_local aligned_scratch scratch;
  return scratch;
}

// ---------------------------------------------------------------------------------------------
// Driver
// ---------------------------------------------------------------------------------------------

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
constexpr int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// [begin, end) of `count` items for part `t` of `parts` (contiguous, sizes differ by <= 1).
inline void split_range(int64_t count, int t, int parts, int64_t& begin, int64_t& end) {
  begin = count * t / parts;
  end = count * (t + 1) / parts;
}

// The depth of the K blocks of a product: K split into ceil(K / kc) blocks as even as multiples of 16
// allow (768 = 384 + 384 rather than 512 + 256), so that no block is a thin remainder and split_k
// (gemm_run_with) deals out equal work. A function of K and the configuration alone, like the rounding.
constexpr int64_t kKcGrain = 16;
inline int64_t kc_step(int64_t kc, int64_t K) {
  const int64_t blocks = (K + kc - 1) / kc;
  return std::min(kc, (((K + blocks - 1) / blocks) + kKcGrain - 1) / kKcGrain * kKcGrain);
}

template <typename T>
struct gemm_args {
  T* C;
  const T* A;
  const T* B;
  int64_t M, N, K, ldc, lda, ldb;
  bool trans_a, trans_b;
  T alpha, beta;
  // gemm_bias: bias (N) is the C that beta multiplies (beta == 1); C itself is not read.
  const T* bias = nullptr;
  // gemm_bias_add: addend (M x N, row stride ld_addend) added to each element once its product is
  // complete (after the last K block): C = addend + (op(A) op(B) + bias). Never C itself.
  const T* addend = nullptr;
  int64_t ld_addend = 0;

  // op(A)(i, k) block origin / op(B)(k, j) block origin in the stored layouts.
  const T* a_at(int64_t i, int64_t k) const { return trans_a ? A + k * lda + i : A + i * lda + k; }
  const T* b_at(int64_t k, int64_t j) const { return trans_b ? B + j * ldb + k : B + k * ldb + j; }
};

// C <- beta * C (the whole product is zero: K == 0 or alpha == 0). beta == 0 writes zeros
// without reading C, so NaN garbage is cleared as documented.
template <typename T>
void scale_c(T* C, int64_t M, int64_t N, int64_t ldc, T beta) {
  if (beta == T(1)) return;
  for (int64_t i = 0; i < M; ++i) {
    T* ci = C + i * ldc;
    if (beta == T(0)) {
      std::fill(ci, ci + N, T(0));
    } else {
      for (int64_t j = 0; j < N; ++j) ci[j] *= beta;
    }
  }
}

// c (m x n, row stride ldc) = addend + c, element by element (one rounding: the bits of the add op).
template <typename T>
void add_rows(T* c, int64_t ldc, const T* addend, int64_t ld_addend, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i) {
    T* ci = c + i * ldc;
    const T* ai = addend + i * ld_addend;
    for (int64_t j = 0; j < n; ++j) ci[j] = ai[j] + ci[j];
  }
}

// The two inner loops around the micro-kernel, for one packed MC x KC block of A and the
// packed B micro-panels [0, nc). Each B micro-panel is reused (from L1/L2) by the whole ir
// sweep over the A block, which stays in L2.
// bias (gemm_bias, the first KC block only; null otherwise): the bias entries of c's columns, copied
// into each tile's rows right before the micro-kernel reads them as its beta operand, while the tile is
// in L1. addend (gemm_bias_add, the last K block only; null otherwise): the addend rows of c's tiles,
// added to each tile right after the micro-kernel wrote it, still in L1.
template <typename T, typename P>
void macro_kernel(const kernel_config<T, P>& cfg, int64_t mc, int64_t nc, int64_t kc, const P* a_pack, const P* b_pack,
                  T* c, int64_t ldc, T alpha, T beta, const T* bias, const T* addend = nullptr, int64_t ld_addend = 0) {
  const int64_t mr = cfg.mr, nr = cfg.nr;
  for (int64_t jr = 0; jr < nc; jr += nr) {
    const int64_t n = std::min(nr, nc - jr);
    const P* b_panel = b_pack + jr * kc;
    for (int64_t ir = 0; ir < mc; ir += mr) {
      const int64_t m = std::min(mr, mc - ir);
      T* tile = c + ir * ldc + jr;
      if (bias)
        for (int64_t i = 0; i < m; ++i) std::copy(bias + jr, bias + jr + n, tile + i * ldc);
      cfg.ukr(kc, a_pack + ir * kc, b_panel, tile, ldc, m, n, alpha, beta);
      if (addend) add_rows(tile, ldc, addend + ir * ld_addend + jr, ld_addend, m, n);
    }
  }
}

inline void team_barrier(int nthreads) {
  if (nthreads > 1) {
#pragma omp barrier
  }
}

// Work of thread `tid` of `nthreads` (nthreads == 1: the whole product, no barriers).
//
// Two ways to share the work, chosen per call (same arithmetic per C element either way):
//  * split_m: each thread owns a contiguous range of MR-row tiles, packs its own A blocks
//    into its private slice, and runs all of N. The B panel is packed cooperatively (or, with
//    private_b below, by every thread for itself).
//  * otherwise (few row tiles, e.g. M < 2 * MR * threads): all threads pack each A block
//    together and then split the NR-column micro-panels of the B panel.
// Offsets into the packed buffers count packed elements: a KC-deep panel of width W is
// W * ceil(kc / k_pack) of them (kp below); the micro-kernel runs kp steps.
//  * private_b (with split_m only): each thread packs the whole B panel into its own buffer
//    (b_pack + b_slice * tid) instead of its share of one shared panel, and the team never meets
//    until the end: no barrier per KC step. Packing B once per thread costs about nthreads / M of
//    the products; chosen only when that is small and the panel fits a core's L2 (gemm_run_with).
//  * row_units (split_m, a product of one KC x NC step only; null otherwise): the rows are dealt in
//    units of unit_rows with stealing (parallel.h) instead of one fixed range per thread: a thread
//    takes its own units from the front, then the others' from the back, so that a core running slow
//    (a VM's core shared with another guest) does not hold the team at the end. Each C tile is still
//    one micro-kernel call on the same packed panels, whichever thread makes it: the same bits.
template <typename T, typename P>
void gemm_worker(const kernel_config<T, P>& cfg, const gemm_args<T>& g, bool split_m, bool private_b, P* b_pack,
                 int64_t b_slice, P* a_packs, int64_t a_slice, int tid, int nthreads,
                 parallel_detail::StealShares* row_units = nullptr, int64_t unit_rows = 0) {
  const int64_t mr = cfg.mr, nr = cfg.nr;
  P* a_pack = split_m ? a_packs + a_slice * tid : a_packs;
  if (private_b) b_pack += b_slice * tid;
  const int sync_threads = private_b ? 1 : nthreads;  // team_barrier is a no-op for 1

  int64_t row_begin = 0, row_end = g.M;
  if (split_m) {
    int64_t t0, t1;
    split_range(ceil_div(g.M, mr), tid, nthreads, t0, t1);
    row_begin = std::min(g.M, t0 * mr);
    row_end = std::min(g.M, t1 * mr);
  }

  for (int64_t jc = 0; jc < g.N; jc += cfg.nc) {
    const int64_t nc = std::min(cfg.nc, g.N - jc);
    const int64_t n_panels = ceil_div(nc, nr);
    int64_t p0 = 0, p1 = n_panels;
    if (!private_b) split_range(n_panels, tid, nthreads, p0, p1);

    const int64_t kc_blk = kc_step(cfg.kc, g.K);
    for (int64_t pc = 0; pc < g.K; pc += kc_blk) {
      const int64_t kc = std::min(kc_blk, g.K - pc);
      const int64_t kp = ceil_div(kc, cfg.k_pack);
      // Blocks after the first accumulate onto what the first one wrote.
      const T beta = pc == 0 ? g.beta : T(1);
      const T* bias = pc == 0 && g.bias ? g.bias + jc : nullptr;
      const T* addend = pc + kc >= g.K && g.addend ? g.addend + jc : nullptr;

      if (p1 > p0) {
        cfg.pack_b(g.b_at(pc, jc + p0 * nr), g.ldb, g.trans_b, std::min(nc - p0 * nr, (p1 - p0) * nr), kc,
                   b_pack + p0 * nr * kp);
      }
      team_barrier(sync_threads);

      if (split_m) {
        auto rows = [&](int64_t r0, int64_t r1) {
          for (int64_t ic = r0; ic < r1; ic += cfg.mc) {
            const int64_t mc = std::min(cfg.mc, r1 - ic);
            cfg.pack_a(g.a_at(ic, pc), g.lda, !g.trans_a, mc, kc, a_pack);
            macro_kernel(cfg, mc, nc, kp, a_pack, b_pack, g.C + ic * g.ldc + jc, g.ldc, g.alpha, beta, bias,
                         addend ? addend + ic * g.ld_addend : nullptr, g.ld_addend);
          }
        };
        if (row_units) {
          int64_t u;
          while (row_units->next(tid, u)) rows(u * unit_rows, std::min(g.M, (u + 1) * unit_rows));
        } else {
          rows(row_begin, row_end);
        }
      } else {
        for (int64_t ic = 0; ic < g.M; ic += cfg.mc) {
          const int64_t mc = std::min(cfg.mc, g.M - ic);
          int64_t q0, q1;
          split_range(ceil_div(mc, mr), tid, nthreads, q0, q1);
          if (q1 > q0) {
            cfg.pack_a(g.a_at(ic + q0 * mr, pc), g.lda, !g.trans_a, std::min(mc - q0 * mr, (q1 - q0) * mr), kc,
                       a_pack + q0 * mr * kp);
          }
          team_barrier(nthreads);
          if (p1 > p0) {
            macro_kernel(cfg, mc, std::min(nc - p0 * nr, (p1 - p0) * nr), kp, a_pack, b_pack + p0 * nr * kp,
                         g.C + ic * g.ldc + jc + p0 * nr, g.ldc, g.alpha, beta, bias ? bias + p0 * nr : nullptr,
                         addend ? addend + ic * g.ld_addend + p0 * nr : nullptr, g.ld_addend);
          }
          team_barrier(nthreads);  // a_pack is overwritten by the next block
        }
      }
      team_barrier(sync_threads);  // b_pack is overwritten by the next (pc, jc) step
    }
  }
}

// split_k (gemm_run_with): thread `tid` of `nthreads` computes the K blocks [b0, b1) of its share, each
// as a whole one-block product on its own: block 0 into C with the call's beta and bias, block b > 0 into
// partial b - 1 (M x N, row stride ldp) with alpha = 1 and beta = 0, which stores the micro-kernel's
// float accumulators exactly. After a barrier each thread folds its share of C's rows, C += P_1, then
// += P_2, ..., in block order. With alpha == 1 (required) the sequential loop writes block b > 0 as
// fma(1, acc, C) = C + acc rounded once (every path: the AVX2 edge tiles' separate rounding of 1 * acc
// and 1 * C is exact too), so each element gets the bits of the one-thread product.
template <typename T, typename P>
void gemm_worker_split_k(const kernel_config<T, P>& cfg, const gemm_args<T>& g, int64_t kc_blk, T* partials,
                         int64_t ldp, P* b_pack, P* a_pack, int tid, int nthreads) {
  const int64_t blocks = ceil_div(g.K, kc_blk);
  int64_t b0, b1;
  split_range(blocks, tid, nthreads, b0, b1);
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t pc = b * kc_blk;
    gemm_args<T> part = g;
    part.A = g.a_at(0, pc);
    part.B = g.b_at(pc, 0);
    part.K = std::min(kc_blk, g.K - pc);
    if (b > 0) {
      part.C = partials + (b - 1) * g.M * ldp;
      part.ldc = ldp;
      part.beta = T(0);
      part.bias = nullptr;
    }
    part.addend = nullptr;  // added after the fold

    gemm_worker(cfg, part, true, false, b_pack, 0, a_pack, 0, 0, 1);
  }
#pragma omp barrier
  int64_t r0, r1;
  split_range(g.M, tid, nthreads, r0, r1);
  if (r1 <= r0) return;
  for (int64_t b = 1; b < blocks; ++b)
    add_rows(g.C + r0 * g.ldc, g.ldc, partials + (b - 1) * g.M * ldp + r0 * ldp, ldp, r1 - r0, g.N);
  if (g.addend) add_rows(g.C + r0 * g.ldc, g.ldc, g.addend + r0 * g.ld_addend, g.ld_addend, r1 - r0, g.N);
}

// Multiply-adds below which one thread beats waking a team and syncing it: measured break-even
// at about 64^3 (~2.5 us of work) on 2 cores. Beyond it, each thread gets at least half that.
constexpr int64_t k_min_parallel_work = int64_t(1) << 18;
constexpr int64_t k_work_per_thread = int64_t(1) << 17;

int choose_threads(int64_t M, int64_t N, int64_t K) {
  // Inside a region, or under a caller's FlushDenormals (no threads started in that mode: denormals.h).
  if (omp_in_parallel() || caller_flushes_denormals()) return 1;
  const int64_t work = M * N * K;
  if (work < k_min_parallel_work) return 1;
  const int64_t by_work = work / k_work_per_thread;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), by_work)));
}

// Per-matrix work below which a batch is better run one whole matrix per thread than one
// matrix at a time with every thread (no barriers, no shared panels; ~160^3).
constexpr int64_t k_batch_parallel_work = int64_t(1) << 22;

// Multiply-adds from which an uneven split of the rows (under 95% of the team busy) gives way to the
// columns when they split more evenly: 128 x 512 x 768 TN (a weight gradient of a 128-wide model on
// 768 tokens, 11 row tiles for 2 threads) ran ~10% faster by columns on a 2-core Zen 4, 200 x 64 x 64
// (0.8M) ~20% slower.
constexpr int64_t k_split_n_work = int64_t(1) << 22;

// Bytes of split_k's partial sums (K blocks after the first, M x N each) up to which it is chosen.
constexpr int64_t kSplitKBytes = int64_t(1) << 20;

// Fraction of the team kept busy when `items` equal pieces are dealt out contiguously.
inline double balance(int64_t items, int nthreads) {
  return double(items) / double(ceil_div(items, nthreads) * nthreads);
}

template <typename T, typename P>
void gemm_run_with(const kernel_config<T, P>& cfg, const gemm_args<T>& g, int nthreads) {
  const int64_t kc_blk = kc_step(cfg.kc, g.K);
  const int64_t kc_max = ceil_div(std::min(kc_blk, g.K), cfg.k_pack);
  const int64_t nc_max = round_up(std::min(cfg.nc, g.N), cfg.nr);
  const int64_t mc_max = round_up(std::min(cfg.mc, g.M), cfg.mr);
  const int64_t m_tiles = ceil_div(g.M, cfg.mr);
  const int64_t n_panels = ceil_div(nc_max, cfg.nr);

  nthreads = static_cast<int>(std::min<int64_t>(nthreads, std::max(m_tiles, n_panels)));
  // split_k: the K blocks dealt out whole, one thread per block, where C is small enough for the partial
  // sums of the blocks after the first to stay in cache (the weight gradient of a narrow layer: few rows
  // and columns, K = the tokens). Only alpha == 1 keeps the bits (gemm_worker_split_k).
  const int64_t k_blocks = ceil_div(g.K, kc_blk);
  const int64_t ldp = round_up(g.N, int64_t(64 / sizeof(T)));
  if (nthreads > 1 && g.alpha == T(1) && k_blocks >= nthreads && balance(k_blocks, nthreads) >= 0.95 &&
      (k_blocks - 1) * g.M * ldp * static_cast<int64_t>(sizeof(T)) <= kSplitKBytes) {
    const int64_t align = 64 / static_cast<int64_t>(sizeof(P));
    const int64_t b_slice = round_up(kc_max * round_up(std::min(cfg.nc, g.N), cfg.nr), align);
    const int64_t a_slice = round_up(kc_max * round_up(std::min(cfg.mc, g.M), cfg.mr), align);
    const int64_t p_bytes = round_up((k_blocks - 1) * g.M * ldp * static_cast<int64_t>(sizeof(T)), 64);
    char* base = static_cast<char*>(thread_scratch().get(
        static_cast<std::size_t>(p_bytes) + sizeof(P) * static_cast<std::size_t>((b_slice + a_slice) * nthreads)));
    T* partials = reinterpret_cast<T*>(base);
    P* packs = reinterpret_cast<P*>(base + p_bytes);
    const unsigned fp_mode = caller_fp_mode();
#pragma omp parallel num_threads(nthreads)
    {
      const TeamFpMode fp(fp_mode);
      const int tid = omp_get_thread_num();
      P* mine = packs + (b_slice + a_slice) * tid;
      gemm_worker_split_k(cfg, g, kc_blk, partials, ldp, mine, mine + b_slice, tid, omp_get_num_threads());
    }
    return;
  }

  // Rows unless the columns deal out more evenly and the rows leave over 5% of the team idle; a small
  // product keeps the rows down to 85% (splitting the columns shares A's packing, two barriers per
  // block, which a product under k_split_n_work does not repay).
  const double m_balance = balance(m_tiles, nthreads);
  const double m_enough = g.M * g.N * g.K >= k_split_n_work ? 0.95 : 0.85;
  const bool split_m = nthreads == 1 || m_balance >= m_enough || m_balance >= balance(n_panels, nthreads);

  // Each thread packing all of B (no barriers) when its rows are many, so that the extra packing is
  // under 1/kPrivateBRows of the products, and one KC x NC panel is small enough to stay in a core's
  // L2 (larger panels are the L3-resident shared panel the blocking assumes).
  constexpr int64_t kPrivateBRows = 192;
  constexpr int64_t kPrivateBBytes = int64_t(512) << 10;
  const bool private_b = split_m && nthreads > 1 && g.M >= kPrivateBRows * nthreads &&
                         kc_max * nc_max * static_cast<int64_t>(sizeof(P)) <= kPrivateBBytes;

  // One allocation from the calling thread's scratch: the shared B panel (private_b: one per
  // thread), then either one A block per thread (split_m) or one shared A block. Elements,
  // 64-byte multiples.
  const int64_t align = 64 / static_cast<int64_t>(sizeof(P));
  const int64_t b_slice = round_up(kc_max * nc_max, align);
  const int64_t b_elems = b_slice * (private_b ? nthreads : 1);
  const int64_t a_slice = round_up(kc_max * mc_max, align);
  const int64_t a_count = split_m ? nthreads : 1;
  P* b_pack = static_cast<P*>(thread_scratch().get(sizeof(P) * static_cast<std::size_t>(b_elems + a_slice * a_count)));
  P* a_packs = b_pack + b_elems;

  if (nthreads == 1) {
    gemm_worker(cfg, g, split_m, false, b_pack, b_slice, a_packs, a_slice, 0, 1);
    return;
  }
  // Rows with stealing where the product is one KC x NC step (a row's later K blocks would otherwise
  // have to wait for whichever thread took its first): units of whole register tiles, about
  // kChunksPerShare per thread, at most an MC block.
  std::optional<parallel_detail::StealShares> row_units;
  int64_t unit_rows = 0;
  if (split_m && g.K <= cfg.kc && g.N <= cfg.nc) {
    const int64_t unit_tiles =
        std::clamp<int64_t>(m_tiles / (int64_t(nthreads) * parallel_detail::kChunksPerShare), 1, cfg.mc / cfg.mr);
    unit_rows = unit_tiles * cfg.mr;
    row_units.emplace(ceil_div(g.M, unit_rows), nthreads);
  }
  const unsigned fp_mode = caller_fp_mode();  // every thread runs in the caller's mode (denormals.h)
#pragma omp parallel num_threads(nthreads)
  {
    const TeamFpMode fp(fp_mode);
    // The team may be smaller than asked (OMP_THREAD_LIMIT, dynamic adjustment); the fixed splits are
    // by the actual size (row_units: the missing threads' shares are stolen), and a_packs (and b_pack)
    // have room for at least that many slices.
    gemm_worker(cfg, g, split_m, private_b, b_pack, b_slice, a_packs, a_slice, omp_get_thread_num(),
                omp_get_num_threads(), row_units ? &*row_units : nullptr, unit_rows);
  }
}

template <typename T>
void gemm_run(const gemm_args<T>& g, int nthreads) {
  if (g.M <= 0 || g.N <= 0) return;
  if (g.K <= 0 || g.alpha == T(0)) {
    if (g.bias)
      for (int64_t i = 0; i < g.M; ++i) std::copy(g.bias, g.bias + g.N, g.C + i * g.ldc);
    else
      scale_c(g.C, g.M, g.N, g.ldc, g.beta);
    if (g.addend) add_rows(g.C, g.ldc, g.addend, g.ld_addend, g.M, g.N);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (precision_slot().load(std::memory_order_relaxed) == static_cast<int>(MatmulPrecision::bf16)) {
      count_work(kWorkBf16, g.M, g.N, g.K);
      if (bf16_dot_slot().load(std::memory_order_relaxed) && gemm_active_isa() == gemm_isa::avx512) {
        static const kernel_config<float, uint32_t> pairs = make_bf16_pair_config();
        gemm_run_with(pairs, g, nthreads);
      } else {
        gemm_run_with(active_bf16_converting_config(), g, nthreads);
      }
      return;
    }
  }
  count_work(std::is_same_v<T, double> ? kWorkFp64 : kWorkFp32, g.M, g.N, g.K);
  gemm_run_with(active_config<T>(), g, nthreads);
}

#if POSGRAD_GEMM_X86
// One R x (NV * 16) block of a tile product (gemm_tile.h): op(B)'s row k is b + k * ldb, n <= NV * 16
// columns valid (masked loads read zeros beyond them, as the packed panels hold). The per-element
// arithmetic is ukr_avx512<float>'s.
template <int R, int NV>
POSGRAD_GEMM_AVX512 void tile_block_avx512(const float* a, int64_t lda, bool ta, const float* b, int64_t ldb, float* c,
                                           int64_t ldc, int64_t K, int64_t n, float alpha, float beta) {
  using V = avx512_vec<float>;
  constexpr int L = V::lanes;
  V::mask m[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) m[v] = V::first_n(n - v * L);
  __m512 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = V::zero();
  }
  for (int64_t k = 0; k < K; ++k) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = V::maskz_loadu(m[v], b + k * ldb + v * L);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 ar = V::set1(ta ? a[k * lda + r] : a[r * lda + k]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = V::fmadd(ar, bv[v], acc[r][v]);
    }
  }
  const __m512 va = V::set1(alpha), vb = V::set1(beta);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __m512 out =
          beta == 0.0f ? V::mul(va, acc[r][v]) : V::fmadd(va, acc[r][v], V::mul(vb, V::maskz_loadu(m[v], cr + v * L)));
      V::mask_storeu(cr + v * L, m[v], out);
    }
  }
}

// Rows [0, M) of one column block of NV vectors, R rows at a time, then the rest (fewer than R) in
// blocks of decreasing height: a block of few rows has few independent FMA chains, so one row at a time
// would wait on the FMA latency (4 rows left of a 64-row tile cost as much as 16 in full blocks).
template <int R, int NV>
void tile_rows_avx512(const float* A, int64_t lda, bool ta, const float* b, int64_t ldb, float* c, int64_t ldc,
                      int64_t M, int64_t K, int64_t n, float alpha, float beta) {
  int64_t i = 0;
  for (; i + R <= M; i += R)
    tile_block_avx512<R, NV>(ta ? A + i : A + i * lda, lda, ta, b, ldb, c + i * ldc, ldc, K, n, alpha, beta);
  if constexpr (R > 1)
    if (i < M)
      tile_rows_avx512<R - 1, NV>(ta ? A + i : A + i * lda, lda, ta, b, ldb, c + i * ldc, ldc, M - i, K, n, alpha,
                                  beta);
}

// The AVX2 counterpart: one R x (NV * 8) block, op(B)'s row k at b + k * ldb, with ukr_avx2<float>'s
// per-element arithmetic. Where the block is a whole NR = 16 columns (gemm()'s full micro-tile) it writes
// as ukr_avx2 does (alpha * acc, or fma(alpha, acc, beta * C)); the last, narrower block of a product
// is an edge tile in gemm() too, written there through write_tile_generic (alpha * acc + beta * C,
// separately rounded), so here as well. Lanes past n are read as zeros (masked loads), as the packed
// panels hold them.
template <int R, int NV, bool Full>
POSGRAD_GEMM_AVX2 void tile_block_avx2(const float* a, int64_t lda, bool ta, const float* b, int64_t ldb, float* c,
                                       int64_t ldc, int64_t K, int64_t n, float alpha, float beta) {
  using V = avx2_vec<float>;
  constexpr int L = V::lanes;
  constexpr int NR = NV * L;
  __m256i m[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    m[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - v * L)), lane);
  }
  __m256 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = V::zero();
  }
  for (int64_t k = 0; k < K; ++k) {
    __m256 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      bv[v] = Full ? V::loadu(b + k * ldb + v * L) : _mm256_maskload_ps(b + k * ldb + v * L, m[v]);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 ar = V::set1(ta ? a[k * lda + r] : a[r * lda + k]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = V::fmadd(ar, bv[v], acc[r][v]);
    }
  }
  if constexpr (Full) {
    const __m256 va = V::set1(alpha), vb = V::set1(beta);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      float* cr = c + r * ldc;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        const __m256 out =
            beta == 0.0f ? V::mul(va, acc[r][v]) : V::fmadd(va, acc[r][v], V::mul(vb, V::loadu(cr + v * L)));
        V::storeu(cr + v * L, out);
      }
    }
  } else {
    alignas(32) float tile[R * NR];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) V::storeu(tile + r * NR + v * L, acc[r][v]);
    }
    write_tile_generic<float, R, NR>(tile, c, ldc, R, n, alpha, beta);
  }
}

// Rows [0, M) of one 16-column block, R = 6 rows at a time (ukr_avx2's 6 x 16 tile), then the rest in
// blocks of decreasing height, as tile_rows_avx512.
template <int R, bool Full>
void tile_rows_avx2(const float* A, int64_t lda, bool ta, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t M,
                    int64_t K, int64_t n, float alpha, float beta) {
  int64_t i = 0;
  for (; i + R <= M; i += R)
    tile_block_avx2<R, 2, Full>(ta ? A + i : A + i * lda, lda, ta, b, ldb, c + i * ldc, ldc, K, n, alpha, beta);
  if constexpr (R > 1)
    if (i < M)
      tile_rows_avx2<R - 1, Full>(ta ? A + i : A + i * lda, lda, ta, b, ldb, c + i * ldc, ldc, M - i, K, n, alpha,
                                  beta);
}

// t (K, N) row-major = B^T for B stored (N, K) with row stride ldb: 8 x 8 blocks through registers
// (avx2_vec<float>::transpose), the edges element by element. Both gemm_tile paths use it (every
// AVX-512 CPU has AVX2). A copy: no arithmetic, so no bits change.
POSGRAD_GEMM_AVX2 void transpose_tile_avx2(const float* B, int64_t ldb, int64_t N, int64_t K, float* t) {
  using V = avx2_vec<float>;
  int64_t j = 0;
  for (; j + 8 <= N; j += 8) {
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
      V::reg r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) r[i] = V::loadu(B + (j + i) * ldb + k);
      V::transpose(r);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) V::storeu(t + (k + i) * N + j, r[i]);
    }
    for (; k < K; ++k)
      for (int64_t i = 0; i < 8; ++i) t[k * N + j + i] = B[(j + i) * ldb + k];
  }
  for (; j < N; ++j)
    for (int64_t k = 0; k < K; ++k) t[k * N + j] = B[j * ldb + k];
}
#endif

}  // namespace

// True when gemm_tile runs its own loops: see gemm_tile.h.
bool gemm_tile_applies(int64_t M, int64_t N, int64_t K, float alpha) {
#if POSGRAD_GEMM_X86
  const gemm_isa isa = gemm_active_isa();
  return M > 0 && N > 0 && K > 0 && K <= active_config<float>().kc && alpha != 0.0f &&
         (isa == gemm_isa::avx512 || isa == gemm_isa::avx2) &&
         precision_slot().load(std::memory_order_relaxed) == static_cast<int>(MatmulPrecision::fp32);
#else
  (void)M, (void)N, (void)K, (void)alpha;
  return false;
#endif
}

gemm_isa gemm_best_isa() {
  static const gemm_isa best = detect_isa();
  return best;
}

gemm_isa gemm_active_isa() { return static_cast<gemm_isa>(active_isa_slot().load(std::memory_order_relaxed)); }

gemm_isa gemm_set_isa(gemm_isa isa) {
  const int clamped = std::min(static_cast<int>(isa), static_cast<int>(gemm_best_isa()));
  active_isa_slot().store(std::max(clamped, 0), std::memory_order_relaxed);
  return gemm_active_isa();
}

const char* gemm_isa_name(gemm_isa isa) {
  switch (isa) {
    case gemm_isa::avx512: return "avx512";
    case gemm_isa::avx2: return "avx2";
    case gemm_isa::scalar: return "scalar";
  }
  return "unknown";
}

bool gemm_bf16_dot_available() {
  static const bool available = detect_bf16_dot();
  return available;
}

bool gemm_set_bf16_dot(bool use) {
  bf16_dot_slot().store(use && gemm_bf16_dot_available(), std::memory_order_relaxed);
  return bf16_dot_slot().load(std::memory_order_relaxed);
}

}  // namespace gemm_detail

template <typename T>
void gemm(T* C, const T* A, const T* B, int64_t M, int64_t N, int64_t K, int64_t ldc, int64_t lda, int64_t ldb,
          bool trans_a, bool trans_b, T alpha, T beta) {
  const gemm_detail::gemm_args<T> g{C, A, B, M, N, K, ldc, lda, ldb, trans_a, trans_b, alpha, beta};
  gemm_detail::gemm_run(g, gemm_detail::choose_threads(M, N, K));
}

template <typename T>
void gemm_bias(T* C, const T* A, const T* B, const T* bias, int64_t M, int64_t N, int64_t K, int64_t ldc, int64_t lda,
               int64_t ldb, bool trans_a, bool trans_b) {
  gemm_detail::gemm_args<T> g{C, A, B, M, N, K, ldc, lda, ldb, trans_a, trans_b, T(1), T(1)};
  g.bias = bias;
  gemm_detail::gemm_run(g, gemm_detail::choose_threads(M, N, K));
}

template <typename T>
void gemm_bias_add(T* C, const T* A, const T* B, const T* bias, const T* addend, int64_t ld_addend, int64_t M,
                   int64_t N, int64_t K, int64_t ldc, int64_t lda, int64_t ldb, bool trans_a, bool trans_b) {
  gemm_detail::gemm_args<T> g{C, A, B, M, N, K, ldc, lda, ldb, trans_a, trans_b, T(1), bias ? T(1) : T(0)};
  g.bias = bias;
  g.addend = addend;
  g.ld_addend = ld_addend;
  gemm_detail::gemm_run(g, gemm_detail::choose_threads(M, N, K));
}

template <typename T>
void gemm_batched(T* C, const T* A, const T* B, int64_t batch, int64_t M, int64_t N, int64_t K, int64_t ldc,
                  int64_t lda, int64_t ldb, int64_t stride_c, int64_t stride_a, int64_t stride_b, bool trans_a,
                  bool trans_b, T alpha, T beta) {
  using gemm_detail::gemm_args;
  if (batch <= 0 || M <= 0 || N <= 0) return;

  // A broadcast B with A and C stacked row-contiguously across the batch (a linear layer
  // applied to [batch, M, K]) is one (batch * M) x N product: B is packed once per KC step (or once
  // per thread, gemm_run_with's private_b) rather than once per matrix, and each C element sees
  // exactly the same operations as in the per-matrix loop.
  if (batch > 1 && stride_b == 0 && !trans_a && stride_a == M * lda && stride_c == M * ldc) {
    gemm(C, A, B, batch * M, N, K, ldc, lda, ldb, trans_a, trans_b, alpha, beta);
    return;
  }

  const gemm_args<T> first{C, A, B, M, N, K, ldc, lda, ldb, trans_a, trans_b, alpha, beta};
  const auto args = [&](int64_t b) {
    gemm_args<T> g = first;
    g.C += b * stride_c;
    g.A += b * stride_a;
    g.B += b * stride_b;
    return g;
  };

  // Small matrices: one matrix per thread beats splitting each small product. Either way each
  // matrix goes through the same blocked code, so results do not depend on the choice.
  const int batch_threads = gemm_detail::choose_threads(batch * M, N, K);
  if (batch_threads > 1 && batch >= batch_threads && M * N * K < gemm_detail::k_batch_parallel_work) {
    std::exception_ptr error;
    const unsigned fp_mode = caller_fp_mode();  // every thread runs in the caller's mode (denormals.h)
#pragma omp parallel for schedule(static) num_threads(batch_threads)
    for (int64_t b = 0; b < batch; ++b) {
      const TeamFpMode fp(fp_mode);
      try {
        gemm_detail::gemm_run(args(b), 1);
      } catch (...) {
#pragma omp critical(posgrad_gemm_batched_error)
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
    return;
  }
  const int per_matrix_threads = gemm_detail::choose_threads(M, N, K);
  for (int64_t b = 0; b < batch; ++b) gemm_detail::gemm_run(args(b), per_matrix_threads);
}

namespace gemm_detail {
namespace {

// gemm_tile's own loops, after op(B) was made row-major: b (K, N) with row stride ld.
#if POSGRAD_GEMM_X86
void tile_product(float* C, const float* A, int64_t lda, bool trans_a, const float* b, int64_t ld, int64_t M, int64_t N,
                  int64_t K, int64_t ldc, float alpha, float beta) {
  count_work(kWorkFp32, M, N, K);  // gemm_tile_applies: fp32 only
  if (gemm_active_isa() == gemm_isa::avx2) {
    for (int64_t j0 = 0; j0 < N; j0 += 16) {
      const int64_t n = std::min<int64_t>(16, N - j0);
      if (n == 16)
        tile_rows_avx2<6, true>(A, lda, trans_a, b + j0, ld, C + j0, ldc, M, K, n, alpha, beta);
      else
        tile_rows_avx2<6, false>(A, lda, trans_a, b + j0, ld, C + j0, ldc, M, K, n, alpha, beta);
    }
    return;
  }
  for (int64_t j0 = 0; j0 < N; j0 += 64) {
    const int64_t n = std::min<int64_t>(64, N - j0);
    const float* bj = b + j0;
    float* cj = C + j0;
    switch ((n + 15) / 16) {
      case 1: tile_rows_avx512<8, 1>(A, lda, trans_a, bj, ld, cj, ldc, M, K, n, alpha, beta); break;
      case 2: tile_rows_avx512<6, 2>(A, lda, trans_a, bj, ld, cj, ldc, M, K, n, alpha, beta); break;
      case 3: tile_rows_avx512<4, 3>(A, lda, trans_a, bj, ld, cj, ldc, M, K, n, alpha, beta); break;
      default: tile_rows_avx512<4, 4>(A, lda, trans_a, bj, ld, cj, ldc, M, K, n, alpha, beta); break;
    }
  }
}

// op(B) (K, N) row-major: B itself, or (trans_b) a transposed copy in a thread-local buffer.
const float* row_major_b(const float* B, int64_t ldb, bool trans_b, int64_t N, int64_t K, int64_t& ld) {
  ld = ldb;
  if (!trans_b) return B;
  thread_local std::vector<float> t;
  if (t.size() < static_cast<size_t>(K * N)) t.resize(static_cast<size_t>(K * N));
  transpose_tile_avx2(B, ldb, N, K, t.data());
  ld = N;
  return t.data();
}
#endif

}  // namespace
}  // namespace gemm_detail

template <>
void gemm_tile<float>(float* C, const float* A, const float* B, int64_t M, int64_t N, int64_t K, int64_t ldc,
                      int64_t lda, int64_t ldb, bool trans_a, bool trans_b, float alpha, float beta) {
#if POSGRAD_GEMM_X86
  if (gemm_detail::gemm_tile_applies(M, N, K, alpha)) {
    int64_t ld;
    const float* b = gemm_detail::row_major_b(B, ldb, trans_b, N, K, ld);
    gemm_detail::tile_product(C, A, lda, trans_a, b, ld, M, N, K, ldc, alpha, beta);
    return;
  }
#endif
  gemm<float>(C, A, B, M, N, K, ldc, lda, ldb, trans_a, trans_b, alpha, beta);
}

template <>
void gemm_tile_causal<float>(float* C, const float* A, const float* B, int64_t M, int64_t N, int64_t K, int64_t ldc,
                             int64_t lda, int64_t ldb, bool trans_a, bool trans_b, float alpha, float beta,
                             CausalSkip skip, int64_t diag) {
#if POSGRAD_GEMM_X86
  if (skip != CausalSkip::none && gemm_detail::gemm_tile_applies(M, N, K, alpha)) {
    int64_t ld;
    const float* b = gemm_detail::row_major_b(B, ldb, trans_b, N, K, ld);
    constexpr int64_t kGroup = 12;  // two AVX2 row blocks of 6, three AVX-512 blocks of 4
    for (int64_t r = 0; r < M; r += kGroup) {
      const int64_t rows = std::min(kGroup, M - r), last = r + rows - 1;
      int64_t n = N, k0 = 0, k1 = K;
      if (skip == CausalSkip::columns)
        n = std::clamp<int64_t>((last + diag + 1 + 15) / 16 * 16, 0, N);
      else if (skip == CausalSkip::terms_up_to)
        k1 = std::clamp<int64_t>(last + diag + 1, 0, K);
      else
        k0 = std::clamp<int64_t>(r - diag, 0, K);
      if (n == 0) continue;
      const float* a = trans_a ? A + k0 * lda + r : A + r * lda + k0;
      gemm_detail::tile_product(C + r * ldc, a, lda, trans_a, b + k0 * ld, ld, rows, n, std::max<int64_t>(k1 - k0, 0),
                                ldc, alpha, beta);
    }
    return;
  }
#endif
  (void)skip, (void)diag;
  gemm_tile<float>(C, A, B, M, N, K, ldc, lda, ldb, trans_a, trans_b, alpha, beta);
}

template <>
void gemm_tile<double>(double* C, const double* A, const double* B, int64_t M, int64_t N, int64_t K, int64_t ldc,
                       int64_t lda, int64_t ldb, bool trans_a, bool trans_b, double alpha, double beta) {
  gemm<double>(C, A, B, M, N, K, ldc, lda, ldb, trans_a, trans_b, alpha, beta);
}

template <>
void gemm_tile_causal<double>(double* C, const double* A, const double* B, int64_t M, int64_t N, int64_t K, int64_t ldc,
                              int64_t lda, int64_t ldb, bool trans_a, bool trans_b, double alpha, double beta,
                              CausalSkip, int64_t) {
  gemm<double>(C, A, B, M, N, K, ldc, lda, ldb, trans_a, trans_b, alpha, beta);
}

template void gemm<float>(float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                          bool, bool, float, float);
template void gemm<double>(double*, const double*, const double*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                           bool, bool, double, double);
template void gemm_bias<float>(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                               int64_t, int64_t, bool, bool);
template void gemm_bias<double>(double*, const double*, const double*, const double*, int64_t, int64_t, int64_t,
                                int64_t, int64_t, int64_t, bool, bool);
template void gemm_bias_add<float>(float*, const float*, const float*, const float*, const float*, int64_t, int64_t,
                                   int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool);
template void gemm_bias_add<double>(double*, const double*, const double*, const double*, const double*, int64_t,
                                    int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool);
template void gemm_batched<float>(float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                  int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, float, float);
template void gemm_batched<double>(double*, const double*, const double*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                   int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, double, double);

}  // namespace posgrad::kernels::cpu

namespace posgrad::kernels {

MatmulWork matmul_work() {
  namespace gd = cpu::gemm_detail;
  gd::WorkTally& t = gd::work_tally();
  std::lock_guard<std::mutex> lock(t.mutex);
  uint64_t f[gd::kWorkKinds];
  for (int i = 0; i < gd::kWorkKinds; ++i) {
    f[i] = t.retired[i];
    for (const gd::ThreadWork* w : t.live) f[i] += w->flops[i].load(std::memory_order_relaxed);
  }
  return MatmulWork{f[gd::kWorkFp32], f[gd::kWorkBf16], f[gd::kWorkFp64]};
}

const char* matmul_precision_name(MatmulPrecision p) { return p == MatmulPrecision::bf16 ? "bf16" : "fp32"; }

MatmulPrecision parse_matmul_precision(const std::string& text) {
  if (text == "fp32") return MatmulPrecision::fp32;
  if (text == "bf16") return MatmulPrecision::bf16;
  throw ValueError(detail::concat("unknown matmul precision '", text, "' (fp32|bf16)"));
}

void set_matmul_precision(MatmulPrecision p) {
  cpu::gemm_detail::precision_slot().store(static_cast<int>(p), std::memory_order_relaxed);
}

MatmulPrecision matmul_precision() {
  return static_cast<MatmulPrecision>(cpu::gemm_detail::precision_slot().load(std::memory_order_relaxed));
}

const char* matmul_bf16_path() {
  namespace gd = cpu::gemm_detail;
  return gd::bf16_dot_slot().load(std::memory_order_relaxed) && gd::gemm_active_isa() == gd::gemm_isa::avx512
             ? "avx512-bf16 (vdpbf16ps)"
             : "converting (bf16-rounded operands, float kernel)";
}

}  // namespace posgrad::kernels
