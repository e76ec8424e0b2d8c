// attention.cpp — the fused multi-head attention kernels on the CPU: forward, backward and a
// diagnostic (attention probability mass per diagonal), with the score modifiers (a bias per head
// and diagonal, or DeBERTa-style content-position products) applied inside the tiles.
//
// Algorithm: FlashAttention (Dao et al., "FlashAttention: Fast and Memory-Efficient Exact Attention
// with IO-Awareness", NeurIPS 2022, Algorithms 1 and 2; the loop order of the backward follows
// FlashAttention-2, Dao 2023, Alg. 2). Written from the papers. Forward: for a block of query rows,
// sweep the key blocks keeping a running row maximum m and row sum l (online softmax), rescaling the
// output accumulator when m grows; store only O and the row statistics (m, log l). Backward:
// recompute the score tile, P = exp((S - m) - log l), dP = dO V^T, dS = P (dP - delta) with
// delta_i = dO_i . O_i, then
// dV += P^T dO, dK += scale dS^T Q, dQ += scale dS K. No (B, H, T, T) tensor is ever formed: the
// per-thread tiles are (64 x 64), the scratch is O(B H T) (Distance: the per-diagonal gradient;
// ContentPosition: the c2p/p2c products of each row with the U table rows it can meet, O(B H T U)).
//
// Score modifiers (kernels.h, ScoreBias; the encodings' math is in shared/SPEC-positions.md):
//  * Distance: the bias depends only on the head and the diagonal d = j - i, and arrives as data,
//    bias (H, Tq + Tk - 1), computed by the encoding with ordinary ops (T5, ALiBi, KERPLE, ...); a
//    tile row adds a contiguous slice of it. Its gradient is dS summed over the batch and along each
//    diagonal (spec §1.4); autograd carries it on to the encoding's table or parameters.
//  * Dense (FIRE, SPEC-positions-2 §0.2 K1): bias (H, Tq, Tk), shared over the batch; a tile row
//    adds a contiguous slice of row i of bias[h]. Its gradient is dS summed over the batch: the
//    backward then runs over heads, each thread sweeping the batch of its head in order, so that
//    dbias[h] has one writer and a fixed summation order (parallelism min(H, threads)).
//  * Separable (FoX, SPEC-positions-2 §0.2 K2): bias (B, H, Tq + Tk) = [a | c] per (b, h), the score
//    of (i, j) gains a[i] + c[j]. Its gradient is the row sums of dS into a and the column sums into
//    c, each (b, h) written by the thread that owns it.
//  * ContentPosition (DeBERTa): c2p(i, u) = scale q_i . kr[rows[u]] and p2c(j, u) = scale k_j . qr[rows[u]] are
//    precomputed with GEMMs (the "efficient form" of spec §2.5), gathered per (i, j) inside the
//    tile, and their gradients dc2p(i, u), dp2c(j, u) are scattered per element and turned into
//    dq, dk, dkr, dqr with GEMMs after the sweep.
//  * Sink logits (learnable attention sinks: gpt-oss gpt_oss/torch/model.py sdpa, HF
//    modeling_gpt_oss.py eager_attention_forward; StreamingLLM; SPEC-positions-2 §5), with any of the
//    modifiers: a virtual key of logit sinks[h] and value 0. The online softmax starts each row at
//    m = sinks[h], l = 1 (exp(sinks - m) folded in from the start), so the saved (m, log l) include
//    the sink and backward's P = exp((S - m) - log l) is already the sink-normalised probability; the
//    sink's own gradient is dsinks[h] = -sum_{b,i} P_sink delta_i (its dP is 0), one partial per
//    (b, h) reduced over b in a fixed order.
//  * Per-token positions (attention_*_strided with q_pos, kernels.h; randomized positions, Ruoss et al. 2023
//    §3): the same two modifiers, but pair (i, j) reads entry k_pos[j] - q_pos[i] + q_pos[Tq - 1] of
//    the bias row / diagonal index (a gather along the tile row instead of a contiguous slice), and
//    the bias gradient is scattered back into that entry. A separate branch per tile, so the
//    diagonal path is unchanged.
//
// Operand layout (kernels.h, HeadStrides): each of q, k, v, o, dout, dq, dk, dv is read or written
// through its own (batch, head, row) strides, the last dim contiguous; the tile products take the row
// stride as their leading dimension. The autograd op passes split_heads' views of the (B, T, 3C)
// projection, an output in (B, T, H, D) memory and gradients in the thirds of one (B, T, 3C) buffer,
// so that neither splitting nor merging the heads copies. The
// arithmetic is that of dense operands: the same bits.
//
// Tile products go through gemm_tile (cpu/gemm_tile.h): on the AVX-512 and AVX2 paths with fp32
// products, the GEMM's micro-kernel arithmetic without its packing (the same bits as the project GEMM), else the
// project GEMM itself (cpu/gemm.cpp), which runs single-threaded inside our parallel regions (it
// checks omp_in_parallel) and uses its AVX-512/AVX2 micro-kernels; the
// exponentials (float) through a vectorised exp (exp_shift_sum below, vec_kernels.cpp). On a causal
// tile that the diagonal crosses, the products leave out the masked half (gemm_tile_causal,
// gemm_tile.h): the score and dP columns past the diagonal are not computed (the row loops read only the
// n_valid entries, and dS is +0 past them), and P V, dS K, P^T dO and dS^T Q skip their zero terms;
// the bits are those of the whole products.
//
// Parallelism and determinism: forward over (b, h, query block); backward over (b, h), both in
// contiguous shares with stealing (parallel.h: a thread's heads are those of the batches whose token
// rows the row-wise ops and the GEMMs before it gave that thread, and a thread done early takes the
// last heads of a slower one's; FIRE's dense-bias backward: over heads) — each (b, h)
// owns its slices of dq, dk, dv and of the scratch accumulators, so nothing is shared between
// threads; the bias and table gradients are then reduced over b in a fixed order by one thread per head.
// Results are bit-identical whatever the thread count and timing (small problems run on one thread;
// the GEMM is itself independent of both). Across instruction sets they follow the GEMM's path alone:
// the exponentials give the same bits on every path (vec_kernels.h), the tile products may differ
// in the last bits between the GEMM's AVX-512, AVX2 and scalar paths (gemm.cpp).
//
// Per-thread tile buffers are thread_local and only grow (the same deliberate exception to
// "kernels allocate nothing" as the GEMM's packing buffers): their size depends on the tile and D,
// not on T.
//
// Numerics: the log-sum-exp of a row is kept as the pair (m, log l), never as lse = m + log l: that
// sum rounds log l to the ulp of m, and exp(S - lse) then misses the true probability by that
// rounding (float32 scores of 1e4: 5e-4 relative; beyond ~1e7 the whole log l is lost). S - m is
// formed first, then log l subtracted, as in cpu/softmax.cpp. The running maximum propagates NaN
// (nan_max.h), so a NaN score makes its row NaN, as PyTorch's softmax does.
//
// Not here: dropout on the probabilities, padding masks (only the causal mask and query offsets),
// parallelism inside one (b, h) in backward. The CUDA twin is tensor/kernels/cuda/attention.cu.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tensor/kernels/cpu/denormals.h"
#include "tensor/kernels/cpu/gemm_tile.h"
#include "tensor/kernels/cpu/nan_max.h"
#include "tensor/kernels/cpu/parallel.h"
#include "tensor/kernels/cpu/vec_kernels.h"
#include "tensor/kernels/kernels.h"

namespace posgrad::kernels::cpu {

namespace {

constexpr int64_t kBlockQ = 64;  // query rows per tile
constexpr int64_t kBlockK = 64;  // key columns per tile
// Multiply-adds below which a parallel region costs more than it saves (waking and joining a team
// is microseconds, far more under an oversubscribed machine): such calls run on one thread.
constexpr int64_t kParallelWork = int64_t(1) << 17;

// Offset of head (b, h) = bh of an operand laid out by s (kernels.h, HeadStrides).
inline int64_t at(const HeadStrides& s, int64_t bh, int64_t H) { return (bh / H) * s.batch + (bh % H) * s.head; }

// Dense (B, H, T, D) operands: q, o, dout, dq of Tq rows, k, v, dk, dv of Tk rows.
AttentionStrides dense_strides(int64_t H, int64_t Tq, int64_t Tk, int64_t D) {
  const HeadStrides sq{H * Tq * D, Tq * D, D}, sk{H * Tk * D, Tk * D, D};
  return {sq, sk, sk, sq, sq, sq, sk, sk};
}

// Offsets (in elements) of the scratch regions; -1 when a region is absent.
struct ScratchLayout {
  int64_t krs = -1, qrs = -1, c2p = -1, p2c = -1;                                          // prepared bias (all passes)
  int64_t delta = -1, ddiag = -1, dc2p = -1, dp2c = -1, dkrs = -1, dqrs = -1, dsink = -1;  // backward
  int64_t sums = -1;                                                                       // diagonal sums
  int64_t total = 0;
};

// nw: the width of the bias / diagonal index (Tq + Tk - 1 on the diagonal path; the window's
// Pq + Pk - 1 with per-token positions).
ScratchLayout scratch_layout(ScoreBias kind, int pass, int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D,
                             int64_t U, int64_t nw) {
  ScratchLayout s;
  constexpr const char* kWhat = "attention scratch";
  const int64_t nd = nw;
  // Every region size and the running total are overflow-checked (ShapeError, never a wrapped size).
  auto take = [&](std::initializer_list<int64_t> factors) {
    const int64_t at = s.total;
    s.total = checked_add(s.total, checked_elems(factors, kWhat), kWhat);
    return at;
  };
  if (kind == ScoreBias::ContentPosition) {
    s.krs = take({H, U, D});
    s.qrs = take({H, U, D});
    s.c2p = take({B, H, Tq, U});
    s.p2c = take({B, H, Tk, U});
  }
  if (pass == 1) {
    s.delta = take({B, H, Tq});
    s.dsink = take({B, H});  // per-(b, h) partial sink gradient (used with sinks only; B H elements)
    if (kind == ScoreBias::Distance) s.ddiag = take({B, H, nd});
    if (kind == ScoreBias::ContentPosition) {
      s.dc2p = take({B, H, Tq, U});
      s.dp2c = take({B, H, Tk, U});
      s.dkrs = take({H, U, D});
      s.dqrs = take({H, U, D});
    }
  }
  if (pass == 2) s.sums = take({B, H, nd});
  return s;
}

// Everything a tile needs to compute its scores.
template <typename T>
struct Problem {
  const T *q, *k;
  int64_t B, H, Tq, Tk, D, U, q_offset;
  ScoreBias kind;
  bool causal;
  T scale;
  HeadStrides qs, ks;  // where q's and k's rows sit (kernels.h)
  // Row i of q / row j of k in head (b, h) = bh.
  const T* q_row(int64_t bh, int64_t i) const { return q + at(qs, bh, H) + i * qs.row; }
  const T* k_row(int64_t bh, int64_t j) const { return k + at(ks, bh, H) + j * ks.row; }
  const T* bias = nullptr;  // (H, Tq + Tk - 1) (Distance), (H, Tq, Tk) (Dense), (B, H, Tq + Tk) (Separable)
  const T *c2p = nullptr, *p2c = nullptr;  // (B, H, Tq, U), (B, H, Tk, U); null = term off
  const int64_t* diag_u = nullptr;         // (nw)
  // Per-token positions (null: query i at i + q_offset, key j at j). Pair (i, j) then reads entry
  // k_pos[j] - q_pos[i] + wq of the bias row / diag_u, wq = q_pos[Tq - 1], width nw = wq + k_pos[Tk - 1] + 1.
  const int64_t *q_pos = nullptr, *k_pos = nullptr;
  int64_t wq = 0, nw = 0;
  int64_t nd() const { return Tq + Tk - 1; }
  // Number of leading keys of the block [j0, j0 + nk) that query row i may see.
  int64_t n_valid(int64_t i, int64_t j0, int64_t nk) const {
    if (!causal) return nk;
    return std::clamp<int64_t>(i + q_offset + 1 - j0, 0, nk);
  }
  // One past the last key any of the query rows [i0, i0 + nq) may see.
  int64_t key_end(int64_t i0, int64_t nq) const {
    if (!causal) return Tk;
    return std::clamp<int64_t>(i0 + nq + q_offset, 0, Tk);
  }
  // What a tile product of query rows i0.. and key columns j0.. may leave out (gemm_tile.h): the
  // causal mask's diagonal in tile coordinates, row ii seeing columns jj <= ii + diag (n_valid).
  CausalSkip skip(CausalSkip what) const { return causal ? what : CausalSkip::none; }
  int64_t diag(int64_t i0, int64_t j0) const { return i0 + q_offset - j0; }
  // First query row that may see key j0 (causal), else 0.
  int64_t query_begin(int64_t j0) const {
    if (!causal) return 0;
    return std::clamp<int64_t>(j0 - q_offset, 0, Tq);
  }
};

// x[i] <- exp((x[i] - shift) - shift2) for i < n; returns the sum of the new values. (shift2 = 0 in
// the forward; the backward passes the row's (m, log l): the difference with m is formed first.) The
// exponentials are the other half of the work besides the tile GEMMs (T^2 of them in forward and
// again in backward), so float runs vec_kernels.cpp's loop: vec_math.h's Cephes-style expf (relative
// error ~2e-7, arguments below -87.3 flush to 0), compiled for AVX-512, AVX2 and baseline x86-64,
// its sum in one fixed order, so all three give the same bits. double keeps std::exp: it is the
// gradcheck precision.
// x is a row of a tile buffer (rows kBlockK apart, a multiple of 16, n <= nk <= kBlockK; the buffer is
// zero-filled when it grows), so the padded variant may also overwrite x[n, round_up(n, 16)), still
// inside the row: the callers set [n, nk) to 0 right after, and nothing reads the row past nk.
static_assert(kBlockK % 16 == 0, "exp_shift_sum_padded_f32 may write up to the next multiple of 16");
float exp_shift_sum(float* x, int64_t n, float shift, float shift2) {
  return exp_shift_sum_padded_f32(x, n, shift, shift2);
}

double exp_shift_sum(double* x, int64_t n, double shift, double shift2) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp((x[i] - shift) - shift2);
    sum += x[i];
  }
  return sum;
}

// Grows-only per-thread buffer of n elements.
template <typename T>
T* thread_buffer(size_t n) {
  thread_local std::vector<T> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// S (nq, kBlockK) = scale * Q[i0:i0+nq] K[j0:j0+nk]^T + bias, for head (b, h) = bh. Masked entries
// are left as computed; callers only read the first n_valid(i, ...) entries of each row.
template <typename T>
void score_tile(const Problem<T>& p, int64_t bh, int64_t i0, int64_t nq, int64_t j0, int64_t nk, T* S) {
  const int64_t D = p.D;
  gemm_tile_causal<T>(S, p.q_row(bh, i0), p.k_row(bh, j0), nq, nk, D, kBlockK, p.qs.row, p.ks.row, false, true, p.scale,
                      T(0), p.skip(CausalSkip::columns), p.diag(i0, j0));
  const int64_t h = bh % p.H;
  if (p.kind == ScoreBias::Distance && p.q_pos) {
    // per-token positions: entry k_pos[j] - q_pos[i] + wq of bias[h] (a gather along the row).
    const T* db = p.bias + h * p.nw + p.wq;
    const int64_t* kp = p.k_pos + j0;
    for (int64_t ii = 0; ii < nq; ++ii) {
      T* row = S + ii * kBlockK;
      const T* src = db - p.q_pos[i0 + ii];
      for (int64_t jj = 0; jj < nk; ++jj) row[jj] += src[kp[jj]];
    }
  } else if (p.kind == ScoreBias::Distance) {
    // diagonal d = j - i + Tq - 1: along a row the bias is a contiguous slice of bias[h].
    const T* db = p.bias + h * p.nd() + (p.Tq - 1);
    for (int64_t ii = 0; ii < nq; ++ii) {
      T* row = S + ii * kBlockK;
      const T* src = db + (j0 - (i0 + ii));
      for (int64_t jj = 0; jj < nk; ++jj) row[jj] += src[jj];
    }
  } else if (p.kind == ScoreBias::Dense) {
    const T* hb = p.bias + h * p.Tq * p.Tk;
    for (int64_t ii = 0; ii < nq; ++ii) {
      T* row = S + ii * kBlockK;
      const T* src = hb + (i0 + ii) * p.Tk + j0;
      for (int64_t jj = 0; jj < nk; ++jj) row[jj] += src[jj];
    }
  } else if (p.kind == ScoreBias::Separable) {
    const T* a = p.bias + bh * (p.Tq + p.Tk);
    const T* c = a + p.Tq + j0;
    for (int64_t ii = 0; ii < nq; ++ii) {
      T* row = S + ii * kBlockK;
      const T ai = a[i0 + ii];
      for (int64_t jj = 0; jj < nk; ++jj) row[jj] += ai + c[jj];
    }
  } else if (p.kind == ScoreBias::ContentPosition) {
    const int64_t U = p.U;
    const T* c2p = p.c2p ? p.c2p + bh * p.Tq * U : nullptr;
    const T* p2c = p.p2c ? p.p2c + bh * p.Tk * U : nullptr;
    if (p.q_pos) {  // per-token positions: compact row diag_u[k_pos[j] - q_pos[i] + wq]
      const int64_t* kp = p.k_pos + j0;
      for (int64_t ii = 0; ii < nq; ++ii) {
        const int64_t i = i0 + ii;
        T* row = S + ii * kBlockK;
        const int64_t* du = p.diag_u + (p.wq - p.q_pos[i]);
        if (c2p) {
          const T* ci = c2p + i * U;
          for (int64_t jj = 0; jj < nk; ++jj) row[jj] += ci[du[kp[jj]]];
        }
        if (p2c) {
          const T* pj = p2c + j0 * U;
          for (int64_t jj = 0; jj < nk; ++jj) row[jj] += pj[jj * U + du[kp[jj]]];
        }
      }
      return;
    }
    for (int64_t ii = 0; ii < nq; ++ii) {
      const int64_t i = i0 + ii;
      T* row = S + ii * kBlockK;
      const int64_t* du = p.diag_u + (j0 - i + p.Tq - 1);
      if (c2p) {
        const T* ci = c2p + i * U;
        for (int64_t jj = 0; jj < nk; ++jj) row[jj] += ci[du[jj]];
      }
      if (p2c) {
        const T* pj = p2c + j0 * U;
        for (int64_t jj = 0; jj < nk; ++jj) row[jj] += pj[jj * U + du[jj]];
      }
    }
  }
}

// Fills the prepared-bias regions of the scratch (shared by all passes) and returns the Problem. With
// `prepared` (a forward pass's scratch of the same call, ContentPosition): those regions are read from
// there instead of computed again; they sit at the same offsets in every pass's layout.
template <typename T>
Problem<T> prepare(T* scratch, const ScratchLayout& L, const T* q, const T* k, const T* bias, const T* kr, const T* qr,
                   const int64_t* diag_u, const int64_t* rows, const int64_t* q_pos, const int64_t* k_pos, int64_t B,
                   int64_t H, int64_t Tq, int64_t Tk, int64_t D, int64_t U, int64_t q_offset, ScoreBias kind,
                   bool causal, T scale, const HeadStrides& qs, const HeadStrides& ks, const T* prepared = nullptr) {
  Problem<T> p{q, k, B, H, Tq, Tk, D, U, q_offset, kind, causal, scale, qs, ks};
  p.diag_u = diag_u;
  p.q_pos = q_pos;
  p.k_pos = k_pos;
  p.wq = q_pos ? q_pos[Tq - 1] : Tq - 1;
  p.nw = q_pos ? q_pos[Tq - 1] + k_pos[Tk - 1] + 1 : Tq + Tk - 1;
  if (kind == ScoreBias::Distance || kind == ScoreBias::Dense || kind == ScoreBias::Separable) {
    p.bias = bias;
  } else if (kind == ScoreBias::ContentPosition && prepared) {
    p.c2p = kr ? prepared + L.c2p : nullptr;
    p.p2c = qr ? prepared + L.p2c : nullptr;
  } else if (kind == ScoreBias::ContentPosition) {
    T* krs = scratch + L.krs;
    T* qrs = scratch + L.qrs;
    // Gather the used table rows per head: krs[h][u] = kr[rows[u], h] (U, D) per head.
    for (int64_t h = 0; h < H; ++h)
      for (int64_t u = 0; u < U; ++u)
        for (int64_t e = 0; e < D; ++e) {
          if (kr) krs[(h * U + u) * D + e] = kr[(rows[u] * H + h) * D + e];
          if (qr) qrs[(h * U + u) * D + e] = qr[(rows[u] * H + h) * D + e];
        }
    T* c2p = scratch + L.c2p;
    T* p2c = scratch + L.p2c;
#pragma omp parallel for schedule(static) if (B * H * (Tq + Tk) * U * D > kParallelWork)
    for (int64_t bh = 0; bh < B * H; ++bh) {
      const int64_t h = bh % H;
      // c2p (Tq, U) = scale Q Kr^T, p2c (Tk, U) = scale K Qr^T (spec §2.5, efficient form).
      if (kr)
        gemm<T>(c2p + bh * Tq * U, p.q_row(bh, 0), krs + h * U * D, Tq, U, D, U, qs.row, D, false, true, scale, T(0));
      if (qr)
        gemm<T>(p2c + bh * Tk * U, p.k_row(bh, 0), qrs + h * U * D, Tk, U, D, U, ks.row, D, false, true, scale, T(0));
    }
    p.c2p = kr ? c2p : nullptr;
    p.p2c = qr ? p2c : nullptr;
  }
  return p;
}

// The window width of per-token positions (ShapeError on overflow).
int64_t window_width(const int64_t* q_pos, const int64_t* k_pos, int64_t Tq, int64_t Tk) {
  return checked_add(q_pos[Tq - 1], k_pos[Tk - 1] + 1, "attention scratch");
}

template <typename T>
void forward_impl(T* o, T* stats, T* scratch, const T* q, const T* k, const T* v, const T* bias, const T* kr,
                  const T* qr, const T* sinks, const int64_t* diag_u, const int64_t* rows, const int64_t* q_pos,
                  const int64_t* k_pos, int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D, int64_t U,
                  int64_t q_offset, ScoreBias kind, bool causal, T scale, const AttentionStrides& st);
template <typename T>
void backward_impl(T* dq, T* dk, T* dv, T* dbias, T* dkr, T* dqr, T* dsinks, T* scratch, const T* dout, const T* q,
                   const T* k, const T* v, const T* o, const T* stats, const T* bias, const T* kr, const T* qr,
                   const T* sinks, const int64_t* diag_u, const int64_t* rows, const int64_t* q_pos,
                   const int64_t* k_pos, int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D, int64_t U,
                   int64_t q_offset, ScoreBias kind, bool causal, T scale, const AttentionStrides& st,
                   const T* prepared = nullptr, bool overwrite = false);

}  // namespace

int64_t attention_scratch_elems(ScoreBias kind, int pass, int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D,
                                int64_t U) {
  return scratch_layout(kind, pass, B, H, Tq, Tk, D, U, checked_add(Tq, Tk, "attention scratch") - 1).total;
}

int64_t attention_positions_scratch_elems(ScoreBias kind, int pass, int64_t B, int64_t H, int64_t Tq, int64_t Tk,
                                          int64_t D, int64_t U, int64_t nw) {
  return scratch_layout(kind, pass, B, H, Tq, Tk, D, U, nw).total;
}

template <typename T>
void attention_forward(T* o, T* stats, T* scratch, const T* q, const T* k, const T* v, const T* bias, const T* kr,
                       const T* qr, const T* sinks, const int64_t* diag_u, const int64_t* rows, int64_t B, int64_t H,
                       int64_t Tq, int64_t Tk, int64_t D, int64_t U, int64_t q_offset, ScoreBias kind, bool causal,
                       T scale) {
  forward_impl(o, stats, scratch, q, k, v, bias, kr, qr, sinks, diag_u, rows, static_cast<const int64_t*>(nullptr),
               static_cast<const int64_t*>(nullptr), B, H, Tq, Tk, D, U, q_offset, kind, causal, scale,
               dense_strides(H, Tq, Tk, D));
}

template <typename T>
void attention_forward_strided(T* o, T* stats, T* scratch, const T* q, const T* k, const T* v, const T* bias,
                               const T* kr, const T* qr, const T* sinks, const int64_t* diag_u, const int64_t* rows,
                               const int64_t* q_pos, const int64_t* k_pos, int64_t B, int64_t H, int64_t Tq, int64_t Tk,
                               int64_t D, int64_t U, int64_t q_offset, ScoreBias kind, bool causal, T scale,
                               const AttentionStrides& st) {
  forward_impl(o, stats, scratch, q, k, v, bias, kr, qr, sinks, diag_u, rows, q_pos, k_pos, B, H, Tq, Tk, D, U,
               q_pos ? int64_t(0) : q_offset, kind, causal, scale, st);
}

template <typename T>
void attention_backward(T* dq, T* dk, T* dv, T* dbias, T* dkr, T* dqr, T* dsinks, T* scratch, const T* dout, const T* q,
                        const T* k, const T* v, const T* o, const T* stats, const T* bias, const T* kr, const T* qr,
                        const T* sinks, const int64_t* diag_u, const int64_t* rows, int64_t B, int64_t H, int64_t Tq,
                        int64_t Tk, int64_t D, int64_t U, int64_t q_offset, ScoreBias kind, bool causal, T scale) {
  backward_impl(dq, dk, dv, dbias, dkr, dqr, dsinks, scratch, dout, q, k, v, o, stats, bias, kr, qr, sinks, diag_u,
                rows, static_cast<const int64_t*>(nullptr), static_cast<const int64_t*>(nullptr), B, H, Tq, Tk, D, U,
                q_offset, kind, causal, scale, dense_strides(H, Tq, Tk, D));
}

template <typename T>
void attention_backward_strided(T* dq, T* dk, T* dv, T* dbias, T* dkr, T* dqr, T* dsinks, T* scratch, const T* dout,
                                const T* q, const T* k, const T* v, const T* o, const T* stats, const T* bias,
                                const T* kr, const T* qr, const T* sinks, const int64_t* diag_u, const int64_t* rows,
                                const int64_t* q_pos, const int64_t* k_pos, int64_t B, int64_t H, int64_t Tq,
                                int64_t Tk, int64_t D, int64_t U, int64_t q_offset, ScoreBias kind, bool causal,
                                T scale, const AttentionStrides& st, const T* prepared, bool overwrite) {
  backward_impl(dq, dk, dv, dbias, dkr, dqr, dsinks, scratch, dout, q, k, v, o, stats, bias, kr, qr, sinks, diag_u,
                rows, q_pos, k_pos, B, H, Tq, Tk, D, U, q_pos ? int64_t(0) : q_offset, kind, causal, scale, st,
                prepared, overwrite);
}

namespace {

// f(task) for task in [0, n): on the calling thread alone unless `parallel`, else in contiguous shares
// with stealing (parallel.h), each task run once by one thread.
template <typename F>
void for_head_shares(int64_t n, bool parallel, const F& f) {
  auto range = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) f(t);
  };
  if (parallel)
    parallel_chunks(n, 1, 0, range);
  else
    range(0, n);
}

template <typename T>
void forward_impl(T* o, T* stats, T* scratch, const T* q, const T* k, const T* v, const T* bias, const T* kr,
                  const T* qr, const T* sinks, const int64_t* diag_u, const int64_t* rows, const int64_t* q_pos,
                  const int64_t* k_pos, int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D, int64_t U,
                  int64_t q_offset, ScoreBias kind, bool causal, T scale, const AttentionStrides& st) {
  const int64_t nw = q_pos ? window_width(q_pos, k_pos, Tq, Tk) : Tq + Tk - 1;
  const ScratchLayout L = scratch_layout(kind, 0, B, H, Tq, Tk, D, U, nw);
  const Problem<T> p = prepare(scratch, L, q, k, bias, kr, qr, diag_u, rows, q_pos, k_pos, B, H, Tq, Tk, D, U, q_offset,
                               kind, causal, scale, st.q, st.k);
  const int64_t nqb = (Tq + kBlockQ - 1) / kBlockQ;
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();

  // Contiguous shares with stealing (parallel.h): a thread takes whole consecutive heads (b, h), i.e.
  // the batches whose token rows the projection GEMM (split by rows) and the row-wise ops before it
  // gave the same thread, so q, k, v and o stay in that core's caches; only a thread done with its
  // share early takes the last heads of another's. Every (b, h) carries the same work (causal blocks
  // late in the sequence carry more, but each head has all of them). Dynamic scheduling, which dealt
  // the heads out alternately, ran the attention 10-25% slower in this VM's slow phases (when two
  // threads run ~1.4x one instead of ~1.9x) and no faster otherwise. Each task's arithmetic is
  // independent of which thread runs it.
  auto one_task = [&](int64_t task) {
    const FlushDenormals ftz;  // far keys' probabilities are subnormal under a strong bias (denormals.h)
    const int64_t bh = task / nqb, i0 = (task % nqb) * kBlockQ;
    const int64_t nq = std::min(kBlockQ, Tq - i0);
    T* buf = thread_buffer<T>(static_cast<size_t>(kBlockQ * kBlockK + kBlockQ * D + 2 * kBlockQ));
    T* S = buf;                      // (kBlockQ, kBlockK) scores, then probabilities
    T* acc = S + kBlockQ * kBlockK;  // (kBlockQ, D) unnormalised output
    T* m = acc + kBlockQ * D;        // (kBlockQ) running max
    T* l = m + kBlockQ;              // (kBlockQ) running sum
    std::fill(acc, acc + nq * D, T(0));
    // With a sink the row starts at its logit: m = sinks[h], l = exp(sinks[h] - m) = 1.
    std::fill(m, m + nq, sinks ? sinks[bh % H] : kNegInf);
    std::fill(l, l + nq, sinks ? T(1) : T(0));

    const int64_t kend = p.key_end(i0, nq);
    for (int64_t j0 = 0; j0 < kend; j0 += kBlockK) {
      const int64_t nk = std::min(kBlockK, kend - j0);
      score_tile(p, bh, i0, nq, j0, nk, S);
      for (int64_t ii = 0; ii < nq; ++ii) {
        T* row = S + ii * kBlockK;
        const int64_t nv = p.n_valid(i0 + ii, j0, nk);
        if (nv == 0) {
          std::fill(row, row + nk, T(0));
          continue;
        }
        const T m_new = nan_max(m[ii], nan_row_max(row, nv));
        // 0 on the first visit (m = -inf; m_new is finite unless a score is +-inf or NaN, and then
        // the row is NaN, as softmax's).
        const T alpha = std::exp(m[ii] - m_new);
        const T sum = exp_shift_sum(row, nv, m_new, T(0));
        std::fill(row + nv, row + nk, T(0));
        l[ii] = l[ii] * alpha + sum;
        m[ii] = m_new;
        if (alpha != T(1)) {
          T* a = acc + ii * D;
          for (int64_t e = 0; e < D; ++e) a[e] *= alpha;
        }
      }
      // acc (nq, D) += P (nq, nk) V[j0:j0+nk] (nk, D)
      gemm_tile_causal<T>(acc, S, v + at(st.v, bh, H) + j0 * st.v.row, nq, D, nk, D, kBlockK, st.v.row, false, false,
                          T(1), T(1), p.skip(CausalSkip::terms_up_to), p.diag(i0, j0));
    }
    for (int64_t ii = 0; ii < nq; ++ii) {
      T* out = o + at(st.o, bh, H) + (i0 + ii) * st.o.row;
      T* st = stats + 2 * (bh * Tq + i0 + ii);
      if (l[ii] == T(0)) {  // no key (and no sink) visible: output 0, stats (-inf, -inf) (backward skips the row)
        std::fill(out, out + D, T(0));
        st[0] = st[1] = kNegInf;
        continue;
      }
      const T inv = T(1) / l[ii];
      const T* a = acc + ii * D;
      for (int64_t e = 0; e < D; ++e) out[e] = a[e] * inv;
      st[0] = m[ii];
      st[1] = std::log(l[ii]);
    }
  };
  for_head_shares(B * H * nqb, B * H * Tq * Tk * D > kParallelWork, one_task);
}

template <typename T>
void backward_impl(T* dq, T* dk, T* dv, T* dbias, T* dkr, T* dqr, T* dsinks, T* scratch, const T* dout, const T* q,
                   const T* k, const T* v, const T* o, const T* stats, const T* bias, const T* kr, const T* qr,
                   const T* sinks, const int64_t* diag_u, const int64_t* rows, const int64_t* q_pos,
                   const int64_t* k_pos, int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D, int64_t U,
                   int64_t q_offset, ScoreBias kind, bool causal, T scale, const AttentionStrides& st,
                   const T* prepared, bool overwrite) {
  const int64_t nd = q_pos ? window_width(q_pos, k_pos, Tq, Tk) : Tq + Tk - 1;  // bias width
  const ScratchLayout L = scratch_layout(kind, 1, B, H, Tq, Tk, D, U, nd);
  const Problem<T> p = prepare(scratch, L, q, k, bias, kr, qr, diag_u, rows, q_pos, k_pos, B, H, Tq, Tk, D, U, q_offset,
                               kind, causal, scale, st.q, st.k, prepared);
  const T* tables = prepared ? prepared : scratch;  // krs, qrs (ContentPosition)
  T* delta = scratch + L.delta;
  T* ddiag = (kind == ScoreBias::Distance && dbias) ? scratch + L.ddiag : nullptr;
  const bool content_position = kind == ScoreBias::ContentPosition;
  // dc2p is needed for dq and dkr, dp2c for dk and dqr.
  T* dc2p = content_position && kr && (dq || dkr) ? scratch + L.dc2p : nullptr;
  T* dp2c = content_position && qr && (dk || dqr) ? scratch + L.dp2c : nullptr;
  // Dense: dS summed over the batch straight into dbias[h] (the caller zeroed it or holds a sum).
  T* ddense = (kind == ScoreBias::Dense && dbias) ? dbias : nullptr;
  // Separable: row sums of dS into dbias[bh, i], column sums into dbias[bh, Tq + j].
  T* dsep = (kind == ScoreBias::Separable && dbias) ? dbias : nullptr;
  const bool want_ds = dq || dk || ddiag || dc2p || dp2c || ddense || dsep;
  T* dsink_part = scratch + L.dsink;  // (B, H)

  // The work of one (b, h): it owns the (b, h) slices of dq, dk, dv and of the scratch, and (Dense)
  // adds into dbias[h], which the callers below give one thread per head.
  auto one_head = [&](int64_t bh) {
    const FlushDenormals ftz;  // P and its products with dO, V and K (denormals.h)
    const int64_t h = bh % H;
    T* buf = thread_buffer<T>(static_cast<size_t>(2 * kBlockQ * kBlockK));
    T* P = buf;                               // (kBlockQ, kBlockK) probabilities
    T* dS = P + kBlockQ * kBlockK;            // (kBlockQ, kBlockK) dP, then dS in place
    const T* dO = dout + at(st.dout, bh, H);  // rows st.dout.row apart
    const T* Ob = o + at(st.o, bh, H);        // rows st.o.row apart
    T* dqb = dq ? dq + at(st.dq, bh, H) : nullptr;
    T* dkb = dk ? dk + at(st.dk, bh, H) : nullptr;
    T* dvb = dv ? dv + at(st.dv, bh, H) : nullptr;
    if (overwrite) {  // this (b, h)'s rows, zeroed by the thread that accumulates into them
      for (int64_t i = 0; dqb && i < Tq; ++i) std::fill(dqb + i * st.dq.row, dqb + i * st.dq.row + D, T(0));
      for (int64_t j = 0; dkb && j < Tk; ++j) std::fill(dkb + j * st.dk.row, dkb + j * st.dk.row + D, T(0));
      for (int64_t j = 0; dvb && j < Tk; ++j) std::fill(dvb + j * st.dv.row, dvb + j * st.dv.row + D, T(0));
    }
    const T* sb = stats + 2 * bh * Tq;  // (Tq, 2): (m, log l) per row
    T* db = delta + bh * Tq;
    // delta_i = dO_i . O_i = sum_j P_ij dP_ij (the softmax-backward row term).
    for (int64_t i = 0; i < Tq; ++i) {
      T s = 0;
      for (int64_t e = 0; e < D; ++e) s += dO[i * st.dout.row + e] * Ob[i * st.o.row + e];
      db[i] = s;
    }
    // Sink: the partial -sum_i P_sink,i delta_i of this (b, h), P_sink,i = exp((sinks[h] - m_i) - log l_i).
    if (dsinks && sinks) {
      T part = 0;
      for (int64_t i = 0; i < Tq; ++i) part += std::exp((sinks[h] - sb[2 * i]) - sb[2 * i + 1]) * db[i];
      dsink_part[bh] = -part;
    }
    T* ddg = ddiag ? ddiag + bh * nd : nullptr;
    T* dcb = dc2p ? dc2p + bh * Tq * U : nullptr;
    T* dpb = dp2c ? dp2c + bh * Tk * U : nullptr;
    if (ddg) std::fill(ddg, ddg + nd, T(0));
    if (dcb) std::fill(dcb, dcb + Tq * U, T(0));
    if (dpb) std::fill(dpb, dpb + Tk * U, T(0));

    for (int64_t j0 = 0; j0 < Tk; j0 += kBlockK) {
      const int64_t nk = std::min(kBlockK, Tk - j0);
      for (int64_t i0 = p.query_begin(j0); i0 < Tq; i0 += kBlockQ) {
        const int64_t nq = std::min(kBlockQ, Tq - i0);
        score_tile(p, bh, i0, nq, j0, nk, P);
        for (int64_t ii = 0; ii < nq; ++ii) {
          T* row = P + ii * kBlockK;
          const int64_t nv = p.n_valid(i0 + ii, j0, nk);
          exp_shift_sum(row, nv, sb[2 * (i0 + ii)], sb[2 * (i0 + ii) + 1]);
          std::fill(row + nv, row + nk, T(0));
        }
        // dV[j0:] (nk, D) += P^T dO[i0:]
        // The masked parts of the tile products are left out (gemm_tile.h): with key j as row, P^T and
        // dS^T hold zeros before query j - diag.
        const int64_t diag = p.diag(i0, j0);
        if (dv)
          gemm_tile_causal<T>(dvb + j0 * st.dv.row, P, dO + i0 * st.dout.row, nk, D, nq, st.dv.row, kBlockK,
                              st.dout.row, true, false, T(1), T(1), p.skip(CausalSkip::terms_from), diag);
        if (!want_ds) continue;
        // dP (nq, nk) = dO[i0:] V[j0:]^T, then dS = P (dP - delta) in place; masked entries of dS are
        // +0 (dP there is not computed).
        gemm_tile_causal<T>(dS, dO + i0 * st.dout.row, v + at(st.v, bh, H) + j0 * st.v.row, nq, nk, D, kBlockK,
                            st.dout.row, st.v.row, false, true, T(1), T(0), p.skip(CausalSkip::columns), diag);
        for (int64_t ii = 0; ii < nq; ++ii) {
          T* drow = dS + ii * kBlockK;
          const T* prow = P + ii * kBlockK;
          const T di = db[i0 + ii];
          const int64_t nv = p.n_valid(i0 + ii, j0, nk);
          for (int64_t jj = 0; jj < nv; ++jj) drow[jj] = prow[jj] * (drow[jj] - di);
          std::fill(drow + nv, drow + nk, T(0));
        }
        // dK[j0:] += scale dS^T Q[i0:],  dQ[i0:] += scale dS K[j0:]
        if (dk)
          gemm_tile_causal<T>(dkb + j0 * st.dk.row, dS, p.q_row(bh, i0), nk, D, nq, st.dk.row, kBlockK, st.q.row, true,
                              false, scale, T(1), p.skip(CausalSkip::terms_from), diag);
        if (dq)
          gemm_tile_causal<T>(dqb + i0 * st.dq.row, dS, p.k_row(bh, j0), nq, D, nk, st.dq.row, kBlockK, st.k.row, false,
                              false, scale, T(1), p.skip(CausalSkip::terms_up_to), diag);
        if (ddg && q_pos) {  // Distance, per-token positions: dS into entry k_pos[j] - q_pos[i] + wq
          const int64_t* kp = k_pos + j0;
          for (int64_t ii = 0; ii < nq; ++ii) {
            T* dst = ddg + (p.wq - q_pos[i0 + ii]);
            const T* src = dS + ii * kBlockK;
            for (int64_t jj = 0; jj < nk; ++jj) dst[kp[jj]] += src[jj];
          }
        } else if (ddg) {  // Distance: reduce dS along diagonals (spec §1.4)
          for (int64_t ii = 0; ii < nq; ++ii) {
            T* dst = ddg + (j0 - (i0 + ii) + Tq - 1);
            const T* src = dS + ii * kBlockK;
            for (int64_t jj = 0; jj < nk; ++jj) dst[jj] += src[jj];
          }
        } else if (dsep) {  // Separable: row and column sums of dS (masked entries are 0)
          T* da = dsep + bh * (Tq + Tk);
          T* dc = da + Tq + j0;
          for (int64_t ii = 0; ii < nq; ++ii) {
            const T* src = dS + ii * kBlockK;
            T rs = 0;
            for (int64_t jj = 0; jj < nk; ++jj) {
              rs += src[jj];
              dc[jj] += src[jj];
            }
            da[i0 + ii] += rs;
          }
        } else if (ddense) {  // Dense: dS into row i of dbias[h] (masked entries of dS are 0)
          for (int64_t ii = 0; ii < nq; ++ii) {
            T* dst = ddense + (h * Tq + i0 + ii) * Tk + j0;
            const T* src = dS + ii * kBlockK;
            for (int64_t jj = 0; jj < nk; ++jj) dst[jj] += src[jj];
          }
        }
        if (dcb || dpb) {  // ContentPosition: scatter dS into the rows it came from (spec §2.5)
          for (int64_t ii = 0; ii < nq; ++ii) {
            const int64_t i = i0 + ii;
            const T* src = dS + ii * kBlockK;
            if (q_pos) {  // per-token positions: compact row diag_u[k_pos[j] - q_pos[i] + wq]
              const int64_t* du = diag_u + (p.wq - q_pos[i]);
              const int64_t* kp = k_pos + j0;
              if (dcb) {
                T* dst = dcb + i * U;
                for (int64_t jj = 0; jj < nk; ++jj) dst[du[kp[jj]]] += src[jj];
              }
              if (dpb) {
                T* dst = dpb + j0 * U;
                for (int64_t jj = 0; jj < nk; ++jj) dst[jj * U + du[kp[jj]]] += src[jj];
              }
              continue;
            }
            const int64_t* du = diag_u + (j0 - i + Tq - 1);
            if (dcb) {
              T* dst = dcb + i * U;
              for (int64_t jj = 0; jj < nk; ++jj) dst[du[jj]] += src[jj];
            }
            if (dpb) {
              T* dst = dpb + j0 * U;
              for (int64_t jj = 0; jj < nk; ++jj) dst[jj * U + du[jj]] += src[jj];
            }
          }
        }
      }
    }
    // DeBERTa: dQ += scale dc2p Kr,  dK += scale dp2c Qr  (rows gathered per head).
    if (dcb && dq) gemm<T>(dqb, dcb, tables + L.krs + h * U * D, Tq, D, U, st.dq.row, U, D, false, false, scale, T(1));
    if (dpb && dk) gemm<T>(dkb, dpb, tables + L.qrs + h * U * D, Tk, D, U, st.dk.row, U, D, false, false, scale, T(1));
  };
  if (ddense) {  // one thread per head, its batch in order: dbias[h] has one writer
#pragma omp parallel for schedule(dynamic, 1) if (B * H * Tq * Tk * D > kParallelWork)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t b = 0; b < B; ++b) one_head(b * H + h);
  } else {
    // Contiguous shares of the heads with stealing, as in the forward pass.
    for_head_shares(B * H, B * H * Tq * Tk * D > kParallelWork, one_head);
  }

  // Sink gradient: the (b, h) partials summed over b in order.
  if (dsinks && sinks)
    for (int64_t h = 0; h < H; ++h) {
      T g = 0;
      for (int64_t b = 0; b < B; ++b) g += dsink_part[b * H + h];
      dsinks[h] += g;
    }
  // Bias gradient: one thread per head, batches summed in a fixed order.
  if (ddiag) {
#pragma omp parallel for schedule(static) if (B * H * nd > kParallelWork)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t d = 0; d < nd; ++d) dbias[h * nd + d] += ddiag[(b * H + h) * nd + d];
  }
  const bool need_dkr = dc2p && dkr, need_dqr = dp2c && dqr;
  if (need_dkr || need_dqr) {
    T* dkrs = scratch + L.dkrs;
    T* dqrs = scratch + L.dqrs;
#pragma omp parallel for schedule(static) if (B * H * (Tq + Tk) * U * D > kParallelWork)
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t b = 0; b < B; ++b) {
        const int64_t bh = b * H + h;
        const T beta = b == 0 ? T(0) : T(1);
        // dKr (U, D) += scale dc2p^T Q;  dQr (U, D) += scale dp2c^T K
        if (need_dkr)
          gemm<T>(dkrs + h * U * D, dc2p + bh * Tq * U, p.q_row(bh, 0), U, D, Tq, D, U, st.q.row, true, false, scale,
                  beta);
        if (need_dqr)
          gemm<T>(dqrs + h * U * D, dp2c + bh * Tk * U, p.k_row(bh, 0), U, D, Tk, D, U, st.k.row, true, false, scale,
                  beta);
      }
      for (int64_t u = 0; u < U; ++u)
        for (int64_t e = 0; e < D; ++e) {
          if (need_dkr) dkr[(rows[u] * H + h) * D + e] += dkrs[(h * U + u) * D + e];
          if (need_dqr) dqr[(rows[u] * H + h) * D + e] += dqrs[(h * U + u) * D + e];
        }
    }
  }
}

}  // namespace

template <typename T>
void attention_diagonal_sums(T* prob_sum, T* scratch, const T* q, const T* k, const T* stats, const T* bias,
                             const T* kr, const T* qr, const int64_t* diag_u, const int64_t* rows, int64_t B, int64_t H,
                             int64_t Tq, int64_t Tk, int64_t D, int64_t U, int64_t q_offset, ScoreBias kind,
                             bool causal, T scale) {
  const ScratchLayout L = scratch_layout(kind, 2, B, H, Tq, Tk, D, U, checked_add(Tq, Tk, "attention scratch") - 1);
  const AttentionStrides st = dense_strides(H, Tq, Tk, D);
  const Problem<T> p =
      prepare(scratch, L, q, k, bias, kr, qr, diag_u, rows, static_cast<const int64_t*>(nullptr),
              static_cast<const int64_t*>(nullptr), B, H, Tq, Tk, D, U, q_offset, kind, causal, scale, st.q, st.k);
  const int64_t nd = Tq + Tk - 1;
  T* sums = scratch + L.sums;
#pragma omp parallel for schedule(dynamic, 1) if (B * H * Tq * Tk * D > kParallelWork)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const FlushDenormals ftz;  // as in the forward pass (denormals.h)
    T* P = thread_buffer<T>(static_cast<size_t>(kBlockQ * kBlockK));
    T* dst = sums + bh * nd;
    std::fill(dst, dst + nd, T(0));
    for (int64_t i0 = 0; i0 < Tq; i0 += kBlockQ) {
      const int64_t nq = std::min(kBlockQ, Tq - i0);
      const int64_t kend = p.key_end(i0, nq);
      for (int64_t j0 = 0; j0 < kend; j0 += kBlockK) {
        const int64_t nk = std::min(kBlockK, kend - j0);
        score_tile(p, bh, i0, nq, j0, nk, P);
        for (int64_t ii = 0; ii < nq; ++ii) {
          const int64_t i = i0 + ii, nv = p.n_valid(i, j0, nk);
          const T mi = stats[2 * (bh * Tq + i)], lsi = stats[2 * (bh * Tq + i) + 1];
          T* drow = dst + (j0 - i + Tq - 1);
          const T* row = P + ii * kBlockK;
          for (int64_t jj = 0; jj < nv; ++jj) drow[jj] += std::exp((row[jj] - mi) - lsi);
        }
      }
    }
  }
#pragma omp parallel for schedule(static) if (B * H * nd > kParallelWork)
  for (int64_t h = 0; h < H; ++h)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t d = 0; d < nd; ++d) prob_sum[h * nd + d] += sums[(b * H + h) * nd + d];
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
                                           int64_t, int64_t, int64_t, ScoreBias, bool, T);                             \
  template void attention_forward_strided<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, const T*,   \
                                             const T*, const int64_t*, const int64_t*, const int64_t*, const int64_t*, \
                                             int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, ScoreBias, \
                                             bool, T, const AttentionStrides&);                                        \
  template void attention_backward_strided<T>(                                                                         \
      T*, T*, T*, T*, T*, T*, T*, T*, const T*, const T*, const T*, const T*, const T*, const T*, const T*, const T*,  \
      const T*, const T*, const int64_t*, const int64_t*, const int64_t*, const int64_t*, int64_t, int64_t, int64_t,   \
      int64_t, int64_t, int64_t, int64_t, ScoreBias, bool, T, const AttentionStrides&, const T*, bool);
POSGRAD_ATTENTION_INST(float)
POSGRAD_ATTENTION_INST(double)
#undef POSGRAD_ATTENTION_INST

}  // namespace posgrad::kernels::cpu
