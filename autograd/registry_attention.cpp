// registry_attention.cpp — op-registry cases for the fused attention in each of the three shapes of
// score modifier the kernels know (none; a bias per head and distance given as data, with its
// gradient; content-position terms with a bucket function), causal and bidirectional, odd shapes
// T = 1 / 7 / 33, heads 1 and 3, odd D, query offsets (fully masked rows; a KV-cache-like window),
// and the exact edge points of the online softmax. References: naive loops in double. The position
// encodings' own cases (T5's table, ALiBi's slopes, KERPLE's kernel, DeBERTa's projections, RoPE)
// live beside them in nn/posenc/ and use the builders below. Where a GPU exists, the registry sweep
// also compares these cases with the CUDA twins (tensor/kernels/cuda/).
#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/ops.h"
#include "autograd/ops/attention.h"
#include "autograd/registry.h"

namespace posgrad {

Tensor naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionBiasFn& bias, bool causal,
                       double scale, int64_t q_offset, const std::vector<double>& sinks) {
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
        if (mx == -INFINITY) continue;  // no key: output 0 (with or without a sink)
        const bool sink = !sinks.empty();
        if (sink) mx = std::max(mx, sinks[h]);
        double z = sink ? std::exp(sinks[h] - mx) : 0.0;
        for (int64_t j = 0; j < Tk; ++j) z += s[j] == -INFINITY ? 0.0 : std::exp(s[j] - mx);
        for (int64_t j = 0; j < Tk; ++j) {
          if (s[j] == -INFINITY) continue;
          const double p = std::exp(s[j] - mx) / z;
          for (int64_t e = 0; e < D; ++e) out[(bh * Tq + i) * D + e] += p * V[(bh * Tk + j) * D + e];
        }
      }
  return Tensor::from_vector(out, q.shape(), DType::Float64);
}

void add_attention_case(std::vector<OpCase>& out, const AttentionCase& ac) {
  const double scale = ac.scale != 0 ? ac.scale : 1.0 / std::sqrt(double(ac.q[3]));
  OpCase c;
  c.name = ac.name;
  c.inputs = [ac](Generator& g, DType t) {
    TensorList x{make_input(ac.q, g, t), make_input(ac.k, g, t), make_input(ac.k, g, t)};
    if (ac.extra_inputs)
      for (Tensor& e : ac.extra_inputs(g, t)) x.push_back(e);
    if (ac.sinks) x.push_back(make_input({ac.q[1]}, g, t, true, -1.5, 1.5));
    return x;
  };
  c.fn = [ac, scale](const TensorList& x) {
    ScoreModifier m = ac.modifier ? ac.modifier(x) : ScoreModifier{};
    if (ac.sinks) m.sinks = x.back();
    return attention(x[0], x[1], x[2], m, ac.causal, scale, ac.q_offset);
  };
  c.reference = [ac, scale](const TensorList& x) {
    return naive_attention(x[0], x[1], x[2], ac.reference_bias ? ac.reference_bias(x) : AttentionBiasFn{}, ac.causal,
                           scale, ac.q_offset, ac.sinks ? host(x.back()) : std::vector<double>());
  };
  out.push_back(c);
}

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

Tensor run_attention(const Tensor& q, const Tensor& k, const Tensor& v, const ScoreModifier& m, bool causal,
                     double scale, bool naive) {
  return naive ? attention_reference(q, k, v, m, causal, scale) : attention(q, k, v, m, causal, scale);
}

void add_content_position_case(std::vector<OpCase>& out, const std::string& name, const Shape& q, const Shape& k,
                               bool causal, int64_t q_offset, double scale, int64_t rows, bool c2p, bool p2c,
                               std::function<int64_t(int64_t r)> bucket, std::vector<int64_t> positions, bool sinks) {
  const int64_t H = q[1], Tq = q[2], D = q[3], Tk = k[2];
  AttentionCase ac;
  ac.name = name;
  ac.sinks = sinks;
  ac.q = q;
  ac.k = k;
  ac.causal = causal;
  ac.q_offset = q_offset;
  ac.scale = scale;
  ac.extra_inputs = [=](Generator& g, DType t) {
    TensorList x;
    if (c2p) x.push_back(make_input({rows, H, D}, g, t));
    if (p2c) x.push_back(make_input({rows, H, D}, g, t));
    return x;
  };
  ac.modifier = [=](const TensorList& x) {
    ScoreModifier m;
    m.kind = ScoreBias::ContentPosition;
    size_t at = 3;
    if (c2p) m.kr = x[at++];
    if (p2c) m.qr = x[at++];
    m.bucket = bucket;
    m.query_positions = m.key_positions = positions;
    return m;
  };
  ac.reference_bias = [=](const TensorList& x) -> AttentionBiasFn {
    auto Q = host(x[0]), K = host(x[1]);
    size_t at = 3;
    std::vector<double> kr = c2p ? host(x[at++]) : std::vector<double>();
    std::vector<double> qr = p2c ? host(x[at++]) : std::vector<double>();
    return [=](int64_t b, int64_t h, int64_t i, int64_t j) {
      const int64_t r = positions.empty() ? j - i - q_offset : positions[j] - positions[i];
      const int64_t c = bucket(r), bh = b * H + h;
      double s = 0;
      for (int64_t e = 0; e < D; ++e) {
        if (!kr.empty()) s += Q[(bh * Tq + i) * D + e] * kr[(c * H + h) * D + e];
        if (!qr.empty()) s += K[(bh * Tk + j) * D + e] * qr[(c * H + h) * D + e];
      }
      return scale * s;
    };
  };
  add_attention_case(out, ac);
  if (!positions.empty()) out.back().cuda = false;  // no CUDA kernel for per-token positions
}

namespace {

// The modifier shapes with generic data. Distance: any (H, Tq + Tk - 1) tensor, gradchecked
// (what T5, ALiBi and KERPLE compute from their parameters). ContentPosition: kr, qr (2S, H, D) and
// the bucket c(r) = clamp(r, -S, S - 1) + S (DeBERTa's without log buckets). Dense: any (H, Tq, Tk)
// tensor (what FIRE computes), CPU only. Separable: any (B, H, Tq + Tk) tensor of row and column
// terms (what FoX computes), CPU only.
enum class Modifier { None, Distance, ContentPosition, Dense, Separable };
struct Spec {
  std::string name;
  Shape q, k;
  bool causal = true;
  int64_t q_offset = 0;
  Modifier mod = Modifier::None;
  bool c2p = true, p2c = true;     // ContentPosition terms
  std::vector<int64_t> positions;  // per-token positions of the self-attention (Tq = Tk); empty: none
  bool sinks = false;              // learnable attention sinks (one more input, (H))
};
constexpr int64_t kSpan = 3;  // S of the generic content-position bucket

void add_case(std::vector<OpCase>& out, const Spec& sp) {
  AttentionCase ac;
  ac.q = sp.q;
  ac.k = sp.k;
  ac.causal = sp.causal;
  ac.q_offset = sp.q_offset;
  ac.sinks = sp.sinks;
  const std::string family = sp.sinks ? "attention/sinks/" : "attention/";
  const int64_t H = sp.q[1], D = sp.q[3], Tq = sp.q[2], Tk = sp.k[2];
  const std::vector<int64_t> pos = sp.positions;
  // Bias width and column of (i, j): the diagonal, or with positions that of the virtual window.
  const int64_t nd = pos.empty() ? Tq + Tk - 1 : 2 * pos.back() + 1;
  auto column = [=](int64_t i, int64_t j) { return pos.empty() ? j - i + Tq - 1 : pos[j] - pos[i] + pos.back(); };
  const double scale = 1.0 / std::sqrt(double(D));
  switch (sp.mod) {
    case Modifier::None: ac.name = family + "none/" + sp.name; break;
    case Modifier::Distance:
      ac.name = family + "distance/" + sp.name;
      ac.extra_inputs = [=](Generator& g, DType t) { return TensorList{make_input({H, nd}, g, t, true, -2.0, 2.0)}; };
      ac.modifier = [pos](const TensorList& x) {
        ScoreModifier m;
        m.kind = ScoreBias::Distance;
        m.bias_by_distance = x[3];
        m.query_positions = m.key_positions = pos;
        return m;
      };
      ac.reference_bias = [=](const TensorList& x) -> AttentionBiasFn {
        auto bias = host(x[3]);
        return [=](int64_t, int64_t h, int64_t i, int64_t j) { return bias[h * nd + column(i, j)]; };
      };
      break;
    case Modifier::Dense:
      ac.name = family + "dense/" + sp.name;
      ac.extra_inputs = [=](Generator& g, DType t) {
        return TensorList{make_input({H, Tq, Tk}, g, t, true, -2.0, 2.0)};
      };
      ac.modifier = [](const TensorList& x) {
        ScoreModifier m;
        m.kind = ScoreBias::Dense;
        m.bias_dense = x[3];
        return m;
      };
      ac.reference_bias = [=](const TensorList& x) -> AttentionBiasFn {
        auto bias = host(x[3]);
        return [=](int64_t, int64_t h, int64_t i, int64_t j) { return bias[(h * Tq + i) * Tk + j]; };
      };
      add_attention_case(out, ac);
      out.back().cuda = false;  // no CUDA kernel for the dense bias
      return;
    case Modifier::Separable: {
      const int64_t B = sp.q[0];
      ac.name = family + "separable/" + sp.name;
      ac.extra_inputs = [=](Generator& g, DType t) {
        return TensorList{make_input({B, H, Tq + Tk}, g, t, true, -2.0, 2.0)};
      };
      ac.modifier = [](const TensorList& x) {
        ScoreModifier m;
        m.kind = ScoreBias::Separable;
        m.bias_separable = x[3];
        return m;
      };
      ac.reference_bias = [=](const TensorList& x) -> AttentionBiasFn {
        auto bias = host(x[3]);
        return [=](int64_t b, int64_t h, int64_t i, int64_t j) {
          const double* row = bias.data() + (b * H + h) * (Tq + Tk);
          return row[i] + row[Tq + j];
        };
      };
      add_attention_case(out, ac);
      out.back().cuda = false;  // no CUDA kernel for the separable bias
      return;
    }
    case Modifier::ContentPosition:
      add_content_position_case(
          out, family + "content_position/" + sp.name, sp.q, sp.k, sp.causal, sp.q_offset, scale, 2 * kSpan, sp.c2p,
          sp.p2c, [](int64_t r) { return std::clamp<int64_t>(r, -kSpan, kSpan - 1) + kSpan; }, pos, sp.sinks);
      return;
  }
  add_attention_case(out, ac);
  if (!pos.empty()) out.back().cuda = false;  // no CUDA kernel for per-token positions
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

// Exact edge points of the sink logit (SPEC-positions-2 §5.5): the sink must enter the row maximum
// (logits of 1e4 overflow exp otherwise), and a row that sees only the sink outputs 0 with zero
// gradients, no NaN. q (1, 1, 1, 1) = 100, k = [100, 100], v = [1, 3], sink (1).
std::vector<EdgePoint> sink_edges() {
  auto inputs = [](double sink) {
    return [sink](DType t) {
      return TensorList{edge_input({100}, {1, 1, 1, 1}, t), edge_input({100, 100}, {1, 1, 2, 1}, t),
                        edge_input({1, 3}, {1, 1, 2, 1}, t), edge_input({sink}, {1}, t)};
    };
  };
  auto fn = [](int64_t q_offset) {
    return [q_offset](const TensorList& x) {
      ScoreModifier m;
      m.sinks = x[3];
      return attention(x[0], x[1], x[2], m, true, 1.0, q_offset);
    };
  };
  EdgePoint equal;
  equal.what = "sink and both scores 1e4: P = 1/3 each, the sink in the row max (no overflow)";
  equal.inputs = inputs(1e4);
  equal.fn = fn(1);  // the query at position 1 sees both keys
  // o = (1 + 3)/3; delta = o; dS = P (v - o) = [-1/9, 5/9]; dq = 100 (4/9); dk = 100 dS; dv = [1/3, 1/3];
  // dsink = -P_sink delta = -4/9.
  equal.output = {4.0 / 3.0};
  equal.grads = {{400.0 / 9.0}, {-100.0 / 9.0, 500.0 / 9.0}, {1.0 / 3.0, 1.0 / 3.0}, {-4.0 / 9.0}};
  equal.ulps = 64;  // float32 rounding of 1/3 through a GEMM, and dq = 100 (5/9 - 1/9)
  equal.atol = 1e-5;
  EdgePoint alone;
  alone.what = "a row that sees no key puts all its mass on the sink: output 0, gradients 0";
  alone.inputs = inputs(0.5);
  alone.fn = fn(-1);  // the query at position -1 sees no key
  alone.output = {0};
  alone.grads = {{0}, {0, 0}, {0, 0}, {0}};
  return {equal, alone};
}

}  // namespace

void register_attention_cases(std::vector<OpCase>& out) {
  const Shape s2173{2, 1, 7, 3}, s1374{1, 3, 7, 4}, s13335{1, 3, 33, 5}, s1113{1, 1, 1, 3}, s2375{2, 3, 7, 5};
  auto spec = [](std::string n, Shape q, bool causal, Modifier mod = Modifier::None) {
    Spec s;
    s.name = std::move(n);
    s.q = q;
    s.k = q;
    s.causal = causal;
    s.mod = mod;
    return s;
  };
  for (Modifier mod :
       {Modifier::None, Modifier::Distance, Modifier::ContentPosition, Modifier::Dense, Modifier::Separable}) {
    add_case(out, spec("bidir/2x1x7x3", s2173, false, mod));
    if (mod == Modifier::None) out.back().edges = attention_edges();
    add_case(out, spec("causal/1x3x33x5", s13335, true, mod));
    add_case(out, spec("causal/T1", s1113, true, mod));
    add_case(out, spec("bidir/2x3x7x5", s2375, false, mod));
    {
      Spec s = spec("causal/q_offset-3", {1, 2, 7, 3}, true, mod);
      s.q_offset = -3;  // rows 0..2 see no key: output 0, gradient 0
      add_case(out, s);
    }
    {
      Spec s = spec("causal/Tq5_Tk9_offset4", {2, 1, 5, 3}, true, mod);
      s.k = {2, 1, 9, 3};
      s.q_offset = 4;  // the last 5 positions of a 9-key window (KV-cache-like)
      add_case(out, s);
    }
  }
  {
    Spec s = spec("c2p_only/bidir/2x1x7x3", s2173, false, Modifier::ContentPosition);
    s.p2c = false;
    add_case(out, s);
  }
  {
    Spec s = spec("p2c_only/causal/1x3x7x4", s1374, true, Modifier::ContentPosition);
    s.c2p = false;
    add_case(out, s);
  }
  // Per-token positions (randomized positions, Ruoss et al. 2023 §3): gaps of 1 to 5, a first
  // position past 0 (causal and bidirectional; T = 70 crosses a 64-wide tile in both directions),
  // and positions 0..T-1 (the diagonal path's values through the positions path).
  const std::vector<int64_t> gaps{1, 3, 4, 6, 7, 12, 13, 14};
  std::vector<int64_t> long_gaps;
  for (int64_t t = 0, p = 2; t < 70; ++t, p += 1 + (t * 7) % 5) long_gaps.push_back(p);
  std::vector<int64_t> identity(7);
  for (int64_t t = 0; t < 7; ++t) identity[t] = t;
  // Learnable attention sinks (SPEC-positions-2 §5) with every modifier shape: bidirectional, causal
  // across a tile (T = 70 > 64), a single token, rows that see only the sink (q_offset -3), a
  // KV-cache-like window, and per-token positions.
  for (Modifier mod :
       {Modifier::None, Modifier::Distance, Modifier::ContentPosition, Modifier::Dense, Modifier::Separable}) {
    auto with_sinks = [](Spec s) {
      s.sinks = true;
      return s;
    };
    add_case(out, with_sinks(spec("bidir/2x3x7x5", s2375, false, mod)));
    if (mod == Modifier::None) out.back().edges = sink_edges();
    add_case(out, with_sinks(spec("causal/1x2x70x3", {1, 2, 70, 3}, true, mod)));
    add_case(out, with_sinks(spec("causal/T1", s1113, true, mod)));
    {
      Spec s = with_sinks(spec("causal/q_offset-3", {1, 2, 7, 3}, true, mod));
      s.q_offset = -3;
      add_case(out, s);
    }
    {
      Spec s = with_sinks(spec("causal/Tq5_Tk9_offset4", {2, 3, 5, 3}, true, mod));
      s.k = {2, 3, 9, 3};
      s.q_offset = 4;
      add_case(out, s);
    }
    if (mod == Modifier::Distance || mod == Modifier::ContentPosition) {
      Spec s = with_sinks(spec("bidir/positions_gaps/2x3x8x5", {2, 3, 8, 5}, false, mod));
      s.positions = gaps;
      add_case(out, s);
    }
  }
  for (Modifier mod : {Modifier::Distance, Modifier::ContentPosition}) {
    for (bool causal : {true, false}) {
      Spec s = spec(std::string(causal ? "causal" : "bidir") + "/positions_gaps/2x3x8x5", {2, 3, 8, 5}, causal, mod);
      s.positions = gaps;
      add_case(out, s);
      Spec l = spec(std::string(causal ? "causal" : "bidir") + "/positions_gaps/1x2x70x3", {1, 2, 70, 3}, causal, mod);
      l.positions = long_gaps;
      add_case(out, l);
    }
    Spec s = spec("causal/positions_identity/1x3x7x4", s1374, true, mod);
    s.positions = identity;
    add_case(out, s);
  }
}

}  // namespace posgrad
