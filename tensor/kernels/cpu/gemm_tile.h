// gemm_tile.h — the small products inside the fused attention's tiles (cpu/attention.cpp), without
// the GEMM's packing.
//
// What it is: C (M, N) = alpha * op(A) @ op(B) + beta * C with the arguments and layout of gemm()
// (tensor/kernels/kernels_decl.inc). A tile product is small (M, N up to the 64 x 64 tile, K the head
// dimension or the tile width), and through gemm() each call packs both operands into panels, which
// costs as much as the multiply-adds themselves at these sizes. On the AVX-512 GEMM path with fp32
// products and K <= 512 (gemm()'s whole K in one KC block), it runs the same arithmetic per element
// as gemm()'s AVX-512 micro-kernel (cpu/gemm_microkernels.h, ukr_avx512): one fused multiply-add
// chain over k in increasing order from +0, then alpha * acc, or fma(alpha, acc, beta * C) when
// beta != 0 — so its results are bit for bit those of gemm() (test: GemmTile.SameBitsAsGemm). op(B)
// rows are read as they are stored (B not transposed) or from a transposed copy of the tile (B
// transposed); op(A) is read element by element in either layout.
// Elsewhere (another GEMM path, bf16 products, double, K > 512, an empty product) it calls gemm().
//
// Single-threaded, like gemm() inside a parallel region. Preconditions as gemm(): ld >= the stored
// row width, C aliasing neither operand. Throws nothing.
#pragma once

#include <cstdint>

namespace posgrad::kernels::cpu {

template <typename T>
void gemm_tile(T* C, const T* A, const T* B, int64_t M, int64_t N, int64_t K, int64_t ldc, int64_t lda, int64_t ldb,
               bool trans_a, bool trans_b, T alpha, T beta);

}  // namespace posgrad::kernels::cpu
