// registry_attention.cpp — op-registry cases for the fused attention (every score modifier,
// causal and bidirectional, odd shapes T = 1 / 7 / 33, heads 1 and 3, odd D, a negative query
// offset with fully masked rows), the RoPE op (both layouts, partial rotary, YaRN's factor) and the
// position encodings' differentiable pieces (learned and sinusoidal embeddings, the T5 table shared
// by two layers, DeBERTa's relative table through LayerNorm and the layer's shared q/k
// projections). References: naive loops in double for the ops; for the composite encoding cases,
// the materialising attention built from ordinary ops (attention_reference). Where a GPU exists,
// the registry sweep also compares these cases with the CUDA twins (tensor/kernels/cuda/).
#include <cmath>
#include <limits>

#include "autograd/ops.h"
#include "autograd/ops/attention.h"
#include "autograd/registry.h"
#include "nn/posenc/position_encoding.h"

namespace posgrad {

namespace {

using BiasFn = std::function<double(int64_t b, int64_t h, int64_t i, int64_t j)>;

// Naive attention in double: out[b,h,i] = sum_j softmax_j(scale q.k + bias) v_j; keys with
// j > i + q_offset are hidden when causal; a row that sees nothing is 0.
Tensor naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const BiasFn& bias, bool causal,
                       double scale, int64_t q_offset) {
  auto Q = host(q), K = host(k), V = host(v);
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3), Tk = k.size(2);
  std::vector<double> out(static_cast<size_t>(B * H * Tq * D), 0.0), s(static_cast<size_t>(Tk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t bh = b * H + h;
        double mx = -INFINITY;
        for (int64_t j = 0; j < Tk; ++j) {
          if (causal && j > i + q_offset) {
            s[j] = -INFINITY;
            continue;
          }
          double dot = 0;
          for (int64_t e = 0; e < D; ++e) dot += Q[(bh * Tq + i) * D + e] * K[(bh * Tk + j) * D + e];
          s[j] = scale * dot + (bias ? bias(b, h, i, j) : 0.0);
          mx = std::max(mx, s[j]);
        }
        if (mx == -INFINITY) continue;
        double z = 0;
        for (int64_t j = 0; j < Tk; ++j) z += s[j] == -INFINITY ? 0.0 : std::exp(s[j] - mx);
        for (int64_t j = 0; j < Tk; ++j) {
          if (s[j] == -INFINITY) continue;
          const double p = std::exp(s[j] - mx) / z;
          for (int64_t e = 0; e < D; ++e) out[(bh * Tq + i) * D + e] += p * V[(bh * Tk + j) * D + e];
        }
      }
  return Tensor::from_vector(out, q.shape(), DType::Float64);
}

struct AttnSpec {
  std::string name;
  Shape q, k;  // (B, H, Tq, D), (B, H, Tk, D)
  bool causal = true;
  int64_t q_offset = 0;
  ScoreBias kind = ScoreBias::None;
  bool scaled = true;            // scale 1/sqrt(D) (else 1: T5 unscaled)
  int64_t nb = 8, md = 20;       // T5 buckets / max distance
  int64_t pb = 4, mrp = 10;      // DeBERTa position_buckets / max_relative_positions
  bool c2p = true, p2c = true;
};

void add_attention_case(std::vector<OpCase>& out, const AttnSpec& sp) {
  const int64_t H = sp.q[1], D = sp.q[3];
  const int64_t S = nn::deberta_span(sp.pb, sp.mrp);
  const double scale = sp.kind == ScoreBias::DeBERTa
                           ? 1.0 / std::sqrt(double(D) * (1 + int(sp.c2p) + int(sp.p2c)))
                           : (sp.scaled ? 1.0 / std::sqrt(double(D)) : 1.0);
  // The modifier of the case from its tensor inputs (q, k, v, then table or kr/qr).
  auto modifier = [=](const TensorList& x) {
    ScoreModifier m;
    if (sp.kind == ScoreBias::T5) m = nn::t5_score_modifier(x[3], !sp.causal, sp.nb, sp.md);
    if (sp.kind == ScoreBias::ALiBi) {
      m.kind = ScoreBias::ALiBi;
      m.slopes = nn::alibi_slopes(H);
    }
    if (sp.kind == ScoreBias::DeBERTa) {
      m.kind = ScoreBias::DeBERTa;
      size_t at = 3;
      if (sp.c2p) m.kr = x[at++];
      if (sp.p2c) m.qr = x[at++];
      const int64_t pb = sp.pb, mrp = sp.mrp;
      m.bucket = [=](int64_t r) { return nn::deberta_row(-r, pb, mrp); };
    }
    return m;
  };
  OpCase c;
  c.name = "attention/" + sp.name;
  c.inputs = [=](Generator& g, DType t) {
    TensorList x{make_input(sp.q, g, t), make_input(sp.k, g, t), make_input(sp.k, g, t)};
    if (sp.kind == ScoreBias::T5) x.push_back(make_input({sp.nb, H}, g, t));
    if (sp.kind == ScoreBias::DeBERTa) {
      if (sp.c2p) x.push_back(make_input({2 * S, H, D}, g, t));
      if (sp.p2c) x.push_back(make_input({2 * S, H, D}, g, t));
    }
    return x;
  };
  c.fn = [=](const TensorList& x) { return attention(x[0], x[1], x[2], modifier(x), sp.causal, scale, sp.q_offset); };
  c.reference = [=](const TensorList& x) {
    const ScoreModifier m = modifier(x);
    BiasFn bias;
    const int64_t Tq = sp.q[2], Tk = sp.k[2];
    if (sp.kind == ScoreBias::T5) {
      auto tab = host(x[3]);
      bias = [=](int64_t, int64_t h, int64_t i, int64_t j) { return tab[m.bucket(j - i - sp.q_offset) * H + h]; };
    } else if (sp.kind == ScoreBias::ALiBi) {
      bias = [=](int64_t, int64_t h, int64_t i, int64_t j) {
        return -m.slopes[h] * std::fabs(double(j - i - sp.q_offset));
      };
    } else if (sp.kind == ScoreBias::DeBERTa) {
      auto Q = host(x[0]), K = host(x[1]);
      std::vector<double> kr = m.kr.defined() ? host(m.kr) : std::vector<double>();
      std::vector<double> qr = m.qr.defined() ? host(m.qr) : std::vector<double>();
      bias = [=](int64_t b, int64_t h, int64_t i, int64_t j) {
        const int64_t c = m.bucket(j - i - sp.q_offset), bh = b * H + h;
        double s = 0;
        for (int64_t e = 0; e < D; ++e) {
          if (!kr.empty()) s += Q[(bh * Tq + i) * D + e] * kr[(c * H + h) * D + e];
          if (!qr.empty()) s += K[(bh * Tk + j) * D + e] * qr[(c * H + h) * D + e];
        }
        return scale * s;
      };
    }
    return naive_attention(x[0], x[1], x[2], bias, sp.causal, scale, sp.q_offset);
  };
  out.push_back(c);
}

// RoPE op case: x (shape), angles for positions pos0.. with the given params.
void add_rope_case(std::vector<OpCase>& out, const std::string& name, Shape shape, nn::RopeParams p, bool interleaved,
                   int64_t pos0) {
  OpCase c;
  c.name = "rope/" + name;
  c.inputs = [=](Generator& g, DType t) { return TensorList{make_input(shape, g, t)}; };
  c.fn = [=](const TensorList& x) { return nn::apply_rope(x[0], p, interleaved, pos0); };
  c.reference = [=](const TensorList& x) {
    auto v = host(x[0]);
    const int64_t T = shape[shape.size() - 2], D = shape.back(), dr = p.rotary_dim, half = dr / 2;
    const nn::RopeFrequencies f = nn::rope_frequencies(p, pos0 + T);
    std::vector<double> y = v;
    for (int64_t row = 0; row < x[0].numel() / D; ++row) {
      const int64_t t = row % T;
      for (int64_t kk = 0; kk < half; ++kk) {
        const double th = double(pos0 + t) * f.inv_freq[kk];
        const int64_t ia = interleaved ? 2 * kk : kk, ib = interleaved ? 2 * kk + 1 : kk + half;
        const double a = v[row * D + ia], b = v[row * D + ib];
        y[row * D + ia] = f.attention_factor * (a * std::cos(th) - b * std::sin(th));
        y[row * D + ib] = f.attention_factor * (b * std::cos(th) + a * std::sin(th));
      }
    }
    return Tensor::from_vector(y, x[0].shape(), DType::Float64);
  };
  out.push_back(c);
}

// Composite case: a fused-vs-reference pair of functions over the same inputs.
void add_composite(std::vector<OpCase>& out, const std::string& name, std::function<TensorList(Generator&, DType)> in,
                   std::function<Tensor(const TensorList&, bool naive)> f) {
  OpCase c;
  c.name = name;
  c.inputs = std::move(in);
  c.fn = [f](const TensorList& x) { return f(x, false); };
  c.reference = [f](const TensorList& x) {
    NoGradGuard g;
    return f(x, true);
  };
  out.push_back(c);
}

// q, k, v (B, H, T, D) from x (B, T, C) through a fused qkv weight (3C, C) + bias (3C).
std::array<Tensor, 3> project_heads(const Tensor& x, const Tensor& w, const Tensor& b, int64_t H) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / H;
  Tensor y = linear(x, w, b);
  std::array<Tensor, 3> out;
  for (int64_t p = 0; p < 3; ++p) out[p] = y.narrow(2, p * C, C).reshape({B, T, H, D}).permute({0, 2, 1, 3});
  return out;
}

Tensor run_attention(const Tensor& q, const Tensor& k, const Tensor& v, const ScoreModifier& m, bool causal,
                     double scale, bool naive) {
  return naive ? attention_reference(q, k, v, m, causal, scale) : attention(q, k, v, m, causal, scale);
}

// Exact edge points of the fused attention (q (1, 1, 1, 1), k, v (1, 1, 2, 1), scale 1, no mask):
// equal scores of 1e4 must give probabilities 1/2 in backward too (P = exp((s - m) - log l); the
// rounded lse = m + log l gave 0.49990 in float32), and a NaN score makes the row NaN.
std::vector<EdgePoint> attention_edges() {
  const double kNaN = std::numeric_limits<double>::quiet_NaN();
  auto edge = [](std::string what, double k1, std::vector<double> o, std::vector<std::vector<double>> grads) {
    EdgePoint e;
    e.what = std::move(what);
    e.inputs = [k1](DType t) {
      return TensorList{edge_input({100}, {1, 1, 1, 1}, t), edge_input({100, k1}, {1, 1, 2, 1}, t),
                        edge_input({1, 3}, {1, 1, 2, 1}, t)};
    };
    e.fn = [](const TensorList& x) { return attention(x[0], x[1], x[2], ScoreModifier{}, false, 1.0); };
    e.output = std::move(o);
    e.grads = std::move(grads);
    e.atol = 1e-5;  // dq = -50 P + 50 P: an FMA in the GEMM leaves the rounding of 50 P, not 0
    return e;
  };
  return {
      // o = (v0 + v3) / 2 = 2; dS = P (dO.v - dO.o) = [-1/2, 1/2]; dq = sum_j dS_j k_j = 0;
      // dk = dS q = [-50, 50]; dv = P dO = [1/2, 1/2].
      edge("equal scores 1e4: P = 1/2 in forward and backward", 100, {2}, {{0}, {-50, 50}, {0.5, 0.5}}),
      edge("a NaN score makes the row NaN", kNaN, {kNaN}, {{kNaN}, {kNaN, kNaN}, {kNaN, kNaN}}),
  };
}

}  // namespace

void register_attention_cases(std::vector<OpCase>& out) {
  // ---- fused attention, every modifier -------------------------------------------------------
  const Shape s2173{2, 1, 7, 3}, s1374{1, 3, 7, 4}, s13335{1, 3, 33, 5}, s1113{1, 1, 1, 3}, s2375{2, 3, 7, 5};
  auto spec = [](std::string n, Shape q, bool causal, ScoreBias kind = ScoreBias::None) {
    AttnSpec s;
    s.name = std::move(n);
    s.q = q;
    s.k = q;
    s.causal = causal;
    s.kind = kind;
    return s;
  };
  add_attention_case(out, spec("none/bidir/2x1x7x3", s2173, false));
  out.back().edges = attention_edges();
  add_attention_case(out, spec("none/causal/1x3x33x5", s13335, true));
  add_attention_case(out, spec("none/causal/T1", s1113, true));
  {
    AttnSpec s = spec("none/causal/q_offset-3", {1, 2, 7, 3}, true);
    s.q_offset = -3;  // rows 0..2 see no key: output 0, gradient 0
    add_attention_case(out, s);
  }
  {
    AttnSpec s = spec("none/causal/Tq5_Tk9_offset4", {2, 1, 5, 3}, true);
    s.k = {2, 1, 9, 3};
    s.q_offset = 4;  // the last 5 positions of a 9-key window (KV-cache-like)
    add_attention_case(out, s);
  }
  add_attention_case(out, spec("t5/bidir/2x3x7x5", s2375, false, ScoreBias::T5));
  add_attention_case(out, spec("t5/causal/1x3x33x5", s13335, true, ScoreBias::T5));
  add_attention_case(out, spec("t5/causal/T1", s1113, true, ScoreBias::T5));
  {
    AttnSpec s = spec("t5/causal/unscaled/1x3x7x4", s1374, true, ScoreBias::T5);
    s.scaled = false;
    add_attention_case(out, s);
  }
  add_attention_case(out, spec("alibi/causal/1x3x33x5", s13335, true, ScoreBias::ALiBi));
  add_attention_case(out, spec("alibi/bidir/2x3x7x5", s2375, false, ScoreBias::ALiBi));
  add_attention_case(out, spec("deberta/causal/1x3x33x5", s13335, true, ScoreBias::DeBERTa));
  add_attention_case(out, spec("deberta/bidir/2x3x7x5", s2375, false, ScoreBias::DeBERTa));
  add_attention_case(out, spec("deberta/causal/T1", s1113, true, ScoreBias::DeBERTa));
  {
    AttnSpec s = spec("deberta/c2p_only/bidir/2x1x7x3", s2173, false, ScoreBias::DeBERTa);
    s.p2c = false;
    add_attention_case(out, s);
  }
  {
    AttnSpec s = spec("deberta/p2c_only/causal/1x3x7x4", s1374, true, ScoreBias::DeBERTa);
    s.c2p = false;
    add_attention_case(out, s);
  }
  {
    AttnSpec s = spec("deberta/no_buckets/bidir/1x3x7x4", s1374, false, ScoreBias::DeBERTa);
    s.pb = 0;
    s.mrp = 3;  // span 3: |i - j| >= 3 clamps onto the first/last rows
    add_attention_case(out, s);
  }

  // ---- RoPE op --------------------------------------------------------------------------------
  nn::RopeParams rp;
  rp.rotary_dim = 8;
  add_rope_case(out, "rotate_half/2x3x7x8", {2, 3, 7, 8}, rp, false, 0);
  add_rope_case(out, "interleaved/2x3x7x8/pos0_5", {2, 3, 7, 8}, rp, true, 5);
  {
    nn::RopeParams pp = rp;
    pp.rotary_dim = 4;  // partial rotary: channels 4..6 pass through
    add_rope_case(out, "partial/rotate_half/1x3x7x7", {1, 3, 7, 7}, pp, false, 3);
    add_rope_case(out, "partial/interleaved/1x3x7x7", {1, 3, 7, 7}, pp, true, 3);
  }
  {
    nn::RopeParams yp = rp;
    yp.scaling = "yarn";
    yp.factor = 4.0;
    yp.original_length = 16;
    yp.base = 100.0;
    add_rope_case(out, "yarn/1x2x33x8", {1, 2, 33, 8}, yp, false, 0);
    nn::RopeParams dp = yp;
    dp.scaling = "dynamic";
    dp.factor = 2.0;
    add_rope_case(out, "dynamic/1x2x33x8", {1, 2, 33, 8}, dp, true, 0);
  }

  // ---- position encodings' differentiable pieces ----------------------------------------------
  {
    OpCase c;
    c.name = "posenc/learned/add_positions";
    c.inputs = [](Generator& g, DType t) { return TensorList{make_input({2, 7, 6}, g, t), make_input({13, 6}, g, t)}; };
    c.fn = [](const TensorList& x) { return nn::add_learned_positions(x[0], x[1], 4); };
    c.reference = [](const TensorList& x) {
      auto a = host(x[0]), tab = host(x[1]);
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t t = 0; t < 7; ++t)
          for (int64_t e = 0; e < 6; ++e) a[(b * 7 + t) * 6 + e] += tab[(4 + t) * 6 + e];
      return Tensor::from_vector(a, {2, 7, 6}, DType::Float64);
    };
    out.push_back(c);
  }
  {
    OpCase c;
    c.name = "posenc/sinusoidal/embed";
    c.inputs = [](Generator& g, DType t) { return TensorList{make_input({2, 7, 5}, g, t)}; };
    c.fn = [](const TensorList& x) {
      nn::PosEncConfig cfg;
      cfg.kind = "sinusoidal";
      cfg.n_embd = 5;
      cfg.n_head = 1;
      Generator g(0);
      return nn::make_position_encoding(cfg, g)->embed(x[0], 3);
    };
    c.reference = [](const TensorList& x) {
      auto a = host(x[0]);
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t t = 0; t < 7; ++t)
          for (int64_t e = 0; e < 5; ++e) {
            const double w = std::pow(10000.0, -2.0 * double(e / 2) / 5.0), ang = double(3 + t) * w;
            a[(b * 7 + t) * 5 + e] = a[(b * 7 + t) * 5 + e] * std::sqrt(5.0) + (e % 2 ? std::cos(ang) : std::sin(ang));
          }
      return Tensor::from_vector(a, {2, 7, 5}, DType::Float64);
    };
    out.push_back(c);
  }
  // T5: one table shared by two attention layers (the second fed by the first): the table's
  // gradient is the sum of both layers' scatter-adds.
  add_composite(
      out, "posenc/t5/shared_table_two_layers",
      [](Generator& g, DType t) {
        return TensorList{make_input({2, 3, 9, 4}, g, t), make_input({2, 3, 9, 4}, g, t), make_input({2, 3, 9, 4}, g, t),
                          make_input({2, 3, 9, 4}, g, t), make_input({8, 3}, g, t)};
      },
      [](const TensorList& x, bool naive) {
        const ScoreModifier m = nn::t5_score_modifier(x[4], false, 8, 12);
        Tensor h1 = run_attention(x[0], x[1], x[2], m, true, 0.5, naive);
        return run_attention(h1 + x[3], x[1], h1, m, true, 0.5, naive);
      });
  // DeBERTa: E_rel -> LayerNorm -> the layer's own W_k/W_q (share_att_key) -> Kr/Qr; two layers
  // share E_rel and the LayerNorm; each layer's W_q/W_k get content and position gradients.
  add_composite(
      out, "posenc/deberta/shared_table_two_layers",
      [](Generator& g, DType t) {
        return TensorList{make_input({2, 9, 6}, g, t),   make_input({18, 6}, g, t), make_input({18}, g, t),
                          make_input({18, 6}, g, t),     make_input({18}, g, t),    make_input({8, 6}, g, t),
                          make_input({6}, g, t, true, 0.5, 1.5), make_input({6}, g, t)};
      },
      [](const TensorList& x, bool naive) {
        const int64_t H = 3, PB = 4, M = 6;
        const double scale = 1.0 / std::sqrt(2.0 * 3);
        const Tensor R = layer_norm(x[5], x[6], x[7], 1e-7);
        Tensor h = x[0];
        for (int l = 0; l < 2; ++l) {
          const Tensor& w = x[1 + 2 * l];
          const Tensor& b = x[2 + 2 * l];
          auto [q, k, v] = project_heads(h, w, b, H);
          const ScoreModifier m = nn::deberta_score_modifier(R, w.narrow(0, 6, 6), b.narrow(0, 6, 6), w.narrow(0, 0, 6),
                                                             b.narrow(0, 0, 6), H, PB, M);
          h = h + run_attention(q, k, v, m, true, scale, naive).permute({0, 2, 1, 3}).reshape({2, 9, 6});
        }
        return h;
      });
  // RoPE inside an attention layer: q, k rotated (rotate_half, partial) and attended.
  add_composite(
      out, "posenc/rope/attention_partial",
      [](Generator& g, DType t) {
        return TensorList{make_input({1, 3, 9, 6}, g, t), make_input({1, 3, 9, 6}, g, t), make_input({1, 3, 9, 6}, g, t)};
      },
      [](const TensorList& x, bool naive) {
        nn::RopeParams p;
        p.rotary_dim = 4;
        p.base = 50.0;
        return run_attention(nn::apply_rope(x[0], p, false, 2), nn::apply_rope(x[1], p, false, 2), x[2], ScoreModifier{},
                             true, 0.4, naive);
      });
}

}  // namespace posgrad
