// learned.cpp — learned absolute positions (GPT-2 / BERT wpe; spec §5.2): a (block_size, C)
// parameter table, N(0, 0.02) init, row pos0 + t added to token t. There is no extrapolation: a
// position past the table is an IndexError naming the position and the table length (never a
// clamp). Backward: the add's gradient reaches the rows through narrow (rows never used get 0).
#include <algorithm>

#include "autograd/ops.h"
#include "nn/posenc/position_encoding.h"

namespace posgrad::nn {

Tensor add_learned_positions(const Tensor& x, const Tensor& table, int64_t pos0) {
  POSGRAD_CHECK(table.dim() == 2, ShapeError, "learned positions: table must be (L, C), got ",
                shape_str(table.shape()));
  POSGRAD_CHECK(x.dim() == 3 && x.size(2) == table.size(1), ShapeError, "learned positions: x must be (B, T, ",
                table.size(1), "), got ", shape_str(x.shape()));
  const int64_t T = x.size(1), L = table.size(0);
  POSGRAD_CHECK(pos0 >= 0, IndexError, "learned position encoding: negative start position ", pos0);
  POSGRAD_CHECK(pos0 + T <= L, IndexError, "learned position encoding: position ", pos0 + T - 1,
                " is beyond the table of ", L, " positions (0..", L - 1, "); learned positions do not extrapolate");
  return x + table.narrow(0, pos0, T);  // (B, T, C) + (T, C)
}

Tensor add_learned_positions_at(const Tensor& x, const Tensor& table, const std::vector<int64_t>& positions) {
  POSGRAD_CHECK(table.dim() == 2, ShapeError, "learned positions: table must be (L, C), got ",
                shape_str(table.shape()));
  const int64_t T = static_cast<int64_t>(positions.size()), L = table.size(0);
  POSGRAD_CHECK(x.dim() == 3 && x.size(1) == T && x.size(2) == table.size(1), ShapeError,
                "learned positions: x must be (B, ", T, ", ", table.size(1), "), got ", shape_str(x.shape()));
  for (int64_t p : positions)
    POSGRAD_CHECK(p >= 0 && p < L, IndexError, "learned position encoding: position ", p, " is outside the table of ",
                  L, " positions (0..", L - 1, ")");
  const Tensor idx = Tensor::from_ints(positions, {T}).to(table.device());
  return x + embedding(table, idx);  // (B, T, C) + (T, C)
}

namespace {

class LearnedEncoding : public PositionEncoding {
 public:
  LearnedEncoding(const PosEncConfig& cfg, Generator& gen) : L_(cfg.block_size) {
    causal_ = cfg.causal;
    weight =
        register_parameter("weight", randn({cfg.block_size, cfg.n_embd}, gen, cfg.dtype, Device::cpu(), 0.0, 0.02));
  }
  std::string kind() const override { return "learned"; }
  Tensor embed(const Tensor& x, int64_t pos0) override {
    if (position_ids().empty()) return add_learned_positions(x, weight, pos0);
    return add_learned_positions_at(x, weight, positions(pos0, x.dim() == 3 ? x.size(1) : 0, "learned embed"));
  }
  bool supports_position_ids() const override { return true; }
  int64_t max_length() const override { return L_; }
  int64_t trained_max_length(int64_t trained_length) const override { return std::min(trained_length, L_); }
  Tensor weight;  // (block_size, C)

 private:
  int64_t L_;
};

// Op-registry case: rows 4.. of the table added to x (the gradient reaches only those rows).
void learned_op_cases(std::vector<OpCase>& out) {
  OpCase c;
  c.name = "posenc/learned/add_positions";
  c.inputs = [](Generator& g, DType t) { return TensorList{make_input({2, 7, 6}, g, t), make_input({13, 6}, g, t)}; };
  c.fn = [](const TensorList& x) { return add_learned_positions(x[0], x[1], 4); };
  c.reference = [](const TensorList& x) {
    auto a = host(x[0]), tab = host(x[1]);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t t = 0; t < 7; ++t)
        for (int64_t e = 0; e < 6; ++e) a[(b * 7 + t) * 6 + e] += tab[(4 + t) * 6 + e];
    return Tensor::from_vector(a, {2, 7, 6}, DType::Float64);
  };
  out.push_back(c);
  // Randomized positions: rows {0, 2, 3, 7, 8, 11, 12} gathered (the gradient reaches only those rows).
  OpCase r;
  r.name = "posenc/learned/add_positions_at";
  r.inputs = [](Generator& g, DType t) { return TensorList{make_input({2, 7, 6}, g, t), make_input({13, 6}, g, t)}; };
  static const std::vector<int64_t> kIds = {0, 2, 3, 7, 8, 11, 12};
  r.fn = [](const TensorList& x) { return add_learned_positions_at(x[0], x[1], kIds); };
  r.reference = [](const TensorList& x) {
    auto a = host(x[0]), tab = host(x[1]);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t t = 0; t < 7; ++t)
        for (int64_t e = 0; e < 6; ++e) a[(b * 7 + t) * 6 + e] += tab[kIds[t] * 6 + e];
    return Tensor::from_vector(a, {2, 7, 6}, DType::Float64);
  };
  out.push_back(r);
}

}  // namespace

PosEncEntry learned_encoding() {
  return {"learned",
          "learned absolute position table of block_size rows (GPT-2); no positions beyond it",
          [](const PosEncConfig& cfg, Generator& gen) { return std::make_shared<LearnedEncoding>(cfg, gen); },
          {},
          nullptr,
          learned_op_cases};
}

}  // namespace posgrad::nn
