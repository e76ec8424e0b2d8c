// test_cuda.cpp — the CUDA backend itself: device memory (round trips, the caching allocator's
// reuse and accounting), Philox fills identical to the CPU's, cuBLAS GEMM in every transpose
// combination against the CPU GEMM, deterministic embedding backward, and the clear error when no
// GPU is present; then the CUDA kernels themselves, run on the CPU emulation (support/cuda_emulation.h)
// against the CPU kernels. Per-op CPU-vs-CUDA parity lives in test_op_registry.cpp (CudaMatchesCpu).
// Tests that need a GPU start with POSGRAD_REQUIRE_CUDA() and report SKIPPED without one; the
// no-GPU error test runs everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "support/cuda_emulation.h"
#include "support/test_util.h"
#include "tensor/kernels/kernels.h"
#include "tensor/random.h"
#include "tensor/tensor.h"

using namespace posgrad;

namespace {

bool mentions_cuda(const std::string& s) { return s.find("CUDA") != std::string::npos; }

// A float tensor on the CPU with values in [lo, hi).
[[maybe_unused]] Tensor uniform(const Shape& shape, uint64_t seed, DType dt = DType::Float32, double lo = -1,
                                double hi = 1) {
  Generator g(seed);
  return rand(shape, g, dt, Device::cpu(), lo, hi);
}

}  // namespace

// Runs everywhere: without a GPU every CUDA entry point must throw DeviceError naming CUDA.
TEST(CudaBackend, NoDeviceGivesClearError) {
  if (cuda_available()) {
    // With a GPU the same calls must simply work.
    Tensor t = Tensor::zeros({2}, DType::Float32, Device::cuda());
    EXPECT_EQ(t.to(Device::cpu()).to_vector(), (std::vector<double>{0, 0}));
    return;
  }
  EXPECT_FALSE(cuda_available());  // cached, and never throws
  try {
    (void)Tensor::zeros({2}, DType::Float32, Device::cuda());
    FAIL() << "Tensor::zeros on cuda did not throw without a GPU";
  } catch (const DeviceError& e) {
    EXPECT_TRUE(mentions_cuda(e.what())) << e.what();
  }
  try {
    (void)Tensor::ones({3}).to(Device::cuda());
    FAIL() << "to(cuda) did not throw without a GPU";
  } catch (const DeviceError& e) {
    EXPECT_TRUE(mentions_cuda(e.what())) << e.what();
  }
  EXPECT_THROW(backend(DeviceType::CUDA), DeviceError);
}

TEST(CudaBackend, HostDeviceRoundTrip) {
  POSGRAD_REQUIRE_CUDA();
  const std::vector<double> v{1.5, -2.25, 3.0, 0.0, 1e-30, -7.0};
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor c = Tensor::from_vector(v, {2, 3}, dt);
    Tensor g = c.to(Device::cuda());
    EXPECT_TRUE(g.device().is_cuda());
    EXPECT_EQ(g.to(Device::cpu()).to_vector(), c.to_vector()) << dtype_name(dt);
    // device -> device copy (clone) and a strided (transposed) copy on the device.
    EXPECT_EQ(g.clone().to(Device::cpu()).to_vector(), c.to_vector());
    EXPECT_EQ(g.t().contiguous().to(Device::cpu()).to_vector(), c.t().contiguous().to_vector());
  }
  Tensor ints = Tensor::from_ints({3, -1, 1LL << 40, 0}, {4});
  EXPECT_EQ(ints.to(Device::cuda()).to(Device::cpu()).to_int_vector(), ints.to_int_vector());
  // dtype casts on the device (bool is x != 0).
  Tensor f = Tensor::from_vector(std::vector<double>{0.0, 2.5, -1.0}, {3}).to(Device::cuda());
  EXPECT_EQ(f.to(DType::Bool).to(Device::cpu()).to_vector(), (std::vector<double>{0, 1, 1}));
  EXPECT_EQ(f.to(DType::Float64).to(Device::cpu()).to_vector(), (std::vector<double>{0.0, 2.5, -1.0}));
  // fill and zero
  EXPECT_EQ(Tensor::full({3}, 4.5, DType::Float32, Device::cuda()).to(Device::cpu()).to_vector(),
            (std::vector<double>{4.5, 4.5, 4.5}));
  EXPECT_EQ(Tensor::zeros({2}, DType::Int64, Device::cuda()).to(Device::cpu()).to_vector(),
            (std::vector<double>{0, 0}));
}

TEST(CudaBackend, AllocatorReusesBlocksAndCountsPeak) {
  POSGRAD_REQUIRE_CUDA();
  DeviceBackend& be = backend(DeviceType::CUDA);
  be.synchronize();
  const size_t base = be.current_bytes();
  be.reset_peak();
  void* first = nullptr;
  {
    Tensor a = Tensor::empty({1000}, DType::Float32, Device::cuda());
    first = a.raw_data();
    EXPECT_GE(be.current_bytes(), base + 4000);
    Tensor b = Tensor::empty({1 << 20}, DType::Float32, Device::cuda());
    EXPECT_GE(be.peak_bytes(), base + 4000 + (4u << 20));
  }
  EXPECT_EQ(be.current_bytes(), base);  // freed blocks are cached, not counted
  EXPECT_GE(be.peak_bytes(), base + 4000 + (4u << 20));
  Tensor again = Tensor::empty({1000}, DType::Float32, Device::cuda());
  EXPECT_EQ(again.raw_data(), first) << "a freed block of the same rounded size should be reused";
  be.reset_peak();
  EXPECT_EQ(be.peak_bytes(), be.current_bytes());
}

TEST(CudaBackend, PhiloxFillsMatchCpu) {
  POSGRAD_REQUIRE_CUDA();
  const Shape shape{1031};
  for (DType dt : {DType::Float32, DType::Float64}) {
    Generator gc(1234), gg(1234);
    (void)gc.advance(17);
    (void)gg.advance(17);
    // Uniform: bit-identical (exact 24-bit u, separately rounded multiply and add).
    Tensor uc = rand(shape, gc, dt, Device::cpu(), -2.0, 3.0);
    Tensor ug = rand(shape, gg, dt, Device::cuda(), -2.0, 3.0);
    EXPECT_EQ(uc.to_vector(), ug.to(Device::cpu()).to_vector()) << dtype_name(dt);
    // Normal: same Box-Muller; CUDA's double log/cos may differ from glibc's by an ulp.
    Tensor nc = randn(shape, gc, dt, Device::cpu(), 0.5, 2.0);
    Tensor ng = randn(shape, gg, dt, Device::cuda(), 0.5, 2.0);
    auto a = nc.to_vector(), b = ng.to(Device::cpu()).to_vector();
    const double tol = dt == DType::Float32 ? 1e-6 : 1e-13;
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol * (1 + std::fabs(a[i]))) << i;
    EXPECT_EQ(gc.state().offset, gg.state().offset);
  }
  // Dropout drops the same elements on both backends.
  Tensor x = Tensor::ones({4097});
  Generator dc(5), dg(5);
  Tensor yc = dropout(x, 0.3, true, dc);
  Tensor yg = dropout(x.to(Device::cuda()), 0.3, true, dg);
  EXPECT_EQ(yc.to_vector(), yg.to(Device::cpu()).to_vector());
}

#if POSGRAD_HAVE_CUDA  // the tests below call kernels::cuda:: directly
namespace {

template <typename T>
void gemm_case(bool ta, bool tb, T beta, bool batched) {
  const int64_t M = 37, N = 29, K = 53, batch = batched ? 3 : 1;
  // Padded leading dimensions (ld > stored row width) to exercise the strides.
  const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
  const int64_t lda = a_cols + 3, ldb = b_cols + 5, ldc = N + 2;
  const DType dt = dtype_of<T>::value;
  Tensor A = uniform({batch, a_rows, lda}, 1, dt), B = uniform({b_rows, ldb}, 2, dt);  // B broadcast (stride 0)
  Tensor C0 = uniform({batch, M, ldc}, 3, dt);
  if (beta == T(0)) C0 = Tensor::full({batch, M, ldc}, std::numeric_limits<double>::quiet_NaN(), dt);
  Tensor Cc = C0.clone(), Cg = C0.to(Device::cuda());
  Tensor Ag = A.to(Device::cuda()), Bg = B.to(Device::cuda());
  const T alpha = T(0.7);
  kernels::cpu::gemm_batched<T>(Cc.data<T>(), A.data<T>(), B.data<T>(), batch, M, N, K, ldc, lda, ldb, M * ldc,
                                a_rows * lda, 0, ta, tb, alpha, beta);
  if (batched)
    kernels::cuda::gemm_batched<T>(Cg.data<T>(), Ag.data<T>(), Bg.data<T>(), batch, M, N, K, ldc, lda, ldb, M * ldc,
                                   a_rows * lda, 0, ta, tb, alpha, beta);
  else
    kernels::cuda::gemm<T>(Cg.data<T>(), Ag.data<T>(), Bg.data<T>(), M, N, K, ldc, lda, ldb, ta, tb, alpha, beta);
  auto c = Cc.to_vector(), g = Cg.to(Device::cpu()).to_vector();
  const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < ldc; ++j) {
        const size_t at = static_cast<size_t>((b * M + i) * ldc + j);
        if (j >= N) {  // padding columns are never touched
          if (beta != T(0)) {
            EXPECT_EQ(g[at], c[at]);
          }
          continue;
        }
        ASSERT_TRUE(std::isfinite(g[at])) << "beta == 0 must not read C";
        ASSERT_NEAR(c[at], g[at], tol * K) << "ta=" << ta << " tb=" << tb << " b=" << b << " i=" << i << " j=" << j;
      }
}

}  // namespace
#endif  // POSGRAD_HAVE_CUDA

// Without CUDA support compiled in, cuda_available() is false and the tests below are SKIPPED;
// their bodies (which name kernels::cuda::) are only compiled with CUDA.
TEST(CudaBackend, GemmAllTransposesMatchCpu) {
  POSGRAD_REQUIRE_CUDA();
#if POSGRAD_HAVE_CUDA
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool batched : {false, true}) {
        gemm_case<float>(ta, tb, 0.0f, batched);
        gemm_case<float>(ta, tb, 0.5f, batched);
        gemm_case<double>(ta, tb, 0.0, batched);
        gemm_case<double>(ta, tb, 0.5, batched);
      }
  // matmul through autograd on the device, against the CPU.
  Tensor a = uniform({5, 7, 9}, 4), b = uniform({9, 11}, 5);
  Tensor yc = matmul(a, b), yg = matmul(a.to(Device::cuda()), b.to(Device::cuda()));
  auto x = yc.to_vector(), y = yg.to(Device::cpu()).to_vector();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 1e-5);
#endif
}

TEST(CudaBackend, EmbeddingBackwardIsDeterministicAndMatchesCpu) {
  POSGRAD_REQUIRE_CUDA();
#if POSGRAD_HAVE_CUDA
  // Many repeated ids: the scatter-add must sum each row in the CPU's order (no atomics).
  const int64_t N = 3000, V = 13, C = 130;
  std::vector<int64_t> ids(N);
  for (int64_t n = 0; n < N; ++n) ids[n] = (n * 7 + n / 5) % V;
  Tensor idx = Tensor::from_ints(ids, {N});
  Tensor dy = uniform({N, C}, 9);
  Tensor dtc = Tensor::zeros({V, C});
  kernels::cpu::embedding_backward<float>(dtc.data<float>(), dy.data<float>(), idx.data<int64_t>(), N, V, C);
  Tensor idg = idx.to(Device::cuda()), dyg = dy.to(Device::cuda());
  std::vector<double> first;
  for (int rep = 0; rep < 2; ++rep) {
    Tensor dtg = Tensor::zeros({V, C}, DType::Float32, Device::cuda());
    kernels::cuda::embedding_backward<float>(dtg.data<float>(), dyg.data<float>(), idg.data<int64_t>(), N, V, C);
    auto got = dtg.to(Device::cpu()).to_vector();
    if (rep == 0)
      first = got;
    else
      EXPECT_EQ(got, first) << "run-to-run difference";
  }
  EXPECT_EQ(first, dtc.to_vector()) << "same summation order as the CPU: bit-identical";
#endif
}

TEST(CudaBackend, SumSquaresOnDevice) {
  POSGRAD_REQUIRE_CUDA();
#if POSGRAD_HAVE_CUDA
  Tensor x = uniform({100003}, 21);
  double ref = 0;
  kernels::cpu::sum_squares<float>(&ref, x.data<float>(), x.numel());
  Tensor out = Tensor::empty({1}, DType::Float64, Device::cuda());
  Tensor xg = x.to(Device::cuda());
  kernels::cuda::sum_squares<float>(out.data<double>(), xg.data<float>(), xg.numel());
  EXPECT_NEAR(out.item(), ref, 1e-9 * ref);
#endif
}

// ---- the CUDA kernels on the CPU emulation (support/cuda_emulation.h) ------------------------------

namespace {

namespace cpuk = ::posgrad::kernels::cpu;
namespace emuk = ::emu::posgrad::kernels::cuda;
using kernels::BinaryOp;
using kernels::UnaryOp;

template <typename T>
std::vector<T> rnd(size_t n, uint64_t seed, double lo = -1, double hi = 1) {
  std::vector<T> v(n);
  kernels::cpu::philox_uniform<T>(v.data(), static_cast<int64_t>(n), seed, 0, T(lo), T(hi));
  return v;
}

template <typename T>
void expect_close(const std::vector<T>& a, const std::vector<T>& b, double tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
    if (std::isnan(x) && std::isnan(y)) continue;
    if (std::isinf(x) || std::isinf(y)) {
      ASSERT_EQ(x, y) << what << " [" << i << "]";
      continue;
    }
    ASSERT_NEAR(x, y, tol * (1 + std::fabs(x))) << what << " [" << i << "]";
  }
}

#define POSGRAD_REQUIRE_EMULATION() \
  if (!emu::emulation_supported()) GTEST_SKIP() << "CUDA emulation is not supported under AddressSanitizer"

}  // namespace

TEST(CudaKernelsEmulated, MemoryAndRandom) {
  POSGRAD_REQUIRE_EMULATION();
  // copy_strided: a (3, 4, 5) transpose-like permutation into a contiguous destination.
  const int64_t shape[3] = {3, 4, 5}, ys[3] = {20, 5, 1}, xs[3] = {1, 3, 12};
  auto x = rnd<double>(60, 1);
  std::vector<double> yc(60, -9), ye(60, -9);
  cpuk::copy_strided<double>(yc.data(), x.data(), 3, shape, ys, xs);
  emuk::copy_strided<double>(ye.data(), x.data(), 3, shape, ys, xs);
  EXPECT_EQ(yc, ye);
  std::vector<uint8_t> bc(60), be(60);
  x[7] = 0;
  cpuk::cast<uint8_t, double>(bc.data(), x.data(), 60);
  emuk::cast<uint8_t, double>(be.data(), x.data(), 60);
  EXPECT_EQ(bc, be);
  std::vector<float> f(1000, 1.f);
  emuk::fill<float>(f.data(), 999, 2.5f);
  EXPECT_EQ(f[998], 2.5f);
  EXPECT_EQ(f[999], 1.f);
  auto g = rnd<float>(1000, 2), ac = f, ae = f;
  cpuk::axpy<float>(ac.data(), g.data(), 1000, 0.3f);
  emuk::axpy<float>(ae.data(), g.data(), 1000, 0.3f);
  EXPECT_EQ(ac, ae);
  double sc = 0, se = 0;
  auto big = rnd<float>(70001, 3);
  cpuk::sum_squares<float>(&sc, big.data(), 70001);
  emuk::sum_squares<float>(&se, big.data(), 70001);
  EXPECT_NEAR(sc, se, 1e-10 * sc);
  // Philox fills: the same formulas (host math here, so normals are exact too).
  for (uint64_t off : {0ull, 12345ull}) {
    std::vector<float> uc(777), ue(777), nc(777), ne(777);
    cpuk::philox_uniform<float>(uc.data(), 777, 42, off, -2.f, 3.f);
    emuk::philox_uniform<float>(ue.data(), 777, 42, off, -2.f, 3.f);
    EXPECT_EQ(uc, ue);
    cpuk::philox_normal<float>(nc.data(), 777, 42, off, 0.5f, 2.f);
    emuk::philox_normal<float>(ne.data(), 777, 42, off, 0.5f, 2.f);
    EXPECT_EQ(nc, ne);
  }
}

TEST(CudaKernelsEmulated, Elementwise) {
  POSGRAD_REQUIRE_EMULATION();
  const int64_t n = 1500;
  auto x = rnd<double>(n, 4, 0.1, 2.0), dy = rnd<double>(n, 5), b = rnd<double>(n, 6, 0.5, 1.5);
  std::vector<double> y(n);
  for (int64_t i = 0; i < n; i += 3) x[i] = -x[i];  // negatives for relu/gelu/silu (log/sqrt/pow skip them)
  for (UnaryOp op :
       {UnaryOp::Neg, UnaryOp::Exp, UnaryOp::Log, UnaryOp::Sqrt, UnaryOp::Tanh, UnaryOp::Relu, UnaryOp::Gelu,
        UnaryOp::GeluTanh, UnaryOp::Silu, UnaryOp::Pow, UnaryOp::AddScalar, UnaryOp::MulScalar, UnaryOp::ClampMin}) {
    std::vector<double> in = x;
    if (op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Pow)
      for (auto& v : in) v = std::fabs(v);
    std::vector<double> yc(n), ye(n), dxc(n, 0.25), dxe(n, 0.25);
    cpuk::unary_forward<double>(yc.data(), in.data(), n, op, 1.7);
    emuk::unary_forward<double>(ye.data(), in.data(), n, op, 1.7);
    expect_close(yc, ye, 1e-15, kernels::unary_op_name(op));
    cpuk::unary_backward<double>(dxc.data(), dy.data(), in.data(), yc.data(), n, op, 1.7);
    emuk::unary_backward<double>(dxe.data(), dy.data(), in.data(), yc.data(), n, op, 1.7);
    expect_close(dxc, dxe, 1e-15, std::string(kernels::unary_op_name(op)) + " backward");
  }
  for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div}) {
    std::vector<double> yc(n), ye(n), dac(n, 1), dae(n, 1), dbc(n, 2), dbe(n, 2);
    cpuk::binary_forward<double>(yc.data(), x.data(), b.data(), n, op);
    emuk::binary_forward<double>(ye.data(), x.data(), b.data(), n, op);
    EXPECT_EQ(yc, ye) << kernels::binary_op_name(op);
    cpuk::binary_backward<double>(dac.data(), dbc.data(), dy.data(), x.data(), b.data(), n, op);
    emuk::binary_backward<double>(dae.data(), dbe.data(), dy.data(), x.data(), b.data(), n, op);
    EXPECT_EQ(dac, dae) << kernels::binary_op_name(op);
    EXPECT_EQ(dbc, dbe) << kernels::binary_op_name(op);
    emuk::binary_backward<double>(nullptr, dbe.data(), dy.data(), x.data(), b.data(), n, op);  // null da
  }
  std::vector<uint8_t> mask(n);
  for (int64_t i = 0; i < n; ++i) mask[i] = (i * 7) % 3 == 0;
  std::vector<float> xf = rnd<float>(n, 8), dyf = rnd<float>(n, 9), yc(n), ye(n), dxc(n, 0.5f), dxe(n, 0.5f);
  cpuk::masked_fill_forward<float>(yc.data(), xf.data(), mask.data(), n, -3.f);
  emuk::masked_fill_forward<float>(ye.data(), xf.data(), mask.data(), n, -3.f);
  EXPECT_EQ(yc, ye);
  cpuk::masked_fill_backward<float>(dxc.data(), dyf.data(), mask.data(), n);
  emuk::masked_fill_backward<float>(dxe.data(), dyf.data(), mask.data(), n);
  EXPECT_EQ(dxc, dxe);
  cpuk::dropout_forward<float>(yc.data(), xf.data(), n, 0.3f, 77, 5);
  emuk::dropout_forward<float>(ye.data(), xf.data(), n, 0.3f, 77, 5);
  EXPECT_EQ(yc, ye);
  cpuk::dropout_backward<float>(dxc.data(), dyf.data(), n, 0.3f, 77, 5);
  emuk::dropout_backward<float>(dxe.data(), dyf.data(), n, 0.3f, 77, 5);
  EXPECT_EQ(dxc, dxe);
}

TEST(CudaKernelsEmulated, Reductions) {
  POSGRAD_REQUIRE_EMULATION();
  struct Case {
    int64_t outer, R, inner;
  };
  // {2, 300, 5} and {1, 1000, 3}: few outputs over many rows, split into row chunks (reduction_chunks).
  for (Case c : {Case{3, 7, 1}, Case{5, 300, 1}, Case{2, 9, 13}, Case{1, 1, 1}, Case{2, 300, 5}, Case{1, 1000, 3}}) {
    const int64_t n = c.outer * c.R * c.inner, m = c.outer * c.inner;
    auto x = rnd<double>(n, 10);
    for (int64_t i = 0; i < n; i += 5) x[i] = 0.75;  // ties: the first maximum must win
    std::vector<double> yc(m), ye(m), dxc(n, 0.1), dxe(n, 0.1);
    auto dy = rnd<double>(m, 11);
    cpuk::sum_dim_forward<double>(yc.data(), x.data(), c.outer, c.R, c.inner);
    emuk::sum_dim_forward<double>(ye.data(), x.data(), c.outer, c.R, c.inner);
    expect_close(yc, ye, 1e-14, "sum_dim_forward");
    cpuk::sum_dim_backward<double>(dxc.data(), dy.data(), c.outer, c.R, c.inner);
    emuk::sum_dim_backward<double>(dxe.data(), dy.data(), c.outer, c.R, c.inner);
    EXPECT_EQ(dxc, dxe);
    std::vector<int64_t> ic(m), ie(m);
    cpuk::max_dim_forward<double>(yc.data(), ic.data(), x.data(), c.outer, c.R, c.inner);
    emuk::max_dim_forward<double>(ye.data(), ie.data(), x.data(), c.outer, c.R, c.inner);
    EXPECT_EQ(yc, ye);
    EXPECT_EQ(ic, ie);
    cpuk::max_dim_backward<double>(dxc.data(), dy.data(), ic.data(), c.outer, c.R, c.inner);
    emuk::max_dim_backward<double>(dxe.data(), dy.data(), ie.data(), c.outer, c.R, c.inner);
    EXPECT_EQ(dxc, dxe);
  }
}

TEST(CudaKernelsEmulated, SoftmaxNormsLoss) {
  POSGRAD_REQUIRE_EMULATION();
  // N = 200: the parameter gradients' column sums split into row chunks (reduction_chunks).
  for (const auto& [N, C] : {std::pair<int64_t, int64_t>{5, 7}, {5, 150}, {200, 150}}) {
    const int64_t n = N * C;
    auto x = rnd<double>(n, 12, -3, 3), dy = rnd<double>(n, 13);
    std::vector<double> yc(n), ye(n), dxc(n, 0.2), dxe(n, 0.2);
    cpuk::softmax_forward<double>(yc.data(), x.data(), N, C);
    emuk::softmax_forward<double>(ye.data(), x.data(), N, C);
    expect_close(yc, ye, 1e-14, "softmax");
    cpuk::softmax_backward<double>(dxc.data(), dy.data(), yc.data(), N, C);
    emuk::softmax_backward<double>(dxe.data(), dy.data(), yc.data(), N, C);
    expect_close(dxc, dxe, 1e-14, "softmax backward");
    cpuk::log_softmax_forward<double>(yc.data(), x.data(), N, C);
    emuk::log_softmax_forward<double>(ye.data(), x.data(), N, C);
    expect_close(yc, ye, 1e-14, "log_softmax");
    cpuk::log_softmax_backward<double>(dxc.data(), dy.data(), yc.data(), N, C);
    emuk::log_softmax_backward<double>(dxe.data(), dy.data(), yc.data(), N, C);
    expect_close(dxc, dxe, 1e-14, "log_softmax backward");

    // LayerNorm / RMSNorm with and without affine parameters.
    auto w = rnd<double>(C, 14, 0.5, 1.5), bb = rnd<double>(C, 15);
    for (int affine = 0; affine < 2; ++affine) {
      const double* wp = affine ? w.data() : nullptr;
      const double* bp = affine ? bb.data() : nullptr;
      std::vector<double> mc(2 * N), me(2 * N), rc(N), re(N);
      cpuk::layer_norm_forward<double>(yc.data(), mc.data(), rc.data(), x.data(), wp, bp, N, C, 1e-5);
      emuk::layer_norm_forward<double>(ye.data(), me.data(), re.data(), x.data(), wp, bp, N, C, 1e-5);
      expect_close(yc, ye, 1e-13, "layer_norm");
      expect_close(mc, me, 1e-14, "layer_norm mean");
      expect_close(rc, re, 1e-13, "layer_norm rstd");
      std::vector<double> dwc(C, 0.1), dwe(C, 0.1), dbc(C, 0.3), dbe(C, 0.3);
      std::fill(dxc.begin(), dxc.end(), 0.2);
      std::fill(dxe.begin(), dxe.end(), 0.2);
      cpuk::layer_norm_backward<double>(dxc.data(), dwc.data(), dbc.data(), dy.data(), x.data(), wp, mc.data(),
                                        rc.data(), N, C);
      emuk::layer_norm_backward<double>(dxe.data(), dwe.data(), dbe.data(), dy.data(), x.data(), wp, me.data(),
                                        re.data(), N, C);
      expect_close(dxc, dxe, 1e-12, "layer_norm dx");
      expect_close(dwc, dwe, 1e-12, "layer_norm dw");
      expect_close(dbc, dbe, 1e-13, "layer_norm db");
      cpuk::rms_norm_forward<double>(yc.data(), rc.data(), x.data(), wp, N, C, 1e-6);
      emuk::rms_norm_forward<double>(ye.data(), re.data(), x.data(), wp, N, C, 1e-6);
      expect_close(yc, ye, 1e-13, "rms_norm");
      cpuk::rms_norm_backward<double>(dxc.data(), dwc.data(), dy.data(), x.data(), wp, rc.data(), N, C);
      emuk::rms_norm_backward<double>(dxe.data(), dwe.data(), dy.data(), x.data(), wp, re.data(), N, C);
      expect_close(dxc, dxe, 1e-12, "rms_norm dx");
      expect_close(dwc, dwe, 1e-12, "rms_norm dw");
      emuk::rms_norm_backward<double>(nullptr, dwe.data(), dy.data(), x.data(), wp, re.data(), N, C);  // null dx
    }

    // Cross-entropy with an ignored row.
    std::vector<int64_t> tg(N);
    for (int64_t i = 0; i < N; ++i) tg[i] = (i * 5 + 3) % C;
    tg[2] = -100;
    std::vector<double> lc(N), le(N), sc(2 * N), se(2 * N);
    auto dl = rnd<double>(N, 16);
    cpuk::cross_entropy_forward<double>(lc.data(), sc.data(), x.data(), tg.data(), N, C, -100);
    emuk::cross_entropy_forward<double>(le.data(), se.data(), x.data(), tg.data(), N, C, -100);
    expect_close(lc, le, 1e-14, "cross_entropy loss");
    expect_close(sc, se, 1e-14, "cross_entropy stats (max, log sum)");
    std::fill(dxc.begin(), dxc.end(), 0.2);
    std::fill(dxe.begin(), dxe.end(), 0.2);
    cpuk::cross_entropy_backward<double>(dxc.data(), dl.data(), x.data(), sc.data(), tg.data(), N, C, -100);
    emuk::cross_entropy_backward<double>(dxe.data(), dl.data(), x.data(), sc.data(), tg.data(), N, C, -100);
    expect_close(dxc, dxe, 1e-14, "cross_entropy backward");
    // The mean over the rows not ignored, and its backward, formed on the device.
    double mc = 0, me = 0, g = 0.75;
    int64_t cc = 0, ce = 0;
    cpuk::cross_entropy_mean<double>(&mc, &cc, lc.data(), tg.data(), N, -100);
    emuk::cross_entropy_mean<double>(&me, &ce, le.data(), tg.data(), N, -100);
    EXPECT_EQ(cc, N - 1);
    EXPECT_EQ(ce, N - 1);
    EXPECT_NEAR(me, mc, 1e-14 * std::max(1.0, std::fabs(mc)));
    std::vector<double> dmc(N), dme(N);
    cpuk::cross_entropy_mean_backward<double>(dmc.data(), &g, &cc, N);
    emuk::cross_entropy_mean_backward<double>(dme.data(), &g, &ce, N);
    EXPECT_EQ(dmc, dme);
    EXPECT_EQ(dme[0], 0.75 / static_cast<double>(N - 1));
  }
}

// The numerics of the CPU kernels in their CUDA twins: the log-sum-exp kept as (max, log sum) in
// cross-entropy, log_softmax and attention; NaN-propagating maxima (first NaN's index in max_dim,
// whichever thread and warp sees it); LayerNorm's constant rows (var = 0 exactly: y = b, dw = 0).
TEST(CudaKernelsEmulated, NumericsEdgeCases) {
  POSGRAD_REQUIRE_EMULATION();
  const double ln2 = std::log(2.0), nan = std::numeric_limits<double>::quiet_NaN();
  for (float v : {1e4f, 1e8f, 1e30f}) {
    std::vector<float> logits{v, v}, loss(1), stats(2), dl(2, 0.f), dloss{1.f}, y(2);
    std::vector<int64_t> t{0};
    emuk::cross_entropy_forward<float>(loss.data(), stats.data(), logits.data(), t.data(), 1, 2, -100);
    EXPECT_NEAR(loss[0], ln2, 1e-7) << v;
    emuk::cross_entropy_backward<float>(dl.data(), dloss.data(), logits.data(), stats.data(), t.data(), 1, 2, -100);
    EXPECT_NEAR(dl[0], -0.5, 1e-7) << v;
    EXPECT_NEAR(dl[1], 0.5, 1e-7) << v;
    emuk::log_softmax_forward<float>(y.data(), logits.data(), 1, 2);
    EXPECT_NEAR(y[0], -ln2, 1e-7) << v;
    EXPECT_NEAR(y[1], -ln2, 1e-7) << v;
  }
  // A NaN at any position of a 150-wide row (3 warps, 3 elements per thread with 64-thread blocks).
  const int64_t C = 150;
  for (int64_t pos : {0, 1, 31, 63, 64, 100, 149}) {
    std::vector<double> x(C), x2(2 * C), y(C), ym(2);
    std::vector<int64_t> idx(2);
    for (int64_t c = 0; c < C; ++c) x[c] = std::sin(static_cast<double>(c));
    const int64_t arg = std::max_element(x.begin(), x.end()) - x.begin();  // of the NaN-free row
    for (int64_t c = 0; c < C; ++c) {  // (R = C, inner = 2): column 0 gets the NaN, column 1 not
      x2[2 * c] = c == pos ? nan : x[c];
      x2[2 * c + 1] = x[c];
    }
    x[pos] = nan;
    emuk::softmax_forward<double>(y.data(), x.data(), 1, C);
    for (double e : y) ASSERT_TRUE(std::isnan(e)) << "softmax, NaN at " << pos;
    emuk::max_dim_forward<double>(ym.data(), idx.data(), x.data(), 1, C, 1);  // one block per row
    EXPECT_TRUE(std::isnan(ym[0])) << pos;
    EXPECT_EQ(idx[0], pos);
    emuk::max_dim_forward<double>(ym.data(), idx.data(), x2.data(), 1, C, 2);  // one thread per column
    EXPECT_TRUE(std::isnan(ym[0])) << pos;
    EXPECT_EQ(idx[0], pos);
    EXPECT_EQ(idx[1], arg);
    x[C - 1 - pos / 2] = nan;  // a second NaN: the first one still wins
    emuk::max_dim_forward<double>(ym.data(), idx.data(), x.data(), 1, C, 1);
    EXPECT_EQ(idx[0], std::min(pos, C - 1 - pos / 2));
  }
  {  // LayerNorm: constant rows near 1e5 (float32) give var = 0 exactly: y = b, dw = 0, mean = (value, 0).
    const int64_t N = 2, LC = 768;
    std::vector<float> x(N * LC), y(N * LC), w(LC, 1.5f), b(LC), dy(N * LC, 1.f), dx(N * LC, 0.f), dw(LC, 0.f),
        db(LC, 0.f), mean(2 * N), rstd(N);
    for (int64_t c = 0; c < LC; ++c) {
      x[c] = 100000.3f;
      x[LC + c] = -123456.7f;
      b[c] = 0.01f * static_cast<float>(c);
    }
    emuk::layer_norm_forward<float>(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, LC, 1e-5f);
    for (int64_t i = 0; i < N * LC; ++i) ASSERT_EQ(y[i], b[i % LC]) << i;
    EXPECT_EQ(mean[0], 100000.3f);
    EXPECT_EQ(mean[1], 0.f);
    emuk::layer_norm_backward<float>(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                                     rstd.data(), N, LC);
    for (int64_t c = 0; c < LC; ++c) {
      ASSERT_EQ(dw[c], 0.f) << c;
      ASSERT_EQ(db[c], 2.f) << c;
    }
    for (float e : dx) ASSERT_EQ(e, 0.f);
  }
  {  // Attention: equal scores 1e4 (q = 100, k = [100, 100], scale 1): P = 1/2 in forward and backward.
    std::vector<float> q{100.f}, k{100.f, 100.f}, v{1.f, 3.f}, o(1), st(2), dout{1.f}, dq(1, 0.f), dk(2, 0.f),
        dv(2, 0.f), scratch(16);
    emuk::attention_forward<float>(o.data(), st.data(), scratch.data(), q.data(), k.data(), v.data(), nullptr, nullptr,
                                   nullptr, nullptr, nullptr, nullptr, 1, 1, 1, 2, 1, 0, 0, kernels::ScoreBias::None,
                                   false, 1.f);
    EXPECT_EQ(o[0], 2.f);
    EXPECT_EQ(st[0], 1e4f);
    EXPECT_NEAR(st[1], ln2, 1e-7);
    emuk::attention_backward<float>(dq.data(), dk.data(), dv.data(), nullptr, nullptr, nullptr, nullptr, scratch.data(),
                                    dout.data(), q.data(), k.data(), v.data(), o.data(), st.data(), nullptr, nullptr,
                                    nullptr, nullptr, nullptr, nullptr, 1, 1, 1, 2, 1, 0, 0, kernels::ScoreBias::None,
                                    false, 1.f);
    EXPECT_NEAR(dv[0], 0.5, 1e-7);
    EXPECT_NEAR(dv[1], 0.5, 1e-7);
    EXPECT_NEAR(dk[0], -50, 1e-5);
    EXPECT_NEAR(dk[1], 50, 1e-5);
    EXPECT_NEAR(dq[0], 0, 1e-5);
  }
}

TEST(CudaKernelsEmulated, EmbeddingOptimRope) {
  POSGRAD_REQUIRE_EMULATION();
  const int64_t N = 300, V = 11, C = 150;
  std::vector<int64_t> idx(N);
  for (int64_t i = 0; i < N; ++i) idx[i] = (i * 7 + i / 3) % V;
  auto table = rnd<float>(V * C, 17), dy = rnd<float>(N * C, 18);
  std::vector<float> yc(N * C), ye(N * C), dtc(V * C, 0.5f), dte(V * C, 0.5f);
  cpuk::embedding_forward<float>(yc.data(), idx.data(), table.data(), N, V, C);
  emuk::embedding_forward<float>(ye.data(), idx.data(), table.data(), N, V, C);
  EXPECT_EQ(yc, ye);
  cpuk::embedding_backward<float>(dtc.data(), dy.data(), idx.data(), N, V, C);
  emuk::embedding_backward<float>(dte.data(), dy.data(), idx.data(), N, V, C);
  EXPECT_EQ(dtc, dte) << "same summation order as the CPU";

  const int64_t n = 999;
  auto g = rnd<double>(n, 19);
  auto pc = rnd<double>(n, 20), mc = rnd<double>(n, 21), vc = rnd<double>(n, 22, 0, 1);
  auto pe = pc, me = mc, ve = vc;
  cpuk::adamw_step<double>(pc.data(), mc.data(), vc.data(), g.data(), n, 1e-3, 0.9, 0.95, 1e-8, 0.1, 0.19, 0.0975);
  emuk::adamw_step<double>(pe.data(), me.data(), ve.data(), g.data(), n, 1e-3, 0.9, 0.95, 1e-8, 0.1, 0.19, 0.0975);
  expect_close(pc, pe, 1e-15, "adamw p");
  expect_close(mc, me, 1e-15, "adamw m");
  expect_close(vc, ve, 1e-15, "adamw v");
  for (double mom : {0.0, 0.9}) {
    cpuk::sgd_step<double>(pc.data(), mc.data(), g.data(), n, 0.1, mom, 0.01);
    emuk::sgd_step<double>(pe.data(), me.data(), g.data(), n, 0.1, mom, 0.01);
    expect_close(pc, pe, 1e-15, "sgd p");
    expect_close(mc, me, 1e-15, "sgd buf");
  }

  // RoPE: both layouts, full and partial rotary, forward and backward.
  const int64_t RN = 3, T = 5, D = 10;
  for (bool inter : {false, true})
    for (int64_t dr : {int64_t(10), int64_t(6)}) {
      auto x = rnd<double>(RN * T * D, 23), cs = rnd<double>(T * dr / 2, 24), sn = rnd<double>(T * dr / 2, 25);
      std::vector<double> rc(RN * T * D), re(RN * T * D), dc(RN * T * D, 0.1), de(RN * T * D, 0.1);
      cpuk::rope_forward<double>(rc.data(), x.data(), cs.data(), sn.data(), RN, T, D, dr, inter);
      emuk::rope_forward<double>(re.data(), x.data(), cs.data(), sn.data(), RN, T, D, dr, inter);
      EXPECT_EQ(rc, re);
      cpuk::rope_backward<double>(dc.data(), x.data(), cs.data(), sn.data(), RN, T, D, dr, inter);
      emuk::rope_backward<double>(de.data(), x.data(), cs.data(), sn.data(), RN, T, D, dr, inter);
      EXPECT_EQ(dc, de);
      std::vector<double> inplace = x;  // y == x
      emuk::rope_forward<double>(inplace.data(), inplace.data(), cs.data(), sn.data(), RN, T, D, dr, inter);
      EXPECT_EQ(inplace, rc);
    }
}

TEST(CudaKernelsEmulated, GemmMapping) {
  POSGRAD_REQUIRE_EMULATION();
  // gemm.cu's operand/transposition mapping onto a column-major BLAS, against the CPU GEMM: every
  // transpose combination, padded leading dimensions, beta 0 (C not read) and not, batched with a
  // broadcast operand, stride_c == 0, and K == 0.
  const int64_t M = 7, N = 5, K = 6;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (double beta : {0.0, 0.5})
        for (int mode = 0; mode < 3; ++mode) {  // 0 plain, 1 batched (B broadcast), 2 batched stride_c == 0
          const int64_t batch = mode == 0 ? 1 : 3;
          const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
          const int64_t lda = a_cols + 2, ldb = b_cols + 1, ldc = N + 3;
          const int64_t sc = mode == 2 ? 0 : M * ldc;
          auto A = rnd<double>(batch * a_rows * lda, 40), B = rnd<double>(b_rows * ldb, 41);
          auto C = rnd<double>(batch * M * ldc, 42);
          if (beta == 0)
            for (size_t i = 0; i < C.size(); i += 2) C[i] = std::numeric_limits<double>::quiet_NaN();
          auto Cc = C, Ce = C;
          if (mode == 0) {
            cpuk::gemm<double>(Cc.data(), A.data(), B.data(), M, N, K, ldc, lda, ldb, ta, tb, 0.7, beta);
            emuk::gemm<double>(Ce.data(), A.data(), B.data(), M, N, K, ldc, lda, ldb, ta, tb, 0.7, beta);
          } else {
            cpuk::gemm_batched<double>(Cc.data(), A.data(), B.data(), batch, M, N, K, ldc, lda, ldb, sc, a_rows * lda,
                                       0, ta, tb, 0.7, beta);
            emuk::gemm_batched<double>(Ce.data(), A.data(), B.data(), batch, M, N, K, ldc, lda, ldb, sc, a_rows * lda,
                                       0, ta, tb, 0.7, beta);
          }
          expect_close(Cc, Ce, 1e-14,
                       "gemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " beta=" + std::to_string(beta) +
                           " mode=" + std::to_string(mode));
        }
  std::vector<float> C(12, std::numeric_limits<float>::quiet_NaN()), A(1), B(1);
  emuk::gemm<float>(C.data(), A.data(), B.data(), 3, 4, 0, 4, 1, 4, false, false, 1.f, 0.f);  // K == 0, beta == 0
  EXPECT_EQ(C, std::vector<float>(12, 0.f));
}

namespace {

// One attention configuration run through the CPU and the emulated CUDA kernels.
// With `sinks`, a sink logit per head (SPEC-positions-2 §5) joins every row, and its gradient is compared too.
// The emulated attention kernels of one copy of the emulation: small blocks (emu) or the GPU's (emu_production).
#define POSGRAD_EMU_ATTENTION(NAME, NS)         \
  struct NAME {                                 \
    template <typename T, typename... A>        \
    static void forward(A... a) {               \
      NS::attention_forward<T>(a...);           \
    }                                           \
    template <typename T, typename... A>        \
    static void backward(A... a) {              \
      NS::attention_backward<T>(a...);          \
    }                                           \
    template <typename T, typename... A>        \
    static void diagonal_sums(A... a) {         \
      NS::attention_diagonal_sums<T>(a...);     \
    }                                           \
    template <typename... A>                    \
    static int64_t scratch_elems(A... a) {      \
      return NS::attention_scratch_elems(a...); \
    }                                           \
  };
POSGRAD_EMU_ATTENTION(EmuSmall, ::emu::posgrad::kernels::cuda)
POSGRAD_EMU_ATTENTION(EmuProduction, ::emu_production::posgrad::kernels::cuda)
#undef POSGRAD_EMU_ATTENTION

template <typename T, typename Emu>
void attention_case(kernels::ScoreBias bias, bool causal, int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D,
                    int64_t q_offset, bool with_kr, bool with_qr, bool with_sinks = false) {
  using kernels::ScoreBias;
  const std::string what = std::string("bias ") + std::to_string(static_cast<int>(bias)) + (causal ? " causal" : "") +
                           " Tq=" + std::to_string(Tq) + " Tk=" + std::to_string(Tk) +
                           " off=" + std::to_string(q_offset) + (with_kr ? " kr" : "") + (with_qr ? " qr" : "") +
                           (with_sinks ? " sinks" : "");
  // Float: the kernels sum in other orders (tiles, warps); 2e-5 relative covers D = 128 and T = 300.
  const auto tol = [](double t) { return std::is_same_v<T, float> ? 2e-5 : t; };
  const std::vector<T> sinks = with_sinks ? rnd<T>(H, 37, -1.5, 1.5) : std::vector<T>();
  std::vector<T> dsc(sinks.size(), 0.7), dse = dsc;
  const int64_t nd = Tq + Tk - 1, R = 6;  // R: content-position table rows
  auto q = rnd<T>(B * H * Tq * D, 30), k = rnd<T>(B * H * Tk * D, 31), v = rnd<T>(B * H * Tk * D, 32);
  auto dout = rnd<T>(B * H * Tq * D, 33);
  std::vector<T> table;
  std::vector<T> kr, qr;
  std::vector<int64_t> diag_u, rows;
  int64_t U = 0;
  if (bias == ScoreBias::ContentPosition) {
    rows = {4, 0, 5, 2};  // distinct table rows, in no particular order
    U = static_cast<int64_t>(rows.size());
    diag_u.resize(nd);
    for (int64_t d = 0; d < nd; ++d) diag_u[d] = (d * 3 + d / 4) % U;
  }
  if (bias == ScoreBias::Distance) table = rnd<T>(H * nd, 34);  // bias (H, Tq + Tk - 1)
  if (bias == ScoreBias::ContentPosition) {
    if (with_kr) kr = rnd<T>(R * H * D, 35);
    if (with_qr) qr = rnd<T>(R * H * D, 36);
  }
  auto ptr = [](const auto& vec) { return vec.empty() ? nullptr : vec.data(); };
  const T scale = T(1) / std::sqrt(static_cast<T>(D));
  std::vector<T> scratch(
      static_cast<size_t>(std::max({kernels::cpu::attention_scratch_elems(bias, 0, B, H, Tq, Tk, D, U),
                                    kernels::cpu::attention_scratch_elems(bias, 1, B, H, Tq, Tk, D, U),
                                    kernels::cpu::attention_scratch_elems(bias, 2, B, H, Tq, Tk, D, U), int64_t(1)})));
  // The CUDA kernels must fit in whatever the (CPU-sized) scratch the op allocates.
  for (int pass = 0; pass < 3; ++pass)
    ASSERT_LE(Emu::scratch_elems(bias, pass, B, H, Tq, Tk, D, U),
              kernels::cpu::attention_scratch_elems(bias, pass, B, H, Tq, Tk, D, U))
        << what;
  std::vector<T> oc(q.size()), oe(q.size()), lc(2 * B * H * Tq), le(2 * B * H * Tq);
  cpuk::attention_forward<T>(oc.data(), lc.data(), scratch.data(), q.data(), k.data(), v.data(), ptr(table), ptr(kr),
                             ptr(qr), ptr(sinks), ptr(diag_u), ptr(rows), B, H, Tq, Tk, D, U, q_offset, bias, causal,
                             scale);
  Emu::template forward<T>(oe.data(), le.data(), scratch.data(), q.data(), k.data(), v.data(), ptr(table), ptr(kr),
                           ptr(qr), ptr(sinks), ptr(diag_u), ptr(rows), B, H, Tq, Tk, D, U, q_offset, bias, causal,
                           scale);
  expect_close(oc, oe, tol(1e-13), what + " o");
  expect_close(lc, le, tol(1e-13), what + " stats (max, log sum)");

  std::vector<T> dqc(q.size(), 0.1), dqe = dqc, dkc(k.size(), 0.2), dke = dkc, dvc(v.size(), 0.3), dve = dvc;
  std::vector<T> dtc(table.size(), 0.4), dte = dtc, dkrc(kr.size(), 0.5), dkre = dkrc, dqrc(qr.size(), 0.6),
                                         dqre = dqrc;
  T* dt_c = bias == ScoreBias::Distance ? dtc.data() : nullptr;
  T* dt_e = bias == ScoreBias::Distance ? dte.data() : nullptr;
  cpuk::attention_backward<T>(dqc.data(), dkc.data(), dvc.data(), dt_c, ptr(dkrc) ? dkrc.data() : nullptr,
                              ptr(dqrc) ? dqrc.data() : nullptr, with_sinks ? dsc.data() : nullptr, scratch.data(),
                              dout.data(), q.data(), k.data(), v.data(), oc.data(), lc.data(), ptr(table), ptr(kr),
                              ptr(qr), ptr(sinks), ptr(diag_u), ptr(rows), B, H, Tq, Tk, D, U, q_offset, bias, causal,
                              scale);
  Emu::template backward<T>(dqe.data(), dke.data(), dve.data(), dt_e, ptr(dkre) ? dkre.data() : nullptr,
                            ptr(dqre) ? dqre.data() : nullptr, with_sinks ? dse.data() : nullptr, scratch.data(),
                            dout.data(), q.data(), k.data(), v.data(), oe.data(), le.data(), ptr(table), ptr(kr),
                            ptr(qr), ptr(sinks), ptr(diag_u), ptr(rows), B, H, Tq, Tk, D, U, q_offset, bias, causal,
                            scale);
  expect_close(dqc, dqe, tol(1e-12), what + " dq");
  expect_close(dkc, dke, tol(1e-12), what + " dk");
  expect_close(dvc, dve, tol(1e-12), what + " dv");
  expect_close(dtc, dte, tol(1e-12), what + " dbias");
  expect_close(dkrc, dkre, tol(1e-12), what + " dkr");
  expect_close(dqrc, dqre, tol(1e-12), what + " dqr");
  expect_close(dsc, dse, tol(1e-12), what + " dsinks");
  if (with_sinks) {  // the sink took part: its gradient moved off the 0.7 the buffers started at
    double moved = 0;
    for (double g : dsc) moved = std::max(moved, std::fabs(g - 0.7));
    EXPECT_GT(moved, 1e-6) << what << " dsinks";
  }

  if (Tq == Tk && q_offset == 0) {
    std::vector<T> sc(H * nd, 0.5), se(H * nd, 0.5);
    cpuk::attention_diagonal_sums<T>(sc.data(), scratch.data(), q.data(), k.data(), lc.data(), ptr(table), ptr(kr),
                                     ptr(qr), ptr(diag_u), ptr(rows), B, H, Tq, Tk, D, U, 0, bias, causal, scale);
    Emu::template diagonal_sums<T>(se.data(), scratch.data(), q.data(), k.data(), le.data(), ptr(table), ptr(kr),
                                   ptr(qr), ptr(diag_u), ptr(rows), B, H, Tq, Tk, D, U, 0, bias, causal, scale);
    expect_close(sc, se, tol(1e-12), what + " diagonal sums");
  }
}

}  // namespace

TEST(CudaKernelsEmulated, Attention) {
  POSGRAD_REQUIRE_EMULATION();
  using kernels::ScoreBias;
  for (ScoreBias bias : {ScoreBias::None, ScoreBias::Distance, ScoreBias::ContentPosition})
    for (bool causal : {false, true}) {
      // T = 37 spans two key tiles of the emulated kernels (tile 32). This copy forms a Distance bias's
      // gradient with the per-diagonal kernel (the GPU's fallback for large shapes).
      attention_case<double, EmuSmall>(bias, causal, 2, 2, 37, 37, 5, 0, true, true);
      if (bias == ScoreBias::ContentPosition) {
        attention_case<double, EmuSmall>(bias, causal, 1, 2, 7, 7, 4, 0, true, false);
        attention_case<double, EmuSmall>(bias, causal, 1, 2, 7, 7, 4, 0, false, true);
      }
      // Fewer queries than keys, queries at the end (KV-cache style).
      if (bias != ScoreBias::ContentPosition)
        attention_case<double, EmuSmall>(bias, causal, 1, 3, 3, 9, 4, 6, false, false);
    }
  // A causal offset that leaves the first query rows with no visible key (output 0, stats -inf).
  attention_case<double, EmuSmall>(ScoreBias::None, true, 1, 1, 4, 4, 3, -2, false, false);
  // Sink logits with every modifier, across two key tiles, KV-cache style and with rows that see only the sink.
  for (ScoreBias bias : {ScoreBias::None, ScoreBias::Distance, ScoreBias::ContentPosition})
    for (bool causal : {false, true})
      attention_case<double, EmuSmall>(bias, causal, 2, 2, 37, 37, 5, 0, true, true, true);
  attention_case<double, EmuSmall>(ScoreBias::Distance, true, 1, 3, 3, 9, 4, 6, false, false, true);
  attention_case<double, EmuSmall>(ScoreBias::None, true, 2, 2, 4, 4, 3, -2, false, false, true);
}

// The production tiling (tiles of 128, row blocks of 256: emu_production) in float and double, head
// dims 64 and 128, T = 300 across three key tiles (the multi-tile online-softmax rescale), causal and
// not, every score modifier, a KV-cache offset whose queries sit in the last tile, and sink logits.
TEST(CudaKernelsEmulated, AttentionAtProductionSizes) {
  POSGRAD_REQUIRE_EMULATION();
  using kernels::ScoreBias;
  // (About 1 s per case here: every emulated thread is a fiber, and a 300-token head runs 2 x 300 blocks
  // of 128 of them per pass.)
  for (ScoreBias bias : {ScoreBias::None, ScoreBias::Distance, ScoreBias::ContentPosition})
    for (bool causal : {false, true}) {
      const bool cp = bias == ScoreBias::ContentPosition;
      attention_case<float, EmuProduction>(bias, causal, 1, 1, 300, 300, 64, 0, cp, cp);
    }
  attention_case<double, EmuProduction>(ScoreBias::Distance, true, 1, 1, 300, 300, 128, 0, false, false, true);
  attention_case<double, EmuProduction>(ScoreBias::ContentPosition, false, 1, 1, 300, 300, 128, 0, true, true);
  attention_case<float, EmuProduction>(ScoreBias::None, false, 1, 1, 300, 300, 128, 0, false, false);
  attention_case<float, EmuProduction>(ScoreBias::Distance, true, 1, 2, 40, 300, 64, 260, false, false);
  // A Distance bias's gradient from the rows pass's per-block diagonal partials, added over two batch
  // rows and two heads (the small copy above takes the per-diagonal kernel instead).
  attention_case<float, EmuProduction>(ScoreBias::Distance, false, 2, 2, 140, 140, 64, 0, false, false);
  attention_case<double, EmuProduction>(ScoreBias::None, true, 1, 1, 40, 300, 128, 260, false, false, true);
}
