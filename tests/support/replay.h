// replay.h — the PyTorch replay (the llm.c pattern): a tiny GPT per position encoding (and RoPE
// with each scaling) whose initial weights and batch posgrad exports (tests/fixtures/replay_export),
// which bench/make_replay_fixtures.py runs in PyTorch — one forward/backward, then 10 AdamW steps
// with gradient clipping — writing the expected logits, loss, gradients and losses as safetensors
// fixtures under tests/fixtures/replay/. test_replay.cpp replays them in posgrad. Shared here so that
// the exporter and the test build exactly the same models.
#pragma once

#include <string>
#include <vector>

#include "nn/gpt.h"

namespace posgrad::test {

struct ReplayVariant {
  std::string name;  // fixture file stem
  std::string kind;  // position encoding
  std::vector<std::pair<std::string, opt::Value>> options;
  int64_t T = 8;       // sequence length of the batch (RoPE dynamic: past the training length)
  bool sinks = false;  // learnable attention sinks in every layer (GPTConfig::attention_sinks)
};

// Model: V 24, C 16, H 2 (D 8), 2 layers, training length 8, batch 2, no dropout.
constexpr int64_t kReplayVocab = 24, kReplayEmbd = 16, kReplayHeads = 2, kReplayLayers = 2, kReplayBlock = 8,
                  kReplayBatch = 2, kReplaySteps = 10;
// Optimiser of the 10 steps: AdamW lr 1e-2, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on
// matrices only; gradient norm clipped to 1.0.
constexpr double kReplayLr = 1e-2, kReplayBeta1 = 0.9, kReplayBeta2 = 0.95, kReplayWeightDecay = 0.1, kReplayClip = 1.0;

inline std::vector<ReplayVariant> replay_variants() {
  using S = std::string;
  std::vector<ReplayVariant> v;
  for (const auto& kind : nn::position_encoding_kinds()) v.push_back({kind, kind, {}, kReplayBlock});
  v.push_back({"rope_linear", "rope", {{"rope_scaling", S("linear")}, {"rope_scaling_factor", 2.0}}, kReplayBlock});
  v.push_back(
      {"rope_dynamic", "rope", {{"rope_scaling", S("dynamic")}, {"rope_scaling_factor", 2.0}}, 2 * kReplayBlock});
  v.push_back({"rope_yarn", "rope", {{"rope_scaling", S("yarn")}, {"rope_scaling_factor", 4.0}}, kReplayBlock});
  v.push_back({"rope_llama3", "rope", {{"rope_scaling", S("llama3")}, {"rope_scaling_factor", 8.0}}, kReplayBlock});
  // Partial rotary (D = 8): NeoX f = 0.5 (4 channels, omega = b^(-2k/4)); HF's odd case f = 0.375
  // (int(3.0) = 3: 4 channels, denominator 3); p-RoPE f = 0.5 (2 of 4 full-head pairs kept).
  v.push_back({"rope_partial_neox", "rope", {{"rope_fraction", 0.5}}, kReplayBlock});
  v.push_back(
      {"rope_partial_neox_hf", "rope", {{"rope_fraction", 0.375}, {"rope_partial", S("neox_hf")}}, kReplayBlock});
  v.push_back({"rope_prope", "rope", {{"rope_fraction", 0.5}, {"rope_partial", S("prope")}}, kReplayBlock});
  // xPos with a scale base small enough that the decay matters at T = 8 (the default 512 is ~RoPE
  // there), in both layouts.
  // Hybrid with its NoPE layer in the 2-layer model (K = 2: R N) and the temperature past F = 2.
  v.push_back({"hybrid_rn", "hybrid", {{"hybrid_nope_interval", int64_t{2}}}, kReplayBlock});
  v.push_back({"xpos_b4", "xpos", {{"xpos_scale_base", 4.0}}, kReplayBlock});
  v.push_back({"xpos_b4_half", "xpos", {{"xpos_scale_base", 4.0}, {"xpos_interleaved", false}}, kReplayBlock});
  // CoPE with P = 4 < T: counted positions past 3 share the table's last entry (the clamp acts).
  v.push_back({"cope_p4", "cope", {{"cope_positions", int64_t{4}}}, kReplayBlock});
  // Attention sinks with no encoding, a rotation and a distance bias.
  v.push_back({"none_sinks", "none", {}, kReplayBlock, true});
  v.push_back({"rope_sinks", "rope", {}, kReplayBlock, true});
  v.push_back({"alibi_sinks", "alibi", {}, kReplayBlock, true});
  return v;
}

inline nn::GPTConfig replay_config(const ReplayVariant& v) {
  nn::GPTConfig c;
  c.vocab_size = kReplayVocab;
  c.block_size = kReplayBlock;
  c.n_layer = kReplayLayers;
  c.n_head = kReplayHeads;
  c.n_embd = kReplayEmbd;
  c.dropout = 0.0;
  c.attention_sinks = v.sinks;
  c.pos.kind = v.kind;
  for (const auto& [name, value] : v.options) c.pos.set(name, value);
  return c;
}

}  // namespace posgrad::test
