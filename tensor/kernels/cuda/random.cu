// random.cu — Philox-driven fills on the GPU, the CUDA twins of cpu/random.cpp. Element i uses the
// Philox4x32-10 block of counter offset + i under key seed (tensor/philox.h is shared with the
// CPU), so the random bits are identical on both backends whatever the launch shape.
//
// Bit-identity: uniform is lo + (hi - lo) * u with u exact (24 bits); the multiply and add are
// issued as separately rounded operations (__fmul_rn/__fadd_rn, never contracted into an FMA), so
// uniform fills equal the CPU's bit for bit (the CPU build compiles with -ffp-contract=off, so its
// multiply and add are separate too; device code elsewhere keeps nvcc's --fmad=true). Normal
// fills use the same Box-Muller formula in double; CUDA's double log/cos may differ from glibc's
// by an ulp, so normals agree to ~1e-16 relative (float32 results virtually always identical).
#include "tensor/kernels/cuda/common.cuh"
#include "tensor/philox.h"

namespace posgrad::kernels::cuda {

using namespace posgrad::cuda;

namespace {

__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

template <typename T>
__global__ void philox_uniform_kernel(T* y, int64_t n, uint64_t seed, uint64_t offset, T lo, T hi) {
  POSGRAD_GRID_STRIDE(i, n) {
    const Philox4 r = philox4x32(offset + static_cast<uint64_t>(i), seed);
    y[i] = add_rn(lo, mul_rn(hi - lo, static_cast<T>(u32_to_unit(r.v[0]))));
  }
}

template <typename T>
__global__ void philox_normal_kernel(T* y, int64_t n, uint64_t seed, uint64_t offset, T mean, T std) {
  POSGRAD_GRID_STRIDE(i, n) {
    const Philox4 r = philox4x32(offset + static_cast<uint64_t>(i), seed);
    // Box-Muller as on the CPU; u1 in (0, 1] so the log is finite.
    const double u1 = 1.0 - u32_to_unit(r.v[0]);
    const double u2 = u32_to_unit(r.v[1]);
    const double z = __dmul_rn(sqrt(__dmul_rn(-2.0, log(u1))), cos(__dmul_rn(6.283185307179586, u2)));
    y[i] = add_rn(mean, mul_rn(std, static_cast<T>(z)));
  }
}

}  // namespace

template <typename T>
void philox_uniform(T* y, int64_t n, uint64_t seed, uint64_t offset, T lo, T hi) {
  if (n <= 0) return;
  launch("philox_uniform", philox_uniform_kernel<T>, grid_for(n, kBlock), kBlock, 0, y, n, seed, offset, lo, hi);
}

template <typename T>
void philox_normal(T* y, int64_t n, uint64_t seed, uint64_t offset, T mean, T std) {
  if (n <= 0) return;
  launch("philox_normal", philox_normal_kernel<T>, grid_for(n, kBlock), kBlock, 0, y, n, seed, offset, mean, std);
}

template void philox_uniform<float>(float*, int64_t, uint64_t, uint64_t, float, float);
template void philox_uniform<double>(double*, int64_t, uint64_t, uint64_t, double, double);
template void philox_normal<float>(float*, int64_t, uint64_t, uint64_t, float, float);
template void philox_normal<double>(double*, int64_t, uint64_t, uint64_t, double, double);

}  // namespace posgrad::kernels::cuda
