// norm.cu — LayerNorm and RMSNorm over the last dim of x (N, C) on the GPU, forward and backward;
// the CUDA twins of cpu/norm.cpp, with its formulas (see there: biased variance by the shifted
// two-pass algorithm in double — d = x - x[0], mean = x[0] + <d>, var = <(d - <d>)^2> — so that a
// constant row has exactly var = 0; the mean saved as hi + lo (N, 2) and xhat = ((x - hi) - lo) * rstd
// everywhere; rstd = 1 / sqrt(var + eps); dx = rstd * (g - <g> - xhat <g xhat>) with g = dy * w;
// RMSNorm's mean of squares also in double).
//
// Work split. Forward and dx: one block per row, block-wide fixed-tree reductions. Parameter
// gradients dw, db (column sums over all N rows): a block owns 32 columns and a chunk of rows
// (reduction_chunks: many rows for few columns are split); its 8 thread rows each walk the chunk's
// rows n = ty, ty + 8, ... in order, then thread row 0 adds the 8 partials in order, and with several
// chunks a second kernel adds the chunks' partials in chunk order. No atomics:
// the summation order is fixed, so results are deterministic (but not the CPU's order).
#include "tensor/kernels/cuda/common.cuh"

namespace posgrad::kernels::cuda {

using namespace posgrad::cuda;

namespace {

constexpr int kColTile = 32, kRowLanes = 8;

template <typename T>
__global__ void layer_norm_forward_kernel(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t N,
                                          int64_t C, T eps) {
  const double c_d = static_cast<double>(C);
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* xr = x + n * C;
    T* yr = y + n * C;
    const double K = static_cast<double>(xr[0]);
    double s = 0.0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += static_cast<double>(xr[c]) - K;
    const double md = block_sum(s) / c_d;
    double ss = 0.0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const double d = (static_cast<double>(xr[c]) - K) - md;
      ss += d * d;
    }
    const double mu = K + md;
    const T hi = static_cast<T>(mu), lo = static_cast<T>(mu - static_cast<double>(hi));
    const T rs = static_cast<T>(1.0 / d_sqrt(block_sum(ss) / c_d + static_cast<double>(eps)));
    if (threadIdx.x == 0) {
      mean[2 * n] = hi;
      mean[2 * n + 1] = lo;
      rstd[n] = rs;
    }
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      T v = ((xr[c] - hi) - lo) * rs;
      if (w) v = v * w[c];
      if (b) v = v + b[c];
      yr[c] = v;
    }
  }
}

// mean == nullptr: RMSNorm (xhat = x * rstd, no centring).
template <typename T>
__global__ void norm_dx_kernel(T* dx, const T* dy, const T* x, const T* w, const T* mean, const T* rstd, int64_t N,
                               int64_t C) {
  const T c_t = T(C);  // divide by C, as the CPU
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* xr = x + n * C;
    const T* dyr = dy + n * C;
    T* dxr = dx + n * C;
    const T hi = mean ? mean[2 * n] : T(0), lo = mean ? mean[2 * n + 1] : T(0), rs = rstd[n];
    T sg = T(0), sgx = T(0);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const T g = w ? dyr[c] * w[c] : dyr[c];
      sg += g;
      sgx += g * (((xr[c] - hi) - lo) * rs);
    }
    const T mg = mean ? block_sum(sg) / c_t : T(0);
    const T mgx = block_sum(sgx) / c_t;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const T g = w ? dyr[c] * w[c] : dyr[c];
      dxr[c] += rs * (g - mg - ((xr[c] - hi) - lo) * rs * mgx);
    }
  }
}

// dw[c] += sum_n dy[n,c] * xhat(n,c), db[c] += sum_n dy[n,c]. Block (kColTile, kRowLanes); blockIdx.y
// is the chunk of rows [y * rows, (y + 1) * rows). With one chunk the sums are added into dw, db;
// with several, chunk y writes its partials to pw[y * C + c], pb[y * C + c] (sum_partials_kernel adds them).
template <typename T>
__global__ void norm_param_grads_kernel(T* dw, T* db, const T* dy, const T* x, const T* mean, const T* rstd, int64_t N,
                                        int64_t C, int64_t rows) {
  __shared__ T part_w[kRowLanes][kColTile];
  __shared__ T part_b[kRowLanes][kColTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const bool chunked = gridDim.y > 1;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * rows, n1 = n0 + rows < N ? n0 + rows : N;
  for (int64_t c0 = static_cast<int64_t>(blockIdx.x) * kColTile; c0 < C;
       c0 += static_cast<int64_t>(gridDim.x) * kColTile) {
    const int64_t c = c0 + tx;
    T aw = T(0), ab = T(0);
    if (c < C) {
      for (int64_t n = n0 + ty; n < n1; n += kRowLanes) {
        const T g = dy[n * C + c];
        const T hi = mean ? mean[2 * n] : T(0), lo = mean ? mean[2 * n + 1] : T(0);
        aw += g * (((x[n * C + c] - hi) - lo) * rstd[n]);
        ab += g;
      }
    }
    __syncthreads();  // the previous tile's partials have been read
    part_w[ty][tx] = aw;
    part_b[ty][tx] = ab;
    __syncthreads();
    if (ty == 0 && c < C) {
      T sw = T(0), sb = T(0);
      for (int r = 0; r < kRowLanes; ++r) {
        sw += part_w[r][tx];
        sb += part_b[r][tx];
      }
      if (chunked) {
        dw[blockIdx.y * C + c] = sw;
        db[blockIdx.y * C + c] = sb;
      } else {
        if (dw) dw[c] += sw;
        if (db) db[c] += sb;
      }
    }
  }
}

// dw[c] += sum_y pw[y * C + c], db likewise, the chunks in order.
template <typename T>
__global__ void sum_partials_kernel(T* dw, T* db, const T* pw, const T* pb, int64_t C, int64_t chunks) {
  POSGRAD_GRID_STRIDE(c, C) {
    T sw = T(0), sb = T(0);
    for (int64_t y = 0; y < chunks; ++y) {
      sw += pw[y * C + c];
      sb += pb[y * C + c];
    }
    if (dw) dw[c] += sw;
    if (db) db[c] += sb;
  }
}

template <typename T>
__global__ void rms_norm_forward_kernel(T* y, T* rstd, const T* x, const T* w, int64_t N, int64_t C, T eps) {
  const double c_d = static_cast<double>(C);
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* xr = x + n * C;
    T* yr = y + n * C;
    double ss = 0.0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) ss += static_cast<double>(xr[c]) * static_cast<double>(xr[c]);
    const T rs = static_cast<T>(1.0 / d_sqrt(block_sum(ss) / c_d + static_cast<double>(eps)));
    if (threadIdx.x == 0) rstd[n] = rs;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = w ? xr[c] * rs * w[c] : xr[c] * rs;
  }
}

template <typename T>
void param_grads(T* dw, T* db, const T* dy, const T* x, const T* mean, const T* rstd, int64_t N, int64_t C,
                 const char* name) {
  const int64_t tiles = (C + kColTile - 1) / kColTile;
  const unsigned grid = static_cast<unsigned>(tiles < 65535 ? tiles : 65535);
  // Row chunks (reduction_chunks, counting a thread per column and row lane) so that a few hundred
  // columns over thousands of rows still fill the GPU.
  const int64_t chunks = reduction_chunks(C * kRowLanes, N), rows = (N + chunks - 1) / chunks;
  if (chunks == 1) {
    launch(name, norm_param_grads_kernel<T>, grid, dim3(kColTile, kRowLanes), 0, dw, db, dy, x, mean, rstd, N, C, N);
    return;
  }
  const size_t bytes = static_cast<size_t>(2 * chunks * C) * sizeof(T);
  T* part = static_cast<T*>(scratch_allocate(bytes));
  launch(name, norm_param_grads_kernel<T>, dim3(grid, static_cast<unsigned>(chunks)), dim3(kColTile, kRowLanes), 0,
         part, part + chunks * C, dy, x, mean, rstd, N, C, rows);
  launch(name, sum_partials_kernel<T>, grid_for(C, kBlock), kBlock, 0, dw, db, static_cast<const T*>(part),
         static_cast<const T*>(part + chunks * C), C, chunks);
  scratch_free(part, bytes);  // its next user is queued behind these kernels on the same stream
}

}  // namespace

template <typename T>
void layer_norm_forward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t N, int64_t C, T eps) {
  if (N <= 0 || C <= 0) return;
  launch("layer_norm_forward", layer_norm_forward_kernel<T>, row_grid(N), kRowBlock, 0, y, mean, rstd, x, w, b, N, C,
         eps);
}

template <typename T>
void layer_norm_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                         int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  if (dx) launch("layer_norm_backward", norm_dx_kernel<T>, row_grid(N), kRowBlock, 0, dx, dy, x, w, mean, rstd, N, C);
  if (dw || db) param_grads<T>(dw, db, dy, x, mean, rstd, N, C, "layer_norm_backward (dw, db)");
}

template <typename T>
void rms_norm_forward(T* y, T* rstd, const T* x, const T* w, int64_t N, int64_t C, T eps) {
  if (N <= 0 || C <= 0) return;
  launch("rms_norm_forward", rms_norm_forward_kernel<T>, row_grid(N), kRowBlock, 0, y, rstd, x, w, N, C, eps);
}

template <typename T>
void rms_norm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  if (dx)
    launch("rms_norm_backward", norm_dx_kernel<T>, row_grid(N), kRowBlock, 0, dx, dy, x, w,
           static_cast<const T*>(nullptr), rstd, N, C);
  if (dw) param_grads<T>(dw, nullptr, dy, x, nullptr, rstd, N, C, "rms_norm_backward (dw)");
}

#define INST(T)                                                                                               \
  template void layer_norm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, T);         \
  template void layer_norm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int64_t, \
                                       int64_t);                                                              \
  template void rms_norm_forward<T>(T*, T*, const T*, const T*, int64_t, int64_t, T);                         \
  template void rms_norm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t);
INST(float)
INST(double)
#undef INST

}  // namespace posgrad::kernels::cuda
