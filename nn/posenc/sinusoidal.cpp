// sinusoidal.cpp — fixed sinusoidal absolute positions (Vaswani et al. 2017, §3.5; spec §5.1), in
// the interleaved layout of the paper (HF xlm create_sinusoidal_embeddings):
//   PE[p, 2k] = sin(p * 10000^(-2k/C)),  PE[p, 2k+1] = cos(p * 10000^(-2k/C)),
// odd C: the last channel is a sine with k = (C-1)/2. The token embedding is multiplied by
// sqrt(C) first (Vaswani §3.4; switchable). No parameters: the rows are computed in double for the
// positions asked for (any length, so it extrapolates) and cast; the gradient flows unchanged into
// the token-embedding branch (the add's backward), nothing into PE.
// Not here: the concatenated [sin | cos] layouts of Marian / fairseq (spec §5.1).
#include <cmath>

#include "autograd/ops.h"
#include "nn/posenc/position_encoding.h"

namespace posgrad::nn {

Tensor sinusoidal_table(int64_t pos0, int64_t T, int64_t C, DType dtype) {
  POSGRAD_CHECK(pos0 >= 0 && T >= 0 && C > 0, ValueError,
                "sinusoidal_table: need pos0 >= 0, T >= 0, C > 0, got pos0=", pos0, " T=", T, " C=", C);
  std::vector<int64_t> p(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) p[t] = pos0 + t;
  return sinusoidal_table_at(p, C, dtype);
}

Tensor sinusoidal_table_at(const std::vector<int64_t>& positions, int64_t C, DType dtype) {
  const int64_t T = static_cast<int64_t>(positions.size());
  POSGRAD_CHECK(C > 0, ValueError, "sinusoidal_table: need C > 0, got ", C);
  for (int64_t p : positions) POSGRAD_CHECK(p >= 0, ValueError, "sinusoidal_table: negative position ", p);
  std::vector<double> pe(static_cast<size_t>(T * C));
  for (int64_t c = 0; c < C; ++c) {
    const int64_t k = c / 2;
    const double freq = std::pow(10000.0, -2.0 * static_cast<double>(k) / static_cast<double>(C));
    for (int64_t t = 0; t < T; ++t) {
      const double angle = static_cast<double>(positions[t]) * freq;
      pe[t * C + c] = (c % 2 == 0) ? std::sin(angle) : std::cos(angle);
    }
  }
  return Tensor::from_vector(pe, {T, C}, dtype);
}

namespace {

class SinusoidalEncoding : public PositionEncoding {
 public:
  explicit SinusoidalEncoding(const PosEncConfig& cfg)
      : C_(cfg.n_embd), scale_embedding_(cfg.options.boolean("sinusoidal_scale_embedding")) {
    causal_ = cfg.causal;
  }
  std::string kind() const override { return "sinusoidal"; }
  bool supports_position_ids() const override { return true; }
  Tensor embed(const Tensor& x, int64_t pos0) override {
    POSGRAD_CHECK(x.dim() == 3 && x.size(2) == C_, ShapeError, "sinusoidal embed: x must be (B, T, ", C_, "), got ",
                  shape_str(x.shape()));
    POSGRAD_CHECK(pos0 >= 0, IndexError, "sinusoidal embed: negative start position ", pos0);
    Tensor pe = cached_on_device(sinusoidal_table_at(positions(pos0, x.size(1), "sinusoidal embed"), C_, x.dtype()),
                                 x.device());
    const Tensor xs = scale_embedding_ ? x * std::sqrt(static_cast<double>(C_)) : x;
    return xs + pe;  // (B, T, C) + (T, C)
  }

 private:
  int64_t C_;
  bool scale_embedding_;
};

// Op-registry case: embed() at positions 3.. of a (2, 7, 5) input (odd C) against the formula.
void sinusoidal_op_cases(std::vector<OpCase>& out) {
  OpCase c;
  c.name = "posenc/sinusoidal/embed";
  c.inputs = [](Generator& g, DType t) { return TensorList{make_input({2, 7, 5}, g, t)}; };
  c.fn = [](const TensorList& x) {
    PosEncConfig cfg;
    cfg.kind = "sinusoidal";
    cfg.n_embd = 5;
    cfg.n_head = 1;
    Generator g(0);
    return make_position_encoding(cfg, g)->embed(x[0], 3);
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

}  // namespace

PosEncEntry sinusoidal_encoding() {
  using namespace opt;
  return {
      "sinusoidal",
      "fixed sin/cos absolute positions added to the embeddings (Vaswani et al. 2017)",
      [](const PosEncConfig& cfg, Generator&) { return std::make_shared<SinusoidalEncoding>(cfg); },
      {with_default(boolean("sinusoidal_scale_embedding",
                            "Sinusoidal: multiply the token embedding by sqrt(n_embd) before adding (Vaswani §3.4)"),
                    true)},
      nullptr,
      sinusoidal_op_cases};
}

}  // namespace posgrad::nn
