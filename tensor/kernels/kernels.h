// kernels.h — THE list of compute kernels and their contract. Autograd ops call kernels only
// through POSGRAD_KERNEL(device, name, args...), which picks the CPU or the CUDA implementation.
//
// The contract (every kernel, both backends):
//  - Kernels take raw pointers and sizes, never Tensor. They allocate nothing; scratch is passed in.
//    (One deliberate exception: the CPU GEMM keeps thread-local packing buffers that are grown once
//    and reused, as every BLAS does; passing them through every matmul call would leak a GEMM
//    implementation detail into autograd.)
//  - Argument order: outputs, then inputs / weights / saved statistics, then sizes, then scalars.
//  - Backward kernels ADD into every gradient output (+=); the caller zero-fills. A null gradient
//    pointer means "not needed" where the comment says so.
//  - All data is contiguous row-major unless the kernel takes explicit strides.
//  - Elementwise kernels accept y == x (in place).
//  - Letters: B batch, T time, H heads, D head dim, C channels, V vocab, N rows (= B*T),
//    R reduced extent, outer/inner the extents before/after the reduced dim.
//  - The CPU and CUDA versions have the same names and signatures: kernels_decl.inc is included
//    once into namespace cpu and once into namespace cuda, so a mismatch does not compile.
//  - CPU kernels are templates instantiated for float and double so that every backward can be
//    gradchecked in double precision. Reductions use a fixed order: same inputs and same thread
//    count give bit-identical outputs.
#pragma once

#include <cstdint>

#include "tensor/errors.h"

namespace posgrad::kernels {

enum class UnaryOp : uint8_t {
  Neg, Exp, Log, Sqrt, Tanh, Relu,
  Gelu,      // exact: x * Phi(x)
  GeluTanh,  // tanh approximation (GPT-2)
  Silu,
  Pow,        // x ^ scalar
  AddScalar,  // x + scalar
  MulScalar,  // x * scalar
};
const char* unary_op_name(UnaryOp op);

enum class BinaryOp : uint8_t { Add, Sub, Mul, Div };
const char* binary_op_name(BinaryOp op);

// Score modifier kinds understood by the fused attention kernels (see nn/posenc/).
enum class ScoreBias : uint8_t { None, T5, ALiBi, DeBERTa };

// Shapes of a strided copy (at most kMaxDims dims).
inline constexpr int kMaxDims = 8;

namespace cpu {
#include "tensor/kernels/kernels_decl.inc"
}  // namespace cpu

#if POSGRAD_HAVE_CUDA
namespace cuda {
#include "tensor/kernels/kernels_decl.inc"
}  // namespace cuda
#endif

[[noreturn]] void no_cuda_kernel(const char* name);

}  // namespace posgrad::kernels

#if POSGRAD_HAVE_CUDA
#define POSGRAD_KERNEL(dev, name, ...)                                   \
  ((dev).is_cuda() ? ::posgrad::kernels::cuda::name(__VA_ARGS__)         \
                   : ::posgrad::kernels::cpu::name(__VA_ARGS__))
#else
#define POSGRAD_KERNEL(dev, name, ...)                                   \
  ((dev).is_cuda() ? ::posgrad::kernels::no_cuda_kernel(#name)           \
                   : ::posgrad::kernels::cpu::name(__VA_ARGS__))
#endif
