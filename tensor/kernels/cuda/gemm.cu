// gemm.cu — matrix multiply on the GPU through cuBLAS (sgemm/dgemm and their strided-batched
// forms), with posgrad's row-major contract: C (M, N) = alpha * op(A) @ op(B) + beta * C.
//
// cuBLAS is column-major. A row-major (M, N) matrix with row stride ldc is, read column-major, its
// transpose (N, M) with leading dimension ldc. So we ask cuBLAS for C^T = op(B)^T op(A)^T: swap the
// operands and M/N; each operand's transpose flag carries over unchanged (a row-major B stored
// (K, N) is the column-major B^T, which is exactly op(B)^T, so no transpose is needed for it).
// TF32 is off unless POSGRAD_CUDA_TF32=1 (backend.cu), so fp32 results match fp32 arithmetic.
//
// bf16 mixed precision (matmul_precision() == bf16, kernels.h): float products round both operands to
// bf16 (round to nearest even, __float2bfloat16_rn) into scratch blocks of the caching allocator and
// multiply them with cublasGemmEx / cublasGemmStridedBatchedEx, accumulating and writing C in float
// (CUBLAS_COMPUTE_32F): the recipe of the CPU's bf16 path and of torch.autocast("cuda", bfloat16) for
// matmuls. Subnormal inputs keep their bf16 value here (the CPU path flushes them to zero). The
// scratch blocks are returned at once: their next user is queued behind this product on the stream.
//
// What it is not: a cuBLAS wrapper for arbitrary sizes. Dimensions and leading dimensions must fit
// cuBLAS's int (2^31 - 1); larger ones are a ValueError. K == 0 (or an empty product) is handled
// here: C = beta * C, and beta == 0 never reads C (cuBLAS has the same rule for its own calls).
#include <climits>

#ifndef POSGRAD_CUDA_EMULATION
#include <cuda_bf16.h>
#endif

#include "tensor/kernels/cuda/common.cuh"
#include "tensor/kernels/cuda/cublas.cuh"

namespace posgrad::kernels::cuda {

using namespace posgrad::cuda;

namespace {

// C (M, N), row stride ldc: C = beta * C, writing zeros (not reading C) when beta == 0.
template <typename T>
__global__ void scale_c_kernel(T* C, int64_t M, int64_t N, int64_t ldc, T beta) {
  POSGRAD_GRID_STRIDE(j, M * N) {
    T& c = C[(j / N) * ldc + j % N];
    c = beta == T(0) ? T(0) : beta * c;
  }
}

int to_int(int64_t v, const char* what) {
  POSGRAD_CHECK(v >= 0 && v <= INT_MAX, ValueError, "gemm: ", what, " = ", v, " does not fit cuBLAS's int");
  return static_cast<int>(v);
}

// Leading dimensions must be >= 1 even for empty operands.
int to_ld(int64_t v, const char* what) { return to_int(v < 1 ? 1 : v, what); }

cublasStatus_t gemm_call(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                         const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                         float* C, int ldc) {
  return cublasSgemm(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
cublasStatus_t gemm_call(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                         const double* alpha, const double* A, int lda, const double* B, int ldb, const double* beta,
                         double* C, int ldc) {
  return cublasDgemm(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
cublasStatus_t gemm_strided_call(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                 const float* alpha, const float* A, int lda, long long sa, const float* B, int ldb,
                                 long long sb, const float* beta, float* C, int ldc, long long sc, int batch) {
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}
cublasStatus_t gemm_strided_call(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                 const double* alpha, const double* A, int lda, long long sa, const double* B, int ldb,
                                 long long sb, const double* beta, double* C, int ldc, long long sc, int batch) {
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

__global__ void round_to_bf16_kernel(__nv_bfloat16* y, const float* x, int64_t n) {
  POSGRAD_GRID_STRIDE(i, n) y[i] = __float2bfloat16_rn(x[i]);
}

// The `span` floats from x rounded to bf16, in a scratch block of the caching allocator (span: the
// extent an operand's matrices cover, gaps between rows included, so the leading dimension stays).
class Bf16Copy {
 public:
  Bf16Copy(const float* x, int64_t span) : bytes_(static_cast<size_t>(span) * sizeof(__nv_bfloat16)) {
    ptr_ = static_cast<__nv_bfloat16*>(scratch_allocate(bytes_));
    launch("gemm (round to bf16)", round_to_bf16_kernel, grid_for(span, kBlock), kBlock, 0, ptr_, x, span);
  }
  ~Bf16Copy() { scratch_free(ptr_, bytes_); }
  Bf16Copy(const Bf16Copy&) = delete;
  Bf16Copy& operator=(const Bf16Copy&) = delete;
  const __nv_bfloat16* get() const { return ptr_; }

 private:
  size_t bytes_;
  __nv_bfloat16* ptr_ = nullptr;
};

// Elements an operand stored (rows, cols) with row stride ld covers, `batch` matrices `stride` apart.
int64_t operand_span(int64_t rows, int64_t cols, int64_t ld, int64_t batch = 1, int64_t stride = 0) {
  return (batch - 1) * stride + (rows - 1) * ld + cols;
}

bool bf16_products() { return matmul_precision() == MatmulPrecision::bf16; }

}  // namespace

template <typename T>
void gemm(T* C, const T* A, const T* B, int64_t M, int64_t N, int64_t K, int64_t ldc, int64_t lda, int64_t ldb,
          bool trans_a, bool trans_b, T alpha, T beta) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || alpha == T(0)) {
    launch("gemm (beta * C)", scale_c_kernel<T>, grid_for(M * N, kBlock), kBlock, 0, C, M, N, ldc, beta);
    return;
  }
  // Column-major: C^T (N x M) = op(B)^T (N x K) * op(A)^T (K x M).
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if constexpr (std::is_same_v<T, float>) {
    if (bf16_products()) {
      const Bf16Copy a(A, operand_span(trans_a ? K : M, trans_a ? M : K, lda));
      const Bf16Copy b(B, operand_span(trans_b ? N : K, trans_b ? K : N, ldb));
      POSGRAD_CUBLAS_CHECK(
          cublasGemmEx(cublas_handle(), op_b, op_a, to_int(N, "N"), to_int(M, "M"), to_int(K, "K"), &alpha, b.get(),
                       CUDA_R_16BF, to_ld(ldb, "ldb"), a.get(), CUDA_R_16BF, to_ld(lda, "lda"), &beta, C, CUDA_R_32F,
                       to_ld(ldc, "ldc"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "gemm (cublasGemmEx, bf16)");
      return;
    }
  }
  POSGRAD_CUBLAS_CHECK(gemm_call(cublas_handle(), op_b, op_a, to_int(N, "N"), to_int(M, "M"), to_int(K, "K"), &alpha, B,
                                 to_ld(ldb, "ldb"), A, to_ld(lda, "lda"), &beta, C, to_ld(ldc, "ldc")),
                       "gemm (cublas?gemm)");
}

template <typename T>
void gemm_batched(T* C, const T* A, const T* B, int64_t batch, int64_t M, int64_t N, int64_t K, int64_t ldc,
                  int64_t lda, int64_t ldb, int64_t stride_c, int64_t stride_a, int64_t stride_b, bool trans_a,
                  bool trans_b, T alpha, T beta) {
  if (batch <= 0 || M <= 0 || N <= 0) return;
  // stride_c == 0 with several matrices would have cuBLAS write one C concurrently; run them one
  // after another instead (in stream order, as the CPU's loop does).
  if (batch == 1 || stride_c == 0 || K <= 0 || alpha == T(0)) {
    for (int64_t b = 0; b < batch; ++b)
      gemm(C + b * stride_c, A + b * stride_a, B + b * stride_b, M, N, K, ldc, lda, ldb, trans_a, trans_b, alpha, beta);
    return;
  }
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if constexpr (std::is_same_v<T, float>) {
    if (bf16_products()) {
      const Bf16Copy a(A, operand_span(trans_a ? K : M, trans_a ? M : K, lda, batch, stride_a));
      const Bf16Copy b(B, operand_span(trans_b ? N : K, trans_b ? K : N, ldb, batch, stride_b));
      POSGRAD_CUBLAS_CHECK(
          cublasGemmStridedBatchedEx(cublas_handle(), op_b, op_a, to_int(N, "N"), to_int(M, "M"), to_int(K, "K"),
                                     &alpha, b.get(), CUDA_R_16BF, to_ld(ldb, "ldb"), stride_b, a.get(), CUDA_R_16BF,
                                     to_ld(lda, "lda"), stride_a, &beta, C, CUDA_R_32F, to_ld(ldc, "ldc"), stride_c,
                                     to_int(batch, "batch"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "gemm_batched (cublasGemmStridedBatchedEx, bf16)");
      return;
    }
  }
  POSGRAD_CUBLAS_CHECK(gemm_strided_call(cublas_handle(), op_b, op_a, to_int(N, "N"), to_int(M, "M"), to_int(K, "K"),
                                         &alpha, B, to_ld(ldb, "ldb"), stride_b, A, to_ld(lda, "lda"), stride_a, &beta,
                                         C, to_ld(ldc, "ldc"), stride_c, to_int(batch, "batch")),
                       "gemm_batched (cublas?gemmStridedBatched)");
}

template void gemm<float>(float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                          bool, bool, float, float);
template void gemm<double>(double*, const double*, const double*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                           bool, bool, double, double);
template void gemm_batched<float>(float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                  int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, float, float);
template void gemm_batched<double>(double*, const double*, const double*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                   int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, double, double);

}  // namespace posgrad::kernels::cuda
