// alibi.cpp — ALiBi, attention with linear biases (Press et al., "Train Short, Test Long",
// arXiv 2108.12409; authors' fairseq code; HF bloom build_alibi_tensor; spec §4). No parameters and
// no embedding: head h adds -m_h |i - j| to its scores, after the 1/sqrt(d) scaling. In causal
// attention that is the paper's m_h (j - i) on every visible key; bidirectionally it is the
// symmetric form (spec §4.2). Kernels: tensor/kernels/cpu/attention.cpp (ScoreBias::ALiBi); the
// bias is a constant, so backward is plain attention backward (spec §4.3).
#include <cmath>

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

namespace {

class AlibiEncoding : public PositionEncoding {
 public:
  explicit AlibiEncoding(const PosEncConfig& cfg) : slopes_(alibi_slopes(cfg.n_head)) { causal_ = cfg.causal; }
  std::string kind() const override { return "alibi"; }
  ScoreModifier scores(int64_t, const LayerProjections&, int64_t) override {
    ScoreModifier m;
    m.kind = ScoreBias::ALiBi;
    m.slopes = slopes_;
    return m;
  }

 private:
  std::vector<double> slopes_;
};

}  // namespace

PosEncEntry alibi_encoding() {
  return {"alibi", "linear distance penalty per head on the attention scores (Press et al. 2022)",
          [](const PosEncConfig& cfg, Generator&) { return std::make_shared<AlibiEncoding>(cfg); },
          {},
          nullptr};
}

}  // namespace posgrad::nn
