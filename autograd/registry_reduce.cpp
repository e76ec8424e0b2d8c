// registry_reduce.cpp — op-registry cases for sum / mean / max and sum_to, with exact edge points for
// max: ties (the first maximum is returned and gets the whole gradient: torch.max(dim) returns the
// first maximal index and value_selecting_reduction_backward routes the gradient to it) and NaN
// (propagated wherever it sits, at the index of the first NaN, as torch.max / numpy).
#include <cmath>
#include <limits>

#include "autograd/ops.h"
#include "autograd/registry.h"

namespace posgrad {

namespace {

// Naive reduction over dims of a (3, 7, 13) tensor, keepdim.
Tensor reduce_ref(const Tensor& x, std::vector<bool> reduce, bool mean, bool max) {
  auto v = host(x);
  Shape s = x.shape(), o = s;
  for (size_t d = 0; d < s.size(); ++d)
    if (reduce[d]) o[d] = 1;
  std::vector<double> y(static_cast<size_t>(shape_numel(o)), max ? -1e300 : 0.0);
  std::vector<int64_t> cnt(y.size(), 0);
  Shape so = contiguous_strides(o);
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
    int64_t rem = i, off = 0;
    for (size_t d = s.size(); d-- > 0;) {
      int64_t k = rem % s[d];
      rem /= s[d];
      if (!reduce[d]) off += k * so[d];
    }
    if (max)
      y[off] = std::max(y[off], v[i]);
    else
      y[off] += v[i];
    cnt[off]++;
  }
  if (mean)
    for (size_t i = 0; i < y.size(); ++i) y[i] /= cnt[i];
  return Tensor::from_vector(y, o, DType::Float64);
}

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Two edge points for max(x, dim) on x (shape): the values with their gradient for upstream ones,
// and the indices (as floats, no gradient).
void add_max_edges(std::vector<EdgePoint>& out, const std::string& what, std::vector<double> x, Shape shape,
                   int64_t dim, std::vector<double> values, std::vector<double> dx, std::vector<double> indices) {
  EdgePoint v;
  v.what = what + ": values";
  v.inputs = [x, shape](DType t) { return TensorList{edge_input(x, shape, t)}; };
  v.fn = [dim](const TensorList& in) { return max(in[0], dim).first; };
  v.output = std::move(values);
  v.grads = {std::move(dx)};
  out.push_back(v);
  EdgePoint i = v;
  i.what = what + ": indices";
  i.fn = [dim](const TensorList& in) { return max(in[0], dim).second.to(in[0].dtype()); };
  i.output = std::move(indices);
  i.grads = {};
  out.push_back(i);
}

std::vector<EdgePoint> max_edges() {
  std::vector<EdgePoint> e;
  add_max_edges(e, "ties: first maximum", {2, 5, 5, 1}, {4}, 0, {5}, {0, 1, 0, 0}, {1});
  add_max_edges(e, "NaN after a larger value", {1, kNaN, 3}, {3}, 0, {kNaN}, {0, 1, 0}, {1});
  add_max_edges(e, "NaN first and last: the first NaN", {kNaN, 1, kNaN}, {3}, 0, {kNaN}, {1, 0, 0}, {0});
  add_max_edges(e, "all -inf: index 0", {-kInf, -kInf}, {2}, 0, {-kInf}, {1, 0}, {0});
  add_max_edges(e, "inf beats everything but NaN", {kInf, 7, kInf}, {3}, 0, {kInf}, {1, 0, 0}, {0});
  // (3, 2) along dim 0 (strided, inner = 2) and along dim 1 (rows, inner = 1).
  const std::vector<double> x32{1, kNaN, kNaN, 2, 3, 0};
  add_max_edges(e, "NaN along dim 0 of (3, 2)", x32, {3, 2}, 0, {kNaN, kNaN}, {0, 1, 1, 0, 0, 0}, {1, 0});
  add_max_edges(e, "NaN along dim 1 of (3, 2)", x32, {3, 2}, 1, {kNaN, kNaN, 3}, {0, 1, 1, 0, 1, 0}, {1, 0, 0});
  {  // a row of 130 (several CUDA threads per row): max 5 at 10, NaNs at 100 and 120
    std::vector<double> x(130, 0.0), dx(130, 0.0);
    x[10] = 5;
    x[100] = x[120] = kNaN;
    dx[100] = 1;
    add_max_edges(e, "long row: the first NaN (100) beats the maximum (10)", x, {130}, 0, {kNaN}, dx, {100});
    x[100] = x[120] = 0;
    x[77] = 5;  // a tie with 10
    dx.assign(130, 0.0);
    dx[10] = 1;
    add_max_edges(e, "long row: ties at 10 and 77, the first wins", x, {130}, 0, {5}, dx, {10});
  }
  return e;
}

}  // namespace

void register_reduce_cases(std::vector<OpCase>& out) {
  struct Spec {
    std::string name;
    std::vector<int64_t> dims;
    bool keep, mean;
  };
  for (const Spec& sp : {Spec{"sum/all", {0, 1, 2}, false, false}, Spec{"sum/dim1_keep", {1}, true, false},
                         Spec{"sum/dims02", {0, 2}, false, false}, Spec{"sum/last", {-1}, false, false},
                         Spec{"mean/dims01_keep", {0, 1}, true, true}, Spec{"mean/last", {-1}, false, true}}) {
    OpCase c;
    c.name = "reduce/" + sp.name;
    c.inputs = [](Generator& g, DType t) { return TensorList{make_input({3, 7, 13}, g, t)}; };
    c.fn = [sp](const TensorList& x) { return sp.mean ? mean(x[0], sp.dims, sp.keep) : sum(x[0], sp.dims, sp.keep); };
    c.reference = [sp](const TensorList& x) {
      std::vector<bool> r(3, false);
      for (int64_t d : sp.dims) r[(d + 3) % 3] = true;
      Tensor y = reduce_ref(x[0], r, sp.mean, false);
      if (sp.keep) return y;
      Shape o;
      for (int d = 0; d < 3; ++d)
        if (!r[d]) o.push_back(x[0].shape()[d]);
      return y.reshape(o);
    };
    out.push_back(c);
  }
  for (int64_t dim : {0, 1, 2}) {
    OpCase c;
    c.name = "reduce/max/dim" + std::to_string(dim);
    // A random permutation of distinct values: no ties, so max is differentiable.
    c.inputs = [](Generator& g, DType t) {
      const int64_t n = 3 * 7 * 13;
      std::vector<double> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = 0.01 * static_cast<double>(i);
      for (int64_t i = n - 1; i > 0; --i) std::swap(v[i], v[g.next_u64() % static_cast<uint64_t>(i + 1)]);
      Tensor x = Tensor::from_vector(v, {3, 7, 13}, t);
      x.set_requires_grad(true);
      return TensorList{x};
    };
    c.fn = [dim](const TensorList& x) { return max(x[0], dim, false).first; };
    if (dim == 0) c.edges = max_edges();
    c.reference = [dim](const TensorList& x) {
      std::vector<bool> r(3, false);
      r[dim] = true;
      Tensor y = reduce_ref(x[0], r, false, true);
      return y.squeeze(dim);
    };
    out.push_back(c);
  }
  {
    OpCase c;
    c.name = "reduce/sum_to/(3,7,13)->(7,1)";
    c.inputs = [](Generator& g, DType t) { return TensorList{make_input({3, 7, 13}, g, t)}; };
    c.fn = [](const TensorList& x) { return sum_to(x[0], {7, 1}); };
    c.reference = [](const TensorList& x) {
      return reduce_ref(x[0], {true, false, true}, false, false).reshape({7, 1});
    };
    out.push_back(c);
  }
}

}  // namespace posgrad
