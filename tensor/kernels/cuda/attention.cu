// attention.cu — the fused multi-head attention kernels on the GPU (forward, backward, and the
// per-diagonal probability sums), with the score modifiers of kernels.h (a bias per head and
// diagonal given as data, or DeBERTa's content-position products); the CUDA twins of
// cpu/attention.cpp (same contract and formulas: kernels_decl.inc and spec §1-§4 in
// shared/SPEC-positions.md).
//
// Tiled kernels: the online softmax of FlashAttention (Dao et al., NeurIPS 2022, Alg. 1 and 2) with a
// block per (b, h, tile of queries) — forward and backward pass 1 — or per (b, h, tile of keys) —
// backward pass 2 —, the other side's tiles staged in shared memory (attention_forward_tiled_kernel,
// attention_backward_rows_tiled_kernel, attention_backward_cols_tiled_kernel below). A head too wide
// for one-row tiles falls back to the per-row form described next, with the same passes:
// one thread block per query
// row (b, h, i); the keys are swept in tiles of kTile, one key per thread: each thread computes its
// score as a serial dot product, the block finds the tile maximum and sum (fixed-tree reductions),
// rescales the running output, and the threads (now one per output channel e) add the tile's
// p_j v_j in key order. Only O and the row statistics (m, log l) are stored — the log-sum-exp as a
// pair, never m + log l, which would round log l to the ulp of m (see cpu/attention.cpp); the
// running maximum propagates NaN (d_nan_max, block_max).
// Backward (Alg. 2, recomputing P = exp((S - m) - log l) instead of storing it):
//   1. row kernel, one block per (b, h, i): delta_i = dO_i . O_i (saved in the scratch), then per key
//      tile dS_ij = P_ij (dO_i . v_j - delta_i) and dq_i += scale sum_j dS_ij (k_j [+ kr[c_ij]]).
//      DeBERTa c2p: also dc2p[b,h,i,u] = sum_{j: u(i,j) = u} dS_ij (thread u owns entry u).
//   2. column kernel, one block per (b, h, j): dv_j += sum_i P_ij dO_i, dk_j += scale sum_i dS_ij
//      (q_i [+ qr[c_ij]]); DeBERTa p2c: dp2c[b,h,j,u] likewise.
//   3. bias / table gradients: Distance — the tiled rows pass writes each block's sums of dS per
//      diagonal, and one thread per (h, diagonal d) adds them over b and the query tiles into
//      dbias[h, d] (the per-row fallback: one block per (h, d) recomputing dS); ContentPosition — one block per (u, h)
//      forms dkr[rows[u], h] += scale sum_{b,i} dc2p q_i and dqr += scale sum_{b,j} dp2c k_j.
//   4. sink logits (SPEC-positions-2 §5): the forward starts each row at m = sinks[h], l = 1, as the
//      CPU; one block per head forms dsinks[h] += -sum_{b,i} exp((sinks[h] - m_i) - log l_i) delta_i.
// Every output element is written by exactly one thread in a fixed order: no atomics, results are
// deterministic (but not in the CPU's summation order: CPU and CUDA agree to rounding).
// bf16 mixed precision (matmul_precision() == bf16, float only; Attn::bf16): every product's operands
// are rounded to bf16 where they are read (mp, dot below), the products and sums stay float, as the
// CPU's GEMM rounds the operands of the products inside its fused attention. The two agree to float
// rounding where their running row maxima agree; DeBERTa's c2p / p2c gradient is formed per pair here
// and per table row on the CPU (two roundings of the same sum).
//
// Scratch (attention_scratch_elems): pass 0 and 2 use none; pass 1 uses delta (B H Tq), then
// ContentPosition: dc2p (B H Tq U) and dp2c (B H Tk U). Each region is no larger
// than the CPU layout's region for the same pass, so a caller that sizes the scratch with either
// backend's function gives the CUDA kernels enough.
//
// The tiles in shared memory that dot() reads row by row (q, k, v, dO) have an odd row stride
// (smem_ld): a warp's threads read consecutive rows at one channel, which a stride of D = 64 would put
// in a single bank.
//
// What it is not: a FlashAttention-grade kernel (no tensor cores, tiles of at most 32 x 32 in float
// with 48 KiB of shared memory — 16 x 16 in the backward at D = 64 —, the score products serial per
// pair, the content-position table gradients one block per table row); it is memory-light
// (O(B H T) extra, plus B H (Tq / tile) (Tk + tile) partial diagonal sums for a Distance bias's
// gradient) and exact, and its cost is several recomputations of the score matrix: on an H200, 3.2 ms
// forward and 8.8 ms backward per layer at B 8, H 12, T 1024, D 64, causal (README "On a real GPU").
// Tiled up to a head dim of about 1,400 (float, backward columns), per-row beyond (a few hundred at
// most).
#include <cmath>
#include <type_traits>

#ifndef POSGRAD_CUDA_EMULATION
#include <cuda_bf16.h>
#endif

#include "tensor/kernels/cuda/common.cuh"

namespace posgrad::kernels::cuda {

using namespace posgrad::cuda;

namespace {

#ifndef POSGRAD_CUDA_ATTN_TILE
#define POSGRAD_CUDA_ATTN_TILE 128
#endif
#ifndef POSGRAD_CUDA_MAX_DIAG_PARTIAL_BYTES
#define POSGRAD_CUDA_MAX_DIAG_PARTIAL_BYTES (int64_t(1) << 30)
#endif
constexpr int kTile = POSGRAD_CUDA_ATTN_TILE;  // keys (or queries) per tile = threads per block; a multiple of 32
// Dynamic shared memory per block without the opt-in attribute is 48 KiB, including the static
// shared memory of the block reductions (< 1 KiB).
constexpr size_t kMaxSmem = 46 * 1024;

template <typename T>
struct Attn {
  const T *q, *k, *v, *bias, *kr, *qr;  // bias (H, Tq + Tk - 1): Distance only
  const T* sinks;                       // (H) sink logits, or null
  const int64_t *diag_u, *rows;
  int64_t B, H, Tq, Tk, D, U, q_offset;
  ScoreBias kind;
  bool causal;
  T scale;
  bool bf16;  // bf16 mixed precision: every product's operands rounded to bf16 (mp below)
};

// Keys j < key_end(i) are visible to query i (causal: j <= i + q_offset).
template <typename T>
__device__ __forceinline__ int64_t key_end(const Attn<T>& a, int64_t i) {
  if (!a.causal) return a.Tk;
  const int64_t e = i + a.q_offset + 1;
  return e < 0 ? 0 : (e > a.Tk ? a.Tk : e);
}

// Queries i >= query_begin(j) see key j.
template <typename T>
__device__ __forceinline__ int64_t query_begin(const Attn<T>& a, int64_t j) {
  if (!a.causal) return 0;
  const int64_t s = j - a.q_offset;
  return s < 0 ? 0 : (s > a.Tq ? a.Tq : s);
}

// Compact table index u of the pair (i, j) (ContentPosition).
template <typename T>
__device__ __forceinline__ int64_t pair_u(const Attn<T>& a, int64_t i, int64_t j) {
  return a.diag_u[j - i + a.Tq - 1];
}

// An operand of a product under bf16 mixed precision (matmul_precision() == bf16, float only): rounded
// to bf16 (nearest even) and back, as the CPU's GEMM packs the operands of the products inside its
// fused attention and as cuBLAS's bf16 GEMMs read theirs (gemm.cu); the products and sums stay float.
// Subnormals keep their bf16 value (the CPU flushes them). Identity otherwise.
template <typename T>
__device__ __forceinline__ T mp(bool bf16, T x) {
  if constexpr (std::is_same_v<T, float>) {
    if (bf16) return __bfloat162float(__float2bfloat16_rn(x));
  }
  return x;
}

template <typename T>
__device__ __forceinline__ T dot(bool bf16, const T* x, const T* y, int64_t n) {
  T s = T(0);
  for (int64_t e = 0; e < n; ++e) s += mp(bf16, x[e]) * mp(bf16, y[e]);
  return s;
}

// s(i, j) for head h; qi, kj point at the rows (global or shared memory).
template <typename T>
__device__ T score(const Attn<T>& a, const T* qi, const T* kj, int64_t h, int64_t i, int64_t j) {
  const T s = a.scale * dot(a.bf16, qi, kj, a.D);
  switch (a.kind) {
    case ScoreBias::None: return s;
    case ScoreBias::Distance: return s + a.bias[h * (a.Tq + a.Tk - 1) + (j - i + a.Tq - 1)];
    case ScoreBias::ContentPosition: {
      const int64_t c = a.rows[pair_u(a, i, j)];
      T r = s;
      if (a.kr) r += a.scale * dot(a.bf16, qi, a.kr + (c * a.H + h) * a.D, a.D);  // c2p
      if (a.qr) r += a.scale * dot(a.bf16, kj, a.qr + (c * a.H + h) * a.D, a.D);  // p2c
      return r;
    }
    case ScoreBias::Dense:
    case ScoreBias::Separable: return s;  // refused by make_attn before any launch
  }
  return s;
}

// The row stride of a (rows, D) tile in shared memory that dot() reads row by row: D rounded up to an
// odd number. A warp's threads read rows c, c + 1, ... at the same channel e; with an odd stride these
// fall in 32 different banks, where a stride of D = 64 puts them all in one bank (a 32-way conflict).
__host__ __device__ __forceinline__ int64_t smem_ld(int64_t D) { return D | 1; }

unsigned capped_grid(int64_t n) {
  return static_cast<unsigned>(n < (int64_t(1) << 20) ? (n < 1 ? 1 : n) : (int64_t(1) << 20));
}

// ---- forward: one block per query row --------------------------------------------------------------
template <typename T>
__global__ void attention_forward_kernel(T* o, T* stats, Attn<T> a) {
  POSGRAD_DYNAMIC_SMEM(smem_raw);
  T* q_s = reinterpret_cast<T*>(smem_raw);  // (D) this row's query
  T* acc = q_s + a.D;                       // (D) unnormalised output; channel e owned by thread e % kTile
  T* p_s = acc + a.D;                       // (kTile) the tile's probabilities
  const int tid = threadIdx.x;
  const int64_t nrows = a.B * a.H * a.Tq;
  for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
    const int64_t i = r % a.Tq, bh = r / a.Tq, h = bh % a.H;
    const T* kb = a.k + bh * a.Tk * a.D;
    const T* vb = a.v + bh * a.Tk * a.D;
    __syncthreads();  // the previous row is done with shared memory
    for (int64_t e = tid; e < a.D; e += blockDim.x) {
      q_s[e] = a.q[r * a.D + e];
      acc[e] = T(0);
    }
    __syncthreads();
    const int64_t jend = key_end(a, i);
    // With a sink the row starts at its logit: m = sinks[h], l = exp(sinks[h] - m) = 1 (as the CPU).
    T m = a.sinks ? a.sinks[h] : d_neg_inf<T>(), l = a.sinks ? T(1) : T(0);
    for (int64_t j0 = 0; j0 < jend; j0 += kTile) {
      const int64_t nt = jend - j0 < kTile ? jend - j0 : kTile;
      const int64_t j = j0 + tid;
      T s = d_neg_inf<T>();
      if (tid < nt) s = score(a, q_s, kb + j * a.D, h, i, j);
      const T tmax = block_max(s);
      const T m_new = d_nan_max(m, tmax);
      const T p = tid < nt ? d_exp(s - m_new) : T(0);
      p_s[tid] = p;
      const T alpha = d_exp(m - m_new);  // 0 on the first tile (m = -inf); m_new is finite unless the row is NaN
      l = l * alpha + block_sum(p);      // block_sum synchronises: p_s is visible below
      for (int64_t e = tid; e < a.D; e += blockDim.x) {
        T v = acc[e] * alpha;
        for (int64_t t = 0; t < nt; ++t) v += mp(a.bf16, p_s[t]) * mp(a.bf16, vb[(j0 + t) * a.D + e]);
        acc[e] = v;
      }
      m = m_new;
      __syncthreads();  // p_s is rewritten by the next tile
    }
    if (l == T(0)) {  // no key visible: output 0, stats (-inf, -inf) (as the CPU)
      for (int64_t e = tid; e < a.D; e += blockDim.x) o[r * a.D + e] = T(0);
      if (tid == 0) stats[2 * r] = stats[2 * r + 1] = d_neg_inf<T>();
    } else {
      const T inv = T(1) / l;
      for (int64_t e = tid; e < a.D; e += blockDim.x) o[r * a.D + e] = acc[e] * inv;
      if (tid == 0) {
        stats[2 * r] = m;
        stats[2 * r + 1] = d_log(l);
      }
    }
  }
}

// ---- forward, tiled: one block per (b, h, query tile) ------------------------------------------------
// FlashAttention's forward (Dao et al. 2022, Alg. 1) with the tiles in shared memory: a block takes
// qt query rows of one (b, h) and sweeps the keys in tiles of kt rows of K and V, each staged once in
// shared memory with coalesced loads (consecutive threads read consecutive elements of the contiguous
// kt x D block) and read by all qt queries, where the per-row kernel above reloads every key row for
// every query. Per key tile: the qt x kt scores (modifiers applied in the tile, pair by pair, as
// score()), then each row's running maximum, rescale and sum (thread r owns row r, keys in order),
// then the output accumulators (qt x D in shared memory, element (r, e) owned by one thread) add
// sum_c p_rc v_c in key order. Every output element is written by one thread in a fixed order:
// deterministic, no atomics. qt = kt = tiled_attention_tile(D, sizeof(T)), the largest power of two
// <= 32 whose tiles fit the shared memory.
template <typename T>
__global__ void attention_forward_tiled_kernel(T* o, T* stats, Attn<T> a, int64_t tile) {
  POSGRAD_DYNAMIC_SMEM(smem_raw);
  const int64_t D = a.D, qt = tile, kt = tile, ld = smem_ld(D);
  T* q_s = reinterpret_cast<T*>(smem_raw);  // (qt, ld) the query tile
  T* acc = q_s + qt * ld;                   // (qt, D) unnormalised outputs
  T* k_s = acc + qt * D;                    // (kt, ld) key tile
  T* v_s = k_s + kt * ld;                   // (kt, ld) value tile
  T* p_s = v_s + kt * ld;                   // (qt, kt) scores, then probabilities
  T* m_s = p_s + qt * kt;                   // (qt) running maximum
  T* l_s = m_s + qt;                        // (qt) running sum
  T* alpha_s = l_s + qt;                    // (qt) this tile's rescale factor
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int64_t qtiles = (a.Tq + qt - 1) / qt, nblocks = a.B * a.H * qtiles;
  for (int64_t blk = blockIdx.x; blk < nblocks; blk += gridDim.x) {
    const int64_t bh = blk / qtiles, h = bh % a.H, i0 = (blk % qtiles) * qt;
    const int64_t rows = a.Tq - i0 < qt ? a.Tq - i0 : qt;
    const T* kb = a.k + bh * a.Tk * D;
    const T* vb = a.v + bh * a.Tk * D;
    __syncthreads();  // the previous tile's rows are done with shared memory
    for (int64_t x = tid; x < qt * D; x += nthreads) {
      q_s[x / D * ld + x % D] = x < rows * D ? a.q[(bh * a.Tq + i0) * D + x] : T(0);
      acc[x] = T(0);
    }
    for (int64_t r = tid; r < qt; r += nthreads) {
      m_s[r] = a.sinks ? a.sinks[h] : d_neg_inf<T>();  // a sink starts each row at its logit, l = 1
      l_s[r] = a.sinks ? T(1) : T(0);
    }
    const int64_t jend = key_end(a, i0 + rows - 1);  // the last row sees the most keys
    for (int64_t j0 = 0; j0 < jend; j0 += kt) {
      const int64_t nk = jend - j0 < kt ? jend - j0 : kt;
      __syncthreads();  // k_s, v_s, p_s of the previous tile are consumed
      for (int64_t x = tid; x < kt * D; x += nthreads) {
        k_s[x / D * ld + x % D] = x < nk * D ? kb[j0 * D + x] : T(0);
        v_s[x / D * ld + x % D] = x < nk * D ? vb[j0 * D + x] : T(0);
      }
      __syncthreads();
      for (int64_t x = tid; x < qt * kt; x += nthreads) {
        const int64_t r = x / kt, c = x % kt, i = i0 + r, j = j0 + c;
        p_s[x] =
            r < rows && c < nk && j < key_end(a, i) ? score(a, q_s + r * ld, k_s + c * ld, h, i, j) : d_neg_inf<T>();
      }
      __syncthreads();
      for (int64_t r = tid; r < qt; r += nthreads) {
        T* pr = p_s + r * kt;
        T tmax = d_neg_inf<T>();
        for (int64_t c = 0; c < kt; ++c) tmax = d_nan_max(tmax, pr[c]);
        const T m_old = m_s[r], m_new = d_nan_max(m_old, tmax);
        // A row with no visible key yet (m_new = -inf) keeps acc = 0 and l = 0: no rescale, p = 0.
        const bool none = m_new == d_neg_inf<T>();
        const T alpha = none ? T(1) : d_exp(m_old - m_new);
        T sum = T(0);
        for (int64_t c = 0; c < kt; ++c) {
          const T p = none || pr[c] == d_neg_inf<T>() ? T(0) : d_exp(pr[c] - m_new);
          pr[c] = p;
          sum += p;
        }
        l_s[r] = l_s[r] * alpha + sum;
        m_s[r] = m_new;
        alpha_s[r] = alpha;
      }
      __syncthreads();
      for (int64_t x = tid; x < qt * D; x += nthreads) {
        const int64_t r = x / D, e = x % D;
        const T* pr = p_s + r * kt;
        T v = acc[x] * alpha_s[r];
        for (int64_t c = 0; c < nk; ++c) v += mp(a.bf16, pr[c]) * mp(a.bf16, v_s[c * ld + e]);
        acc[x] = v;
      }
    }
    __syncthreads();
    for (int64_t x = tid; x < rows * D; x += nthreads) {
      const int64_t r = x / D;
      const T l = l_s[r];
      o[(bh * a.Tq + i0) * D + x] = l == T(0) ? T(0) : acc[x] / l;
    }
    for (int64_t r = tid; r < rows; r += nthreads) {
      const int64_t row = bh * a.Tq + i0 + r;
      const bool empty = l_s[r] == T(0);  // no key visible: output 0, stats (-inf, -inf) (as the CPU)
      stats[2 * row] = empty ? d_neg_inf<T>() : m_s[r];
      stats[2 * row + 1] = empty ? d_neg_inf<T>() : d_log(l_s[r]);
    }
  }
}

// ---- backward 1: one block per query row: delta, dq, dc2p -------------------------------------------
template <typename T>
__global__ void attention_backward_rows_kernel(T* dq, T* delta, T* dc2p, const T* dout, const T* o, const T* stats,
                                               Attn<T> a) {
  POSGRAD_DYNAMIC_SMEM(smem_raw);
  T* q_s = reinterpret_cast<T*>(smem_raw);          // (D)
  T* do_s = q_s + a.D;                              // (D)
  T* acc = do_s + a.D;                              // (D) sum_j dS_ij (k_j + kr)
  T* ds_s = acc + a.D;                              // (kTile)
  int* u_s = reinterpret_cast<int*>(ds_s + kTile);  // (kTile) compact table index of each key
  const int tid = threadIdx.x;
  const bool with_kr = a.kind == ScoreBias::ContentPosition && a.kr;
  const int64_t nrows = a.B * a.H * a.Tq;
  for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
    const int64_t i = r % a.Tq, bh = r / a.Tq, h = bh % a.H;
    const T* kb = a.k + bh * a.Tk * a.D;
    const T* vb = a.v + bh * a.Tk * a.D;
    T* dcrow = dc2p ? dc2p + r * a.U : nullptr;
    __syncthreads();
    T part = T(0);
    for (int64_t e = tid; e < a.D; e += blockDim.x) {
      q_s[e] = a.q[r * a.D + e];
      do_s[e] = dout[r * a.D + e];
      acc[e] = T(0);
      part += dout[r * a.D + e] * o[r * a.D + e];
    }
    const T di = block_sum(part);  // delta_i = dO_i . O_i; also publishes q_s, do_s
    if (tid == 0) delta[r] = di;
    if (dcrow)
      for (int64_t u = tid; u < a.U; u += blockDim.x) dcrow[u] = T(0);
    const T M = stats[2 * r], LS = stats[2 * r + 1];
    const int64_t jend = M == d_neg_inf<T>() ? 0 : key_end(a, i);
    for (int64_t j0 = 0; j0 < jend; j0 += kTile) {
      const int64_t nt = jend - j0 < kTile ? jend - j0 : kTile;
      const int64_t j = j0 + tid;
      T ds = T(0);
      if (tid < nt) {
        const T p = d_exp((score(a, q_s, kb + j * a.D, h, i, j) - M) - LS);
        ds = p * (dot(a.bf16, do_s, vb + j * a.D, a.D) - di);
        if (a.kind == ScoreBias::ContentPosition) u_s[tid] = static_cast<int>(pair_u(a, i, j));
      }
      ds_s[tid] = ds;
      __syncthreads();
      for (int64_t e = tid; e < a.D; e += blockDim.x) {
        T v = acc[e];
        for (int64_t t = 0; t < nt; ++t) {
          const T d = mp(a.bf16, ds_s[t]);
          v += d * mp(a.bf16, kb[(j0 + t) * a.D + e]);
          if (with_kr) v += d * mp(a.bf16, a.kr[(a.rows[u_s[t]] * a.H + h) * a.D + e]);
        }
        acc[e] = v;
      }
      if (dcrow)  // entry u owned by one thread, keys added in order
        for (int64_t u = tid; u < a.U; u += blockDim.x) {
          T v = dcrow[u];
          for (int64_t t = 0; t < nt; ++t)
            if (u_s[t] == u) v += ds_s[t];
          dcrow[u] = v;
        }
      __syncthreads();  // ds_s, u_s are rewritten by the next tile
    }
    if (dq)
      for (int64_t e = tid; e < a.D; e += blockDim.x) dq[r * a.D + e] += a.scale * acc[e];
  }
}

// ---- backward 2: one block per key column: dk, dv, dp2c ---------------------------------------------
template <typename T>
__global__ void attention_backward_cols_kernel(T* dk, T* dv, T* dp2c, const T* dout, const T* stats, const T* delta,
                                               Attn<T> a) {
  POSGRAD_DYNAMIC_SMEM(smem_raw);
  T* k_s = reinterpret_cast<T*>(smem_raw);          // (D)
  T* v_s = k_s + a.D;                               // (D)
  T* acck = v_s + a.D;                              // (D) sum_i dS_ij (q_i + qr)
  T* accv = acck + a.D;                             // (D) sum_i P_ij dO_i
  T* p_s = accv + a.D;                              // (kTile)
  T* ds_s = p_s + kTile;                            // (kTile)
  int* u_s = reinterpret_cast<int*>(ds_s + kTile);  // (kTile)
  const int tid = threadIdx.x;
  const bool with_qr = a.kind == ScoreBias::ContentPosition && a.qr;
  const int64_t ncols = a.B * a.H * a.Tk;
  for (int64_t c = blockIdx.x; c < ncols; c += gridDim.x) {
    const int64_t j = c % a.Tk, bh = c / a.Tk, h = bh % a.H;
    const T* qb = a.q + bh * a.Tq * a.D;
    const T* dob = dout + bh * a.Tq * a.D;
    T* dprow = dp2c ? dp2c + c * a.U : nullptr;
    __syncthreads();
    for (int64_t e = tid; e < a.D; e += blockDim.x) {
      k_s[e] = a.k[c * a.D + e];
      v_s[e] = a.v[c * a.D + e];
      acck[e] = T(0);
      accv[e] = T(0);
    }
    if (dprow)
      for (int64_t u = tid; u < a.U; u += blockDim.x) dprow[u] = T(0);
    __syncthreads();
    for (int64_t i0 = query_begin(a, j); i0 < a.Tq; i0 += kTile) {
      const int64_t nt = a.Tq - i0 < kTile ? a.Tq - i0 : kTile;
      const int64_t i = i0 + tid;
      T p = T(0), ds = T(0);
      if (tid < nt) {
        const T M = stats[2 * (bh * a.Tq + i)], LS = stats[2 * (bh * a.Tq + i) + 1];
        if (M != d_neg_inf<T>()) {
          p = d_exp((score(a, qb + i * a.D, k_s, h, i, j) - M) - LS);
          ds = p * (dot(a.bf16, dob + i * a.D, v_s, a.D) - delta[bh * a.Tq + i]);
        }
        if (a.kind == ScoreBias::ContentPosition) u_s[tid] = static_cast<int>(pair_u(a, i, j));
      }
      p_s[tid] = p;
      ds_s[tid] = ds;
      __syncthreads();
      for (int64_t e = tid; e < a.D; e += blockDim.x) {
        T vk = acck[e], vv = accv[e];
        for (int64_t t = 0; t < nt; ++t) {
          const T d = mp(a.bf16, ds_s[t]);
          vk += d * mp(a.bf16, qb[(i0 + t) * a.D + e]);
          if (with_qr) vk += d * mp(a.bf16, a.qr[(a.rows[u_s[t]] * a.H + h) * a.D + e]);
          vv += mp(a.bf16, p_s[t]) * mp(a.bf16, dob[(i0 + t) * a.D + e]);
        }
        acck[e] = vk;
        accv[e] = vv;
      }
      if (dprow)
        for (int64_t u = tid; u < a.U; u += blockDim.x) {
          T v = dprow[u];
          for (int64_t t = 0; t < nt; ++t)
            if (u_s[t] == u) v += ds_s[t];
          dprow[u] = v;
        }
      __syncthreads();
    }
    for (int64_t e = tid; e < a.D; e += blockDim.x) {
      if (dk) dk[c * a.D + e] += a.scale * acck[e];
      if (dv) dv[c * a.D + e] += accv[e];
    }
  }
}

// ---- backward, tiled: the two passes above for tiles of qt queries x kt keys ------------------------
// As the per-row and per-column kernels, with the tiles of the other side staged in shared memory
// (coalesced loads) and shared by the block's rows (or columns). Each accumulator element is owned by
// one thread and adds its terms in key (or query) order: deterministic, no atomics. Shared memory in
// elements of T: tiled_backward_smem below. The pair's compact table index u (ContentPosition) is kept
// per pair as an int after the T region.
//
// The pairs of a query tile (rows i0.., nq valid; q_s, do_s and st_s = (delta, M, LS) per row) and a key
// tile (j0.., nk valid; k_s, v_s), for both passes: entry r * kt + c gets P (when p_s is given), dS and the
// pair's table index u (0 where unused); pairs that are not visible get 0. One pair per thread, strided.
template <typename T>
__device__ void backward_tile_pairs(const Attn<T>& a, const T* q_s, const T* do_s, const T* st_s, const T* k_s,
                                    const T* v_s, int64_t h, int64_t i0, int64_t nq, int64_t j0, int64_t nk, int64_t qt,
                                    int64_t kt, T* p_s, T* ds_s, int* u_s) {
  for (int64_t x = threadIdx.x; x < qt * kt; x += blockDim.x) {
    const int64_t r = x / kt, c = x % kt, i = i0 + r, j = j0 + c;
    const bool valid = r < nq && c < nk;
    const T M = st_s[3 * r + 1];
    T p = T(0), ds = T(0);
    if (valid && j < key_end(a, i) && M != d_neg_inf<T>()) {
      const int64_t ld = smem_ld(a.D);
      p = d_exp((score(a, q_s + r * ld, k_s + c * ld, h, i, j) - M) - st_s[3 * r + 2]);
      ds = p * (dot(a.bf16, do_s + r * ld, v_s + c * ld, a.D) - st_s[3 * r]);
    }
    if (p_s) p_s[x] = p;
    ds_s[x] = ds;
    u_s[x] = a.kind == ScoreBias::ContentPosition && valid ? static_cast<int>(pair_u(a, i, j)) : 0;
  }
}

// 1. rows: a block per (b, h, query tile): delta, dq, dc2p, and with a Distance bias whose gradient is
// wanted (ddiag non-null) the block's partial sums of dS per diagonal: ddiag[blk * ldiag + L] holds
// sum over the block's pairs with L = j - i + i0 + qt - 1 (so 0 <= L < ldiag), in query order per key
// tile and key tiles in order; diagonal_partials_reduce_kernel adds them up over b and the query tiles.
template <typename T>
__global__ void attention_backward_rows_tiled_kernel(T* dq, T* delta, T* dc2p, T* ddiag, int64_t ldiag, const T* dout,
                                                     const T* o, const T* stats, Attn<T> a, int64_t tile) {
  POSGRAD_DYNAMIC_SMEM(smem_raw);
  const int64_t D = a.D, qt = tile, kt = tile, ld = smem_ld(D);
  T* q_s = reinterpret_cast<T*>(smem_raw);           // (qt, ld)
  T* do_s = q_s + qt * ld;                           // (qt, ld)
  T* acc = do_s + qt * ld;                           // (qt, D) sum_j dS_ij (k_j + kr)
  T* k_s = acc + qt * D;                             // (kt, ld)
  T* v_s = k_s + kt * ld;                            // (kt, ld)
  T* ds_s = v_s + kt * ld;                           // (qt, kt)
  T* st_s = ds_s + qt * kt;                          // (qt, 3) delta, M, LS
  int* u_s = reinterpret_cast<int*>(st_s + 3 * qt);  // (qt, kt)
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const bool with_kr = a.kind == ScoreBias::ContentPosition && a.kr;
  const int64_t qtiles = (a.Tq + qt - 1) / qt, nblocks = a.B * a.H * qtiles;
  for (int64_t blk = blockIdx.x; blk < nblocks; blk += gridDim.x) {
    const int64_t bh = blk / qtiles, h = bh % a.H, i0 = (blk % qtiles) * qt;
    const int64_t rows = a.Tq - i0 < qt ? a.Tq - i0 : qt, r0 = bh * a.Tq + i0;
    const T* kb = a.k + bh * a.Tk * D;
    const T* vb = a.v + bh * a.Tk * D;
    __syncthreads();
    for (int64_t x = tid; x < qt * D; x += nthreads) {
      q_s[x / D * ld + x % D] = x < rows * D ? a.q[r0 * D + x] : T(0);
      do_s[x / D * ld + x % D] = x < rows * D ? dout[r0 * D + x] : T(0);
      acc[x] = T(0);
    }
    __syncthreads();
    for (int64_t r = tid; r < qt; r += nthreads) {  // delta_r = dO_r . O_r, in channel order
      T d = T(0);
      if (r < rows)
        for (int64_t e = 0; e < D; ++e) d += do_s[r * ld + e] * o[(r0 + r) * D + e];
      st_s[3 * r] = d;
      st_s[3 * r + 1] = r < rows ? stats[2 * (r0 + r)] : d_neg_inf<T>();
      st_s[3 * r + 2] = r < rows ? stats[2 * (r0 + r) + 1] : T(0);
      if (r < rows) delta[r0 + r] = d;
      if (dc2p && r < rows)
        for (int64_t u = 0; u < a.U; ++u) dc2p[(r0 + r) * a.U + u] = T(0);
    }
    T* dd = ddiag ? ddiag + blk * ldiag : nullptr;
    if (dd)
      for (int64_t x = tid; x < ldiag; x += nthreads) dd[x] = T(0);
    const int64_t jend = key_end(a, i0 + rows - 1);
    for (int64_t j0 = 0; j0 < jend; j0 += kt) {
      const int64_t nk = jend - j0 < kt ? jend - j0 : kt;
      __syncthreads();
      for (int64_t x = tid; x < kt * D; x += nthreads) {
        k_s[x / D * ld + x % D] = x < nk * D ? kb[j0 * D + x] : T(0);
        v_s[x / D * ld + x % D] = x < nk * D ? vb[j0 * D + x] : T(0);
      }
      __syncthreads();
      backward_tile_pairs(a, q_s, do_s, st_s, k_s, v_s, h, i0, rows, j0, nk, qt, kt, static_cast<T*>(nullptr), ds_s,
                          u_s);
      __syncthreads();
      for (int64_t x = tid; x < qt * D; x += nthreads) {
        const int64_t r = x / D, e = x % D;
        T v = acc[x];
        for (int64_t c = 0; c < nk; ++c) {
          const T d = mp(a.bf16, ds_s[r * kt + c]);
          v += d * mp(a.bf16, k_s[c * ld + e]);
          if (with_kr) v += d * mp(a.bf16, a.kr[(a.rows[u_s[r * kt + c]] * a.H + h) * D + e]);
        }
        acc[x] = v;
      }
      if (dc2p)  // entry (r, u) owned by one thread, keys added in order
        for (int64_t x = tid; x < rows * a.U; x += nthreads) {
          const int64_t r = x / a.U, u = x % a.U;
          T v = dc2p[(r0 + r) * a.U + u];
          for (int64_t c = 0; c < nk; ++c)
            if (u_s[r * kt + c] == u) v += ds_s[r * kt + c];
          dc2p[(r0 + r) * a.U + u] = v;
        }
      if (dd)  // the tile's qt + kt - 1 diagonals, one thread each, queries in order (dS = 0 off the visible pairs)
        for (int64_t t = tid; t < qt + kt - 1; t += nthreads) {
          T v = T(0);
          for (int64_t r = 0; r < qt; ++r) {
            const int64_t c = t - (qt - 1) + r;
            if (c >= 0 && c < kt) v += ds_s[r * kt + c];
          }
          dd[j0 + t] += v;
        }
    }
    __syncthreads();
    if (dq)
      for (int64_t x = tid; x < rows * D; x += nthreads) dq[r0 * D + x] += a.scale * acc[x];
  }
}

// 2. columns: a block per (b, h, key tile): dk, dv, dp2c (reads delta from pass 1).
template <typename T>
__global__ void attention_backward_cols_tiled_kernel(T* dk, T* dv, T* dp2c, const T* dout, const T* stats,
                                                     const T* delta, Attn<T> a, int64_t tile) {
  POSGRAD_DYNAMIC_SMEM(smem_raw);
  const int64_t D = a.D, qt = tile, kt = tile, ld = smem_ld(D);
  T* k_s = reinterpret_cast<T*>(smem_raw);           // (kt, ld)
  T* v_s = k_s + kt * ld;                            // (kt, ld)
  T* acck = v_s + kt * ld;                           // (kt, D) sum_i dS_ij (q_i + qr)
  T* accv = acck + kt * D;                           // (kt, D) sum_i P_ij dO_i
  T* q_s = accv + kt * D;                            // (qt, ld)
  T* do_s = q_s + qt * ld;                           // (qt, ld)
  T* p_s = do_s + qt * ld;                           // (qt, kt)
  T* ds_s = p_s + qt * kt;                           // (qt, kt)
  T* st_s = ds_s + qt * kt;                          // (qt, 3) delta, M, LS
  int* u_s = reinterpret_cast<int*>(st_s + 3 * qt);  // (qt, kt)
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const bool with_qr = a.kind == ScoreBias::ContentPosition && a.qr;
  const int64_t ktiles = (a.Tk + kt - 1) / kt, nblocks = a.B * a.H * ktiles;
  for (int64_t blk = blockIdx.x; blk < nblocks; blk += gridDim.x) {
    const int64_t bh = blk / ktiles, h = bh % a.H, j0 = (blk % ktiles) * kt;
    const int64_t nk = a.Tk - j0 < kt ? a.Tk - j0 : kt, c0 = bh * a.Tk + j0;
    const T* qb = a.q + bh * a.Tq * D;
    const T* dob = dout + bh * a.Tq * D;
    __syncthreads();
    for (int64_t x = tid; x < kt * D; x += nthreads) {
      k_s[x / D * ld + x % D] = x < nk * D ? a.k[c0 * D + x] : T(0);
      v_s[x / D * ld + x % D] = x < nk * D ? a.v[c0 * D + x] : T(0);
      acck[x] = T(0);
      accv[x] = T(0);
    }
    if (dp2c)
      for (int64_t x = tid; x < nk * a.U; x += nthreads) dp2c[c0 * a.U + x] = T(0);
    for (int64_t i0 = query_begin(a, j0); i0 < a.Tq; i0 += qt) {
      const int64_t nq = a.Tq - i0 < qt ? a.Tq - i0 : qt;
      __syncthreads();
      for (int64_t x = tid; x < qt * D; x += nthreads) {
        q_s[x / D * ld + x % D] = x < nq * D ? qb[i0 * D + x] : T(0);
        do_s[x / D * ld + x % D] = x < nq * D ? dob[i0 * D + x] : T(0);
      }
      for (int64_t r = tid; r < qt; r += nthreads) {
        const int64_t row = bh * a.Tq + i0 + r;
        st_s[3 * r] = r < nq ? delta[row] : T(0);
        st_s[3 * r + 1] = r < nq ? stats[2 * row] : d_neg_inf<T>();
        st_s[3 * r + 2] = r < nq ? stats[2 * row + 1] : T(0);
      }
      __syncthreads();
      backward_tile_pairs(a, q_s, do_s, st_s, k_s, v_s, h, i0, nq, j0, nk, qt, kt, p_s, ds_s, u_s);
      __syncthreads();
      for (int64_t x = tid; x < kt * D; x += nthreads) {
        const int64_t c = x / D, e = x % D;
        T vk = acck[x], vv = accv[x];
        for (int64_t r = 0; r < nq; ++r) {
          const T d = mp(a.bf16, ds_s[r * kt + c]);
          vk += d * mp(a.bf16, q_s[r * ld + e]);
          if (with_qr) vk += d * mp(a.bf16, a.qr[(a.rows[u_s[r * kt + c]] * a.H + h) * D + e]);
          vv += mp(a.bf16, p_s[r * kt + c]) * mp(a.bf16, do_s[r * ld + e]);
        }
        acck[x] = vk;
        accv[x] = vv;
      }
      if (dp2c)  // entry (c, u) owned by one thread, queries added in order
        for (int64_t x = tid; x < nk * a.U; x += nthreads) {
          const int64_t c = x / a.U, u = x % a.U;
          T v = dp2c[(c0 + c) * a.U + u];
          for (int64_t r = 0; r < nq; ++r)
            if (u_s[r * kt + c] == u) v += ds_s[r * kt + c];
          dp2c[(c0 + c) * a.U + u] = v;
        }
    }
    __syncthreads();
    for (int64_t x = tid; x < nk * D; x += nthreads) {
      if (dk) dk[c0 * D + x] += a.scale * acck[x];
      if (dv) dv[c0 * D + x] += accv[x];
    }
  }
}

// dbias[h, d] += sum over b and query tiles of the rows pass's partials (one thread per (h, d); b and
// the tiles in order; adjacent threads read adjacent partials).
template <typename T>
__global__ void diagonal_partials_reduce_kernel(T* dbias, const T* ddiag, int64_t ldiag, int64_t B, int64_t H,
                                                int64_t Tq, int64_t Tk, int64_t qtile) {
  const int64_t nd = Tq + Tk - 1, qtiles = (Tq + qtile - 1) / qtile;
  for (int64_t hd = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; hd < H * nd;
       hd += int64_t(gridDim.x) * blockDim.x) {
    const int64_t h = hd / nd, rel = hd % nd - (Tq - 1);  // j - i
    T total = T(0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < qtiles; ++t) {
        const int64_t L = rel + t * qtile + qtile - 1;
        if (L >= 0 && L < ldiag) total += ddiag[((b * H + h) * qtiles + t) * ldiag + L];
      }
    dbias[hd] += total;
  }
}

// ---- per-diagonal sums: one block per (h, d), d = j - i + Tq - 1 -------------------------------------
// grad == false: out[h, d] += sum_{b, i} P_ij (attention_diagonal_sums).
// grad == true:  out[h, d] += sum_{b, i} dS_ij (the gradient of a Distance bias).
template <typename T>
__global__ void attention_diagonal_kernel(T* out, const T* stats, const T* dout, const T* delta, Attn<T> a, bool grad) {
  const int64_t nd = a.Tq + a.Tk - 1;
  for (int64_t hd = blockIdx.x; hd < a.H * nd; hd += gridDim.x) {
    const int64_t h = hd / nd, d = hd % nd;
    const int64_t rel = d - (a.Tq - 1);  // j - i on this diagonal
    int64_t i_lo = -rel > 0 ? -rel : 0;
    int64_t i_hi = a.Tk - rel < a.Tq ? a.Tk - rel : a.Tq;
    if (a.causal && rel > a.q_offset) i_hi = i_lo;  // the whole diagonal is masked
    const int64_t len = i_hi > i_lo ? i_hi - i_lo : 0;
    T total = T(0);
    for (int64_t p0 = 0; p0 < a.B * len; p0 += kTile) {
      const int64_t p = p0 + threadIdx.x;
      T val = T(0);
      if (p < a.B * len) {
        const int64_t b = p / len, i = i_lo + p % len, j = i + rel;
        const int64_t bh = b * a.H + h;
        const T M = stats[2 * (bh * a.Tq + i)], LS = stats[2 * (bh * a.Tq + i) + 1];
        if (M != d_neg_inf<T>()) {
          const T* qi = a.q + (bh * a.Tq + i) * a.D;
          const T pr = d_exp((score(a, qi, a.k + (bh * a.Tk + j) * a.D, h, i, j) - M) - LS);
          if (grad) {
            const T dp = dot(a.bf16, dout + (bh * a.Tq + i) * a.D, a.v + (bh * a.Tk + j) * a.D, a.D);
            val = pr * (dp - delta[bh * a.Tq + i]);
          } else {
            val = pr;
          }
        }
      }
      total += block_sum(val);
    }
    if (threadIdx.x == 0) out[hd] += total;
  }
}

// Content-position terms: dtab[rows[u], h, :] += scale * sum_{b, n} g[b, h, n, u] x[b, h, n, :], n over Tn rows
// (c2p: g = dc2p, x = q, dtab = dkr; p2c: g = dp2c, x = k, dtab = dqr). One block per (u, h).
template <typename T>
__global__ void content_position_table_grad_kernel(T* dtab, const T* g, const T* x, const int64_t* rows, int64_t B,
                                                   int64_t H, int64_t Tn, int64_t D, int64_t U, T scale, bool bf16) {
  for (int64_t uh = blockIdx.x; uh < U * H; uh += gridDim.x) {
    const int64_t u = uh / H, h = uh % H;
    for (int64_t e = threadIdx.x; e < D; e += blockDim.x) {
      T s = T(0);
      for (int64_t b = 0; b < B; ++b) {
        const int64_t bh = b * H + h;
        for (int64_t n = 0; n < Tn; ++n) s += mp(bf16, g[(bh * Tn + n) * U + u]) * mp(bf16, x[(bh * Tn + n) * D + e]);
      }
      dtab[(rows[u] * H + h) * D + e] += scale * s;
    }
  }
}

// Sink logits: dsinks[h] += -sum_{b, i} exp((sinks[h] - m_i) - log l_i) delta_i. One block per head,
// a fixed-tree sum over the (b, i) rows in tiles.
template <typename T>
__global__ void attention_sink_grad_kernel(T* dsinks, const T* sinks, const T* stats, const T* delta, int64_t B,
                                           int64_t H, int64_t Tq) {
  for (int64_t h = blockIdx.x; h < H; h += gridDim.x) {
    T total = T(0);
    for (int64_t p0 = 0; p0 < B * Tq; p0 += kTile) {
      const int64_t p = p0 + threadIdx.x;
      T val = T(0);
      if (p < B * Tq) {
        const int64_t r = (p / Tq * H + h) * Tq + p % Tq;  // row (b, h, i)
        val = d_exp((sinks[h] - stats[2 * r]) - stats[2 * r + 1]) * delta[r];
      }
      total += block_sum(val);
    }
    if (threadIdx.x == 0) dsinks[h] += -total;
  }
}

// Whether this call's products take bf16 operands (float under --precision bf16; double never).
template <typename T>
bool bf16_operands() {
  return std::is_same_v<T, float> && matmul_precision() == MatmulPrecision::bf16;
}

template <typename T>
Attn<T> make_attn(const T* q, const T* k, const T* v, const T* bias, const T* kr, const T* qr, const T* sinks,
                  const int64_t* diag_u, const int64_t* rows, int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D,
                  int64_t U, int64_t q_offset, ScoreBias kind, bool causal, T scale, const char* what) {
  POSGRAD_CHECK(B >= 0 && H >= 0 && Tq >= 0 && Tk >= 0 && D >= 0, ShapeError, what, ": negative size");
  POSGRAD_CHECK(kind != ScoreBias::ContentPosition || (diag_u && rows && U > 0), ValueError, what,
                ": content-position terms need diag_u and rows (U = ", U, ")");
  POSGRAD_CHECK(kind != ScoreBias::Distance || bias, ValueError, what,
                ": a distance bias needs its (H, Tq + Tk - 1) data");
  POSGRAD_CHECK(kind != ScoreBias::Dense, DeviceError, what,
                ": the dense (H, Tq, Tk) bias (FIRE) has no CUDA kernel; run it on the CPU (--device cpu)");
  POSGRAD_CHECK(kind != ScoreBias::Separable, DeviceError, what,
                ": the separable (B, H, Tq + Tk) bias (FoX) has no CUDA kernel; run it on the CPU (--device cpu)");
  POSGRAD_CHECK(U < (int64_t(1) << 30), ValueError, what, ": U = ", U, " too large");
  const bool cp = kind == ScoreBias::ContentPosition;
  // clang-format off
  return Attn<T>{q,      k,    v,  kind == ScoreBias::Distance ? bias : nullptr, cp ? kr : nullptr, cp ? qr : nullptr,
                 sinks,  diag_u, rows, B, H, Tq, Tk, D, U, q_offset, kind, causal, scale, bf16_operands<T>()};
  // clang-format on
}

// diag_u (Tq + Tk - 1) and rows (U) as the kernels need them: in device memory (the attention op
// passes host vectors; see DeviceArray in common.cuh).
class IndexArrays {
 public:
  IndexArrays(const int64_t* diag_u, const int64_t* rows, int64_t Tq, int64_t Tk, int64_t U)
      : diag_u_(diag_u, diag_u && Tq + Tk > 1 ? sizeof(int64_t) * static_cast<size_t>(Tq + Tk - 1) : 0),
        rows_(rows, rows && U > 0 ? sizeof(int64_t) * static_cast<size_t>(U) : 0) {}
  const int64_t* diag_u() const { return diag_u_.get<int64_t>(); }
  const int64_t* rows() const { return rows_.get<int64_t>(); }

 private:
  DeviceArray diag_u_, rows_;
};

// Shared memory of the tiled forward for tiles of `tile` queries and keys: the query, key and value
// tiles (row stride smem_ld(D)), the output tile, the tile's scores and three per-row values.
size_t tiled_attention_smem(int64_t tile, int64_t D, size_t elem) {
  return static_cast<size_t>(3 * tile * smem_ld(D) + tile * D + tile * tile + 3 * tile) * elem;
}

// Shared memory of the tiled backward kernels: four tiles read by dot() (q, dO, k, v; row stride
// smem_ld(D)) and the accumulators (rows: dq; columns: dk and dv), the pair tiles (rows: dS; columns:
// P and dS), per-row values and the pairs' int table indices.
size_t tiled_backward_smem(int64_t tile, int64_t D, size_t elem, bool cols) {
  const int64_t accs = cols ? 2 : 1, pairs = cols ? 2 : 1;
  return static_cast<size_t>(4 * tile * smem_ld(D) + accs * tile * D + pairs * tile * tile + 3 * tile) * elem +
         static_cast<size_t>(tile * tile) * sizeof(int);
}

int64_t tiled_backward_tile(int64_t D, size_t elem, bool cols) {
  for (int64_t t = 32; t >= 1; t /= 2)
    if (tiled_backward_smem(t, D, elem, cols) <= kMaxSmem) return t;
  return 0;
}

// The tile of the tiled forward: the largest power of two <= 32 that fits the shared memory (0: none).
int64_t tiled_attention_tile(int64_t D, size_t elem) {
  for (int64_t t = 32; t >= 1; t /= 2)
    if (tiled_attention_smem(t, D, elem) <= kMaxSmem) return t;
  return 0;
}

size_t checked_smem(size_t bytes, int64_t D, const char* what) {
  POSGRAD_CHECK(bytes <= kMaxSmem, ValueError, what, ": head dim D = ", D, " too large for the CUDA attention kernel");
  return bytes;
}

// Scratch regions of attention_backward (see the file comment).
struct Scratch {
  int64_t delta = 0, dc2p = -1, dp2c = -1, total = 0;
};
Scratch scratch_layout(ScoreBias kind, int pass, int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t U) {
  Scratch s;
  if (pass != 1) return s;
  constexpr const char* kWhat = "attention scratch";  // sizes overflow-checked, as on the CPU
  s.total = checked_elems({B, H, Tq}, kWhat);
  if (kind == ScoreBias::ContentPosition) {
    s.dc2p = s.total;
    s.total = checked_add(s.total, checked_elems({B, H, Tq, U}, kWhat), kWhat);
    s.dp2c = s.total;
    s.total = checked_add(s.total, checked_elems({B, H, Tk, U}, kWhat), kWhat);
  }
  return s;
}

}  // namespace

int64_t attention_scratch_elems(ScoreBias kind, int pass, int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D,
                                int64_t U) {
  (void)D;
  return scratch_layout(kind, pass, B, H, Tq, Tk, U).total;
}

template <typename T>
void attention_forward(T* o, T* stats, T* scratch, const T* q, const T* k, const T* v, const T* bias, const T* kr,
                       const T* qr, const T* sinks, const int64_t* diag_u, const int64_t* rows, int64_t B, int64_t H,
                       int64_t Tq, int64_t Tk, int64_t D, int64_t U, int64_t q_offset, ScoreBias kind, bool causal,
                       T scale) {
  (void)scratch;
  const IndexArrays ix(diag_u, rows, Tq, Tk, U);
  const Attn<T> a = make_attn(q, k, v, bias, kr, qr, sinks, ix.diag_u(), ix.rows(), B, H, Tq, Tk, D, U, q_offset, kind,
                              causal, scale, "attention_forward");
  const int64_t nrows = B * H * Tq;
  if (nrows <= 0) return;
  const int64_t tile = tiled_attention_tile(D, sizeof(T));
  if (tile > 0) {
    const int64_t nblocks = B * H * ((Tq + tile - 1) / tile);
    launch("attention_forward", attention_forward_tiled_kernel<T>, capped_grid(nblocks), kTile,
           tiled_attention_smem(tile, D, sizeof(T)), o, stats, a, tile);
    return;
  }
  // A head too wide for even one-row tiles: the per-row kernel (a few D-vectors of shared memory).
  const size_t smem = checked_smem((2 * D + kTile) * sizeof(T), D, "attention_forward");
  launch("attention_forward", attention_forward_kernel<T>, capped_grid(nrows), kTile, smem, o, stats, a);
}

template <typename T>
void attention_backward(T* dq, T* dk, T* dv, T* dbias, T* dkr, T* dqr, T* dsinks, T* scratch, const T* dout, const T* q,
                        const T* k, const T* v, const T* o, const T* stats, const T* bias, const T* kr, const T* qr,
                        const T* sinks, const int64_t* diag_u, const int64_t* rows, int64_t B, int64_t H, int64_t Tq,
                        int64_t Tk, int64_t D, int64_t U, int64_t q_offset, ScoreBias kind, bool causal, T scale) {
  const IndexArrays ix(diag_u, rows, Tq, Tk, U);
  const Attn<T> a = make_attn(q, k, v, bias, kr, qr, sinks, ix.diag_u(), ix.rows(), B, H, Tq, Tk, D, U, q_offset, kind,
                              causal, scale, "attention_backward");
  if (B * H * Tq <= 0) return;
  const Scratch L = scratch_layout(kind, 1, B, H, Tq, Tk, U);
  T* delta = scratch + L.delta;
  const bool content_position = kind == ScoreBias::ContentPosition;
  T* dc2p = content_position && a.kr && dkr ? scratch + L.dc2p : nullptr;
  T* dp2c = content_position && a.qr && dqr ? scratch + L.dp2c : nullptr;

  // 1. rows: delta (always: the other passes read it), dq, dc2p. 2. columns: dk, dv, dp2c. Tiled where the
  // tiles fit the shared memory, else one block per row / column.
  const int64_t tile_rows = tiled_backward_tile(D, sizeof(T), false),
                tile_cols = tiled_backward_tile(D, sizeof(T), true);
  // A Distance bias's gradient in the tiled rows pass: per-block partial sums over the diagonals
  // (ldiag each, in a scratch block of the caching allocator), then one reduction over b and the tiles.
  // They grow as B H Tq Tk / tile: beyond 1 GiB (B 8, H 12, T 8192 in float at tile 16 is 1.6 GiB) the
  // per-diagonal kernel forms the gradient instead, with no scratch and more time.
  const bool tiled = tile_rows > 0 && tile_cols > 0;
  const int64_t qtiles = tiled ? (Tq + tile_rows - 1) / tile_rows : 0;
  const int64_t ldiag = tiled ? (Tk + tile_rows - 1) / tile_rows * tile_rows + tile_rows - 1 : 0;
  constexpr double kMaxPartialBytes = double(POSGRAD_CUDA_MAX_DIAG_PARTIAL_BYTES);
  const bool diag_partials = tiled && kind == ScoreBias::Distance && dbias && Tk > 0 &&
                             double(B) * double(H) * double(qtiles) * double(ldiag) * sizeof(T) <= kMaxPartialBytes;
  const size_t ddiag_bytes = diag_partials ? static_cast<size_t>(B * H * qtiles * ldiag) * sizeof(T) : 0;
  T* ddiag = diag_partials ? static_cast<T*>(scratch_allocate(ddiag_bytes)) : nullptr;
  if (tiled) {
    launch("attention_backward (rows)", attention_backward_rows_tiled_kernel<T>, capped_grid(B * H * qtiles), kTile,
           tiled_backward_smem(tile_rows, D, sizeof(T), false), dq, delta, dc2p, ddiag, ldiag, dout, o, stats, a,
           tile_rows);
    if ((dk || dv || dp2c) && B * H * Tk > 0)
      launch("attention_backward (columns)", attention_backward_cols_tiled_kernel<T>,
             capped_grid(B * H * ((Tk + tile_cols - 1) / tile_cols)), kTile,
             tiled_backward_smem(tile_cols, D, sizeof(T), true), dk, dv, dp2c, dout, stats,
             static_cast<const T*>(delta), a, tile_cols);
  } else {
    const size_t smem_rows = checked_smem((3 * D + kTile) * sizeof(T) + kTile * sizeof(int), D, "attention_backward");
    launch("attention_backward (rows)", attention_backward_rows_kernel<T>, capped_grid(B * H * Tq), kTile, smem_rows,
           dq, delta, dc2p, dout, o, stats, a);
  }
  if ((tile_rows == 0 || tile_cols == 0) && (dk || dv || dp2c) && B * H * Tk > 0) {
    const size_t smem_cols =
        checked_smem((4 * D + 2 * kTile) * sizeof(T) + kTile * sizeof(int), D, "attention_backward");
    launch("attention_backward (columns)", attention_backward_cols_kernel<T>, capped_grid(B * H * Tk), kTile, smem_cols,
           dk, dv, dp2c, dout, stats, static_cast<const T*>(delta), a);
  }
  // 3. bias / table gradients.
  const int64_t nd = Tq + Tk - 1;
  if (diag_partials) {
    launch("attention_backward (bias by distance)", diagonal_partials_reduce_kernel<T>,
           capped_grid((H * nd + kTile - 1) / kTile), kTile, 0, dbias, static_cast<const T*>(ddiag), ldiag, B, H, Tq,
           Tk, tile_rows);
    scratch_free(ddiag, ddiag_bytes);  // its next user is queued behind the reduction on the same stream
  } else if (kind == ScoreBias::Distance && dbias && Tk > 0) {
    launch("attention_backward (bias by distance)", attention_diagonal_kernel<T>, capped_grid(H * nd), kTile, 0, dbias,
           stats, dout, static_cast<const T*>(delta), a, true);
  }
  if (dc2p)
    launch("attention_backward (content-position dkr)", content_position_table_grad_kernel<T>, capped_grid(U * H), 64,
           0, dkr, static_cast<const T*>(dc2p), q, ix.rows(), B, H, Tq, D, U, scale, a.bf16);
  if (dp2c && Tk > 0)
    launch("attention_backward (content-position dqr)", content_position_table_grad_kernel<T>, capped_grid(U * H), 64,
           0, dqr, static_cast<const T*>(dp2c), k, ix.rows(), B, H, Tk, D, U, scale, a.bf16);
  if (sinks && dsinks)
    launch("attention_backward (sink logits)", attention_sink_grad_kernel<T>, capped_grid(H), kTile, 0, dsinks, sinks,
           stats, static_cast<const T*>(delta), B, H, Tq);
}

template <typename T>
void attention_diagonal_sums(T* prob_sum, T* scratch, const T* q, const T* k, const T* stats, const T* bias,
                             const T* kr, const T* qr, const int64_t* diag_u, const int64_t* rows, int64_t B, int64_t H,
                             int64_t Tq, int64_t Tk, int64_t D, int64_t U, int64_t q_offset, ScoreBias kind,
                             bool causal, T scale) {
  (void)scratch;
  const IndexArrays ix(diag_u, rows, Tq, Tk, U);
  const Attn<T> a =
      make_attn(q, k, static_cast<const T*>(nullptr), bias, kr, qr, static_cast<const T*>(nullptr), ix.diag_u(),
                ix.rows(), B, H, Tq, Tk, D, U, q_offset, kind, causal, scale, "attention_diagonal_sums");
  const int64_t nd = Tq + Tk - 1;
  if (H <= 0 || nd <= 0 || Tq <= 0 || Tk <= 0) return;
  launch("attention_diagonal_sums", attention_diagonal_kernel<T>, capped_grid(H * nd), kTile, 0, prob_sum, stats,
         static_cast<const T*>(nullptr), static_cast<const T*>(nullptr), a, false);
}

#define POSGRAD_ATTENTION_INST(T)                                                                                      \
  template void attention_forward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, const T*, const T*, \
                                     const int64_t*, const int64_t*, int64_t, int64_t, int64_t, int64_t, int64_t,      \
                                     int64_t, int64_t, ScoreBias, bool, T);                                            \
  template void attention_backward<T>(T*, T*, T*, T*, T*, T*, T*, T*, const T*, const T*, const T*, const T*,          \
                                      const T*, const T*, const T*, const T*, const T*, const T*, const int64_t*,      \
                                      const int64_t*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,   \
                                      ScoreBias, bool, T);                                                             \
  template void attention_diagonal_sums<T>(T*, T*, const T*, const T*, const T*, const T*, const T*, const T*,         \
                                           const int64_t*, const int64_t*, int64_t, int64_t, int64_t, int64_t,         \
                                           int64_t, int64_t, int64_t, ScoreBias, bool, T);
POSGRAD_ATTENTION_INST(float)
POSGRAD_ATTENTION_INST(double)
#undef POSGRAD_ATTENTION_INST

}  // namespace posgrad::kernels::cuda
