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
#include <memory>
#include <mutex>
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

#define POSGRAD_CUDA_EMULATION 1
#define POSGRAD_CUDA_ROW_BLOCK 64
#define POSGRAD_CUDA_ATTN_TILE 32
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) alignas(n)
#define threadIdx (::emu::S.f[::emu::S.cur].tid)
#define blockIdx (::emu::S.bidx)
#define blockDim (::emu::S.bdim)
#define gridDim (::emu::S.gdim)

namespace emu {

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
using cudaStream_t = struct EmuStream*;
enum cudaError_t { cudaSuccess = 0 };

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
  return ref_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
inline cublasStatus_t cublasDgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const double* alpha, const double* A, int lda, const double* B, int ldb,
                                  const double* beta, double* C, int ldc) {
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
  return ref_gemm_strided(ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}
inline cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                int n, int k, const double* alpha, const double* A, int lda,
                                                long long sa, const double* B, int ldb, long long sb,
                                                const double* beta, double* C, int ldc, long long sc, int batch) {
  return ref_gemm_strided(ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

struct Deadlock : std::runtime_error {
  using std::runtime_error::runtime_error;
};

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

template <typename... KArgs, typename... Args>
void emulate_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
  std::tuple<std::decay_t<KArgs>...> tup(std::forward<Args>(args)...);
  S.body = [&] { std::apply(kernel, tup); };
  S.bdim = block;
  S.gdim = grid;
  S.smem.assign(smem / sizeof(double) + 2, 0.0);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        S.bidx = dim3(x, y, z);
        run_block();
      }
}

}  // namespace emu

namespace emu {
#include "tensor/kernels/cuda/common.cuh"
namespace posgrad::cuda {
bool is_device_pointer(const void* p) { return p != nullptr; }
void require_device_pointer(const void*, const char*, const char*) {}
DeviceArray::DeviceArray(const void* p, size_t bytes) : ptr_(p), bytes_(bytes) {}
DeviceArray::~DeviceArray() = default;
cublasHandle_t cublas_handle() { return nullptr; }
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* what, const char*, int) {
  throw ::posgrad::DeviceError(std::string("emulated cuBLAS error ") + std::to_string(st) + " in " + what);
}
}  // namespace posgrad::cuda
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
}  // namespace emu
