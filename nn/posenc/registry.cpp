// registry.cpp — the position-encoding registry (kind name -> factory) and the interface's
// defaults. Adding an encoding: one file in nn/posenc/ with a make_<kind> factory, one line in
// kRegistry below; the CLI choices, tests, compare experiment and benchmarks pick it up.
#include <cmath>

#include "nn/posenc/position_encoding.h"

namespace posgrad::nn {

namespace {

const std::vector<std::pair<std::string, PosEncFactory>>& registry() {
  static const std::vector<std::pair<std::string, PosEncFactory>> kRegistry = {
      {"none", make_none},   {"sinusoidal", make_sinusoidal}, {"learned", make_learned}, {"t5", make_t5},
      {"deberta", make_deberta}, {"rope", make_rope},         {"alibi", make_alibi},
  };
  return kRegistry;
}

}  // namespace

double PositionEncoding::attention_scale(int64_t head_dim) const {
  return 1.0 / std::sqrt(static_cast<double>(head_dim));
}

std::vector<std::string> position_encoding_kinds() {
  std::vector<std::string> k;
  for (const auto& [name, f] : registry()) k.push_back(name);
  return k;
}

std::shared_ptr<PositionEncoding> make_position_encoding(const PosEncConfig& cfg, Generator& gen) {
  for (const auto& [name, factory] : registry()) {
    if (name != cfg.kind) continue;
    POSGRAD_CHECK(cfg.n_embd > 0 && cfg.n_head > 0 && cfg.n_embd % cfg.n_head == 0, ValueError,
                  "position encoding '", cfg.kind, "': n_embd (", cfg.n_embd, ") must be a positive multiple of n_head (",
                  cfg.n_head, ")");
    POSGRAD_CHECK(cfg.n_layer > 0 && cfg.block_size > 0, ValueError, "position encoding '", cfg.kind,
                  "': n_layer and block_size must be positive, got ", cfg.n_layer, " and ", cfg.block_size);
    POSGRAD_CHECK(is_floating(cfg.dtype), DTypeError, "position encoding '", cfg.kind,
                  "': parameters need a floating dtype, got ", dtype_name(cfg.dtype));
    return factory(cfg, gen);
  }
  std::string known;
  for (const auto& [name, f] : registry()) known += (known.empty() ? "" : "|") + name;
  throw ValueError("unknown position encoding '" + cfg.kind + "' (known: " + known + ")");
}

}  // namespace posgrad::nn
