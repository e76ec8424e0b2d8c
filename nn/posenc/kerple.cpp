// kerple.cpp — KERPLE, kernelized relative positional embedding, logarithmic variant (Chi, Fan,
// Ramadge, Rudnicky, "KERPLE: Kernelized Relative Positional Embedding for Length Extrapolation",
// NeurIPS 2022, arXiv 2205.09921, §4; docs/positions.md §2). Head h of layer l adds the conditionally positive
// definite kernel
//     bias_h(i, j) = -r1_h log(1 + r2_h |i - j|),   r1_h, r2_h > 0 learned,
// to its scores after the 1/sqrt(d) scaling. It generalises ALiBi (a linear penalty) with a
// logarithmic one whose height and curvature every head learns.
//
// The bias depends only on the head and the distance, so it reaches the fused attention as data
// (ScoreBias::Distance), computed here with ordinary differentiable ops; the attention kernels have
// no code of their own for it, and autograd carries their bias gradient to r1 and r2.
//
// Parameters, per layer: r1_<l> and r2_<l> (H), initialised r1 ~ U(0, 2) and r2 ~ U(0, 1) as the
// authors' GPT-NeoX implementation (ParallelKerpleLog) does. Positivity as there too: before each
// use, values below kMinParam are set to kMinParam in place (a projection after the optimizer's
// step, not a clamp inside the graph, so a parameter at the bound still receives its gradient).
// They are one-dimensional and so, like biases and norms, outside weight decay (train/optim.cpp).
#include <algorithm>
#include <cmath>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "nn/posenc/position_encoding.h"

namespace posgrad::nn {

namespace {

constexpr double kMinParam = 1e-2;  // lower bound of r1 and r2 (the authors' eps)

// Sets the entries of p below `lo` to `lo`, in place (no graph). Leaves p untouched otherwise. On a GPU
// in place on the device (reading p back would cost a synchronisation per layer and step).
void project_below(const Tensor& p, double lo) {
  NoGradGuard guard;
  if (!p.device().is_cpu()) {
    assign_data(p, clamp_min(p, lo));
    return;
  }
  std::vector<double> v = p.to_vector();
  if (std::none_of(v.begin(), v.end(), [&](double x) { return x < lo; })) return;
  for (double& x : v) x = std::max(x, lo);
  assign_data(p, Tensor::from_vector(v, p.shape(), p.dtype()).to(p.device()));
}

class KerpleEncoding : public PositionEncoding {
 public:
  KerpleEncoding(const PosEncConfig& cfg, Generator& gen) {
    causal_ = cfg.causal;
    for (int64_t l = 0; l < cfg.n_layer; ++l) {
      r1_.push_back(
          register_parameter("r1_" + std::to_string(l), rand({cfg.n_head}, gen, cfg.dtype, Device::cpu(), 0.0, 2.0)));
      r2_.push_back(
          register_parameter("r2_" + std::to_string(l), rand({cfg.n_head}, gen, cfg.dtype, Device::cpu(), 0.0, 1.0)));
    }
  }
  std::string kind() const override { return "kerple"; }
  ScoreModifier scores(int64_t layer, const LayerProjections&, int64_t Tq, int64_t Tk, int64_t q_offset) override {
    const int64_t n = static_cast<int64_t>(r1_.size());
    POSGRAD_CHECK(layer >= 0 && layer < n, IndexError, "KERPLE position encoding: layer ", layer, " out of range (", n,
                  " layers)");
    project_below(r1_[layer], kMinParam);
    project_below(r2_[layer], kMinParam);
    ScoreModifier m;
    m.kind = ScoreBias::Distance;
    const ScoreWindow w = score_window(Tq, Tk, q_offset, "KERPLE scores");  // the ids' window while set
    m.bias_by_distance = kerple_bias_by_distance(r1_[layer], r2_[layer], w.Tq, w.Tk, w.q_offset);
    attach_positions(m);
    return m;
  }
  bool supports_position_ids() const override { return true; }
  bool position_ids_in_attention() const override { return true; }

 private:
  std::vector<Tensor> r1_, r2_;  // (H) per layer
};

}  // namespace

Tensor kerple_bias_by_distance(const Tensor& r1, const Tensor& r2, int64_t Tq, int64_t Tk, int64_t q_offset) {
  POSGRAD_CHECK(r1.dim() == 1 && r2.shape() == r1.shape(), ShapeError, "KERPLE: r1 and r2 must both be (H), got ",
                shape_str(r1.shape()), " and ", shape_str(r2.shape()));
  std::vector<double> distance;
  for (int64_t r : diagonal_relative_positions(Tq, Tk, q_offset)) distance.push_back(std::fabs(static_cast<double>(r)));
  const int64_t H = r1.size(0), nd = static_cast<int64_t>(distance.size());
  const Tensor dist = cached_on_device(Tensor::from_vector(distance, {1, nd}, r1.dtype()), r1.device());
  // -r1 log(1 + r2 |r|): (H, 1) x (1, nd) -> (H, nd)
  return -(r1.reshape({H, 1}) * log(r2.reshape({H, 1}) * dist + 1.0));
}

namespace {

// Op-registry cases: the bias alone (gradient to r1 and r2 through the log kernel) and the fused
// attention with it in every geometry of the sweep; r1, r2 drawn in [0.1, 2).
void kerple_op_cases(std::vector<OpCase>& out) {
  auto params = [](Generator& g, DType t, int64_t H) {
    return TensorList{make_input({H}, g, t, true, 0.1, 2.0), make_input({H}, g, t, true, 0.1, 2.0)};
  };
  auto reference = [](const std::vector<std::vector<double>>& p, int64_t h, int64_t r) {
    return -p[0][h] * std::log(1.0 + p[1][h] * std::fabs(double(r)));
  };
  {
    OpCase c;
    c.name = "posenc/kerple/bias_by_distance/Tq6_Tk9_offset3";
    c.inputs = [params](Generator& g, DType t) { return params(g, t, 3); };
    c.fn = [](const TensorList& x) { return kerple_bias_by_distance(x[0], x[1], 6, 9, 3); };
    c.reference = [reference](const TensorList& x) {
      const std::vector<std::vector<double>> p = {host(x[0]), host(x[1])};
      std::vector<double> b;
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t d = 0; d < 14; ++d) b.push_back(reference(p, h, d - 5 - 3));
      return Tensor::from_vector(b, {3, 14}, DType::Float64);
    };
    out.push_back(c);
  }
  add_distance_bias_cases(
      out, "kerple", params,
      [](const TensorList& p, int64_t Tq, int64_t Tk, int64_t q_offset) {
        return kerple_bias_by_distance(p[0], p[1], Tq, Tk, q_offset);
      },
      reference);
}

}  // namespace

PosEncEntry kerple_encoding() {
  PosEncEntry e{"kerple",
                "learned logarithmic distance penalty per head, -r1 log(1 + r2 |i - j|) (KERPLE, Chi et al. 2022)",
                [](const PosEncConfig& cfg, Generator& gen) { return std::make_shared<KerpleEncoding>(cfg, gen); },
                {},
                nullptr,
                kerple_op_cases};
  e.symmetric_bias = true;  // a bias of |i - j| alone
  return e;
}

}  // namespace posgrad::nn
