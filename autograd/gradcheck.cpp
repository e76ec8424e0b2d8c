// gradcheck.cpp — see gradcheck.h.
#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/ops.h"

namespace posgrad {

std::string GradcheckResult::summary() const {
  std::ostringstream os;
  for (const auto& r : inputs) {
    os << "input " << r.input << " " << shape_str(r.shape) << ": max_abs_err=" << r.max_abs_err
       << " max_rel_err=" << r.max_rel_err;
    if (!r.ok)
      os << "  FAILED at flat index " << r.worst_index << " (analytic " << r.worst_analytic << ", numeric "
         << r.worst_numeric << ")";
    os << "\n";
  }
  return os.str();
}

static double projected(const std::function<Tensor(const TensorList&)>& f, const TensorList& xs, const Tensor& r) {
  NoGradGuard guard;
  Tensor y = f(xs);
  POSGRAD_CHECK(y.shape() == r.shape(), ShapeError, "gradcheck: output shape changed between calls");
  Tensor yc = y.contiguous(), rc = r.contiguous();
  const double* a = yc.data<double>();
  const double* b = rc.data<double>();
  double s = 0;
  for (int64_t i = 0; i < yc.numel(); ++i) s += a[i] * b[i];
  return s;
}

GradcheckResult gradcheck(const std::function<Tensor(const TensorList&)>& f, const TensorList& inputs,
                          const GradcheckOptions& opt) {
  // Leaves of our own (fresh contiguous copies) so the caller's tensors are never touched.
  TensorList xs;
  for (const auto& t : inputs) {
    if (!t.defined()) {
      xs.push_back(t);
      continue;
    }
    POSGRAD_CHECK(t.device().is_cpu(), DeviceError, "gradcheck needs CPU inputs, got ", t.str());
    bool rg = t.requires_grad();
    POSGRAD_CHECK(!rg || t.dtype() == DType::Float64, DTypeError, "gradcheck needs float64 inputs, got ", t.str());
    Tensor c = t.detach().clone();
    if (rg) c.set_requires_grad(true);
    xs.push_back(c);
  }
  Tensor y = f(xs);
  POSGRAD_CHECK(y.dtype() == DType::Float64, DTypeError, "gradcheck: output must be float64, got ", y.str());
  Generator gen(opt.seed);
  Tensor r = randn(y.shape(), gen, DType::Float64);
  GradcheckResult res;
  if (!y.requires_grad()) {
    // No graph although an input requires grad: the op dropped its history (a bug), unless no
    // input asked for a gradient in the first place.
    for (const auto& t : xs)
      if (t.defined() && t.requires_grad()) res.ok = false;
    return res;
  }
  y.backward(r);

  for (size_t k = 0; k < xs.size(); ++k) {
    if (!xs[k].defined() || !xs[k].requires_grad()) continue;
    GradcheckInputReport rep;
    rep.input = k;
    rep.shape = xs[k].shape();
    Tensor g = xs[k].grad();
    std::vector<double> analytic = g.defined() ? g.to_vector() : std::vector<double>(xs[k].numel(), 0.0);
    double* p = xs[k].data<double>();
    // The reported element is a failing one when any fails (the largest error among those, NaN
    // counting as largest), else the one with the largest error.
    auto worse = [](double e, double than) { return std::isnan(e) ? !std::isnan(than) : e > than; };
    double worst_err = -1;
    for (int64_t i = 0; i < xs[k].numel(); ++i) {
      const double orig = p[i];
      p[i] = orig + opt.eps;
      const double fp = projected(f, xs, r);
      p[i] = orig - opt.eps;
      const double fm = projected(f, xs, r);
      p[i] = orig;
      const double numeric = (fp - fm) / (2 * opt.eps);
      const double err = std::fabs(analytic[i] - numeric);
      const double rel = err / std::max(std::fabs(numeric), 1e-12);
      const bool ok = err <= opt.atol + opt.rtol * std::fabs(numeric) && std::isfinite(analytic[i]);
      if (ok ? rep.ok && worse(err, worst_err) : rep.ok || worse(err, worst_err)) {
        worst_err = err;
        rep.worst_index = i;
        rep.worst_analytic = analytic[i];
        rep.worst_numeric = numeric;
      }
      rep.max_abs_err = std::max(rep.max_abs_err, err);
      if (std::fabs(numeric) > opt.atol) rep.max_rel_err = std::max(rep.max_rel_err, rel);
      if (!ok) rep.ok = false;
    }
    res.ok = res.ok && rep.ok;
    res.inputs.push_back(rep);
  }
  return res;
}

}  // namespace posgrad
