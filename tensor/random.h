// random.h — seeded, counter-based random numbers (Philox4x32-10; Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3", SC'11). A Generator is just (seed, offset): a fill of n elements
// uses counters offset .. offset+n-1 and advances the offset by n, so the numbers do not depend on
// the thread count or the backend, and the state is two integers to checkpoint.
#pragma once

#include <cstdint>

#include "tensor/philox.h"
#include "tensor/tensor.h"

namespace posgrad {

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : state_{seed, 0} {}
  uint64_t seed() const { return state_.seed; }
  // Reserves n counters and returns the first.
  uint64_t advance(uint64_t n) {
    uint64_t o = state_.offset;
    state_.offset += n;
    return o;
  }
  GeneratorState state() const { return state_; }
  void set_state(GeneratorState s) { state_ = s; }
  uint64_t next_u64();  // a scalar draw (uses one counter)
  double next_unit();   // uniform [0, 1)

 private:
  GeneratorState state_;
};

Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::Float32, Device dev = Device::cpu(),
             double mean = 0.0, double std = 1.0);
Tensor rand(const Shape& shape, Generator& gen, DType dtype = DType::Float32, Device dev = Device::cpu(),
            double lo = 0.0, double hi = 1.0);
// In-place normal fill of an existing contiguous float tensor (parameter initialisation).
void normal_(Tensor& t, Generator& gen, double mean, double std);

}  // namespace posgrad
