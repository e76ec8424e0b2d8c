// cublas.cuh — the per-device cuBLAS handle (bound to the device's stream, TF32 off unless
// POSGRAD_CUDA_TF32=1; see backend.cu) and the status check that names the call.
#pragma once

#ifndef POSGRAD_CUDA_EMULATION  // tests/support/cuda_emulation.cpp supplies a reference column-major GEMM
#include <cublas_v2.h>
#endif

namespace posgrad::cuda {

cublasHandle_t cublas_handle();  // the current device's handle, created on first use

// Throws DeviceError "cuBLAS error in <what> (file:line): <status name>: <description>".
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* what, const char* file, int line);

}  // namespace posgrad::cuda

#define POSGRAD_CUBLAS_CHECK(expr, what)                                        \
  do {                                                                          \
    const cublasStatus_t posgrad_st_ = (expr);                                  \
    if (posgrad_st_ != CUBLAS_STATUS_SUCCESS)                                   \
      posgrad::cuda::throw_cublas_error(posgrad_st_, what, __FILE__, __LINE__); \
  } while (0)
