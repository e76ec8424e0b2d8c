// registry_elementwise.cpp — op-registry cases for the elementwise ops (incl. broadcasting), with
// exact edge points at the singular points of each derivative. Conventions are PyTorch's
// (tools/autograd/derivatives.yaml, FunctionsManual.cpp): pow_backward gives 0 for exponent 0
// everywhere; sqrt' = dy / (2 sqrt(x)) and log' = dy / x are +inf at 0; relu' (threshold_backward)
// is 0 at 0; div's divisor gradient is -dy * ((a / b) / b) (div_tensor_other_backward).
#include <cmath>
#include <limits>

#include "autograd/ops.h"
#include "autograd/registry.h"

namespace posgrad {

namespace {

// Naive broadcasting reference: out[idx] = f(a[bcast idx], b[bcast idx]).
template <typename F>
Tensor broadcast_ref(const Tensor& a, const Tensor& b, F f) {
  Shape out = broadcast_shapes(a.shape(), b.shape());
  auto av = host(a), bv = host(b);
  std::vector<double> y(static_cast<size_t>(shape_numel(out)));
  const size_t n = out.size();
  auto offset = [&](const Shape& s, int64_t flat) {
    Shape st = contiguous_strides(s);
    int64_t off = 0, rem = flat;
    for (size_t d = n; d-- > 0;) {
      int64_t i = rem % out[d];
      rem /= out[d];
      int64_t sd = static_cast<int64_t>(d) - static_cast<int64_t>(n - s.size());
      if (sd >= 0 && s[sd] != 1) off += i * st[sd];
    }
    return off;
  };
  for (int64_t i = 0; i < static_cast<int64_t>(y.size()); ++i)
    y[i] = f(av[offset(a.shape(), i)], bv[offset(b.shape(), i)]);
  return Tensor::from_vector(y, out, DType::Float64);
}

template <typename F>
Tensor map_ref(const Tensor& x, F f) {
  auto v = host(x);
  for (auto& e : v) e = f(e);
  return Tensor::from_vector(v, x.shape(), DType::Float64);
}

void add_binary(std::vector<OpCase>& out, const std::string& name, Tensor (*op)(const Tensor&, const Tensor&),
                double (*f)(double, double), Shape sa, Shape sb, double lo = -1, double hi = 1) {
  OpCase c;
  c.name = "elementwise/" + name + "/" + shape_str(sa) + "x" + shape_str(sb);
  c.inputs = [=](Generator& g, DType t) {
    return TensorList{make_input(sa, g, t, true, lo, hi), make_input(sb, g, t, true, lo, hi)};
  };
  c.fn = [op](const TensorList& x) { return op(x[0], x[1]); };
  c.reference = [f](const TensorList& x) { return broadcast_ref(x[0], x[1], f); };
  out.push_back(c);
}

void add_unary(std::vector<OpCase>& out, const std::string& name, std::function<Tensor(const Tensor&)> op,
               std::function<double(double)> f, double lo, double hi, Shape s = {3, 7, 13}) {
  OpCase c;
  c.name = "elementwise/" + name;
  c.inputs = [=](Generator& g, DType t) {
    Tensor x = make_input(s, g, t, false, lo, hi);
    if (name == "relu" || name == "clamp_min") {  // keep away from the kinks at 0 and 0.02
      auto v = x.to_vector();
      for (auto& e : v) e = (e >= 0 ? 1 : -1) * (std::fabs(e) + 0.05);
      x = Tensor::from_vector(v, s, t);
    }
    x.set_requires_grad(true);
    return TensorList{x};
  };
  c.fn = [op](const TensorList& x) { return op(x[0]); };
  c.reference = [f](const TensorList& x) { return map_ref(x[0], f); };
  out.push_back(c);
}

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A one-input edge point: x (n) -> fn(x), with the expected output and dx for upstream ones (or
// grad_out when given).
EdgePoint unary_edge(std::string what, std::vector<double> x, std::vector<double> y, std::vector<double> dx,
                     std::function<Tensor(const TensorList&)> fn = nullptr, std::vector<double> grad_out = {}) {
  EdgePoint e;
  e.what = std::move(what);
  const Shape s{static_cast<int64_t>(x.size())};
  e.inputs = [x, s](DType t) { return TensorList{edge_input(x, s, t)}; };
  e.fn = std::move(fn);
  e.output = std::move(y);
  e.grads = {std::move(dx)};
  e.grad_out = std::move(grad_out);
  return e;
}

OpCase& find_case(std::vector<OpCase>& out, const std::string& name) {
  for (auto& c : out)
    if (c.name == name) return c;
  throw Error("op registry: no case named " + name);
}

void add_elementwise_edges(std::vector<OpCase>& out) {
  auto pow_by = [](double e) { return [e](const TensorList& x) { return pow(x[0], e); }; };
  find_case(out, "elementwise/pow").edges = {
      // pow_backward: `exponent == 0 ? zeros_like(self) : grad * exponent * self^(exponent - 1)`. The
      // formula would give 0 * 0^-1 = NaN at 0; zeros are returned whatever the upstream gradient.
      unary_edge("x^0 at x = 0, -0, 2, -3, inf: 1; d/dx = 0 everywhere, even for an infinite upstream gradient",
                 {0.0, -0.0, 2.0, -3.0, kInf}, {1, 1, 1, 1, 1}, {0, 0, 0, 0, 0}, pow_by(0.0), {1, 1, 1, 1, kInf}),
      unary_edge("x^2.5 at 0: 0, d/dx = 2.5 * 0^1.5 = 0; at 4: 32, 20", {0.0, 4.0}, {0, 32}, {0, 20}, pow_by(2.5)),
      unary_edge("x^0.5 at 0: d/dx = +inf", {0.0, 4.0}, {0, 2}, {kInf, 0.25}, pow_by(0.5)),
      unary_edge("x^1 at 0: d/dx = 1 (0^0 = 1)", {0.0, -2.0}, {0, -2}, {1, 1}, pow_by(1.0)),
      unary_edge("x^-1 at +-0: +-inf, d/dx = -inf", {0.0, -0.0}, {kInf, -kInf}, {-kInf, -kInf}, pow_by(-1.0)),
  };
  find_case(out, "elementwise/sqrt").edges = {
      unary_edge("sqrt at 0: d/dx = dy / (2 sqrt 0) = +inf; at -1: NaN", {0.0, 4.0, -1.0}, {0, 2, kNaN},
                 {kInf, 0.25, kNaN}),
  };
  find_case(out, "elementwise/log").edges = {
      unary_edge("log at 0: -inf, d/dx = dy / x = +inf; at -1: NaN, d/dx = -1; at inf: inf, 0", {0.0, 1.0, -1.0, kInf},
                 {-kInf, 0, kNaN, kInf}, {kInf, 1, -1, 0}),
  };
  find_case(out, "elementwise/exp").edges = {
      unary_edge("exp at -inf: 0, d/dx = 0; at 1000: overflow to inf", {-kInf, 0.0, 1000.0}, {0, 1, kInf},
                 {0, 1, kInf}),
  };
  find_case(out, "elementwise/tanh").edges = {
      unary_edge("tanh saturates: +-inf and 30 give +-1 with derivative exactly 0", {0.0, kInf, -kInf, 30.0},
                 {0, 1, -1, 1}, {1, 0, 0, 0}),
  };
  find_case(out, "elementwise/relu").edges = {
      unary_edge("relu'(0) = 0 (threshold_backward: gradient where x > 0)", {0.0, -0.0, 1.5, -2.0}, {0, 0, 1.5, 0},
                 {0, 0, 1, 0}),
  };
  find_case(out, "elementwise/gelu").edges = {
      unary_edge("gelu at 0: 0, slope 1/2; saturated at +-40", {0.0, 40.0, -40.0}, {0, 40, 0}, {0.5, 1, 0}),
  };
  find_case(out, "elementwise/gelu_tanh").edges = {
      unary_edge("gelu (tanh form) at 0: 0, slope 1/2; saturated at +-40", {0.0, 40.0, -40.0}, {0, 40, 0}, {0.5, 1, 0}),
  };
  find_case(out, "elementwise/silu").edges = {
      unary_edge("silu at 0: 0, slope 1/2; exp(-x) overflowing at -1000 gives 0 and slope 0, not NaN",
                 {0.0, -1000.0, 1000.0}, {0, 0, 1000}, {0.5, 0, 1}),
  };
  {
    // Divisor gradient -dy * ((a / b) / b): with b = 2^-80, b * b = 2^-160 underflows float32 to 0
    // and the old -dy * a / (b * b) gave -inf instead of -2^80.
    const double t = std::ldexp(1.0, -80), T = std::ldexp(1.0, 80);
    EdgePoint e;
    e.what = "a / b at b = 0 (inf, NaN for 0/0) and at b = 2^-80 (b*b underflows in float32): db = -dy (a/b)/b";
    e.inputs = [t](DType dt) {
      return TensorList{edge_input({1.0, 0.0, -1.0, t}, {4}, dt), edge_input({0.0, 0.0, 0.0, t}, {4}, dt)};
    };
    e.fn = [](const TensorList& x) { return div(x[0], x[1]); };
    e.output = {kInf, kNaN, -kInf, 1};
    e.grads = {{kInf, kInf, kInf, T}, {-kInf, kNaN, kInf, -T}};
    find_case(out, "elementwise/div/(3, 7, 13)x(7, 13)").edges = {e};
  }
}

}  // namespace

void register_elementwise_cases(std::vector<OpCase>& out) {
  auto fadd = [](double a, double b) { return a + b; };
  auto fsub = [](double a, double b) { return a - b; };
  auto fmul = [](double a, double b) { return a * b; };
  auto fdiv = [](double a, double b) { return a / b; };
  add_binary(out, "add", add, fadd, {3, 7, 13}, {3, 7, 13});
  add_binary(out, "add", add, fadd, {3, 7, 13}, {13});
  add_binary(out, "add", add, fadd, {3, 1, 13}, {7, 1});
  add_binary(out, "sub", sub, fsub, {3, 7, 13}, {1, 7, 1});
  add_binary(out, "mul", mul, fmul, {3, 7, 13}, {3, 7, 13});
  add_binary(out, "mul", mul, fmul, {7, 13}, {3, 1, 13});
  add_binary(out, "mul", mul, fmul, {3, 7, 13}, {});
  add_binary(out, "div", div, fdiv, {3, 7, 13}, {7, 13}, 0.5, 2.0);
  add_binary(out, "div", div, fdiv, {3, 7, 1}, {3, 1, 13}, 0.5, 2.0);

  add_unary(
      out, "neg", [](const Tensor& x) { return neg(x); }, [](double v) { return -v; }, -1, 1);
  add_unary(
      out, "exp", [](const Tensor& x) { return exp(x); }, [](double v) { return std::exp(v); }, -2, 2);
  add_unary(
      out, "log", [](const Tensor& x) { return log(x); }, [](double v) { return std::log(v); }, 0.2, 3);
  add_unary(
      out, "sqrt", [](const Tensor& x) { return sqrt(x); }, [](double v) { return std::sqrt(v); }, 0.2, 3);
  add_unary(
      out, "pow", [](const Tensor& x) { return pow(x, 2.5); }, [](double v) { return std::pow(v, 2.5); }, 0.2, 2);
  add_unary(
      out, "tanh", [](const Tensor& x) { return tanh(x); }, [](double v) { return std::tanh(v); }, -2, 2);
  add_unary(
      out, "relu", [](const Tensor& x) { return relu(x); }, [](double v) { return v > 0 ? v : 0.0; }, -1, 1);
  add_unary(
      out, "clamp_min", [](const Tensor& x) { return clamp_min(x, 0.02); },
      [](double v) { return v < 0.02 ? 0.02 : v; }, -1, 1);
  add_unary(
      out, "gelu", [](const Tensor& x) { return gelu(x); },
      [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }, -3, 3);
  add_unary(
      out, "gelu_tanh", [](const Tensor& x) { return gelu(x, true); },
      [](double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); }, -3, 3);
  add_unary(
      out, "silu", [](const Tensor& x) { return silu(x); }, [](double v) { return v / (1 + std::exp(-v)); }, -3, 3);
  add_unary(
      out, "add_scalar", [](const Tensor& x) { return x + 1.5; }, [](double v) { return v + 1.5; }, -1, 1);
  add_unary(
      out, "mul_scalar", [](const Tensor& x) { return x * -0.75; }, [](double v) { return v * -0.75; }, -1, 1);

  {  // masked_fill with a broadcast causal mask
    OpCase c;
    c.name = "elementwise/masked_fill/causal";
    c.inputs = [](Generator& g, DType t) { return TensorList{make_input({3, 7, 7}, g, t)}; };
    c.fn = [](const TensorList& x) { return masked_fill(x[0], causal_mask(7, x[0].device()), -2.0); };
    c.reference = [](const TensorList& x) {
      auto v = host(x[0]);
      for (int64_t b = 0; b < 3; ++b)
        for (int64_t i = 0; i < 7; ++i)
          for (int64_t j = i + 1; j < 7; ++j) v[(b * 7 + i) * 7 + j] = -2.0;
      return Tensor::from_vector(v, {3, 7, 7}, DType::Float64);
    };
    out.push_back(c);
  }
  {  // dropout: gradcheck with a fixed seed (the mask is a constant of the function)
    OpCase c;
    c.name = "elementwise/dropout";
    c.inputs = [](Generator& g, DType t) { return TensorList{make_input({3, 7, 13}, g, t)}; };
    c.fn = [](const TensorList& x) {
      Generator g(42);
      return dropout(x[0], 0.3, true, g);
    };
    c.reference = [](const TensorList& x) {
      auto v = host(x[0]);
      for (size_t i = 0; i < v.size(); ++i) {
        bool keep = u32_to_unit(philox4x32(i, 42).v[0]) >= 0.3;
        v[i] = keep ? v[i] / 0.7 : 0.0;
      }
      return Tensor::from_vector(v, x[0].shape(), DType::Float64);
    };
    out.push_back(c);
  }
  add_elementwise_edges(out);
}

}  // namespace posgrad
