// none.cpp — NoPE: no position information at all. A causal decoder can still infer positions
// from the mask (it sees a growing number of keys); a bidirectional encoder is permutation
// invariant. No parameters; all three hooks are the identity.
#include "nn/posenc/position_encoding.h"

namespace posgrad::nn {

namespace {

class NoPositionEncoding : public PositionEncoding {
 public:
  explicit NoPositionEncoding(const PosEncConfig& cfg) { causal_ = cfg.causal; }
  std::string kind() const override { return "none"; }
};

}  // namespace

PosEncEntry none_encoding() {
  return {"none",
          "NoPE: no position information (the causal mask alone orders tokens)",
          [](const PosEncConfig& cfg, Generator&) { return std::make_shared<NoPositionEncoding>(cfg); },
          {},
          nullptr,
          nullptr};  // nothing differentiable: plain attention is covered by the op registry
}

}  // namespace posgrad::nn
