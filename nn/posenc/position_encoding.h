// position_encoding.h — the plug-in point for position encodings (DESIGN.md §6). The model and
// the attention layer call the three hooks and never name a concrete encoding:
//   embed()  — absolute encodings add to the token embeddings (sinusoidal, learned);
//   rotate() — RoPE rotates queries and keys;
//   scores() — relative encodings modify the attention scores inside the fused attention: a bias
//              per head and distance as data (T5, ALiBi, KERPLE), or DeBERTa's c2p/p2c terms.
// Adding an encoding = one file in nn/posenc/ (its code, its options, a PosEncEntry) + its line in
// the registry (registry.cpp).
// Below the interface: the math of each encoding as free functions (bucket functions, slopes,
// frequencies, tables, score modifiers), so that tests and gradchecks can reach them directly.
// The mathematical reference is shared/SPEC-positions.md (cited as "spec §n").
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/ops/attention.h"
#include "autograd/registry.h"
#include "nn/module.h"
#include "tensor/option_table.h"
#include "tensor/random.h"

namespace posgrad::nn {

// The sizes every encoding is built for, and each encoding's own options. The options are
// declared beside each encoding's code (its PosEncEntry) with name, type, default, range and help;
// `options` holds a value for every registered encoding's options, their defaults unless set. The
// CLI flags, config.json keys and validation are generated from those declarations.
struct PosEncConfig {
  std::string kind = "learned";  // a registered kind: position_encoding_kinds()
  int64_t n_embd = 128, n_head = 4, n_layer = 4;
  int64_t block_size = 64;       // training context length (learned table size, RoPE/YaRN original length)
  bool causal = true;            // decoder (causal) or encoder (bidirectional) attention; selects T5's bucket mode
  DType dtype = DType::Float32;  // of the parameters (float64 for gradchecks)
  opt::Values options = default_position_encoding_options();

  // Sets one declared option after checking its type and range (UsageError naming it), e.g.
  // cfg.set("rope_scaling", std::string("yarn")).
  void set(const std::string& name, opt::Value v);
  // Every option value in range (UsageError naming the first that is not), then the selected
  // encoding's own checks of how its options relate (ValueError).
  void validate() const;

  static opt::Values default_position_encoding_options();
};

// The layer's query/key projections, for encodings that project positions with them
// (DeBERTa with share_att_key). Weights are (C, C) in PyTorch layout, biases (C) or undefined.
struct LayerProjections {
  Tensor w_q, b_q, w_k, b_k;
  // The layer's input x (B, T, C), the normed hidden state that feeds q, k and v (FoX's forget gates
  // read it); undefined where a caller has none.
  Tensor input;
  // The layer's queries and keys (B, H, T, D) after rotate(), as the attention receives them, for an
  // encoding that builds the whole score matrix from them (CoPE: ScoreModifier::scores); undefined
  // where a caller has none. Without a key/value cache, the window's own T keys.
  Tensor q, k;
  // The device the layer runs on: that of its weights (the CPU when none are given).
  Device device() const { return w_q.defined() ? w_q.device() : Device::cpu(); }
};

class PositionEncoding : public Module {
 public:
  virtual std::string kind() const = 0;
  // x (B, T, C) token embeddings of positions pos0 .. pos0+T-1 -> same shape.
  virtual Tensor embed(const Tensor& x, int64_t pos0) {
    (void)pos0;
    return x;
  }
  // q, k (B, H, T, D) of attention layer `layer` at positions pos0 .. pos0+T-1 -> rotated q, k (or,
  // for a per-layer choice, scaled: the hybrid encoding's NoPE-layer temperature).
  virtual std::pair<Tensor, Tensor> rotate(int64_t layer, const Tensor& q, const Tensor& k, int64_t pos0) {
    (void)layer, (void)pos0;
    return {q, k};
  }
  // Score modifier for attention layer `layer` between Tq queries at positions q_offset ..
  // q_offset + Tq - 1 and Tk keys at 0 .. Tk - 1 of one window (a forward over T tokens: Tq = Tk = T,
  // q_offset 0; a step with a key/value cache: the new tokens against every cached key), on
  // proj.device(); the default: none. An encoding whose bias depends only on the head and the
  // relative distance returns ScoreBias::Distance with bias_by_distance (H, Tq + Tk - 1) computed by
  // ordinary ops from its parameters (diagonal_relative_positions(Tq, Tk, q_offset)); the kernels
  // need no code of its own. Relative encodings do not depend on the window's start pos0.
  virtual ScoreModifier scores(int64_t layer, const LayerProjections& proj, int64_t Tq, int64_t Tk, int64_t q_offset) {
    (void)layer, (void)proj, (void)Tq, (void)Tk, (void)q_offset;
    return {};
  }
  // Whether keys and values computed for a position stay valid as the sequence grows, so that a
  // decoder may cache them (nn::KVCache). False where the rotation of a position depends on the
  // total length (RoPE with dynamic NTK scaling); then every step recomputes the window.
  virtual bool supports_kv_cache() const { return true; }
  // Multiplier of q.k (1/sqrt(D) by default; T5 unscaled gives 1; DeBERTa 1/sqrt(D * (1 + #terms))).
  virtual double attention_scale(int64_t head_dim) const;
  // Longest sequence this encoding supports (learned: its table); -1 for unbounded.
  virtual int64_t max_length() const { return -1; }
  // Longest sequence every position of which has trained parameters, after training on sequences of
  // `trained_length` tokens starting at position 0 (no position ids): a learned table's rows past the
  // training length are never updated, so min(trained_length, max_length()) for it; -1 (every length)
  // for the encodings whose parameters are shared by all positions or that have none. Evaluations
  // report n/a beyond it (no number from an untrained position).
  virtual int64_t trained_max_length(int64_t trained_length) const {
    (void)trained_length;
    return -1;
  }
  // Causal (decoder) or bidirectional (encoder) attention, as configured.
  bool causal() const { return causal_; }

  // Randomized positions (Ruoss et al. 2023, §3), a training option. While ids are set, a forward
  // over T tokens starting at pos0 = 0 places token t at position ids[t] instead of t: the
  // absolute table row (sinusoidal, learned), the rotation angle (RoPE) of ids[t], or, for the
  // relative encodings (T5, ALiBi, KERPLE, Sandwich, DeBERTa), the relative position ids[j] - ids[i] of
  // query i and key j (scores() returns a modifier with per-token positions, ScoreModifier; the
  // fused attention then runs on the CPU only). ids must be strictly increasing and >= 0
  // (ValueError); a forward whose T differs from ids.size() or whose pos0 is not 0 — a key/value-
  // cache step among them — is a ShapeError (embed/rotate/scores name both). The ids stay in effect
  // until cleared (the caller sets them for a training batch and clears them before evaluation,
  // which then uses 0 .. T-1 and stays deterministic). ValueError when the encoding does not take
  // position ids.
  virtual void set_position_ids(std::vector<int64_t> ids);
  virtual void clear_position_ids() { position_ids_.clear(); }
  const std::vector<int64_t>& position_ids() const { return position_ids_; }
  // Whether this encoding takes position ids: every encoding that has positions (absolute tables,
  // rotations, relative biases and DeBERTa's terms); false for "none".
  virtual bool supports_position_ids() const { return false; }
  // Whether the ids reach the fused attention as per-token positions (scores(): T5, ALiBi, KERPLE,
  // DeBERTa), a path the CUDA kernels do not have: such a training forward runs on the CPU only.
  virtual bool position_ids_in_attention() const { return false; }

 protected:
  // The positions of a forward over T tokens starting at pos0: the ids while set, else pos0 .. pos0+T-1.
  std::vector<int64_t> positions(int64_t pos0, int64_t T, const char* who) const;
  // For the encodings that act through scores(): the geometry to build the modifier's bias for.
  // Without ids: (Tq, Tk, q_offset) as given. With ids: the virtual window (P, P, 0), P = ids.back()
  // + 1, after checking that the forward is one whole sequence, Tq = Tk = ids.size() and q_offset 0
  // (ShapeError naming `who` otherwise, e.g. for a key/value-cache step).
  struct ScoreWindow {
    int64_t Tq, Tk, q_offset;
  };
  ScoreWindow score_window(int64_t Tq, int64_t Tk, int64_t q_offset, const char* who) const;
  // Sets the ids as m's query and key positions (nothing while no ids are set).
  void attach_positions(ScoreModifier& m) const;
  bool causal_ = true;
  std::vector<int64_t> position_ids_;
};

// Registry. Each encoding's file defines one `PosEncEntry <kind>_encoding()` — its name, its
// factory, and the options it reads (their names start with the kind: "t5_num_buckets") — and
// registry.cpp lists those functions. make_position_encoding throws ValueError naming the kind and
// listing the known ones (also for invalid sizes: n_embd % n_head, non-positive lengths).
using PosEncFactory = std::function<std::shared_ptr<PositionEncoding>(const PosEncConfig&, Generator&)>;
struct PosEncEntry {
  std::string kind;
  std::string summary;  // one line for --help and the report: paper and what it adds
  PosEncFactory make;
  std::vector<opt::Spec> options;  // with defaults (opt::with_default)
  // Relations between the options and the sizes that no single range expresses (ValueError);
  // run by PosEncConfig::validate() before anything is built. Empty: nothing to check.
  std::function<void(const PosEncConfig&)> check;
  // The encoding's op-registry cases ("posenc/<kind>/..."): its differentiable pieces gradchecked
  // in double and checked against naive references, inside the fused attention where it acts
  // there. Empty: none (an encoding with nothing differentiable).
  std::function<void(std::vector<OpCase>&)> op_cases;
  // Defined for decoders (causal attention) only, e.g. xPos, whose scaling grows without bound
  // towards later keys (SPEC-positions-2 §6.4). PosEncConfig::validate() refuses such an encoding
  // with causal = false (ValueError naming it), and the encoder track leaves it out of its default
  // methods and refuses it by name when listed.
  bool causal_only = false;
  // Bidirectionally, its only position signal is a score bias b_h(|i - j|) of the distance alone,
  // the same on both sides of the query (ALiBi's -m|i - j|, KERPLE, Sandwich). Mirroring a window
  // (token t to position T - 1 - t) then mirrors every hidden state, so a mean-pooled encoder gives
  // a window and its reversal the same output: the encoder track's `reversed` task reads 0.5 by
  // construction, not for want of learning (compare/studies/encoder/encoder.h; tests/test_encoder.cpp
  // checks the property against this flag for every bidirectional encoding). False for NoPE, which
  // has no position signal at all (it is the order-blind control), and for every encoding whose
  // bias or rotation depends on the sign of j - i or on absolute positions.
  bool symmetric_bias = false;
  // Its attention path has no CUDA kernel (FIRE's dense bias): a CUDA forward is a DeviceError naming
  // it, and a configuration with --device cuda a UsageError before anything is built.
  bool cpu_only = false;
  // It builds other registered encodings and passes them its configuration (the hybrid encoding's
  // per-layer kinds), so their options are its options too: a comparison method's variant of it
  // (compare/method.h) may set any encoding's option, not only its own.
  bool composes = false;
  // Bytes one attention layer keeps beyond the fused kernel's O(T) for a forward over B sequences of
  // T tokens, with the graph for backward (with_graph) or without (evaluation), for the encodings whose
  // path materialises O(T^2) tensors (FIRE's dense bias and its MLP's hidden units, CoPE's logits);
  // null: none. train::estimate_memory adds it per layer to the training activations and once to
  // the evaluation batch, so that an impossible configuration is refused before anything is built.
  std::function<long double(const PosEncConfig&, int64_t B, int64_t T, bool with_graph)> attention_bytes = nullptr;
};
const std::vector<PosEncEntry>& position_encodings();
// The entry of a registered kind (ValueError naming the kind and listing the known ones otherwise).
const PosEncEntry& position_encoding_entry(const std::string& kind);
// The registered kinds that bidirectional (encoder) attention accepts: all but the causal_only ones.
std::vector<std::string> bidirectional_position_encoding_kinds();
std::shared_ptr<PositionEncoding> make_position_encoding(const PosEncConfig& cfg, Generator& gen);
std::vector<std::string> position_encoding_kinds();
// Every op case: the autograd ops' (op_registry()) then each registered encoding's, in registry
// order. The test sweep and `posgrad gradcheck` run these.
const std::vector<OpCase>& all_op_cases();
// Builder for an encoding whose bias depends only on the head and the distance: adds
// "posenc/<kind>/<geometry>" for every attention geometry of the sweep (causal and bidirectional,
// T = 1 / 7 / 33, query offsets -3 and +4 with Tk != Tq, and per-token positions with gaps — then
// the bias is built for the positions' window, bias(params, P, P, 0), and the modifier carries the
// positions; CPU only). Inputs: q, k, v, then params(gen, dtype, H);
// the fused attention gets Distance with bias(params, Tq, Tk, q_offset); the reference adds
// reference(host copies of params, h, r) at relative position r = j - i - q_offset, naively in double.
using DistanceBiasFn = std::function<Tensor(const TensorList& params, int64_t Tq, int64_t Tk, int64_t q_offset)>;
using DistanceReferenceFn = std::function<double(const std::vector<std::vector<double>>& params, int64_t h, int64_t r)>;
void add_distance_bias_cases(std::vector<OpCase>& out, const std::string& kind,
                             std::function<TensorList(Generator&, DType, int64_t H)> params, DistanceBiasFn bias,
                             DistanceReferenceFn reference);
// Every registered encoding's option specs, in registry order (group "Position encoding: <kind>";
// all fixed on resume: they define the model).
const std::vector<opt::Spec>& position_encoding_options();

// ---- sinusoidal.cpp (spec §5.1) ---------------------------------------------------------------
// Vaswani interleaved table rows pos0 .. pos0+T-1: (T, C), computed in double then cast.
Tensor sinusoidal_table(int64_t pos0, int64_t T, int64_t C, DType dtype = DType::Float32);
// The rows of the given positions (each >= 0): (positions.size(), C).
Tensor sinusoidal_table_at(const std::vector<int64_t>& positions, int64_t C, DType dtype = DType::Float32);

// ---- learned.cpp (spec §5.2) ------------------------------------------------------------------
// x (B, T, C) + table[pos0 .. pos0+T-1]; positions past the table are an IndexError.
Tensor add_learned_positions(const Tensor& x, const Tensor& table, int64_t pos0);
// x (B, T, C) + table[positions[t]] (T = positions.size(); a gather, so the gradient reaches those
// rows). IndexError for a position past the table.
Tensor add_learned_positions_at(const Tensor& x, const Tensor& table, const std::vector<int64_t>& positions);

// ---- t5.cpp (spec §1) -------------------------------------------------------------------------
// Bucket of relative position r = key - query (spec §1.2), exact integer branches first.
int64_t t5_relative_bucket(int64_t r, bool bidirectional, int64_t num_buckets = 32, int64_t max_distance = 128);
// The bucket of each diagonal's relative position, (Tq + Tk - 1) int64 ids on `device`, shared and
// read-only (cached_on_device): a model's step uploads nothing after the first.
// ValueError for invalid bucket sizes.
Tensor t5_bucket_index(bool bidirectional, int64_t num_buckets, int64_t max_distance, int64_t Tq, int64_t Tk,
                       int64_t q_offset, Device device);
// table (num_buckets, H) -> bias_by_distance (H, Tq + Tk - 1): table[bucket(r_d), h] at the relative
// position r_d of each diagonal (diagonal_relative_positions), by an embedding gather (spec §1.3).
// ShapeError for a table of the wrong shape; ValueError for invalid bucket sizes.
Tensor t5_bias_by_distance(const Tensor& table, bool bidirectional, int64_t num_buckets, int64_t max_distance,
                           int64_t Tq, int64_t Tk, int64_t q_offset = 0);
// The T5 score modifier (ScoreBias::Distance with the bias above).
ScoreModifier t5_score_modifier(const Tensor& table, bool bidirectional, int64_t num_buckets, int64_t max_distance,
                                int64_t Tq, int64_t Tk, int64_t q_offset = 0);

// ---- deberta.cpp (spec §2) --------------------------------------------------------------------
// make_log_bucket_position (spec §2.2) of rel = query - key; position_buckets <= 0: no bucketing.
int64_t deberta_log_bucket(int64_t rel, int64_t position_buckets, int64_t max_position);
// Attention span S: position_buckets if > 0 else max_relative_positions; the table has 2S rows.
int64_t deberta_span(int64_t position_buckets, int64_t max_relative_positions);
// Table row c(i,j) = clamp(bucket(i - j) + S, 0, 2S - 1) of rel = i - j (spec §2.2).
int64_t deberta_row(int64_t rel, int64_t position_buckets, int64_t max_relative_positions);
// rel_emb (2S, C) (after the optional LayerNorm) projected per layer: Kr = rel_emb W_k^T + b_k
// (c2p), Qr = rel_emb W_q^T + b_q (p2c), both (2S, H, D) (spec §2.3). An undefined weight turns
// that term off.
ScoreModifier deberta_score_modifier(const Tensor& rel_emb, const Tensor& w_k, const Tensor& b_k, const Tensor& w_q,
                                     const Tensor& b_q, int64_t n_head, int64_t position_buckets,
                                     int64_t max_relative_positions);

// ---- alibi.cpp (spec §4) ----------------------------------------------------------------------
// Slopes m_h of n_heads heads (spec §4.1); ValueError unless n_heads > 0.
std::vector<double> alibi_slopes(int64_t n_heads);
// bias_by_distance (H, Tq + Tk - 1) = -m_h |r_d| (spec §4.2), a constant in `dtype` on `device`.
Tensor alibi_bias_by_distance(const std::vector<double>& slopes, int64_t Tq, int64_t Tk, int64_t q_offset, DType dtype,
                              Device device);

// ---- xpos.cpp (xPos, Sun et al. 2023 §3; torchscale XPOS; SPEC-positions-2 §6) ---------------------
// zeta_k = (2k + 0.4 d) / (1.4 d), k < d/2 (SPEC-2 §6.2); ValueError unless d is even and >= 2.
std::vector<double> xpos_zeta(int64_t head_dim);
// The scaled rotation tables of xPos, each (T, D/2), for the RoPE op (rope(x, cos, sin, layout)):
// angle theta = n omega_k (omega_k = 10000^(-2k/D)) at position n = positions[t], times the scale
// zeta_k^((n - centre)/scale_base) for queries and its inverse for keys. Computed in double, then
// cast to dtype. ValueError for a negative position or scale_base <= 0.
struct XposTables {
  Tensor q_cos, q_sin, k_cos, k_sin;
};
XposTables xpos_tables_at(const std::vector<int64_t>& positions, double centre, int64_t head_dim, double scale_base,
                          DType dtype);
// q, k (B, H, T, D) at the given T positions -> (q', k') of SPEC-2 §6.2 (differentiable through the
// RoPE op's backward). ShapeError unless q and k share (T, D) with T = positions.size().
std::pair<Tensor, Tensor> apply_xpos(const Tensor& q, const Tensor& k, const std::vector<int64_t>& positions,
                                     double centre, double scale_base, bool interleaved);

// ---- sandwich.cpp (Sandwich, Chi et al. 2023 §5; NeMo; SPEC-positions-2 §7) --------------------
// base(r) = sum_{k=1..dbar/2} cos(|r| 10000^(-2k/dbar)) (SPEC-2 §7.2); ValueError unless dbar is even, >= 2.
double sandwich_base(int64_t r, int64_t dbar);
// NeMo's per-head scales lambda_h = H / (8 h), h = 1..H (SPEC-2 §7.2, §12.9); ValueError unless H > 0.
std::vector<double> sandwich_head_scales(int64_t n_heads);
// bias_by_distance (H, Tq + Tk - 1) = lambda_h (base(|r_d|) - dbar / 2), a constant in `dtype` on
// `device` (no parameters), each factor computed in double and rounded once.
Tensor sandwich_bias_by_distance(int64_t dbar, int64_t n_heads, int64_t Tq, int64_t Tk, int64_t q_offset, DType dtype,
                                 Device device);

// ---- kerple.cpp (KERPLE logarithmic variant, Chi et al. 2022 §4; docs/positions.md) ----------
// bias_by_distance (H, Tq + Tk - 1) = -r1_h log(1 + r2_h |r_d|) from r1, r2 (H), differentiable in
// both (ShapeError unless both are (H)). The caller keeps r1, r2 > 0.
Tensor kerple_bias_by_distance(const Tensor& r1, const Tensor& r2, int64_t Tq, int64_t Tk, int64_t q_offset = 0);

// ---- fire.cpp (FIRE, Li et al. 2024 §3; SPEC-positions-2 §1) --------------------------------------
// One layer's FIRE parameters: w1 (W, 1), b1 (W), w2 (H, W), b2 (H), c (1), m (1), and the fixed L0.
struct FireParams {
  Tensor w1, b1, w2, b2, c, m;
  double L0 = 512.0;
};
// The dense bias (H, Tq, Tk) of queries at positions qpos (Tq) and keys at kpos (Tk):
//   [h, t, j] = MLP_h( ln(|c| r + 1) / (ln(|c| max(i, L) + 1) + 1e-6) ),  i = qpos[t], r = |i - kpos[j]|,
//   L = |m L0|, MLP(u) = w2 ReLU(w1 u + b1) + b2 (spec §1.3). Differentiable in every parameter, with
//   torch's conventions at the kinks (abs'(0) = 0; max(i, L) sends half its gradient to L on a tie,
//   §1.5). Causal: entries with kpos[j] > qpos[t] are masked by the attention and hold an arbitrary
//   finite value. The MLP runs once per distinct (r, normaliser) pair. ShapeError for mismatched
//   parameter shapes or empty positions; ValueError for L0 <= 0.
Tensor fire_bias(const FireParams& p, const std::vector<int64_t>& qpos, const std::vector<int64_t>& kpos, bool causal);

// ---- fox.cpp (Forgetting Transformer, Lin et al. 2025; SPEC-positions-2 §4) -------------------------
// F (B, H, T) = the inclusive prefix sum over T of ln sigmoid(z) for gate logits z (B, H, T), computed
// stably and summed in double; differentiable (dz = sigmoid(-z) x the reverse prefix sum of dF).
// ShapeError unless 3-d; DeviceError on a CUDA device.
Tensor fox_log_forget_prefix(const Tensor& z);
// FoX's separable bias (B, H, 2T) = [F | -F] of the gates z = x w^T + b for the layer input x (B, T, C),
// w (H, C), b (H): the fused attention adds F_i - F_j (ScoreBias::Separable). ShapeError on shapes.
Tensor fox_separable_bias(const Tensor& x, const Tensor& w, const Tensor& b);

// ---- cope.cpp (CoPE, Golovneva et al. 2024 §3; RAM ContextPosSelfAttn; SPEC-positions-2 §8) --------------
// The most (B, H, T, T) entries cope_scores materialises per call (per layer): 2^27, 512 MiB per float32
// copy of the logits; the attention path holds a few such copies (scores, probabilities, gradients).
inline constexpr int64_t kCopeMaxScoreEntries = int64_t{1} << 27;
// CoPE's attention logits S (B, H, T, T) of causal self-attention from q, k (B, H, T, D) and the
// position table E (D, P) shared by the heads: a_ij = q_i.k_j, gates g_ij = sigmoid(scale a_ij) for
// j <= i, positions p_ij = sum_{t=j..i} g_it clamped to P - 1, the positional logit
// l_ij = w z_i[ceil p] + (1 - w) z_i[floor p] with z_i[p] = q_i.E[:, p] and w = p - floor p, and
// S_ij = scale (a_ij + l_ij), or scale a_ij + l_ij with nodiv (SPEC-2 §8.3, the reference code's
// placement of the scale). Entries j > i are 0 (the attention's causal mask hides them). Explicit
// backward into q, k and E (SPEC-2 §8.4): the products q k^T, q E and the gradients' by matmul, the gates,
// counts and interpolation by loops over the rows, all in q's dtype (float32 or float64); deterministic
// for any thread count (the GEMM's promise; a row's loops are serial).
// ShapeError for q, k of different shapes or E not (D, P >= 1); DTypeError for mixed dtypes;
// DeviceError on a CUDA device; ValueError for B H T^2 > kCopeMaxScoreEntries or a non-finite scale.
Tensor cope_scores(const Tensor& q, const Tensor& k, const Tensor& E, double scale, bool nodiv = false);

// ---- hybrid.cpp (per-layer encodings, iRoPE; SPEC-positions-2 §3) ----------------------------------
// Llama 4's NoPE-layer query temperature tau(p) = 1 + alpha ln(floor((p + 1) / F) + 1) at absolute
// position p >= 0 (SPEC-2 §3.3; ValueError for p < 0 or F <= 0).
double nope_temperature(int64_t p, double alpha, double floor_scale);
// The encoding of each of n_layer layers: the comma-separated `list` (one per layer; ValueError for
// the wrong count, an unknown kind, hybrid itself or an absolute table), or with an empty list the
// iRoPE rule, layer l NoPE iff (l + 1) mod interval = 0, else rope (SPEC-2 §3.2; interval >= 1).
std::vector<std::string> hybrid_layer_kinds(const std::string& list, int64_t interval, int64_t n_layer);

// ---- rope.cpp (spec §3) -----------------------------------------------------------------------
struct RopeParams {
  int64_t rotary_dim = 0;  // dr (even), channels [0, dr) of each head are rotated
  // Exponent denominator of the frequencies b^(-2k / freq_dim) and of every scaling formula; 0:
  // rotary_dim. HF's odd partial rotary (rope_partial = neox_hf) rotates rotary_dim = d_r + 1
  // channels with freq_dim = d_r (SPEC-positions-2 §2.3).
  int64_t freq_dim = 0;
  // How many frequencies are kept, the highest (k < kept_freqs); the others are 0 (angle 0: NoPE
  // pairs). -1: all. p-RoPE (SPEC-2 §2.4) rotates the whole head (rotary_dim = D) with
  // kept_freqs = floor(f D / 2).
  int64_t kept_freqs = -1;
  double base = 10000.0;
  std::string scaling = "none";                          // none|linear|ntk|dynamic|yarn|llama3
  double factor = 1.0;                                   // s
  int64_t original_length = 0;                           // Lmax / L0 (the training context)
  double beta_fast = 32.0, beta_slow = 1.0;              // YaRN
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  // Arithmetic of the angles: "fp32" computes p · omega_k in double and rounds the tables once;
  // "bf16" / "fp16" round the position, the frequency, the angle and its cos / sin to that format
  // (round to nearest even), as a half-precision implementation would (claim (k) of the comparison).
  std::string precision = "fp32";
};
// x rounded to a binary floating-point format with `significand_bits` (implicit bit included),
// smallest normal exponent min_exp (x = m 2^e, m in [1, 2)) and largest finite value max_finite:
// round to nearest, ties to even; beyond max_finite: +-inf. bf16: (8, -126, 3.3895e38); fp16: (11, -14, 65504).
double round_to_format(double x, int significand_bits, int min_exp, double max_finite);
double round_to_bf16(double x);
double round_to_fp16(double x);
struct RopeFrequencies {
  std::vector<double> inv_freq;   // (dr / 2) omega'_k
  double attention_factor = 1.0;  // multiplies cos and sin (YaRN)
};
// Frequencies for a forward over positions up to seq_len - 1 (dynamic NTK depends on it).
RopeFrequencies rope_frequencies(const RopeParams& p, int64_t seq_len);
// cos, sin (T, dr/2) for positions pos0 .. pos0+T-1: angles in double, then cast.
std::pair<Tensor, Tensor> rope_tables(const RopeParams& p, int64_t pos0, int64_t T, DType dtype);
// The same at the given positions (each >= 0; dynamic NTK reads the length as the largest + 1).
std::pair<Tensor, Tensor> rope_tables_at(const RopeParams& p, const std::vector<int64_t>& positions, DType dtype);
// Rotates x (..., T, D) at positions pos0 .. pos0+T-1.
Tensor apply_rope(const Tensor& x, const RopeParams& p, bool interleaved, int64_t pos0);
// The RoPE parameters of an encoding configuration (the "rope" kind's options at the head dim
// D = n_embd / n_head), validated: ValueError naming the option for a fraction that leaves no
// rotated pair, an odd rotary dim in the neox convention, a p-RoPE head dim that is odd, or a
// scaling the convention does not define (SPEC-positions-2 §2.2-§2.4, §2.7). rope_partial:
//   neox     HF/GPT-NeoX partial_rotary_factor: d_r = int(D f) (the double product truncated), the
//            first d_r channels rotated with their own spectrum b^(-2k/d_r); odd d_r is an error;
//   neox_hf  the same, but an odd d_r rotates d_r + 1 channels with denominator d_r, as current HF
//            GPT-NeoX does (SPEC-2 §2.3); not with YaRN (HF has no such shape);
//   prope    p-RoPE (Barbero et al. 2025; gemma rope_proportion; HF rope_type "proportional"):
//            rotate_half / interleaved over the whole head, the floor(f D / 2) highest frequencies
//            of the full-head spectrum b^(-2k/D) kept, the rest 0; scaling none or linear only.
RopeParams rope_params(const PosEncConfig& cfg);

}  // namespace posgrad::nn
