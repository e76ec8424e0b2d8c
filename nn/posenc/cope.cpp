// cope.cpp — Contextual Position Encoding (Golovneva, Wang, Weston, Sukhbaatar, "Contextual Position
// Encoding: Learning to Count What's Important", arXiv 2405.18719 §3; facebookresearch/RAM
// projects/cope/src/cope/context_position.py, ContextPosSelfAttn; SPEC-positions-2 §8). Positions are
// counts of gated keys: query i gates every key j <= i by g_ij = sigmoid(q_i.k_j / sqrt(d)), the
// position of key j is the suffix sum p_ij = sum_{t=j..i} g_it, and the positional logit interpolates
// z_i[p] = q_i . E[:, p] between floor(p) and ceil(p) (p clamped to P - 1):
//     S_ij = (q_i.k_j + w z_i[ceil p] + (1 - w) z_i[floor p]) / sqrt(d),   w = p - floor p
// (the reference code's placement of 1/sqrt(d), SPEC-2 §8.3; cope_nodiv: S = q.k/sqrt(d) + l).
//
// Kernels: the gates need the whole row of scores before the softmax, so no fused case expresses
// CoPE (SPEC-2 §0.2, K4). Its op, cope_scores, materialises the (B, H, T, T) logits with its own
// explicit backward (SPEC-2 §8.4: the interpolation weight carries the only gradient into the gates,
// a prefix sum along the keys is the transpose of the suffix sum, the clamp passes the gradient at
// equality), and the attention softmaxes them with ordinary ops (ScoreModifier::scores). The products
// a = q k^T and z = q E come from matmul (the GEMM) in q's dtype; the gating, counting and
// interpolation run in that dtype too (float32 as RAM's reference does in the model's dtype; float64
// for the gradchecks), over a's buffer, in tensor/kernels/cpu/cope.cpp. The backward recomputes them from q, k and E
// rather than storing them: O(B H T^2) memory either way.
//
// Parameters, per layer l: cope_E_<l> (D, P), shared by the heads of the layer and initialised to 0
// (CoPE starts as NoPE). P = cope_positions, by default the training context + 1 (position 0 to T).
// Causal only (RAM's bidirectional path counts to the row's end: not relative to i; refused), CPU only,
// no key/value cache (the gates of a new query are over all the cached keys: generation recomputes the
// window), no position ids (its positions come from the content).
#include <algorithm>
#include <cmath>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/registry.h"
#include "nn/posenc/position_encoding.h"
#include "tensor/kernels/kernels.h"

namespace posgrad::nn {

namespace {

struct Sizes {
  int64_t BH, T, D, P;
};

// The products of one call, by matmul in q's dtype (the O(T^2 D) work): a = q k^T (B, H, T, T) and
// z = q E (B, H, T, P), contiguous and owned by the caller (the forward overwrites a with the logits).
struct Products {
  Tensor a, z;
};
Products products(const Tensor& q, const Tensor& k, const Tensor& E) {
  NoGradGuard guard;
  return {matmul(q, k.transpose(-2, -1)).contiguous(), matmul(q, E).contiguous()};
}

struct CopeScoresFn : Function<CopeScoresFn> {
  static constexpr const char* kName = "cope_scores";
  struct Saved {
    Tensor q, k, E;
    double scale = 1, pos_scale = 1;
  };
  static Tensor forward(Context<Saved>& ctx, const Tensor& q, const Tensor& k, const Tensor& E, double scale,
                        bool nodiv) {
    POSGRAD_CHECK(q.dim() == 4 && q.shape() == k.shape(), ShapeError,
                  "cope_scores: q and k must be the same (B, H, T, D), got ", shape_str(q.shape()), ", ",
                  shape_str(k.shape()));
    POSGRAD_CHECK(E.dim() == 2 && E.size(0) == q.size(3) && E.size(1) >= 1, ShapeError,
                  "cope_scores: E must be (D = ", q.size(3), ", P >= 1), got ", shape_str(E.shape()));
    POSGRAD_CHECK(is_floating(q.dtype()) && k.dtype() == q.dtype() && E.dtype() == q.dtype(), DTypeError,
                  "cope_scores: q, k, E must share one floating dtype, got ", q.str(), ", ", k.str(), ", ", E.str());
    POSGRAD_CHECK(!q.device().is_cuda() && !k.device().is_cuda() && !E.device().is_cuda(), DeviceError,
                  "cope_scores: no CUDA kernel (CoPE runs on the CPU: --device cpu)");
    POSGRAD_CHECK(std::isfinite(scale), ValueError, "cope_scores: scale must be finite, got ", scale);
    const int64_t B = q.size(0), H = q.size(1), T = q.size(2);
    const int64_t entries = kernels::checked_elems({B, H, T, T}, "cope_scores");
    POSGRAD_CHECK(entries <= kCopeMaxScoreEntries, ValueError, "CoPE materialises the (B, H, T, T) = (", B, ", ", H,
                  ", ", T, ", ", T, ") attention logits: ", entries, " entries exceed its limit of ",
                  kCopeMaxScoreEntries,
                  " per layer (2^27, about 0.5 GiB per float32 copy); use a shorter "
                  "sequence or a smaller batch");
    ctx.saved = {save_tensor(q), save_tensor(k), save_tensor(E), scale, nodiv ? 1.0 : scale};
    const Sizes n{B * H, T, q.size(3), E.size(1)};
    Products pr = products(q, k, E);
    dispatch_floating(q.dtype(), kName, [&](auto tag) {
      using Tp = decltype(tag);
      kernels::cpu::cope_forward<Tp>(pr.a.data<Tp>(), pr.z.data<Tp>(), n.BH, n.T, n.P, static_cast<Tp>(scale),
                                     static_cast<Tp>(ctx.saved.pos_scale));
    });
    return pr.a;
  }

  // The gradients of a and z by the O(T^2) loops (SPEC-2 §8.4, tensor/kernels/cpu/cope.cpp), then dq = da k + dz E^T,
  // dk = da^T q and dE = sum_{b,h} q^T dz by matmul.
  static TensorList backward(Context<Saved>& ctx, const TensorList& grads) {
    const Saved& sv = ctx.saved;
    const int64_t B = sv.q.size(0), H = sv.q.size(1), T = sv.q.size(2);
    const Sizes n{B * H, T, sv.q.size(3), sv.E.size(1)};
    const Products pr = products(sv.q, sv.k, sv.E);
    const DType dt = sv.q.dtype();
    const Tensor dS = grads[0].contiguous();
    Tensor dA = Tensor::empty({B, H, T, T}, dt), dZ = Tensor::zeros({B, H, T, n.P}, dt);
    dispatch_floating(dt, kName, [&](auto tag) {
      using Tp = decltype(tag);
      kernels::cpu::cope_backward<Tp>(dA.data<Tp>(), dZ.data<Tp>(), pr.a.data<Tp>(), pr.z.data<Tp>(), dS.data<Tp>(),
                                      n.BH, n.T, n.P, static_cast<Tp>(sv.scale), static_cast<Tp>(sv.pos_scale));
    });
    NoGradGuard guard;
    Tensor dq, dk, dE;
    if (ctx.needs(0)) dq = matmul(dA, sv.k) + matmul(dZ, sv.E.t());
    if (ctx.needs(1)) dk = matmul(dA.transpose(-2, -1), sv.q);
    if (ctx.needs(2)) dE = matmul(sv.q.reshape({n.BH * T, n.D}).t(), dZ.reshape({n.BH * T, n.P}));
    return {dq, dk, dE};
  }
};

}  // namespace

Tensor cope_scores(const Tensor& q, const Tensor& k, const Tensor& E, double scale, bool nodiv) {
  return CopeScoresFn::apply(q, k, E, scale, nodiv);
}

namespace {

class CopeEncoding : public PositionEncoding {
 public:
  CopeEncoding(const PosEncConfig& cfg, Generator&) {
    causal_ = cfg.causal;
    POSGRAD_CHECK(causal_, ValueError,
                  "CoPE is causal only (its positions count the gated keys j..i; bidirectionally they would run to "
                  "the row's end)");
    const int64_t P = cfg.options.integer("cope_positions");
    npos_ = P > 0 ? P : cfg.block_size + 1;
    nodiv_ = cfg.options.boolean("cope_nodiv");
    const int64_t D = cfg.n_embd / cfg.n_head;
    for (int64_t l = 0; l < cfg.n_layer; ++l)
      E_.push_back(register_parameter("cope_E_" + std::to_string(l), Tensor::zeros({D, npos_}, cfg.dtype)));
  }
  std::string kind() const override { return "cope"; }
  ScoreModifier scores(int64_t layer, const LayerProjections& proj, int64_t Tq, int64_t Tk, int64_t q_offset) override {
    const int64_t n = static_cast<int64_t>(E_.size());
    POSGRAD_CHECK(layer >= 0 && layer < n, IndexError, "CoPE position encoding: layer ", layer, " out of range (", n,
                  " layers)");
    POSGRAD_CHECK(proj.q.defined() && proj.k.defined(), ValueError,
                  "CoPE scores: the gates read the layer's queries and keys; the attention layer passes them "
                  "(LayerProjections::q, k)");
    POSGRAD_CHECK(Tq == Tk && q_offset == 0 && proj.q.dim() == 4 && proj.q.size(2) == Tq, ShapeError,
                  "CoPE scores: a whole window of queries and keys (Tq = Tk = T, no query offset), got Tq = ", Tq,
                  ", Tk = ", Tk, ", q_offset = ", q_offset, ", q ", shape_str(proj.q.shape()),
                  " (no key/value cache: every step recomputes the window)");
    ScoreModifier m;
    m.scores = cope_scores(proj.q, proj.k, E_[layer], attention_scale(proj.q.size(3)), nodiv_);
    return m;
  }
  bool supports_kv_cache() const override { return false; }

 private:
  int64_t npos_ = 0;
  bool nodiv_ = false;
  std::vector<Tensor> E_;  // (D, P) per layer
};

// The logits of SPEC-2 §8.3 written naively in double from host copies, for batch-head bh.
std::vector<double> naive_cope_logits(const std::vector<double>& q, const std::vector<double>& k,
                                      const std::vector<double>& E, int64_t BH, int64_t T, int64_t D, int64_t P,
                                      double scale, bool nodiv) {
  std::vector<double> S(static_cast<size_t>(BH * T * T), 0.0);
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t i = 0; i < T; ++i) {
      auto dot = [&](int64_t j) {
        double s = 0;
        for (int64_t e = 0; e < D; ++e) s += q[(bh * T + i) * D + e] * k[(bh * T + j) * D + e];
        return s;
      };
      auto z = [&](int64_t p) {
        double s = 0;
        for (int64_t e = 0; e < D; ++e) s += q[(bh * T + i) * D + e] * E[e * P + p];
        return s;
      };
      for (int64_t j = 0; j <= i; ++j) {
        double p = 0;
        for (int64_t t = j; t <= i; ++t) p += 1.0 / (1.0 + std::exp(-dot(t) * scale));
        p = std::min(p, double(P - 1));
        const double f = std::floor(p), c = std::ceil(p), w = p - f;
        const double l = w * z(static_cast<int64_t>(c)) + (1 - w) * z(static_cast<int64_t>(f));
        S[(bh * T + i) * T + j] = dot(j) * scale + l * (nodiv ? 1.0 : scale);
      }
    }
  return S;
}

// Op-registry cases: the logits op against the naive formula (P small enough for the clamp to act,
// and large enough that it does not; the cope_nodiv placement), and the whole attention through the
// materialising path, with and without sinks, against naive attention with the positional logit
// added as a bias.
void cope_op_cases(std::vector<OpCase>& out) {
  struct ScoresCase {
    std::string name;
    Shape q;
    int64_t P;
    bool nodiv;
  };
  for (const ScoresCase& sc : std::vector<ScoresCase>{{"scores/1x2x5x4_P4", {1, 2, 5, 4}, 4, false},
                                                      {"scores/2x2x9x3_P16", {2, 2, 9, 3}, 16, false},
                                                      {"scores/1x3x7x4_P3_nodiv", {1, 3, 7, 4}, 3, true}}) {
    OpCase c;
    c.name = "posenc/cope/" + sc.name;
    const Shape qs = sc.q;
    const int64_t P = sc.P;
    const bool nodiv = sc.nodiv;
    const double scale = 1.0 / std::sqrt(double(qs[3]));
    c.inputs = [qs, P](Generator& g, DType t) {
      return TensorList{make_input(qs, g, t, true, -2.0, 2.0), make_input(qs, g, t, true, -2.0, 2.0),
                        make_input({qs[3], P}, g, t)};
    };
    c.fn = [scale, nodiv](const TensorList& x) { return cope_scores(x[0], x[1], x[2], scale, nodiv); };
    c.reference = [qs, P, scale, nodiv](const TensorList& x) {
      return Tensor::from_vector(
          naive_cope_logits(host(x[0]), host(x[1]), host(x[2]), qs[0] * qs[1], qs[2], qs[3], P, scale, nodiv),
          {qs[0], qs[1], qs[2], qs[2]}, DType::Float64);
    };
    c.cuda = false;
    out.push_back(c);
  }
  for (const bool sinks : {false, true}) {
    AttentionCase ac;
    ac.name = std::string("posenc/cope/causal/2x2x7x3_P5") + (sinks ? "_sinks" : "");
    ac.q = ac.k = {2, 2, 7, 3};
    ac.causal = true;
    ac.sinks = sinks;
    const int64_t P = 5, BH = 4, T = 7, D = 3;
    const double scale = 1.0 / std::sqrt(3.0);
    ac.extra_inputs = [=](Generator& gen, DType t) { return TensorList{make_input({D, P}, gen, t)}; };
    ac.modifier = [=](const TensorList& x) {
      ScoreModifier m;
      m.scores = cope_scores(x[0], x[1], x[3], scale, false);
      return m;
    };
    ac.reference_bias = [=](const TensorList& x) -> AttentionBiasFn {
      const std::vector<double> qh = host(x[0]), kh = host(x[1]);
      std::vector<double> S = naive_cope_logits(qh, kh, host(x[3]), BH, T, D, P, scale, false);
      // naive_attention adds scale q.k itself: the bias is the positional part alone.
      const std::vector<double> content =
          naive_cope_logits(qh, kh, std::vector<double>(D * P, 0.0), BH, T, D, P, scale, false);
      for (size_t i = 0; i < S.size(); ++i) S[i] -= content[i];
      return [=](int64_t b, int64_t h, int64_t i, int64_t j) { return S[((b * 2 + h) * T + i) * T + j]; };
    };
    add_attention_case(out, ac);
    out.back().cuda = false;  // cope_scores has no CUDA kernel
  }
}

}  // namespace

PosEncEntry cope_encoding() {
  using namespace opt;
  PosEncEntry e{
      "cope",
      "positions counted by learned gates, sigmoid(q.k), between key and query, their logit interpolated "
      "in a table (CoPE, Golovneva et al. 2024); causal, CPU only, materialises the (B, H, T, T) logits "
      "(at most 2^27 entries per layer)",
      [](const PosEncConfig& cfg, Generator& gen) { return std::make_shared<CopeEncoding>(cfg, gen); },
      {added_later_default(integer("cope_positions", closed(0, 1 << 20),
                                   "CoPE: P, the positions 0..P-1 of the table E (D, P) per layer; counted "
                                   "positions beyond P - 1 share its last entry (0: the training context + 1)"),
                           int64_t{0}),
       added_later_default(boolean("cope_nodiv",
                                   "CoPE: add the positional logit without the 1/sqrt(D) of "
                                   "the content logit (RAM's cope_nodiv)"),
                           false)},
      nullptr,
      cope_op_cases};
  e.causal_only = true;
  e.cpu_only = true;  // cope_scores has no CUDA kernel
  // Per (B, H, T, T) entry: cope_scores' double buffer and its float result; with the graph also the
  // masked scores, the softmax with its sink column and the probabilities kept for backward, and the
  // backward's double gradient buffer.
  e.attention_bytes = [](const PosEncConfig& cfg, int64_t B, int64_t T, bool with_graph) {
    const long double entries = static_cast<long double>(B) * cfg.n_head * T * T;
    return entries * (with_graph ? 8 + 4 * 4 + 8 : 8 + 4 * 2);
  };
  return e;
}

}  // namespace posgrad::nn
