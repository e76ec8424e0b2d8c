// gpt.h — the GPT-style decoder-only language model: token embedding, a position encoding from
// the registry (nn/posenc), N pre-LayerNorm blocks (fused attention + GELU MLP), final LayerNorm,
// LM head tied to the token embedding. GPT-2 initialisation: N(0, 0.02) everywhere, residual
// projections N(0, 0.02/sqrt(2·n_layer)) (Radford et al. 2019, §2.3; nanoGPT model.py).
// The model never names a concrete position encoding.
#pragma once

#include <nlohmann/json.hpp>

#include "nn/attention.h"
#include "nn/layers.h"
#include "nn/posenc/position_encoding.h"

namespace posgrad::nn {

struct GPTConfig {
  int64_t vocab_size = 256;
  int64_t block_size = 64;  // training context length
  int64_t n_layer = 4, n_head = 4, n_embd = 128;
  double dropout = 0.0;
  bool bias = true;
  // Learnable attention sinks in every layer (nn/attention.h; SPEC-positions-2 §5), with any encoding.
  bool attention_sinks = false;
  PosEncConfig pos;  // pos.kind selects the encoding; its sizes are filled from the fields above

  // Throws ValueError naming the first invalid field (non-positive sizes, n_embd % n_head, dropout
  // range, an encoding option out of range...). Saved and loaded through train_options().
  void validate() const;
};

class Block : public Module {
 public:
  Block(const GPTConfig& cfg, Generator& gen, Generator& dropout_gen);
  // x (B, T, C) -> (B, T, C); with a cache, see CausalSelfAttention::forward.
  Tensor forward(const Tensor& x, PositionEncoding& pe, int64_t layer, int64_t pos0, KVCacheLayer* cache = nullptr,
                 int64_t capacity = 0) const;
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<Linear> fc, proj;
  std::shared_ptr<Dropout> drop;
};

class GPT : public Module {
 public:
  // gen drives initialisation; dropout_gen drives dropout masks during training (kept by the caller
  // so its state can be checkpointed).
  GPT(const GPTConfig& cfg, Generator& gen, Generator& dropout_gen);
  // idx int64 (B, T) -> logits (B, T, V). pos0 offsets positions (evaluation of a later window).
  Tensor forward(const Tensor& idx, int64_t pos0 = 0) const;
  // The final hidden states before the LM head: idx int64 (B, T) -> (B, T, C) after ln_f (what the
  // encoder's classification heads read; nn/encoder.h). forward() = hidden() · wteᵀ.
  Tensor hidden(const Tensor& idx, int64_t pos0 = 0) const;
  // Incremental decoding: idx (B, T) are the tokens at positions cache.length .. cache.length+T-1;
  // their keys and values are appended to the cache and the logits (B, T, V) returned — the rows
  // forward() gives for those positions over the whole sequence so far, bit for bit. Needs no
  // gradient (NoGradGuard), a causal encoding with supports_kv_cache() (ValueError otherwise) and
  // room in the cache (IndexError).
  Tensor forward(const Tensor& idx, KVCache& cache) const;
  // An empty cache for up to `capacity` positions (at most the encoding's max_length()).
  KVCache make_kv_cache(int64_t capacity) const;
  const GPTConfig& config() const { return cfg_; }
  PositionEncoding& position_encoding() const { return *pos_; }
  // Model-level measurements of how position reaches the model, for idx int64 (B, T) of T <= the
  // encoding's max_length() (IndexError), always at positions 0..T-1: ValueError with position ids
  // set on the encoding (a training option), and ValueError in training mode with dropout > 0 (call
  // eval(): a measurement of the deterministic model). Any device (see each); any number of layers.
  //
  // Attention entropy by query position: (n_layer, T) doubles, entry [l][i] =
  //   mean over batch b and heads h of H_l(b, h, i), divided by log n_i,
  // H_l(b, h, i) = -sum_j p_ij log p_ij the entropy (nats) of query i's attention row in layer l over
  // the n_i keys it sees (CausalSelfAttention::attention_entropy), n_i = i + 1 under the causal
  // mask, n_i = T with bidirectional attention; log n_i is the entropy of uniform attention over them.
  // So uniform attention gives exactly 1 (to rounding: 1e-15), attention on one key 0, and every
  // entry with n_i > 1 lies in [0, 1]. Entries with n_i = 1 — query 0 under the causal mask, every
  // query when T = 1 — have nothing to spread over: NaN (0/0), never a value. With attention sinks
  // the entropy is that of the real keys' share renormalised, p_ij = P_ij / sum_j' P_ij' (the
  // sink's mass does not count; it takes the same fraction from every key of a row). The scores are
  // recomputed on the host in float64 (device tensors are copied), one window at a time: O(H T^2)
  // memory beyond the forward; no graph.
  std::vector<std::vector<double>> attention_entropy_by_position(const Tensor& idx) const;

  // Attention weight by query-key distance over its uniform share: (n_layer, T - 1) doubles, entry
  // [l][d - 1] = the mean over heads h of CausalSelfAttention::attention_over_uniform's [h, d - 1]
  // for layer l, d = 1..T-1 (attention_weight_over_uniform, autograd/ops/attention.h):
  //   mean over the pairs (b, i, j) at distance |i - j| = d of n_i · p'_ij,
  // p'_ij query i's attention over its n_i visible keys other than itself (n_i = i causal, T - 1
  // bidirectional). Dimensionless: uniform attention gives exactly 1 at every d, > 1 = more than
  // the uniform share. T = 1: rows of 0 entries. Same conditions as the entropy above (positions
  // 0..T-1, eval mode or no dropout, any device, scores recomputed on the host in float64).
  std::vector<std::vector<double>> attention_over_uniform_by_distance(const Tensor& idx) const;

  // The first token's share of attention over its uniform share, per layer: (n_layer) doubles, entry
  // [l] = the mean over heads of CausalSelfAttention::first_key_share for layer l
  // (attention_first_key_share, autograd/ops/attention.h): mean over the windows and the queries
  // i = 1..T-1 of n_i · p_i0, n_i the keys query i sees. Uniform attention gives exactly 1; > 1 = the
  // first token draws more than its share (StreamingLLM's attention sink); with attention sinks, over
  // the real keys only. NaN with T < 2. Same conditions as the entropy above.
  std::vector<double> first_token_share_by_layer(const Tensor& idx) const;

  // Gradient of each window's last-position loss with respect to the residual stream.
  // targets int64 (B, T) (the batch's next tokens; only column T-1 is read: IndexError unless it
  // is in [0, V)). Window b's loss is L_b = -log softmax(logits[b, T-1])[targets[b, T-1]] (nats,
  // not divided by B); x_l (B, T, C) is the residual stream entering block l, l = 0..n_layer-1,
  // x_0 the token embedding plus the absolute position embedding (the encoding's embed(); the
  // token embedding alone for encodings without one). Returns n_layer tensors g_l (B, T, C) of the
  // model's dtype and device, g_l[b] = dL_b / dx_l[b] (windows do not interact, so one backward of
  // sum_b L_b gives each window's own gradient). One forward and one backward on the model's
  // device with its own kernels (memory: one training step's graph on B windows). The parameters
  // are frozen for the call (requires_grad off, each flag restored on return and on an
  // exception): their .grad is neither read nor written, and no parameter gradient is computed.
  // Works inside NoGradGuard (grad mode is on for the call).
  std::vector<Tensor> last_position_gradients(const Tensor& idx, const Tensor& targets) const;
  // Gradient flow by distance: (n_layer, T) doubles, entry [l][d] = mean over windows b of the L2
  // norm over channels ||g_l[b, T-1-d, :]||, d = (T-1) - j the distance of input position j from the
  // last position (norms taken on the host in float64). Every d in 0..T-1 is defined under the
  // causal mask as well (the last query sees every key); d = 0 includes the residual path.
  // Position-blind reading (NoPE, uniform attention, a window of one repeated token): every
  // position holds the same state, and the last block's row is flat for d >= 1 at (1/T) ||J^T u||
  // (J the value path's Jacobian, u the gradient at the last query's attention output), so T times
  // it does not depend on T; earlier blocks are not flat (they also reach j through the queries
  // j..T-2). tests/test_measurements.cpp pins the flat reading.
  std::vector<std::vector<double>> gradient_by_distance(const Tensor& idx, const Tensor& targets) const;
  // Parameters without the position tables (nanoGPT reports this count).
  int64_t num_non_position_parameters() const;

  std::shared_ptr<Embedding> wte;
  std::shared_ptr<ModuleList<Block>> blocks;
  std::shared_ptr<LayerNorm> ln_f;

 private:
  // idx int64 (B, T) (ShapeError) at positions pos0.. within the encoding's table (IndexError) ->
  // the token embedding with the encoding's embed() (B, T, C), before dropout.
  Tensor embed(const Tensor& idx, int64_t pos0) const;
  // The refusals the measurements share (see above); `what` names the caller.
  void check_measurable(const char* what) const;

  GPTConfig cfg_;
  std::shared_ptr<PositionEncoding> pos_;
  std::shared_ptr<Dropout> drop_;
};

}  // namespace posgrad::nn
