// common.cuh — what every CUDA kernel file shares: the per-device stream, error checks that turn a
// cudaError_t / cublasStatus_t into posgrad::DeviceError naming the kernel or API call, a launch
// helper, grid-stride loops, typed device math, and deterministic block reductions.
//
// What it is not: a general CUDA utility library. Reductions here are fixed-shape trees (warp
// shuffles, then one warp over the per-warp partials), so for a given block size the summation
// order is fixed and results are bit-identical run to run; they are not the CPU's order, so CPU
// and CUDA agree to rounding, not bit for bit. Kept light on purpose (no tensor.h, no spdlog):
// every .cu file is compiled twice (sm_80, sm_90) on 2-core CI machines.
#pragma once

// POSGRAD_CUDA_EMULATION: tests/support/cuda_emulation.cpp compiles the kernel files as plain C++
// against a small CPU emulation of the CUDA execution model (threads as fibers, __syncthreads and
// warp shuffles as scheduling points), so the kernels' indexing and synchronisation can be checked
// against the CPU kernels on machines without a GPU. It supplies dim3, threadIdx, __syncthreads,
// __shfl_down_sync, the qualifiers and emulate_launch before including this header.
#ifndef POSGRAD_CUDA_EMULATION
#include <cuda_runtime.h>
#endif

#include <cstdint>
#include <utility>

#include "tensor/kernels/kernels.h"

namespace posgrad::cuda {

// The current device's stream (created on first use). Every kernel, copy and cuBLAS call of that
// device is issued on it, so work is ordered without events; the host synchronises where it reads.
cudaStream_t stream();

// Throws DeviceError "CUDA error in <what> (file:line): <name>: <description>".
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line);

// After a launch: turns a launch error into DeviceError naming the kernel. With the environment
// variable POSGRAD_CUDA_SYNC=1 it also synchronises, so an asynchronous fault is reported against
// the kernel that caused it instead of a later API call (debugging only: it serialises the host).
void check_launch(const char* kernel);

// Threads per block of the elementwise (grid-stride) kernels.
inline constexpr int kBlock = 256;

// Blocks for a grid-stride loop over n elements with `block` threads (at least 1, capped: the
// loop covers the rest).
inline unsigned grid_for(int64_t n, int block) {
  const int64_t kMaxBlocks = int64_t(1) << 16;
  int64_t g = (n + block - 1) / block;
  if (g < 1) g = 1;
  if (g > kMaxBlocks) g = kMaxBlocks;
  return static_cast<unsigned>(g);
}

// Row chunks for n independent sums over R rows each (column sums: a bias gradient sums 8192 rows
// for 768 columns). One thread per sum walking all R rows leaves most of the GPU idle and is bound by
// the latency of R dependent adds; instead each chunk of rows gets its own threads, writes partial
// sums, and a second pass adds the chunks in order (deterministic, no atomics). 1: no split.
inline int64_t reduction_chunks(int64_t n, int64_t R) {
  constexpr int64_t kTargetThreads = int64_t(1) << 17, kMinRows = 32, kMaxChunks = 4096;
  int64_t c = (kTargetThreads + n - 1) / (n < 1 ? 1 : n);
  const int64_t by_rows = (R + kMinRows - 1) / kMinRows;
  if (c > by_rows) c = by_rows;
  if (c > kMaxChunks) c = kMaxChunks;
  if (c < 1) return 1;
  const int64_t rows = (R + c - 1) / c;  // rows per chunk; then no chunk is empty
  return (R + rows - 1) / rows;
}

// True for memory a kernel can dereference (device or managed); false for host memory, including
// pageable memory the driver has never seen.
bool is_device_pointer(const void* p);

// A device-visible copy of a small array that may live in host memory (the attention op passes its
// index tables diag_u/rows as std::vector data). Device pointers pass through; host arrays are copied
// on the stream into a block of the caching allocator, returned to the cache by the destructor —
// safe because the block's next user is queued on the same stream after the kernels that read it.
// (A deliberate, documented exception to "kernels allocate nothing", like the CPU GEMM's buffers.)
class DeviceArray {
 public:
  DeviceArray(const void* p, size_t bytes);
  ~DeviceArray();
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  template <typename T>
  const T* get() const {
    return static_cast<const T*>(ptr_);
  }

 private:
  const void* ptr_ = nullptr;
  void* owned_ = nullptr;
  size_t bytes_ = 0;
};

// A fault a kernel finds in its input data — an embedding id or a cross-entropy target out of range —
// which the host cannot see without reading the data back (a synchronisation per call). The first
// fault since the last report is recorded here, in mapped pinned host memory the kernels write
// through; the backend raises it as IndexError at the host's next synchronisation (a read to the
// host, synchronize()): PyTorch's device-side asserts, without killing the context.
struct IndexFault {
  int flag;  // 0: none; set to 1 by atomicCAS by the first reporter
  int kind;  // kEmbeddingId, kCrossEntropyTarget
  long long position, value, bound;
};
inline constexpr int kEmbeddingId = 1, kCrossEntropyTarget = 2;
// The process's fault record (mapped, portable: every device writes the same one), created on first use.
IndexFault* index_fault();

__device__ __forceinline__ void report_index_fault(IndexFault* f, int kind, long long position, long long value,
                                                   long long bound) {
  if (atomicCAS(&f->flag, 0, 1) == 0) {
    f->kind = kind;
    f->position = position;
    f->value = value;
    f->bound = bound;
    __threadfence_system();
  }
}

// A scratch block of the current device's caching allocator, for a kernel's temporaries (the bf16
// operands of a product). Freeing it at once after the launches that use it is safe: its next user is
// queued behind them on the same stream.
void* scratch_allocate(size_t bytes);
void scratch_free(void* p, size_t bytes);

// Throws DeviceError unless p is null or device memory: turns "host pointer handed to a CUDA
// kernel" into a clear error instead of an illegal-address fault that would kill the context.
void require_device_pointer(const void* p, const char* kernel, const char* arg);

}  // namespace posgrad::cuda

#define POSGRAD_CUDA_CHECK(expr, what)                                                                          \
  do {                                                                                                          \
    const cudaError_t posgrad_err_ = (expr);                                                                    \
    if (posgrad_err_ != cudaSuccess) ::posgrad::cuda::throw_cuda_error(posgrad_err_, what, __FILE__, __LINE__); \
  } while (0)

// for (int64_t i = ...; i < n; i += stride): each thread visits i, i + gridDim*blockDim, ...
#define POSGRAD_GRID_STRIDE(i, n)                                                        \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

namespace posgrad::cuda {

// Launches kernel<<<grid, block, smem, stream()>>>(args...) and checks the launch. `name` is the
// posgrad kernel name used in the error message.
template <typename... KArgs, typename... Args>
void launch(const char* name, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
#ifdef POSGRAD_CUDA_EMULATION
  emulate_launch(name, kernel, grid, block, smem, std::forward<Args>(args)...);
#else
  kernel<<<grid, block, smem, stream()>>>(std::forward<Args>(args)...);
  check_launch(name);
#endif
}

// Declares the block's dynamic shared memory (the `smem` bytes of the launch) as unsigned char name[].
#ifdef POSGRAD_CUDA_EMULATION
#define POSGRAD_DYNAMIC_SMEM(name) unsigned char* name = emulated_dynamic_smem()
#else
#define POSGRAD_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

// ---- typed device math: the float overloads call the single-precision functions, as the CPU's
// std:: overloads do for float ---------------------------------------------------------------------
__device__ __forceinline__ float d_exp(float x) { return expf(x); }
__device__ __forceinline__ double d_exp(double x) { return exp(x); }
__device__ __forceinline__ float d_log(float x) { return logf(x); }
__device__ __forceinline__ double d_log(double x) { return log(x); }
__device__ __forceinline__ float d_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double d_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float d_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double d_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float d_erf(float x) { return erff(x); }
__device__ __forceinline__ double d_erf(double x) { return erf(x); }
__device__ __forceinline__ float d_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double d_pow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float d_sin(float x) { return sinf(x); }
__device__ __forceinline__ double d_sin(double x) { return sin(x); }
__device__ __forceinline__ float d_cos(float x) { return cosf(x); }
__device__ __forceinline__ double d_cos(double x) { return cos(x); }
template <typename T>
__device__ __forceinline__ T d_neg_inf() {
  return -static_cast<T>(INFINITY);
}
// max(a, b) that propagates NaN from either side (a on ties): PyTorch's max/softmax semantics, the
// twin of cpu/nan_max.h. A plain `b > a ? b : a` drops a NaN unless it comes first.
template <typename T>
__device__ __forceinline__ T d_nan_max(T a, T b) {
  return (b > a || b != b) ? b : a;
}

// ---- deterministic block reductions ------------------------------------------------------------
// Block size used by the row kernels (one block per row). A multiple of 32: every warp is full.
// (The CPU emulation in tests/support/cuda_emulation.cpp may shrink it to keep the emulated runs fast.)
#ifndef POSGRAD_CUDA_ROW_BLOCK
#define POSGRAD_CUDA_ROW_BLOCK 256
#endif
inline constexpr int kRowBlock = POSGRAD_CUDA_ROW_BLOCK;

// Blocks for kernels that give one block per row (rows beyond the grid are strided over).
inline unsigned row_grid(int64_t rows) { return static_cast<unsigned>(rows < 65535 ? (rows < 1 ? 1 : rows) : 65535); }

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {  // NaN-propagating maximum, like the CPU's nan_row_max
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return d_nan_max(a, b);
  }
};

// Reduces v over the block and returns the result to every thread. blockDim.x must be a multiple
// of 32 (<= 1024). Fixed tree: lanes by __shfl_down (offsets 16..1), then warp 0 over the warp
// partials in the same way. Safe to call repeatedly (it synchronises before reusing shared memory).
template <typename T, typename Op>
__device__ T block_allreduce(T v, Op op, T identity) {
  __shared__ T partial[33];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = static_cast<int>(blockDim.x) >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
  __syncthreads();  // a previous call may still be reading partial[32]
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < nwarps ? partial[lane] : identity;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) w = op(w, __shfl_down_sync(0xffffffffu, w, o));
    if (lane == 0) partial[32] = w;
  }
  __syncthreads();
  return partial[32];
}

template <typename T>
__device__ __forceinline__ T block_sum(T v) {
  return block_allreduce(v, SumOp{}, T(0));
}
template <typename T>
__device__ __forceinline__ T block_max(T v) {
  return block_allreduce(v, MaxOp{}, d_neg_inf<T>());
}

}  // namespace posgrad::cuda
