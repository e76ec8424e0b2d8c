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

const std::vector<PosEncEntry>& position_encodings() {
  static const std::vector<PosEncEntry> kRegistry = {
      none_encoding(),    sinusoidal_encoding(), learned_encoding(), t5_encoding(),
      deberta_encoding(), rope_encoding(),       alibi_encoding(),
  };
  return kRegistry;
}

double PositionEncoding::attention_scale(int64_t head_dim) const {
  return 1.0 / std::sqrt(static_cast<double>(head_dim));
}

std::vector<std::string> position_encoding_kinds() {
  std::vector<std::string> k;
  for (const auto& e : position_encodings()) k.push_back(e.kind);
  return k;
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
  throw UsageError("no position-encoding option '" + name + "'" + (near.empty() ? "" : " (did you mean '" + near + "'?)"));
}

void PosEncConfig::validate() const {
  for (const auto& s : position_encoding_options()) opt::check(s, options.at(s.name), s.flag());
  for (const auto& e : position_encodings())
    if (e.kind == kind && e.check) e.check(*this);
}

std::shared_ptr<PositionEncoding> make_position_encoding(const PosEncConfig& cfg, Generator& gen) {
  for (const auto& e : position_encodings()) {
    if (e.kind != cfg.kind) continue;
    POSGRAD_CHECK(cfg.n_embd > 0 && cfg.n_head > 0 && cfg.n_embd % cfg.n_head == 0, ValueError,
                  "position encoding '", cfg.kind, "': n_embd (", cfg.n_embd, ") must be a positive multiple of n_head (",
                  cfg.n_head, ")");
    POSGRAD_CHECK(cfg.n_layer > 0 && cfg.block_size > 0, ValueError, "position encoding '", cfg.kind,
                  "': n_layer and block_size must be positive, got ", cfg.n_layer, " and ", cfg.block_size);
    POSGRAD_CHECK(is_floating(cfg.dtype), DTypeError, "position encoding '", cfg.kind,
                  "': parameters need a floating dtype, got ", dtype_name(cfg.dtype));
    cfg.validate();
    return e.make(cfg, gen);
  }
  const auto kinds = position_encoding_kinds();
  std::string known;
  for (const auto& k : kinds) known += (known.empty() ? "" : "|") + k;
  const std::string near = opt::nearest(cfg.kind, kinds);
  throw ValueError("unknown position encoding '" + cfg.kind + "' (known: " + known + ")" +
                   (near.empty() ? "" : "; did you mean '" + near + "'?"));
}

}  // namespace posgrad::nn
