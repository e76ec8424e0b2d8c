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
#endif
#define POSGRAD_CUDA_EMULATION 1
#define POSGRAD_CUDA_ROW_BLOCK POSGRAD_EMU_ROW_BLOCK
#define POSGRAD_CUDA_ATTN_TILE POSGRAD_EMU_ATTN_TILE
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
void emulate_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
  std::tuple<std::decay_t<KArgs>...> tup(std::forward<Args>(args)...);
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

namespace POSGRAD_EMU_NS {
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
}  // namespace POSGRAD_EMU_NS
