// rope.cpp — rotary position embedding (Su et al., RoFormer, arXiv 2104.09864; HF transformers
// modeling_llama.py / modeling_gptj.py / modeling_rope_utils.py; spec §3). Queries and keys of
// every layer are rotated pairwise by angles p * omega_k, so <R(m) q, R(n) k> depends on m - n
// only. Layouts: rotate_half (GPT-NeoX/LLaMA, default) or interleaved (GPT-J/RoFormer).
// Partial rotary, rope_fraction f < 1, in the convention rope_partial names (SPEC-positions-2 §2):
//   neox / neox_hf  HF GPT-NeoX / Phi partial_rotary_factor (modeling_gpt_neox.py, modeling_rope_utils.py
//           v5.24.0): d_r = int(D f), the double product truncated (D = 100, f = 0.57 gives 56), the
//           first d_r channels rotated with d_r in the frequency exponent and in every scaling
//           formula, the rest passed through. An odd d_r is refused (neox), or rotated as HF does
//           it (neox_hf: d_r + 1 channels, pairs (k, k + (d_r+1)/2), denominator d_r; SPEC-2 §2.3);
//   prope   p-RoPE (Barbero et al., "Round and Round We Go!", ICLR 2025, arXiv 2410.06205 §6 and
//           its listing; gemma _positional_embeddings.py apply_rope(rope_proportion); HF
//           _compute_proportional_rope_parameters): the whole head rotated, pairs (k, k + D/2), the
//           floor(f D / 2) highest full-head frequencies b^(-2k/D) kept and the lowest set to 0
//           (position-free channels); f = 1 is RoPE. Only linear scaling is defined there (SPEC-2 §2.7).
// Scalings for length extrapolation (spec §3.4):
//   linear  omega / s (position interpolation), always on when selected (as HF);
//   ntk     static NTK-aware: base b' = b s^(dr / (dr - 2)) at every length (bloc97 2023, as
//           written in Peng et al. 2023, YaRN §3.1): the lowest frequency is divided by s, the
//           highest kept;
//   dynamic NTK: base b' = b (s L / Lmax - (s - 1))^(dr / (dr - 2)) when L = pos0 + T > Lmax;
//   yarn    per-frequency ramp between omega and omega / s, attention factor 0.1 ln s + 1
//           multiplying cos and sin;  llama3  (also in spec §3.4) the wavelength-banded variant.
// Lmax (YaRN's L0) is the training context, block_size. Angles and cos/sin are computed in double,
// then cast. Forward and backward kernels: tensor/kernels/cpu/rope.cpp (op: autograd/ops/rope.cpp).
// No parameters.
#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <numbers>

#include "nn/posenc/position_encoding.h"

namespace posgrad::nn {

double round_to_format(double x, int significand_bits, int min_exp, double max_finite) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e = 0;
  (void)std::frexp(x, &e);  // x = m 2^e, m in [0.5, 1): the leading bit is 2^(e-1)
  const int quantum_exp = std::max(e - 1, min_exp) - (significand_bits - 1);  // subnormals share min_exp's quantum
  const double q = std::ldexp(1.0, quantum_exp);
  const double r = std::nearbyint(x / q) * q;  // the default rounding mode: to nearest, ties to even
  return std::fabs(r) > max_finite ? std::copysign(INFINITY, x) : r;
}
double round_to_bf16(double x) { return round_to_format(x, 8, -126, 3.3895313892515355e38); }
double round_to_fp16(double x) { return round_to_format(x, 11, -14, 65504.0); }

RopeFrequencies rope_frequencies(const RopeParams& p, int64_t seq_len) {
  const int64_t half = p.rotary_dim / 2;
  POSGRAD_CHECK(p.rotary_dim >= 2 && p.rotary_dim % 2 == 0, ValueError,
                "RoPE: rotary dimension must be even and >= 2, got ", p.rotary_dim);
  POSGRAD_CHECK(p.freq_dim == 0 || (p.freq_dim >= 1 && p.freq_dim <= p.rotary_dim), ValueError,
                "RoPE: frequency denominator ", p.freq_dim, " outside [1, rotary dimension ", p.rotary_dim, "]");
  POSGRAD_CHECK(p.kept_freqs >= -1 && p.kept_freqs <= half, ValueError, "RoPE: ", p.kept_freqs, " kept frequencies of ",
                half);
  // dr: the "rotary dimension" of every formula below (HF's dim): the exponent denominator.
  const int64_t dr = p.freq_dim > 0 ? p.freq_dim : p.rotary_dim;
  POSGRAD_CHECK(p.base > 1.0, ValueError, "RoPE: base must be > 1, got ", p.base);
  const double s = p.factor;
  const double L0 = static_cast<double>(p.original_length);
  const bool known = p.scaling == "none" || p.scaling == "linear" || p.scaling == "ntk" || p.scaling == "dynamic" ||
                     p.scaling == "yarn" || p.scaling == "llama3";
  POSGRAD_CHECK(known, ValueError, "RoPE: unknown scaling '", p.scaling, "' (none|linear|ntk|dynamic|yarn|llama3)");
  POSGRAD_CHECK(p.scaling == "none" || s > 0.0, ValueError, "RoPE: scaling factor must be positive, got ", s);
  POSGRAD_CHECK(p.scaling == "none" || p.scaling == "linear" || p.scaling == "ntk" || p.original_length > 0, ValueError,
                "RoPE ", p.scaling, " scaling needs the original context length, got ", p.original_length);
  POSGRAD_CHECK(p.scaling != "yarn" || p.beta_fast > p.beta_slow, ValueError, "RoPE YaRN: rope_yarn_beta_fast (",
                p.beta_fast, ") must exceed rope_yarn_beta_slow (", p.beta_slow, ")");
  POSGRAD_CHECK(p.scaling != "llama3" || p.high_freq_factor > p.low_freq_factor, ValueError,
                "RoPE Llama 3: rope_llama3_high_freq_factor (", p.high_freq_factor,
                ") must exceed rope_llama3_low_freq_factor (", p.low_freq_factor, ")");

  double base = p.base;
  if (p.scaling == "ntk") {  // YaRN §3.1: b' = b s^(|D| / (|D| - 2)), |D| the rotary dimension
    POSGRAD_CHECK(dr > 2, ValueError, "RoPE NTK-aware scaling needs a rotary dimension > 2, got ", dr);
    base = p.base * std::pow(s, static_cast<double>(dr) / static_cast<double>(dr - 2));
  }
  // Checked for every length, not only beyond L0: an invalid configuration is refused when it is built
  // (PosEncConfig::validate), not at the first long forward after training.
  POSGRAD_CHECK(p.scaling != "dynamic" || dr > 2, ValueError,
                "RoPE dynamic NTK scaling needs a rotary dimension > 2, got ", dr);
  if (p.scaling == "dynamic" && static_cast<double>(seq_len) > L0) {
    base = p.base * std::pow(s * static_cast<double>(seq_len) / L0 - (s - 1.0),
                             static_cast<double>(dr) / static_cast<double>(dr - 2));
  }
  RopeFrequencies f;
  f.inv_freq.resize(static_cast<size_t>(half));
  for (int64_t k = 0; k < half; ++k)  // HF: 1 / base^(arange(0, dr, 2) / dr)
    f.inv_freq[k] = 1.0 / std::pow(base, static_cast<double>(2 * k) / static_cast<double>(dr));

  if (p.scaling == "linear") {
    for (auto& w : f.inv_freq) w /= s;
  } else if (p.scaling == "yarn") {
    // Peng et al., arXiv 2309.00071; HF _compute_yarn_parameters (read at ef468064).
    auto corr = [&](double n_rot) {
      return static_cast<double>(dr) * std::log(L0 / (n_rot * 2.0 * std::numbers::pi)) / (2.0 * std::log(p.base));
    };
    const double lo = std::max(std::floor(corr(p.beta_fast)), 0.0);
    double hi = std::min(std::ceil(corr(p.beta_slow)), static_cast<double>(dr - 1));
    if (lo == hi) hi += 0.001;  // avoid a zero-width ramp
    for (int64_t k = 0; k < half; ++k) {
      const double ramp = std::clamp((static_cast<double>(k) - lo) / (hi - lo), 0.0, 1.0);
      const double w = f.inv_freq[k];
      f.inv_freq[k] = (w / s) * ramp + w * (1.0 - ramp);
    }
    f.attention_factor = s > 1.0 ? 0.1 * std::log(s) + 1.0 : 1.0;
  } else if (p.scaling == "llama3") {
    const double lam_low = L0 / p.low_freq_factor, lam_high = L0 / p.high_freq_factor;
    for (auto& w : f.inv_freq) {
      const double lam = 2.0 * std::numbers::pi / w;
      if (lam < lam_high) continue;
      if (lam > lam_low) {
        w /= s;
      } else {
        const double g = (L0 / lam - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor);
        w = (1.0 - g) * w / s + g * w;
      }
    }
  }
  // p-RoPE: the lowest frequencies become position-free pairs (angle 0; gemma's infinite timescale).
  if (p.kept_freqs >= 0)
    for (int64_t k = p.kept_freqs; k < half; ++k) f.inv_freq[k] = 0.0;
  return f;
}

std::pair<Tensor, Tensor> rope_tables(const RopeParams& p, int64_t pos0, int64_t T, DType dtype) {
  POSGRAD_CHECK(pos0 >= 0 && T >= 0, ValueError, "RoPE: need pos0 >= 0 and T >= 0, got pos0=", pos0, " T=", T);
  std::vector<int64_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[t] = pos0 + t;
  return rope_tables_at(p, pos, dtype);
}

std::pair<Tensor, Tensor> rope_tables_at(const RopeParams& p, const std::vector<int64_t>& positions, DType dtype) {
  const int64_t T = static_cast<int64_t>(positions.size());
  int64_t longest = 0;
  for (int64_t q : positions) {
    POSGRAD_CHECK(q >= 0, ValueError, "RoPE: negative position ", q);
    longest = std::max(longest, q + 1);
  }
  const RopeFrequencies f = rope_frequencies(p, longest);
  const int64_t half = p.rotary_dim / 2;
  POSGRAD_CHECK(p.precision == "fp32" || p.precision == "bf16" || p.precision == "fp16", ValueError,
                "RoPE: unknown position precision '", p.precision, "' (fp32|bf16|fp16)");
  double (*round)(double) = p.precision == "bf16" ? round_to_bf16 : p.precision == "fp16" ? round_to_fp16 : nullptr;
  std::vector<double> c(static_cast<size_t>(T * half)), s(static_cast<size_t>(T * half));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < half; ++k) {
      if (round) {
        const double theta = round(round(static_cast<double>(positions[t])) * round(f.inv_freq[k]));
        c[t * half + k] = round(std::cos(theta)) * f.attention_factor;
        s[t * half + k] = round(std::sin(theta)) * f.attention_factor;
        continue;
      }
      const double theta = static_cast<double>(positions[t]) * f.inv_freq[k];
      c[t * half + k] = std::cos(theta) * f.attention_factor;
      s[t * half + k] = std::sin(theta) * f.attention_factor;
    }
  return {Tensor::from_vector(c, {T, half}, dtype), Tensor::from_vector(s, {T, half}, dtype)};
}

Tensor apply_rope(const Tensor& x, const RopeParams& p, bool interleaved, int64_t pos0) {
  POSGRAD_CHECK(x.dim() >= 2 && p.rotary_dim <= x.size(-1), ShapeError, "RoPE: x must be (..., T, D >= ", p.rotary_dim,
                "), got ", shape_str(x.shape()));
  auto [c, s] = rope_tables(p, pos0, x.size(-2), x.dtype());
  return rope(x, c.to(x.device()), s.to(x.device()), interleaved);
}

RopeParams rope_params(const PosEncConfig& cfg) {
  RopeParams p;
  const int64_t D = cfg.n_embd / cfg.n_head;
  const double fraction = cfg.options.real("rope_fraction");
  const std::string conv = cfg.options.text("rope_partial");
  POSGRAD_CHECK(fraction > 0.0 && fraction <= 1.0, ValueError, "RoPE: rope_fraction must be in (0, 1], got ", fraction);
  p.scaling = cfg.options.text("rope_scaling");
  if (conv == "prope") {
    // Python int(f * D // 2): the double product, floor-divided by 2 (exact), truncated.
    const int64_t kept = static_cast<int64_t>(std::floor(fraction * static_cast<double>(D) / 2.0));
    POSGRAD_CHECK(D % 2 == 0, ValueError,
                  "RoPE p-RoPE (--rope-partial prope) rotates pairs (k, k + D/2) of the whole "
                  "head: the head dim must be even, got ",
                  D);
    POSGRAD_CHECK(kept >= 1, ValueError, "RoPE p-RoPE: head dim ", D, " x --rope-fraction ", fraction,
                  " keeps no frequency (floor(f D / 2) = 0; that is NoPE: --pos none)");
    POSGRAD_CHECK(p.scaling == "none" || p.scaling == "linear", ValueError,
                  "RoPE p-RoPE (--rope-partial prope) "
                  "defines only linear scaling (HF proportional: inv_freq / factor), not --rope-scaling ",
                  p.scaling);
    p.rotary_dim = D;
    p.kept_freqs = kept;
  } else {
    // HF: dim = int(head_dim * partial_rotary_factor), the double product truncated toward zero.
    const int64_t dr = static_cast<int64_t>(static_cast<double>(D) * fraction);
    POSGRAD_CHECK(dr >= 2, ValueError, "RoPE: head dim ", D, " x --rope-fraction ", fraction, " = ",
                  static_cast<double>(D) * fraction, " leaves fewer than 2 rotary channels");
    if (dr % 2 == 0) {
      p.rotary_dim = dr;
    } else {
      POSGRAD_CHECK(conv == "neox_hf", ValueError, "RoPE: head dim ", D, " x --rope-fraction ", fraction,
                    " gives an odd rotary dim int(D f) = ", dr,
                    " (choose a fraction with an even product, or "
                    "--rope-partial neox_hf for HF GPT-NeoX's ",
                    dr + 1, " rotated channels with denominator ", dr, ")");
      POSGRAD_CHECK(dr + 1 <= D, ValueError, "RoPE neox_hf: an odd rotary dim ", dr, " rotates ", dr + 1,
                    " channels, more than the head dim ", D);
      POSGRAD_CHECK(p.scaling != "yarn", ValueError, "RoPE neox_hf: YaRN with an odd rotary dim ", dr,
                    " is not defined (HF's ramp has dim // 2 entries for its dim // 2 + 1 frequencies)");
      p.rotary_dim = dr + 1;
      p.freq_dim = dr;
    }
  }
  p.base = cfg.options.real("rope_base");
  p.factor = cfg.options.real("rope_scaling_factor");
  p.original_length = cfg.block_size;
  p.beta_fast = cfg.options.real("rope_yarn_beta_fast");
  p.beta_slow = cfg.options.real("rope_yarn_beta_slow");
  p.low_freq_factor = cfg.options.real("rope_llama3_low_freq_factor");
  p.high_freq_factor = cfg.options.real("rope_llama3_high_freq_factor");
  p.precision = cfg.options.text("rope_position_precision");
  (void)rope_frequencies(p, 1);  // validates the configuration now, not at the first forward
  return p;
}

namespace {

class RopeEncoding : public PositionEncoding {
 public:
  explicit RopeEncoding(const PosEncConfig& cfg)
      : params_(nn::rope_params(cfg)), interleaved_(cfg.options.boolean("rope_interleaved")) {
    causal_ = cfg.causal;
  }
  std::string kind() const override { return "rope"; }
  bool supports_position_ids() const override { return true; }
  std::pair<Tensor, Tensor> rotate(int64_t, const Tensor& q, const Tensor& k, int64_t pos0) override {
    POSGRAD_CHECK(q.dim() == 4 && k.dim() == 4 && q.size(2) == k.size(2), ShapeError,
                  "RoPE: q, k must be (B, H, T, D) of one length, got ", shape_str(q.shape()), ", ",
                  shape_str(k.shape()));
    auto [c, s] = tables(positions(pos0, q.size(2), "RoPE rotate"), q.dtype(), q.device());
    return {rope(q, c, s, interleaved_), rope(k, c, s, interleaved_)};
  }
  const RopeParams& params() const { return params_; }
  // Dynamic NTK scaling recomputes every position's frequencies from the total length.
  bool supports_kv_cache() const override { return params_.scaling != "dynamic"; }

  // The cos / sin tables of `pos` on `device`: every layer of a forward, and every step of a run, asks
  // for the same positions, so the last tables are kept (computed once in double on the host and copied
  // to the device once, not per call). The key is the whole position list with the dtype and device;
  // params_ never changes after construction. Thread-safe (a model may be evaluated from several threads).
  std::pair<Tensor, Tensor> tables(const std::vector<int64_t>& pos, DType dtype, const Device& device) {
    std::lock_guard<std::mutex> lock(*cache_mutex_);
    if (!(cache_.c.defined() && cache_.dtype == dtype && cache_.device == device && cache_.positions == pos)) {
      auto [c, s] = rope_tables_at(params_, pos, dtype);
      cache_ = {pos, dtype, device, c.to(device), s.to(device)};
    }
    return {cache_.c, cache_.s};
  }

 private:
  struct TableCache {
    std::vector<int64_t> positions;
    DType dtype = DType::Float32;
    Device device = Device::cpu();
    Tensor c, s;
  };
  RopeParams params_;
  bool interleaved_;
  std::shared_ptr<std::mutex> cache_mutex_ = std::make_shared<std::mutex>();
  TableCache cache_;
};

}  // namespace

namespace {

// RoPE op case: x (shape), angles for positions pos0.. (or the given per-token positions) with the
// given params, against the rotation written out in double (spec §3.2). The reference takes its
// frequencies from `freqs` where given (written from the formula by the case), else from
// rope_frequencies.
void add_rope_case(std::vector<OpCase>& out, const std::string& name, Shape shape, RopeParams p, bool interleaved,
                   int64_t pos0, std::vector<double> freqs = {}, std::vector<int64_t> positions = {}) {
  OpCase c;
  c.name = "posenc/rope/" + name;
  c.inputs = [=](Generator& g, DType t) { return TensorList{make_input(shape, g, t)}; };
  c.fn = [=](const TensorList& x) {
    if (positions.empty()) return apply_rope(x[0], p, interleaved, pos0);
    auto [cs, sn] = rope_tables_at(p, positions, x[0].dtype());
    return rope(x[0], cs.to(x[0].device()), sn.to(x[0].device()), interleaved);
  };
  c.reference = [=](const TensorList& x) {
    auto v = host(x[0]);
    const int64_t T = shape[shape.size() - 2], D = shape.back(), half = p.rotary_dim / 2;
    RopeFrequencies f = rope_frequencies(p, positions.empty() ? pos0 + T : positions.back() + 1);
    if (!freqs.empty()) f.inv_freq = freqs;
    std::vector<double> y = v;
    for (int64_t row = 0; row < x[0].numel() / D; ++row) {
      const int64_t t = row % T;
      const double pos = double(positions.empty() ? pos0 + t : positions[t]);
      for (int64_t kk = 0; kk < half; ++kk) {
        const double th = pos * f.inv_freq[kk];
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

// Op-registry cases: the rotation in both layouts, partial rotary, YaRN's attention factor and
// dynamic NTK; and RoPE inside an attention layer (q, k rotated, then attended).
void rope_op_cases(std::vector<OpCase>& out) {
  RopeParams rp;
  rp.rotary_dim = 8;
  add_rope_case(out, "rotate_half/2x3x7x8", {2, 3, 7, 8}, rp, false, 0);
  add_rope_case(out, "interleaved/2x3x7x8/pos0_5", {2, 3, 7, 8}, rp, true, 5);
  RopeParams pp = rp;
  pp.rotary_dim = 4;  // partial rotary: channels 4..6 pass through
  add_rope_case(out, "partial/rotate_half/1x3x7x7", {1, 3, 7, 7}, pp, false, 3);
  add_rope_case(out, "partial/interleaved/1x3x7x7", {1, 3, 7, 7}, pp, true, 3);
  RopeParams yp = rp;
  yp.scaling = "yarn";
  yp.factor = 4.0;
  yp.original_length = 16;
  yp.base = 100.0;
  add_rope_case(out, "yarn/1x2x33x8", {1, 2, 33, 8}, yp, false, 0);
  RopeParams dp = yp;
  dp.scaling = "dynamic";
  dp.factor = 2.0;
  add_rope_case(out, "dynamic/1x2x33x8", {1, 2, 33, 8}, dp, true, 0);
  // Partial-rotary conventions (SPEC-positions-2 §2). HF's odd case (neox_hf): D = 7, d_r = 5, so
  // 6 channels rotated in pairs (k, k + 3) with omega_k = b^(-2k/5); channel 6 passes through.
  RopeParams hp;
  hp.rotary_dim = 6;
  hp.freq_dim = 5;
  hp.base = 100.0;
  const std::vector<double> hf_freqs = {1.0, std::pow(100.0, -2.0 / 5.0), std::pow(100.0, -4.0 / 5.0)};
  add_rope_case(out, "neox_hf_odd/rotate_half/1x2x7x7", {1, 2, 7, 7}, hp, false, 2, hf_freqs);
  // p-RoPE: D = 8, f = 0.5 keeps floor(0.5 * 8 / 2) = 2 of 4 pairs, omega = (1, b^(-2/8), 0, 0):
  // pairs (0, 4), (1, 5) rotate, (2, 6), (3, 7) are position-free.
  RopeParams prp;
  prp.rotary_dim = 8;
  prp.kept_freqs = 2;
  prp.base = 100.0;
  const std::vector<double> prope_freqs = {1.0, std::pow(100.0, -2.0 / 8.0), 0.0, 0.0};
  add_rope_case(out, "prope/rotate_half/2x2x7x8", {2, 2, 7, 8}, prp, false, 0, prope_freqs);
  add_rope_case(out, "prope/interleaved/1x2x7x8/pos0_4", {1, 2, 7, 8}, prp, true, 4, prope_freqs);
  RopeParams plin = prp;
  plin.scaling = "linear";  // HF proportional's factor: every kept frequency / s, the dropped stay 0
  plin.factor = 2.0;
  add_rope_case(out, "prope_linear/rotate_half/1x2x7x8", {1, 2, 7, 8}, plin, false, 1,
                {0.5, 0.5 * std::pow(100.0, -2.0 / 8.0), 0.0, 0.0});
  // Per-token positions (randomized positions) through both conventions.
  add_rope_case(out, "prope/positions_gaps/1x2x7x8", {1, 2, 7, 8}, prp, false, 0, prope_freqs, {0, 2, 3, 7, 8, 12, 20});
  add_rope_case(out, "neox_hf_odd/positions_gaps/1x2x7x7", {1, 2, 7, 7}, hp, true, 0, hf_freqs,
                {1, 4, 5, 6, 9, 10, 16});
  // Rotated queries and keys inside the fused attention, causal (decoder) and bidirectional (encoder).
  for (bool causal : {true, false})
    add_composite(
        out, std::string("posenc/rope/attention_partial") + (causal ? "" : "/bidir"),
        [](Generator& g, DType t) {
          return TensorList{make_input({1, 3, 9, 6}, g, t), make_input({1, 3, 9, 6}, g, t),
                            make_input({1, 3, 9, 6}, g, t)};
        },
        [causal](const TensorList& x, bool naive) {
          RopeParams p;
          p.rotary_dim = 4;
          p.base = 50.0;
          return run_attention(apply_rope(x[0], p, false, 2), apply_rope(x[1], p, false, 2), x[2], ScoreModifier{},
                               causal, 0.4, naive);
        });
  // p-RoPE (D = 6, 2 of 3 pairs kept) and HF's odd partial rotary (D = 6, d_r = 3: 4 channels) inside
  // the fused attention, causal and bidirectional.
  for (bool prope : {true, false})
    for (bool causal : {true, false})
      add_composite(
          out, std::string("posenc/rope/attention_") + (prope ? "prope" : "neox_hf_odd") + (causal ? "" : "/bidir"),
          [](Generator& g, DType t) {
            return TensorList{make_input({2, 2, 9, 6}, g, t), make_input({2, 2, 9, 6}, g, t),
                              make_input({2, 2, 9, 6}, g, t)};
          },
          [causal, prope](const TensorList& x, bool naive) {
            RopeParams p;
            p.base = 50.0;
            p.rotary_dim = prope ? 6 : 4;
            if (prope)
              p.kept_freqs = 2;
            else
              p.freq_dim = 3;
            return run_attention(apply_rope(x[0], p, true, 3), apply_rope(x[1], p, true, 3), x[2], ScoreModifier{},
                                 causal, 0.4, naive);
          });
}

}  // namespace

PosEncEntry rope_encoding() {
  using namespace opt;
  return {
      "rope",
      "rotary positions: queries and keys rotated by position-dependent angles (Su et al. 2021)",
      [](const PosEncConfig& cfg, Generator&) { return std::make_shared<RopeEncoding>(cfg); },
      {with_default(real("rope_base", open_closed(1, 1e12), "RoPE: base (theta) of the frequencies"), 10000.0),
       with_default(real("rope_fraction", open_closed(0, 1),
                         "RoPE: fraction f of the head dim rotated (partial rotary; convention: --rope-partial)"),
                    1.0),
       with_default(choice("rope_partial", {"neox", "neox_hf", "prope"},
                           "RoPE: partial-rotary convention of --rope-fraction (SPEC-positions-2 §2): neox = HF "
                           "GPT-NeoX/Phi partial_rotary_factor, the first int(D f) channels with their own "
                           "spectrum (odd int(D f) refused); neox_hf = the same with HF's odd case (int(D f) + 1 "
                           "channels); prope = p-RoPE (Barbero et al. 2025), the floor(f D / 2) highest "
                           "frequencies of the whole head kept, the rest position-free"),
                    std::string("neox")),
       with_default(boolean("rope_interleaved", "RoPE: interleaved (GPT-J) instead of the rotate-half (NeoX) layout"),
                    false),
       with_default(choice("rope_scaling", {"none", "linear", "ntk", "dynamic", "yarn", "llama3"},
                           "RoPE: context-extension scaling (spec §3.4): position interpolation (linear), static "
                           "NTK-aware (base b s^(dr/(dr-2))), dynamic NTK, YaRN or Llama 3"),
                    std::string("none")),
       with_default(
           real("rope_scaling_factor", closed(1, 1e6), "RoPE: scaling factor s (extended length / training length)"),
           1.0),
       with_default(real("rope_yarn_beta_fast", open_closed(0, 1e6),
                         "RoPE YaRN: beta_fast, in rotations (Peng et al. 2023; spec §3.4)"),
                    32.0),
       with_default(real("rope_yarn_beta_slow", open_closed(0, 1e6), "RoPE YaRN: beta_slow (rotations)"), 1.0),
       with_default(real("rope_llama3_low_freq_factor", open_closed(0, 1e6), "RoPE Llama 3: low_freq_factor"), 1.0),
       with_default(real("rope_llama3_high_freq_factor", open_closed(0, 1e6), "RoPE Llama 3: high_freq_factor"), 4.0),
       with_default(choice("rope_position_precision", {"fp32", "bf16", "fp16"},
                           "RoPE: precision of the angle arithmetic (position x frequency, cos, sin); bf16/fp16 "
                           "round every operation as half-precision code would"),
                    std::string("fp32"))},
      [](const PosEncConfig& cfg) { (void)rope_params(cfg); },
      rope_op_cases};
}

}  // namespace posgrad::nn
