// registry.cpp — the position-encoding registry and the interface's defaults. Adding an encoding:
// one file in nn/posenc/ defining `PosEncEntry <kind>_encoding()` (factory and options), and its
// line below; the CLI flags and choices, config.json, the tests, the comparison and the
// benchmarks pick it up.
#include <cmath>

#include "nn/posenc/position_encoding.h"

namespace posgrad::nn {

PosEncEntry none_encoding();
PosEncEntry sinusoidal_encoding();
PosEncEntry learned_encoding();
PosEncEntry t5_encoding();
PosEncEntry deberta_encoding();
PosEncEntry rope_encoding();
PosEncEntry alibi_encoding();
PosEncEntry kerple_encoding();
PosEncEntry sandwich_encoding();
PosEncEntry xpos_encoding();
PosEncEntry fire_encoding();
PosEncEntry hybrid_encoding();
PosEncEntry fox_encoding();
PosEncEntry cope_encoding();

const std::vector<PosEncEntry>& position_encodings() {
  static const std::vector<PosEncEntry> kRegistry = {
      none_encoding(), sinusoidal_encoding(), learned_encoding(), t5_encoding(),       deberta_encoding(),
      rope_encoding(), alibi_encoding(),      kerple_encoding(),  sandwich_encoding(), xpos_encoding(),
      fire_encoding(), hybrid_encoding(),     fox_encoding(),     cope_encoding(),
  };
  return kRegistry;
}

const std::vector<OpCase>& all_op_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> v = op_registry();
    for (const auto& e : position_encodings())
      if (e.op_cases) e.op_cases(v);
    return v;
  }();
  return cases;
}

void add_distance_bias_cases(std::vector<OpCase>& out, const std::string& kind,
                             std::function<TensorList(Generator&, DType, int64_t H)> params, DistanceBiasFn bias,
                             DistanceReferenceFn reference) {
  struct Geometry {
    std::string name;
    Shape q, k;
    bool causal;
    int64_t q_offset;
    std::vector<int64_t> positions = {};  // per-token positions (self-attention); empty: none
  };
  const std::vector<Geometry> geometries = {
      {"causal/1x3x33x5", {1, 3, 33, 5}, {1, 3, 33, 5}, true, 0},
      {"bidir/2x3x7x5", {2, 3, 7, 5}, {2, 3, 7, 5}, false, 0},
      {"causal/T1", {1, 1, 1, 3}, {1, 1, 1, 3}, true, 0},
      {"causal/q_offset-3", {1, 2, 7, 3}, {1, 2, 7, 3}, true, -3},
      {"bidir/Tq5_Tk9_offset4", {2, 2, 5, 3}, {2, 2, 9, 3}, false, 4},
      // Randomized positions (Ruoss et al. 2023 §3): the bias of the virtual window 0..P-1, P = 24.
      {"causal/positions_gaps", {2, 3, 7, 4}, {2, 3, 7, 4}, true, 0, {1, 2, 5, 9, 10, 17, 23}},
      {"bidir/positions_gaps", {2, 3, 7, 4}, {2, 3, 7, 4}, false, 0, {0, 4, 5, 6, 13, 20, 23}},
  };
  for (const Geometry& g : geometries) {
    AttentionCase ac;
    ac.name = "posenc/" + kind + "/" + g.name;
    ac.q = g.q;
    ac.k = g.k;
    ac.causal = g.causal;
    ac.q_offset = g.q_offset;
    const int64_t H = g.q[1], q_offset = g.q_offset;
    const std::vector<int64_t> pos = g.positions;
    // The bias is built for the window of the positions (P, P, 0), as the encodings' scores() do.
    const int64_t Tq = pos.empty() ? g.q[2] : pos.back() + 1, Tk = pos.empty() ? g.k[2] : pos.back() + 1;
    ac.extra_inputs = [params, H](Generator& gen, DType t) { return params(gen, t, H); };
    ac.modifier = [bias, Tq, Tk, q_offset, pos](const TensorList& x) {
      ScoreModifier m;
      m.kind = ScoreBias::Distance;
      m.bias_by_distance = bias(TensorList(x.begin() + 3, x.end()), Tq, Tk, q_offset);
      m.query_positions = m.key_positions = pos;
      return m;
    };
    ac.reference_bias = [reference, q_offset, pos](const TensorList& x) -> AttentionBiasFn {
      std::vector<std::vector<double>> p;
      for (size_t i = 3; i < x.size(); ++i) p.push_back(host(x[i]));
      return [reference, p, q_offset, pos](int64_t, int64_t h, int64_t i, int64_t j) {
        return reference(p, h, pos.empty() ? j - i - q_offset : pos[j] - pos[i]);
      };
    };
    add_attention_case(out, ac);
    if (!pos.empty()) out.back().cuda = false;  // no CUDA kernel for per-token positions
  }
}

void PositionEncoding::set_position_ids(std::vector<int64_t> ids) {
  POSGRAD_CHECK(supports_position_ids(), ValueError, "the ", kind(),
                " position encoding does not take position ids (randomized positions need an encoding that has "
                "positions: sinusoidal, learned, rope, xpos, t5, alibi, kerple, sandwich, deberta, fire, hybrid)");
  for (size_t i = 0; i < ids.size(); ++i)
    POSGRAD_CHECK(ids[i] >= 0 && (i == 0 || ids[i] > ids[i - 1]), ValueError,
                  "position ids must be >= 0 and strictly "
                  "increasing, got ",
                  ids[i], " at index ", i, i == 0 ? "" : detail::concat(" after ", ids[i - 1]));
  position_ids_ = std::move(ids);
}

std::vector<int64_t> PositionEncoding::positions(int64_t pos0, int64_t T, const char* who) const {
  if (position_ids_.empty()) {
    std::vector<int64_t> p(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) p[t] = pos0 + t;
    return p;
  }
  POSGRAD_CHECK(pos0 == 0 && static_cast<int64_t>(position_ids_.size()) == T, ShapeError, who, ": ",
                position_ids_.size(), " position ids are set for a forward over ", T, " tokens from position ", pos0,
                " (ids need one whole sequence from pos0 = 0)");
  return position_ids_;
}

PositionEncoding::ScoreWindow PositionEncoding::score_window(int64_t Tq, int64_t Tk, int64_t q_offset,
                                                             const char* who) const {
  if (position_ids_.empty()) return {Tq, Tk, q_offset};
  const std::vector<int64_t> ids = positions(q_offset, Tq, who);  // ShapeError unless Tq = ids.size(), offset 0
  POSGRAD_CHECK(Tk == Tq, ShapeError, who, ": position ids are set for self-attention over ", Tq, " tokens, got ", Tk,
                " keys (ids need one whole sequence from pos0 = 0)");
  const int64_t P = ids.back() + 1;
  return {P, P, 0};
}

void PositionEncoding::attach_positions(ScoreModifier& m) const {
  m.query_positions = position_ids_;
  m.key_positions = position_ids_;
}

double PositionEncoding::attention_scale(int64_t head_dim) const {
  return 1.0 / std::sqrt(static_cast<double>(head_dim));
}

std::vector<std::string> position_encoding_kinds() {
  std::vector<std::string> k;
  for (const auto& e : position_encodings()) k.push_back(e.kind);
  return k;
}

std::vector<std::string> bidirectional_position_encoding_kinds() {
  std::vector<std::string> k;
  for (const auto& e : position_encodings())
    if (!e.causal_only) k.push_back(e.kind);
  return k;
}

namespace {
[[noreturn]] void unknown_kind(const std::string& kind) {
  const auto kinds = position_encoding_kinds();
  std::string known;
  for (const auto& k : kinds) known += (known.empty() ? "" : "|") + k;
  const std::string near = opt::nearest(kind, kinds);
  throw ValueError("unknown position encoding '" + kind + "' (known: " + known + ")" +
                   (near.empty() ? "" : "; did you mean '" + near + "'?"));
}
}  // namespace

const PosEncEntry& position_encoding_entry(const std::string& kind) {
  for (const auto& e : position_encodings())
    if (e.kind == kind) return e;
  unknown_kind(kind);
}

const std::vector<opt::Spec>& position_encoding_options() {
  static const std::vector<opt::Spec> all = [] {
    std::vector<opt::Spec> v;
    for (const auto& e : position_encodings())
      for (opt::Spec s : e.options) {
        if (!s.fallback) throw std::logic_error("position encoding option '" + s.name + "' declares no default");
        s.group = "Position encoding: " + e.kind;
        s.resumable = false;
        v.push_back(std::move(s));
      }
    return v;
  }();
  return all;
}

opt::Values PosEncConfig::default_position_encoding_options() {
  opt::Values v;
  for (const auto& s : position_encoding_options()) v.set(s.name, *s.fallback);
  return v;
}

void PosEncConfig::set(const std::string& name, opt::Value v) {
  for (const auto& s : position_encoding_options()) {
    if (s.name != name) continue;
    opt::check(s, v, s.flag());
    options.set(name, std::move(v));
    return;
  }
  std::vector<std::string> known;
  for (const auto& s : position_encoding_options()) known.push_back(s.name);
  const std::string near = opt::nearest(name, known);
  throw UsageError("no position-encoding option '" + name + "'" +
                   (near.empty() ? "" : " (did you mean '" + near + "'?)"));
}

void PosEncConfig::validate() const {
  for (const auto& s : position_encoding_options()) opt::check(s, options.at(s.name), s.flag());
  for (const auto& e : position_encodings()) {
    if (e.kind != kind) continue;
    POSGRAD_CHECK(causal || !e.causal_only, ValueError, "position encoding '", kind,
                  "' is causal only (decoders): it is not defined for bidirectional (encoder) attention");
    if (e.check) e.check(*this);
  }
}

std::shared_ptr<PositionEncoding> make_position_encoding(const PosEncConfig& cfg, Generator& gen) {
  for (const auto& e : position_encodings()) {
    if (e.kind != cfg.kind) continue;
    POSGRAD_CHECK(cfg.n_embd > 0 && cfg.n_head > 0 && cfg.n_embd % cfg.n_head == 0, ValueError, "position encoding '",
                  cfg.kind, "': n_embd (", cfg.n_embd, ") must be a positive multiple of n_head (", cfg.n_head, ")");
    POSGRAD_CHECK(cfg.n_layer > 0 && cfg.block_size > 0, ValueError, "position encoding '", cfg.kind,
                  "': n_layer and block_size must be positive, got ", cfg.n_layer, " and ", cfg.block_size);
    POSGRAD_CHECK(is_floating(cfg.dtype), DTypeError, "position encoding '", cfg.kind,
                  "': parameters need a floating dtype, got ", dtype_name(cfg.dtype));
    cfg.validate();
    return e.make(cfg, gen);
  }
  unknown_kind(cfg.kind);
}

}  // namespace posgrad::nn
