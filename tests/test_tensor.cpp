// test_tensor.cpp — the tensor core: factories, dtype/device tags, storage alignment, shape and
// strides, view aliasing (every view op shares storage and writes through it are visible in the
// base), view vs reshape vs contiguous, expand rules, dim wrapping and the typed errors (whose
// messages must name the offending shape), dtype conversion; and the Philox RNG: Random123
// known-answer vectors, seeding, thread-count independence, generator state save/restore and the
// moments of the normal fill.
// Not here: op math (test_op_registry), autograd (test_autograd).
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "support/test_util.h"
#include "tensor/philox.h"
#include "tensor/random.h"
#include "tensor/storage.h"
#include "tensor/tensor.h"

using namespace posgrad;
using posgrad::test::thrown_message;

namespace {

std::vector<double> iota_vec(int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.0);
  return v;
}

// Restores the OpenMP thread count at scope exit.
struct OmpThreads {
  int prev;
  explicit OmpThreads(int n) : prev(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(prev); }
};

// ---- factories, tags, storage ---------------------------------------------------------------

TEST(TensorFactories, ValuesShapesAndTags) {
  Tensor z = Tensor::zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.dtype(), DType::Float32);
  EXPECT_TRUE(z.device().is_cpu());
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.dim(), 2);
  for (double v : z.to_vector()) EXPECT_EQ(v, 0.0);

  Tensor o = Tensor::ones({4}, DType::Float64);
  EXPECT_EQ(o.dtype(), DType::Float64);
  for (double v : o.to_vector()) EXPECT_EQ(v, 1.0);

  Tensor f = Tensor::full({2, 2}, -2.5, DType::Float64);
  for (double v : f.to_vector()) EXPECT_EQ(v, -2.5);

  Tensor fi = Tensor::full({3}, 7.0, DType::Int64);
  EXPECT_EQ(fi.to_int_vector(), (std::vector<int64_t>{7, 7, 7}));

  Tensor fb = Tensor::full({3}, 2.0, DType::Bool);
  EXPECT_EQ(fb.dtype(), DType::Bool);
  EXPECT_EQ(fb.to_vector(), (std::vector<double>{1, 1, 1}));

  Tensor a = Tensor::arange(5, DType::Float64);
  EXPECT_EQ(a.to_vector(), (std::vector<double>{0, 1, 2, 3, 4}));

  Tensor s = Tensor::scalar(3.25, DType::Float64);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.item(), 3.25);

  Tensor fv = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}, DType::Float64);
  EXPECT_EQ(fv.to_vector(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  Tensor ff = Tensor::from_vector(std::vector<float>{1.5f, -2.f}, {2});
  EXPECT_EQ(ff.dtype(), DType::Float32);
  EXPECT_EQ(ff.to_float_vector(), (std::vector<float>{1.5f, -2.f}));
  Tensor ints = Tensor::from_ints({3, -1, 4}, {3});
  EXPECT_EQ(ints.dtype(), DType::Int64);
  EXPECT_EQ(ints.to_int_vector(), (std::vector<int64_t>{3, -1, 4}));

  // Empty tensors are legal.
  Tensor e = Tensor::zeros({0, 5});
  EXPECT_EQ(e.numel(), 0);
  EXPECT_TRUE(e.to_vector().empty());

  EXPECT_EQ(Tensor::zeros({3, 7}, DType::Float64).str(), "float64(3, 7)");
  EXPECT_EQ(shape_str({3}), "(3,)");
  EXPECT_EQ(shape_str({}), "()");
}

TEST(TensorFactories, BadArgumentsThrowTypedErrors) {
  std::string m = thrown_message<ShapeError>([] { Tensor::from_vector(std::vector<double>{1, 2, 3}, {2, 2}); });
  EXPECT_NE(m.find("(2, 2)"), std::string::npos) << m;
  m = thrown_message<ShapeError>([] { Tensor::empty({2, -3}); });
  EXPECT_NE(m.find("(2, -3)"), std::string::npos) << m;
  thrown_message<ShapeError>([] { Tensor::empty(Shape(9, 1)); });  // more than kMaxDims dims
  thrown_message<ShapeError>([] { Tensor::from_ints({1, 2}, {3}); });
  m = thrown_message<ValueError>([] { Tensor::arange(-3); });
  EXPECT_NE(m.find("-3"), std::string::npos) << m;
  EXPECT_EQ(Tensor::arange(0).numel(), 0);
}

TEST(TensorStorage, FreshStorageIs64ByteAligned) {
  for (int64_t n : {0, 1, 3, 7, 16, 17, 1000, 4099}) {
    for (DType t : {DType::Float32, DType::Float64, DType::Int64, DType::Bool}) {
      Tensor x = Tensor::empty({n}, t);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(x.raw_data()) % 64, 0u) << "n=" << n << " " << dtype_name(t);
      Tensor z = Tensor::zeros({n, 3}, t);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(z.raw_data()) % 64, 0u);
    }
  }
  // Copies made by contiguous()/clone() are fresh storage too.
  Tensor base = Tensor::zeros({5, 7});
  Tensor c = base.t().contiguous();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c.raw_data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(base.narrow(1, 1, 3).clone().raw_data()) % 64, 0u);
}

// The CPU backend clears large buffers with the whole thread team (whole cache lines per thread):
// every byte, and no byte past the end, at sizes around the team threshold (256 KiB) and not a
// multiple of a line, at 1 and 2 threads.
TEST(TensorStorage, ZeroClearsEveryByteAndNothingPastTheEnd) {
  DeviceBackend& cpu = backend(DeviceType::CPU);
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2})
    for (size_t n : {size_t(0), size_t(1), size_t(262143), size_t(262144), size_t(262145), size_t(1000003)}) {
      omp_set_num_threads(threads);
      std::vector<unsigned char> buf(n + 64, 0xab);
      cpu.zero(buf.data(), n);
      omp_set_num_threads(saved);
      size_t nonzero = 0;
      for (size_t i = 0; i < n; ++i) nonzero += buf[i] != 0;
      EXPECT_EQ(nonzero, 0u) << n << " bytes, " << threads << " threads";
      for (size_t i = n; i < n + 64; ++i) ASSERT_EQ(buf[i], 0xab) << "byte " << i << " past " << n << " bytes";
    }
  Tensor z = Tensor::zeros({3, 70001});  // 840 012 bytes: the team path through the factory
  EXPECT_EQ(sum(z).item(), 0.0);
}

TEST(TensorStorage, CudaWithoutCudaThrowsDeviceError) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present; this checks the CPU-only build";
  std::string m = thrown_message<DeviceError>([] { Tensor::zeros({2, 3}, DType::Float32, Device::cuda()); });
  EXPECT_NE(m.find("CUDA"), std::string::npos) << m;
  thrown_message<DeviceError>([] { Tensor::ones({2}).to(Device::cuda()); });
}

TEST(TensorDevice, ParseAndPrint) {
  EXPECT_TRUE(Device::parse("cpu").is_cpu());
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::cuda(1).str(), "cuda:1");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1x", ""}) {
    std::string m = thrown_message<ValueError>([&] { Device::parse(bad); });
    EXPECT_NE(m.find(std::string("'") + bad + "'"), std::string::npos) << m;
  }
}

// ---- shape, strides, dims ----------------------------------------------------------------------

TEST(TensorShape, ContiguousStridesAndSize) {
  Tensor x = Tensor::zeros({3, 7, 13});
  EXPECT_EQ(x.strides(), (Shape{91, 13, 1}));
  EXPECT_TRUE(x.is_contiguous());
  EXPECT_EQ(x.size(0), 3);
  EXPECT_EQ(x.size(-1), 13);
  EXPECT_EQ(x.size(-3), 3);
  EXPECT_EQ(contiguous_strides({2, 0, 4}), (Shape{4, 4, 1}));
  // An empty tensor is contiguous (as PyTorch's), made fresh or viewed: randn fills one without error.
  EXPECT_TRUE(Tensor::empty({4, 0, 6}).is_contiguous());
  EXPECT_TRUE(Tensor::zeros({3, 5}).narrow(1, 2, 0).is_contiguous());
  Generator g(1);
  EXPECT_EQ(randn({4, 0, 6}, g).numel(), 0);
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({4, 0}), 0);
}

TEST(TensorShape, OutOfRangeDimIsIndexErrorNamingTheShape) {
  Tensor x = Tensor::zeros({3, 7, 13});
  for (int64_t d : {3, -4, 100}) {
    std::string m = thrown_message<IndexError>([&] { x.size(d); });
    EXPECT_NE(m.find("(3, 7, 13)"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(d)), std::string::npos) << m;
  }
  std::string m = thrown_message<IndexError>([&] { x.transpose(0, 3); });
  EXPECT_NE(m.find("(3, 7, 13)"), std::string::npos) << m;
  thrown_message<IndexError>([&] { x.narrow(5, 0, 1); });
  thrown_message<IndexError>([&] { x.squeeze(-4); });
  thrown_message<IndexError>([&] { x.unsqueeze(4); });
  thrown_message<IndexError>([&] { x.permute({0, 1, 3}); });
  thrown_message<IndexError>([&] { sum(x, {3}); });
  // A 0-d tensor has no dims to index: size(0) must throw rather than read past the shape.
  Tensor s = Tensor::scalar(1.0);
  m = thrown_message<IndexError>([&] { s.size(0); });
  EXPECT_NE(m.find("()"), std::string::npos) << m;
  thrown_message<IndexError>([&] { s.size(-1); });
  thrown_message<IndexError>([&] { s.narrow(0, 0, 1); });
  thrown_message<IndexError>([&] { s.squeeze(0); });
  // ... but unsqueeze inserts a dim and is fine.
  EXPECT_EQ(s.unsqueeze(0).shape(), (Shape{1}));
  EXPECT_EQ(s.unsqueeze(-1).shape(), (Shape{1}));
}

TEST(TensorShape, NegativeDimsCountFromTheEnd) {
  Tensor x = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(x.transpose(-1, -3).shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(x.permute({-1, 0, -2}).shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(x.narrow(-1, 1, 2).shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Shape{2, 3, 4, 1}));
  EXPECT_EQ(x.unsqueeze(-4).shape(), (Shape{1, 2, 3, 4}));
  EXPECT_EQ(x.unsqueeze(-2).squeeze(-2).shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(x.flatten(-2, -1).shape(), (Shape{2, 12}));
  EXPECT_EQ(x.t().shape(), (Shape{2, 4, 3}));
}

// ---- views share storage ---------------------------------------------------------------------

TEST(TensorViews, EveryViewSharesStorageAndWritesAreVisibleInTheBase) {
  Tensor base = Tensor::from_vector(iota_vec(24), {2, 3, 4}, DType::Float64);
  double* b = base.data<double>();

  // narrow: element (1, 2, 3) of base is element (0, 1, 3) of narrow(0,1,1).narrow(1,1,2).
  Tensor n = base.narrow(0, 1, 1).narrow(1, 1, 2);
  EXPECT_TRUE(n.shares_storage(base));
  EXPECT_EQ(n.offset(), 12 + 4);
  n.data<double>()[1 * n.strides()[1] + 3] = -1;
  EXPECT_EQ(b[1 * 12 + 2 * 4 + 3], -1);

  // transpose: (i, j, k) -> (k, j, i).
  Tensor t = base.transpose(0, 2);
  EXPECT_TRUE(t.shares_storage(base));
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 4, 12}));
  EXPECT_FALSE(t.is_contiguous());
  t.data<double>()[2 * t.strides()[0] + 1 * t.strides()[1] + 0 * t.strides()[2]] = -2;
  EXPECT_EQ(b[0 * 12 + 1 * 4 + 2], -2);

  // permute
  Tensor p = base.permute({1, 2, 0});
  EXPECT_TRUE(p.shares_storage(base));
  EXPECT_EQ(p.shape(), (Shape{3, 4, 2}));
  EXPECT_EQ(p.strides(), (Shape{4, 1, 12}));
  p.data<double>()[2 * 4 + 0 * 1 + 1 * 12] = -3;
  EXPECT_EQ(b[1 * 12 + 2 * 4 + 0], -3);

  // expand: a (3, 1) column broadcast to (2, 3, 5) has stride 0 in the broadcast dims, so a
  // write through the base is seen in every broadcast copy.
  Tensor col = Tensor::from_vector(std::vector<double>{10, 20, 30}, {3, 1}, DType::Float64);
  Tensor ex = col.expand({2, 3, 5});
  EXPECT_TRUE(ex.shares_storage(col));
  EXPECT_EQ(ex.strides(), (Shape{0, 1, 0}));
  col.data<double>()[1] = 99;
  auto ev = ex.to_vector();
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 5; ++k) EXPECT_EQ(ev[i * 15 + 1 * 5 + k], 99);

  // unsqueeze / squeeze
  Tensor u = base.unsqueeze(1);
  EXPECT_TRUE(u.shares_storage(base));
  EXPECT_EQ(u.shape(), (Shape{2, 1, 3, 4}));
  u.data<double>()[5] = -5;
  EXPECT_EQ(b[5], -5);
  Tensor sq = u.squeeze(1);
  EXPECT_TRUE(sq.shares_storage(base));
  EXPECT_EQ(sq.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(sq.strides(), base.strides());

  // view / reshape of a contiguous tensor
  Tensor v = base.view({6, -1});
  EXPECT_TRUE(v.shares_storage(base));
  EXPECT_EQ(v.shape(), (Shape{6, 4}));
  v.data<double>()[4 * 4 + 1] = -6;
  EXPECT_EQ(b[17], -6);
  Tensor r = base.reshape({4, 6});
  EXPECT_TRUE(r.shares_storage(base));
  r.data<double>()[23] = -7;
  EXPECT_EQ(b[23], -7);

  // A view of a narrowed tensor (compatible layout) is still a view.
  Tensor rows = base.view({6, 4}).narrow(0, 2, 3);  // rows 2..4, contiguous block
  Tensor rv = rows.view({12});
  EXPECT_TRUE(rv.shares_storage(base));
  EXPECT_EQ(rv.offset(), 8);
  rv.data<double>()[0] = -8;
  EXPECT_EQ(b[8], -8);

  // Reads through views see the base in logical (row-major) order.
  Tensor small = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}, DType::Float64);
  EXPECT_EQ(small.t().to_vector(), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(small.narrow(1, 1, 2).to_vector(), (std::vector<double>{2, 3, 5, 6}));
  EXPECT_EQ(small.t().narrow(0, 2, 1).to_vector(), (std::vector<double>{3, 6}));
}

TEST(TensorViews, ViewOnIncompatibleStridesThrowsWhileReshapeCopies) {
  Tensor base = Tensor::from_vector(iota_vec(12), {3, 4}, DType::Float64);
  Tensor t = base.t();  // (4, 3), strides (1, 4)
  std::string m = thrown_message<ShapeError>([&] { t.view({12}); });
  EXPECT_NE(m.find("(4, 3)"), std::string::npos) << m;
  EXPECT_NE(m.find("reshape"), std::string::npos) << m;
  Tensor r = t.reshape({12});
  EXPECT_FALSE(r.shares_storage(base));
  EXPECT_TRUE(r.is_contiguous());
  EXPECT_EQ(r.to_vector(), (std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  // A non-contiguous narrow cannot be flattened as a view either.
  EXPECT_THROW(base.narrow(1, 0, 2).view({6}), ShapeError);
  EXPECT_EQ(base.narrow(1, 0, 2).reshape({6}).to_vector(), (std::vector<double>{0, 1, 4, 5, 8, 9}));
  // But splitting a dim of a transposed tensor is a valid view.
  Tensor split = t.view({2, 2, 3});
  EXPECT_TRUE(split.shares_storage(base));
  EXPECT_EQ(split.to_vector(), t.to_vector());
  // Element-count mismatches and bad -1 use are ShapeErrors naming the shapes.
  m = thrown_message<ShapeError>([&] { base.view({5, 2}); });
  EXPECT_NE(m.find("(3, 4)"), std::string::npos) << m;
  EXPECT_NE(m.find("(5, 2)"), std::string::npos) << m;
  EXPECT_THROW(base.view({-1, -1}), ShapeError);
  EXPECT_THROW(base.view({5, -1}), ShapeError);
  EXPECT_THROW(base.reshape({-2, 6}), ShapeError);
}

// Property check of view()'s stride computation: on random permuted/narrowed/expanded layouts and
// random target shapes, whenever view() succeeds it must alias the base and read the same values as
// reshaping a contiguous copy; reshape() must always give those values; and a contiguous source can
// always be viewed.
TEST(TensorViews, RandomLayoutsViewOrReshapeAgreeWithAContiguousCopy) {
  Generator gen(321);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(n)); };
  int viewed = 0, refused = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int nd = 1 + static_cast<int>(pick(4));
    Shape s(nd);
    for (auto& d : s) d = 1 + pick(4);
    Tensor x = Tensor::from_vector(iota_vec(shape_numel(s)), s, DType::Float64);
    // Random layout: permute, maybe narrow one dim, maybe expand a size-1 dim.
    std::vector<int64_t> perm(nd);
    std::iota(perm.begin(), perm.end(), 0);
    for (int i = nd - 1; i > 0; --i) std::swap(perm[i], perm[pick(i + 1)]);
    x = x.permute(perm);
    if (pick(2)) {
      int64_t d = pick(nd), len = 1 + pick(x.size(d));
      x = x.narrow(d, pick(x.size(d) - len + 1), len);
    }
    if (pick(3) == 0) {  // a broadcast (stride-0) dim
      int64_t d = pick(x.dim() + 1);
      Shape e = x.unsqueeze(d).shape();
      e[d] = 2 + pick(2);
      x = x.unsqueeze(d).expand(e);
    }
    const std::vector<double> ref = x.to_vector();
    // A random target shape with the same number of elements (random divisors, random 1s).
    int64_t rest = x.numel();
    Shape target;
    while (rest > 1 && target.size() < 4) {
      std::vector<int64_t> divs;
      for (int64_t d = 1; d <= rest; ++d)
        if (rest % d == 0) divs.push_back(d);
      int64_t d = divs[pick(static_cast<int64_t>(divs.size()))];
      target.push_back(d);
      rest /= d;
    }
    if (rest > 1 || target.empty()) target.push_back(rest);
    if (pick(3) == 0) target.insert(target.begin() + pick(static_cast<int64_t>(target.size()) + 1), 1);
    ASSERT_EQ(shape_numel(target), x.numel());

    const std::string where =
        "layout " + shape_str(x.shape()) + " strides " + shape_str(x.strides()) + " -> " + shape_str(target);
    try {
      Tensor v = x.view(target);
      ++viewed;
      EXPECT_TRUE(v.shares_storage(x)) << where;
      EXPECT_EQ(v.shape(), target) << where;
      EXPECT_EQ(v.to_vector(), ref) << where;
    } catch (const ShapeError&) {
      ++refused;
      EXPECT_FALSE(x.is_contiguous()) << where << ": a contiguous tensor can always be viewed";
    }
    EXPECT_EQ(x.reshape(target).to_vector(), ref) << where;
    EXPECT_EQ(x.contiguous().view(target).to_vector(), ref) << where;
  }
  // Both outcomes were exercised.
  EXPECT_GT(viewed, 100);
  EXPECT_GT(refused, 30);
}

TEST(TensorViews, ContiguousReturnsSelfOrACopy) {
  Tensor base = Tensor::from_vector(iota_vec(6), {2, 3}, DType::Float64);
  EXPECT_TRUE(base.contiguous().same(base));
  Tensor t = base.t();
  Tensor c = t.contiguous();
  EXPECT_FALSE(c.same(t));
  EXPECT_FALSE(c.shares_storage(base));
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.strides(), (Shape{2, 1}));
  EXPECT_EQ(c.to_vector(), t.to_vector());
  // The copy is independent of the base.
  c.data<double>()[0] = 100;
  EXPECT_EQ(base.to_vector()[0], 0);
  // clone() always copies.
  Tensor k = base.clone();
  EXPECT_FALSE(k.shares_storage(base));
  // Size-1 dims do not break contiguity, whatever their stride.
  Tensor one = base.narrow(0, 1, 1);  // (1, 3)
  EXPECT_TRUE(one.is_contiguous());
  EXPECT_TRUE(one.contiguous().same(one));
}

TEST(TensorViews, ExpandRules) {
  Tensor x = Tensor::from_vector(std::vector<double>{1, 2, 3}, {3}, DType::Float64);
  EXPECT_EQ(x.expand({2, 3}).to_vector(), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(x.expand({2, -1}).shape(), (Shape{2, 3}));
  EXPECT_TRUE(x.expand({3}).same(x));  // no-op expand returns the tensor itself
  Tensor c = x.view({3, 1});
  EXPECT_EQ(c.expand({3, 4}).shape(), (Shape{3, 4}));
  EXPECT_EQ(c.expand({3, 0}).numel(), 0);  // size 1 may expand to 0
  // Non-1 dims cannot change; fewer dims is an error; -1 is only for existing dims; no negatives.
  std::string m = thrown_message<ShapeError>([&] { x.expand({2, 4}); });
  EXPECT_NE(m.find("(3,)"), std::string::npos) << m;
  EXPECT_NE(m.find("(2, 4)"), std::string::npos) << m;
  EXPECT_THROW(x.view({1, 3}).expand({3}), ShapeError);
  EXPECT_THROW(x.expand({-1, 3}), ShapeError);
  EXPECT_THROW(c.expand({3, -2}), ShapeError);
  EXPECT_THROW(c.expand({-5, 3, 1}), ShapeError);
}

TEST(TensorViews, PermuteAndSqueezeErrors) {
  Tensor x = Tensor::zeros({2, 3, 4});
  std::string m = thrown_message<ShapeError>([&] { x.permute({0, 1}); });
  EXPECT_NE(m.find("(2, 3, 4)"), std::string::npos) << m;
  m = thrown_message<ShapeError>([&] { x.permute({0, 2, -1}); });  // repeated dim
  EXPECT_NE(m.find("(2, 3, 4)"), std::string::npos) << m;
  m = thrown_message<ShapeError>([&] { x.squeeze(1); });
  EXPECT_NE(m.find("(2, 3, 4)"), std::string::npos) << m;
  m = thrown_message<IndexError>([&] { x.narrow(1, 2, 2); });
  EXPECT_NE(m.find("(2, 3, 4)"), std::string::npos) << m;
  EXPECT_THROW(x.narrow(1, -1, 1), IndexError);
  EXPECT_THROW(x.narrow(1, 0, -1), IndexError);
  EXPECT_EQ(x.narrow(1, 3, 0).numel(), 0);  // an empty narrow at the end is fine
}

TEST(TensorViews, FlattenAndSliceAndScalar) {
  Tensor x = Tensor::from_vector(iota_vec(24), {2, 3, 4}, DType::Float64);
  EXPECT_EQ(x.flatten().shape(), (Shape{24}));
  EXPECT_EQ(x.flatten(1).shape(), (Shape{2, 12}));
  EXPECT_EQ(x.flatten(0, 1).shape(), (Shape{6, 4}));
  EXPECT_EQ(x.slice(2, 1, 3).to_vector()[0], 1);
  EXPECT_EQ(Tensor::scalar(2.0).flatten().shape(), (Shape{1}));
  EXPECT_THROW(x.flatten(2, 0), ShapeError);
  EXPECT_THROW(x.flatten(0, 3), IndexError);
  // view of a 0-d tensor and back.
  Tensor s = Tensor::scalar(4.0, DType::Float64);
  EXPECT_EQ(s.view({1, 1}).shape(), (Shape{1, 1}));
  EXPECT_EQ(s.view({1}).view({}).item(), 4.0);
}

TEST(TensorShape, BroadcastShapesRulesAndErrorsNameBothShapes) {
  EXPECT_EQ(broadcast_shapes({3, 1, 5}, {4, 1}), (Shape{3, 4, 5}));
  EXPECT_EQ(broadcast_shapes({}, {2, 3}), (Shape{2, 3}));
  EXPECT_EQ(broadcast_shapes({1}, {0}), (Shape{0}));
  std::string m = thrown_message<ShapeError>([] { broadcast_shapes({3, 7}, {2, 7}); });
  EXPECT_NE(m.find("(3, 7)"), std::string::npos) << m;
  EXPECT_NE(m.find("(2, 7)"), std::string::npos) << m;
  // The same from an op.
  Tensor a = Tensor::zeros({3, 7}), b = Tensor::zeros({2, 7});
  m = thrown_message<ShapeError>([&] { add(a, b); });
  EXPECT_NE(m.find("(3, 7)"), std::string::npos) << m;
  EXPECT_NE(m.find("(2, 7)"), std::string::npos) << m;
}

// ---- dtypes ---------------------------------------------------------------------------------------

TEST(TensorDType, WrongDTypeAccessIsDTypeError) {
  Tensor f = Tensor::zeros({2, 3});
  std::string m = thrown_message<DTypeError>([&] { f.data<double>(); });
  EXPECT_NE(m.find("float32"), std::string::npos) << m;
  EXPECT_NE(m.find("float64"), std::string::npos) << m;
  EXPECT_NE(m.find("(2, 3)"), std::string::npos) << m;
  EXPECT_THROW(f.data<int64_t>(), DTypeError);
  EXPECT_THROW(Tensor::zeros({2}, DType::Int64).data<float>(), DTypeError);
  EXPECT_THROW(Tensor::zeros({2}, DType::Float64).to_int_vector(), DTypeError);
  EXPECT_NO_THROW(f.data<float>());
  // Mixed dtypes in an op name both tensors.
  m = thrown_message<DTypeError>([&] { add(f, Tensor::zeros({2, 3}, DType::Float64)); });
  EXPECT_NE(m.find("float32"), std::string::npos) << m;
  EXPECT_NE(m.find("float64"), std::string::npos) << m;
  // Int tensors cannot require grad.
  Tensor i = Tensor::from_ints({1, 2}, {2});
  EXPECT_THROW(i.set_requires_grad(true), DTypeError);
}

TEST(TensorDType, ConversionsRoundTrip) {
  std::vector<double> vals{0.0, 1.5, -2.25, 1e-3, 123456.0, -0.0};
  Tensor d = Tensor::from_vector(vals, {2, 3}, DType::Float64);
  Tensor f = d.to(DType::Float32);
  EXPECT_EQ(f.dtype(), DType::Float32);
  EXPECT_EQ(f.shape(), (Shape{2, 3}));
  Tensor back = f.to(DType::Float64);
  for (size_t i = 0; i < vals.size(); ++i)
    EXPECT_EQ(back.to_vector()[i], static_cast<double>(static_cast<float>(vals[i])));
  // float32 -> float64 -> float32 is exact.
  EXPECT_EQ(f.to(DType::Float64).to(DType::Float32).to_float_vector(), f.to_float_vector());
  // to() the same dtype is the same tensor.
  EXPECT_TRUE(d.to(DType::Float64).same(d));
  // Int64 <-> float; Bool.
  Tensor ints = Tensor::from_ints({-3, 0, 7}, {3});
  EXPECT_EQ(ints.to(DType::Float32).to_vector(), (std::vector<double>{-3, 0, 7}));
  EXPECT_EQ(ints.to(DType::Float64).to(DType::Int64).to_int_vector(), (std::vector<int64_t>{-3, 0, 7}));
  EXPECT_EQ(ints.to(DType::Bool).to_vector(), (std::vector<double>{1, 0, 1}));
  // A strided source converts in logical order.
  Tensor m = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}, DType::Float64);
  EXPECT_EQ(m.t().to(DType::Float32).to_vector(), (std::vector<double>{1, 4, 2, 5, 3, 6}));
}

TEST(TensorDType, ItemAndVectors) {
  EXPECT_EQ(Tensor::from_vector(std::vector<double>{5}, {1, 1}, DType::Float64).item(), 5.0);
  std::string m = thrown_message<ShapeError>([] { Tensor::zeros({2, 3}).item(); });
  EXPECT_NE(m.find("(2, 3)"), std::string::npos) << m;
  EXPECT_THROW(Tensor::zeros({0}).item(), ShapeError);
  EXPECT_THROW(Tensor().shape(), Error);  // undefined tensor
  EXPECT_EQ(Tensor().str(), "undefined");
}

// ---- Philox RNG -----------------------------------------------------------------------------------

// An independent Philox4x32-10 with the full 128-bit counter and 64-bit key, written from the
// paper (Salmon et al., SC'11, §4.2 and Table 2): round = two 32x32->64 multiplies whose halves are
// permuted and xor-ed with the other counter words and the round key; the key is bumped by the Weyl
// constants between rounds. Used to check the library's 64-bit-counter variant bit for bit.
std::array<uint32_t, 4> philox_reference(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k[0] += 0x9E3779B9u;
      k[1] += 0xBB67AE85u;
    }
    uint64_t p0 = uint64_t{0xD2511F53u} * c[0];
    uint64_t p1 = uint64_t{0xCD9E8D57u} * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
  }
  return c;
}

TEST(Philox, ReferenceMatchesRandom123KnownAnswers) {
  // Random123's tests/kat_vectors for philox4x32 10 (counter words, key words -> output words);
  // the same three vectors are quoted by TensorFlow's stateful_random_ops_test from
  // Random123-Boost's test_philox.cpp.
  struct Kat {
    std::array<uint32_t, 4> ctr;
    std::array<uint32_t, 2> key;
    std::array<uint32_t, 4> out;
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
       {0xffffffffu, 0xffffffffu},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
       {0xa4093822u, 0x299f31d0u},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const auto& k : kats) EXPECT_EQ(philox_reference(k.ctr, k.key), k.out);
}

TEST(Philox, LibraryMatchesKnownAnswerAndReference) {
  // Counter 0, key 0 is directly a Random123 known-answer vector.
  Philox4 r = philox4x32(0, 0);
  EXPECT_EQ(r.v[0], 0x6627e8d5u);
  EXPECT_EQ(r.v[1], 0xe169c58du);
  EXPECT_EQ(r.v[2], 0xbc57ac4cu);
  EXPECT_EQ(r.v[3], 0x9b00dbd8u);
  // The library's counter is (lo, hi, 0, 0) and its key (lo, hi) in Random123's word order.
  const uint64_t samples[] = {0, 1, 2, 0xffffffffull, 0x100000000ull, 0x243f6a8885a308d3ull, ~0ull, 12345678901234ull};
  for (uint64_t c : samples)
    for (uint64_t k : samples) {
      Philox4 got = philox4x32(c, k);
      auto want = philox_reference({static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0, 0},
                                   {static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32)});
      for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], want[i]) << "counter " << c << " key " << k << " word " << i;
    }
}

TEST(Philox, UnitConversionStaysInHalfOpenInterval) {
  EXPECT_EQ(u32_to_unit(0), 0.0);
  EXPECT_LT(u32_to_unit(0xffffffffu), 1.0);
  EXPECT_EQ(static_cast<float>(u32_to_unit(0xffffffffu)), u32_to_unit(0xffffffffu));  // exact in float
  EXPECT_LT(static_cast<float>(u32_to_unit(0xffffffffu)), 1.0f);
}

TEST(Random, SameSeedSameFillsAndDifferentSeedsDiffer) {
  for (DType t : {DType::Float32, DType::Float64}) {
    Generator g1(42), g2(42), g3(43);
    Tensor a = randn({7, 13}, g1, t), b = randn({7, 13}, g2, t), c = randn({7, 13}, g3, t);
    EXPECT_EQ(a.to_vector(), b.to_vector());
    EXPECT_NE(a.to_vector(), c.to_vector());
    // Successive draws from one generator differ.
    Tensor a2 = randn({7, 13}, g1, t);
    EXPECT_NE(a.to_vector(), a2.to_vector());
    Tensor u1 = rand({50}, g1, t, Device::cpu(), -2.0, 3.0);
    for (double v : u1.to_vector()) {
      EXPECT_GE(v, -2.0);
      EXPECT_LT(v, 3.0);
    }
  }
}

TEST(Random, FillsDoNotDependOnTheThreadCount) {
  // Large enough that the kernels take their parallel branch (n > 2^14).
  const Shape s{100003};
  std::vector<double> n1, n2, u1, u2;
  {
    OmpThreads th(1);
    Generator g(7);
    n1 = randn(s, g).to_vector();
    u1 = rand(s, g, DType::Float64).to_vector();
  }
  {
    OmpThreads th(2);
    Generator g(7);
    n2 = randn(s, g).to_vector();
    u2 = rand(s, g, DType::Float64).to_vector();
  }
  EXPECT_TRUE(n1 == n2);
  EXPECT_TRUE(u1 == u2);
}

TEST(Random, CounterBasedSplitting) {
  // Element i of a fill uses counter offset + i, so one fill of n + m equals a fill of n followed
  // by a fill of m from the same generator.
  Generator a(5), b(5);
  auto whole = randn({30}, a, DType::Float64).to_vector();
  auto first = randn({12}, b, DType::Float64).to_vector();
  auto second = randn({18}, b, DType::Float64).to_vector();
  first.insert(first.end(), second.begin(), second.end());
  EXPECT_EQ(whole, first);
  EXPECT_EQ(a.state().offset, 30u);
  EXPECT_EQ(b.state().offset, 30u);
  EXPECT_EQ(a.seed(), 5u);
}

TEST(Random, GeneratorStateSaveRestoreContinuesIdentically) {
  Generator g(2024);
  randn({17}, g);
  (void)g.next_u64();
  GeneratorState saved = g.state();
  auto a1 = randn({5, 9}, g, DType::Float64).to_vector();
  auto a2 = rand({33}, g, DType::Float32).to_vector();
  uint64_t a3 = g.next_u64();
  double a4 = g.next_unit();
  GeneratorState end_a = g.state();

  // Restore into the same generator ...
  g.set_state(saved);
  EXPECT_EQ(randn({5, 9}, g, DType::Float64).to_vector(), a1);
  EXPECT_EQ(rand({33}, g, DType::Float32).to_vector(), a2);
  EXPECT_EQ(g.next_u64(), a3);
  EXPECT_EQ(g.next_unit(), a4);
  // ... and into a fresh generator with another seed (the state carries the seed).
  Generator h(1);
  h.set_state(saved);
  EXPECT_EQ(h.seed(), 2024u);
  EXPECT_EQ(randn({5, 9}, h, DType::Float64).to_vector(), a1);
  EXPECT_EQ(rand({33}, h, DType::Float32).to_vector(), a2);
  EXPECT_EQ(h.next_u64(), a3);
  EXPECT_EQ(h.next_unit(), a4);
  EXPECT_EQ(h.state().offset, end_a.offset);
  EXPECT_EQ(h.state().seed, end_a.seed);
}

TEST(Random, NormalAndUniformMoments) {
  Generator g(99);
  const int64_t n = 100000;
  for (DType t : {DType::Float32, DType::Float64}) {
    auto v = randn({n}, g, t, Device::cpu(), 1.5, 2.0).to_vector();
    double m = 0, m2 = 0;
    for (double x : v) {
      ASSERT_TRUE(std::isfinite(x));
      m += x;
    }
    m /= n;
    for (double x : v) m2 += (x - m) * (x - m);
    double sd = std::sqrt(m2 / (n - 1));
    // Standard error of the mean is 2/sqrt(1e5) ~ 0.0063; of the std ~ 0.0045.
    EXPECT_NEAR(m, 1.5, 0.03) << dtype_name(t);
    EXPECT_NEAR(sd, 2.0, 0.03) << dtype_name(t);
    // Tails: about 4.55% beyond 2 sigma.
    int64_t beyond = 0;
    for (double x : v) beyond += std::fabs(x - 1.5) > 4.0;
    EXPECT_NEAR(static_cast<double>(beyond) / n, 0.0455, 0.005);

    auto u = rand({n}, g, t).to_vector();
    double um = 0;
    for (double x : u) {
      ASSERT_GE(x, 0.0);
      ASSERT_LT(x, 1.0);
      um += x;
    }
    EXPECT_NEAR(um / n, 0.5, 0.01);
  }
}

TEST(Random, NormalInPlaceAndErrors) {
  Generator g(3), h(3);
  Tensor x = Tensor::empty({4, 5}, DType::Float64);
  normal_(x, g, 0.0, 1.0);
  EXPECT_EQ(x.to_vector(), randn({4, 5}, h, DType::Float64).to_vector());
  Tensor t = Tensor::zeros({4, 5}).t();
  std::string m = thrown_message<ShapeError>([&] { normal_(t, g, 0.0, 1.0); });
  EXPECT_NE(m.find("(5, 4)"), std::string::npos) << m;
  EXPECT_THROW(randn({3}, g, DType::Int64), DTypeError);
  EXPECT_THROW(rand({3}, g, DType::Bool), DTypeError);
}

}  // namespace
