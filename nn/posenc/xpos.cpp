// xpos.cpp — xPos (Sun et al., "A Length-Extrapolatable Transformer", ACL 2023, arXiv 2212.10554
// §3; microsoft/torchscale torchscale/component/xpos_relative_position.py, class XPOS, used by
// multihead_attention.py; SPEC-positions-2 §6): RoPE times a per-frequency exponential scaling.
// Pair k of head dim d (interleaved (2k, 2k+1), torchscale's rotate_every_two; or rotate_half):
//   omega_k = 10000^(-2k/d),   zeta_k = (2k + 0.4 d) / (1.4 d)                       (SPEC-2 §6.2)
//   q'_n = zeta_k^((n - c)/B)  R(n omega_k) q_n,    k'_m = zeta_k^(-(m - c)/B) R(m omega_k) k_m
// so pair k of q'_n . k'_m carries zeta_k^((n - m)/B): a decay with distance, fast for the high
// frequencies (zeta_0 = 0.2857) and slow for the low ones. B = xpos_scale_base (512 in torchscale).
// The centre c cancels between q and k (it only keeps the exponents small): torchscale takes
// c = ceil(T/2) of each forward and re-applies xPos to unrotated cached keys; posgrad caches rotated
// keys, so c is fixed at ceil(block_size / 2) for every forward, which is torchscale's centre for a
// training forward of the full context (SPEC-2 §6.4). Causal only: for m > n the factor grows
// exponentially (PosEncEntry::causal_only). The scaled rotation goes through the RoPE op with
// scaled cos/sin tables, so its backward is the RoPE backward kernel, d(pair) = s R(-theta) d(pair')
// (SPEC-2 §6.3): no parameters, no kernel of its own. Tables are computed in double, then cast.
// Range: the scales reach zeta_0^(+-(T - c)/B); float32 overflows only near T ~ 70 B (B = 32:
// ~2k tokens beyond the centre), far past the tiny model's lengths. Not here: blockwise causal
// attention (the paper's inference-time BCA; a mask option, not part of XPOS).
#include <cmath>

#include "autograd/ops.h"
#include "nn/posenc/position_encoding.h"

namespace posgrad::nn {

std::vector<double> xpos_zeta(int64_t head_dim) {
  POSGRAD_CHECK(head_dim >= 2 && head_dim % 2 == 0, ValueError, "xPos: head dim must be even and >= 2, got ", head_dim);
  std::vector<double> z;
  const double d = static_cast<double>(head_dim);
  for (int64_t k = 0; k < head_dim / 2; ++k) z.push_back((2.0 * static_cast<double>(k) + 0.4 * d) / (1.4 * d));
  return z;
}

XposTables xpos_tables_at(const std::vector<int64_t>& positions, double centre, int64_t head_dim, double scale_base,
                          DType dtype) {
  POSGRAD_CHECK(scale_base > 0 && std::isfinite(scale_base), ValueError, "xPos: scale base must be positive, got ",
                scale_base);
  const std::vector<double> zeta = xpos_zeta(head_dim);
  const int64_t T = static_cast<int64_t>(positions.size()), half = head_dim / 2;
  std::vector<double> qc(static_cast<size_t>(T * half)), qs(qc.size()), kc(qc.size()), ks(qc.size());
  for (int64_t t = 0; t < T; ++t) {
    POSGRAD_CHECK(positions[t] >= 0, ValueError, "xPos: negative position ", positions[t]);
    const double n = static_cast<double>(positions[t]);
    for (int64_t k = 0; k < half; ++k) {
      const double th = n * std::pow(10000.0, -2.0 * static_cast<double>(k) / static_cast<double>(head_dim));
      const double up = std::pow(zeta[k], (n - centre) / scale_base),
                   down = std::pow(zeta[k], -(n - centre) / scale_base);
      const size_t at = static_cast<size_t>(t * half + k);
      qc[at] = up * std::cos(th);
      qs[at] = up * std::sin(th);
      kc[at] = down * std::cos(th);
      ks[at] = down * std::sin(th);
    }
  }
  return {Tensor::from_vector(qc, {T, half}, dtype), Tensor::from_vector(qs, {T, half}, dtype),
          Tensor::from_vector(kc, {T, half}, dtype), Tensor::from_vector(ks, {T, half}, dtype)};
}

std::pair<Tensor, Tensor> apply_xpos(const Tensor& q, const Tensor& k, const std::vector<int64_t>& positions,
                                     double centre, double scale_base, bool interleaved) {
  POSGRAD_CHECK(q.dim() == 4 && k.dim() == 4 && q.size(2) == k.size(2) && q.size(3) == k.size(3) &&
                    q.size(2) == static_cast<int64_t>(positions.size()),
                ShapeError, "xPos: q, k must be (B, H, T, D) of one length T = ", positions.size(), ", got ",
                shape_str(q.shape()), ", ", shape_str(k.shape()));
  const XposTables t = xpos_tables_at(positions, centre, q.size(3), scale_base, q.dtype());
  const Device dev = q.device();
  return {rope(q, cached_on_device(t.q_cos, dev), cached_on_device(t.q_sin, dev), interleaved),
          rope(k, cached_on_device(t.k_cos, dev), cached_on_device(t.k_sin, dev), interleaved)};
}

namespace {

class XposEncoding : public PositionEncoding {
 public:
  explicit XposEncoding(const PosEncConfig& cfg)
      : centre_(std::ceil(static_cast<double>(cfg.block_size) / 2.0)),
        scale_base_(cfg.options.real("xpos_scale_base")),
        interleaved_(cfg.options.boolean("xpos_interleaved")) {
    causal_ = cfg.causal;
    POSGRAD_CHECK(causal_, ValueError, "xPos is causal only (its key scaling grows without bound towards later keys)");
  }
  std::string kind() const override { return "xpos"; }
  bool supports_position_ids() const override { return true; }
  std::pair<Tensor, Tensor> rotate(int64_t, const Tensor& q, const Tensor& k, int64_t pos0) override {
    POSGRAD_CHECK(q.dim() == 4, ShapeError, "xPos: q must be (B, H, T, D), got ", shape_str(q.shape()));
    return apply_xpos(q, k, positions(pos0, q.size(2), "xPos rotate"), centre_, scale_base_, interleaved_);
  }

 private:
  double centre_, scale_base_;
  bool interleaved_;
};

// One side of xPos (query or key scaling) written out in double (SPEC-2 §6.2), for positions p.
Tensor xpos_reference(const Tensor& x, const std::vector<int64_t>& p, double centre, double B, bool interleaved,
                      bool key) {
  auto v = host(x);
  const int64_t T = x.size(-2), D = x.size(-1), half = D / 2;
  std::vector<double> y = v;
  for (int64_t row = 0; row < x.numel() / D; ++row) {
    const double n = double(p[row % T]);
    for (int64_t k = 0; k < half; ++k) {
      const double zeta = (2.0 * double(k) + 0.4 * double(D)) / (1.4 * double(D));
      const double s = std::pow(zeta, (key ? -1.0 : 1.0) * (n - centre) / B);
      const double th = n / std::pow(10000.0, 2.0 * double(k) / double(D));
      const int64_t ia = interleaved ? 2 * k : k, ib = interleaved ? 2 * k + 1 : k + half;
      const double a = v[row * D + ia], b = v[row * D + ib];
      y[row * D + ia] = s * (a * std::cos(th) - b * std::sin(th));
      y[row * D + ib] = s * (b * std::cos(th) + a * std::sin(th));
    }
  }
  return Tensor::from_vector(y, x.shape(), DType::Float64);
}

// Op-registry cases: each side of the scaled rotation (both layouts, per-token positions) against
// the formula in double, and xPos inside the fused attention (causal only), also KV-cache-like
// (queries at the end of the key window, the same fixed centre). B = 8 so that the decay is strong
// at these lengths (zeta_0^(1/8) = 0.855 per token).
void xpos_op_cases(std::vector<OpCase>& out) {
  constexpr double kB = 8.0, kC = 4.0;
  struct Side {
    std::string name;
    Shape shape;
    bool interleaved, key;
    std::vector<int64_t> pos;
  };
  const std::vector<Side> sides = {
      {"query/interleaved/2x3x7x8", {2, 3, 7, 8}, true, false, {0, 1, 2, 3, 4, 5, 6}},
      {"key/interleaved/2x3x7x8", {2, 3, 7, 8}, true, true, {0, 1, 2, 3, 4, 5, 6}},
      {"query/rotate_half/1x2x7x6/pos0_5", {1, 2, 7, 6}, false, false, {5, 6, 7, 8, 9, 10, 11}},
      {"key/rotate_half/1x2x7x6/pos0_5", {1, 2, 7, 6}, false, true, {5, 6, 7, 8, 9, 10, 11}},
      {"key/interleaved/positions_gaps/1x2x7x4", {1, 2, 7, 4}, true, true, {1, 2, 5, 9, 10, 17, 23}},
  };
  for (const Side& sd : sides) {
    OpCase c;
    c.name = "posenc/xpos/" + sd.name;
    c.inputs = [sd](Generator& g, DType t) { return TensorList{make_input(sd.shape, g, t)}; };
    c.fn = [sd](const TensorList& x) {
      const XposTables t = xpos_tables_at(sd.pos, kC, sd.shape.back(), kB, x[0].dtype());
      const Device dev = x[0].device();
      return sd.key ? rope(x[0], cached_on_device(t.k_cos, dev), cached_on_device(t.k_sin, dev), sd.interleaved)
                    : rope(x[0], cached_on_device(t.q_cos, dev), cached_on_device(t.q_sin, dev), sd.interleaved);
    };
    c.reference = [sd](const TensorList& x) { return xpos_reference(x[0], sd.pos, kC, kB, sd.interleaved, sd.key); };
    out.push_back(c);
  }
  // Inside the fused attention: q (B, H, Tq, D) at positions q_offset.., k, v (B, H, Tk, D) at 0..
  struct Attn {
    std::string name;
    Shape q, k;
    int64_t q_offset;
    std::vector<int64_t> pos;  // per-token positions (Tq = Tk); empty: q_offset + i, j
  };
  const std::vector<Attn> attns = {
      {"attention/causal/2x2x9x6", {2, 2, 9, 6}, {2, 2, 9, 6}, 0, {}},
      {"attention/causal/Tq4_Tk9_offset5", {1, 2, 4, 6}, {1, 2, 9, 6}, 5, {}},
      {"attention/causal/positions_gaps/1x2x7x4", {1, 2, 7, 4}, {1, 2, 7, 4}, 0, {0, 3, 4, 8, 9, 15, 16}},
  };
  for (const Attn& a : attns)
    add_composite(
        out, "posenc/xpos/" + a.name,
        [a](Generator& g, DType t) {
          return TensorList{make_input(a.q, g, t), make_input(a.k, g, t), make_input(a.k, g, t)};
        },
        [a](const TensorList& x, bool naive) {
          std::vector<int64_t> qp = a.pos, kp = a.pos;
          if (a.pos.empty()) {
            for (int64_t i = 0; i < a.q[2]; ++i) qp.push_back(a.q_offset + i);
            for (int64_t j = 0; j < a.k[2]; ++j) kp.push_back(j);
          }
          const XposTables tq = xpos_tables_at(qp, kC, a.q[3], kB, x[0].dtype());
          const XposTables tk = xpos_tables_at(kp, kC, a.q[3], kB, x[0].dtype());
          const Device dev = x[0].device();
          const Tensor q = rope(x[0], cached_on_device(tq.q_cos, dev), cached_on_device(tq.q_sin, dev), true);
          const Tensor k = rope(x[1], cached_on_device(tk.k_cos, dev), cached_on_device(tk.k_sin, dev), true);
          const double scale = 1.0 / std::sqrt(double(a.q[3]));
          return naive ? attention_reference(q, k, x[2], ScoreModifier{}, true, scale, a.q_offset)
                       : attention(q, k, x[2], ScoreModifier{}, true, scale, a.q_offset);
        });
}

}  // namespace

PosEncEntry xpos_encoding() {
  using namespace opt;
  PosEncEntry e{"xpos",
                "RoPE with a per-frequency exponential decay of q.k with distance, zeta_k^((n-m)/B) (xPos, Sun et "
                "al. 2023); decoders only",
                [](const PosEncConfig& cfg, Generator&) { return std::make_shared<XposEncoding>(cfg); },
                {with_default(real("xpos_scale_base", open_closed(0, 1e9),
                                   "xPos: scale base B of the decay zeta_k^((n-m)/B) (torchscale 512; SPEC-positions-2 "
                                   "§6.6 proposes T_train/2 for a tiny model)"),
                              512.0),
                 with_default(boolean("xpos_interleaved",
                                      "xPos: interleaved pairs (2k, 2k+1) as torchscale (false: rotate_half, as "
                                      "lucidrains' rotary-embedding-torch)"),
                              true)},
                [](const PosEncConfig& cfg) {
                  const int64_t D = cfg.n_embd / cfg.n_head;
                  POSGRAD_CHECK(D >= 2 && D % 2 == 0, ValueError,
                                "xPos rotates pairs: the head dim (n_embd / n_head) "
                                "must be even and >= 2, got ",
                                D);
                },
                xpos_op_cases};
  e.causal_only = true;
  return e;
}

}  // namespace posgrad::nn
