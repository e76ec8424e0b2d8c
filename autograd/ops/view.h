// view.h — the differentiable view and copy primitives behind Tensor's methods (tensor.cpp
// validates arguments, these record the graph). Internal: users call the Tensor methods.
#pragma once

#include "tensor/nograd.h"
#include "tensor/tensor.h"

namespace posgrad::ops {

Tensor view_as(const Tensor& x, const Shape& shape, const Shape& strides);  // same storage
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor copy(const Tensor& x);  // contiguous copy
Tensor to_dtype(const Tensor& x, DType t);
Tensor to_device(const Tensor& x, Device d);

// dst[...] = src[...] elementwise; same shape, dtype and device; either may be strided. Not
// differentiable: the tensor layer's primitive, named here for the ops that fill outputs with it.
using nograd::copy_into;

}  // namespace posgrad::ops
