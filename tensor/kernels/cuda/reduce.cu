// reduce.cu — sum and max along one dim of x (outer, R, inner) on the GPU; the CUDA twins of
// cpu/reduce.cpp.
//
// Two shapes of work. inner == 1 (reducing the last dim): one block per output, threads stride over
// R and a fixed tree (common.cuh) combines them. inner > 1: one thread per output (o, i) walking r
// sequentially, coalesced over i; where there are few outputs for long R (a bias gradient), the rows
// are split into chunks (reduction_chunks) whose partial sums are added in chunk order. The orders
// are fixed, so results are deterministic; the tree order differs from the CPU's sequential sum
// (agreement to rounding). Max keeps the FIRST maximum on ties, as the CPU does: the tree prefers the
// lower index among equal values. NaN propagates as on the CPU (torch.max semantics): any NaN beats
// every number, and among NaNs the lowest index wins, so the result is the first NaN along R.
#include "tensor/kernels/cuda/common.cuh"

namespace posgrad::kernels::cuda {

using namespace posgrad::cuda;

namespace {

template <typename T>
__global__ void sum_rows_kernel(T* y, const T* x, int64_t outer, int64_t R) {
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* xr = x + o * R;
    T s = T(0);
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) s += xr[r];
    s = block_sum(s);
    if (threadIdx.x == 0) y[o] = s;
  }
}

template <typename T>
__global__ void sum_inner_kernel(T* y, const T* x, int64_t outer, int64_t R, int64_t inner) {
  POSGRAD_GRID_STRIDE(j, outer * inner) {
    const int64_t o = j / inner, i = j % inner;
    const T* xo = x + o * R * inner + i;
    T s = T(0);
    for (int64_t r = 0; r < R; ++r) s += xo[r * inner];
    y[j] = s;
  }
}

// The same sums split into row chunks (reduction_chunks): part[chunk, j] over rows [chunk * rows, ...),
// chunk = blockIdx.y; then sum_chunks_kernel adds the chunks in order.
template <typename T>
__global__ void sum_inner_chunks_kernel(T* part, const T* x, int64_t outer, int64_t R, int64_t inner, int64_t rows) {
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows, r1 = r0 + rows < R ? r0 + rows : R;
  POSGRAD_GRID_STRIDE(j, outer * inner) {
    const int64_t o = j / inner, i = j % inner;
    const T* xo = x + o * R * inner + i;
    T s = T(0);
    for (int64_t r = r0; r < r1; ++r) s += xo[r * inner];
    part[blockIdx.y * outer * inner + j] = s;
  }
}

template <typename T>
__global__ void sum_chunks_kernel(T* y, const T* part, int64_t n, int64_t chunks) {
  POSGRAD_GRID_STRIDE(j, n) {
    T s = T(0);
    for (int64_t c = 0; c < chunks; ++c) s += part[c * n + j];
    y[j] = s;
  }
}

template <typename T>
__global__ void sum_backward_kernel(T* dx, const T* dy, int64_t outer, int64_t R, int64_t inner) {
  POSGRAD_GRID_STRIDE(j, outer * R * inner) {
    const int64_t i = j % inner, o = j / (R * inner);
    dx[j] += dy[o * inner + i];
  }
}

// (value, index) with "NaN beats everything, larger value wins, lower index among equals (or among
// NaNs)" — the first NaN if there is one, else the first maximum.
template <typename T>
__device__ __forceinline__ void max_combine(T& v, int64_t& a, T v2, int64_t a2) {
  const bool nan = v != v, nan2 = v2 != v2;
  if (nan2 ? (!nan || a2 < a) : (!nan && (v2 > v || (v2 == v && a2 < a)))) {
    v = v2;
    a = a2;
  }
}

// One element in index order: the running (first NaN | first maximum) of a sequential scan.
template <typename T>
__device__ __forceinline__ void max_step(T& best, int64_t& arg, T v, int64_t r) {
  if (best == best && (v > best || v != v)) {
    best = v;
    arg = r;
  }
}

template <typename T>
__global__ void max_rows_kernel(T* y, int64_t* idx, const T* x, int64_t outer, int64_t R) {
  __shared__ T sv[32];
  __shared__ int64_t sa[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* xr = x + o * R;
    // Each thread's running first maximum over r = t, t + blockDim, ... (strict >: first wins).
    // Threads that see no element start from (x[0], 0), which can never beat the true answer.
    T best = xr[0];
    int64_t arg = 0;
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) max_step(best, arg, xr[r], r);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const T v2 = __shfl_down_sync(0xffffffffu, best, off);
      const int64_t a2 = __shfl_down_sync(0xffffffffu, arg, off);
      max_combine(best, arg, v2, a2);
    }
    __syncthreads();
    if (lane == 0) {
      sv[warp] = best;
      sa[warp] = arg;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < nwarps; ++w) max_combine(best, arg, sv[w], sa[w]);
      y[o] = best;
      idx[o] = arg;
    }
  }
}

template <typename T>
__global__ void max_inner_kernel(T* y, int64_t* idx, const T* x, int64_t outer, int64_t R, int64_t inner) {
  POSGRAD_GRID_STRIDE(j, outer * inner) {
    const int64_t o = j / inner, i = j % inner;
    const T* xo = x + o * R * inner + i;
    T best = xo[0];
    int64_t arg = 0;
    for (int64_t r = 1; r < R; ++r) max_step(best, arg, xo[r * inner], r);
    y[j] = best;
    idx[j] = arg;
  }
}

template <typename T>
__global__ void max_backward_kernel(T* dx, const T* dy, const int64_t* idx, int64_t outer, int64_t R, int64_t inner) {
  // Each output routes its gradient to exactly one input element: no two threads share a target.
  POSGRAD_GRID_STRIDE(j, outer * inner) {
    const int64_t o = j / inner, i = j % inner;
    dx[(o * R + idx[j]) * inner + i] += dy[j];
  }
}

}  // namespace

template <typename T>
void sum_dim_forward(T* y, const T* x, int64_t outer, int64_t R, int64_t inner) {
  if (outer <= 0 || inner <= 0) return;
  if (R <= 0) {
    fill<T>(y, outer * inner, T(0));
    return;
  }
  const int64_t n = outer * inner, chunks = inner == 1 ? 1 : reduction_chunks(n, R);
  if (inner == 1) {
    launch("sum_dim_forward", sum_rows_kernel<T>, row_grid(outer), kRowBlock, 0, y, x, outer, R);
  } else if (chunks == 1) {
    launch("sum_dim_forward", sum_inner_kernel<T>, grid_for(n, kBlock), kBlock, 0, y, x, outer, R, inner);
  } else {
    const int64_t rows = (R + chunks - 1) / chunks;
    const size_t bytes = static_cast<size_t>(chunks * n) * sizeof(T);
    T* part = static_cast<T*>(scratch_allocate(bytes));
    launch("sum_dim_forward (row chunks)", sum_inner_chunks_kernel<T>,
           dim3(grid_for(n, kBlock), static_cast<unsigned>(chunks)), kBlock, 0, part, x, outer, R, inner, rows);
    launch("sum_dim_forward (chunks)", sum_chunks_kernel<T>, grid_for(n, kBlock), kBlock, 0, y,
           static_cast<const T*>(part), n, chunks);
    scratch_free(part, bytes);  // its next user is queued behind these kernels on the same stream
  }
}

template <typename T>
void sum_dim_backward(T* dx, const T* dy, int64_t outer, int64_t R, int64_t inner) {
  const int64_t n = outer * R * inner;
  if (n <= 0) return;
  launch("sum_dim_backward", sum_backward_kernel<T>, grid_for(n, kBlock), kBlock, 0, dx, dy, outer, R, inner);
}

template <typename T>
void max_dim_forward(T* y, int64_t* idx, const T* x, int64_t outer, int64_t R, int64_t inner) {
  if (outer <= 0 || inner <= 0) return;
  POSGRAD_CHECK(R > 0, ShapeError, "max_dim_forward: empty reduced dim (R = ", R, ")");
  if (inner == 1)
    launch("max_dim_forward", max_rows_kernel<T>, row_grid(outer), kRowBlock, 0, y, idx, x, outer, R);
  else
    launch("max_dim_forward", max_inner_kernel<T>, grid_for(outer * inner, kBlock), kBlock, 0, y, idx, x, outer, R,
           inner);
}

template <typename T>
void max_dim_backward(T* dx, const T* dy, const int64_t* idx, int64_t outer, int64_t R, int64_t inner) {
  if (outer <= 0 || inner <= 0 || R <= 0) return;
  launch("max_dim_backward", max_backward_kernel<T>, grid_for(outer * inner, kBlock), kBlock, 0, dx, dy, idx, outer, R,
         inner);
}

#define INST(T)                                                                        \
  template void sum_dim_forward<T>(T*, const T*, int64_t, int64_t, int64_t);           \
  template void sum_dim_backward<T>(T*, const T*, int64_t, int64_t, int64_t);          \
  template void max_dim_forward<T>(T*, int64_t*, const T*, int64_t, int64_t, int64_t); \
  template void max_dim_backward<T>(T*, const T*, const int64_t*, int64_t, int64_t, int64_t);
INST(float)
INST(double)

#undef INST
}  // namespace posgrad::kernels::cuda
