// fire.cpp — FIRE, Functional Interpolation for Relative Positions (Li et al., "Functional
// Interpolation for Relative Positions Improves Long Context Transformers", ICLR 2024, arXiv
// 2310.04418 §3; SPEC-positions-2 §1; the paper's PyTorch listing as in mcleish7/arithmetic,
// cramming/architectures/embeddings.py, class FIRE). Head h of layer l adds to its scaled scores
//     bias_h(i, j) = MLP_h( psi(|i - j|) / (psi(max(i, L)) + eps) ),   psi(x) = ln(|c| x + 1),
//     MLP(u) = W2 ReLU(W1 u + b1) + b2   (hidden width W shared by the heads, one output per head),
//     L = |m L0|   (a learned multiplier m on a fixed L0),
// with i the query's and j the key's absolute position. Below L the normaliser is the constant
// psi(L) and the bias a function of the distance alone; beyond L every query row has its own
// normaliser ("progressive interpolation": the farthest key's normalised distance stays <= 1). That
// dependence on i makes it a dense (H, Tq, Tk) bias shared over the batch (ScoreBias::Dense), not a
// distance bias. Bidirectionally the reference's |i - j| with the query's normaliser is kept: the
// bias cannot tell left from right, and a key past 2i reads u > 1 (SPEC-2 §1.4).
//
// Cost: the MLP runs once per distinct (distance, normaliser) pair of the window, not per (b, h, i,
// j): the rows below L share one table of distances, each row beyond L has its own (about T^2 / 2
// pairs causally). At T = 2048 with L = 16 that is 2.1M pairs of W = 32 hidden units per layer: 268 MB
// per float32 (P, W) intermediate, three of which a training step keeps for the backward, then an
// (H, T, T) bias of 64 MB for 4 heads (the cost benchmark measured a 4.8 GB peak at T = 2048 for 4
// layers, a step 11x RoPE's; docs/positions.md §7).
// The fused attention has no CUDA kernel for the dense bias: CPU only.
//
// Gradients: all through ordinary ops (autograd), to W1, b1, W2, b2, c and m. The two kinks of the
// reference are reproduced exactly: |c| and |m L0| have the gradient sign(x) (0 at 0, as torch.abs),
// and max(i, L) sends the gradient to L when L > i, half of it when L == i, none when L < i (as
// torch.maximum on a tie, SPEC-2 §1.5): the forward builds n_i = a_i L + (1 - a_i) i with the
// constant a_i in {1, 1/2, 0} read from the current L.
//
// Parameters, per layer l: fire_w1_<l> (W, 1), fire_b1_<l> (W), fire_w2_<l> (H, W), fire_b2_<l> (H),
// fire_c_<l> (1) = --fire-init-c, fire_m_<l> (1) = 1; PyTorch's nn.Linear defaults for the MLP
// (U(-1, 1) for the first layer, fan-in 1; U(-1/sqrt(W), 1/sqrt(W)) for the second).
#include <cmath>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "autograd/registry.h"
#include "nn/posenc/position_encoding.h"

namespace posgrad::nn {

namespace {

constexpr double kEps = 1e-6;  // added to the normaliser psi(n_i), not to the numerator (SPEC-2 §1.8)

double sign_of(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }

// The distinct (distance, normaliser) pairs of a window and the pair of each (i, j).
struct FirePairs {
  std::vector<double> distance, position, tie;  // per pair: r, the query position i, dn/dL in {1, 1/2, 0}
  std::vector<int64_t> index;                   // (Tq * Tk): pair of (i, j); masked entries read pair 0
};

FirePairs fire_pairs(const std::vector<int64_t>& qpos, const std::vector<int64_t>& kpos, bool causal, double L) {
  FirePairs p;
  const int64_t Tq = static_cast<int64_t>(qpos.size()), Tk = static_cast<int64_t>(kpos.size());
  p.index.assign(static_cast<size_t>(Tq * Tk), 0);
  int64_t max_r = 0;
  for (int64_t i : qpos) max_r = std::max({max_r, std::abs(i - kpos.front()), std::abs(kpos.back() - i)});
  // slot[r]: the pair of distance r in the current group (-1: none yet); `touched` resets it.
  std::vector<int64_t> shared(static_cast<size_t>(max_r + 1), -1), own(static_cast<size_t>(max_r + 1), -1), touched;
  for (int64_t t = 0; t < Tq; ++t) {
    const double i = static_cast<double>(qpos[t]);
    // Rows with i < L share the normaliser L (one group); a row with i >= L has its own, whose
    // gradient to L is 1/2 on a tie and 0 beyond.
    const bool below = i < L;
    std::vector<int64_t>& slot = below ? shared : own;
    const double a = below ? 1.0 : (i == L ? 0.5 : 0.0);
    for (int64_t j = 0; j < Tk; ++j) {
      // Causal: key j hidden from query row t when it lies after it (positions and indices agree in
      // order; with a query offset the query's position is q_offset + t).
      if (causal && kpos[j] > qpos[t]) continue;
      const int64_t r = std::abs(qpos[t] - kpos[j]);
      if (slot[r] < 0) {
        slot[r] = static_cast<int64_t>(p.distance.size());
        p.distance.push_back(static_cast<double>(r));
        p.position.push_back(i);
        p.tie.push_back(a);
        if (!below) touched.push_back(r);
      }
      p.index[t * Tk + j] = slot[r];
    }
    for (int64_t r : touched) own[r] = -1;
    touched.clear();
  }
  if (p.distance.empty()) {  // every entry masked (a query before every key): one dummy pair
    p.distance.push_back(0);
    p.position.push_back(0);
    p.tie.push_back(0);
  }
  return p;
}

}  // namespace

Tensor fire_bias(const FireParams& w, const std::vector<int64_t>& qpos, const std::vector<int64_t>& kpos, bool causal) {
  POSGRAD_CHECK(!qpos.empty() && !kpos.empty(), ShapeError, "FIRE: empty query or key positions");
  POSGRAD_CHECK(w.w1.dim() == 2 && w.w1.size(1) == 1 && w.b1.dim() == 1 && w.b1.size(0) == w.w1.size(0), ShapeError,
                "FIRE: w1 must be (W, 1) and b1 (W), got ", shape_str(w.w1.shape()), " and ", shape_str(w.b1.shape()));
  POSGRAD_CHECK(w.w2.dim() == 2 && w.w2.size(1) == w.w1.size(0) && w.b2.dim() == 1 && w.b2.size(0) == w.w2.size(0),
                ShapeError, "FIRE: w2 must be (H, W = ", w.w1.size(0), ") and b2 (H), got ", shape_str(w.w2.shape()),
                " and ", shape_str(w.b2.shape()));
  POSGRAD_CHECK(w.c.numel() == 1 && w.m.numel() == 1, ShapeError, "FIRE: c and m must hold one value each, got ",
                shape_str(w.c.shape()), " and ", shape_str(w.m.shape()));
  POSGRAD_CHECK(std::isfinite(w.L0) && w.L0 > 0, ValueError, "FIRE: L0 must be finite and > 0, got ", w.L0);
  const int64_t W = w.w1.size(0);
  const int64_t Tq = static_cast<int64_t>(qpos.size()), Tk = static_cast<int64_t>(kpos.size());
  const DType dt = w.w1.dtype();
  const Device dev = w.w1.device();
  // The current values fix the constant parts of the graph: the signs of c and m L0 and which rows
  // lie below L.
  const double c_now = w.c.to(Device::cpu()).to_vector()[0], mL0 = w.m.to(Device::cpu()).to_vector()[0] * w.L0;
  const FirePairs p = fire_pairs(qpos, kpos, causal, std::fabs(mL0));
  const int64_t P = static_cast<int64_t>(p.distance.size());
  auto column = [&](const std::vector<double>& v) { return Tensor::from_vector(v, {P, 1}, dt).to(dev); };
  std::vector<double> not_tie;
  for (double t : p.tie) not_tie.push_back(1.0 - t);
  const Tensor r = column(p.distance), i = column(p.position), a = column(p.tie), rest = column(not_tie);
  const Tensor abs_c = w.c.reshape({1, 1}) * sign_of(c_now);                    // |c|
  const Tensor L = w.m.reshape({1, 1}) * (w.L0 * sign_of(mL0));                 // |m L0|
  const Tensor n = a * L + rest * i;                                            // max(i, L), tie rule of torch.maximum
  const Tensor u = log(abs_c * r + 1.0) / (log(abs_c * n + 1.0) + kEps);        // (P, 1)
  const Tensor hidden = relu(u * w.w1.reshape({1, W}) + w.b1.reshape({1, W}));  // (P, W)
  const Tensor out = linear(hidden, w.w2, w.b2);                                // (P, H)
  const Tensor idx = Tensor::from_ints(p.index, {Tq, Tk}).to(dev);
  return embedding(out, idx).permute({2, 0, 1}).contiguous();  // (Tq, Tk, H) -> (H, Tq, Tk)
}

namespace {

int64_t fire_l0(const PosEncConfig& cfg) {
  const int64_t l0 = cfg.options.integer("fire_l0");
  return l0 == 0 ? std::max<int64_t>(1, cfg.block_size / 4) : l0;
}

class FireEncoding : public PositionEncoding {
 public:
  FireEncoding(const PosEncConfig& cfg, Generator& gen) : L0_(static_cast<double>(fire_l0(cfg))) {
    causal_ = cfg.causal;
    const int64_t W = cfg.options.integer("fire_mlp_width"), H = cfg.n_head;
    const double c0 = cfg.options.real("fire_init_c"), bound2 = 1.0 / std::sqrt(static_cast<double>(W));
    for (int64_t l = 0; l < cfg.n_layer; ++l) {
      const std::string s = "_" + std::to_string(l);
      FireParams p;
      p.w1 = register_parameter("fire_w1" + s, rand({W, 1}, gen, cfg.dtype, Device::cpu(), -1.0, 1.0));
      p.b1 = register_parameter("fire_b1" + s, rand({W}, gen, cfg.dtype, Device::cpu(), -1.0, 1.0));
      p.w2 = register_parameter("fire_w2" + s, rand({H, W}, gen, cfg.dtype, Device::cpu(), -bound2, bound2));
      p.b2 = register_parameter("fire_b2" + s, rand({H}, gen, cfg.dtype, Device::cpu(), -bound2, bound2));
      p.c = register_parameter("fire_c" + s, Tensor::full({1}, c0, cfg.dtype));
      p.m = register_parameter("fire_m" + s, Tensor::full({1}, 1.0, cfg.dtype));
      p.L0 = L0_;
      layers_.push_back(p);
    }
  }
  std::string kind() const override { return "fire"; }
  ScoreModifier scores(int64_t layer, const LayerProjections& proj, int64_t Tq, int64_t Tk, int64_t q_offset) override {
    const int64_t n = static_cast<int64_t>(layers_.size());
    POSGRAD_CHECK(layer >= 0 && layer < n, IndexError, "FIRE position encoding: layer ", layer, " out of range (", n,
                  " layers)");
    POSGRAD_CHECK(!proj.device().is_cuda(), DeviceError,
                  "FIRE: its dense (H, Tq, Tk) bias has no CUDA attention kernel; run it on the CPU (--device cpu)");
    std::vector<int64_t> qpos, kpos;
    if (!position_ids().empty()) {  // randomized positions: one whole sequence at the ids
      POSGRAD_CHECK(Tq == Tk && q_offset == 0 && Tq == static_cast<int64_t>(position_ids().size()), ShapeError,
                    "FIRE scores: position ids for ", position_ids().size(), " tokens, but a window of Tq = ", Tq,
                    ", Tk = ", Tk, ", q_offset = ", q_offset, " (ids are for whole-sequence training forwards)");
      qpos = kpos = position_ids();
    } else {
      for (int64_t t = 0; t < Tq; ++t) qpos.push_back(q_offset + t);
      for (int64_t j = 0; j < Tk; ++j) kpos.push_back(j);
    }
    ScoreModifier m;
    m.kind = ScoreBias::Dense;
    m.bias_dense = fire_bias(layers_[layer], qpos, kpos, causal_);
    return m;
  }
  bool supports_position_ids() const override { return true; }

 private:
  double L0_;
  std::vector<FireParams> layers_;
};

// The reference in double, term by term (SPEC-2 §1.3): bias of head h for query position i, key j.
double fire_reference(const std::vector<std::vector<double>>& p, double L0, int64_t h, int64_t i, int64_t j) {
  const std::vector<double>&w1 = p[0], &b1 = p[1], &w2 = p[2], &b2 = p[3];
  const double c = std::fabs(p[4][0]), L = std::fabs(p[5][0] * L0);
  const double u = std::log(c * std::fabs(double(i - j)) + 1.0) / (std::log(c * std::max(double(i), L) + 1.0) + kEps);
  const size_t W = w1.size();
  double s = b2[h];
  for (size_t e = 0; e < W; ++e) s += w2[h * W + e] * std::max(0.0, w1[e] * u + b1[e]);
  return s;
}

// FIRE's parameters for a case: the MLP drawn, c and m fixed (m L0 = L).
TensorList fire_case_params(Generator& g, DType t, int64_t H, double c, double m) {
  constexpr int64_t W = 4;
  Tensor cc = Tensor::full({1}, c, t), mm = Tensor::full({1}, m, t);
  cc.set_requires_grad(true);
  mm.set_requires_grad(true);
  return {make_input({W, 1}, g, t), make_input({W}, g, t), make_input({H, W}, g, t), make_input({H}, g, t), cc, mm};
}

FireParams fire_from(const TensorList& x, size_t at, double L0) {
  return FireParams{x[at], x[at + 1], x[at + 2], x[at + 3], x[at + 4], x[at + 5], L0};
}

// Op-registry cases: the bias alone (every gradient, the tie of max(i, L) among them: L0 = 4, m = 1
// puts row i = 4 on it; c < 0 exercises |c|) and the fused attention with it, causal, bidirectional
// and with a query offset (a key/value-cache step); the reference evaluates SPEC-2 §1.3 in double.
void fire_op_cases(std::vector<OpCase>& out) {
  struct Geometry {
    std::string name;
    int64_t Tq, Tk, q_offset;
    bool causal;
    double c, m, L0;
  };
  const std::vector<Geometry> biases = {
      {"causal/T8_L4.5", 8, 8, 0, true, 0.1, 1.5, 3.0},  // the spec's test vector (§10.1)
      {"causal/T8_tie_L4", 8, 8, 0, true, 0.1, 1.0, 4.0},
      {"bidir/T8_negative_c", 8, 8, 0, false, -0.3, 1.2, 3.0},
      {"causal/Tq3_Tk9_offset6", 3, 9, 6, true, 0.2, -0.9, 5.0},  // m < 0: L = |m L0|
  };
  for (const Geometry& g : biases) {
    OpCase c;
    c.name = "posenc/fire/bias/" + g.name;
    c.inputs = [g](Generator& gen, DType t) { return fire_case_params(gen, t, 2, g.c, g.m); };
    c.fn = [g](const TensorList& x) {
      std::vector<int64_t> qpos, kpos;
      for (int64_t t = 0; t < g.Tq; ++t) qpos.push_back(g.q_offset + t);
      for (int64_t j = 0; j < g.Tk; ++j) kpos.push_back(j);
      Tensor b = fire_bias(fire_from(x, 0, g.L0), qpos, kpos, g.causal);
      if (!g.causal) return b;
      // Masked entries hold pair 0's value; only the visible ones are FIRE's.
      std::vector<double> keep;
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t t = 0; t < g.Tq; ++t)
          for (int64_t j = 0; j < g.Tk; ++j) keep.push_back(j <= g.q_offset + t ? 1.0 : 0.0);
      return b * Tensor::from_vector(keep, {2, g.Tq, g.Tk}, b.dtype());
    };
    c.reference = [g](const TensorList& x) {
      std::vector<std::vector<double>> p;
      for (const auto& t : x) p.push_back(host(t));
      std::vector<double> b;
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t t = 0; t < g.Tq; ++t)
          for (int64_t j = 0; j < g.Tk; ++j) {
            const int64_t i = g.q_offset + t;
            b.push_back(g.causal && j > i ? 0.0 : fire_reference(p, g.L0, h, i, j));
          }
      return Tensor::from_vector(b, {2, g.Tq, g.Tk}, DType::Float64);
    };
    c.cuda = false;
    out.push_back(c);
  }
  struct Attn {
    std::string name;
    Shape q, k;
    bool causal;
    int64_t q_offset;
  };
  const std::vector<Attn> attns = {
      {"causal/2x3x9x4", {2, 3, 9, 4}, {2, 3, 9, 4}, true, 0},
      {"bidir/2x2x7x3", {2, 2, 7, 3}, {2, 2, 7, 3}, false, 0},
      {"causal/Tq3_Tk8_offset5", {1, 2, 3, 3}, {1, 2, 8, 3}, true, 5},
  };
  constexpr double kL0 = 3.0, kC = 0.2, kM = 1.5;  // L = 4.5: rows past it exercise the normaliser
  for (const Attn& a : attns) {
    AttentionCase ac;
    ac.name = "posenc/fire/" + a.name;
    ac.q = a.q;
    ac.k = a.k;
    ac.causal = a.causal;
    ac.q_offset = a.q_offset;
    const int64_t H = a.q[1], Tq = a.q[2], Tk = a.k[2], q_offset = a.q_offset;
    const bool causal = a.causal;
    ac.extra_inputs = [H](Generator& gen, DType t) { return fire_case_params(gen, t, H, kC, kM); };
    ac.modifier = [=](const TensorList& x) {
      std::vector<int64_t> qpos, kpos;
      for (int64_t t = 0; t < Tq; ++t) qpos.push_back(q_offset + t);
      for (int64_t j = 0; j < Tk; ++j) kpos.push_back(j);
      ScoreModifier m;
      m.kind = ScoreBias::Dense;
      m.bias_dense = fire_bias(fire_from(x, 3, kL0), qpos, kpos, causal);
      return m;
    };
    ac.reference_bias = [=](const TensorList& x) -> AttentionBiasFn {
      std::vector<std::vector<double>> p;
      for (size_t i = 3; i < x.size(); ++i) p.push_back(host(x[i]));
      return [p, q_offset](int64_t, int64_t h, int64_t i, int64_t j) {
        return fire_reference(p, kL0, h, i + q_offset, j);
      };
    };
    add_attention_case(out, ac);
    out.back().cuda = false;  // no CUDA kernel for the dense bias
  }
}

}  // namespace

PosEncEntry fire_encoding() {
  using namespace opt;
  // Added after experiments were first written: a results.json or config.json without the option
  // reads as its default (the encoding did not exist then, so no run used another value).
  PosEncEntry e{
      "fire",
      "learned MLP of the log-distance normalised by the query position, MLP(psi(|i-j|) / psi(max(i, L))) "
      "(FIRE, Li et al. 2024); CPU only",
      [](const PosEncConfig& cfg, Generator& gen) { return std::make_shared<FireEncoding>(cfg, gen); },
      {added_later_default(
           integer("fire_mlp_width", closed(1, 4096), "FIRE: hidden width W of the MLP (shared by the heads)"),
           int64_t{32}),
       added_later_default(
           integer("fire_l0", closed(0, int64_t{1} << 30),
                   "FIRE: L0, the fixed length that the learned multiplier scales into the threshold L = |m L0| "
                   "of the normaliser max(i, L) (0: a quarter of the training context; the paper's listing: 512)",
                   "tokens"),
           int64_t{0}),
       added_later_default(real("fire_init_c", closed(-1e6, 1e6), "FIRE: initial c of psi(x) = ln(|c| x + 1)"), 0.1)},
      nullptr,
      fire_op_cases};
  e.cpu_only = true;  // the dense bias has no CUDA kernel
  // The dense bias (H, T, T) and its gradient, and the MLP over the distinct (distance, normaliser)
  // pairs, up to T^2 / 2 of them beyond L (each row past L has its own normaliser), W hidden units each
  // (pre-activation, ReLU, and their gradients with the graph); batch-shared, so no factor B.
  e.attention_bytes = [](const PosEncConfig& cfg, int64_t, int64_t T, bool with_graph) {
    const long double T2 = static_cast<long double>(T) * T,
                      W = static_cast<long double>(cfg.options.integer("fire_mlp_width"));
    return (with_graph ? 2 : 1) * (T2 * cfg.n_head + T2 / 2 * W * 2) * 4;
  };
  return e;
}

}  // namespace posgrad::nn
