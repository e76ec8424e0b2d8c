// test_op_registry.cpp — sweeps the op registry: every registered op is gradchecked in double
// precision and its forward compared with a naive reference in double and in float32; where a
// GPU exists, CPU and CUDA results are compared (forward and backward), else SKIPPED. The cases'
// edge points (exact values at singular points, ties, NaN, extreme magnitudes) are checked in
// float32 and float64 on the CPU (EdgePoints) and on CUDA (EdgePointsCuda, SKIPPED without a GPU).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <sstream>

#include "autograd/ops.h"
#include "autograd/registry.h"
#include "nn/posenc/position_encoding.h"
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
  const OpCase& op() const { return nn::all_op_cases()[GetParam()]; }
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
  for (const auto& t : in)
    in32.push_back(t.defined() && t.dtype() == DType::Float64 ? t.detach().to(DType::Float32) : t);
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
    if (!t.defined()) {
      gpu_in.push_back(t);
      continue;
    }
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
  std::string s = nn::all_op_cases()[info.param].name, out;
  for (char ch : s) out += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return out + "_" + std::to_string(info.param);
}

INSTANTIATE_TEST_SUITE_P(All, OpRegistry, ::testing::Range<size_t>(0, nn::all_op_cases().size()), case_name);

TEST(OpRegistryMeta, NamesAreUnique) {
  std::set<std::string> seen;
  for (const auto& c : nn::all_op_cases()) EXPECT_TRUE(seen.insert(c.name).second) << "duplicate case " << c.name;
}

// ---- exact edge points -------------------------------------------------------------------------

// "" when got matches want elementwise (NaN <-> NaN, infinities exactly, else within
// ulps * epsilon * |want| * ulp_scale + atol), else a message naming the first mismatches.
std::string compare_exact(const std::vector<double>& got, const std::vector<double>& want, DType dt, const EdgePoint& e,
                          double ulp_scale) {
  std::ostringstream os;
  if (got.size() != want.size()) {
    os << got.size() << " values, expected " << want.size();
    return os.str();
  }
  const double eps = dt == DType::Float32 ? FLT_EPSILON : DBL_EPSILON;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    bool ok;
    if (std::isnan(w))
      ok = std::isnan(g);
    else if (std::isinf(w))
      ok = g == w;
    else
      ok = std::isfinite(g) && std::fabs(g - w) <= e.ulps * ulp_scale * eps * std::fabs(w) + e.atol;
    if (!ok && bad++ < 4) os << " [" << i << "] got " << g << " want " << w << ";";
  }
  if (bad) os << " (" << bad << " of " << got.size() << " differ)";
  return os.str();
}

void check_edge_point(const OpCase& c, const EdgePoint& e, DType dt, Device dev) {
  const double ulp_scale = dev.is_cuda() ? 4.0 : 1.0;  // CUDA's expf/logf: a few ulps, not 1/2
  const std::string where = c.name + " | " + e.what + " | " + dtype_name(dt) + " " + dev.str();
  TensorList in;
  for (const auto& t : e.inputs(dt)) {
    if (!t.defined()) {
      in.push_back(t);
      continue;
    }
    Tensor d = t.detach().to(dev);
    if (t.requires_grad()) d.set_requires_grad(true);
    in.push_back(d);
  }
  Tensor y = e.fn ? e.fn(in) : c.fn(in);
  const std::string out_err = compare_exact(y.to_vector(), e.output, dt, e, ulp_scale);
  EXPECT_TRUE(out_err.empty()) << where << ": output:" << out_err;
  bool any_grad = false;
  for (const auto& g : e.grads) any_grad = any_grad || !g.empty();
  if (!any_grad) return;
  ASSERT_TRUE(y.requires_grad()) << where << ": gradients expected but the output has no history";
  Tensor go = e.grad_out.empty() ? Tensor::ones(y.shape(), y.dtype(), dev)
                                 : Tensor::from_vector(e.grad_out, y.shape(), y.dtype()).to(dev);
  y.backward(go);
  for (size_t i = 0; i < e.grads.size(); ++i) {
    if (e.grads[i].empty()) continue;
    ASSERT_LT(i, in.size()) << where;
    ASSERT_TRUE(in[i].defined() && in[i].requires_grad()) << where << ": input " << i << " does not require grad";
    Tensor g = in[i].grad();
    ASSERT_TRUE(g.defined()) << where << ": no gradient for input " << i;
    const std::string err = compare_exact(g.to_vector(), e.grads[i], dt, e, ulp_scale);
    EXPECT_TRUE(err.empty()) << where << ": gradient of input " << i << ":" << err;
  }
}

std::vector<size_t> edge_case_indices() {
  std::vector<size_t> v;
  for (size_t i = 0; i < nn::all_op_cases().size(); ++i)
    if (!nn::all_op_cases()[i].edges.empty()) v.push_back(i);
  return v;
}

class OpRegistryEdges : public ::testing::TestWithParam<size_t> {
 protected:
  const OpCase& op() const { return nn::all_op_cases()[GetParam()]; }
};

TEST_P(OpRegistryEdges, EdgePoints) {
  for (DType dt : {DType::Float32, DType::Float64})
    for (const auto& e : op().edges) check_edge_point(op(), e, dt, Device::cpu());
}

TEST_P(OpRegistryEdges, EdgePointsCuda) {
  POSGRAD_REQUIRE_CUDA();
  if (!op().cuda) GTEST_SKIP() << op().name << " has no CUDA kernel";
  for (DType dt : {DType::Float32, DType::Float64})
    for (const auto& e : op().edges) check_edge_point(op(), e, dt, Device::cuda());
}

INSTANTIATE_TEST_SUITE_P(WithEdges, OpRegistryEdges, ::testing::ValuesIn(edge_case_indices()), case_name);

// Every registered position encoding except NoPE brings its own cases, so a new encoding is
// gradchecked and swept by adding it to the registry.
TEST(OpRegistryMeta, EveryEncodingHasCases) {
  for (const auto& kind : nn::position_encoding_kinds()) {
    if (kind == "none") continue;  // nothing differentiable of its own
    int n = 0;
    for (const auto& c : nn::all_op_cases()) n += c.name.rfind("posenc/" + kind + "/", 0) == 0 ? 1 : 0;
    EXPECT_GT(n, 0) << "no op cases for encoding " << kind;
  }
}

// Every op with a singular point, a tie rule, a saturation or a log-sum-exp carries exact edge
// points (an op added to this list without them, or losing them, fails here).
TEST(OpRegistryMeta, SingularOpsHaveEdgePoints) {
  for (const char* name : {"elementwise/pow", "elementwise/sqrt", "elementwise/log", "elementwise/exp",
                           "elementwise/tanh", "elementwise/relu", "elementwise/gelu", "elementwise/gelu_tanh",
                           "elementwise/silu", "elementwise/div/(3, 7, 13)x(7, 13)", "reduce/max/dim0",
                           "nn/softmax/dim-1(3, 7, 13)", "nn/log_softmax/dim-1(3, 7, 13)", "nn/cross_entropy/NV_ignore",
                           "nn/cross_entropy_rows/NV", "nn/layer_norm/affine", "nn/rms_norm/weight",
                           "attention/none/bidir/2x1x7x3", "attention/sinks/none/bidir/2x3x7x5"}) {
    bool found = false;
    for (const auto& c : nn::all_op_cases())
      if (c.name == name) {
        found = true;
        EXPECT_FALSE(c.edges.empty()) << name << " has no edge points";
      }
    EXPECT_TRUE(found) << "no registry case " << name;
  }
}

}  // namespace
