// fox.cpp — the Forgetting Transformer's forget gate as a position encoding (Lin, Nikishin, He,
// Courville, "Forgetting Transformer: Softmax Attention with a Forget Gate", ICLR 2025, arXiv
// 2503.02130 §2; SPEC-positions-2 §4; zhixuan-lin/forgetting-transformer, ForgettingAttentionLayer
// and ops/forgetting_attention.py). Head h of layer l gates every token t of its input x (the
// normed hidden state that feeds q, k and v):
//     z[b,h,t] = w_h . x[b,t] + b_h,   l[b,h,t] = ln sigmoid(z),   F[b,h,t] = sum_{s <= t} l[b,h,s],
//     S[b,h,i,j] = scale q_i . k_j + F_i - F_j          (j <= i; causal only)
// a data-dependent ALiBi: the score of a key decays by the forget gates of the tokens between it and
// the query. No other position encoding (the paper's default, use_rope = False).
//
// Kernels: F_i - F_j reaches the fused attention as the separable bias [F | -F] (ScoreBias::Separable,
// B, H, Tq + Tk), whose gradient is the row sums of dS into F_i and minus its column sums into F_j
// (SPEC-2 §4.5). F_i cancels in the softmax but is kept: it keeps every kept bias <= 0 and near 0
// for the near keys that carry the mass (§4.4). The gate's own op, fox_log_forget_prefix, computes
// ln sigmoid stably (min(z, 0) - log1p(exp(-|z|))) and the prefix sum in double, and its backward
// dz = sigmoid(-z) sum_{t >= s} dF_t by a reverse prefix sum; autograd carries dz on to w, b and x.
//
// Parameters, per layer l: fox_w_<l> (H, C) ~ N(0, 0.02^2) and fox_b_<l> (H) = 0 (the code's
// _init_weights: every forget gate starts near sigmoid(0) = 1/2). Causal only (the encoder track
// refuses it), CPU only (no CUDA kernel for the separable bias), no key/value cache (F of the cached
// keys would have to be cached too: generation recomputes the window), no position ids (it has no
// positions to move).
#include <cmath>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/registry.h"
#include "nn/posenc/position_encoding.h"

namespace posgrad::nn {

namespace {

// ln sigmoid(z) without overflow: min(z, 0) - log1p(exp(-|z|)).
double log_sigmoid(double z) { return std::min(z, 0.0) - std::log1p(std::exp(-std::fabs(z))); }
double sigmoid(double z) { return z >= 0 ? 1.0 / (1.0 + std::exp(-z)) : std::exp(z) / (1.0 + std::exp(z)); }

struct LogForgetPrefixFn : Function<LogForgetPrefixFn> {
  static constexpr const char* kName = "fox_log_forget_prefix";
  struct Saved {
    Tensor z;
  };
  static Tensor forward(Context<Saved>& ctx, const Tensor& z) {
    POSGRAD_CHECK(z.dim() == 3, ShapeError, "fox_log_forget_prefix: z must be (B, H, T), got ", shape_str(z.shape()));
    POSGRAD_CHECK(is_floating(z.dtype()), DTypeError, "fox_log_forget_prefix: z must be floating, got ", z.str());
    POSGRAD_CHECK(!z.device().is_cuda(), DeviceError,
                  "fox_log_forget_prefix: no CUDA kernel (FoX runs on the CPU: --device cpu)");
    const int64_t rows = z.size(0) * z.size(1), T = z.size(2);
    const std::vector<double> v = z.contiguous().to_vector();
    std::vector<double> F(v.size());
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;  // the prefix in double, whatever z's dtype (SPEC-2 §4.4)
      for (int64_t t = 0; t < T; ++t) {
        acc += log_sigmoid(v[r * T + t]);
        F[r * T + t] = acc;
      }
    }
    ctx.saved.z = save_tensor(z);
    return Tensor::from_vector(F, z.shape(), z.dtype());
  }
  static TensorList backward(Context<Saved>& ctx, const TensorList& grads) {
    const Tensor& z = ctx.saved.z;
    const int64_t rows = z.size(0) * z.size(1), T = z.size(2);
    const std::vector<double> v = z.contiguous().to_vector(), g = grads[0].contiguous().to_vector();
    std::vector<double> dz(v.size());
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;  // sum_{t >= s} dF_t
      for (int64_t t = T - 1; t >= 0; --t) {
        acc += g[r * T + t];
        dz[r * T + t] = acc * sigmoid(-v[r * T + t]);  // d/dz ln sigmoid(z) = sigmoid(-z)
      }
    }
    return {Tensor::from_vector(dz, z.shape(), z.dtype())};
  }
};

}  // namespace

Tensor fox_log_forget_prefix(const Tensor& z) { return LogForgetPrefixFn::apply(z); }

Tensor fox_separable_bias(const Tensor& x, const Tensor& w, const Tensor& b) {
  POSGRAD_CHECK(x.dim() == 3 && w.dim() == 2 && w.size(1) == x.size(2) && b.dim() == 1 && b.size(0) == w.size(0),
                ShapeError, "FoX: x must be (B, T, C), w (H, C) and b (H), got ", shape_str(x.shape()), ", ",
                shape_str(w.shape()), ", ", shape_str(b.shape()));
  const Tensor z = linear(x, w, b).permute({0, 2, 1}).contiguous();  // (B, H, T) gate logits
  const Tensor F = fox_log_forget_prefix(z);
  return cat({F, -F}, -1);  // a = F_i, c = -F_j
}

namespace {

class FoxEncoding : public PositionEncoding {
 public:
  FoxEncoding(const PosEncConfig& cfg, Generator& gen) {
    causal_ = cfg.causal;
    POSGRAD_CHECK(causal_, ValueError, "FoX is causal only (its decay F_i - F_j is defined for keys j <= i)");
    for (int64_t l = 0; l < cfg.n_layer; ++l) {
      w_.push_back(register_parameter("fox_w_" + std::to_string(l),
                                      randn({cfg.n_head, cfg.n_embd}, gen, cfg.dtype, Device::cpu(), 0.0, 0.02)));
      b_.push_back(register_parameter("fox_b_" + std::to_string(l), Tensor::zeros({cfg.n_head}, cfg.dtype)));
    }
  }
  std::string kind() const override { return "fox"; }
  ScoreModifier scores(int64_t layer, const LayerProjections& proj, int64_t Tq, int64_t Tk, int64_t q_offset) override {
    const int64_t n = static_cast<int64_t>(w_.size());
    POSGRAD_CHECK(layer >= 0 && layer < n, IndexError, "FoX position encoding: layer ", layer, " out of range (", n,
                  " layers)");
    POSGRAD_CHECK(proj.input.defined(), ValueError,
                  "FoX scores: the forget gates read the layer's input; the attention layer passes it "
                  "(LayerProjections::input)");
    POSGRAD_CHECK(Tq == Tk && q_offset == 0 && proj.input.dim() == 3 && proj.input.size(1) == Tq, ShapeError,
                  "FoX scores: a whole window of the layer's input (Tq = Tk = T, no query offset), got Tq = ", Tq,
                  ", Tk = ", Tk, ", q_offset = ", q_offset, ", input ", shape_str(proj.input.shape()),
                  " (no key/value cache: F of the cached keys is not kept)");
    ScoreModifier m;
    m.kind = ScoreBias::Separable;
    m.bias_separable = fox_separable_bias(proj.input, w_[layer], b_[layer]);
    return m;
  }
  bool supports_kv_cache() const override { return false; }

 private:
  std::vector<Tensor> w_, b_;  // (H, C), (H) per layer
};

// Op-registry cases: the gate's prefix op against ln sigmoid and a running sum written naively
// (logits up to +-30: the stable form), and the fused attention with FoX's bias from x, w, b
// against the reference with F_i - F_j added naively.
void fox_op_cases(std::vector<OpCase>& out) {
  {
    OpCase c;
    c.name = "posenc/fox/log_forget_prefix/2x3x9";
    c.inputs = [](Generator& g, DType t) { return TensorList{make_input({2, 3, 9}, g, t, true, -30.0, 30.0)}; };
    c.fn = [](const TensorList& x) { return fox_log_forget_prefix(x[0]); };
    c.reference = [](const TensorList& x) {
      const std::vector<double> z = host(x[0]);
      std::vector<double> F;
      for (int64_t r = 0; r < 6; ++r) {
        double s = 0;
        for (int64_t t = 0; t < 9; ++t) F.push_back(s += -std::log1p(std::exp(-z[r * 9 + t])));
      }
      return Tensor::from_vector(F, {2, 3, 9}, DType::Float64);
    };
    c.cuda = false;
    out.push_back(c);
  }
  struct Geometry {
    std::string name;
    Shape q;
  };
  for (const Geometry& g :
       std::vector<Geometry>{{"causal/2x2x7x3", {2, 2, 7, 3}}, {"causal/1x3x70x4", {1, 3, 70, 4}}}) {
    AttentionCase ac;
    ac.name = "posenc/fox/" + g.name;
    ac.q = ac.k = g.q;
    ac.causal = true;
    const int64_t B = g.q[0], H = g.q[1], T = g.q[2], C = 5;
    ac.extra_inputs = [=](Generator& gen, DType t) {
      return TensorList{make_input({B, T, C}, gen, t), make_input({H, C}, gen, t), make_input({H}, gen, t)};
    };
    ac.modifier = [](const TensorList& x) {
      ScoreModifier m;
      m.kind = ScoreBias::Separable;
      m.bias_separable = fox_separable_bias(x[3], x[4], x[5]);
      return m;
    };
    ac.reference_bias = [=](const TensorList& x) -> AttentionBiasFn {
      const std::vector<double> xs = host(x[3]), w = host(x[4]), bb = host(x[5]);
      std::vector<double> F(static_cast<size_t>(B * H * T));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
          double s = 0;
          for (int64_t t = 0; t < T; ++t) {
            double z = bb[h];
            for (int64_t e = 0; e < C; ++e) z += w[h * C + e] * xs[(b * T + t) * C + e];
            F[(b * H + h) * T + t] = s += -std::log1p(std::exp(-z));
          }
        }
      return
          [=](int64_t b, int64_t h, int64_t i, int64_t j) { return F[(b * H + h) * T + i] - F[(b * H + h) * T + j]; };
    };
    add_attention_case(out, ac);
    out.back().cuda = false;  // no CUDA kernel for the separable bias
  }
}

}  // namespace

PosEncEntry fox_encoding() {
  PosEncEntry e{"fox",
                "a learned forget gate per head and token whose cumulative log decays the scores, F_i - F_j "
                "(Forgetting Transformer, Lin et al. 2025); causal, CPU only",
                [](const PosEncConfig& cfg, Generator& gen) { return std::make_shared<FoxEncoding>(cfg, gen); },
                {},
                nullptr,
                fox_op_cases};
  e.causal_only = true;
  e.cpu_only = true;
  return e;
}

}  // namespace posgrad::nn
