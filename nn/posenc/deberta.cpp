// deberta.cpp — DeBERTa disentangled attention (He et al., arXiv 2006.03654; v2/v3 as released:
// HF transformers modeling_deberta_v2.py, microsoft/DeBERTa disentangled_attention.py; spec §2).
// One relative-embedding table E_rel (2S, C) shared by all layers, optionally LayerNorm-ed
// (eps 1e-7 as DeBERTa-v2), projected per layer by the layer's own W_k / W_q (share_att_key) or by
// per-layer pos_key_proj / pos_query_proj (with bias) into Kr, Qr (2S, H, D). The fused attention
// adds, inside the tile,
//   c2p: q_i . Kr[c(i,j)]    p2c: k_j . Qr[c(i,j)]    c(i,j) = clamp(bucket(i - j) + S, 0, 2S - 1)
// with the released code's p2c index (the SAME row c(i,j) as c2p, spec §2.4 — not the paper's
// delta(j,i)), and scales everything by 1/sqrt(D (1 + #terms)). Kernels (forward, backward incl.
// dKr, dQr): tensor/kernels/cpu/attention.cpp (ScoreBias::ContentPosition); the gradients then flow
// through the ordinary linear / layer_norm ops into W_k, W_q, E_rel (summed over layers by
// autograd). Works causally (the causal mask is orthogonal to the bias).
// Not here: position dropout on E_rel (dropout is applied to the model's outputs), v1's
// length-dependent span and fused in_proj (spec §2.7), talking heads, Shaw et al.'s value-side
// relative term (spec §6b).
#include <array>
#include <cmath>

#include "autograd/ops.h"
#include "nn/layers.h"
#include "nn/posenc/position_encoding.h"

namespace posgrad::nn {

int64_t deberta_log_bucket(int64_t rel, int64_t position_buckets, int64_t max_position) {
  if (position_buckets <= 0 || max_position <= 0) return rel;  // no bucketing (HF: only if both > 0)
  const int64_t mid = position_buckets / 2;
  const int64_t abs_rel = rel < 0 ? -rel : rel;
  if (abs_rel <= mid) return rel;  // exact for -mid..mid
  POSGRAD_CHECK(mid >= 1 && max_position - 1 > mid, ValueError, "DeBERTa log buckets: need position_buckets >= 2 and ",
                "max_relative_positions - 1 > position_buckets / 2, got position_buckets=", position_buckets,
                " max_relative_positions=", max_position);
  // HF: ceil(log(|r| / mid) / log((P - 1) / mid) * (mid - 1)) + mid, same operation order. Both logs
  // go through the same std::log in double, so |r| = P - 1 gives exactly 1 -> PB - 1 (spec §2.2).
  const double lp = std::ceil(std::log(static_cast<double>(abs_rel) / static_cast<double>(mid)) /
                              std::log(static_cast<double>(max_position - 1) / static_cast<double>(mid)) *
                              static_cast<double>(mid - 1)) +
                    static_cast<double>(mid);
  const int64_t b = static_cast<int64_t>(lp);
  return rel < 0 ? -b : b;
}

int64_t deberta_span(int64_t position_buckets, int64_t max_relative_positions) {
  return position_buckets > 0 ? position_buckets : max_relative_positions;
}

int64_t deberta_row(int64_t rel, int64_t position_buckets, int64_t max_relative_positions) {
  const int64_t S = deberta_span(position_buckets, max_relative_positions);
  const int64_t delta = deberta_log_bucket(rel, position_buckets, max_relative_positions);
  return std::clamp<int64_t>(delta + S, 0, 2 * S - 1);
}

ScoreModifier deberta_score_modifier(const Tensor& rel_emb, const Tensor& w_k, const Tensor& b_k, const Tensor& w_q,
                                     const Tensor& b_q, int64_t n_head, int64_t position_buckets,
                                     int64_t max_relative_positions) {
  const int64_t S = deberta_span(position_buckets, max_relative_positions);
  POSGRAD_CHECK(S > 0, ValueError, "DeBERTa: attention span must be positive (position_buckets=", position_buckets,
                ", max_relative_positions=", max_relative_positions, ")");
  POSGRAD_CHECK(rel_emb.dim() == 2 && rel_emb.size(0) == 2 * S && rel_emb.size(1) % n_head == 0, ShapeError,
                "DeBERTa: relative embeddings must be (2S = ", 2 * S, ", C) with C divisible by ", n_head, ", got ",
                shape_str(rel_emb.shape()));
  POSGRAD_CHECK(w_k.defined() || w_q.defined(), ValueError, "DeBERTa: neither c2p nor p2c is enabled");
  const int64_t D = rel_emb.size(1) / n_head;
  ScoreModifier m;
  m.kind = ScoreBias::ContentPosition;
  if (w_k.defined()) m.kr = linear(rel_emb, w_k, b_k).reshape({2 * S, n_head, D});  // c2p keys
  if (w_q.defined()) m.qr = linear(rel_emb, w_q, b_q).reshape({2 * S, n_head, D});  // p2c queries
  // The attention passes r = key - query; DeBERTa's relative position is query - key = -r.
  m.bucket = [=](int64_t r) { return deberta_row(-r, position_buckets, max_relative_positions); };
  return m;
}

namespace {

class DebertaEncoding : public PositionEncoding {
 public:
  DebertaEncoding(const PosEncConfig& cfg, Generator& gen)
      : H_(cfg.n_head),
        PB_(cfg.options.integer("deberta_position_buckets")),
        M_(cfg.options.integer("deberta_max_relative_positions") < 1
               ? cfg.block_size
               : cfg.options.integer("deberta_max_relative_positions")),
        c2p_(cfg.options.boolean("deberta_c2p")),
        p2c_(cfg.options.boolean("deberta_p2c")),
        share_(cfg.options.boolean("deberta_share_att_key")) {
    causal_ = cfg.causal;
    POSGRAD_CHECK(c2p_ || p2c_, ValueError, "DeBERTa position encoding: enable c2p and/or p2c");
    const int64_t S = deberta_span(PB_, M_);
    POSGRAD_CHECK(S > 0, ValueError, "DeBERTa: attention span must be positive, got ", S);
    (void)deberta_log_bucket(M_, PB_, M_);  // validates the bucket parameters
    const int64_t C = cfg.n_embd;
    rel_embeddings = register_parameter("rel_embeddings", randn({2 * S, C}, gen, cfg.dtype, Device::cpu(), 0.0, 0.02));
    if (cfg.options.boolean("deberta_layer_norm"))
      rel_norm = register_module("rel_norm", std::make_shared<LayerNorm>(C, 1e-7, cfg.dtype));
    if (!share_) {
      if (c2p_) pos_key_proj = register_module("pos_key_proj", std::make_shared<ModuleList<Linear>>());
      if (p2c_) pos_query_proj = register_module("pos_query_proj", std::make_shared<ModuleList<Linear>>());
      for (int64_t l = 0; l < cfg.n_layer; ++l) {
        if (c2p_) pos_key_proj->push_back(std::make_shared<Linear>(C, C, true, gen, 0.02, cfg.dtype));
        if (p2c_) pos_query_proj->push_back(std::make_shared<Linear>(C, C, true, gen, 0.02, cfg.dtype));
      }
    }
    n_layer_ = cfg.n_layer;
  }
  std::string kind() const override { return "deberta"; }
  ScoreModifier scores(int64_t layer, const LayerProjections& proj, int64_t Tq, int64_t Tk, int64_t q_offset) override {
    POSGRAD_CHECK(layer >= 0 && layer < n_layer_, IndexError, "DeBERTa position encoding: layer ", layer,
                  " out of range (", n_layer_, " layers)");
    (void)score_window(Tq, Tk, q_offset, "DeBERTa scores");  // checks the geometry while ids are set
    const Tensor R = rel_norm ? rel_norm->forward(rel_embeddings) : rel_embeddings;
    Tensor wk, bk, wq, bq;
    if (share_) {
      POSGRAD_CHECK((!c2p_ || proj.w_k.defined()) && (!p2c_ || proj.w_q.defined()), ValueError,
                    "DeBERTa with share_att_key needs the layer's query/key projections");
      if (c2p_) wk = proj.w_k, bk = proj.b_k;
      if (p2c_) wq = proj.w_q, bq = proj.b_q;
    } else {
      if (c2p_) wk = (*pos_key_proj)[layer].weight, bk = (*pos_key_proj)[layer].bias;
      if (p2c_) wq = (*pos_query_proj)[layer].weight, bq = (*pos_query_proj)[layer].bias;
    }
    ScoreModifier m = deberta_score_modifier(R, wk, bk, wq, bq, H_, PB_, M_);
    attach_positions(m);  // rows bucket(ids[i] - ids[j]) while ids are set
    return m;
  }
  bool supports_position_ids() const override { return true; }
  bool position_ids_in_attention() const override { return true; }
  double attention_scale(int64_t head_dim) const override {
    const double terms = 1.0 + (c2p_ ? 1.0 : 0.0) + (p2c_ ? 1.0 : 0.0);
    return 1.0 / std::sqrt(static_cast<double>(head_dim) * terms);  // spec §2.4: 1/sqrt(d s)
  }

  Tensor rel_embeddings;  // (2S, C)
  std::shared_ptr<LayerNorm> rel_norm;
  std::shared_ptr<ModuleList<Linear>> pos_key_proj, pos_query_proj;

 private:
  int64_t H_, PB_, M_, n_layer_ = 0;
  bool c2p_, p2c_, share_;
};

}  // namespace

namespace {

// One attention case: q, k, v then Kr (c2p) and/or Qr (p2c), (2S, H, D), with DeBERTa's rows
// c(i, j) = deberta_row(i - j) (spec §2.4) and scale 1/sqrt(D (1 + #terms)).
// With `positions` (randomized positions): rows c(i, j) = deberta_row(positions[i] - positions[j]).
void add_deberta_case(std::vector<OpCase>& out, const std::string& name, Shape q, bool causal, bool c2p, bool p2c,
                      int64_t pb, int64_t mrp, std::vector<int64_t> positions = {}) {
  const double scale = 1.0 / std::sqrt(double(q[3]) * (1 + int(c2p) + int(p2c)));
  add_content_position_case(
      out, "posenc/deberta/" + name, q, q, causal, 0, scale, 2 * deberta_span(pb, mrp), c2p, p2c,
      [=](int64_t r) { return deberta_row(-r, pb, mrp); }, std::move(positions));
}

// q, k, v (B, H, T, D) from x (B, T, C) through a fused qkv weight (3C, C) + bias (3C).
std::array<Tensor, 3> project_heads(const Tensor& x, const Tensor& w, const Tensor& b, int64_t H) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / H;
  Tensor y = linear(x, w, b);
  std::array<Tensor, 3> qkv;
  for (int64_t p = 0; p < 3; ++p) qkv[p] = y.narrow(2, p * C, C).reshape({B, T, H, D}).permute({0, 2, 1, 3});
  return qkv;
}

// Op-registry cases: the fused attention with c2p/p2c (both, either, log buckets or none, causal
// and bidirectional, T = 1 / 7 / 33), and the full path E_rel -> LayerNorm -> each layer's W_k/W_q
// (share_att_key) -> Kr/Qr across two layers, against the materialising reference.
void deberta_op_cases(std::vector<OpCase>& out) {
  add_deberta_case(out, "causal/1x3x33x5", {1, 3, 33, 5}, true, true, true, 4, 10);
  add_deberta_case(out, "bidir/2x3x7x5", {2, 3, 7, 5}, false, true, true, 4, 10);
  add_deberta_case(out, "causal/T1", {1, 1, 1, 3}, true, true, true, 4, 10);
  add_deberta_case(out, "c2p_only/bidir/2x1x7x3", {2, 1, 7, 3}, false, true, false, 4, 10);
  add_deberta_case(out, "p2c_only/causal/1x3x7x4", {1, 3, 7, 4}, true, false, true, 4, 10);
  add_deberta_case(out, "p2c_only/bidir/1x3x7x4", {1, 3, 7, 4}, false, false, true, 4, 10);
  // span 3 without log buckets: |i - j| >= 3 clamps onto the first/last rows
  add_deberta_case(out, "no_buckets/bidir/1x3x7x4", {1, 3, 7, 4}, false, true, true, 0, 3);
  // Randomized positions: distances up to 22 reach the log buckets (4 buckets, max 10).
  add_deberta_case(out, "causal/positions_gaps/2x3x7x5", {2, 3, 7, 5}, true, true, true, 4, 10,
                   {1, 2, 5, 9, 10, 17, 23});
  add_deberta_case(out, "bidir/positions_gaps/2x3x7x5", {2, 3, 7, 5}, false, true, true, 4, 10,
                   {0, 4, 5, 6, 13, 20, 23});
  // E_rel and its LayerNorm are shared by the two layers; each layer's W_q/W_k get content and
  // position gradients.
  // Causal (decoder) and bidirectional (encoder, DeBERTa's own setting).
  for (bool causal : {true, false})
    add_composite(
        out, std::string("posenc/deberta/shared_table_two_layers") + (causal ? "" : "/bidir"),
        [](Generator& g, DType t) {
          return TensorList{make_input({2, 9, 6}, g, t),
                            make_input({18, 6}, g, t),
                            make_input({18}, g, t),
                            make_input({18, 6}, g, t),
                            make_input({18}, g, t),
                            make_input({8, 6}, g, t),
                            make_input({6}, g, t, true, 0.5, 1.5),
                            make_input({6}, g, t)};
        },
        [causal](const TensorList& x, bool naive) {
          const int64_t H = 3, PB = 4, M = 6;
          const double scale = 1.0 / std::sqrt(2.0 * 3);
          const Tensor R = layer_norm(x[5], x[6], x[7], 1e-7);
          Tensor h = x[0];
          for (int l = 0; l < 2; ++l) {
            const Tensor& w = x[1 + 2 * l];
            const Tensor& b = x[2 + 2 * l];
            auto [q, k, v] = project_heads(h, w, b, H);
            const ScoreModifier m = deberta_score_modifier(R, w.narrow(0, 6, 6), b.narrow(0, 6, 6), w.narrow(0, 0, 6),
                                                           b.narrow(0, 0, 6), H, PB, M);
            h = h + run_attention(q, k, v, m, causal, scale, naive).permute({0, 2, 1, 3}).reshape({2, 9, 6});
          }
          return h;
        });
}

}  // namespace

PosEncEntry deberta_encoding() {
  using namespace opt;
  return {"deberta",
          "disentangled content-to-position and position-to-content attention terms (He et al. 2021)",
          [](const PosEncConfig& cfg, Generator& gen) { return std::make_shared<DebertaEncoding>(cfg, gen); },
          {with_default(integer("deberta_position_buckets", closed(0, 4096),
                                "DeBERTa: position_buckets of the log bucketing (0: no bucketing)"),
                        int64_t{32}),
           with_default(integer("deberta_max_relative_positions", closed(0, 1 << 20),
                                "DeBERTa: max_relative_positions (0: the training context)", "positions"),
                        int64_t{128}),
           with_default(boolean("deberta_c2p", "DeBERTa: content-to-position term"), true),
           with_default(boolean("deberta_p2c", "DeBERTa: position-to-content term"), true),
           with_default(boolean("deberta_layer_norm", "DeBERTa: LayerNorm on the relative-embedding table"), true),
           with_default(boolean("deberta_share_att_key",
                                "DeBERTa: project positions with the layer's content query/key weights"),
                        true)},
          [](const PosEncConfig& cfg) {
            POSGRAD_CHECK(cfg.options.boolean("deberta_c2p") || cfg.options.boolean("deberta_p2c"), ValueError,
                          "DeBERTa: --deberta-c2p and --deberta-p2c are both false; enable at least one");
            const int64_t pb = cfg.options.integer("deberta_position_buckets");
            const int64_t m = cfg.options.integer("deberta_max_relative_positions") < 1
                                  ? cfg.block_size
                                  : cfg.options.integer("deberta_max_relative_positions");
            // The largest distance this length can hold reaches the log buckets when it passes
            // position_buckets / 2: their parameters must be valid there (and a model evaluated
            // longer than it was trained is validated at that length: compare's --eval-multipliers).
            (void)deberta_log_bucket(std::max(m, cfg.block_size - 1), pb, m);
          },
          deberta_op_cases};
}

}  // namespace posgrad::nn
