// t5.cpp — T5 relative attention bias (Raffel et al. 2020; HF transformers modeling_t5.py
// T5Attention._relative_position_bucket / compute_bias; spec §1). A (num_buckets, H) table; the
// score of query i and key j gets table[bucket(j - i), h]. Options:
// t5_scaled adds the bias after the usual 1/sqrt(d) (so that only the position encoding differs
// from the other runs) or keeps T5's unscaled q.k (Mesh-TF convention, spec §1.3 / §6a);
// t5_shared_layers uses one table for all layers (T5: only block 0 owns it) or one per layer.
// The bias depends only on the head and the relative distance, so it reaches the fused attention
// as data: an embedding gather of the table at the bucket of each diagonal, bias_by_distance
// (H, Tq + Tk - 1). The kernel returns that tensor's gradient (dS summed along diagonals); the
// gather's backward bins it into the table rows (spec §1.4). Sharing needs no special code: every
// layer's gather reads the same table tensor, so autograd sums the layers' contributions.
#include <cmath>
#include <vector>

#include "autograd/ops.h"
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
  POSGRAD_CHECK(max_exact >= 1 && max_distance > max_exact, ValueError,
                "T5 buckets: need num_buckets >= ", bidirectional ? 4 : 2, " and max_distance > ", max_exact,
                ", got num_buckets=", num_buckets, " max_distance=", max_distance);
  // Branch before the log: HF evaluates log(0) = -inf and discards it, which in C++ would be UB
  // when converted to an integer. Same operation order as HF, in double (spec §1.2 notes).
  if (n < max_exact) return offset + n;
  const double v = std::log(static_cast<double>(n) / static_cast<double>(max_exact)) /
                   std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)) *
                   static_cast<double>(nb - max_exact);
  return offset + std::min<int64_t>(max_exact + static_cast<int64_t>(v), nb - 1);  // v >= 0: trunc == floor
}

Tensor t5_bucket_index(bool bidirectional, int64_t num_buckets, int64_t max_distance, int64_t Tq, int64_t Tk,
                       int64_t q_offset, Device device) {
  std::vector<int64_t> rows = diagonal_relative_positions(Tq, Tk, q_offset);
  for (int64_t& r : rows) r = t5_relative_bucket(r, bidirectional, num_buckets, max_distance);
  // Built on the host at each call (Tq + Tk - 1 buckets), uploaded once per content and device.
  return cached_on_device(Tensor::from_ints(rows, {static_cast<int64_t>(rows.size())}), device);
}

Tensor t5_bias_by_distance(const Tensor& table, bool bidirectional, int64_t num_buckets, int64_t max_distance,
                           int64_t Tq, int64_t Tk, int64_t q_offset) {
  POSGRAD_CHECK(table.dim() == 2 && table.size(0) == num_buckets, ShapeError, "T5 table must be (", num_buckets,
                ", H), got ", shape_str(table.shape()));
  return embedding(table, t5_bucket_index(bidirectional, num_buckets, max_distance, Tq, Tk, q_offset, table.device()))
      .t();  // (nd, H) -> (H, nd)
}

ScoreModifier t5_score_modifier(const Tensor& table, bool bidirectional, int64_t num_buckets, int64_t max_distance,
                                int64_t Tq, int64_t Tk, int64_t q_offset) {
  ScoreModifier m;
  m.kind = ScoreBias::Distance;
  m.bias_by_distance = t5_bias_by_distance(table, bidirectional, num_buckets, max_distance, Tq, Tk, q_offset);
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
      const std::string name = shared ? "relative_attention_bias" : "relative_attention_bias_" + std::to_string(l);
      tables_.push_back(
          register_parameter(name, randn({num_buckets_, cfg.n_head}, gen, cfg.dtype, Device::cpu(), 0.0, std)));
    }
  }
  std::string kind() const override { return "t5"; }
  ScoreModifier scores(int64_t layer, const LayerProjections&, int64_t Tq, int64_t Tk, int64_t q_offset) override {
    const int64_t n = static_cast<int64_t>(tables_.size());
    POSGRAD_CHECK(layer >= 0 && (n == 1 || layer < n), IndexError, "T5 position encoding: layer ", layer,
                  " out of range (", n, " per-layer tables)");
    const ScoreWindow w = score_window(Tq, Tk, q_offset, "T5 scores");  // the ids' window while set
    ScoreModifier m =
        t5_score_modifier(tables_[n == 1 ? 0 : layer], !causal_, num_buckets_, max_distance_, w.Tq, w.Tk, w.q_offset);
    attach_positions(m);
    return m;
  }
  bool supports_position_ids() const override { return true; }
  bool position_ids_in_attention() const override { return true; }
  double attention_scale(int64_t head_dim) const override {
    return scaled_ ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : 1.0;
  }

 private:
  int64_t num_buckets_, max_distance_;
  bool scaled_;
  std::vector<Tensor> tables_;  // (num_buckets, H) each
};

// Op-registry cases: the bias alone (the gather whose backward bins the diagonal gradient into the
// table), the fused attention with it in every geometry of the sweep (buckets 8, max distance 20:
// exact and log buckets both reached), T5's unscaled q.k, and one table shared by two layers.
void t5_op_cases(std::vector<OpCase>& out) {
  constexpr int64_t kBuckets = 8, kMaxDistance = 20;
  for (bool bidir : {false, true}) {
    OpCase c;
    c.name = std::string("posenc/t5/bias_by_distance/") + (bidir ? "bidir" : "causal") + "/Tq9_Tk11_offset2";
    c.inputs = [](Generator& g, DType t) { return TensorList{make_input({kBuckets, 3}, g, t)}; };
    c.fn = [bidir](const TensorList& x) { return t5_bias_by_distance(x[0], bidir, kBuckets, kMaxDistance, 9, 11, 2); };
    c.reference = [bidir](const TensorList& x) {
      const auto tab = host(x[0]);
      std::vector<double> b;
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t d = 0; d < 19; ++d)
          b.push_back(tab[t5_relative_bucket(d - 8 - 2, bidir, kBuckets, kMaxDistance) * 3 + h]);
      return Tensor::from_vector(b, {3, 19}, DType::Float64);
    };
    out.push_back(c);
  }
  // The sweep's geometries: bidirectional buckets for the bidirectional ones, as the model does.
  auto cases = [&](bool bidir) {
    std::vector<OpCase> v;
    add_distance_bias_cases(
        v, "t5",
        [](Generator& g, DType t, int64_t H) {
          return TensorList{make_input({kBuckets, H}, g, t)};
        },
        [bidir](const TensorList& p, int64_t Tq, int64_t Tk, int64_t q_offset) {
          return t5_bias_by_distance(p[0], bidir, kBuckets, kMaxDistance, Tq, Tk, q_offset);
        },
        [bidir](const std::vector<std::vector<double>>& p, int64_t h, int64_t r) {
          const int64_t H = static_cast<int64_t>(p[0].size()) / kBuckets;
          return p[0][t5_relative_bucket(r, bidir, kBuckets, kMaxDistance) * H + h];
        });
    for (OpCase& c : v)
      if ((c.name.find("/bidir/") != std::string::npos) == bidir) out.push_back(std::move(c));
  };
  cases(false);
  cases(true);
  // T5's own convention (q.k unscaled, t5_scaled = false), in its decoder (causal buckets) and its
  // encoder (bidirectional buckets, no mask).
  for (bool bidir : {false, true}) {
    AttentionCase ac;
    ac.name = std::string("posenc/t5/") + (bidir ? "bidir" : "causal") + "/unscaled/1x3x7x4";
    ac.q = ac.k = {1, 3, 7, 4};
    ac.scale = 1.0;
    ac.causal = !bidir;
    ac.extra_inputs = [](Generator& g, DType t) { return TensorList{make_input({kBuckets, 3}, g, t)}; };
    ac.modifier = [bidir](const TensorList& x) { return t5_score_modifier(x[3], bidir, kBuckets, kMaxDistance, 7, 7); };
    ac.reference_bias = [bidir](const TensorList& x) -> AttentionBiasFn {
      const auto tab = host(x[3]);
      return [tab, bidir](int64_t, int64_t h, int64_t i, int64_t j) {
        return tab[t5_relative_bucket(j - i, bidir, kBuckets, kMaxDistance) * 3 + h];
      };
    };
    add_attention_case(out, ac);
  }
  // One table shared by two attention layers (the second fed by the first): the table's gradient
  // is the sum of both layers' contributions. Decoder and encoder (bidirectional buckets, no mask).
  for (bool bidir : {false, true})
    add_composite(
        out, std::string("posenc/t5/shared_table_two_layers") + (bidir ? "/bidir" : ""),
        [](Generator& g, DType t) {
          return TensorList{make_input({2, 3, 9, 4}, g, t), make_input({2, 3, 9, 4}, g, t),
                            make_input({2, 3, 9, 4}, g, t), make_input({2, 3, 9, 4}, g, t), make_input({8, 3}, g, t)};
        },
        [bidir](const TensorList& x, bool naive) {
          const ScoreModifier m = t5_score_modifier(x[4], bidir, 8, 12, 9, 9);
          Tensor h1 = run_attention(x[0], x[1], x[2], m, !bidir, 0.5, naive);
          return run_attention(h1 + x[3], x[1], h1, m, !bidir, 0.5, naive);
        });
}

}  // namespace

PosEncEntry t5_encoding() {
  using namespace opt;
  return {
      "t5",
      "learned bias per head and log-bucketed relative distance on the scores (Raffel et al. 2020)",
      [](const PosEncConfig& cfg, Generator& gen) { return std::make_shared<T5Encoding>(cfg, gen); },
      {with_default(integer("t5_num_buckets", closed(2, 4096), "T5: relative-position buckets (num_buckets)"),
                    int64_t{32}),
       with_default(integer("t5_max_distance", closed(2, 1 << 20),
                            "T5: distance at which the log buckets end (max_distance)", "positions"),
                    int64_t{128}),
       with_default(boolean("t5_scaled",
                            "T5: add the bias after the 1/sqrt(d) scaling (true) or use T5's "
                            "unscaled q.k (false)"),
                    true),
       with_default(boolean("t5_shared_layers", "T5: one bias table for all layers (true) or one per layer"), true)},
      [](const PosEncConfig& cfg) {  // the bucket sizes (max_exact >= 1, max_distance > max_exact)
        (void)t5_relative_bucket(0, !cfg.causal, cfg.options.integer("t5_num_buckets"),
                                 cfg.options.integer("t5_max_distance"));
      },
      t5_op_cases};
}

}  // namespace posgrad::nn
