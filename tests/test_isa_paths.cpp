// test_isa_paths.cpp — the CPU float kernels through every instruction-set path this machine has,
// and what each promises across paths (README "Determinism"):
//  * vec_kernels.h (exact GELU forward and backward, the attention's exponentials and row sum):
//    every path (AVX-512, AVX2, baseline) gives the same bits as a scalar evaluation of
//    vec_math.h in this file, on special values, a dense grid, random bit patterns and ragged
//    lengths; through unary_forward / unary_backward with 1 and 2 threads too.
//  * LayerNorm and RMSNorm (16 partial sums per row in a fixed order), AdamW, the column sums of
//    sum_dim and the binary elementwise ops in float: every path gives the bits of a scalar evaluation in the
//    documented order, for 1 and 2 threads.
//  * the fused attention, forward and backward: with the GEMM held on one path, the same bits
//    whatever the vec path and for 1 and 2 threads; between GEMM paths, within a stated bound of a
//    double-precision evaluation (the GEMM sums in another order and, off scalar, with FMAs).
//  * the GEMM: between paths, within twice the bound of a sequential dot product (each path is
//    within it of the exact product, test_gemm.cpp); on one path the same bits on a second run.
//  * a few training steps of a tiny GPT with every kernel on one level (GEMM and vec paths both):
//    the same weights for 1 and 2 threads on each level; between levels, close.
// A path the CPU lacks is SKIPPED with the reason, not passed.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "support/test_util.h"
#include "tensor/kernels/cpu/gemm_internal.h"
#include "tensor/kernels/cpu/vec_kernels.h"
#include "tensor/kernels/cpu/vec_math.h"
#include "tensor/kernels/kernels.h"
#include "train/presets.h"
#include "train/trainer.h"

namespace posgrad::kernels::cpu {
template <typename T>
void gemm(T* C, const T* A, const T* B, int64_t M, int64_t N, int64_t K, int64_t ldc, int64_t lda, int64_t ldb,
          bool trans_a, bool trans_b, T alpha, T beta);
// Test parameters print as their names.
namespace vec_detail {
void PrintTo(vec_isa isa, std::ostream* os) { *os << vec_isa_name(isa); }
}  // namespace vec_detail
namespace gemm_detail {
void PrintTo(gemm_isa isa, std::ostream* os) { *os << gemm_isa_name(isa); }
}  // namespace gemm_detail
}  // namespace posgrad::kernels::cpu

namespace {

namespace cpu = posgrad::kernels::cpu;
namespace vd = posgrad::kernels::cpu::vec_detail;
namespace gd = posgrad::kernels::cpu::gemm_detail;
using posgrad::kernels::ScoreBias;
using posgrad::kernels::UnaryOp;

constexpr vd::vec_isa kVecIsas[] = {vd::vec_isa::baseline, vd::vec_isa::avx2, vd::vec_isa::avx512};
constexpr gd::gemm_isa kGemmIsas[] = {gd::gemm_isa::scalar, gd::gemm_isa::avx2, gd::gemm_isa::avx512};

// Puts both selectors and the thread count back when a test ends.
struct PathGuard {
  int threads = omp_get_max_threads();
  ~PathGuard() {
    vd::vec_set_isa(vd::vec_best_isa());
    gd::gemm_set_isa(gd::gemm_best_isa());
    omp_set_num_threads(threads);
  }
};

uint32_t bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}
float from_bits(uint32_t b) {
  float v;
  std::memcpy(&v, &b, 4);
  return v;
}

// Index of the first element whose bits differ (-1: none), for the failure message.
int64_t first_mismatch(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (bits(got[i]) != bits(want[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

std::string mismatch_text(const std::vector<float>& in, const std::vector<float>& got, const std::vector<float>& want) {
  int64_t shown = 0, count = 0;
  std::string s;
  char line[160];
  for (size_t i = 0; i < got.size(); ++i) {
    if (bits(got[i]) == bits(want[i])) continue;
    ++count;
    if (shown++ < 5) {
      std::snprintf(line, sizeof line, "\n  [%zu] x=%a (0x%08x): got %a (0x%08x), scalar %a (0x%08x)", i, double(in[i]),
                    bits(in[i]), double(got[i]), bits(got[i]), double(want[i]), bits(want[i]));
      s += line;
    }
  }
  return std::to_string(count) + " of " + std::to_string(got.size()) + " differ:" + s;
}

// Inputs for the elementwise kernels: signed zeros, infinities, NaNs (two payloads), subnormals,
// the extremes, the branch points of vec_math.h (erf's |z| = 1 and 4 are x = sqrt 2 and 4 sqrt 2
// for GELU; exp's -87.3 and 88) with their neighbours, a dense grid over [-12, 12] and random bit
// patterns (every exponent).
std::vector<float> elementwise_inputs() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          from_bits(0xffc00001u),
                          std::numeric_limits<float>::denorm_min(),
                          -std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min(),
                          -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::max()};
  for (const float c : {1.0f, 4.0f, 1.41421356f, 5.65685425f, 87.3f, 88.0f, 13.2f, 13.3f, 9.0f}) {
    float lo = c, hi = c;
    for (int k = 0; k < 4; ++k) {
      for (const float s : {1.0f, -1.0f}) {
        v.push_back(s * lo);
        v.push_back(s * hi);
      }
      lo = std::nextafter(lo, 0.0f);
      hi = std::nextafter(hi, 1e30f);
    }
  }
  for (int i = -12 * 64; i <= 12 * 64; ++i) v.push_back(float(i) / 64.0f);
  std::mt19937 rng(20240611);
  for (int i = 0; i < 60000; ++i) v.push_back(from_bits(static_cast<uint32_t>(rng())));
  std::uniform_real_distribution<float> normalish(-6.0f, 6.0f);
  for (int i = 0; i < 40000; ++i) v.push_back(normalish(rng));
  return v;
}

// The scalar evaluations the paths must equal: the formulas of vec_kernels.cpp over vec_math.h,
// one call per element, compiled here (baseline x86-64, -ffp-contract=off).
const float kInvSqrt2 = float(0.70710678118654752440);
const float kInvSqrt2Pi = float(0.39894228040143267794);
float gelu_scalar(float x) { return 0.5f * x * (1.0f + cpu::erf_approx(x * kInvSqrt2)); }
float gelu_grad_scalar(float dy, float v) {
  return dy * (0.5f * (1.0f + cpu::erf_approx(v * kInvSqrt2)) + v * kInvSqrt2Pi * cpu::exp_approx(-0.5f * v * v));
}

// ---- the vec paths -----------------------------------------------------------------------------

class VecPath : public ::testing::TestWithParam<vd::vec_isa> {
 protected:
  void SetUp() override {
    if (static_cast<int>(GetParam()) > static_cast<int>(vd::vec_best_isa())) {
      GTEST_SKIP() << "this CPU has no " << vd::vec_isa_name(GetParam()) << " (its best vec path is "
                   << vd::vec_isa_name(vd::vec_best_isa()) << ")";
    }
    ASSERT_EQ(vd::vec_set_isa(GetParam()), GetParam());
  }
  PathGuard guard_;
};

// Runs f(begin, count) over the whole array and then again over ragged pieces (lengths 1 to 37 at
// shifting offsets), so the vector body, the remainders and unaligned starts are all reached.
template <typename F>
void whole_and_pieces(int64_t n, F f) {
  f(int64_t(0), n);
  int64_t at = 0;
  for (int64_t len = 1; at + len <= n && len <= 37; at += len + 3, ++len) f(at, len);
}

TEST_P(VecPath, GeluForwardEqualsTheScalarBits) {
  const auto x = elementwise_inputs();
  whole_and_pieces(static_cast<int64_t>(x.size()), [&](int64_t b, int64_t c) {
    std::vector<float> got(x.size(), -7.0f), want(x.size(), -7.0f);  // outside the piece: untouched
    cpu::gelu_forward_f32(got.data() + b, x.data() + b, c);
    for (int64_t i = b; i < b + c; ++i) want[i] = gelu_scalar(x[i]);
    EXPECT_EQ(first_mismatch(got, want), -1)
        << vd::vec_isa_name(GetParam()) << " piece [" << b << ", " << b + c << "): " << mismatch_text(x, got, want);
  });
}

TEST_P(VecPath, GeluBackwardEqualsTheScalarBits) {
  const auto x = elementwise_inputs();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<float> dy(x.size()), dx0(x.size());
  for (auto& g : dy) g = d(rng);
  for (auto& g : dx0) g = d(rng);  // backward accumulates: start from something
  whole_and_pieces(static_cast<int64_t>(x.size()), [&](int64_t b, int64_t c) {
    std::vector<float> got = dx0, want = dx0;
    cpu::gelu_backward_f32(got.data() + b, dy.data() + b, x.data() + b, c);
    for (int64_t i = b; i < b + c; ++i) want[i] += gelu_grad_scalar(dy[i], x[i]);
    EXPECT_EQ(first_mismatch(got, want), -1)
        << vd::vec_isa_name(GetParam()) << " piece [" << b << ", " << b + c << "): " << mismatch_text(x, got, want);
  });
}

// The forward that keeps 1 + erf and the backward that reads it (what autograd runs on the CPU):
// y the same bits as gelu_forward_f32, s = 1 + erf_approx(x / sqrt 2), and dx written as +0 plus
// the accumulated term, so it equals gelu_backward_f32 on a zero-filled dx, signs of zero included
// (dy holds +-0 and the inputs +-0, +-inf, NaN).
TEST_P(VecPath, GeluSavingForwardAndSavedBackwardEqualTheScalarBits) {
  const auto x = elementwise_inputs();
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<float> dy(x.size());
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = i % 7 == 0 ? 0.0f : i % 7 == 1 ? -0.0f : d(rng);
  whole_and_pieces(static_cast<int64_t>(x.size()), [&](int64_t b, int64_t c) {
    std::vector<float> y(x.size(), -7.0f), s(x.size(), -7.0f), want_y(x.size(), -7.0f), want_s(x.size(), -7.0f);
    cpu::gelu_forward_saving_f32(y.data() + b, s.data() + b, x.data() + b, c);
    for (int64_t i = b; i < b + c; ++i) {
      want_y[i] = gelu_scalar(x[i]);
      want_s[i] = 1.0f + cpu::erf_approx(x[i] * kInvSqrt2);
    }
    EXPECT_EQ(first_mismatch(y, want_y), -1)
        << vd::vec_isa_name(GetParam()) << " piece [" << b << ", " << b + c << "): " << mismatch_text(x, y, want_y);
    EXPECT_EQ(first_mismatch(s, want_s), -1)
        << vd::vec_isa_name(GetParam()) << " piece [" << b << ", " << b + c << "): " << mismatch_text(x, s, want_s);

    std::vector<float> got(x.size(), -7.0f), want(x.size(), -7.0f), acc(x.size(), -7.0f);
    std::fill(acc.begin() + b, acc.begin() + b + c, 0.0f);
    cpu::gelu_backward_saved_f32(got.data() + b, dy.data() + b, x.data() + b, s.data() + b, c);
    cpu::gelu_backward_f32(acc.data() + b, dy.data() + b, x.data() + b, c);  // onto zeros
    for (int64_t i = b; i < b + c; ++i) want[i] = 0.0f + gelu_grad_scalar(dy[i], x[i]);
    EXPECT_EQ(first_mismatch(got, want), -1)
        << vd::vec_isa_name(GetParam()) << " piece [" << b << ", " << b + c << "): " << mismatch_text(x, got, want);
    EXPECT_EQ(first_mismatch(got, acc), -1)
        << vd::vec_isa_name(GetParam()) << " piece [" << b << ", " << b + c << "): " << mismatch_text(x, got, acc);
  });
}

// The public kernels (elementwise.cpp splits n > 2^15 into one chunk per thread): the same bits
// as the scalar evaluation for 1 and 2 threads.
TEST_P(VecPath, GeluKernelsEqualTheScalarBitsForOneAndTwoThreads) {
  auto x = elementwise_inputs();
  x.resize(100003);  // > the parallel threshold, odd
  std::vector<float> dy(x.size(), 0.75f), want_y(x.size()), want_dx(x.size(), 0.0f);
  for (size_t i = 0; i < x.size(); ++i) {
    want_y[i] = gelu_scalar(x[i]);
    want_dx[i] = 0.0f + gelu_grad_scalar(dy[i], x[i]);
  }
  for (const int threads : {1, 2}) {
    omp_set_num_threads(threads);
    std::vector<float> y(x.size()), dx(x.size(), 0.0f);
    const int64_t n = static_cast<int64_t>(x.size());
    cpu::unary_forward<float>(y.data(), x.data(), n, UnaryOp::Gelu, 0.0f);
    cpu::unary_backward<float>(dx.data(), dy.data(), x.data(), y.data(), n, UnaryOp::Gelu, 0.0f);
    EXPECT_EQ(first_mismatch(y, want_y), -1) << threads << " threads: " << mismatch_text(x, y, want_y);
    EXPECT_EQ(first_mismatch(dx, want_dx), -1) << threads << " threads: " << mismatch_text(x, dx, want_dx);
    // The pair autograd runs on the CPU: the same y, and dx written (it starts as garbage here).
    std::vector<float> y2(x.size(), -7.0f), s(x.size()), dx2(x.size(), -7.0f);
    cpu::gelu_forward_saving<float>(y2.data(), s.data(), x.data(), n);
    cpu::gelu_backward_saved<float>(dx2.data(), dy.data(), x.data(), s.data(), n);
    EXPECT_EQ(first_mismatch(y2, want_y), -1) << threads << " threads: " << mismatch_text(x, y2, want_y);
    EXPECT_EQ(first_mismatch(dx2, want_dx), -1) << threads << " threads: " << mismatch_text(x, dx2, want_dx);
  }
}

// exp_shift_sum_f32 and exp_shift_sum_padded_f32: the exponentials equal scalar exp_approx calls and
// the sum equals the documented order (partial sum i mod 16, then pairwise), for every length 0..70
// and rows with masked (-inf), underflowing, equal and NaN entries.
TEST_P(VecPath, ExpShiftSumEqualsTheScalarBitsInTheDocumentedOrder) {
  std::mt19937 rng(11);
  std::normal_distribution<float> score(0.0f, 4.0f);
  for (int kind = 0; kind < 4; ++kind) {
    for (int64_t n = 0; n <= 70; ++n) {
      std::vector<float> row(static_cast<size_t>(n));
      for (auto& s : row) s = score(rng);
      if (kind == 1 && n > 2) row[1] = -std::numeric_limits<float>::infinity(), row[n - 1] = -200.0f;
      if (kind == 2) std::fill(row.begin(), row.end(), 3.5f);
      if (kind == 3 && n > 5) row[5] = std::numeric_limits<float>::quiet_NaN();
      const float m = n ? *std::max_element(row.begin(), row.end()) : 0.0f;
      const float shift2 = kind == 2 ? 0.0f : 0.3125f;
      std::vector<float> want(row.size());
      float part[16] = {};
      for (int64_t i = 0; i < n; ++i) {
        want[i] = cpu::exp_approx((row[i] - m) - shift2);
        part[i % 16] += want[i];
      }
      for (int w = 8; w > 0; w /= 2) {
        for (int l = 0; l < w; ++l) part[l] += part[l + w];
      }
      std::vector<float> got = row;
      const float sum = cpu::exp_shift_sum_f32(got.data(), n, m, shift2);
      EXPECT_EQ(first_mismatch(got, want), -1)
          << vd::vec_isa_name(GetParam()) << " n=" << n << " kind=" << kind << ": " << mismatch_text(row, got, want);
      EXPECT_EQ(bits(sum), bits(part[0]))
          << vd::vec_isa_name(GetParam()) << " n=" << n << " kind=" << kind << ": sum " << sum << " want " << part[0];
      // The padded variant, on a row with room up to the next multiple of 16 that holds values which
      // must not reach the sum (NaN, +inf, a score above the shift): the same bits in [0, n) and
      // the same sum; the room is overwritten with the exponentials of what it held.
      const int64_t room = (n + 15) / 16 * 16;
      const float junk[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), m + 50.0f,
                            -0.0f};
      std::vector<float> padded(static_cast<size_t>(room));
      std::copy(row.begin(), row.end(), padded.begin());
      for (int64_t i = n; i < room; ++i) padded[i] = junk[i % 4];
      const std::vector<float> held = padded;
      const float padded_sum = cpu::exp_shift_sum_padded_f32(padded.data(), n, m, shift2);
      EXPECT_EQ(first_mismatch(std::vector<float>(padded.begin(), padded.begin() + n), want), -1)
          << vd::vec_isa_name(GetParam()) << " padded n=" << n << " kind=" << kind;
      EXPECT_EQ(bits(padded_sum), bits(part[0])) << vd::vec_isa_name(GetParam()) << " padded n=" << n
                                                 << " kind=" << kind << ": sum " << padded_sum << " want " << part[0];
      for (int64_t i = n; i < room; ++i) {
        const float e = cpu::exp_approx((held[i] - m) - shift2);
        EXPECT_EQ(bits(padded[i]), bits(e)) << "padded n=" << n << " room entry " << i;
      }
      if (kind != 3) {  // and it is the sum: within n ulps of the double-precision one
        double exact = 0;
        for (const float e : want) exact += e;
        EXPECT_LE(std::fabs(sum - exact), (n + 1) * 6e-8 * exact) << "n=" << n;
      }
    }
  }
}

// exp_shift_axpy_f32 (the float cross-entropy's backward row): y[i] + g * exp_approx((x[i] - m) - ls)
// element by element, the bits of that scalar formula on every path, for every length 0-70 (whole
// vectors and tails), rows with -inf, NaN and an underflowing logit, and g = 0, negative and 1; y's
// elements past n are untouched.
TEST_P(VecPath, ExpShiftAxpyEqualsTheScalarBits) {
  std::mt19937 rng(17);
  std::normal_distribution<float> logit(0.0f, 3.0f);
  for (int kind = 0; kind < 3; ++kind) {
    for (int64_t n = 0; n <= 70; ++n) {
      std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n) + 5);
      for (auto& v : x) v = logit(rng);
      for (auto& v : y) v = logit(rng);
      if (kind == 1 && n > 3) x[0] = -std::numeric_limits<float>::infinity(), x[2] = -300.0f;
      if (kind == 2 && n > 6) x[6] = std::numeric_limits<float>::quiet_NaN();
      const float m = n ? *std::max_element(x.begin(), x.end()) : 0.0f;
      const float ls = 1.5f, g = kind == 0 ? 0.0078125f : kind == 1 ? -0.25f : 1.0f;
      std::vector<float> want = y;
      for (int64_t i = 0; i < n; ++i) want[i] = y[i] + g * cpu::exp_approx((x[i] - m) - ls);
      std::vector<float> got = y;
      cpu::exp_shift_axpy_f32(got.data(), x.data(), n, m, ls, g);
      EXPECT_EQ(first_mismatch(got, want), -1)
          << vd::vec_isa_name(GetParam()) << " n=" << n << " kind=" << kind << ": " << mismatch_text(y, got, want);
    }
  }
}

// sigmoid_scaled_f32 (CoPE's gates): every lane equals the scalar formula of vec_kernels.h with
// exp_approx, on every path, whole and in pieces; within 3e-7 relative of the double sigmoid (plus the
// float argument's rounding); the
// extremes saturate to 0 and 1 without overflow; NaN stays NaN.
TEST_P(VecPath, SigmoidEqualsTheScalarBits) {
  auto x = elementwise_inputs();
  x.push_back(-1e30f), x.push_back(1e30f), x.push_back(0.0f), x.push_back(-0.0f);
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  const float scale = 0.375f;
  std::vector<float> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = x[i] * scale;
    const bool neg = v < 0.0f;
    const float e = cpu::exp_approx(neg ? v : -v);
    want[i] = (neg ? e : 1.0f) / (1.0f + e);
  }
  whole_and_pieces(static_cast<int64_t>(x.size()), [&](int64_t b, int64_t c) {
    std::vector<float> got(x.size(), 0.0f), w(x.size(), 0.0f);
    cpu::sigmoid_scaled_f32(got.data() + b, x.data() + b, c, scale);
    std::copy(want.begin() + b, want.begin() + b + c, w.begin() + b);
    EXPECT_EQ(first_mismatch(got, w), -1)
        << vd::vec_isa_name(GetParam()) << " piece [" << b << ", " << b + c << "): " << mismatch_text(x, got, w);
  });
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(want[i]));
      continue;
    }
    // The float product x scale carries a relative rounding of 2^-24, which e^v turns into an
    // absolute error of |v| 2^-24 in the exponent, so the bound grows with |v|.
    const double v = double(x[i]) * scale, exact = 1.0 / (1.0 + std::exp(-v));
    if (std::isinf(v)) {
      EXPECT_EQ(want[i], v < 0 ? 0.0f : 1.0f) << "x=" << x[i];
      continue;
    }
    // Below e^-87.3 exp_approx gives 0: an absolute error under the smallest normal float.
    EXPECT_LE(std::fabs(want[i] - exact), (3e-7 + 1.2e-7 * std::fabs(v)) * exact + 1.2e-38) << "x=" << x[i];
  }
  EXPECT_EQ(want[want.size() - 5], 0.0f);
  EXPECT_EQ(want[want.size() - 4], 1.0f);
  EXPECT_EQ(want[want.size() - 3], 0.5f);
}

// ---- LayerNorm, RMSNorm, AdamW and column sums: scalar evaluations in the documented order -------

// The 16 partial sums of the float norms (vec_kernels.h): element c to partial c mod 16, then
// pairwise (p[l] += p[l + 8], + 4, + 2, + 1).
template <typename A, typename F>
A sum16_scalar(int64_t C, F f) {
  A part[16] = {};
  for (int64_t c = 0; c < C; ++c) part[c % 16] += f(c);
  for (int w = 8; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) part[l] += part[l + w];
  return part[0];
}

struct NormRef {
  std::vector<float> y, mean, rstd, dx, dw, db;
};

// norm.cpp's float LayerNorm (rms = false) or RMSNorm (rms = true), forward then backward into a dx
// that starts at dx0, one element at a time in the documented order.
NormRef norm_scalar(bool rms, const std::vector<float>& x, const std::vector<float>& dy, const float* w, const float* b,
                    const std::vector<float>& dx0, int64_t N, int64_t C, float eps) {
  NormRef r;
  r.y.resize(x.size());
  r.mean.resize(2 * N);
  r.rstd.resize(N);
  r.dx = dx0;
  r.dw.assign(C, 0.0f);
  r.db.assign(C, 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x.data() + n * C;
    float hi = 0.0f, lo = 0.0f, rs;
    if (rms) {
      const double ss = sum16_scalar<double>(C, [&](int64_t c) { return double(xr[c]) * double(xr[c]); });
      rs = float(1.0 / std::sqrt(ss / double(C) + double(eps)));
    } else {
      const double K = xr[0];
      const double md = sum16_scalar<double>(C, [&](int64_t c) { return double(xr[c]) - K; }) / double(C);
      const double ss = sum16_scalar<double>(C, [&](int64_t c) {
        const double d = (double(xr[c]) - K) - md;
        return d * d;
      });
      const double mu = K + md;
      hi = float(mu);
      lo = float(mu - double(hi));
      rs = float(1.0 / std::sqrt(ss / double(C) + double(eps)));
      r.mean[2 * n] = hi;
      r.mean[2 * n + 1] = lo;
    }
    r.rstd[n] = rs;
    auto xhat = [&](int64_t c) { return rms ? xr[c] * rs : ((xr[c] - hi) - lo) * rs; };
    for (int64_t c = 0; c < C; ++c) {
      float v = rms ? xr[c] * rs : ((xr[c] - hi) - lo) * rs;
      if (w) v = v * w[c];
      if (b) v = v + b[c];
      r.y[n * C + c] = v;
    }
    const float* dyr = dy.data() + n * C;
    auto g = [&](int64_t c) { return w ? dyr[c] * w[c] : dyr[c]; };
    const float sgx = sum16_scalar<float>(C, [&](int64_t c) { return g(c) * xhat(c); });
    const float mgx = sgx / float(C);
    if (rms) {
      for (int64_t c = 0; c < C; ++c) r.dx[n * C + c] += rs * (g(c) - xr[c] * rs * mgx);
    } else {
      const float mg = sum16_scalar<float>(C, g) / float(C);
      for (int64_t c = 0; c < C; ++c) r.dx[n * C + c] += rs * (g(c) - mg - ((xr[c] - hi) - lo) * rs * mgx);
    }
  }
  for (int64_t c = 0; c < C; ++c) {  // column sums in row order, started at +0, then added to dw, db
    float aw = 0.0f, ab = 0.0f;
    for (int64_t n = 0; n < N; ++n) {
      const float* xr = x.data() + n * C;
      const float xh =
          rms ? ((xr[c] - 0.0f) - 0.0f) * r.rstd[n] : ((xr[c] - r.mean[2 * n]) - r.mean[2 * n + 1]) * r.rstd[n];
      aw += dy[n * C + c] * xh;
      ab += dy[n * C + c];
    }
    r.dw[c] += aw;
    r.db[c] += ab;
  }
  return r;
}

// LayerNorm and RMSNorm in float through the public kernels: forward (y, the (hi, lo) mean, rstd) and
// backward (dx accumulated, dw, db) give the bits of the scalar evaluation in the documented order on
// every path, for 1 and 2 threads, widths 1-40 (all tails) and the model widths, with and without the
// affine parameters; rows of noise, rows far from 0 (1e5 + noise) and constant rows (var = 0: y = b).
TEST_P(VecPath, NormsEqualTheScalarBitsInTheDocumentedOrder) {
  std::mt19937 rng(29);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<int64_t> widths;
  for (int64_t c = 1; c <= 40; ++c) widths.push_back(c);
  for (const int64_t c : {64, 127, 128, 129, 384, 768}) widths.push_back(c);
  for (const int64_t C : widths) {
    const int64_t N = C >= 128 ? 300 : 37;  // C >= 128: N C over the parallel threshold (2 threads share rows)
    std::vector<float> x(N * C), dy(N * C), dx0(N * C), w(C), b(C);
    for (int64_t n = 0; n < N; ++n) {
      const int kind = n % 3;  // noise, far from 0, constant
      for (int64_t c = 0; c < C; ++c)
        x[n * C + c] = kind == 0 ? 2.0f * noise(rng) : kind == 1 ? 1e5f + noise(rng) : -3.25f;
    }
    for (auto& v : dy) v = noise(rng);
    for (auto& v : dx0) v = noise(rng);
    for (auto& v : w) v = 1.0f + 0.1f * noise(rng);
    for (auto& v : b) v = noise(rng);
    for (const bool rms : {false, true}) {
      for (const bool affine : {true, false}) {
        const float* wp = affine ? w.data() : nullptr;
        const float* bp = affine && !rms ? b.data() : nullptr;
        const NormRef want = norm_scalar(rms, x, dy, wp, bp, dx0, N, C, 1e-5f);
        for (const int threads : {1, 2}) {
          omp_set_num_threads(threads);
          std::vector<float> y(N * C), mean(2 * N), rstd(N), dx = dx0, dw(C, 0.0f), db(C, 0.0f);
          if (rms) {
            cpu::rms_norm_forward<float>(y.data(), rstd.data(), x.data(), wp, N, C, 1e-5f);
            cpu::rms_norm_backward<float>(dx.data(), dw.data(), dy.data(), x.data(), wp, rstd.data(), N, C);
          } else {
            cpu::layer_norm_forward<float>(y.data(), mean.data(), rstd.data(), x.data(), wp, bp, N, C, 1e-5f);
            cpu::layer_norm_backward<float>(dx.data(), dw.data(), db.data(), dy.data(), x.data(), wp, mean.data(),
                                            rstd.data(), N, C);
            EXPECT_EQ(first_mismatch(mean, want.mean), -1) << "C=" << C << " mean";
            EXPECT_EQ(first_mismatch(db, want.db), -1) << "C=" << C << " db";
          }
          const std::string what = std::string(vd::vec_isa_name(GetParam())) + (rms ? " rms" : " layer") +
                                   (affine ? " affine" : "") + " C=" + std::to_string(C) +
                                   " threads=" + std::to_string(threads);
          EXPECT_EQ(first_mismatch(y, want.y), -1) << what << " y: " << mismatch_text(x, y, want.y);
          EXPECT_EQ(first_mismatch(rstd, want.rstd), -1) << what << " rstd";
          EXPECT_EQ(first_mismatch(dx, want.dx), -1) << what << " dx: " << mismatch_text(x, dx, want.dx);
          EXPECT_EQ(first_mismatch(dw, want.dw), -1) << what << " dw";
          if (!rms) {  // a constant row normalises to exactly b (0 without it): var = 0, x - hi = 0
            for (int64_t c = 0; c < C; ++c) EXPECT_EQ(y[2 * C + c], affine ? b[c] : 0.0f) << what << " c=" << c;
          }
          // The variant that writes dx (what the autograd ops call), on a dx full of NaN: the bits of the
          // accumulating kernel on a zero-filled dx, and the same dw, db.
          std::vector<float> dxz(N * C, 0.0f), dxo(N * C, std::numeric_limits<float>::quiet_NaN());
          std::vector<float> dwz(C, 0.0f), dbz(C, 0.0f), dwo(C, 0.0f), dbo(C, 0.0f);
          if (rms) {
            cpu::rms_norm_backward<float>(dxz.data(), dwz.data(), dy.data(), x.data(), wp, rstd.data(), N, C);
            cpu::rms_norm_backward_overwrite<float>(dxo.data(), dwo.data(), dy.data(), x.data(), wp, rstd.data(), N, C);
          } else {
            cpu::layer_norm_backward<float>(dxz.data(), dwz.data(), dbz.data(), dy.data(), x.data(), wp, mean.data(),
                                            rstd.data(), N, C);
            cpu::layer_norm_backward_overwrite<float>(dxo.data(), dwo.data(), dbo.data(), dy.data(), x.data(), wp,
                                                      mean.data(), rstd.data(), N, C);
          }
          EXPECT_EQ(first_mismatch(dxo, dxz), -1) << what << " overwriting dx: " << mismatch_text(x, dxo, dxz);
          EXPECT_EQ(first_mismatch(dwo, dwz), -1) << what << " overwriting dx: dw";
          EXPECT_EQ(first_mismatch(dbo, dbz), -1) << what << " overwriting dx: db";
        }
      }
    }
  }
}

// AdamW in float through adamw_step_multi: the bits of optim.cpp's formula evaluated one element at a
// time, on every path and for 1 and 2 threads, over gradients with zeros, signed zeros, large and tiny
// values, infinities and NaN, on tensors whose lengths leave every vector tail.
TEST_P(VecPath, AdamWEqualsTheScalarBits) {
  std::mt19937 rng(31);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  const float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, bc1 = 1.0f - 0.9f * 0.9f * 0.9f,
              bc2 = 1.0f - 0.95f * 0.95f * 0.95f;
  const std::vector<int64_t> lens = {1, 7, 16, 17, 31, 33, 100, 40000};
  std::vector<std::vector<float>> p0, m0, v0, g;
  for (const int64_t n : lens) {
    std::vector<float> pp(n), mm(n), vv(n), gg(n);
    for (int64_t i = 0; i < n; ++i) {
      pp[i] = noise(rng);
      mm[i] = 0.1f * noise(rng);
      vv[i] = 0.01f * std::fabs(noise(rng));
      gg[i] = noise(rng) * std::pow(10.0f, float(int(rng() % 13) - 8));
    }
    if (n >= 7) {
      gg[0] = 0.0f, gg[1] = -0.0f, gg[2] = 1e30f, gg[3] = std::numeric_limits<float>::infinity();
      gg[4] = std::numeric_limits<float>::quiet_NaN(), gg[5] = std::numeric_limits<float>::denorm_min();
      vv[6] = 0.0f, mm[6] = 0.0f, gg[6] = 0.0f;
    }
    p0.push_back(pp), m0.push_back(mm), v0.push_back(vv), g.push_back(gg);
  }
  // The formula of optim.cpp, one element at a time.
  std::vector<std::vector<float>> wp = p0, wm = m0, wv = v0;
  for (size_t t = 0; t < lens.size(); ++t) {
    const float wd = t % 2 ? 0.1f : 0.0f;
    const float decay = 1.0f - lr * wd, step_size = lr / bc1, bc2_sqrt = std::sqrt(bc2);
    for (int64_t i = 0; i < lens[t]; ++i) {
      const float gi = g[t][i];
      const float mi = beta1 * wm[t][i] + (1.0f - beta1) * gi;
      const float vi = beta2 * wv[t][i] + (1.0f - beta2) * gi * gi;
      wm[t][i] = mi, wv[t][i] = vi;
      wp[t][i] = wp[t][i] * decay - step_size * (mi / (std::sqrt(vi) / bc2_sqrt + eps));
    }
  }
  for (const int threads : {1, 2}) {
    omp_set_num_threads(threads);
    std::vector<std::vector<float>> pp = p0, mm = m0, vv = v0;
    std::vector<cpu::AdamWTensor<float>> ts;
    for (size_t t = 0; t < lens.size(); ++t)
      ts.push_back({pp[t].data(), mm[t].data(), vv[t].data(), g[t].data(), lens[t], t % 2 ? 0.1f : 0.0f});
    cpu::adamw_step_multi<float>(ts.data(), static_cast<int64_t>(ts.size()), lr, beta1, beta2, eps, bc1, bc2);
    for (size_t t = 0; t < lens.size(); ++t) {
      const std::string what = std::string(vd::vec_isa_name(GetParam())) + " n=" + std::to_string(lens[t]) +
                               " threads=" + std::to_string(threads);
      EXPECT_EQ(first_mismatch(pp[t], wp[t]), -1) << what << " p: " << mismatch_text(g[t], pp[t], wp[t]);
      EXPECT_EQ(first_mismatch(mm[t], wm[t]), -1) << what << " m";
      EXPECT_EQ(first_mismatch(vv[t], wv[t]), -1) << what << " v";
    }
  }
}

// sum_dim_forward in float over a middle dim (a bias gradient: outer 1; and outer 3): each output is
// its column summed over R in row order from +0, on every path, for 1 and 2 threads, for inner widths
// that leave partial 64-column blocks.
TEST_P(VecPath, ColumnSumsEqualTheSequentialSums) {
  std::mt19937 rng(37);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  for (const int64_t outer : {1, 3}) {
    for (const int64_t inner : {2, 17, 64, 65, 200, 384}) {
      for (const int64_t R : {1, 5, 300}) {
        std::vector<float> x(outer * R * inner);
        for (auto& v : x) v = noise(rng) * std::pow(2.0f, float(int(rng() % 40) - 20));
        x[0] = -0.0f;
        std::vector<float> want(outer * inner);
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            float s = 0.0f;
            for (int64_t r = 0; r < R; ++r) s += x[(o * R + r) * inner + i];
            want[o * inner + i] = s;
          }
        for (const int threads : {1, 2}) {
          omp_set_num_threads(threads);
          std::vector<float> y(outer * inner, -7.0f);
          cpu::sum_dim_forward<float>(y.data(), x.data(), outer, R, inner);
          EXPECT_EQ(first_mismatch(y, want), -1) << vd::vec_isa_name(GetParam()) << " outer=" << outer << " R=" << R
                                                 << " inner=" << inner << " threads=" << threads;
        }
      }
    }
  }
}

// binary_forward / binary_backward in float (+, -, *, /): the bits of the scalar expressions, element
// by element, on every path and for 1 and 2 threads, over the special values of elementwise_inputs
// paired with a shifted copy of themselves (0 / 0, inf - inf, signed zeros, subnormal products).
TEST_P(VecPath, BinaryOpsEqualTheScalarBits) {
  const auto a = elementwise_inputs();
  std::vector<float> b(a.size()), dy(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    b[i] = a[(i * 7 + 3) % a.size()];
    dy[i] = a[(i * 13 + 5) % a.size()];
  }
  const int64_t n = static_cast<int64_t>(a.size());
  using posgrad::kernels::BinaryOp;
  for (const BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div}) {
    std::vector<float> want_y(a.size()), want_da(a.size()), want_db(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      switch (op) {
        case BinaryOp::Add: want_y[i] = a[i] + b[i], want_da[i] = 0.0f + dy[i], want_db[i] = 0.0f + dy[i]; break;
        case BinaryOp::Sub: want_y[i] = a[i] - b[i], want_da[i] = 0.0f + dy[i], want_db[i] = 0.0f + -dy[i]; break;
        case BinaryOp::Mul:
          want_y[i] = a[i] * b[i], want_da[i] = 0.0f + dy[i] * b[i], want_db[i] = 0.0f + dy[i] * a[i];
          break;
        case BinaryOp::Div:
          want_y[i] = a[i] / b[i], want_da[i] = 0.0f + dy[i] / b[i];
          want_db[i] = 0.0f + -dy[i] * ((a[i] / b[i]) / b[i]);
          break;
      }
    }
    for (const int threads : {1, 2}) {
      omp_set_num_threads(threads);
      std::vector<float> y(a.size()), da(a.size(), -7.0f), db(a.size(), -7.0f);
      cpu::binary_forward<float>(y.data(), a.data(), b.data(), n, op);
      cpu::binary_backward<float>(da.data(), db.data(), dy.data(), a.data(), b.data(), n, op);
      const std::string what = std::string(vd::vec_isa_name(GetParam())) + " op " + std::to_string(int(op)) +
                               " threads=" + std::to_string(threads);
      EXPECT_EQ(first_mismatch(y, want_y), -1) << what << ": " << mismatch_text(a, y, want_y);
      EXPECT_EQ(first_mismatch(da, want_da), -1) << what << " da: " << mismatch_text(a, da, want_da);
      EXPECT_EQ(first_mismatch(db, want_db), -1) << what << " db: " << mismatch_text(a, db, want_db);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllVecIsas, VecPath, ::testing::ValuesIn(kVecIsas),
                         [](const ::testing::TestParamInfo<vd::vec_isa>& p) {
                           return std::string(vd::vec_isa_name(p.param));
                         });

// ---- the fused attention -----------------------------------------------------------------------

// One attention problem (Distance bias, causal, a sink per head; T = 130: two 64-row tiles and a
// ragged third, rows of every valid length) run forward and backward in float or double.
template <typename T>
struct AttentionRun {
  std::vector<T> o, stats, dq, dk, dv, dbias, dsinks;
};

constexpr int64_t kB = 2, kH = 3, kT = 130, kD = 16;

template <typename T>
AttentionRun<T> run_attention() {
  std::mt19937 rng(2025);
  std::normal_distribution<double> nd(0.0, 1.0);
  auto draw = [&](int64_t n, double s) {
    std::vector<T> v(static_cast<size_t>(n));
    for (auto& e : v) e = static_cast<T>(s * nd(rng));
    return v;
  };
  const int64_t nq = kB * kH * kT * kD, nbias = kH * (2 * kT - 1);
  const auto q = draw(nq, 1.0), k = draw(nq, 1.0), v = draw(nq, 1.0), dout = draw(nq, 1.0);
  const auto bias = draw(nbias, 0.5), sinks = draw(kH, 1.0);
  const T scale = static_cast<T>(1.0 / std::sqrt(double(kD)));
  AttentionRun<T> r;
  r.o.assign(nq, T(0));
  r.stats.assign(kB * kH * kT * 2, T(0));
  r.dq.assign(nq, T(0));
  r.dk.assign(nq, T(0));
  r.dv.assign(nq, T(0));
  r.dbias.assign(nbias, T(0));
  r.dsinks.assign(kH, T(0));
  std::vector<T> scratch(
      static_cast<size_t>(std::max(cpu::attention_scratch_elems(ScoreBias::Distance, 0, kB, kH, kT, kT, kD, 0),
                                   cpu::attention_scratch_elems(ScoreBias::Distance, 1, kB, kH, kT, kT, kD, 0))));
  cpu::attention_forward<T>(r.o.data(), r.stats.data(), scratch.data(), q.data(), k.data(), v.data(), bias.data(),
                            nullptr, nullptr, sinks.data(), nullptr, nullptr, kB, kH, kT, kT, kD, 0, 0,
                            ScoreBias::Distance, true, scale);
  cpu::attention_backward<T>(r.dq.data(), r.dk.data(), r.dv.data(), r.dbias.data(), nullptr, nullptr, r.dsinks.data(),
                             scratch.data(), dout.data(), q.data(), k.data(), v.data(), r.o.data(), r.stats.data(),
                             bias.data(), nullptr, nullptr, sinks.data(), nullptr, nullptr, kB, kH, kT, kT, kD, 0, 0,
                             ScoreBias::Distance, true, scale);
  return r;
}

bool same_bits(const AttentionRun<float>& a, const AttentionRun<float>& b, std::string& which) {
  const std::pair<const char*, std::pair<const std::vector<float>*, const std::vector<float>*>> parts[] = {
      {"o", {&a.o, &b.o}},
      {"stats", {&a.stats, &b.stats}},
      {"dq", {&a.dq, &b.dq}},
      {"dk", {&a.dk, &b.dk}},
      {"dv", {&a.dv, &b.dv}},
      {"dbias", {&a.dbias, &b.dbias}},
      {"dsinks", {&a.dsinks, &b.dsinks}}};
  for (const auto& [name, p] : parts) {
    const int64_t at = first_mismatch(*p.first, *p.second);
    if (at >= 0) {
      which = std::string(name) + "[" + std::to_string(at) + "]";
      return false;
    }
  }
  return true;
}

// max |a - b| / max(1, max |b|) over one output.
template <typename A>
double rel_diff(const std::vector<A>& a, const std::vector<double>& b) {
  double d = 0, m = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::fabs(double(a[i]) - b[i]));
    m = std::max(m, std::fabs(b[i]));
  }
  return d / m;
}

class AttentionOnGemmPath : public ::testing::TestWithParam<gd::gemm_isa> {
 protected:
  void SetUp() override {
    if (static_cast<int>(GetParam()) > static_cast<int>(gd::gemm_best_isa())) {
      GTEST_SKIP() << "this CPU has no " << gd::gemm_isa_name(GetParam()) << " GEMM (its best is "
                   << gd::gemm_isa_name(gd::gemm_best_isa()) << ")";
    }
    ASSERT_EQ(gd::gemm_set_isa(GetParam()), GetParam());
  }
  PathGuard guard_;
};

// With the GEMM on one path: every vec path and both thread counts give the bits of the baseline
// vec path on one thread. (Vec paths the CPU lacks are left out; VecPath reports them SKIPPED.)
TEST_P(AttentionOnGemmPath, SameBitsOnEveryVecPathAndThreadCount) {
  vd::vec_set_isa(vd::vec_isa::baseline);
  omp_set_num_threads(1);
  const auto ref = run_attention<float>();
  for (const auto visa : kVecIsas) {
    if (static_cast<int>(visa) > static_cast<int>(vd::vec_best_isa())) continue;
    ASSERT_EQ(vd::vec_set_isa(visa), visa);
    for (const int threads : {1, 2}) {
      omp_set_num_threads(threads);
      std::string which;
      EXPECT_TRUE(same_bits(run_attention<float>(), ref, which))
          << "gemm " << gd::gemm_isa_name(GetParam()) << ", vec " << vd::vec_isa_name(visa) << ", " << threads
          << " threads: first difference at " << which;
    }
  }
}

// Between GEMM paths only closeness is promised: each path's float result is within 4e-6 of a
// double-precision run (relative to the largest magnitude of each output, at least 1; measured on
// the development machine: at most 9.5e-7, dsinks on the AVX paths), so two paths differ by at
// most twice that.
TEST_P(AttentionOnGemmPath, WithinTheStatedBoundOfDoublePrecision) {
  const auto f = run_attention<float>();
  const auto d = run_attention<double>();
  const double bound = 4e-6;
  EXPECT_LE(rel_diff(f.o, d.o), bound) << gd::gemm_isa_name(GetParam());
  EXPECT_LE(rel_diff(f.dq, d.dq), bound) << gd::gemm_isa_name(GetParam());
  EXPECT_LE(rel_diff(f.dk, d.dk), bound) << gd::gemm_isa_name(GetParam());
  EXPECT_LE(rel_diff(f.dv, d.dv), bound) << gd::gemm_isa_name(GetParam());
  EXPECT_LE(rel_diff(f.dbias, d.dbias), bound) << gd::gemm_isa_name(GetParam());
  EXPECT_LE(rel_diff(f.dsinks, d.dsinks), bound) << gd::gemm_isa_name(GetParam());
}

INSTANTIATE_TEST_SUITE_P(AllGemmIsas, AttentionOnGemmPath, ::testing::ValuesIn(kGemmIsas),
                         [](const ::testing::TestParamInfo<gd::gemm_isa>& p) {
                           return std::string(gd::gemm_isa_name(p.param));
                         });

// ---- the GEMM between paths ----------------------------------------------------------------------

class GemmPath : public ::testing::TestWithParam<gd::gemm_isa> {
 protected:
  void SetUp() override {
    if (static_cast<int>(GetParam()) > static_cast<int>(gd::gemm_best_isa())) {
      GTEST_SKIP() << "this CPU has no " << gd::gemm_isa_name(GetParam()) << " GEMM (its best is "
                   << gd::gemm_isa_name(gd::gemm_best_isa()) << ")";
    }
  }
  PathGuard guard_;
};

// Against the scalar path: |C_path - C_scalar| <= 2 * 2 (K + 4) eps (|alpha| sum_k |a_ik b_kj| +
// |beta c_ij|), twice the per-path bound test_gemm.cpp checks against the exact product; and the
// same bits when the path runs the product again.
TEST_P(GemmPath, AgreesWithTheScalarPathWithinTwiceTheDotProductBound) {
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t dims[][3] = {{64, 64, 64}, {37, 129, 700}, {130, 16, 130}, {5, 600, 300}};
  const float alpha = 1.25f, beta = 0.5f;
  const double eps = std::numeric_limits<float>::epsilon();
  for (const auto& d : dims) {
    const int64_t M = d[0], N = d[1], K = d[2];
    std::vector<float> A(M * K), B(K * N), C0(M * N);
    for (auto& e : A) e = u(rng);
    for (auto& e : B) e = u(rng);
    for (auto& e : C0) e = u(rng);
    auto product = [&](gd::gemm_isa isa) {
      gd::gemm_set_isa(isa);
      std::vector<float> C = C0;
      cpu::gemm<float>(C.data(), A.data(), B.data(), M, N, K, N, K, N, false, false, alpha, beta);
      return C;
    };
    const auto scalar = product(gd::gemm_isa::scalar);
    const auto path = product(GetParam());
    const auto again = product(GetParam());
    EXPECT_EQ(first_mismatch(again, path), -1)
        << gd::gemm_isa_name(GetParam()) << " M=" << M << " N=" << N << " K=" << K << ": a second run changed the bits";
    int64_t bad = 0;
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        double mag = 0;
        for (int64_t k = 0; k < K; ++k) mag += std::fabs(double(A[i * K + k]) * B[k * N + j]);
        const double scale = std::fabs(alpha) * mag + std::fabs(beta * C0[i * N + j]);
        const double bound = 2.0 * 2.0 * double(K + 4) * eps * scale;
        if (!(std::fabs(double(path[i * N + j]) - scalar[i * N + j]) <= bound) && bad++ < 3) {
          ADD_FAILURE() << gd::gemm_isa_name(GetParam()) << " M=" << M << " N=" << N << " K=" << K << " at (" << i
                        << "," << j << "): " << path[i * N + j] << " vs scalar " << scalar[i * N + j] << ", bound "
                        << bound;
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(AllGemmIsas, GemmPath, ::testing::ValuesIn(kGemmIsas),
                         [](const ::testing::TestParamInfo<gd::gemm_isa>& p) {
                           return std::string(gd::gemm_isa_name(p.param));
                         });

// ---- training on one level ----------------------------------------------------------------------

// The three levels an x86-64 machine can be on, each selecting both paths: baseline (scalar GEMM,
// baseline vec), AVX2 (+FMA for the GEMM), AVX-512.
struct Level {
  const char* name;
  gd::gemm_isa gemm;
  vd::vec_isa vec;
};
void PrintTo(const Level& l, std::ostream* os) { *os << l.name; }
constexpr Level kLevels[] = {{"baseline", gd::gemm_isa::scalar, vd::vec_isa::baseline},
                             {"avx2", gd::gemm_isa::avx2, vd::vec_isa::avx2},
                             {"avx512", gd::gemm_isa::avx512, vd::vec_isa::avx512}};

bool level_available(const Level& l) {
  return static_cast<int>(l.gemm) <= static_cast<int>(gd::gemm_best_isa()) &&
         static_cast<int>(l.vec) <= static_cast<int>(vd::vec_best_isa());
}

// Three AdamW steps of a tiny GPT (t5 bias: attention with a Distance modifier; exact GELU) with
// every kernel on `level`, the thread count fixed at 2 or alternating 1, 2, 1.
std::vector<float> train_weights(const Level& level, bool alternate_threads) {
  gd::gemm_set_isa(level.gemm);
  vd::vec_set_isa(level.vec);
  posgrad::test::TempDir d;
  auto c = posgrad::train::train_preset("tiny");
  c.corpus = posgrad::test::write_corpus(d);
  c.out_dir = d.str("run");
  c.model.pos.kind = "t5";
  c.model.n_layer = 2, c.model.n_head = 4, c.model.n_embd = 64, c.model.block_size = 32;
  c.batch_size = 8;
  c.threads = 2;
  posgrad::train::Trainer t(c, false);
  for (int s = 0; s < 3; ++s) {
    omp_set_num_threads(alternate_threads ? 1 + s % 2 : 2);
    t.step();
  }
  std::vector<float> all;
  for (auto& [n, p] : t.model().named_parameters()) {
    const auto v = p.to_float_vector();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

class TrainingOnLevel : public ::testing::TestWithParam<Level> {
 protected:
  void SetUp() override {
    if (!level_available(GetParam())) {
      GTEST_SKIP() << "this CPU cannot run the " << GetParam().name << " level (best GEMM "
                   << gd::gemm_isa_name(gd::gemm_best_isa()) << ", best vec " << vd::vec_isa_name(vd::vec_best_isa())
                   << ")";
    }
  }
  PathGuard guard_;
};

// On one level the weights do not depend on the thread count; against the baseline level they
// differ (the GEMM's FMAs) but stay within 1e-5 of the largest weight (measured on the development
// machine after three steps: 1.15e-6 for AVX2 and AVX-512, whose weights were identical here: every
// product of this model has K <= 256, one FMA chain per element on both).
TEST_P(TrainingOnLevel, SameWeightsForAnyThreadCountAndCloseToBaseline) {
  const auto fixed = train_weights(GetParam(), false);
  const auto alternating = train_weights(GetParam(), true);
  EXPECT_EQ(first_mismatch(alternating, fixed), -1) << GetParam().name << ": weights depend on the thread count";
  static const auto base = train_weights(kLevels[0], false);
  ASSERT_EQ(base.size(), fixed.size());
  double d = 0, m = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    d = std::max(d, std::fabs(double(fixed[i]) - base[i]));
    m = std::max(m, std::fabs(double(base[i])));
  }
  EXPECT_LE(d, 1e-5 * m) << GetParam().name << " vs baseline: max difference " << d;
}

INSTANTIATE_TEST_SUITE_P(AllLevels, TrainingOnLevel, ::testing::ValuesIn(kLevels),
                         [](const ::testing::TestParamInfo<Level>& p) { return std::string(p.param.name); });

}  // namespace
