// sandwich.cpp — Sandwich (Chi, Fan, Rudnicky, Ramadge, "Dissecting Transformer Length Extrapolation
// via the Lens of Receptive Field Analysis", ACL 2023, arXiv 2212.10356 §5), in the form of NVIDIA
// NeMo's sandwich_relative_position_embedding.py (SPEC-positions-2 §7). The paper keeps only the
// position-position cross term p_i·p_j of sinusoidal embeddings as a parameter-free bias:
//   bias_h(r) = lambda_h (base(|r|) - dbar / 2),   base(r) = sum_{k=1..dbar/2} cos(r 10000^(-2k/dbar)),
//   lambda_h  = H / (8 h),  h = 1..H (1-based)                                  (SPEC-2 §7.2)
// added after the 1/sqrt(d) scaling, like ALiBi. The -dbar/2 makes bias(0) = 0 (a per-head constant
// that the softmax ignores, kept so that the logits match NeMo). The frequencies start at k = 1, not
// 0 (NeMo; the Vaswani indexing k = 0.. is a different function, SPEC-2 §7.4). The head scales
// are NeMo's, unverified against the paper (SPEC-2 §12.9). Symmetric in r, so bidirectional
// attention uses the same |r|. Not here: a learnable lambda (no source has one).
// The bias depends only on the head and the distance, so it reaches the fused attention as data,
// bias_by_distance (H, Tq + Tk - 1), a constant (no parameters): backward is the attention's.
#include <cmath>

#include "autograd/ops.h"
#include "nn/posenc/position_encoding.h"

namespace posgrad::nn {

double sandwich_base(int64_t r, int64_t dbar) {
  POSGRAD_CHECK(dbar >= 2 && dbar % 2 == 0, ValueError, "Sandwich: dbar must be even and >= 2, got ", dbar);
  const double a = std::fabs(static_cast<double>(r));
  double s = 0;
  for (int64_t k = 1; k <= dbar / 2; ++k)
    s += std::cos(a / std::pow(10000.0, 2.0 * static_cast<double>(k) / static_cast<double>(dbar)));
  return s;
}

std::vector<double> sandwich_head_scales(int64_t n_heads) {
  POSGRAD_CHECK(n_heads > 0, ValueError, "Sandwich: number of heads must be positive, got ", n_heads);
  std::vector<double> l;
  for (int64_t h = 1; h <= n_heads; ++h) l.push_back(static_cast<double>(n_heads) / (8.0 * static_cast<double>(h)));
  return l;
}

Tensor sandwich_bias_by_distance(int64_t dbar, int64_t n_heads, int64_t Tq, int64_t Tk, int64_t q_offset, DType dtype,
                                 Device device) {
  const std::vector<double> lambda = sandwich_head_scales(n_heads);
  std::vector<double> centred;  // base(|r_d|) - dbar / 2 per diagonal, in double
  for (int64_t r : diagonal_relative_positions(Tq, Tk, q_offset))
    centred.push_back(sandwich_base(r, dbar) - static_cast<double>(dbar) / 2.0);
  const int64_t nd = static_cast<int64_t>(centred.size());
  // Both factors rounded to dtype once, then one product per entry: lambda (H, 1) x centred (1, nd).
  const Tensor l = cached_on_device(Tensor::from_vector(lambda, {n_heads, 1}, dtype), device);
  const Tensor c = cached_on_device(Tensor::from_vector(centred, {1, nd}, dtype), device);
  return l * c;
}

namespace {

// dbar of a configuration: the option, 0 meaning the head dimension.
int64_t sandwich_dbar(const PosEncConfig& cfg) {
  const int64_t d = cfg.options.integer("sandwich_dbar");
  return d == 0 ? cfg.n_embd / cfg.n_head : d;
}

class SandwichEncoding : public PositionEncoding {
 public:
  explicit SandwichEncoding(const PosEncConfig& cfg)
      : dbar_(sandwich_dbar(cfg)), n_head_(cfg.n_head), dtype_(cfg.dtype) {
    causal_ = cfg.causal;
  }
  std::string kind() const override { return "sandwich"; }
  ScoreModifier scores(int64_t, const LayerProjections& proj, int64_t Tq, int64_t Tk, int64_t q_offset) override {
    const ScoreWindow w = score_window(Tq, Tk, q_offset, "Sandwich scores");  // the ids' window while set
    ScoreModifier m;
    m.kind = ScoreBias::Distance;
    m.bias_by_distance = sandwich_bias_by_distance(dbar_, n_head_, w.Tq, w.Tk, w.q_offset, dtype_, proj.device());
    attach_positions(m);
    return m;
  }
  bool supports_position_ids() const override { return true; }
  bool position_ids_in_attention() const override { return true; }

 private:
  int64_t dbar_, n_head_;
  DType dtype_;
};

// Op-registry cases: the fused attention with the Sandwich bias (dbar = 8) in every geometry of the
// sweep; the reference evaluates SPEC-2 §7.2 term by term in double.
void sandwich_op_cases(std::vector<OpCase>& out) {
  constexpr int64_t kDbar = 8;
  add_distance_bias_cases(
      out, "sandwich", [](Generator&, DType t, int64_t H) { return TensorList{Tensor::zeros({H}, t)}; },  // carries H
      [](const TensorList& p, int64_t Tq, int64_t Tk, int64_t q_offset) {
        return sandwich_bias_by_distance(kDbar, p[0].size(0), Tq, Tk, q_offset, p[0].dtype(), p[0].device());
      },
      [](const std::vector<std::vector<double>>& p, int64_t h, int64_t r) {
        const double H = static_cast<double>(p[0].size()), a = std::fabs(static_cast<double>(r));
        double base = 0;
        for (int k = 1; k <= kDbar / 2; ++k) base += std::cos(a * std::pow(10000.0, -2.0 * k / kDbar));
        return H / (8.0 * static_cast<double>(h + 1)) * (base - kDbar / 2.0);
      });
}

}  // namespace

PosEncEntry sandwich_encoding() {
  using namespace opt;
  PosEncEntry e{
      "sandwich",
      "parameter-free bias from the cross term of sinusoidal embeddings, H/(8h) (sum_k cos(r w_k) - dbar/2) "
      "(Sandwich, Chi et al. 2023)",
      [](const PosEncConfig& cfg, Generator&) { return std::make_shared<SandwichEncoding>(cfg); },
      {with_default(integer("sandwich_dbar", closed(0, 1 << 16),
                            "Sandwich: dimension dbar of the sinusoid whose cross term is the bias (even; 0: the "
                            "head dim; NeMo's hidden_size)"),
                    int64_t{0})},
      [](const PosEncConfig& cfg) {
        const int64_t d = sandwich_dbar(cfg);
        POSGRAD_CHECK(d >= 2 && d % 2 == 0, ValueError, "Sandwich: dbar (--sandwich-dbar, 0 = the head dim ",
                      cfg.n_embd / cfg.n_head, ") must be even and >= 2, got ", d);
      },
      sandwich_op_cases};
  e.symmetric_bias = true;  // a bias of |i - j| alone
  return e;
}

}  // namespace posgrad::nn
