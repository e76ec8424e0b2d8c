// random.cpp — Philox-driven fills on the CPU. Element i uses the Philox block of counter
// offset + i (first word for uniform; first two words, Box-Muller, for normal), so the CUDA kernels
// produce the same numbers.
#include <cmath>

#include "tensor/kernels/kernels.h"
#include "tensor/philox.h"

namespace posgrad::kernels::cpu {

template <typename T>
void philox_uniform(T* y, int64_t n, uint64_t seed, uint64_t offset, T lo, T hi) {
#pragma omp parallel for schedule(static) if (n > (1 << 14))
  for (int64_t i = 0; i < n; ++i) {
    auto r = philox4x32(offset + static_cast<uint64_t>(i), seed);
    y[i] = lo + (hi - lo) * static_cast<T>(u32_to_unit(r.v[0]));
  }
}

template <typename T>
void philox_normal(T* y, int64_t n, uint64_t seed, uint64_t offset, T mean, T std) {
#pragma omp parallel for schedule(static) if (n > (1 << 14))
  for (int64_t i = 0; i < n; ++i) {
    auto r = philox4x32(offset + static_cast<uint64_t>(i), seed);
    // Box-Muller; u1 in (0, 1] so the log is finite.
    double u1 = 1.0 - u32_to_unit(r.v[0]);
    double u2 = u32_to_unit(r.v[1]);
    double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    y[i] = mean + std * static_cast<T>(z);
  }
}

template void philox_uniform<float>(float*, int64_t, uint64_t, uint64_t, float, float);
template void philox_uniform<double>(double*, int64_t, uint64_t, uint64_t, double, double);
template void philox_normal<float>(float*, int64_t, uint64_t, uint64_t, float, float);
template void philox_normal<double>(double*, int64_t, uint64_t, uint64_t, double, double);

}  // namespace posgrad::kernels::cpu
