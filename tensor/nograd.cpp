// nograd.cpp — the autograd-free views and copies (see nograd.h): strided views of the same
// storage, and copies through the copy_strided / cast kernels and the device backends.
#include "tensor/nograd.h"

#include "tensor/kernels/kernels.h"

namespace posgrad::nograd {

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  Shape s(dims.size()), st(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    s[i] = x.shape()[dims[i]];
    st[i] = x.strides()[dims[i]];
  }
  return x.as_strided_nograd(s, st, x.offset());
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  Shape s = x.shape();
  s[dim] = length;
  return x.as_strided_nograd(s, x.strides(), x.offset() + start * x.strides()[dim]);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  Shape st(shape.size(), 0);  // broadcast (and new leading) dims: stride 0
  size_t lead = shape.size() - x.shape().size();
  for (size_t i = lead; i < shape.size(); ++i) st[i] = x.shape()[i - lead] == shape[i] ? x.strides()[i - lead] : 0;
  return x.as_strided_nograd(shape, st, x.offset());
}

void copy_into(const Tensor& dst, const Tensor& src) {
  POSGRAD_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype() && dst.device() == src.device(), ShapeError,
                "copy_into: ", dst.str(), " <- ", src.str());
  const int nd = static_cast<int>(dst.dim());
  const int64_t* shape = dst.shape().data();
  const int64_t* ds = dst.strides().data();
  const int64_t* ss = src.strides().data();
  Device dev = dst.device();
  switch (dst.dtype()) {
    case DType::Float32:
      POSGRAD_KERNEL(dev, copy_strided<float>, dst.data<float>(), src.data<float>(), nd, shape, ds, ss);
      break;
    case DType::Float64:
      POSGRAD_KERNEL(dev, copy_strided<double>, dst.data<double>(), src.data<double>(), nd, shape, ds, ss);
      break;
    case DType::Int64:
      POSGRAD_KERNEL(dev, copy_strided<int64_t>, dst.data<int64_t>(), src.data<int64_t>(), nd, shape, ds, ss);
      break;
    case DType::Bool:
      POSGRAD_KERNEL(dev, copy_strided<uint8_t>, dst.data<uint8_t>(), src.data<uint8_t>(), nd, shape, ds, ss);
      break;
  }
}

Tensor copy(const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  copy_into(y, x);
  return y;
}

Tensor to_dtype(const Tensor& x, DType t) {
  Tensor c = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), t, x.device());
  const int64_t n = x.numel();
  auto run = [&](auto* out) {
    switch (c.dtype()) {
      case DType::Float32: POSGRAD_KERNEL(x.device(), cast, out, c.data<float>(), n); break;
      case DType::Float64: POSGRAD_KERNEL(x.device(), cast, out, c.data<double>(), n); break;
      case DType::Int64: POSGRAD_KERNEL(x.device(), cast, out, c.data<int64_t>(), n); break;
      case DType::Bool: POSGRAD_KERNEL(x.device(), cast, out, c.data<uint8_t>(), n); break;
    }
  };
  switch (t) {
    case DType::Float32: run(y.data<float>()); break;
    case DType::Float64: run(y.data<double>()); break;
    case DType::Int64: run(y.data<int64_t>()); break;
    case DType::Bool: run(y.data<uint8_t>()); break;
  }
  return y;
}

Tensor to_device(const Tensor& x, Device d) {
  Tensor c = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), d);
  size_t n = static_cast<size_t>(x.numel()) * dtype_size(x.dtype());
  Device gpu = d.is_cuda() ? d : x.device();
  backend(gpu.type).copy(y.raw_data(), d, c.raw_data(), x.device(), n);
  return y;
}

}  // namespace posgrad::nograd
