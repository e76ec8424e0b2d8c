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

// What of a causal tile a product may leave out. Row i of C (0-based in the tile) sees index i + diag
// and below: diag = i0 + q_offset - j0 for the score tile of query rows i0.. against key columns j0..
// (attention.cpp's Problem::n_valid).
//   none:           the whole product.
//   columns:        C[i][j] is needed for j <= i + diag only; the others are left unspecified (they may
//                   be written or not).
//   terms_up_to:    row i sums its terms k <= i + diag only: op(A)[i][k] is zero beyond (the masked
//                   probabilities times V, or dS times K).
//   terms_from:     row i sums its terms k >= i - diag only: op(A)[i][k] is zero before (P^T dO, dS^T Q:
//                   row i is key i, and the queries before key i - diag do not see it).
// With op(B) finite, every needed element of C has the bits of the whole product (gemm_tile): the terms
// left out are exact zeros, whose fused multiply-adds onto a running sum that starts at +0 leave it as it
// is, and each element keeps the arithmetic of its column block (columns rounds the width up to whole
// blocks of 16).
enum class CausalSkip { none, columns, terms_up_to, terms_from };

// gemm_tile over row groups of 12, each group doing only what `skip` needs for its last (columns,
// terms_up_to) or first (terms_from) row. On a 64 x 64 causal tile: about 40% of the multiply-adds. The
// paths where gemm_tile calls gemm() do the whole product. Arguments and preconditions as gemm_tile.
template <typename T>
void gemm_tile_causal(T* C, const T* A, const T* B, int64_t M, int64_t N, int64_t K, int64_t ldc, int64_t lda,
                      int64_t ldb, bool trans_a, bool trans_b, T alpha, T beta, CausalSkip skip, int64_t diag);

}  // namespace posgrad::kernels::cpu
