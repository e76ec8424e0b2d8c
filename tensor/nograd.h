// nograd.h — the autograd-free views and copies: each returns a new tensor and records nothing.
// They are the one implementation of what Tensor's view and copy methods compute: the methods run
// them directly for a tensor that does not require grad, and the autograd Functions behind the
// methods (autograd/ops/view.cpp) run them as their forward. Arguments are validated by the Tensor
// methods (tensor.cpp) before they get here; these functions assume valid dims and shapes.
// Users call the Tensor methods.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace posgrad::nograd {

// Same storage and offset, the given shape and strides.
inline Tensor view_as(const Tensor& x, const Shape& shape, const Shape& strides) {
  return x.as_strided_nograd(shape, strides, x.offset());
}
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);  // dims: a permutation, wrapped
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor expand(const Tensor& x, const Shape& shape);  // shape: fully specified (no -1)
Tensor copy(const Tensor& x);                        // a new contiguous tensor
Tensor to_dtype(const Tensor& x, DType t);           // a new contiguous tensor of dtype t
Tensor to_device(const Tensor& x, Device d);         // a new contiguous tensor on d

// dst[...] = src[...] elementwise; same shape, dtype and device; either may be strided.
void copy_into(const Tensor& dst, const Tensor& src);

}  // namespace posgrad::nograd
