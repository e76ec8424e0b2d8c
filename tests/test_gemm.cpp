// test_gemm.cpp — correctness tests for the CPU GEMM (tensor/kernels/cpu/gemm.cpp).
//
// What it is: comparisons against a naive triple loop accumulated in long double, for float
// and double, every transpose combination, ragged sizes (edge tiles, K spanning several KC
// blocks, N spanning several NC blocks), strided sub-matrix views, alpha/beta (beta == 0 with
// NaN-filled C), batched products with broadcast operands, and bit-identical results for 1
// and 2 OpenMP threads. Every instruction set the CPU supports is exercised (AVX-512, AVX2,
// scalar) through the private gemm_set_isa hook.
// What it is not: a performance test (see bench/bench_gemm.cpp).

#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tensor/kernels/cpu/denormals.h"
#include "tensor/kernels/cpu/gemm_internal.h"
#include "tensor/kernels/cpu/gemm_tile.h"
#include "tensor/kernels/cpu/parallel.h"
#include "tensor/kernels/kernels.h"

namespace posgrad::kernels::cpu {
template <typename T>
void gemm(T* C, const T* A, const T* B, int64_t M, int64_t N, int64_t K, int64_t ldc, int64_t lda, int64_t ldb,
          bool trans_a, bool trans_b, T alpha, T beta);
template <typename T>
void gemm_bias(T* C, const T* A, const T* B, const T* bias, int64_t M, int64_t N, int64_t K, int64_t ldc, int64_t lda,
               int64_t ldb, bool trans_a, bool trans_b);
template <typename T>
void gemm_batched(T* C, const T* A, const T* B, int64_t batch, int64_t M, int64_t N, int64_t K, int64_t ldc,
                  int64_t lda, int64_t ldb, int64_t stride_c, int64_t stride_a, int64_t stride_b, bool trans_a,
                  bool trans_b, T alpha, T beta);
}  // namespace posgrad::kernels::cpu

namespace {

using posgrad::kernels::cpu::gemm;
using posgrad::kernels::cpu::gemm_batched;
using posgrad::kernels::cpu::gemm_bias;
namespace gd = posgrad::kernels::cpu::gemm_detail;

std::vector<gd::gemm_isa> supported_isas() {
  std::vector<gd::gemm_isa> isas;
  for (int i = 0; i <= static_cast<int>(gd::gemm_best_isa()); ++i) {
    isas.push_back(static_cast<gd::gemm_isa>(i));
  }
  return isas;
}

// Restores the best instruction set and the thread count when a test ends.
struct isa_guard {
  int threads = omp_get_max_threads();
  ~isa_guard() {
    gd::gemm_set_isa(gd::gemm_best_isa());
    omp_set_num_threads(threads);
  }
};

template <typename T>
std::vector<T> random_vector(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(rng));
  return v;
}

// Stored sizes of an operand whose op() is rows x cols.
struct layout {
  int64_t rows, cols, ld;
  std::size_t elems() const { return static_cast<std::size_t>(rows * ld); }
};

layout stored(int64_t op_rows, int64_t op_cols, bool trans, int64_t pad) {
  const int64_t r = trans ? op_cols : op_rows;
  const int64_t c = trans ? op_rows : op_cols;
  return {r, c, c + pad};
}

template <typename T>
T op_at(const std::vector<T>& X, int64_t ld, bool trans, int64_t i, int64_t j) {
  return trans ? X[j * ld + i] : X[i * ld + j];
}

struct gemm_case {
  int64_t M, N, K;
  bool ta, tb;
  int64_t pad_a = 0, pad_b = 0, pad_c = 0;
  double alpha = 1.0, beta = 0.0;
};

std::string describe(const gemm_case& c) {
  return "M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
         " ta=" + std::to_string(c.ta) + " tb=" + std::to_string(c.tb) + " pads=" + std::to_string(c.pad_a) + "," +
         std::to_string(c.pad_b) + "," + std::to_string(c.pad_c) + " alpha=" + std::to_string(c.alpha) +
         " beta=" + std::to_string(c.beta) + " isa=" + gd::gemm_isa_name(gd::gemm_active_isa());
}

// Runs one case against the long-double reference. Entries of C outside the logical M x N
// (the ldc padding) must be left untouched. With beta == 0 C starts as NaN.
// x rounded to bf16 (nearest, ties to even; denormals to a zero of their sign; NaN kept; beyond the
// range to infinity), written here from the definition for the bf16-precision reference.
float to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7F800000u) == 0) {
    u &= 0x80000000u;
  } else if ((u & 0x7FFFFFFFu) <= 0x7F800000u) {
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  }
  std::memcpy(&x, &u, 4);
  return x;
}

template <typename T>
void check_case(const gemm_case& c, std::mt19937& rng, bool bf16 = false) {
  const layout la = stored(c.M, c.K, c.ta, c.pad_a);
  const layout lb = stored(c.K, c.N, c.tb, c.pad_b);
  const int64_t ldc = c.N + c.pad_c;
  const auto A = random_vector<T>(la.elems(), rng);
  const auto B = random_vector<T>(lb.elems(), rng);
  std::vector<T> C0 = random_vector<T>(static_cast<std::size_t>(c.M * ldc), rng);
  if (c.beta == 0.0) {
    for (int64_t i = 0; i < c.M; ++i) {
      for (int64_t j = 0; j < c.N; ++j) C0[i * ldc + j] = std::numeric_limits<T>::quiet_NaN();
    }
  }
  std::vector<T> C = C0;
  const T alpha = static_cast<T>(c.alpha), beta = static_cast<T>(c.beta);
  gemm<T>(C.data(), A.data(), B.data(), c.M, c.N, c.K, ldc, la.ld, lb.ld, c.ta, c.tb, alpha, beta);

  const long double eps = std::numeric_limits<T>::epsilon();
  int64_t bad = 0;
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const T got = C[i * ldc + j];
      if (j >= c.N) {  // padding: untouched, bit for bit
        if (std::memcmp(&got, &C0[i * ldc + j], sizeof(T)) != 0) ++bad;
        continue;
      }
      long double sum = 0, mag = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        T a = op_at(A, la.ld, c.ta, i, k), b = op_at(B, lb.ld, c.tb, k, j);
        if (bf16)
          a = static_cast<T>(to_bf16(static_cast<float>(a))), b = static_cast<T>(to_bf16(static_cast<float>(b)));
        const long double p = static_cast<long double>(a) * b;
        sum += p;
        mag += std::fabs(p);
      }
      long double ref = static_cast<long double>(alpha) * sum;
      long double scale = std::fabs(static_cast<long double>(alpha)) * mag;
      if (beta != T(0)) {
        ref += static_cast<long double>(beta) * C0[i * ldc + j];
        scale += std::fabs(static_cast<long double>(beta) * C0[i * ldc + j]);
      }
      // Worst-case bound of a sequential (blocked) dot product, plus a few roundings
      // for alpha, beta and the final add.
      const long double tol = 2 * (c.K + 4) * eps * scale + 1e-30L;
      if (!(std::fabs(static_cast<long double>(got) - ref) <= tol)) {
        if (bad < 5) {
          ADD_FAILURE() << describe(c) << " at (" << i << "," << j << "): got " << got << " want "
                        << static_cast<double>(ref) << " tol " << static_cast<double>(tol);
        }
        ++bad;
      }
    }
  }
  EXPECT_EQ(bad, 0) << describe(c);
}

template <typename T>
void sweep_shapes() {
  isa_guard guard;
  std::mt19937 rng(1234);
  const int64_t dims[][3] = {{1, 1, 1},   {3, 7, 13},   {17, 31, 33},  {13, 65, 7},  {65, 17, 129}, {31, 129, 3},
                             {33, 1, 65}, {1, 257, 31}, {129, 33, 17}, {7, 13, 257}, {257, 65, 33}, {67, 97, 150}};
  for (const auto isa : supported_isas()) {
    gd::gemm_set_isa(isa);
    for (const auto& d : dims) {
      for (int t = 0; t < 4; ++t) {
        check_case<T>({d[0], d[1], d[2], (t & 1) != 0, (t & 2) != 0}, rng);
      }
    }
  }
}

TEST(Gemm, ShapesAndTransposesFloat) { sweep_shapes<float>(); }
TEST(Gemm, ShapesAndTransposesDouble) { sweep_shapes<double>(); }

template <typename T>
void sweep_views_and_scalars() {
  isa_guard guard;
  std::mt19937 rng(99);
  for (const auto isa : supported_isas()) {
    gd::gemm_set_isa(isa);
    for (int t = 0; t < 4; ++t) {
      const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
      // Sub-matrix views: row strides larger than the logical widths.
      check_case<T>({37, 45, 29, ta, tb, 5, 11, 3}, rng);
      check_case<T>({12, 32, 16, ta, tb, 1, 1, 1}, rng);
      // alpha / beta combinations; beta == 0 starts from NaN.
      check_case<T>({29, 50, 41, ta, tb, 2, 0, 7, 0.5, 0.0}, rng);
      check_case<T>({29, 50, 41, ta, tb, 0, 3, 0, -1.5, 1.0}, rng);
      check_case<T>({29, 50, 41, ta, tb, 0, 0, 0, 2.0, -0.75}, rng);
      // K spanning several KC blocks with beta != 0 (beta applied once).
      check_case<T>({19, 40, 700, ta, tb, 3, 2, 1, 1.0, 0.5}, rng);
    }
  }
}

TEST(Gemm, ViewsAlphaBetaFloat) { sweep_views_and_scalars<float>(); }
TEST(Gemm, ViewsAlphaBetaDouble) { sweep_views_and_scalars<double>(); }

template <typename T>
void degenerate_sizes() {
  std::mt19937 rng(5);
  // K == 0: C = beta * C, and with beta == 0 NaN is overwritten by zero.
  check_case<T>({5, 7, 0, false, false, 0, 0, 2, 1.0, 0.0}, rng);
  check_case<T>({5, 7, 0, true, true, 0, 0, 0, 1.0, 0.5}, rng);
  // M == 0 / N == 0: nothing is touched (check_case verifies nothing is written).
  check_case<T>({0, 7, 5, false, false}, rng);
  check_case<T>({6, 0, 5, false, true, 0, 0, 3}, rng);
  // alpha == 0: A and B are not used, C = beta * C.
  std::vector<T> C(6, T(2));
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> A(6, nan), B(6, nan);
  gemm<T>(C.data(), A.data(), B.data(), 2, 3, 2, 3, 2, 3, false, false, T(0), T(0.5));
  for (const T v : C) EXPECT_EQ(v, T(1));
}

TEST(Gemm, DegenerateSizesFloat) { degenerate_sizes<float>(); }
TEST(Gemm, DegenerateSizesDouble) { degenerate_sizes<double>(); }

// Same inputs, 1 vs 2 OpenMP threads: results must match bit for bit (K is never split and
// the blocking does not depend on the team size). Covers both work splits (over M tiles and,
// for a short M, over N panels), each thread packing all of B (a tall M), several KC blocks and
// more than one NC block.
template <typename T>
void thread_count_invariance() {
  isa_guard guard;
  std::mt19937 rng(2024);
  // Every case does >= 2^18 multiply-adds, so two threads are really used.
  const int64_t dims[][3] = {{131, 67, 65},     // split over M tiles, edge tiles
                             {5, 600, 300},     // one M tile: split over N panels
                             {26, 300, 600},    // K > KC: several k blocks
                             {3, 4500, 40},     // N > NC: several column blocks
                             {100, 64, 520},    // M < 192 per thread, K > 2 KC: a shared B
                             {400, 70, 300},    // M >= 192 per thread: each packs all of B
                             {800, 33, 520},    // the same over three k blocks and an edge panel
                             {128, 512, 600}};  // 11 M tiles of 12: a large product split over N panels
  for (const auto isa : supported_isas()) {
    gd::gemm_set_isa(isa);
    for (const auto& d : dims) {
      for (int t = 0; t < 4; ++t) {
        const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
        const int64_t M = d[0], N = d[1], K = d[2];
        const auto A = random_vector<T>(static_cast<std::size_t>(M * K), rng);
        const auto B = random_vector<T>(static_cast<std::size_t>(K * N), rng);
        const auto C0 = random_vector<T>(static_cast<std::size_t>(M * N), rng);
        std::vector<T> c1 = C0, c2 = C0;
        const int64_t lda = ta ? M : K, ldb = tb ? K : N;
        omp_set_num_threads(1);
        gemm<T>(c1.data(), A.data(), B.data(), M, N, K, N, lda, ldb, ta, tb, T(1.25), T(0.5));
        omp_set_num_threads(2);
        gemm<T>(c2.data(), A.data(), B.data(), M, N, K, N, lda, ldb, ta, tb, T(1.25), T(0.5));
        EXPECT_EQ(std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(T)), 0)
            << "M=" << M << " N=" << N << " K=" << K << " ta=" << ta << " tb=" << tb
            << " isa=" << gd::gemm_isa_name(isa);
      }
    }
  }
}

TEST(Gemm, ThreadCountInvarianceFloat) { thread_count_invariance<float>(); }
TEST(Gemm, ThreadCountInvarianceDouble) { thread_count_invariance<double>(); }

// The products of one KC x NC step deal their rows in units with stealing (parallel.h): which thread
// makes which tile then depends on timing. Teams of 3 and 4 threads on a machine with fewer cores
// are descheduled at random, so threads steal; every run must still give the bits of one thread.
TEST(Gemm, RowStealingKeepsTheBitsOfOneThread) {
  isa_guard guard;
  std::mt19937 rng(7);
  const int64_t dims[][3] = {{768, 128, 128},   // the 128-wide model's projections: each thread packs all of B
                             {768, 512, 128},   // its MLP
                             {131, 67, 65},     // shared B, edge tiles
                             {1000, 40, 300},   // 84 row tiles: units of 5 or fewer
                             {4608, 40, 200}};  // 384 row tiles: units capped at a whole MC block
  const int saved = omp_get_max_threads();
  for (const auto isa : supported_isas()) {
    gd::gemm_set_isa(isa);
    for (const auto& d : dims) {
      const int64_t M = d[0], N = d[1], K = d[2];
      const auto A = random_vector<float>(static_cast<std::size_t>(M * K), rng);
      const auto B = random_vector<float>(static_cast<std::size_t>(K * N), rng);
      std::vector<float> ref(static_cast<std::size_t>(M * N)), out(ref.size());
      omp_set_num_threads(1);
      gemm<float>(ref.data(), A.data(), B.data(), M, N, K, N, K, K, false, true, 1.0f, 0.0f);
      for (int threads : {2, 3, 4})
        for (int rep = 0; rep < 3; ++rep) {
          omp_set_num_threads(threads);
          std::fill(out.begin(), out.end(), std::numeric_limits<float>::quiet_NaN());
          gemm<float>(out.data(), A.data(), B.data(), M, N, K, N, K, K, false, true, 1.0f, 0.0f);
          EXPECT_EQ(std::memcmp(ref.data(), out.data(), ref.size() * sizeof(float)), 0)
              << "M=" << M << " N=" << N << " K=" << K << " threads=" << threads << " isa=" << gd::gemm_isa_name(isa);
        }
    }
  }
  omp_set_num_threads(saved);
}

// The K blocks: ceil(K / KC) of them, as even as multiples of 16 allow (768 = 384 + 384 under the
// AVX-512 float KC of 512, not 512 + 256). A product equals, bit for bit, the chain of one-block
// products over the known blocks: the first with the call's beta, the others accumulated with beta = 1.
template <typename T>
void k_blocks_case(int64_t M, int64_t N, int64_t K, const std::vector<int64_t>& blocks, bool ta, bool tb,
                   std::mt19937& rng, const char* isa) {
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  const auto A = random_vector<T>(static_cast<std::size_t>(M * K), rng);
  const auto B = random_vector<T>(static_cast<std::size_t>(K * N), rng);
  const auto C0 = random_vector<T>(static_cast<std::size_t>(M * N), rng);
  std::vector<T> whole = C0, chain = C0;
  gemm<T>(whole.data(), A.data(), B.data(), M, N, K, N, lda, ldb, ta, tb, T(1.25), T(0.5));
  int64_t pc = 0;
  for (const int64_t kc : blocks) {
    const T* a = ta ? A.data() + pc * lda : A.data() + pc;
    const T* b = tb ? B.data() + pc : B.data() + pc * ldb;
    gemm<T>(chain.data(), a, b, M, N, kc, N, lda, ldb, ta, tb, T(1.25), pc == 0 ? T(0.5) : T(1));
    pc += kc;
  }
  ASSERT_EQ(pc, K);
  EXPECT_EQ(std::memcmp(whole.data(), chain.data(), whole.size() * sizeof(T)), 0)
      << "M=" << M << " N=" << N << " K=" << K << " ta=" << ta << " tb=" << tb << " isa=" << isa;
}

TEST(Gemm, KBlocksAreEvenMultiplesOf16) {
  isa_guard guard;
  std::mt19937 rng(12);
  const int saved = omp_get_max_threads();
  for (const int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (const auto isa : supported_isas()) {
      gd::gemm_set_isa(isa);
      const char* name = gd::gemm_isa_name(isa);
      for (int t = 0; t < 4; ++t) {
        const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
        if (isa == gd::gemm_isa::avx512) {  // float KC 512, double KC 256
          k_blocks_case<float>(40, 50, 768, {384, 384}, ta, tb, rng, name);
          k_blocks_case<float>(40, 50, 1100, {368, 368, 364}, ta, tb, rng, name);
          k_blocks_case<float>(40, 50, 520, {272, 248}, ta, tb, rng, name);
          k_blocks_case<float>(40, 50, 1024, {512, 512}, ta, tb, rng, name);
          k_blocks_case<double>(40, 50, 600, {208, 208, 184}, ta, tb, rng, name);
        } else {  // KC 256 for float and double
          k_blocks_case<float>(40, 50, 600, {208, 208, 184}, ta, tb, rng, name);
          k_blocks_case<double>(40, 50, 300, {160, 140}, ta, tb, rng, name);
        }
      }
    }
  }
  omp_set_num_threads(saved);
}

// split_k: the weight gradient of a narrow layer (few rows and columns, K = the tokens, alpha = 1) deals
// its K blocks to the threads and folds their partial sums into C in block order: the bits of one
// thread, with beta = 0, beta != 0 and the bias row, in every team size and on every path (bf16 too).
template <typename T>
void split_k_cases(std::mt19937& rng, const std::string& where) {
  const int64_t dims[][4] = {{128, 128, 768, 1},  // 2 blocks, TN: a 128-wide model's projection on 768 tokens
                             {65, 128, 768, 1},   // an edge row tile
                             {128, 512, 768, 1},  // the MLP's second weight
                             {40, 30, 2000, 0},   // 4 blocks (AVX-512 float), NN
                             {50, 20, 1100, 2}};  // 3 blocks, NT
  const int saved = omp_get_max_threads();
  for (const auto& d : dims) {
    const int64_t M = d[0], N = d[1], K = d[2];
    const bool ta = (d[3] & 1) != 0, tb = (d[3] & 2) != 0;
    const int64_t lda = ta ? M : K, ldb = tb ? K : N, ldc = N + 5;
    const auto A = random_vector<T>(static_cast<std::size_t>(M * K), rng);
    const auto B = random_vector<T>(static_cast<std::size_t>(K * N), rng);
    const auto C0 = random_vector<T>(static_cast<std::size_t>(M * ldc), rng);
    const auto bias = random_vector<T>(static_cast<std::size_t>(N), rng);
    for (const T beta : {T(0), T(0.5)}) {
      for (const bool with_bias : {false, true}) {
        if (with_bias && beta != T(0)) continue;
        const auto run = [&](int threads) {
          omp_set_num_threads(threads);
          std::vector<T> c = C0;
          if (with_bias)
            gemm_bias<T>(c.data(), A.data(), B.data(), bias.data(), M, N, K, ldc, lda, ldb, ta, tb);
          else
            gemm<T>(c.data(), A.data(), B.data(), M, N, K, ldc, lda, ldb, ta, tb, T(1), beta);
          return c;
        };
        const std::vector<T> ref = run(1);
        for (const int threads : {2, 3, 4})
          for (int rep = 0; rep < 2; ++rep) {
            const std::vector<T> got = run(threads);
            EXPECT_EQ(std::memcmp(ref.data(), got.data(), ref.size() * sizeof(T)), 0)
                << "M=" << M << " N=" << N << " K=" << K << " beta=" << beta << " bias=" << with_bias
                << " threads=" << threads << " " << where;
          }
      }
    }
  }
  omp_set_num_threads(saved);
}

TEST(Gemm, SplitKKeepsTheBitsOfOneThread) {
  isa_guard guard;
  std::mt19937 rng(5);
  for (const auto isa : supported_isas()) {
    gd::gemm_set_isa(isa);
    split_k_cases<float>(rng, gd::gemm_isa_name(isa));
    split_k_cases<double>(rng, gd::gemm_isa_name(isa));
  }
}

// parallel_chunks: every item in exactly one chunk, chunks at multiples of `align`, whatever the
// team and the timing; the calling thread alone below serial_max and inside a parallel region.
TEST(ParallelChunks, EveryItemOnceAtAlignedBoundaries) {
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3, 4}) {
    omp_set_num_threads(threads);
    for (int64_t n : {int64_t(1), int64_t(17), int64_t(4096), int64_t(100003)})
      for (int64_t grain : {int64_t(1), int64_t(64), int64_t(5000)})
        for (int64_t align : {int64_t(1), int64_t(16)}) {
          std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
          std::atomic<int> calls{0}, misaligned{0};
          posgrad::kernels::cpu::parallel_chunks(
              n, grain, 0,
              [&](int64_t b, int64_t e) {
                ++calls;
                if (b % align != 0 || (e % align != 0 && e != n) || e <= b) ++misaligned;
                for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
              },
              align);
          int64_t wrong = 0;
          for (auto& h : hits) wrong += h.load() != 1;
          EXPECT_EQ(wrong, 0) << "n=" << n << " grain=" << grain << " align=" << align << " threads=" << threads;
          EXPECT_EQ(misaligned.load(), 0) << "n=" << n << " grain=" << grain << " align=" << align;
          // Chunks of at least `grain` (the last may be shorter): never more than ceil(n / grain) calls.
          EXPECT_LE(calls.load(), (n + grain - 1) / grain);
        }
  }
  omp_set_num_threads(2);
  std::vector<std::pair<int64_t, int64_t>> seen;
  posgrad::kernels::cpu::parallel_chunks(1000, 1, 1000,
                                         [&](int64_t b, int64_t e) { seen.emplace_back(b, e); });  // n <= serial_max
  EXPECT_EQ(seen, (std::vector<std::pair<int64_t, int64_t>>{{0, 1000}}));
  int inner_calls = 0;
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    posgrad::kernels::cpu::parallel_chunks(1000, 1, 0, [&](int64_t b, int64_t e) {
      ++inner_calls;
      EXPECT_EQ(b, 0);
      EXPECT_EQ(e, 1000);
    });
  }
  EXPECT_EQ(inner_calls, 1);
  omp_set_num_threads(saved);
}

// Shares dealt for more threads than the team has (OpenMP may give a smaller team than asked): the
// threads that did start take the missing ones' shares from the back; every chunk once.
TEST(ParallelChunks, SharesWithoutAThreadAreTakenByTheOthers) {
  for (int team : {1, 2}) {
    posgrad::kernels::cpu::parallel_detail::StealShares shares(37, 4);
    std::vector<std::atomic<int>> hits(37);
#pragma omp parallel num_threads(team)
    {
      int64_t c;
      while (shares.next(omp_get_thread_num(), c)) ++hits[static_cast<size_t>(c)];
    }
    for (size_t i = 0; i < hits.size(); ++i) EXPECT_EQ(hits[i].load(), 1) << "chunk " << i << " team " << team;
  }
}

// A caller's floating-point mode holds on every thread that works for it (denormals.h). Products of
// 1e-20 by 1e-20 are subnormal: they flush to 0 under FlushDenormals and keep their value otherwise.
// libgomp starts a team's threads the first time a team reaches them, as copies of the thread opening
// the region, mode included, and they keep that mode. So the threads of a 6-thread team are started
// here while flushing (first, before any other team of 6 in this process): a caller that does not
// flush must still get unflushed results from all of them (without TeamFpMode their rows came out 0),
// and a flushing caller's product flushes everywhere (it runs on the caller alone, starting no thread
// in its mode).
TEST(Gemm, ATeamRunsWithTheCallersFlushToZero) {
#ifndef POSGRAD_HAS_MXCSR
  GTEST_SKIP() << "no MXCSR on this target";
#else
  using posgrad::kernels::cpu::FlushDenormals;
  isa_guard guard;
  const int saved = omp_get_max_threads();
  std::vector<unsigned> started(6, 0);
  {
    const FlushDenormals ftz;
#pragma omp parallel num_threads(6)
    started[static_cast<size_t>(omp_get_thread_num())] = _mm_getcsr();
  }
  const int64_t M = 3072, N = 256, K = 128;  // milliseconds of work: every thread takes rows
  const std::vector<float> A(static_cast<size_t>(M * K), 1e-20f), B(static_cast<size_t>(K * N), 1e-20f);
  std::vector<float> c(static_cast<size_t>(M * N));
  auto count = [&](bool zero) {
    int64_t k = 0;
    for (float v : c) k += (v == 0.0f) == zero;
    return k;
  };
  for (const auto isa : supported_isas()) {
    gd::gemm_set_isa(isa);
    omp_set_num_threads(6);
    std::fill(c.begin(), c.end(), 0.0f);
    gemm<float>(c.data(), A.data(), B.data(), M, N, K, N, K, N, false, false, 1.0f, 0.0f);
    EXPECT_EQ(count(true), 0) << "caller not flushing: entries 0, isa=" << gd::gemm_isa_name(isa);
    EXPECT_GT(c[0], 0.0f);  // 128 * 1e-40
    {
      const FlushDenormals ftz;
      std::fill(c.begin(), c.end(), 1.0f);
      gemm<float>(c.data(), A.data(), B.data(), M, N, K, N, K, N, false, false, 1.0f, 0.0f);
    }
    EXPECT_EQ(count(false), 0) << "flushing caller: entries not 0, isa=" << gd::gemm_isa_name(isa);
  }
  // A flushing caller starts no threads: threads 6 and 7, first reached by a later plain region, do not
  // flush.
  omp_set_num_threads(8);
  {
    const FlushDenormals ftz;
    gemm<float>(c.data(), A.data(), B.data(), M, N, K, N, K, N, false, false, 1.0f, 0.0f);
  }
  std::vector<unsigned> later(8, 0);
#pragma omp parallel num_threads(8)
  later[static_cast<size_t>(omp_get_thread_num())] = _mm_getcsr();
  for (size_t t = 6; t < later.size(); ++t) EXPECT_EQ(later[t] & posgrad::kernels::cpu::kFtz, 0u) << "thread " << t;
  std::atomic<int> chunks{0}, flushing{0};
  auto chunk = [&](int64_t, int64_t) {
    ++chunks;
    flushing += (_mm_getcsr() & posgrad::kernels::cpu::kFtz) != 0;
  };
  posgrad::kernels::cpu::parallel_chunks(6000, 1, 0, chunk);  // on the threads started while flushing
  EXPECT_GT(chunks.load(), 1);
  EXPECT_EQ(flushing.load(), 0);
  chunks = 0;
  flushing = 0;
  {
    const FlushDenormals ftz;  // a flushing caller: one chunk, on itself
    posgrad::kernels::cpu::parallel_chunks(6000, 1, 0, chunk);
  }
  EXPECT_EQ(chunks.load(), 1);
  EXPECT_EQ(flushing.load(), 1);
  omp_set_num_threads(saved);
  // What made the first case a test: the team's other threads had started in the flushing mode.
  int started_flushing = 0;
  for (size_t t = 1; t < started.size(); ++t) started_flushing += (started[t] & posgrad::kernels::cpu::kFtz) != 0;
  if (started_flushing == 0) GTEST_SKIP() << "this process's threads had started before the test";
#endif
}

// A thread that runs slow loses the tail of its share to the other: 64 items in chunks of 4, with
// thread 1 sleeping 20 ms per chunk. Thread 0 finishes its half (items 0..31) at once and then takes
// thread 1's chunks from the back, so it runs most of the 64 items (a static split gives it 32).
TEST(ParallelChunks, AThreadDoneEarlyTakesTheTailOfASlowOne) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  std::vector<int> runner(64, -1);
  std::vector<int64_t> order0;  // the first item of each chunk thread 0 ran, in the order it ran them
  posgrad::kernels::cpu::parallel_chunks(64, 1, 0, [&](int64_t b, int64_t e) {
    const int t = omp_get_thread_num();
    if (t == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (t == 0) order0.push_back(b);
    for (int64_t i = b; i < e; ++i) runner[static_cast<size_t>(i)] = t;
  });
  omp_set_num_threads(saved);
  int by0 = 0;
  for (int r : runner) {
    EXPECT_NE(r, -1);
    by0 += r == 0;
  }
  if (omp_get_num_procs() < 2) GTEST_SKIP() << "one processor: the two threads take turns";
  EXPECT_GE(by0, 48) << "thread 0 ran " << by0 << " of 64 items";
  // Its own share from the front (items 0..31, in order), then thread 1's from the back (descending).
  for (int i = 0; i < 32; ++i) EXPECT_EQ(runner[static_cast<size_t>(i)], 0) << i;
  ASSERT_GE(order0.size(), size_t(9));
  for (size_t k = 0; k < 8; ++k) EXPECT_EQ(order0[k], int64_t(4 * k)) << k;
  EXPECT_EQ(order0[8], 60);
  for (size_t k = 9; k < order0.size(); ++k) EXPECT_EQ(order0[k], order0[k - 1] - 4) << k;
}

// gemm_bias (the linear layer's product with its bias) gives the bits of copying the bias into every
// row and accumulating the product onto it, for every ISA, 1 and 2 threads, both work splits, each
// thread packing all of B, several KC and NC blocks, edge tiles, a padded ldc and K == 0; C starts as
// NaN, which it must not read.
template <typename T>
void bias_row_case(int64_t M, int64_t N, int64_t K, bool ta, bool tb, std::mt19937& rng, const std::string& where) {
  const int64_t lda = ta ? M : K, ldb = tb ? K : N, ldc = N + 3;
  const auto A = random_vector<T>(static_cast<std::size_t>(std::max<int64_t>(1, M * K)), rng);
  const auto B = random_vector<T>(static_cast<std::size_t>(std::max<int64_t>(1, K * N)), rng);
  const auto bias = random_vector<T>(static_cast<std::size_t>(N), rng);
  std::vector<T> want(static_cast<std::size_t>(M * ldc), T(-7));
  for (int64_t i = 0; i < M; ++i) std::copy(bias.begin(), bias.end(), want.begin() + i * ldc);
  gemm<T>(want.data(), A.data(), B.data(), M, N, K, ldc, lda, ldb, ta, tb, T(1), T(1));
  for (const int threads : {1, 2}) {
    omp_set_num_threads(threads);
    std::vector<T> got(want.size(), T(-7));
    for (int64_t i = 0; i < M; ++i) std::fill(got.begin() + i * ldc, got.begin() + i * ldc + N, std::nan(""));
    gemm_bias<T>(got.data(), A.data(), B.data(), bias.data(), M, N, K, ldc, lda, ldb, ta, tb);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)), 0)
        << "M=" << M << " N=" << N << " K=" << K << " ta=" << ta << " tb=" << tb << " threads=" << threads << " "
        << where;
  }
}

// gemm_bias_add: the bits of gemm_bias (or gemm with beta = 0 without a bias) followed by the add op,
// addend + C, whichever way the product is shared out (rows, columns, split_k, one thread) and for an
// empty K; the addend is read, never written, and C's padding is left alone.
using posgrad::kernels::cpu::gemm_bias_add;
template <typename T>
void bias_add_case(int64_t M, int64_t N, int64_t K, bool ta, bool tb, bool with_bias, std::mt19937& rng,
                   const std::string& where) {
  const int64_t lda = ta ? M : K, ldb = tb ? K : N, ldc = N + 3, ldr = N + 7;
  const auto A = random_vector<T>(static_cast<std::size_t>(std::max<int64_t>(1, M * K)), rng);
  const auto B = random_vector<T>(static_cast<std::size_t>(std::max<int64_t>(1, K * N)), rng);
  const auto bias = random_vector<T>(static_cast<std::size_t>(N), rng);
  const auto addend = random_vector<T>(static_cast<std::size_t>(M * ldr), rng);
  const auto addend_before = addend;
  for (const int threads : {1, 2}) {
    omp_set_num_threads(threads);
    std::vector<T> want(static_cast<std::size_t>(M * ldc), T(-7)), got(want.size(), T(-7));
    if (with_bias)
      gemm_bias<T>(want.data(), A.data(), B.data(), bias.data(), M, N, K, ldc, lda, ldb, ta, tb);
    else
      gemm<T>(want.data(), A.data(), B.data(), M, N, K, ldc, lda, ldb, ta, tb, T(1), T(0));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) want[i * ldc + j] = addend[i * ldr + j] + want[i * ldc + j];
    for (int64_t i = 0; i < M; ++i) std::fill(got.begin() + i * ldc, got.begin() + i * ldc + N, std::nan(""));
    gemm_bias_add<T>(got.data(), A.data(), B.data(), with_bias ? bias.data() : nullptr, addend.data(), ldr, M, N, K,
                     ldc, lda, ldb, ta, tb);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)), 0)
        << "M=" << M << " N=" << N << " K=" << K << " ta=" << ta << " tb=" << tb << " bias=" << with_bias
        << " threads=" << threads << " " << where;
    EXPECT_EQ(addend, addend_before);
  }
}

template <typename T>
void bias_add_sweep(std::mt19937& rng, const std::string& where) {
  const int64_t dims[][4] = {{131, 67, 65, 0},   {5, 600, 300, 1},  {26, 300, 600, 2}, {128, 128, 768, 1},
                             {768, 128, 128, 2}, {400, 70, 600, 0}, {7, 9, 0, 0},      {1, 1, 1, 3}};
  for (const auto& d : dims)
    for (const bool with_bias : {true, false})
      bias_add_case<T>(d[0], d[1], d[2], (d[3] & 1) != 0, (d[3] & 2) != 0, with_bias, rng, where);
}

TEST(Gemm, BiasAddEqualsTheProductThenTheAdd) {
  isa_guard guard;
  std::mt19937 rng(41);
  const int saved = omp_get_max_threads();
  for (const auto isa : supported_isas()) {
    gd::gemm_set_isa(isa);
    bias_add_sweep<float>(rng, gd::gemm_isa_name(isa));
    bias_add_sweep<double>(rng, gd::gemm_isa_name(isa));
  }
  omp_set_num_threads(saved);
}

template <typename T>
void bias_row_sweep() {
  isa_guard guard;
  std::mt19937 rng(77);
  const int64_t dims[][3] = {{131, 67, 65},  {5, 600, 300},  {26, 300, 600}, {3, 4500, 40},
                             {100, 64, 520}, {400, 70, 300}, {7, 9, 0},      {1, 1, 1}};
  for (const auto isa : supported_isas()) {
    gd::gemm_set_isa(isa);
    for (const auto& d : dims)
      for (int t = 0; t < 4; ++t)
        bias_row_case<T>(d[0], d[1], d[2], (t & 1) != 0, (t & 2) != 0, rng, gd::gemm_isa_name(isa));
  }
}

TEST(Gemm, BiasRowEqualsCopyThenAccumulateFloat) { bias_row_sweep<float>(); }
TEST(Gemm, BiasRowEqualsCopyThenAccumulateDouble) { bias_row_sweep<double>(); }

// Batched products against per-matrix gemm calls (which test_case validated): all strides,
// broadcast A or B (stride 0), the stacked-A fast path, and small matrices (batch-parallel).
template <typename T>
void batched_case(int64_t batch, int64_t M, int64_t N, int64_t K, bool ta, bool tb, bool broadcast_a, bool broadcast_b,
                  T beta, std::mt19937& rng) {
  const int64_t lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 2, ldc = N + 3;
  const int64_t sa = broadcast_a ? 0 : (ta ? K : M) * lda;
  const int64_t sb = broadcast_b ? 0 : (tb ? N : K) * ldb;
  const int64_t sc = M * ldc;
  const auto A = random_vector<T>(static_cast<std::size_t>((broadcast_a ? 1 : batch) * (ta ? K : M) * lda), rng);
  const auto B = random_vector<T>(static_cast<std::size_t>((broadcast_b ? 1 : batch) * (tb ? N : K) * ldb), rng);
  const auto C0 = random_vector<T>(static_cast<std::size_t>(batch * sc), rng);
  std::vector<T> got = C0, want = C0;
  const T alpha = T(0.75);
  gemm_batched<T>(got.data(), A.data(), B.data(), batch, M, N, K, ldc, lda, ldb, sc, sa, sb, ta, tb, alpha, beta);
  for (int64_t b = 0; b < batch; ++b) {
    gemm<T>(want.data() + b * sc, A.data() + b * sa, B.data() + b * sb, M, N, K, ldc, lda, ldb, ta, tb, alpha, beta);
  }
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)), 0)
      << "batch=" << batch << " M=" << M << " N=" << N << " K=" << K << " ta=" << ta << " tb=" << tb
      << " bcast_a=" << broadcast_a << " bcast_b=" << broadcast_b;
}

template <typename T>
void batched_sweep() {
  std::mt19937 rng(7);
  for (int t = 0; t < 4; ++t) {
    const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
    batched_case<T>(5, 17, 33, 13, ta, tb, false, false, T(0), rng);    // small: parallel
    batched_case<T>(4, 70, 90, 80, ta, tb, false, true, T(0.5), rng);   // shared weight
    batched_case<T>(3, 9, 40, 31, ta, tb, true, false, T(1), rng);      // shared A
    batched_case<T>(2, 150, 70, 300, ta, tb, false, false, T(0), rng);  // larger
  }
  // Stacked A and C with a broadcast B fold into one (batch * M) x N product; the result
  // must equal the per-matrix loop bit for bit.
  const int64_t batch = 6, M = 10, N = 37, K = 45;
  const auto A = random_vector<T>(static_cast<std::size_t>(batch * M * K), rng);
  const auto B = random_vector<T>(static_cast<std::size_t>(K * N), rng);
  std::vector<T> got(static_cast<std::size_t>(batch * M * N), std::numeric_limits<T>::quiet_NaN());
  std::vector<T> want = got;
  gemm_batched<T>(got.data(), A.data(), B.data(), batch, M, N, K, N, K, N, M * N, M * K, 0, false, false, T(1), T(0));
  for (int64_t b = 0; b < batch; ++b) {
    gemm<T>(want.data() + b * M * N, A.data() + b * M * K, B.data(), M, N, K, N, K, N, false, false, T(1), T(0));
  }
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)), 0);
  // batch == 0 and M == 0 are no-ops.
  gemm_batched<T>(got.data(), A.data(), B.data(), 0, M, N, K, N, K, N, M * N, M * K, 0, false, false, T(1), T(0));
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)), 0);
}

TEST(Gemm, BatchedFloat) { batched_sweep<float>(); }
TEST(Gemm, BatchedDouble) { batched_sweep<double>(); }

// A call from inside an active parallel region runs single-threaded and stays correct.
TEST(Gemm, InsideParallelRegion) {
  std::mt19937 rng(11);
  const int64_t M = 64, N = 80, K = 96;
  const auto A = random_vector<float>(static_cast<std::size_t>(M * K), rng);
  const auto B = random_vector<float>(static_cast<std::size_t>(K * N), rng);
  std::vector<float> want(static_cast<std::size_t>(M * N));
  gemm<float>(want.data(), A.data(), B.data(), M, N, K, N, K, N, false, false, 1.f, 0.f);
  std::vector<std::vector<float>> got(2, std::vector<float>(want.size()));
#pragma omp parallel for num_threads(2)
  for (int t = 0; t < 2; ++t) {
    gemm<float>(got[t].data(), A.data(), B.data(), M, N, K, N, K, N, false, false, 1.f, 0.f);
  }
  for (const auto& g : got) EXPECT_EQ(std::memcmp(g.data(), want.data(), want.size() * 4), 0);
}

// ---- bf16 matmul precision (kernels.h, MatmulPrecision) -------------------------------------------

using posgrad::kernels::MatmulPrecision;
using posgrad::kernels::MatmulPrecisionScope;

// The bf16 paths this CPU can run: the converting path under every instruction set, and the
// VDPBF16PS pair path where the CPU has AVX512-BF16. Calls f() with each one active.
template <typename F>
void for_each_bf16_path(F&& f) {
  isa_guard guard;
  for (const auto isa : supported_isas()) {
    for (const bool dot : {false, true}) {
      if (dot && (isa != gd::gemm_isa::avx512 || !gd::gemm_bf16_dot_available())) continue;
      gd::gemm_set_isa(isa);
      gd::gemm_set_bf16_dot(dot);
      SCOPED_TRACE(std::string("isa ") + gd::gemm_isa_name(isa) + ", bf16 path " +
                   posgrad::kernels::matmul_bf16_path());
      f();
    }
  }
  gd::gemm_set_bf16_dot(true);
}

// Every shape, transpose, view and alpha / beta case equals the product of the bf16-rounded operands
// within the float accumulation bound: the rounding is round-to-nearest-even of both operands and
// nothing else. (A product in float would miss this bound by ~2^-9 of the magnitude.)
TEST(GemmBf16, EqualsTheFloatProductOfRoundedOperands) {
  const MatmulPrecisionScope bf16(MatmulPrecision::bf16);
  std::mt19937 rng(77);
  const int64_t dims[][3] = {{1, 1, 1},    {3, 7, 13},  {17, 31, 33}, {13, 65, 7},  {65, 17, 129},
                             {31, 129, 3}, {33, 1, 65}, {1, 257, 31}, {7, 13, 257}, {67, 97, 150}};
  for_each_bf16_path([&] {
    for (const auto& d : dims) {
      for (int t = 0; t < 4; ++t) check_case<float>({d[0], d[1], d[2], (t & 1) != 0, (t & 2) != 0}, rng, true);
    }
    for (int t = 0; t < 4; ++t) {
      const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
      check_case<float>({37, 45, 29, ta, tb, 5, 11, 3}, rng, true);
      check_case<float>({29, 50, 41, ta, tb, 2, 0, 7, 0.5, 0.0}, rng, true);
      check_case<float>({29, 50, 41, ta, tb, 0, 0, 0, 2.0, -0.75}, rng, true);
      check_case<float>({19, 40, 1101, ta, tb, 3, 2, 1, 1.0, 0.5}, rng, true);  // odd K over several KC blocks
    }
  });
}

// The rounding itself, through a 1 x 1 x 1 product with B = 1: C = bf16(x).
TEST(GemmBf16, RoundsToNearestEvenFlushesDenormalsKeepsNaN) {
  const MatmulPrecisionScope bf16(MatmulPrecision::bf16);
  const auto bits = [](float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
  };
  const auto from_bits = [](uint32_t u) {
    float x;
    std::memcpy(&x, &u, 4);
    return x;
  };
  // input bits -> expected output bits
  const uint32_t cases[][2] = {
      {0x3F800000u, 0x3F800000u},  // 1 exactly
      {0x3F808000u, 0x3F800000u},  // 1 + 2^-8: a tie, to the even 1
      {0x3F818000u, 0x3F820000u},  // 1 + 3 * 2^-8: a tie, to the even 1 + 2^-6
      {0x3F808001u, 0x3F810000u},  // just above the tie: up
      {0x3F807FFFu, 0x3F800000u},  // just below: down
      {0xC0490FDBu, 0xC0490000u},  // -pi
      {0x00000001u, 0x00000000u},  // smallest denormal: +0
      {0x80400000u, 0x00000000u},  // a negative denormal: -0, and +0 once added to the accumulator's +0
      {0x00800000u, 0x00800000u},  // smallest normal: kept
      {0x7F7FFFFFu, 0x7F800000u},  // largest float: beyond bf16's range, +inf
      {0xFF800000u, 0xFF800000u},  // -inf
  };
  for_each_bf16_path([&] {
    for (const auto& c : cases) {
      const float a = from_bits(c[0]), b = 1.0f;
      float out = -7.0f;
      gemm<float>(&out, &a, &b, 1, 1, 1, 1, 1, 1, false, false, 1.0f, 0.0f);
      EXPECT_EQ(bits(out), c[1]) << std::hex << "input 0x" << c[0];
    }
    const float nan = std::numeric_limits<float>::quiet_NaN(), one = 1.0f;
    float out = 0.0f;
    gemm<float>(&out, &nan, &one, 1, 1, 1, 1, 1, 1, false, false, 1.0f, 0.0f);
    EXPECT_TRUE(std::isnan(out));
  });
}

// 1 vs 2 threads give the same bits in bf16 too, on each path.
TEST(GemmBf16, ThreadCountInvariance) {
  const MatmulPrecisionScope bf16(MatmulPrecision::bf16);
  std::mt19937 rng(31);
  const int64_t dims[][3] = {{131, 67, 65}, {5, 600, 301}, {26, 300, 601}, {3, 4500, 40}};
  for_each_bf16_path([&] {
    for (const auto& d : dims) {
      const int64_t M = d[0], N = d[1], K = d[2];
      const auto A = random_vector<float>(static_cast<std::size_t>(M * K), rng);
      const auto B = random_vector<float>(static_cast<std::size_t>(K * N), rng);
      std::vector<float> c1(static_cast<std::size_t>(M * N)), c2(c1.size());
      omp_set_num_threads(1);
      gemm<float>(c1.data(), A.data(), B.data(), M, N, K, N, K, K, false, true, 1.0f, 0.0f);
      omp_set_num_threads(2);
      gemm<float>(c2.data(), A.data(), B.data(), M, N, K, N, K, K, false, true, 1.0f, 0.0f);
      EXPECT_EQ(std::memcmp(c1.data(), c2.data(), c1.size() * 4), 0) << "M=" << M << " N=" << N << " K=" << K;
    }
  });
}

// The bias row in bf16 precision too: the pair path's packed k pairs and the converting path.
TEST(GemmBf16, BiasRowEqualsCopyThenAccumulate) {
  const MatmulPrecisionScope bf16(MatmulPrecision::bf16);
  std::mt19937 rng(33);
  for_each_bf16_path([&] {
    bias_row_case<float>(131, 67, 65, false, true, rng, "bf16");
    bias_row_case<float>(5, 600, 301, true, false, rng, "bf16");
    bias_row_case<float>(400, 70, 601, false, false, rng, "bf16");
  });
}

// split_k in bf16: the partial sums are the float accumulators of the pair and converting paths.
TEST(GemmBf16, SplitKKeepsTheBitsOfOneThread) {
  const MatmulPrecisionScope bf16(MatmulPrecision::bf16);
  std::mt19937 rng(6);
  for_each_bf16_path([&] { split_k_cases<float>(rng, posgrad::kernels::matmul_bf16_path()); });
}

// gemm_bias_add in bf16 precision: the addend in float after the bf16-operand product.
TEST(GemmBf16, BiasAddEqualsTheProductThenTheAdd) {
  const MatmulPrecisionScope bf16(MatmulPrecision::bf16);
  std::mt19937 rng(43);
  const int saved = omp_get_max_threads();
  for_each_bf16_path([&] { bias_add_sweep<float>(rng, posgrad::kernels::matmul_bf16_path()); });
  omp_set_num_threads(saved);
}

// Double products ignore the setting (gradchecks stay in double), and fp32 is the default.
TEST(GemmBf16, DoubleProductsAndTheDefaultAreUnaffected) {
  EXPECT_EQ(posgrad::kernels::matmul_precision(), MatmulPrecision::fp32);
  std::mt19937 rng(8);
  const int64_t M = 40, N = 50, K = 60;
  const auto A = random_vector<double>(static_cast<std::size_t>(M * K), rng);
  const auto B = random_vector<double>(static_cast<std::size_t>(K * N), rng);
  std::vector<double> want(static_cast<std::size_t>(M * N)), got(want.size());
  gemm<double>(want.data(), A.data(), B.data(), M, N, K, N, K, N, false, false, 1.0, 0.0);
  {
    const MatmulPrecisionScope bf16(MatmulPrecision::bf16);
    gemm<double>(got.data(), A.data(), B.data(), M, N, K, N, K, N, false, false, 1.0, 0.0);
  }
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(double)), 0);
  EXPECT_EQ(posgrad::kernels::matmul_precision(), MatmulPrecision::fp32);
}

TEST(GemmBf16, PrecisionNamesParseAndBadOnesAreRefused) {
  EXPECT_EQ(posgrad::kernels::parse_matmul_precision("bf16"), MatmulPrecision::bf16);
  EXPECT_EQ(posgrad::kernels::parse_matmul_precision("fp32"), MatmulPrecision::fp32);
  EXPECT_STREQ(posgrad::kernels::matmul_precision_name(MatmulPrecision::bf16), "bf16");
  try {
    posgrad::kernels::parse_matmul_precision("fp16");
    ADD_FAILURE() << "fp16 accepted";
  } catch (const posgrad::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'fp16'"), std::string::npos) << e.what();
  }
}

}  // namespace

// ---- gemm_tile: the fused attention's tile products (tensor/kernels/cpu/gemm_tile.h) ----------------

// gemm_tile gives gemm()'s bits: every transpose, alpha and beta (0, 1, other: 0.3 and 0.7), strided operands, every
// tile shape the attention makes (M, N up to 64 and past it, K from 1 to the 512 of one KC block, odd
// sizes for the masked edges, K at and just past the 256 of AVX2's KC), NaN garbage in C under beta = 0,
// and a -0 in C under beta = 1. Where the GEMM's path is AVX-512 or AVX2 with fp32 products gemm_tile
// runs its own loops (each path forced here where the CPU has it); elsewhere (the scalar path, bf16, K
// past the first KC block) it hands the product to gemm(), so the test still holds.
TEST(GemmTile, SameBitsAsGemm) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  struct Shape {
    int64_t M, N, K;
  };
  const Shape shapes[] = {{64, 64, 16}, {64, 16, 64},  {64, 32, 64},  {13, 64, 32},  {64, 64, 1},
                          {5, 7, 3},    {70, 100, 33}, {1, 1, 512},   {64, 48, 512}, {33, 17, 513},
                          {9, 80, 64},  {64, 40, 256}, {20, 24, 257}, {7, 16, 5}};
  auto run_all = [&](const char* what) {
    for (const Shape& s : shapes)
      for (int t = 0; t < 4; ++t)
        for (float beta : {0.0f, 1.0f, 0.7f}) {
          const bool ta = t & 1, tb = t & 2;
          const int64_t pad = 3, lda = (ta ? s.M : s.K) + pad, ldb = (tb ? s.K : s.N) + pad, ldc = s.N + pad;
          std::vector<float> A((ta ? s.K : s.M) * lda), B((tb ? s.N : s.K) * ldb), C(s.M * ldc);
          for (auto& x : A) x = u(rng);
          for (auto& x : B) x = u(rng);
          for (auto& x : C) x = u(rng);
          if (beta == 0.0f) C[0] = std::numeric_limits<float>::quiet_NaN();  // never read
          if (beta == 1.0f) C[0] = -0.0f;
          std::vector<float> want = C, got = C;
          // Not powers of two, so that alpha * acc and beta * C round: a fused and a separately
          // rounded write then differ.
          const float alpha = beta == 0.7f ? 0.3f : 1.0f;
          gemm<float>(want.data(), A.data(), B.data(), s.M, s.N, s.K, ldc, lda, ldb, ta, tb, alpha, beta);
          posgrad::kernels::cpu::gemm_tile<float>(got.data(), A.data(), B.data(), s.M, s.N, s.K, ldc, lda, ldb, ta, tb,
                                                  alpha, beta);
          ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
              << what << ": M " << s.M << " N " << s.N << " K " << s.K << " ta " << ta << " tb " << tb << " beta "
              << beta;
        }
  };
  const gd::gemm_isa saved = gd::gemm_active_isa();
  for (gd::gemm_isa isa : {gd::gemm_isa::avx512, gd::gemm_isa::avx2, gd::gemm_isa::scalar}) {
    if (gd::gemm_set_isa(isa) != isa) continue;  // not on this CPU
    run_all(gd::gemm_isa_name(isa));
  }
  gd::gemm_set_isa(saved);
  {
    const MatmulPrecisionScope bf16(MatmulPrecision::bf16);
    run_all("bf16");
  }
}

// gemm_tile_causal against the whole product (gemm_tile): for each skip mode and diagonals from "every
// row masked" to "nothing masked", the elements the mode needs have the whole product's bits -- with
// op(A) zero where the mode says its terms are left out, as the attention's tiles hold it -- and in
// the term modes every element is needed. Columns mode starts from NaN, which the needed elements
// must not keep when beta is 0.
TEST(GemmTile, CausalSkipsKeepTheBitsOfTheWholeProduct) {
  using posgrad::kernels::cpu::CausalSkip;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t sizes[][3] = {{64, 64, 32}, {64, 32, 64}, {40, 64, 16}, {13, 29, 7}, {64, 64, 64}, {1, 5, 3}};
  auto run_all = [&](const char* what) {
    for (const auto& sz : sizes)
      for (const CausalSkip skip : {CausalSkip::columns, CausalSkip::terms_up_to, CausalSkip::terms_from})
        for (const int64_t diag :
             {int64_t(-70), int64_t(-13), int64_t(-1), int64_t(0), int64_t(5), int64_t(31), int64_t(100)})
          for (float beta : {0.0f, 1.0f}) {
            const int64_t M = sz[0], N = sz[1], K = sz[2];
            // The term modes read op(A) (M, K) as the tile's P or dS, stored (M, K) or, for terms_from,
            // (K, M) (P^T): zero where the mode leaves terms out.
            const bool ta = skip == CausalSkip::terms_from, tb = skip == CausalSkip::columns;
            const int64_t lda = ta ? M + 2 : K + 2, ldb = tb ? K + 1 : N + 1, ldc = N + 3;
            std::vector<float> A((ta ? K : M) * lda), B((tb ? N : K) * ldb), C(M * ldc);
            for (auto& x : A) x = u(rng);
            for (auto& x : B) x = u(rng);
            for (auto& x : C) x = u(rng);
            for (int64_t i = 0; i < M; ++i)
              for (int64_t k = 0; k < K; ++k) {
                float& a = ta ? A[k * lda + i] : A[i * lda + k];
                if ((skip == CausalSkip::terms_up_to && k > i + diag) ||
                    (skip == CausalSkip::terms_from && k < i - diag))
                  a = 0.0f;
              }
            std::vector<float> want = C, got = C;
            posgrad::kernels::cpu::gemm_tile<float>(want.data(), A.data(), B.data(), M, N, K, ldc, lda, ldb, ta, tb,
                                                    0.5f, beta);
            if (skip == CausalSkip::columns && beta == 0.0f)  // C is not read
              for (int64_t i = 0; i < M; ++i)
                for (int64_t j = 0; j < N; ++j) got[i * ldc + j] = std::numeric_limits<float>::quiet_NaN();
            posgrad::kernels::cpu::gemm_tile_causal<float>(got.data(), A.data(), B.data(), M, N, K, ldc, lda, ldb, ta,
                                                           tb, 0.5f, beta, skip, diag);
            int64_t bad = 0;
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < N; ++j) {
                if (skip == CausalSkip::columns && j > i + diag) continue;
                bad += std::memcmp(&want[i * ldc + j], &got[i * ldc + j], sizeof(float)) != 0;
              }
            EXPECT_EQ(bad, 0) << what << ": M " << M << " N " << N << " K " << K << " skip " << static_cast<int>(skip)
                              << " diag " << diag << " beta " << beta;
          }
  };
  const gd::gemm_isa saved = gd::gemm_active_isa();
  for (gd::gemm_isa isa : {gd::gemm_isa::avx512, gd::gemm_isa::avx2, gd::gemm_isa::scalar}) {
    if (gd::gemm_set_isa(isa) != isa) continue;  // not on this CPU
    run_all(gd::gemm_isa_name(isa));
  }
  gd::gemm_set_isa(saved);
}

// matmul_work: 2 M N K FLOPs per product, under the precision it ran in, from every thread (the
// batched product's OpenMP team, a thread that has exited); nothing for an empty product; the causal
// tile product counts the tiles it computes.
TEST(MatmulWork, CountsTwoMNKPerProductByPrecision) {
  using posgrad::kernels::matmul_work;
  using posgrad::kernels::MatmulWork;
  const int64_t M = 3, N = 5, K = 7;
  std::vector<float> a(64 * 64, 0.5f), b(64 * 64, 0.25f), c(64 * 64), bias(64, 1.0f);
  std::vector<double> ad(M * K, 0.5), bd(K * N, 0.25), cd(M * N);
  auto delta = [](const MatmulWork& before) { return matmul_work() - before; };
  auto expect = [](const MatmulWork& got, uint64_t fp32, uint64_t bf16, uint64_t fp64, const char* what) {
    EXPECT_EQ(got.fp32, fp32) << what;
    EXPECT_EQ(got.bf16, bf16) << what;
    EXPECT_EQ(got.fp64, fp64) << what;
  };
  MatmulWork w = matmul_work();
  gemm<float>(c.data(), a.data(), b.data(), M, N, K, N, K, N, false, false, 1.0f, 0.0f);
  expect(delta(w), 2 * M * N * K, 0, 0, "float");
  w = matmul_work();
  gemm<double>(cd.data(), ad.data(), bd.data(), M, N, K, N, K, N, false, true, 1.0, 0.0);
  expect(delta(w), 0, 0, 2 * M * N * K, "double");
  w = matmul_work();
  {
    const MatmulPrecisionScope bf16(MatmulPrecision::bf16);
    gemm<float>(c.data(), a.data(), b.data(), M, N, K, N, K, N, true, false, 1.0f, 0.0f);
  }
  expect(delta(w), 0, 2 * M * N * K, 0, "bf16");
  w = matmul_work();
  gemm<float>(c.data(), a.data(), b.data(), M, N, 0, N, K, N, false, false, 1.0f, 0.5f);
  gemm<float>(c.data(), a.data(), b.data(), M, N, K, N, K, N, false, false, 0.0f, 0.5f);
  gemm<float>(c.data(), a.data(), b.data(), 0, N, K, N, K, N, false, false, 1.0f, 0.0f);
  expect(delta(w), 0, 0, 0, "empty products");
  w = matmul_work();
  posgrad::kernels::cpu::gemm_bias<float>(c.data(), a.data(), b.data(), bias.data(), 4, 6, 8, 6, 8, 6, false, false);
  expect(delta(w), 2 * 4 * 6 * 8, 0, 0, "gemm_bias");
  // Eight separate 8 x 8 x 8 products: one per thread of a team of two (gemm_batched's small path).
  w = matmul_work();
  omp_set_num_threads(2);
  posgrad::kernels::cpu::gemm_batched<float>(c.data(), a.data(), b.data(), 8, 8, 8, 8, 8, 8, 8, 64, 64, 64, false,
                                             false, 1.0f, 0.0f);
  expect(delta(w), 8 * 2 * 8 * 8 * 8, 0, 0, "gemm_batched");
  w = matmul_work();
  std::thread t([&] { gemm<float>(c.data(), a.data(), b.data(), M, N, K, N, K, N, false, false, 1.0f, 0.0f); });
  t.join();
  expect(delta(w), 2 * M * N * K, 0, 0, "a thread that has exited");
  // Causal columns, diagonal 0, 24 x 64 x 16: row groups of 12 compute 16 and 32 columns (gemm.cpp's
  // gemm_tile_causal) where the tile path runs; the scalar path computes the whole product.
  const gd::gemm_isa saved = gd::gemm_active_isa();
  for (gd::gemm_isa isa : {gd::gemm_isa::avx512, gd::gemm_isa::avx2, gd::gemm_isa::scalar}) {
    if (gd::gemm_set_isa(isa) != isa) continue;  // not on this CPU
    w = matmul_work();
    posgrad::kernels::cpu::gemm_tile_causal<float>(c.data(), a.data(), b.data(), 24, 64, 16, 64, 16, 16, false, true,
                                                   1.0f, 0.0f, posgrad::kernels::cpu::CausalSkip::columns, 0);
    const uint64_t want = isa == gd::gemm_isa::scalar ? 2 * 24 * 64 * 16 : 2 * 12 * 16 * 16 + 2 * 12 * 32 * 16;
    expect(delta(w), want, 0, 0, gd::gemm_isa_name(isa));
  }
  gd::gemm_set_isa(saved);
}
