// posenc_config.h — a small double-precision position-encoding configuration for layer-level tests
// of every registered encoding: 12 channels, 3 heads, context 16, and each encoding's own sizes
// shrunk (T5 8 buckets to distance 12, DeBERTa 4 buckets to distance 10, RoPE on half the channels)
// so that their bucket and partial-rotation paths are exercised at tiny sizes.
#pragma once

#include <string>

#include "nn/posenc/position_encoding.h"

namespace posgrad::test {

inline nn::PosEncConfig small_posenc_config(const std::string& kind, bool causal, int64_t n_layer) {
  nn::PosEncConfig cfg;
  cfg.kind = kind;
  cfg.n_embd = 12;
  cfg.n_head = 3;
  cfg.n_layer = n_layer;
  cfg.block_size = 16;
  cfg.causal = causal;
  cfg.dtype = DType::Float64;
  cfg.set("t5_num_buckets", int64_t{8});
  cfg.set("t5_max_distance", int64_t{12});
  cfg.set("deberta_position_buckets", int64_t{4});
  cfg.set("deberta_max_relative_positions", int64_t{10});
  cfg.set("rope_fraction", 0.5);
  return cfg;
}

}  // namespace posgrad::test
