// gemm_tile.h — the small products inside the fused attention's tiles (cpu/attention.cpp), without
// the GEMM's packing.
//
// What it is: C (M, N) = alpha * op(A) @ op(B) + beta * C with the arguments and layout of gemm()
// (tensor/kernels/kernels_decl.inc). A tile product is small (M, N up to the 64 x 64 tile, K the head
// dimension or the tile width), and through gemm() each call packs both operands into panels, which
// costs as much as the multiply-adds themselves at these sizes. On the AVX-512 and AVX2 GEMM paths with
// fp32 products and K within gemm()'s first KC block (512 on AVX-512, 256 on AVX2), it runs the same
// arithmetic per element as that path's micro-kernel (cpu/gemm_microkernels.h, ukr_avx512 and
// ukr_avx2): one fused multiply-add chain over k in increasing order from +0, then alpha * acc, or
// fma(alpha, acc, beta * C) when beta != 0 — and on AVX2, in the last block of fewer than 16 columns,
// alpha * acc + beta * C rounded separately, as gemm() writes its edge tiles there — so its results
// are bit for bit those of gemm() (test: GemmTile.SameBitsAsGemm). op(B) rows are read as they are
// stored (B not transposed) or from a transposed copy of the tile (B transposed); op(A) is read
// element by element in either layout.
// Elsewhere (the scalar path, bf16 products, double, K past the first KC block, an empty product) it
// calls gemm().
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
