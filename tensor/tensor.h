// tensor.h — the strided N-d tensor: shared Storage + shape + strides + offset + dtype + device,
// plus the autograd metadata (requires_grad, grad, grad_fn). A Tensor is a cheap handle; copies
// share the same TensorImpl. View operations (view/reshape, transpose, permute, narrow, expand,
// unsqueeze/squeeze) never copy data and are differentiable; contiguous() copies only when needed.
// Math lives in autograd/ops (see autograd/ops.h); this file is data layout and bookkeeping only.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/storage.h"

namespace posgrad {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "(3, 7, 13)"
// Element count; ShapeError (naming the shape) for a negative dim or a count that overflows int64.
int64_t shape_numel(const Shape& s);
// Row-major strides; ShapeError if a stride overflows int64.
Shape contiguous_strides(const Shape& s);
// numel * dtype_size; ShapeError if it does not fit a ptrdiff_t (no object can be that large).
size_t shape_nbytes(const Shape& s, DType dtype);

class Node;
class Tensor;
using TensorList = std::vector<Tensor>;
using GradHook = std::function<Tensor(const Tensor&)>;  // returns a replacement grad, or undefined to keep it

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape, strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::Float32;
  // autograd
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;        // accumulated gradient (leaves, or retain_grad)
  std::shared_ptr<Node> grad_fn;           // producer node; null for leaves
  uint32_t output_nr = 0;                  // which output of grad_fn this is
  std::shared_ptr<Node> grad_accumulator;  // leaves only, created on first use
  bool retains_grad = false;               // retain_grad() was called (its hook is registered once)
  std::string name;                        // optional, used in messages
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories --------------------------------------------------------------------------
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32, Device dev = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::Float32, Device dev = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::Float32, Device dev = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::Float32, Device dev = Device::cpu());
  static Tensor from_vector(const std::vector<double>& v, const Shape& shape, DType dtype = DType::Float32);
  static Tensor from_vector(const std::vector<float>& v, const Shape& shape);
  static Tensor from_ints(const std::vector<int64_t>& v, const Shape& shape);
  static Tensor arange(int64_t n, DType dtype = DType::Float32);
  static Tensor scalar(double v, DType dtype = DType::Float32, Device dev = Device::cpu());

  // ---- metadata ---------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t offset() const { return impl().offset; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(impl().shape); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  bool is_contiguous() const;
  std::string str() const;  // "float32(3, 7) cpu"
  std::string name() const { return impl().name; }
  Tensor& set_name(std::string n) {
    impl().name = std::move(n);
    return *this;
  }
  // Normalises a possibly negative dim against dim() (+1 when `for_insert`), or throws IndexError.
  int64_t wrap_dim(int64_t d, bool for_insert = false) const;

  // Typed pointer to the first element (after the offset). Throws DTypeError on a dtype mismatch.
  template <typename T>
  T* data() const;
  void* raw_data() const;

  // ---- views (share storage; differentiable) -----------------------------------------------
  Tensor view(const Shape& shape) const;     // needs a compatible layout; -1 infers one dim
  Tensor reshape(const Shape& shape) const;  // view if possible, else copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const { return dim() < 2 ? *this : transpose(-2, -1); }  // 0-d and 1-d: unchanged (as PyTorch)
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end) const { return narrow(dim, start, end - start); }
  Tensor expand(const Shape& shape) const;  // broadcast; -1 keeps a dim
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor flatten(int64_t start = 0, int64_t end = -1) const;
  Tensor contiguous() const;  // returns *this when already contiguous
  Tensor clone() const;       // always copies (differentiable)

  // Non-differentiable raw view: the autograd-free primitive the view ops build on.
  Tensor as_strided_nograd(const Shape& shape, const Shape& strides, int64_t offset) const;

  // ---- conversion ---------------------------------------------------------------------------
  Tensor to(DType dtype) const;           // differentiable between float types
  Tensor to(Device dev) const;            // differentiable
  double item() const;                    // one-element tensor -> double
  std::vector<double> to_vector() const;  // any dtype, any layout, row-major order
  std::vector<float> to_float_vector() const;
  std::vector<int64_t> to_int_vector() const;

  // ---- autograd -----------------------------------------------------------------------------
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& set_requires_grad(bool r);
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  Tensor grad() const { return impl().grad ? Tensor(impl().grad) : Tensor(); }
  void set_grad(const Tensor& g) { impl().grad = g.impl_; }
  void zero_grad() { impl().grad.reset(); }
  const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }
  uint32_t output_nr() const { return impl().output_nr; }
  Tensor detach() const;  // shares storage, no history
  // grad: undefined for a one-element tensor (implicit 1); otherwise must match shape.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  // Runs fn on this tensor's gradient during backward; fn may return a replacement (or undefined).
  void register_hook(GradHook fn) const;
  void retain_grad() const;                        // keep .grad() on a non-leaf
  std::shared_ptr<Node> grad_accumulator() const;  // leaves: the node that accumulates into grad

  TensorImpl& impl() const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }
  bool shares_storage(const Tensor& o) const { return impl().storage == o.impl().storage; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Typed data pointer, or nullptr for an undefined tensor (optional kernel arguments). Also avoids
// `t.template data<T>()` inside templates whose saved state is a dependent type.
template <typename T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// A copy of `constant` — a CPU tensor that nobody writes (a table, distances, slopes rebuilt at each
// forward) — on `device`, kept by device, dtype, shape and content: a model that rebuilds the same
// constant at every forward uploads it once, and a step on a GPU copies nothing. On the CPU it returns
// `constant` itself. The result is shared between callers: never write it. At most 128 copies are kept,
// oldest dropped first; the list is never destroyed (device memory must outlive static destructors).
// ValueError for a constant that requires grad or is not on the CPU.
Tensor cached_on_device(const Tensor& constant, Device device);

}  // namespace posgrad
