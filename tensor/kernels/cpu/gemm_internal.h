// gemm_internal.h — private hooks of the CPU GEMM (tensor/kernels/cpu/gemm.cpp).
//
// What it is: the instruction-set selector used by the GEMM dispatcher, exposed so that
// tests and benches can run every code path (scalar, AVX2, AVX-512) on one machine.
// What it is not: part of the public kernel API. Library code calls
// posgrad::kernels::cpu::gemm / gemm_batched and never touches these.
#pragma once

namespace posgrad::kernels::cpu::gemm_detail {

enum class gemm_isa : int { scalar = 0, avx2 = 1, avx512 = 2 };

// Best instruction set the running CPU (and OS) supports, from __builtin_cpu_supports.
gemm_isa gemm_best_isa();

// Instruction set the dispatcher currently uses (gemm_best_isa() unless overridden).
gemm_isa gemm_active_isa();

// Forces the dispatcher onto `isa`, clamped to gemm_best_isa(); returns what was set.
// For tests and benches only: do not call it while another thread runs a GEMM.
gemm_isa gemm_set_isa(gemm_isa isa);

const char* gemm_isa_name(gemm_isa isa);

// Whether the running CPU has AVX512-BF16 (with AVX-512): the bf16 pair path can run.
bool gemm_bf16_dot_available();
// Chooses the bf16 path for bf16-precision float products: true = VDPBF16PS on k-pairs (only while the
// active ISA is avx512 and the CPU has it), false = the active ISA's converting path. Clamped to what the
// CPU has; returns what was set. For tests and benches only, like gemm_set_isa.
bool gemm_set_bf16_dot(bool use);

}  // namespace posgrad::kernels::cpu::gemm_detail
