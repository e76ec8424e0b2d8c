// cuda_emulation.cpp — see cuda_emulation.h: the emulated execution model (fibers, barriers, warp
// shuffles, a cuBLAS stand-in), then the kernel files compiled against it inside namespace emu.
#include "cuda_emulation.h"

#include <ucontext.h>

// Everything the kernel files include comes first, so that their includes inside namespace emu
// below add nothing to it.
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensor/errors.h"
#include "tensor/philox.h"
#include "tensor/storage.h"

// The namespace and the block sizes of this copy of the emulation: emu with small blocks (this file),
// emu_production with the GPU's (cuda_emulation_production.cpp, which defines these and includes it).
#ifndef POSGRAD_EMU_NS
#define POSGRAD_EMU_NS emu
#define POSGRAD_EMU_ROW_BLOCK 64
#define POSGRAD_EMU_ATTN_TILE 32
#define POSGRAD_EMU_PRIMARY 1
// The small copy forms a Distance bias's gradient with the per-diagonal kernel (the GPU's fallback
// for partial sums above 1 GiB); the production copy and the emulated device with the partial sums.
#define POSGRAD_EMU_MAX_DIAG_PARTIAL_BYTES 0
#endif
#define POSGRAD_CUDA_EMULATION 1
#define POSGRAD_CUDA_ROW_BLOCK POSGRAD_EMU_ROW_BLOCK
#define POSGRAD_CUDA_ATTN_TILE POSGRAD_EMU_ATTN_TILE
#ifdef POSGRAD_EMU_MAX_DIAG_PARTIAL_BYTES
#define POSGRAD_CUDA_MAX_DIAG_PARTIAL_BYTES POSGRAD_EMU_MAX_DIAG_PARTIAL_BYTES
#endif
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) alignas(n)
#define threadIdx (::POSGRAD_EMU_NS::S.f[::POSGRAD_EMU_NS::S.cur].tid)
#define blockIdx (::POSGRAD_EMU_NS::S.bidx)
#define blockDim (::POSGRAD_EMU_NS::S.bdim)
#define gridDim (::POSGRAD_EMU_NS::S.gdim)

namespace POSGRAD_EMU_NS {
#ifndef POSGRAD_EMU_PRIMARY
using ::emu::Deadlock;
using ::emu::LaunchLimit;
#endif

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
using cudaStream_t = struct EmuStream*;
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidDevice = 101,
  cudaErrorIllegalAddress = 700
};

enum class St : uint8_t { Run, Barrier, Shfl, Done };
struct Fiber {
  ucontext_t ctx;
  St st = St::Done;
  dim3 tid;
  uint64_t val = 0, out = 0;
  int off = 0;
};
struct Sched {
  ucontext_t main;
  std::vector<Fiber> f;
  std::vector<std::unique_ptr<char[]>> stacks;
  int cur = 0;
  dim3 bidx, bdim, gdim;
  std::function<void()> body;
  std::vector<double> smem;  // dynamic shared memory (8-byte aligned)
};
inline Sched S;
constexpr size_t kStack = 128 * 1024;

inline void fiber_entry() {
  S.body();
  S.f[S.cur].st = St::Done;  // returning resumes S.main through uc_link
}
inline void yield(St s) {
  Fiber& me = S.f[S.cur];
  me.st = s;
  swapcontext(&me.ctx, &S.main);
}
inline void __syncthreads() { yield(St::Barrier); }
template <typename T>
T __shfl_down_sync(unsigned, T v, int off) {
  static_assert(sizeof(T) <= 8);
  Fiber& me = S.f[S.cur];
  me.val = 0;
  std::memcpy(&me.val, &v, sizeof(T));
  me.off = off;
  yield(St::Shfl);
  T r;
  std::memcpy(&r, &S.f[S.cur].out, sizeof(T));
  return r;
}
// The block's threads run one at a time, switching only at __syncthreads and shuffles: atomic as is.
inline int atomicCAS(int* p, int compare, int value) {
  const int old = *p;
  if (old == compare) *p = value;
  return old;
}
inline void __threadfence_system() {}
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline unsigned char* emulated_dynamic_smem() { return reinterpret_cast<unsigned char*>(S.smem.data()); }

// cuBLAS stand-in: the column-major BLAS definition, C = alpha op(A) op(B) + beta C, computed
// naively (beta == 0 does not read C). Checks gemm.cu's row-major -> column-major mapping.
enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 };
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
using cublasHandle_t = struct EmuBlas*;
#ifdef POSGRAD_EMU_DEVICE
inline void require_device_argument(const char* kernel, size_t index, const void* p);  // below
#endif
// On the emulated device, cuBLAS's operands must be device memory (as the kernels' arguments).
inline void require_device_operands([[maybe_unused]] const void* A, [[maybe_unused]] const void* B,
                                    [[maybe_unused]] const void* C) {
#ifdef POSGRAD_EMU_DEVICE
  require_device_argument("cuBLAS gemm", 0, A);
  require_device_argument("cuBLAS gemm", 1, B);
  require_device_argument("cuBLAS gemm", 2, C);
#endif
}
template <typename T>
cublasStatus_t ref_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const T* alpha, const T* A,
                        int lda, const T* B, int ldb, const T* beta, T* C, int ldc) {
  if (lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m || lda < 1 || ldb < 1)
    return CUBLAS_STATUS_INVALID_VALUE;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      T s = 0;
      for (int l = 0; l < k; ++l) {
        const T a = ta == CUBLAS_OP_N ? A[i + l * lda] : A[l + i * lda];
        const T b = tb == CUBLAS_OP_N ? B[l + j * ldb] : B[j + l * ldb];
        s += a * b;
      }
      C[i + j * ldc] = *beta == T(0) ? *alpha * s : *alpha * s + *beta * C[i + j * ldc];
    }
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const float* alpha, const float* A, int lda, const float* B, int ldb,
                                  const float* beta, float* C, int ldc) {
  require_device_operands(A, B, C);
  return ref_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
inline cublasStatus_t cublasDgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const double* alpha, const double* A, int lda, const double* B, int ldb,
                                  const double* beta, double* C, int ldc) {
  require_device_operands(A, B, C);
  return ref_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
template <typename T>
cublasStatus_t ref_gemm_strided(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const T* alpha,
                                const T* A, int lda, long long sa, const T* B, int ldb, long long sb, const T* beta,
                                T* C, int ldc, long long sc, int batch) {
  for (int b = 0; b < batch; ++b) {
    const cublasStatus_t st = ref_gemm(ta, tb, m, n, k, alpha, A + b * sa, lda, B + b * sb, ldb, beta, C + b * sc, ldc);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
  }
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                int n, int k, const float* alpha, const float* A, int lda, long long sa,
                                                const float* B, int ldb, long long sb, const float* beta, float* C,
                                                int ldc, long long sc, int batch) {
  require_device_operands(A, B, C);
  return ref_gemm_strided(ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}
inline cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                int n, int k, const double* alpha, const double* A, int lda,
                                                long long sa, const double* B, int ldb, long long sb,
                                                const double* beta, double* C, int ldc, long long sc, int batch) {
  require_device_operands(A, B, C);
  return ref_gemm_strided(ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

// bf16 (cuda_bf16.h): the top 16 bits of a float, rounded to nearest even (NaN kept quiet), and the
// cuBLAS mixed-precision products over it: bf16 operands, float accumulation and C.
struct __nv_bfloat16 {
  uint16_t bits;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<uint16_t>(u >> 16)};
}
inline float bf16_value(__nv_bfloat16 b) {
  const uint32_t u = static_cast<uint32_t>(b.bits) << 16;
  float f = 0;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float __bfloat162float(__nv_bfloat16 b) { return bf16_value(b); }
enum cudaDataType { CUDA_R_32F = 0, CUDA_R_16BF = 14 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 };
inline cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                 int n, int k, const void* alpha, const void* A, cudaDataType at,
                                                 int lda, long long sa, const void* B, cudaDataType bt, int ldb,
                                                 long long sb, const void* beta, void* C, cudaDataType ct, int ldc,
                                                 long long sc, int batch, cublasComputeType_t, cublasGemmAlgo_t) {
  if (at != CUDA_R_16BF || bt != CUDA_R_16BF || ct != CUDA_R_32F) return CUBLAS_STATUS_INVALID_VALUE;
  const auto* a = static_cast<const __nv_bfloat16*>(A);
  const auto* b = static_cast<const __nv_bfloat16*>(B);
  // The operands widened to float (exact), then the float reference product.
  const auto widen = [](const __nv_bfloat16* p, long long count) {
    std::vector<float> v(static_cast<size_t>(count));
    for (long long i = 0; i < count; ++i) v[static_cast<size_t>(i)] = bf16_value(p[i]);
    return v;
  };
  const long long a_span =
      (batch - 1) * sa + static_cast<long long>(lda) * ((ta == CUBLAS_OP_N ? k : m) - 1) + (ta == CUBLAS_OP_N ? m : k);
  const long long b_span =
      (batch - 1) * sb + static_cast<long long>(ldb) * ((tb == CUBLAS_OP_N ? n : k) - 1) + (tb == CUBLAS_OP_N ? k : n);
  require_device_operands(A, B, C);
  const std::vector<float> af = widen(a, a_span), bf = widen(b, b_span);
  return ref_gemm_strided(ta, tb, m, n, k, static_cast<const float*>(alpha), af.data(), lda, sa, bf.data(), ldb, sb,
                          static_cast<const float*>(beta), static_cast<float*>(C), ldc, sc, batch);
}
inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void* alpha, const void* A, cudaDataType at, int lda, const void* B,
                                   cudaDataType bt, int ldb, const void* beta, void* C, cudaDataType ct, int ldc,
                                   cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1,
                                    compute, algo);
}

#ifdef POSGRAD_EMU_DEVICE
// ---- the emulated device's fake CUDA runtime (tests/emulated_device/fake_device.h) ---------------
// Device memory is host memory that the runtime registers (block start -> size), so that it can
// tell device from host pointers as the driver does: a copy's direction is inferred from the
// registry and checked against the requested kind, a copy or memset that leaves its block is
// refused, a kernel or GEMM handed a host pointer throws (an illegal address on the GPU), fresh
// device memory is NaN (undefined on the GPU), and cudaMalloc fails beyond a settable limit. Every
// call that would cost the GPU a copy or a host wait is counted.
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3
};
struct cudaPointerAttributes {
  cudaMemoryType type = cudaMemoryTypeUnregistered;
  int device = 0;
};
constexpr unsigned cudaStreamNonBlocking = 1;
constexpr unsigned cudaHostAllocPortable = 1, cudaHostAllocMapped = 2;
struct EmuStream {
  int device = 0;
};
struct EmuBlas {
  int device = 0;
};
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 };

struct FakeDevice {
  std::recursive_mutex mu;
  std::map<uintptr_t, size_t> blocks;  // cudaMalloc'd: start -> bytes
  size_t used = 0, limit = std::numeric_limits<size_t>::max();
  Counters counts;
  cudaError_t last = cudaSuccess;
  int current = 0;
  EmuStream stream;
  EmuBlas blas;
};
inline FakeDevice D;

inline cudaError_t fail(cudaError_t e) {
  D.last = e;
  return e;
}
// The block holding [p, p + n), or blocks.end(); `any` is set when p lies in some block at all.
inline bool device_range(const void* p, size_t n, bool* any = nullptr) {
  std::lock_guard<std::recursive_mutex> lock(D.mu);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = D.blocks.upper_bound(a);
  if (any) *any = false;
  if (it == D.blocks.begin()) return false;
  --it;
  if (a >= it->first + it->second) return false;
  if (any) *any = true;
  return n <= it->first + it->second - a;
}
inline const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
  }
  return "cudaErrorUnknown";
}
inline const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
  }
  return "unknown error";
}
inline cudaError_t cudaGetLastError() {
  const cudaError_t e = D.last;
  D.last = cudaSuccess;
  return e;
}
// Devices: 1, or POSGRAD_EMU_DEVICES (1..16) for the data-parallel tests (every emulated device
// shares the one fake memory; each process of a job has its own).
inline int emulated_device_count() {
  const char* v = std::getenv("POSGRAD_EMU_DEVICES");
  const int n = v ? std::atoi(v) : 1;
  return n >= 1 && n <= 16 ? n : 1;
}
inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = emulated_device_count();
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) {
  *d = D.current;
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= emulated_device_count()) return fail(cudaErrorInvalidDevice);
  D.current = d;
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = &D.stream;
  return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) {
  ++D.counts.syncs;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
  ++D.counts.syncs;
  return cudaSuccess;
}
inline cudaError_t cudaMalloc(void** p, size_t n) {
  std::lock_guard<std::recursive_mutex> lock(D.mu);
  if (n == 0 || n > D.limit - std::min(D.limit, D.used)) return fail(cudaErrorMemoryAllocation);
  void* q = std::aligned_alloc(256, (n + 255) / 256 * 256);
  if (!q) return fail(cudaErrorMemoryAllocation);
  std::memset(q, 0xFF, n);  // NaN as float and as double: the GPU leaves fresh memory undefined
  D.blocks[reinterpret_cast<uintptr_t>(q)] = n;
  D.used += n;
  ++D.counts.mallocs;
  *p = q;
  return cudaSuccess;
}
inline cudaError_t cudaFree(void* p) {
  std::lock_guard<std::recursive_mutex> lock(D.mu);
  auto it = D.blocks.find(reinterpret_cast<uintptr_t>(p));
  if (it == D.blocks.end()) return fail(cudaErrorInvalidValue);
  D.used -= it->second;
  D.blocks.erase(it);
  std::free(p);
  ++D.counts.frees;
  return cudaSuccess;
}
// Mapped pinned host memory: kernels may use it, so it is registered like device memory.
inline cudaError_t cudaHostAlloc(void** p, size_t n, unsigned flags) {
  if ((flags & cudaHostAllocMapped) == 0) return fail(cudaErrorInvalidValue);  // posgrad maps what it pins
  std::lock_guard<std::recursive_mutex> lock(D.mu);
  void* q = std::aligned_alloc(256, (n + 255) / 256 * 256);
  if (!q) return fail(cudaErrorMemoryAllocation);
  D.blocks[reinterpret_cast<uintptr_t>(q)] = n;
  *p = q;
  return cudaSuccess;
}
inline cudaError_t cudaHostGetDevicePointer(void** d, void* h, unsigned) {
  if (!device_range(h, 1)) return fail(cudaErrorInvalidValue);
  *d = h;
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t) {
  bool dst_any = false, src_any = false;
  const bool dst_dev = device_range(dst, n, &dst_any), src_dev = device_range(src, n, &src_any);
  if (dst_any != dst_dev || src_any != src_dev) return fail(cudaErrorInvalidValue);  // runs past its block
  if (!dst_dev && !src_dev) return fail(cudaErrorInvalidValue);  // posgrad never copies host to host here
  const cudaMemcpyKind actual = dst_dev && src_dev ? cudaMemcpyDeviceToDevice
                                : dst_dev          ? cudaMemcpyHostToDevice
                                                   : cudaMemcpyDeviceToHost;
  if (kind != cudaMemcpyDefault && kind != actual) return fail(cudaErrorInvalidValue);
  (actual == cudaMemcpyDeviceToDevice ? D.counts.d2d
   : actual == cudaMemcpyHostToDevice ? D.counts.h2d
                                      : D.counts.d2h)++;
  std::memmove(dst, src, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) {
  if (!device_range(p, n)) return fail(cudaErrorInvalidValue);
  std::memset(p, v, n);
  ++D.counts.memsets;
  return cudaSuccess;
}
inline cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  a->type = device_range(p, 1) ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
  return cudaSuccess;
}
inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = &D.blas;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
inline const char* cublasGetStatusName(cublasStatus_t st) {
  return st == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_INVALID_VALUE";
}
inline const char* cublasGetStatusString(cublasStatus_t st) {
  return st == CUBLAS_STATUS_SUCCESS ? "success" : "an invalid value was used as an argument";
}

// A kernel (or GEMM) argument that points to host memory: the GPU would fault on it.
inline void require_device_argument(const char* kernel, size_t index, const void* p) {
  if (p != nullptr && !device_range(p, 1))
    throw ::posgrad::DeviceError(std::string("emulated device: kernel ") + kernel +
                                 " was given host memory (argument " + std::to_string(index) +
                                 "); on a GPU this is an illegal address");
}
template <typename... A>
void require_device_arguments(const char* kernel, const A&... args) {
  size_t i = 0;
  (
      [&](const auto& a) {
        if constexpr (std::is_pointer_v<std::decay_t<decltype(a)>>) require_device_argument(kernel, i, a);
        ++i;
      }(args),
      ...);
}

Counters counters() {
  std::lock_guard<std::recursive_mutex> lock(D.mu);
  return D.counts;
}
void reset_counters() {
  std::lock_guard<std::recursive_mutex> lock(D.mu);
  D.counts = Counters{};
}
void set_memory_limit(size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(D.mu);
  D.limit = bytes;
}
size_t device_bytes() {
  std::lock_guard<std::recursive_mutex> lock(D.mu);
  return D.used;
}
#endif  // POSGRAD_EMU_DEVICE

// Runs S.body for every thread of block S.bidx.
inline void run_block() {
  const int n = static_cast<int>(S.bdim.x * S.bdim.y * S.bdim.z);
  if (static_cast<int>(S.f.size()) < n) S.f.resize(n);
  while (static_cast<int>(S.stacks.size()) < n) S.stacks.emplace_back(new char[kStack]);
  for (int t = 0; t < n; ++t) {
    Fiber& fb = S.f[t];
    fb.tid = dim3(t % S.bdim.x, (t / S.bdim.x) % S.bdim.y, t / (S.bdim.x * S.bdim.y));
    getcontext(&fb.ctx);
    fb.ctx.uc_stack.ss_sp = S.stacks[t].get();
    fb.ctx.uc_stack.ss_size = kStack;
    fb.ctx.uc_link = &S.main;
    makecontext(&fb.ctx, fiber_entry, 0);
    fb.st = St::Run;
  }
  for (;;) {
    for (int t = 0; t < n; ++t)
      if (S.f[t].st == St::Run) {
        S.cur = t;
        swapcontext(&S.main, &S.f[t].ctx);
      }
    // Every live thread now waits at a barrier or a shuffle. Complete the shuffles of full warps.
    bool released = false;
    for (int w = 0; w * 32 < n; ++w) {
      const int lo = w * 32, hi = std::min(n, lo + 32);
      bool all = true, any = false;
      for (int t = lo; t < hi; ++t) {
        all = all && S.f[t].st == St::Shfl;
        any = any || S.f[t].st == St::Shfl;
      }
      if (!any) continue;
      if (!all || hi - lo != 32) throw Deadlock("warp shuffle reached by only part of a warp");
      for (int t = lo; t < hi; ++t) {
        const int src = (t - lo) + S.f[t].off < 32 ? t + S.f[t].off : t;
        S.f[t].out = S.f[src].val;
      }
      for (int t = lo; t < hi; ++t) S.f[t].st = St::Run;
      released = true;
    }
    if (released) continue;
    int live = 0, waiting = 0;
    for (int t = 0; t < n; ++t) {
      live += S.f[t].st != St::Done;
      waiting += S.f[t].st == St::Barrier;
    }
    if (live == 0) return;
    if (waiting != live) throw Deadlock("__syncthreads not reached by every live thread");
    for (int t = 0; t < n; ++t)
      if (S.f[t].st == St::Barrier) S.f[t].st = St::Run;
  }
}

// The launch limits of every NVIDIA GPU of compute capability 7.0 to 12.x (CUDA C++ Programming Guide,
// "Compute Capabilities", technical specifications table): a launch beyond them fails on the GPU with
// cudaErrorInvalidConfiguration, here with LaunchLimit. Dynamic shared memory above 48 KiB needs an
// opt-in (cudaFuncSetAttribute) that posgrad's kernels do not make.
inline void check_launch_limits(dim3 grid, dim3 block, size_t smem) {
  const auto fail = [](const std::string& what) {
    throw LaunchLimit("emulated launch beyond the GPU limits: " + what);
  };
  const unsigned long long threads = 1ULL * block.x * block.y * block.z;
  if (threads == 0 || threads > 1024) fail(std::to_string(threads) + " threads per block (at most 1024)");
  if (block.x > 1024 || block.y > 1024 || block.z > 64) fail("block dimensions beyond 1024 x 1024 x 64");
  if (grid.x > 2147483647u) fail("grid.x " + std::to_string(grid.x) + " beyond 2^31 - 1");
  if (grid.y > 65535 || grid.z > 65535)
    fail("grid.y " + std::to_string(grid.y) + " / grid.z " + std::to_string(grid.z) + " beyond 65535");
  if (smem > 48 * 1024) fail(std::to_string(smem) + " bytes of dynamic shared memory (at most 49152 without opt-in)");
}

// The order the blocks of a launch run in: a permutation drawn from a seeded generator (POSGRAD_EMU_SEED,
// default 1, mixed with the launch's ordinal), so a kernel whose blocks depend on each other's order
// fails, reproducibly. POSGRAD_EMU_SEED=0 runs them in index order.
inline std::vector<dim3> block_order(dim3 grid) {
  static const unsigned long long seed = [] {
    const char* env = std::getenv("POSGRAD_EMU_SEED");
    return env != nullptr ? std::strtoull(env, nullptr, 10) : 1ULL;
  }();
  static unsigned long long launches = 0;
  std::vector<dim3> order;
  order.reserve(static_cast<size_t>(grid.x) * grid.y * grid.z);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) order.emplace_back(x, y, z);
  ++launches;
  if (seed != 0) {
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + launches);
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
  }
  return order;
}

// Runs S.body as every thread of every block of <<<grid, block, smem>>>, after the limit checks.
inline void run_grid(dim3 grid, dim3 block, size_t smem) {
  check_launch_limits(grid, block, smem);
  S.bdim = block;
  S.gdim = grid;
  for (const dim3& b : block_order(grid)) {
    // Every block starts with its dynamic shared memory full of NaN (the GPU leaves it undefined): a
    // value read before the block wrote it poisons the result instead of reading as zero.
    S.smem.assign(smem / sizeof(double) + 2, 0.0);
    std::memset(S.smem.data(), 0xFF, S.smem.size() * sizeof(double));  // NaN as float and as double
    S.bidx = b;
    run_block();
  }
}

template <typename... KArgs, typename... Args>
void emulate_launch(const char* name, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
  std::tuple<std::decay_t<KArgs>...> tup(std::forward<Args>(args)...);
#ifdef POSGRAD_EMU_DEVICE
  std::apply([&](const auto&... a) { require_device_arguments(name, a...); }, tup);
  ++D.counts.launches;
#else
  (void)name;
#endif
  S.body = [&] { std::apply(kernel, tup); };
  run_grid(grid, block, smem);
}

#ifdef POSGRAD_EMU_PRIMARY  // the execution model's own tests use the primary copy
void launch_for_test(Dim g, Dim bl, size_t smem, const std::function<void()>& body) {
  S.body = body;
  run_grid(dim3(g.x, g.y, g.z), dim3(bl.x, bl.y, bl.z), smem);
}

TestThread this_thread() {
  const Fiber& me = S.f[S.cur];
  return {{S.bidx.x, S.bidx.y, S.bidx.z}, {me.tid.x, me.tid.y, me.tid.z}, emulated_dynamic_smem()};
}

void sync_threads_for_test() { __syncthreads(); }
#endif

}  // namespace POSGRAD_EMU_NS

// The kernel files: inside namespace POSGRAD_EMU_NS (emu::posgrad::kernels::cuda::...) for the
// kernel-level tests, or, in the emulated device (tests/emulated_device/cuda_device.cpp, which
// defines POSGRAD_EMU_DEVICE), at their real names (::posgrad::kernels::cuda::...) together with
// backend.cu itself, compiled against the fake runtime above, so that a test program linked with it
// runs Device::cuda() tensors through these kernels.
#ifdef POSGRAD_EMU_DEVICE
using namespace ::POSGRAD_EMU_NS;  // dim3, __syncthreads, the fake runtime, for the files below
#include "tensor/kernels/cuda/backend.cu"
#include "tensor/kernels/cuda/common.cuh"
#else
namespace POSGRAD_EMU_NS {
#include "tensor/kernels/cuda/common.cuh"
namespace posgrad::cuda {
bool is_device_pointer(const void* p) { return p != nullptr; }
void require_device_pointer(const void*, const char*, const char*) {}
DeviceArray::DeviceArray(const void* p, size_t bytes) : ptr_(p), bytes_(bytes) {}
DeviceArray::~DeviceArray() = default;
IndexFault* index_fault() {
  static IndexFault f{};
  return &f;
}
void* scratch_allocate(size_t bytes) { return std::malloc(bytes == 0 ? 1 : bytes); }
void scratch_free(void* p, size_t) { std::free(p); }
cublasHandle_t cublas_handle() { return nullptr; }
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* what, const char*, int) {
  throw ::posgrad::DeviceError(std::string("emulated cuBLAS error ") + std::to_string(st) + " in " + what);
}
}  // namespace posgrad::cuda
#endif
#include "tensor/kernels/cuda/attention.cu"
#include "tensor/kernels/cuda/cross_entropy.cu"
#include "tensor/kernels/cuda/cublas.cuh"
#include "tensor/kernels/cuda/elementwise.cu"
#include "tensor/kernels/cuda/embedding.cu"
#include "tensor/kernels/cuda/gemm.cu"
#include "tensor/kernels/cuda/memory.cu"
#include "tensor/kernels/cuda/norm.cu"
#include "tensor/kernels/cuda/optim.cu"
#include "tensor/kernels/cuda/random.cu"
#include "tensor/kernels/cuda/reduce.cu"
#include "tensor/kernels/cuda/rope.cu"
#include "tensor/kernels/cuda/softmax.cu"
#ifndef POSGRAD_EMU_DEVICE
}  // namespace POSGRAD_EMU_NS
#endif
