// t5.cpp — T5 relative attention bias (Raffel et al. 2020; HF transformers modeling_t5.py
// T5Attention._relative_position_bucket / compute_bias; spec §1). A (num_buckets, H) table; the
// score of query i and key j gets table[bucket(j - i), h] inside the fused attention. Options:
// t5_scaled adds the bias after the usual 1/sqrt(d) (so that only the position encoding differs
// from the other runs) or keeps T5's unscaled q.k (Mesh-TF convention, spec §1.3 / §6a);
// t5_shared_layers uses one table for all layers (T5: only block 0 owns it) or one per layer.
// Forward and backward kernels: tensor/kernels/cpu/attention.cpp (ScoreBias::T5): the bias is
// looked up per diagonal, and the table gradient is reduced along diagonals, then binned (spec
// §1.4). Sharing needs no special code: every layer's attention op takes the same table tensor, so
// autograd sums the layers' contributions.
#include <cmath>

#include "nn/posenc/position_encoding.h"

namespace posgrad::nn {

int64_t t5_relative_bucket(int64_t r, bool bidirectional, int64_t num_buckets, int64_t max_distance) {
  int64_t nb = num_buckets, offset = 0, n = 0;
  if (bidirectional) {
    nb = num_buckets / 2;
    offset = r > 0 ? nb : 0;  // keys to the right of the query use the upper half
    n = r < 0 ? -r : r;
  } else {
    n = r < 0 ? -r : 0;  // max(i - j, 0): future keys collapse onto bucket 0
  }
  const int64_t max_exact = nb / 2;
  POSGRAD_CHECK(max_exact >= 1 && max_distance > max_exact, ValueError, "T5 buckets: need num_buckets >= ",
                bidirectional ? 4 : 2, " and max_distance > ", max_exact, ", got num_buckets=", num_buckets,
                " max_distance=", max_distance);
  // Branch before the log: HF evaluates log(0) = -inf and discards it, which in C++ would be UB
  // when converted to an integer. Same operation order as HF, in double (spec §1.2 notes).
  if (n < max_exact) return offset + n;
  const double v = std::log(static_cast<double>(n) / static_cast<double>(max_exact)) /
                   std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)) *
                   static_cast<double>(nb - max_exact);
  return offset + std::min<int64_t>(max_exact + static_cast<int64_t>(v), nb - 1);  // v >= 0: trunc == floor
}

ScoreModifier t5_score_modifier(const Tensor& table, bool bidirectional, int64_t num_buckets, int64_t max_distance) {
  POSGRAD_CHECK(table.dim() == 2 && table.size(0) == num_buckets, ShapeError, "T5 table must be (", num_buckets,
                ", H), got ", shape_str(table.shape()));
  (void)t5_relative_bucket(0, bidirectional, num_buckets, max_distance);  // validates the sizes
  ScoreModifier m;
  m.kind = ScoreBias::T5;
  m.table = table;
  m.bucket = [=](int64_t r) { return t5_relative_bucket(r, bidirectional, num_buckets, max_distance); };
  return m;
}

namespace {

class T5Encoding : public PositionEncoding {
 public:
  T5Encoding(const PosEncConfig& cfg, Generator& gen)
      : num_buckets_(cfg.options.integer("t5_num_buckets")),
        max_distance_(cfg.options.integer("t5_max_distance")),
        scaled_(cfg.options.boolean("t5_scaled")) {
    causal_ = cfg.causal;
    (void)t5_relative_bucket(0, !causal_, num_buckets_, max_distance_);  // validates the sizes early
    // HF T5PreTrainedModel._init_weights: relative_attention_bias ~ N(0, d_model^-0.5).
    const double std = 1.0 / std::sqrt(static_cast<double>(cfg.n_embd));
    const bool shared = cfg.options.boolean("t5_shared_layers");
    const int64_t n_tables = shared ? 1 : cfg.n_layer;
    for (int64_t l = 0; l < n_tables; ++l) {
      const std::string name =
          shared ? "relative_attention_bias" : "relative_attention_bias_" + std::to_string(l);
      tables_.push_back(
          register_parameter(name, randn({num_buckets_, cfg.n_head}, gen, cfg.dtype, Device::cpu(), 0.0, std)));
    }
  }
  std::string kind() const override { return "t5"; }
  ScoreModifier scores(int64_t layer, const LayerProjections&, int64_t) override {
    const int64_t n = static_cast<int64_t>(tables_.size());
    POSGRAD_CHECK(layer >= 0 && (n == 1 || layer < n), IndexError, "T5 position encoding: layer ", layer,
                  " out of range (", n, " per-layer tables)");
    return t5_score_modifier(tables_[n == 1 ? 0 : layer], !causal_, num_buckets_, max_distance_);
  }
  double attention_scale(int64_t head_dim) const override {
    return scaled_ ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : 1.0;
  }

 private:
  int64_t num_buckets_, max_distance_;
  bool scaled_;
  std::vector<Tensor> tables_;  // (num_buckets, H) each
};

}  // namespace

PosEncEntry t5_encoding() {
  using namespace opt;
  return {"t5", "learned bias per head and log-bucketed relative distance on the scores (Raffel et al. 2020)",
          [](const PosEncConfig& cfg, Generator& gen) { return std::make_shared<T5Encoding>(cfg, gen); },
          {with_default(integer("t5_num_buckets", closed(2, 4096), "T5: relative-position buckets (num_buckets)"),
                        int64_t{32}),
           with_default(integer("t5_max_distance", closed(2, 1 << 20),
                                "T5: distance at which the log buckets end (max_distance)", "positions"),
                        int64_t{128}),
           with_default(boolean("t5_scaled", "T5: add the bias after the 1/sqrt(d) scaling (true) or use T5's "
                                             "unscaled q.k (false)"),
                        true),
           with_default(boolean("t5_shared_layers", "T5: one bias table for all layers (true) or one per layer"),
                        true)},
          [](const PosEncConfig& cfg) {  // the bucket sizes (max_exact >= 1, max_distance > max_exact)
            (void)t5_relative_bucket(0, !cfg.causal, cfg.options.integer("t5_num_buckets"),
                                     cfg.options.integer("t5_max_distance"));
          }};
}

}  // namespace posgrad::nn
