// alibi.cpp — ALiBi, attention with linear biases (Press et al., "Train Short, Test Long",
// arXiv 2108.12409; authors' fairseq code; HF bloom build_alibi_tensor; spec §4). No parameters and
// no embedding: head h adds -m_h |i - j| to its scores, after the 1/sqrt(d) scaling. In causal
// attention that is the paper's m_h (j - i) on every visible key; bidirectionally it is the
// symmetric form (spec §4.2). The bias depends only on the head and the distance, so it reaches the
// fused attention as data, bias_by_distance (H, Tq + Tk - 1) = -slope (H, 1) x |r| (1, Tq + Tk - 1);
// it is a constant, so backward is plain attention backward (spec §4.3).
#include <cmath>

#include "autograd/ops.h"
#include "nn/posenc/position_encoding.h"

namespace posgrad::nn {

// Spec §4.1: m_h = 2^(-8h/n) for a power of two n; otherwise the c = 2^floor(log2 n) slopes of c
// heads, then every other slope of the 2c-head sequence, 2^(-4(2t-1)/c), t = 1..n-c.
std::vector<double> alibi_slopes(int64_t n_heads) {
  POSGRAD_CHECK(n_heads > 0, ValueError, "ALiBi: number of heads must be positive, got ", n_heads);
  int64_t c = 1;
  while (c * 2 <= n_heads) c *= 2;
  std::vector<double> m;
  for (int64_t h = 1; h <= c; ++h) m.push_back(std::exp2(-8.0 * static_cast<double>(h) / static_cast<double>(c)));
  for (int64_t t = 1; t <= n_heads - c; ++t)
    m.push_back(std::exp2(-4.0 * static_cast<double>(2 * t - 1) / static_cast<double>(c)));
  return m;
}

Tensor alibi_bias_by_distance(const std::vector<double>& slopes, int64_t Tq, int64_t Tk, int64_t q_offset, DType dtype,
                              Device device) {
  const int64_t H = static_cast<int64_t>(slopes.size());
  POSGRAD_CHECK(H > 0, ValueError, "ALiBi: no slopes");
  std::vector<double> distance;
  for (int64_t r : diagonal_relative_positions(Tq, Tk, q_offset)) distance.push_back(std::fabs(static_cast<double>(r)));
  const int64_t nd = static_cast<int64_t>(distance.size());
  // The product is rounded once (an integer distance times a slope is exact before rounding).
  const Tensor m = cached_on_device(Tensor::from_vector(slopes, {H, 1}, dtype), device);
  const Tensor dist = cached_on_device(Tensor::from_vector(distance, {1, nd}, dtype), device);
  return -(m * dist);
}

namespace {

class AlibiEncoding : public PositionEncoding {
 public:
  explicit AlibiEncoding(const PosEncConfig& cfg) : slopes_(alibi_slopes(cfg.n_head)), dtype_(cfg.dtype) {
    causal_ = cfg.causal;
  }
  std::string kind() const override { return "alibi"; }
  ScoreModifier scores(int64_t, const LayerProjections& proj, int64_t Tq, int64_t Tk, int64_t q_offset) override {
    const ScoreWindow w = score_window(Tq, Tk, q_offset, "ALiBi scores");  // the ids' window while set
    ScoreModifier m;
    m.kind = ScoreBias::Distance;
    m.bias_by_distance = alibi_bias_by_distance(slopes_, w.Tq, w.Tk, w.q_offset, dtype_, proj.device());
    attach_positions(m);
    return m;
  }
  bool supports_position_ids() const override { return true; }
  bool position_ids_in_attention() const override { return true; }

 private:
  std::vector<double> slopes_;
  DType dtype_;
};

// Op-registry cases: the fused attention with the ALiBi bias in every geometry of the sweep (the
// slopes of H heads; nothing to differentiate but q, k, v).
void alibi_op_cases(std::vector<OpCase>& out) {
  add_distance_bias_cases(
      out, "alibi",
      [](Generator&, DType t, int64_t H) { return TensorList{Tensor::zeros({H}, t)}; },  // carries H and the dtype
      [](const TensorList& p, int64_t Tq, int64_t Tk, int64_t q_offset) {
        const int64_t H = p[0].size(0);
        return alibi_bias_by_distance(alibi_slopes(H), Tq, Tk, q_offset, p[0].dtype(), p[0].device());
      },
      [](const std::vector<std::vector<double>>& p, int64_t h, int64_t r) {
        const int64_t H = static_cast<int64_t>(p[0].size());
        // Spec §4.1 for H <= 4 heads (a power of two or 3): 2^(-8 h' / c), h' = h + 1, c = 2^floor(log2 H).
        const double c = H >= 4 ? 4.0 : H >= 2 ? 2.0 : 1.0;
        const double m = h < c ? std::exp2(-8.0 * double(h + 1) / c) : std::exp2(-4.0 * double(2 * (h - c) + 1) / c);
        return -m * std::fabs(double(r));
      });
}

}  // namespace

PosEncEntry alibi_encoding() {
  PosEncEntry e{"alibi",
                "linear distance penalty per head on the attention scores (Press et al. 2022)",
                [](const PosEncConfig& cfg, Generator&) { return std::make_shared<AlibiEncoding>(cfg); },
                {},
                nullptr,
                alibi_op_cases};
  e.symmetric_bias = true;  // a bias of |i - j| alone
  return e;
}

}  // namespace posgrad::nn
