// random.cpp — Philox4x32-10 and the generator-driven fills.
#include "tensor/random.h"

#include "tensor/kernels/kernels.h"

namespace posgrad {

uint64_t Generator::next_u64() {
  auto r = philox4x32(advance(1), state_.seed);
  return (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
}

double Generator::next_unit() { return u32_to_unit(philox4x32(advance(1), state_.seed).v[0]); }

Tensor randn(const Shape& shape, Generator& gen, DType dtype, Device dev, double mean, double std) {
  Tensor t = Tensor::empty(shape, dtype, dev);
  normal_(t, gen, mean, std);
  return t;
}

Tensor rand(const Shape& shape, Generator& gen, DType dtype, Device dev, double lo, double hi) {
  Tensor t = Tensor::empty(shape, dtype, dev);
  uint64_t off = gen.advance(static_cast<uint64_t>(t.numel()));
  dispatch_floating(dtype, "rand", [&](auto tag) {
    using T = decltype(tag);
    POSGRAD_KERNEL(dev, philox_uniform<T>, t.data<T>(), t.numel(), gen.seed(), off, T(lo), T(hi));
  });
  return t;
}

void normal_(Tensor& t, Generator& gen, double mean, double std) {
  POSGRAD_CHECK(t.is_contiguous(), ShapeError, "normal_: tensor ", t.str(), " must be contiguous");
  uint64_t off = gen.advance(static_cast<uint64_t>(t.numel()));
  dispatch_floating(t.dtype(), "normal_", [&](auto tag) {
    using T = decltype(tag);
    POSGRAD_KERNEL(t.device(), philox_normal<T>, t.data<T>(), t.numel(), gen.seed(), off, T(mean), T(std));
  });
}

}  // namespace posgrad
