// test_op_registry.cpp — sweeps the op registry: every registered op is gradchecked in double
// precision and its forward compared with a naive reference in double and in float32; where a
// GPU exists, CPU and CUDA results are compared (forward and backward), else SKIPPED.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/ops.h"
#include "autograd/registry.h"
#include "support/test_util.h"

using namespace posgrad;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector(), y = b.to_vector();
  EXPECT_EQ(x.size(), y.size());
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

double max_abs(const Tensor& a) {
  double m = 0;
  for (double v : a.to_vector()) m = std::max(m, std::fabs(v));
  return m;
}

class OpRegistry : public ::testing::TestWithParam<size_t> {
 protected:
  const OpCase& op() const { return op_registry()[GetParam()]; }
};

TEST_P(OpRegistry, GradcheckDouble) {
  Generator gen(7 + GetParam());
  TensorList in = op().inputs(gen, DType::Float64);
  GradcheckResult r = gradcheck(op().fn, in, op().grad);
  EXPECT_TRUE(r.ok) << op().name << "\n" << r.summary();
}

TEST_P(OpRegistry, ForwardMatchesNaiveReference) {
  if (!op().reference) GTEST_SKIP() << op().name << " has no separate naive reference";
  Generator gen(11 + GetParam());
  TensorList in = op().inputs(gen, DType::Float64);
  Tensor y = op().fn(in), ref = op().reference(in);
  ASSERT_EQ(y.shape(), ref.shape()) << op().name;
  const double scale = std::max(1.0, max_abs(ref));
  EXPECT_LE(max_abs_diff(y, ref), op().forward_tol * scale) << op().name;

  // float32: same inputs rounded to float, looser tolerance.
  TensorList in32;
  for (const auto& t : in) in32.push_back(t.defined() && t.dtype() == DType::Float64 ? t.detach().to(DType::Float32) : t);
  Tensor y32 = op().fn(in32);
  EXPECT_EQ(y32.dtype(), DType::Float32) << op().name;
  EXPECT_LE(max_abs_diff(y32, ref), 1e-4 * scale) << op().name << " (float32)";
}

TEST_P(OpRegistry, CudaMatchesCpu) {
  POSGRAD_REQUIRE_CUDA();
  if (!op().cuda) GTEST_SKIP() << op().name << " has no CUDA kernel";
  Generator gen(13 + GetParam());
  TensorList cpu_in = op().inputs(gen, DType::Float32);
  TensorList gpu_in;
  for (const auto& t : cpu_in) {
    if (!t.defined()) { gpu_in.push_back(t); continue; }
    Tensor g = t.detach().to(Device::cuda());
    if (t.requires_grad()) g.set_requires_grad(true);
    gpu_in.push_back(g);
  }
  Tensor yc = op().fn(cpu_in), yg = op().fn(gpu_in);
  const double scale = std::max(1.0, max_abs(yc));
  EXPECT_LE(max_abs_diff(yc, yg), 1e-4 * scale) << op().name << " forward";
  if (!yc.requires_grad()) return;
  Generator rg(99);
  Tensor r = randn(yc.shape(), rg);
  yc.backward(r);
  yg.backward(r.to(Device::cuda()));
  for (size_t i = 0; i < cpu_in.size(); ++i) {
    if (!cpu_in[i].defined() || !cpu_in[i].requires_grad()) continue;
    Tensor gc = cpu_in[i].grad(), gg = gpu_in[i].grad();
    ASSERT_TRUE(gc.defined() && gg.defined()) << op().name << " input " << i;
    EXPECT_LE(max_abs_diff(gc, gg), 1e-4 * std::max(1.0, max_abs(gc))) << op().name << " grad of input " << i;
  }
}

std::string case_name(const ::testing::TestParamInfo<size_t>& info) {
  std::string s = op_registry()[info.param].name, out;
  for (char ch : s) out += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return out + "_" + std::to_string(info.param);
}

INSTANTIATE_TEST_SUITE_P(All, OpRegistry, ::testing::Range<size_t>(0, op_registry().size()), case_name);

TEST(OpRegistryMeta, NamesAreUnique) {
  std::set<std::string> seen;
  for (const auto& c : op_registry()) EXPECT_TRUE(seen.insert(c.name).second) << "duplicate case " << c.name;
}

}  // namespace
