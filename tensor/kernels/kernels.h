// kernels.h — THE list of compute kernels and their contract. Autograd ops call kernels only
// through POSGRAD_KERNEL(device, name, args...), which picks the CPU or the CUDA implementation.
//
// The contract (every kernel, both backends):
//  - Kernels take raw pointers and sizes, never Tensor. They allocate nothing; scratch is passed in.
//    (Deliberate exceptions: the CPU GEMM keeps thread-local packing buffers that are grown once
//    and reused, as every BLAS does; passing them through every matmul call would leak a GEMM
//    implementation detail into autograd. The CPU sum_squares / sum_squares_multi build an index of
//    their 64 parts per tensor, O(count) small host vectors per call.)
//  - Argument order: outputs, then inputs / weights / saved statistics, then sizes, then scalars.
//  - Backward kernels ADD into every gradient output (+=); the caller zero-fills. Exceptions say so
//    (binary_backward, gelu_backward_saved: written, +0 + the product, the bits accumulating onto
//    zeros gives). A null gradient pointer means "not needed" where the comment says so.
//  - All data is contiguous row-major unless the kernel takes explicit strides.
//  - Elementwise kernels accept y == x (in place).
//  - Letters: B batch, T time, H heads, D head dim, C channels, V vocab, N rows (= B*T),
//    R reduced extent, outer/inner the extents before/after the reduced dim.
//  - The CPU and CUDA versions have the same names and signatures: kernels_decl.inc is included
//    once into namespace cpu and once into namespace cuda, so a mismatch does not compile.
//  - CPU kernels are templates instantiated for float and double so that every backward can be
//    gradchecked in double precision. Reductions use a fixed order: same inputs, same thread count
//    and same GEMM instruction-set path (gemm_internal.h; the vectorised float loops of
//    vec_kernels.h give the same bits on each of theirs) give bit-identical outputs. README
//    "Determinism" says what holds across machines.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

#include "tensor/errors.h"

namespace posgrad::kernels {

enum class UnaryOp : uint8_t {
  Neg,
  Exp,
  Log,
  Sqrt,
  Tanh,
  Relu,
  Gelu,      // exact: x * Phi(x)
  GeluTanh,  // tanh approximation (GPT-2)
  Silu,
  Pow,        // x ^ scalar
  AddScalar,  // x + scalar
  MulScalar,  // x * scalar
  ClampMin,   // max(x, scalar) with NaN kept (x < scalar ? scalar : x); gradient 1 where x >= scalar
};
const char* unary_op_name(UnaryOp op);

enum class BinaryOp : uint8_t { Add, Sub, Mul, Div };
const char* binary_op_name(BinaryOp op);

// What the fused attention kernels add to the scores q.k (kernels_decl.inc, attention_forward). The
// kernels know these three shapes of a modifier, never a position encoding by name (nn/posenc/):
//   None            nothing;
//   Distance        a bias per head and diagonal j - i, given as data (H, Tq + Tk - 1): T5's bucket
//                   table, ALiBi's slopes x distance, KERPLE's kernel, ... computed by ordinary ops;
//   ContentPosition content-to-position / position-to-content products (DeBERTa's c2p / p2c);
//   Dense           a bias per head, query and key, shared over the batch, given as data (H, Tq, Tk):
//                   a bias that depends on the query position as well as the distance (FIRE's
//                   normaliser), computed by ordinary ops. CPU only (the CUDA kernels refuse it);
//   Separable       a per-(batch, head) row term plus column term a[i] + c[j], given as data
//                   (B, H, Tq + Tk) = [a | c]: FoX's F_i - F_j (SPEC-positions-2 §0.2, K2). CPU only.
enum class ScoreBias : uint8_t { None, Distance, ContentPosition, Dense, Separable };

// Precision of the float matrix products (every float GEMM of the CPU backend: matmul, linear layers
// and the products inside the fused attention kernels). Process-wide; double products are never
// affected, so gradchecks stay in double.
//   fp32  the default: float operands, float accumulation (README "Determinism").
//   bf16  mixed precision: both operands rounded to bf16 (round to nearest even, denormals to zero) as
//         they are packed, products accumulated in float, C written in float. Activations, weights,
//         gradients and optimizer state stay float in memory; softmax, norms and reductions are not
//         GEMMs and stay float. The recipe of torch.autocast("cpu", dtype=torch.bfloat16) for its
//         matmul-class ops (PyTorch docs, "Automatic Mixed Precision", CPU op list), and of
//         torch.set_float32_matmul_precision("medium"), with outputs kept in float. On a CPU with
//         AVX512-BF16 the products use VDPBF16PS on k-pairs (Intel SDM); elsewhere the ISA's float
//         kernel multiplies the rounded values (bf16 x bf16 is exact in float). The two paths round
//         the accumulation differently; each is deterministic for a given thread count.
enum class MatmulPrecision : uint8_t { fp32, bf16 };
const char* matmul_precision_name(MatmulPrecision p);
// "fp32" or "bf16"; ValueError naming `text` and the choices otherwise.
MatmulPrecision parse_matmul_precision(const std::string& text);
// Sets / reads the process-wide precision. Do not change it while another thread runs a product.
void set_matmul_precision(MatmulPrecision p);
MatmulPrecision matmul_precision();
// Whether bf16 products use the CPU's bf16 dot-product instruction (AVX512-BF16), or round and use the
// float kernel ("converting").
const char* matmul_bf16_path();

// Sets the precision for its lifetime, then restores the previous one.
class MatmulPrecisionScope {
 public:
  explicit MatmulPrecisionScope(MatmulPrecision p) : saved_(matmul_precision()) { set_matmul_precision(p); }
  ~MatmulPrecisionScope() { set_matmul_precision(saved_); }
  MatmulPrecisionScope(const MatmulPrecisionScope&) = delete;
  MatmulPrecisionScope& operator=(const MatmulPrecisionScope&) = delete;

 private:
  MatmulPrecision saved_;
};

// The work of the CPU backend's matrix products since the process started, over all its threads, in
// FLOPs: 2 M N K per product of an (M, K) by a (K, N) operand (a multiply and an add per term, the
// count of Goto & van de Geijn 2008 and of every BLAS benchmark), tallied as each product runs, by the
// precision it ran in: fp32 (float products), bf16 (float products under MatmulPrecision::bf16), fp64
// (double products). gemm, gemm_bias and gemm_batched count their products, gemm_tile and
// gemm_tile_causal the tiles they compute (a causal tile product skips, and does not count, the
// masked blocks; under bf16 the attention's tiles run as whole gemm products, none skipped, so the same model
// counts more work than in fp32). Products with M, N or K zero, or alpha zero, count nothing; the attention kernels'
// few non-GEMM loops and the CUDA backend count nothing. So the fp32 count over the FP32 FMA peak
// (bench_gemm measures it) is a lower bound on the seconds the products needed. Counting changes no
// result. No errors.
struct MatmulWork {
  uint64_t fp32 = 0, bf16 = 0, fp64 = 0;
  // The work between two readings, `later - earlier`.
  MatmulWork operator-(const MatmulWork& earlier) const {
    return MatmulWork{fp32 - earlier.fp32, bf16 - earlier.bf16, fp64 - earlier.fp64};
  }
};
MatmulWork matmul_work();

// Shapes of a strided copy (at most kMaxDims dims).
inline constexpr int kMaxDims = 8;

// Product of non-negative sizes for sizing scratch buffers; ShapeError naming `what` and the
// factors when it overflows int64 (an impossible size must not wrap into a small buffer).
// (Portable checks, no compiler builtins: this header is also compiled by nvcc.)
inline int64_t checked_elems(std::initializer_list<int64_t> factors, const char* what) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t n = 1;
  for (int64_t f : factors) {
    POSGRAD_CHECK(f >= 0, ShapeError, what, ": negative size ", f);
    if (f != 0 && n > kMax / f) {
      std::string list;
      for (int64_t g : factors) list += (list.empty() ? "" : " x ") + std::to_string(g);
      throw ShapeError(detail::concat(what, ": scratch of ", list, " elements overflows int64"));
    }
    n *= f;
  }
  return n;
}
// a + b for non-negative element counts; ShapeError naming `what` on overflow.
inline int64_t checked_add(int64_t a, int64_t b, const char* what) {
  POSGRAD_CHECK(a >= 0 && b >= 0 && a <= std::numeric_limits<int64_t>::max() - b, ShapeError, what, ": scratch of ", a,
                " + ", b, " elements overflows int64");
  return a + b;
}

namespace cpu {
#include "tensor/kernels/kernels_decl.inc"

// ---- exact GELU that keeps erf for its backward: CPU only (cpu/elementwise.cpp) --------------------
// On the CPU the exact GELU's time is its erf, which the backward of unary_forward / unary_backward
// (UnaryOp::Gelu) evaluates a second time; the GPU is bound by memory there and keeps those. T in
// {float, double}.
//   gelu_forward_saving: y[i] = 0.5 x (1 + erf(x / sqrt 2)), the bits of unary_forward(Gelu), and
//     s[i] = 1 + erf(x / sqrt 2) = 2 Phi(x). y, s, x (n); y == x allowed, s distinct.
//   gelu_backward_saved: dx[i] = +0 + dy[i] (0.5 s[i] + x phi(x)), phi(x) = e^{-x^2/2} / sqrt(2 pi):
//     written, not accumulated, and the bits unary_backward(Gelu) leaves in a zero-filled dx (the +0
//     makes a -0 product +0 as that addition does). dx, dy, x, s (n); dx may alias dy.
// GELU(x) = x Phi(x) (Hendrycks & Gimpel 2016, "Gaussian Error Linear Units", §2); its derivative
// Phi(x) + x phi(x). float runs vec_kernels.cpp's loops (erf_approx, exp_approx), double std::erf /
// std::exp. No errors.
template <typename T>
void gelu_forward_saving(T* y, T* s, const T* x, int64_t n);
template <typename T>
void gelu_backward_saved(T* dx, const T* dy, const T* x, const T* s, int64_t n);

// ---- matmul with a bias row: CPU only (cpu/gemm.cpp) ----------------------------------------------
// C (M, N) = op(A) @ op(B) + bias, bias (N) added to every row: a linear layer's y = x W^T + b
// (PyTorch's nn.Linear). op(A), op(B), ldc, lda, ldb as gemm (kernels_decl.inc). The bits of copying
// bias into every row of C and calling gemm with alpha = 1, beta = 1 -- which is what the CUDA path of
// the linear op does -- but each tile of C gets its bias rows just before the micro-kernel reads them,
// instead of in a pass of its own over C. C is not read. No errors.
template <typename T>
void gemm_bias(T* C, const T* A, const T* B, const T* bias, int64_t M, int64_t N, int64_t K, int64_t ldc, int64_t lda,
               int64_t ldb, bool trans_a, bool trans_b);

// ---- matmul with a bias row and an addend: CPU only (cpu/gemm.cpp) ---------------------------------
// C (M, N) = addend + (op(A) @ op(B) + bias): a linear layer with its residual connection, y = r + (x W^T
// + b) (the residual stream of a pre-LN transformer block: GPT-2, Radford et al. 2019, §2.3). bias (N)
// may be null (then the product alone); addend (M, N) has row stride ld_addend and must not overlap C.
// Other arguments as gemm_bias. The bits of gemm_bias (or gemm with beta = 0) followed by the add op
// (addend + C, one rounding per element), but each tile of C gets its addend rows right after the
// micro-kernel writes its last K block, while the tile is in L1: no pass of its own over C. No errors.
template <typename T>
void gemm_bias_add(T* C, const T* A, const T* B, const T* bias, const T* addend, int64_t ld_addend, int64_t M,
                   int64_t N, int64_t K, int64_t ldc, int64_t lda, int64_t ldb, bool trans_a, bool trans_b);

// ---- norm backward writing dx: CPU only (cpu/norm.cpp) -------------------------------------------
// layer_norm_backward / rms_norm_backward (kernels_decl.inc; shapes, formulas and dw, db as there) with
// dx written instead of accumulated into: dx = 0 + (the term the accumulating kernel adds), which is
// the bits of that kernel on a zero-filled dx, without the fill (dx's previous contents, even NaN, are
// not read). The autograd ops call these on the CPU. No errors.
template <typename T>
void layer_norm_backward_overwrite(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean,
                                   const T* rstd, int64_t N, int64_t C);
template <typename T>
void rms_norm_backward_overwrite(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t N,
                                 int64_t C);

// ---- multi-tensor optimizer kernels: CPU only (cpu/optim.cpp) -------------------------------------
// A model's parameters in one thread team instead of one call per tensor (most tensors of a small model
// are below the size at which a team pays off, so per-tensor calls left the other cores idle). The same
// bits as the one-tensor kernels, for any thread count. T in {float, double}.
//   adamw_step_multi: adamw_step (kernels_decl.inc; Loshchilov & Hutter 2019, Alg. 2, in PyTorch's
//     order of operations) on tensors[0 .. count), each with its own weight decay; p, m, v, g (n) each.
//   sum_squares_multi: out[i] = sum_squares(xs[i], ns[i]) for i < count: sum of x^2 in double over 64
//     fixed parts, each summed front to back, the parts added in order. out (count).
// No errors (sizes are the caller's tensors').
template <typename T>
struct AdamWTensor {
  T* p;
  T* m;
  T* v;
  const T* g;
  int64_t n;
  T weight_decay;
};
template <typename T>
void adamw_step_multi(const AdamWTensor<T>* tensors, int64_t count, T lr, T beta1, T beta2, T eps, T bias_correction1,
                      T bias_correction2);
template <typename T>
void sum_squares_multi(double* out, const T* const* xs, const int64_t* ns, int64_t count);

// ---- fused attention at per-token positions: CPU only (cpu/attention.cpp) -------------------------
// Randomized positions (Ruoss et al. 2023, §3) for the modifiers indexed by relative position. Like
// the GELU pair above, an exception to "both backends": there is no CUDA twin, and the autograd op refuses them on a
// CUDA device before dispatch. The strided kernels below with q_pos and k_pos not null: as
// attention_forward / attention_backward (kernels_decl.inc), except:
// query i sits at position q_pos[i], key j at k_pos[j] (q_pos (Tq), k_pos (Tk), each strictly
// increasing and >= 0, checked by the caller); pair (i, j) has relative position
// r = k_pos[j] - q_pos[i] and reads entry w = r + q_pos[Tq - 1] of
//   Distance:        bias[h, w], bias (H, nw), nw = q_pos[Tq - 1] + k_pos[Tk - 1] + 1 (the diagonals
//                    of the virtual window 0..q_pos[Tq-1] x 0..k_pos[Tk-1]); dbias (H, nw) likewise;
//   ContentPosition: diag_u[w], diag_u (nw).
// The causal mask stays the index order (keys j > i hidden), which is the position order when the
// queries and keys are the same tokens (self-attention); no query offset.
// Sink logits (sinks, dsinks (H) or null) as in attention_forward / attention_backward.
// Their scratch size (pass 0 forward, 1 backward), nw the window width.
int64_t attention_positions_scratch_elems(ScoreBias kind, int pass, int64_t B, int64_t H, int64_t Tq, int64_t Tk,
                                          int64_t D, int64_t U, int64_t nw);

// ---- fused attention on strided heads: CPU only (cpu/attention.cpp) ------------------------------
// Where the rows of one (B, H, T, D) operand sit: element (b, h, t, e) at b batch + h head + t row + e
// (the last dim contiguous). A dense (B, H, T, D) tensor is {H T D, T D, D}; the q third of a linear
// layer's (B, T, 3 H D) output read as heads (split_heads' views) is {3 H D T, D, 3 H D}; an output
// written as (B, T, H, D), which merging the heads then reads as (B, T, H D) without a copy, is
// {T H D, D, H D}. The operands of one call must not overlap, except q, k, v among themselves.
struct HeadStrides {
  int64_t batch, head, row;
};
// One per operand: q, k, v; o (written by the forward, read by the backward); dout; dq, dk, dv
// (accumulated into by the backward, or written with its overwrite flag).
struct AttentionStrides {
  HeadStrides q, k, v, o, dout, dq, dk, dv;
};
// attention_forward / attention_backward (kernels_decl.inc), or with q_pos, k_pos not null at per-token
// positions (above; q_offset then ignored), on operands laid out by st: the arithmetic of the
// dense kernels element for element, so the same bits as on dense copies of the operands. The
// autograd op calls these on the CPU so that neither splitting nor merging the heads copies.
// prepared (backward, ContentPosition; else null): the scratch of the forward call on the same
// inputs, whose c2p and p2c products (and gathered table rows) the backward then reads instead of
// computing them again: the same values, two of the pass's products fewer; it must stay unchanged
// since that forward. overwrite (backward): dq, dk, dv are written instead of accumulated into (their
// previous contents, even NaN, are ignored): each (b, h)'s rows are zeroed by the thread that then
// accumulates into them, so the caller needs no zero-filled buffers; the bits of a zero-filled call.
template <typename T>
void attention_forward_strided(T* o, T* stats, T* scratch, const T* q, const T* k, const T* v, const T* bias,
                               const T* kr, const T* qr, const T* sinks, const int64_t* diag_u, const int64_t* rows,
                               const int64_t* q_pos, const int64_t* k_pos, int64_t B, int64_t H, int64_t Tq, int64_t Tk,
                               int64_t D, int64_t U, int64_t q_offset, ScoreBias kind, bool causal, T scale,
                               const AttentionStrides& st);
template <typename T>
void attention_backward_strided(T* dq, T* dk, T* dv, T* dbias, T* dkr, T* dqr, T* dsinks, T* scratch, const T* dout,
                                const T* q, const T* k, const T* v, const T* o, const T* stats, const T* bias,
                                const T* kr, const T* qr, const T* sinks, const int64_t* diag_u, const int64_t* rows,
                                const int64_t* q_pos, const int64_t* k_pos, int64_t B, int64_t H, int64_t Tq,
                                int64_t Tk, int64_t D, int64_t U, int64_t q_offset, ScoreBias kind, bool causal,
                                T scale, const AttentionStrides& st, const T* prepared = nullptr,
                                bool overwrite = false);
// rope_forward (kernels_decl.inc) of x (B, H, T, D) read through xs (split_heads' views of a (B, T, 3C)
// projection, say), writing a dense y (B, H, T, D): the bits of rope_forward on a dense copy of x, without
// the copy. No errors.
template <typename T>
void rope_forward_strided(T* y, const T* x, const HeadStrides& xs, const T* cos, const T* sin, int64_t B, int64_t H,
                          int64_t T_, int64_t D, int64_t dr, bool interleaved);
// rope_backward (kernels_decl.inc) writing dx instead of accumulating into it: dx = 0 + R(-theta) dy,
// the bits of rope_backward on a zero-filled dx, without the fill (dx's contents are not read). No errors.
template <typename T>
void rope_backward_overwrite(T* dx, const T* dy, const T* cos, const T* sin, int64_t N, int64_t T_, int64_t D,
                             int64_t dr, bool interleaved);
}  // namespace cpu

#if POSGRAD_HAVE_CUDA
namespace cuda {
#include "tensor/kernels/kernels_decl.inc"
}  // namespace cuda
#endif

[[noreturn]] void no_cuda_kernel(const char* name);

}  // namespace posgrad::kernels

#if POSGRAD_HAVE_CUDA
#define POSGRAD_KERNEL(dev, name, ...) \
  ((dev).is_cuda() ? ::posgrad::kernels::cuda::name(__VA_ARGS__) : ::posgrad::kernels::cpu::name(__VA_ARGS__))
#else
#define POSGRAD_KERNEL(dev, name, ...) \
  ((dev).is_cuda() ? ::posgrad::kernels::no_cuda_kernel(#name) : ::posgrad::kernels::cpu::name(__VA_ARGS__))
#endif
