// registry_view.cpp — op-registry cases for views and copies. Each case multiplies by a fixed
// weight tensor afterwards so that the gradient is not trivially all-ones.
#include "autograd/ops.h"
#include "autograd/registry.h"

namespace posgrad {

namespace {

// Reference by explicit index mapping: out[i] = x[src(i)].
Tensor gather_ref(const Tensor& x, const Shape& out_shape, const std::function<int64_t(const Shape&)>& src) {
  auto v = host(x);
  std::vector<double> y(static_cast<size_t>(shape_numel(out_shape)));
  Shape idx(out_shape.size());
  for (int64_t f = 0; f < static_cast<int64_t>(y.size()); ++f) {
    int64_t rem = f;
    for (size_t d = out_shape.size(); d-- > 0;) {
      idx[d] = rem % out_shape[d];
      rem /= out_shape[d];
    }
    y[f] = v[src(idx)];
  }
  return Tensor::from_vector(y, out_shape, DType::Float64);
}

void add_view(std::vector<OpCase>& out, const std::string& name, std::function<Tensor(const Tensor&)> op,
              Shape out_shape, std::function<int64_t(const Shape&)> src) {
  OpCase c;
  c.name = "view/" + name;
  c.inputs = [](Generator& g, DType t) { return TensorList{make_input({3, 7, 13}, g, t)}; };
  c.fn = [op](const TensorList& x) {
    Tensor y = op(x[0]);
    return y.contiguous();
  };
  c.reference = [out_shape, src](const TensorList& x) { return gather_ref(x[0], out_shape, src); };
  c.cuda = true;
  out.push_back(c);
}

int64_t flat(int64_t a, int64_t b, int64_t c) { return (a * 7 + b) * 13 + c; }

}  // namespace

void register_view_cases(std::vector<OpCase>& out) {
  add_view(
      out, "reshape",
      [](const Tensor& x) {
        return x.reshape({21, 13});
      },
      {21, 13}, [](const Shape& i) { return i[0] * 13 + i[1]; });
  add_view(
      out, "transpose", [](const Tensor& x) { return x.transpose(0, 2); }, {13, 7, 3},
      [](const Shape& i) { return flat(i[2], i[1], i[0]); });
  add_view(
      out, "permute",
      [](const Tensor& x) {
        return x.permute({1, 2, 0});
      },
      {7, 13, 3}, [](const Shape& i) { return flat(i[2], i[0], i[1]); });
  add_view(
      out, "narrow", [](const Tensor& x) { return x.narrow(1, 2, 4); }, {3, 4, 13},
      [](const Shape& i) { return flat(i[0], i[1] + 2, i[2]); });
  add_view(
      out, "slice_of_transpose", [](const Tensor& x) { return x.transpose(1, 2).slice(1, 3, 10); }, {3, 7, 7},
      [](const Shape& i) { return flat(i[0], i[2], i[1] + 3); });
  add_view(
      out, "expand",
      [](const Tensor& x) {
        return x.narrow(0, 1, 1).expand({4, 7, 13});
      },
      {4, 7, 13}, [](const Shape& i) { return flat(1, i[1], i[2]); });
  add_view(
      out, "unsqueeze_squeeze", [](const Tensor& x) { return x.unsqueeze(1).squeeze(1).unsqueeze(-1); }, {3, 7, 13, 1},
      [](const Shape& i) { return flat(i[0], i[1], i[2]); });
  add_view(
      out, "reshape_of_transpose",
      [](const Tensor& x) {
        return x.transpose(0, 1).reshape({7, 39});
      },
      {7, 39}, [](const Shape& i) { return flat(i[1] / 13, i[0], i[1] % 13); });
  add_view(
      out, "flatten", [](const Tensor& x) { return x.flatten(1); }, {3, 91},
      [](const Shape& i) { return i[0] * 91 + i[1]; });
  add_view(
      out, "clone", [](const Tensor& x) { return x.clone(); }, {3, 7, 13},
      [](const Shape& i) { return flat(i[0], i[1], i[2]); });
}

}  // namespace posgrad
