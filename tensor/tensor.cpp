// tensor.cpp — factories, metadata, element access and the view primitives of Tensor. The
// methods here validate arguments; then a tensor that does not require grad takes the autograd-free
// primitive (tensor/nograd.h), and one that does goes to the differentiable Function of
// autograd/ops/view.cpp through the hooks the autograd layer installs (tensor/autograd_hooks.h).
// This layer includes nothing from autograd.
//
// Size safety: every element count, stride and byte count is computed with overflow checks
// (shape_numel, contiguous_strides, shape_nbytes). A shape whose element count overflows int64, or
// whose byte count does not fit a ptrdiff_t (the largest object C++ can address), is a ShapeError
// naming the shape; a size that is representable but cannot be allocated is an OutOfMemoryError
// naming the bytes (storage.cpp). Before, ones({1 << 62}) wrapped to a 0-byte buffer and wrote past
// it, and zeros({1 << 32, 1 << 32}) had numel() == 0.
#include "tensor/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>
#include <sstream>
#include <type_traits>

#include "tensor/autograd_hooks.h"
#include "tensor/kernels/kernels.h"
#include "tensor/nograd.h"

namespace posgrad {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  if (s.size() == 1) os << ",";
  os << ")";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  for (int64_t d : s) POSGRAD_CHECK(d >= 0, ShapeError, "negative dimension in shape ", shape_str(s));
  // A zero dim makes the tensor empty whatever the other dims (contiguous_strides still checks
  // that their strides are representable).
  if (std::find(s.begin(), s.end(), int64_t(0)) != s.end()) return 0;
  int64_t n = 1;
  for (int64_t d : s)
    POSGRAD_CHECK(!__builtin_mul_overflow(n, d, &n), ShapeError, "shape ", shape_str(s),
                  " has more elements than int64 can count");
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int64_t i = static_cast<int64_t>(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    if (i > 0)  // the product of all dims is not a stride: an empty shape may exceed int64 there
      POSGRAD_CHECK(!__builtin_mul_overflow(acc, std::max<int64_t>(s[i], 1), &acc), ShapeError, "strides of shape ",
                    shape_str(s), " overflow int64");
  }
  return st;
}

size_t shape_nbytes(const Shape& s, DType dtype) {
  const int64_t n = shape_numel(s);
  int64_t bytes = 0;
  POSGRAD_CHECK(!__builtin_mul_overflow(n, static_cast<int64_t>(dtype_size(dtype)), &bytes), ShapeError, "shape ",
                shape_str(s), " of ", dtype_name(dtype), " (", n, " elements of ", dtype_size(dtype),
                " bytes) has a byte count beyond the address space (overflow)");
  return static_cast<size_t>(bytes);
}

static void check_shape(const Shape& shape, const char* what) {
  for (int64_t d : shape) POSGRAD_CHECK(d >= 0, ShapeError, what, ": negative dimension in shape ", shape_str(shape));
  POSGRAD_CHECK(shape.size() <= static_cast<size_t>(kernels::kMaxDims), ShapeError, what, ": shape ", shape_str(shape),
                " has more than ", kernels::kMaxDims, " dims");
  // contiguous_strides multiplies the extents after each dim (zeros counted as 1), so the largest
  // stride — the product of every extent but the first — must fit in int64 even when the tensor is
  // empty: (0, 2^62, 4) holds nothing but its strides overflow; (2^40, 2^40, 0) is a valid empty tensor.
  int64_t span = 1;
  for (size_t i = 1; i < shape.size(); ++i) {
    const int64_t d = shape[i];
    const int64_t e = std::max<int64_t>(d, 1);
    POSGRAD_CHECK(span <= std::numeric_limits<int64_t>::max() / e, ShapeError, what, ": shape ", shape_str(shape),
                  " has more elements (counting empty dims as 1) than an int64 can index");
    span *= e;
  }
}

TensorImpl& Tensor::impl() const {
  if (!impl_) throw Error("use of an undefined tensor");
  return *impl_;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device dev) {
  check_shape(shape, "empty");
  const size_t nbytes = shape_nbytes(shape, dtype);
  Shape strides = contiguous_strides(shape);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(nbytes, dev);
  impl->shape = shape;
  impl->strides = std::move(strides);
  impl->dtype = dtype;
  return Tensor(impl);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device dev) {
  Tensor t = empty(shape, dtype, dev);
  backend(dev.type).zero(t.raw_data(), shape_nbytes(shape, dtype));
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device dev) {
  Tensor t = empty(shape, dtype, dev);
  switch (dtype) {
    case DType::Float32: POSGRAD_KERNEL(dev, fill<float>, t.data<float>(), t.numel(), float(value)); break;
    case DType::Float64: POSGRAD_KERNEL(dev, fill<double>, t.data<double>(), t.numel(), value); break;
    case DType::Int64: POSGRAD_KERNEL(dev, fill<int64_t>, t.data<int64_t>(), t.numel(), int64_t(value)); break;
    case DType::Bool:
      POSGRAD_KERNEL(dev, fill<uint8_t>, static_cast<uint8_t*>(t.raw_data()), t.numel(), uint8_t(value != 0));
      break;
  }
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Device dev) { return full(shape, 1.0, dtype, dev); }
Tensor Tensor::scalar(double v, DType dtype, Device dev) { return full({}, v, dtype, dev); }

Tensor Tensor::from_vector(const std::vector<double>& v, const Shape& shape, DType dtype) {
  POSGRAD_CHECK(static_cast<int64_t>(v.size()) == shape_numel(shape), ShapeError, "from_vector: ", v.size(),
                " values do not fill shape ", shape_str(shape));
  Tensor t = empty(shape, dtype);
  switch (dtype) {
    case DType::Float32: std::copy(v.begin(), v.end(), t.data<float>()); break;
    case DType::Float64: std::copy(v.begin(), v.end(), t.data<double>()); break;
    case DType::Int64:
      for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = static_cast<int64_t>(v[i]);
      break;
    case DType::Bool:
      for (size_t i = 0; i < v.size(); ++i) static_cast<uint8_t*>(t.raw_data())[i] = v[i] != 0;
      break;
  }
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& v, const Shape& shape) {
  POSGRAD_CHECK(static_cast<int64_t>(v.size()) == shape_numel(shape), ShapeError, "from_vector: ", v.size(),
                " values do not fill shape ", shape_str(shape));
  Tensor t = empty(shape, DType::Float32);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

Tensor Tensor::from_ints(const std::vector<int64_t>& v, const Shape& shape) {
  POSGRAD_CHECK(static_cast<int64_t>(v.size()) == shape_numel(shape), ShapeError, "from_ints: ", v.size(),
                " values do not fill shape ", shape_str(shape));
  Tensor t = empty(shape, DType::Int64);
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

Tensor Tensor::arange(int64_t n, DType dtype) {
  POSGRAD_CHECK(n >= 0, ValueError, "arange(", n, "): negative length");
  Tensor t = empty({n}, dtype);  // sized (and checked) first: no host staging vector of n doubles
  // Element i is the value i rounded to the dtype.
  auto fill = [n](auto* p) {
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<std::remove_pointer_t<decltype(p)>>(i);
  };
  switch (dtype) {
    case DType::Float32: fill(t.data<float>()); break;
    case DType::Float64: fill(t.data<double>()); break;
    case DType::Int64: fill(t.data<int64_t>()); break;
    case DType::Bool:  // i != 0
      for (int64_t i = 0; i < n; ++i) static_cast<uint8_t*>(t.raw_data())[i] = i != 0;
      break;
  }
  return t;
}

int64_t Tensor::wrap_dim(int64_t d, bool for_insert) const {
  int64_t n = dim() + (for_insert ? 1 : 0);
  int64_t w = d < 0 ? d + n : d;
  // Strictly below n: a 0-d tensor has no dim to index (only an insert, e.g. unsqueeze, may name
  // dim 0 of it); allowing dim 0 there made size(0), narrow, squeeze, sum and max read shape()[0]
  // of an empty shape.
  POSGRAD_CHECK(w >= 0 && w < n, IndexError, "dim ", d, " out of range for tensor of shape ", shape_str(shape()));
  return w;
}

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d)]; }

bool Tensor::is_contiguous() const {
  const auto& s = shape();
  const auto& st = strides();
  // An empty tensor has no elements to lay out: contiguous whatever its strides (as PyTorch's), so a
  // freshly made one with a zero dim (whose strides treat that dim as 1) is.
  for (const int64_t n : s)
    if (n == 0) return true;
  int64_t expect = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (s[i] == 1) continue;
    if (st[i] != expect) return false;
    expect *= s[i];
  }
  return true;
}

std::string Tensor::str() const {
  if (!defined()) return "undefined";
  return std::string(dtype_name(dtype())) + shape_str(shape()) + (device().is_cpu() ? "" : " " + device().str());
}

void* Tensor::raw_data() const {
  return static_cast<char*>(impl().storage->data()) + impl().offset * static_cast<int64_t>(dtype_size(dtype()));
}

template <typename T>
T* Tensor::data() const {
  constexpr DType want = dtype_of<T>::value;
  POSGRAD_CHECK(dtype() == want, DTypeError, "tensor ", str(), " accessed as ", dtype_name(want));
  return static_cast<T*>(raw_data());
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template int64_t* Tensor::data<int64_t>() const;
template uint8_t* Tensor::data<uint8_t>() const;

Tensor Tensor::as_strided_nograd(const Shape& shape, const Shape& strides, int64_t offset) const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = this->impl().storage;
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dtype();
  return Tensor(impl);
}

Tensor Tensor::detach() const {
  Tensor t = as_strided_nograd(shape(), strides(), offset());
  t.impl().name = impl().name;
  return t;
}

Tensor& Tensor::set_requires_grad(bool r) {
  POSGRAD_CHECK(is_leaf(), AutogradError, "set_requires_grad on non-leaf tensor ", str(), " (detach() it first)");
  POSGRAD_CHECK(!r || is_floating(dtype()), DTypeError, "only floating tensors can require grad, got ", str());
  impl().requires_grad = r;
  return *this;
}

// ---- views ------------------------------------------------------------------------------------

// The differentiable views and copies. Function::apply records a node only when an input requires
// grad, and for these ops the input is `x` alone: a tensor that does not require grad has no
// history to record under any grad mode, and the op's result is its forward, the nograd primitive.
// So that case needs no autograd layer; the other goes through the installed hooks.
namespace {

Tensor diff_view_as(const Tensor& x, const Shape& shape, const Shape& strides) {
  return x.requires_grad() ? autograd_hooks("view").view_as(x, shape, strides) : nograd::view_as(x, shape, strides);
}
Tensor diff_permute(const Tensor& x, const std::vector<int64_t>& dims) {
  return x.requires_grad() ? autograd_hooks("permute").permute(x, dims) : nograd::permute(x, dims);
}
Tensor diff_narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  return x.requires_grad() ? autograd_hooks("narrow").narrow(x, dim, start, length)
                           : nograd::narrow(x, dim, start, length);
}
Tensor diff_expand(const Tensor& x, const Shape& shape) {
  return x.requires_grad() ? autograd_hooks("expand").expand(x, shape) : nograd::expand(x, shape);
}
Tensor diff_copy(const Tensor& x) { return x.requires_grad() ? autograd_hooks("copy").copy(x) : nograd::copy(x); }
Tensor diff_to_dtype(const Tensor& x, DType t) {
  return x.requires_grad() ? autograd_hooks("to(dtype)").to_dtype(x, t) : nograd::to_dtype(x, t);
}
Tensor diff_to_device(const Tensor& x, Device d) {
  return x.requires_grad() ? autograd_hooks("to(device)").to_device(x, d) : nograd::to_device(x, d);
}

}  // namespace

static Shape infer_shape(const Shape& want, int64_t numel, const Shape& from) {
  Shape out = want;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      POSGRAD_CHECK(infer < 0, ShapeError, "view ", shape_str(from), " -> ", shape_str(want), ": only one -1 allowed");
      infer = static_cast<int64_t>(i);
    } else {
      POSGRAD_CHECK(out[i] >= 0, ShapeError, "view ", shape_str(from), " -> ", shape_str(want), ": negative size");
      POSGRAD_CHECK(!__builtin_mul_overflow(known, out[i], &known), ShapeError, "view ", shape_str(from), " -> ",
                    shape_str(want), ": the sizes overflow int64");
    }
  }
  if (infer >= 0) {
    POSGRAD_CHECK(known > 0 && numel % known == 0, ShapeError, "cannot view shape ", shape_str(from), " as ",
                  shape_str(want));
    out[infer] = numel / known;
  }
  POSGRAD_CHECK(shape_numel(out) == numel, ShapeError, "cannot view shape ", shape_str(from), " (", numel,
                " elements) as ", shape_str(want));
  return out;
}

// Strides that let a tensor with (shape, strides) be viewed as new_shape without a copy, or
// nullopt. Groups old dims into runs that are contiguous with each other and splits/merges
// within a run (the same rule as PyTorch's computeStride).
static std::optional<Shape> view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape) {
  Shape out(new_shape.size());
  if (shape_numel(shape) == 0 || shape.empty()) return contiguous_strides(new_shape);
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

Tensor Tensor::view(const Shape& want) const {
  Shape s = infer_shape(want, numel(), shape());
  auto st = view_strides(shape(), strides(), s);
  POSGRAD_CHECK(st.has_value(), ShapeError, "view ", shape_str(shape()), " -> ", shape_str(s),
                ": incompatible strides ", shape_str(strides()), " (use reshape)");
  return diff_view_as(*this, s, *st);
}

Tensor Tensor::reshape(const Shape& want) const {
  Shape s = infer_shape(want, numel(), shape());
  auto st = view_strides(shape(), strides(), s);
  if (st) return diff_view_as(*this, s, *st);
  return diff_view_as(contiguous(), s, contiguous_strides(s));
}

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  if (dim() == 0) return reshape({1});
  start = wrap_dim(start);
  end = wrap_dim(end);
  Shape s;
  for (int64_t i = 0; i < start; ++i) s.push_back(shape()[i]);
  int64_t m = 1;
  for (int64_t i = start; i <= end; ++i) m *= shape()[i];
  s.push_back(m);
  for (int64_t i = end + 1; i < dim(); ++i) s.push_back(shape()[i]);
  return reshape(s);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  POSGRAD_CHECK(static_cast<int64_t>(dims.size()) == dim(), ShapeError, "permute of ", shape_str(shape()), " needs ",
                dim(), " dims, got ", dims.size());
  std::vector<int64_t> p(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    p[i] = wrap_dim(dims[i]);
    POSGRAD_CHECK(!seen[p[i]], ShapeError, "permute of ", shape_str(shape()), ": repeated dim ", dims[i]);
    seen[p[i]] = true;
  }
  return diff_permute(*this, p);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  std::vector<int64_t> p(static_cast<size_t>(dim()));
  std::iota(p.begin(), p.end(), 0);
  std::swap(p[wrap_dim(d0)], p[wrap_dim(d1)]);
  return diff_permute(*this, p);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d);
  // length <= size - start, not start + length <= size: the sum may overflow.
  POSGRAD_CHECK(start >= 0 && length >= 0 && start <= shape()[d] && length <= shape()[d] - start, IndexError,
                "narrow(dim=", d, ", start=", start, ", length=", length, ") out of range for shape ",
                shape_str(shape()));
  return diff_narrow(*this, d, start, length);
}

Tensor Tensor::expand(const Shape& want) const {
  POSGRAD_CHECK(static_cast<int64_t>(want.size()) >= dim(), ShapeError, "expand ", shape_str(shape()), " -> ",
                shape_str(want), ": fewer dims");
  Shape s = want;
  size_t lead = want.size() - shape().size();
  for (size_t i = 0; i < want.size(); ++i) {
    if (i < lead) {
      POSGRAD_CHECK(want[i] >= 0, ShapeError, "expand ", shape_str(shape()), " -> ", shape_str(want));
      continue;
    }
    int64_t have = shape()[i - lead];
    if (want[i] == -1) s[i] = have;
    // s[i] >= 0: a size-1 dim must not "expand" to a negative size other than -1.
    POSGRAD_CHECK(s[i] >= 0 && (have == s[i] || have == 1), ShapeError, "cannot expand shape ", shape_str(shape()),
                  " to ", shape_str(want));
  }
  if (s == shape()) return *this;
  (void)shape_numel(s);  // ShapeError if the expanded element count overflows int64
  return diff_expand(*this, s);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, true);
  Shape s = shape();
  s.insert(s.begin() + d, 1);
  return view(s);
}

Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d);
  POSGRAD_CHECK(shape()[d] == 1, ShapeError, "squeeze(", d, ") of shape ", shape_str(shape()), ": size is not 1");
  Shape s = shape();
  s.erase(s.begin() + d);
  Shape st = strides();
  st.erase(st.begin() + d);
  return diff_view_as(*this, s, st);
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : diff_copy(*this); }
Tensor Tensor::clone() const { return diff_copy(*this); }
Tensor Tensor::to(DType t) const { return t == dtype() ? *this : diff_to_dtype(*this, t); }
Tensor Tensor::to(Device d) const { return d == device() ? *this : diff_to_device(*this, d); }

std::vector<double> Tensor::to_vector() const {
  Tensor c = detach().to(Device::cpu()).contiguous();
  std::vector<double> v(static_cast<size_t>(c.numel()));
  switch (c.dtype()) {
    case DType::Float32: std::copy_n(c.data<float>(), v.size(), v.begin()); break;
    case DType::Float64: std::copy_n(c.data<double>(), v.size(), v.begin()); break;
    case DType::Int64: std::copy_n(c.data<int64_t>(), v.size(), v.begin()); break;
    case DType::Bool: std::copy_n(c.data<uint8_t>(), v.size(), v.begin()); break;
  }
  return v;
}

std::vector<float> Tensor::to_float_vector() const {
  Tensor c = detach().to(Device::cpu()).to(DType::Float32).contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}

std::vector<int64_t> Tensor::to_int_vector() const {
  Tensor c = detach().to(Device::cpu()).contiguous();
  POSGRAD_CHECK(c.dtype() == DType::Int64, DTypeError, "to_int_vector of ", str());
  return std::vector<int64_t>(c.data<int64_t>(), c.data<int64_t>() + c.numel());
}

double Tensor::item() const {
  POSGRAD_CHECK(numel() == 1, ShapeError, "item() of tensor with shape ", shape_str(shape()));
  return to_vector()[0];
}

// ---- autograd entry points ----------------------------------------------------------------------
// The checks are here; the graph work is the autograd layer's (tensor/autograd_hooks.h).

std::shared_ptr<Node> Tensor::grad_accumulator() const {
  if (!is_leaf() || !requires_grad()) return nullptr;
  auto& acc = impl().grad_accumulator;
  if (!acc) acc = autograd_hooks("grad_accumulator").make_grad_accumulator(impl_);
  return acc;
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  POSGRAD_CHECK(requires_grad(), AutogradError, "backward on tensor ", str(), " that does not require grad");
  Tensor g = grad;
  if (!g.defined()) {
    POSGRAD_CHECK(numel() == 1, AutogradError, "backward() without a gradient needs a one-element tensor, got ", str(),
                  "; pass backward(grad)");
    g = Tensor::ones(shape(), dtype(), device());
  }
  POSGRAD_CHECK(g.shape() == shape(), ShapeError, "backward: gradient shape ", shape_str(g.shape()),
                " does not match tensor shape ", shape_str(shape()));
  autograd_hooks("backward").backward(*this, g, retain_graph);
}

void Tensor::register_hook(GradHook fn) const {
  POSGRAD_CHECK(requires_grad(), AutogradError, "register_hook on tensor ", str(), " that does not require grad");
  autograd_hooks("register_hook").register_hook(*this, std::move(fn));
}

void Tensor::retain_grad() const {
  if (is_leaf() || impl().retains_grad) return;
  const AutogradHooks& hooks = autograd_hooks("retain_grad");
  impl().retains_grad = true;
  hooks.retain_grad(*this);
}

Tensor cached_on_device(const Tensor& constant, Device device) {
  POSGRAD_CHECK(constant.defined() && constant.device().is_cpu(), ValueError,
                "cached_on_device: the constant must be a defined CPU tensor");
  POSGRAD_CHECK(!constant.requires_grad(), ValueError, "cached_on_device: ", constant.str(),
                " requires grad (a parameter is not a constant)");
  if (device.is_cpu()) return constant;
  struct Kept {
    Device device;
    DType dtype;
    Shape shape;
    std::vector<unsigned char> bytes;
    Tensor copy;
  };
  const Tensor c = constant.contiguous();
  const auto* first = static_cast<const unsigned char*>(c.raw_data());
  const size_t n = static_cast<size_t>(c.numel()) * dtype_size(c.dtype());
  static std::mutex mutex;
  static auto* kept = new std::deque<Kept>();
  std::lock_guard<std::mutex> lock(mutex);
  for (const Kept& k : *kept)
    if (k.device == device && k.dtype == c.dtype() && k.shape == c.shape() && k.bytes.size() == n &&
        (n == 0 || std::memcmp(k.bytes.data(), first, n) == 0))
      return k.copy;
  Tensor copy = c.to(device);
  kept->push_back({device, c.dtype(), c.shape(), std::vector<unsigned char>(first, first + n), copy});
  if (kept->size() > 128) kept->pop_front();
  return copy;
}

}  // namespace posgrad
