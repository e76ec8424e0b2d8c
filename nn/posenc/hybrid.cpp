// hybrid.cpp — a position encoding chosen per attention layer, with the iRoPE pattern as its
// default: RoPE in every layer but each K-th, which has none (NoPE), as Llama 4 (iRoPE), Command A
// and SmolLM3 do (SPEC-positions-2 §3; HF transformers modeling_llama4.py / configuration_smollm3.py
// `no_rope_layer_interval`: layer l uses RoPE iff (l + 1) mod K != 0). --hybrid-layers names any
// encoding that acts inside attention for each layer instead ("rope,alibi,rope,none").
//
// The NoPE-layer temperature of Llama 4 (`attn_temperature_tuning`, from Scalable-Softmax,
// Nakanishi 2025), when on: the queries of every layer without an encoding are scaled by
//     tau(p) = 1 + alpha ln(floor((p + 1) / F) + 1),   p the query's absolute position (cache offset
// included), alpha = --hybrid-temp-scale, F = --hybrid-temp-floor-scale (SPEC-2 §3.3); keys are
// untouched, the backward is dq = tau dq' (an ordinary product). F = 8192 is Llama 4's and leaves a
// context-64 model untouched; the default is a quarter of the training context (SPEC-2 §3.5).
//
// Each distinct encoding of the list is one sub-encoding (a submodule named by its kind) built for
// the layers that use it, so a parameter exists only where a layer reads it; layer l asks the
// sub-encoding for its local index. Only encodings that act on q, k or the scores may be listed
// (absolute tables act on the token embeddings, once per model: refused by name), and they must
// agree on the attention scale (T5 unscaled and DeBERTa change it: refused when mixed).
#include <cmath>
#include <map>
#include <sstream>

#include "autograd/ops.h"
#include "autograd/registry.h"
#include "nn/posenc/position_encoding.h"

namespace posgrad::nn {

double nope_temperature(int64_t p, double alpha, double floor_scale) {
  POSGRAD_CHECK(p >= 0, ValueError, "NoPE-layer temperature: position must be >= 0, got ", p);
  POSGRAD_CHECK(floor_scale > 0, ValueError, "NoPE-layer temperature: floor scale must be > 0, got ", floor_scale);
  return 1.0 + alpha * std::log(std::floor((static_cast<double>(p) + 1.0) / floor_scale) + 1.0);
}

std::vector<std::string> hybrid_layer_kinds(const std::string& list, int64_t interval, int64_t n_layer) {
  std::vector<std::string> kinds;
  if (list.empty()) {
    POSGRAD_CHECK(interval >= 1, ValueError, "hybrid position encoding: --hybrid-nope-interval must be >= 1, got ",
                  interval);
    for (int64_t l = 0; l < n_layer; ++l) kinds.push_back((l + 1) % interval != 0 ? "rope" : "none");
    return kinds;
  }
  std::stringstream in(list);
  for (std::string k; std::getline(in, k, ',');) kinds.push_back(k);
  POSGRAD_CHECK(static_cast<int64_t>(kinds.size()) == n_layer, ValueError,
                "hybrid position encoding: --hybrid-layers \"", list, "\" names ", kinds.size(), " encodings for ",
                n_layer, " layers (one per layer)");
  for (const auto& k : kinds) {
    POSGRAD_CHECK(k != "hybrid", ValueError, "hybrid position encoding: --hybrid-layers cannot name hybrid itself");
    POSGRAD_CHECK(
        k != "sinusoidal" && k != "learned", ValueError, "hybrid position encoding: --hybrid-layers names ", k,
        ", an absolute table added to the token embeddings once per model, not per layer; list "
        "encodings that act inside attention (none, rope, xpos, t5, alibi, kerple, sandwich, deberta, fire, fox)");
    (void)position_encoding_entry(k);  // ValueError naming an unknown kind and listing the known ones
  }
  return kinds;
}

namespace {

double floor_scale_of(const PosEncConfig& cfg) {
  const double f = cfg.options.real("hybrid_temp_floor_scale");
  return f == 0 ? std::max(1.0, static_cast<double>(cfg.block_size) / 4.0) : f;
}

class HybridEncoding : public PositionEncoding {
 public:
  HybridEncoding(const PosEncConfig& cfg, Generator& gen)
      : kinds_(hybrid_layer_kinds(cfg.options.text("hybrid_layers"), cfg.options.integer("hybrid_nope_interval"),
                                  cfg.n_layer)),
        temperature_(cfg.options.boolean("hybrid_temperature")),
        alpha_(cfg.options.real("hybrid_temp_scale")),
        floor_scale_(floor_scale_of(cfg)) {
    causal_ = cfg.causal;
    std::map<std::string, int64_t> count;
    for (const auto& k : kinds_) local_.push_back(count[k]++);
    // One sub-encoding per distinct kind, in the order of first use, built for its layers only.
    for (const auto& k : kinds_) {
      if (subs_.count(k)) continue;
      PosEncConfig sub = cfg;
      sub.kind = k;
      sub.n_layer = count[k];
      sub.validate();
      subs_[k] = register_module(k, make_position_encoding(sub, gen));
    }
    const double scale = subs_.begin()->second->attention_scale(cfg.n_embd / cfg.n_head);
    for (const auto& [k, e] : subs_)
      POSGRAD_CHECK(e->attention_scale(cfg.n_embd / cfg.n_head) == scale, ValueError, "hybrid position encoding: ", k,
                    " scales q.k by ", e->attention_scale(cfg.n_embd / cfg.n_head), " and ", subs_.begin()->first,
                    " by ", scale, "; one model has one attention scale (", "--t5-scaled, DeBERTa's scale)");
  }
  std::string kind() const override { return "hybrid"; }
  std::pair<Tensor, Tensor> rotate(int64_t layer, const Tensor& q, const Tensor& k, int64_t pos0) override {
    const int64_t l = check_layer(layer);
    auto rotated = of(l).rotate(local_[l], q, k, pos0);
    if (!temperature_ || kinds_[l] != "none") return rotated;
    // tau(p) per query row: (1, 1, T, 1), a constant of the graph.
    POSGRAD_CHECK(q.dim() == 4, ShapeError, "hybrid NoPE-layer temperature: q must be (B, H, T, D), got ",
                  shape_str(q.shape()));
    const std::vector<int64_t> p = positions(pos0, q.size(2), "hybrid NoPE-layer temperature");
    std::vector<double> tau;
    bool any = false;
    for (int64_t x : p) {
      tau.push_back(nope_temperature(x, alpha_, floor_scale_));
      any = any || tau.back() != 1.0;
    }
    if (!any) return rotated;  // the whole window below F - 1: q unchanged, bit for bit
    const Tensor t = Tensor::from_vector(tau, {1, 1, q.size(2), 1}, q.dtype()).to(q.device());
    return {rotated.first * t, rotated.second};
  }
  ScoreModifier scores(int64_t layer, const LayerProjections& proj, int64_t Tq, int64_t Tk, int64_t q_offset) override {
    const int64_t l = check_layer(layer);
    return of(l).scores(local_[l], proj, Tq, Tk, q_offset);
  }
  bool supports_kv_cache() const override {
    for (const auto& [k, e] : subs_)
      if (!e->supports_kv_cache()) return false;
    return true;
  }
  double attention_scale(int64_t head_dim) const override { return subs_.begin()->second->attention_scale(head_dim); }
  int64_t max_length() const override {
    int64_t m = -1;
    for (const auto& [k, e] : subs_)
      if (e->max_length() >= 0) m = m < 0 ? e->max_length() : std::min(m, e->max_length());
    return m;
  }
  int64_t trained_max_length(int64_t trained_length) const override {
    int64_t m = -1;
    for (const auto& [k, e] : subs_) {
      const int64_t t = e->trained_max_length(trained_length);
      if (t >= 0) m = m < 0 ? t : std::min(m, t);
    }
    return m;
  }
  // Randomized positions: every layer's encoding takes them (NoPE alone has no positions to move).
  bool supports_position_ids() const override {
    bool any = false;
    for (const auto& [k, e] : subs_) {
      if (k == "none") continue;
      if (!e->supports_position_ids()) return false;
      any = true;
    }
    return any;
  }
  bool position_ids_in_attention() const override {
    for (const auto& [k, e] : subs_)
      if (e->position_ids_in_attention()) return true;
    return false;
  }
  void set_position_ids(std::vector<int64_t> ids) override {
    for (auto& [k, e] : subs_)
      if (k != "none") e->set_position_ids(ids);
    PositionEncoding::set_position_ids(std::move(ids));  // the temperature reads them too
  }
  void clear_position_ids() override {
    for (auto& [k, e] : subs_) e->clear_position_ids();
    PositionEncoding::clear_position_ids();
  }

 private:
  int64_t check_layer(int64_t layer) const {
    const int64_t n = static_cast<int64_t>(kinds_.size());
    POSGRAD_CHECK(layer >= 0 && layer < n, IndexError, "hybrid position encoding: layer ", layer, " out of range (", n,
                  " layers)");
    return layer;
  }
  PositionEncoding& of(int64_t layer) { return *subs_.at(kinds_[layer]); }

  std::vector<std::string> kinds_;
  std::vector<int64_t> local_;  // each layer's index among the layers of its kind
  std::map<std::string, std::shared_ptr<PositionEncoding>> subs_;
  bool temperature_;
  double alpha_, floor_scale_;
};

// Op-registry case: the temperature's product inside the attention of a NoPE layer (rows 14.. of a
// 20-token window past F = 16 are scaled) against the reference built by hand.
void hybrid_op_cases(std::vector<OpCase>& out) {
  OpCase c;
  c.name = "posenc/hybrid/nope_temperature/causal/1x2x20x3";
  c.inputs = [](Generator& g, DType t) {
    return TensorList{make_input({1, 2, 20, 3}, g, t), make_input({1, 2, 20, 3}, g, t),
                      make_input({1, 2, 20, 3}, g, t)};
  };
  auto tau = [](const Tensor& like) {  // on q's device and in its dtype (the CUDA sweep runs it too)
    std::vector<double> v;
    for (int64_t p = 0; p < 20; ++p) v.push_back(nope_temperature(p, 0.1, 16));
    return Tensor::from_vector(v, {1, 1, 20, 1}, like.dtype()).to(like.device());
  };
  c.fn = [tau](const TensorList& x) {
    return attention(x[0] * tau(x[0]), x[1], x[2], ScoreModifier{}, true, 1.0 / std::sqrt(3.0));
  };
  c.reference = [tau](const TensorList& x) {
    return attention_reference(x[0] * tau(x[0]), x[1], x[2], ScoreModifier{}, true, 1.0 / std::sqrt(3.0));
  };
  out.push_back(c);
}

}  // namespace

PosEncEntry hybrid_encoding() {
  using namespace opt;
  // Added after experiments were first written: a results.json or config.json without the option
  // reads as its default (the encoding did not exist then, so no run used another value).
  PosEncEntry e{
      "hybrid",
      "an encoding per layer: by default RoPE with every 4th layer NoPE (iRoPE: Llama 4, SmolLM3), and Llama 4's "
      "query temperature on the NoPE layers",
      [](const PosEncConfig& cfg, Generator& gen) { return std::make_shared<HybridEncoding>(cfg, gen); },
      {added_later_default(
           text("hybrid_layers",
                "hybrid: one encoding per layer, comma-separated (\"rope,rope,rope,none\"; encodings that act "
                "inside attention); empty: RoPE with every --hybrid-nope-interval-th layer NoPE"),
           std::string()),
       added_later_default(integer("hybrid_nope_interval", closed(1, 1 << 20),
                                   "hybrid: K of the iRoPE pattern, layer l is NoPE iff (l + 1) mod K = 0 (HF "
                                   "no_rope_layer_interval; 1: every layer NoPE)"),
                           int64_t{4}),
       added_later_default(
           boolean("hybrid_temperature",
                   "hybrid: scale the queries of the NoPE layers by 1 + alpha ln(floor((p + 1) / F) + 1) "
                   "(Llama 4 attn_temperature_tuning)"),
           true),
       added_later_default(
           real("hybrid_temp_scale", closed(0, 100), "hybrid: alpha of the NoPE-layer temperature (Llama 4: 0.1)"),
           0.1),
       added_later_default(
           real("hybrid_temp_floor_scale", closed(0, 1e12),
                "hybrid: F of the NoPE-layer temperature (0: a quarter of the training context; Llama 4: "
                "8192, inert below 8191 tokens)",
                "tokens"),
           0.0)},
      [](const PosEncConfig& cfg) {
        const auto kinds = hybrid_layer_kinds(cfg.options.text("hybrid_layers"),
                                              cfg.options.integer("hybrid_nope_interval"), cfg.n_layer);
        for (const auto& k : kinds) {
          PosEncConfig sub = cfg;
          sub.kind = k;
          sub.validate();  // each layer's encoding with its own checks (xPos causal only, RoPE's widths, ...)
        }
      },
      hybrid_op_cases};
  e.composes = true;  // its layers' encodings read their own options from its configuration
  return e;
}

}  // namespace posgrad::nn
