// test_replay.cpp — posgrad against PyTorch on the same tiny GPT, per position encoding and per
// RoPE scaling (the llm.c pattern; see tests/support/replay.h and bench/make_replay_fixtures.py):
// from the same initial weights and batch, the first forward's logits and loss, every parameter's
// gradient, and the losses of 10 AdamW steps with clipping must match the PyTorch fixtures.
// Tolerances (float32 on both sides; different summation orders), about 10x the worst error seen
// and far below what a wrong encoding gives (RoPE vs no encoding on these weights differs by 8e-5
// in the logits, 5e-3 relative in the qkv gradient, 1e-3 in the step losses):
//   logits, loss       |d| <= 1e-6 · max(1, max|ref|)
//   gradients          |d| <= 1e-5 · max|ref of that tensor| + 1e-8
//   10 step losses     |d| <= 2e-5 · max(1, |ref|)   (differences compound over the steps)
// The worst errors are printed, one line per variant.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "autograd/ops.h"
#include "autograd/ops/attention.h"
#include "support/replay.h"
#include "train/optim.h"
#include "train/safetensors.h"

using namespace posgrad;
using train::AdamW;
using train::AdamWOptions;
using train::clip_grad_norm;
using train::decay_groups;

#ifndef POSGRAD_TEST_SOURCE_DIR
#define POSGRAD_TEST_SOURCE_DIR ""
#endif

namespace {

struct Worst {
  double value = 0;
  std::string where;
  void see(double v, const std::string& w) {
    if (v > value || !std::isfinite(v)) value = v, where = w;
  }
};

// max |a - b| and max |b| over two tensors of the same shape.
std::pair<double, double> diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  double d = 0, m = 0;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    d = std::max(d, std::fabs(x[i] - y[i]));
    if (!std::isfinite(x[i])) d = INFINITY;
    m = std::max(m, std::fabs(y[i]));
  }
  return {d, m};
}

class Replay : public ::testing::TestWithParam<test::ReplayVariant> {};

TEST_P(Replay, MatchesPyTorch) {
  const test::ReplayVariant& v = GetParam();
  const std::string path = std::string(POSGRAD_TEST_SOURCE_DIR) + "/tests/fixtures/replay/" + v.name + ".safetensors";
  ASSERT_TRUE(std::filesystem::exists(path))
      << "no PyTorch fixture for '" << v.name << "': regenerate with bench/make_replay_fixtures.py (see its header)";
  std::map<std::string, Tensor> fx;
  for (auto& [name, t] : load_safetensors(path).tensors) fx[name] = t;

  Generator init(1234), dropout(1);
  nn::GPT model(test::replay_config(v), init, dropout);
  nn::NamedTensors start;
  for (const auto& [name, t] : fx)
    if (name.rfind("init.", 0) == 0) start.emplace_back(name.substr(5), t);
  model.load_state_dict(start);
  const Tensor x = fx.at("x"), y = fx.at("y");

  // One forward / backward.
  Tensor logits = model.forward(x);
  Tensor loss = cross_entropy(logits, y);
  loss.backward();
  auto [dl, ml] = diff(logits, fx.at("logits"));
  EXPECT_LE(dl, 1e-6 * std::max(1.0, ml)) << v.name << ": logits";
  auto [dloss, mloss] = diff(loss.reshape({1}), fx.at("loss"));
  EXPECT_LE(dloss, 1e-6 * std::max(1.0, mloss)) << v.name << ": loss";
  Worst grad_rel;
  for (const auto& [name, p] : model.named_parameters()) {
    ASSERT_TRUE(fx.count("grad." + name)) << v.name << ": the fixture has no gradient for " << name;
    ASSERT_TRUE(p.grad().defined()) << v.name << ": no gradient reached " << name;
    auto [d, m] = diff(p.grad(), fx.at("grad." + name));
    EXPECT_LE(d, 1e-5 * m + 1e-8) << v.name << ": gradient of " << name << " (max |ref| " << m << ")";
    grad_rel.see(d / std::max(m, 1e-30), name);
  }

  // AdamW steps with clipping, from the same start.
  model.load_state_dict(start);
  for (Tensor p : model.parameters()) p.zero_grad();
  AdamW opt(decay_groups(model.named_parameters(), test::kReplayWeightDecay),
            AdamWOptions(test::kReplayLr).betas(test::kReplayBeta1, test::kReplayBeta2));
  const std::vector<double> ref = fx.at("losses").to_vector();
  ASSERT_EQ(static_cast<int64_t>(ref.size()), test::kReplaySteps);
  double worst_step = 0;
  for (int64_t s = 0; s < test::kReplaySteps; ++s) {
    opt.zero_grad();
    Tensor l = cross_entropy(model.forward(x), y);
    const double got = l.item();
    l.backward();
    clip_grad_norm(model.parameters(), test::kReplayClip);
    opt.step();
    const double d = std::fabs(got - ref[s]);
    worst_step = std::max(worst_step, d);
    EXPECT_LE(d, 2e-5 * std::max(1.0, std::fabs(ref[s]))) << v.name << ": loss before step " << s;
  }
  std::printf("[replay] %-13s logits %.2e  loss %.2e  grad (rel. to tensor max) %.2e [%s]  10-step losses %.2e\n",
              v.name.c_str(), dl, dloss, grad_rel.value, grad_rel.where.c_str(), worst_step);
}

INSTANTIATE_TEST_SUITE_P(All, Replay, ::testing::ValuesIn(test::replay_variants()),
                         [](const auto& info) { return info.param.name; });

// ---- HF transformers' own code (bench/make_hf_fixtures.py, transformers 5.24.0) ----------------------
// Partial rotary through posgrad's RoPE encoding against GPT-NeoX's rotary embedding and
// apply_rotary_pos_emb (neox_hf convention: HF's channel selection, truncation and odd case) and
// against the proportional init (p-RoPE) applied by Gemma 4's apply_rotary_pos_emb; float32 on both
// sides, HF's frequencies and angles in float32, posgrad's in double: |d| <= 2e-6 over |x| <= 0.5.
// Attention sinks against gpt-oss's eager_attention_forward, forward and backward in float64: 1e-12.

std::map<std::string, Tensor> load_hf(const std::string& name, std::map<std::string, std::string>* meta = nullptr) {
  const std::string path = std::string(POSGRAD_TEST_SOURCE_DIR) + "/tests/fixtures/hf/" + name + ".safetensors";
  EXPECT_TRUE(std::filesystem::exists(path)) << "no HF fixture " << path << ": bench/make_hf_fixtures.py";
  SafetensorsFile f = load_safetensors(path);
  if (meta) *meta = f.metadata;
  std::map<std::string, Tensor> out;
  for (auto& [n, t] : f.tensors) out[n] = t;
  return out;
}

class HfPartialRotary : public ::testing::TestWithParam<std::string> {};

TEST_P(HfPartialRotary, RotatedQueriesAndKeysMatchTransformers) {
  std::map<std::string, std::string> meta;
  auto fx = load_hf(GetParam(), &meta);
  const int64_t D = std::stoll(meta.at("head_dim"));
  const Tensor q = fx.at("q"), k = fx.at("k");
  nn::PosEncConfig c;
  c.kind = "rope";
  c.n_embd = D * q.size(1);
  c.n_head = q.size(1);
  c.block_size = q.size(2);
  c.set("rope_fraction", std::stod(meta.at("fraction")));
  c.set("rope_partial", meta.at("convention"));
  const nn::RopeParams p = nn::rope_params(c);
  EXPECT_EQ(p.rotary_dim, std::stoll(meta.at("rotated_width"))) << GetParam() << ": rotated channels";
  Generator g(0);
  auto pe = nn::make_position_encoding(c, g);
  auto [qr, kr] = pe->rotate(0, q, k, 0);
  auto [dq, mq] = diff(qr, fx.at("q_rot"));
  auto [dk, mk] = diff(kr, fx.at("k_rot"));
  EXPECT_LE(dq, 2e-6) << GetParam() << ": rotated q";
  EXPECT_LE(dk, 2e-6) << GetParam() << ": rotated k";
  std::printf("[hf] %-18s rotated width %lld  max |d| q %.2e  k %.2e\n", GetParam().c_str(),
              static_cast<long long>(p.rotary_dim), dq, dk);
}

INSTANTIATE_TEST_SUITE_P(Transformers, HfPartialRotary,
                         ::testing::Values("neox_d64_f0.25", "neox_d64_f0.3_odd", "neox_d100_f0.57", "prope_d64_f0.25",
                                           "prope_d32_f0.75"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(HfReference, GptOssSinksForwardAndBackward) {
  auto fx = load_hf("gpt_oss_sinks");
  for (bool naive : {false, true}) {
    Tensor q = fx.at("q").detach().set_requires_grad(true), k = fx.at("k").detach().set_requires_grad(true),
           v = fx.at("v").detach().set_requires_grad(true), sinks = fx.at("sinks").detach().set_requires_grad(true);
    ScoreModifier m;
    m.sinks = sinks;
    const double scale = 0.5;
    Tensor o = naive ? attention_reference(q, k, v, m, true, scale) : attention(q, k, v, m, true, scale);
    sum(o * fx.at("dout")).backward();
    const char* what = naive ? "reference" : "fused";
    EXPECT_LE(diff(o, fx.at("out")).first, 1e-12) << what << " out";
    EXPECT_LE(diff(q.grad(), fx.at("dq")).first, 1e-12) << what << " dq";
    EXPECT_LE(diff(k.grad(), fx.at("dk")).first, 1e-12) << what << " dk";
    EXPECT_LE(diff(v.grad(), fx.at("dv")).first, 1e-12) << what << " dv";
    EXPECT_LE(diff(sinks.grad(), fx.at("dsinks")).first, 1e-12) << what << " dsinks";
    if (!naive)
      std::printf("[hf] gpt_oss_sinks      max |d| out %.2e  dsinks %.2e\n", diff(o, fx.at("out")).first,
                  diff(sinks.grad(), fx.at("dsinks")).first);
  }
}

// Llama 4's NoPE-layer temperature (HF Llama4TextAttention, attn_temperature_tuning, layer 3 of 4 NoPE):
// the same projections, then posgrad's hybrid encoding on that layer (iRoPE, K = 4) scaling the
// queries by tau(p) = 1 + alpha ln(floor((p + 1) / F) + 1), the fused attention and the output
// projection; forward and the gradient into the layer's input, float64, T = 40 past F = 16 and 32.
TEST(HfReference, Llama4NopeLayerTemperatureForwardAndBackward) {
  std::map<std::string, std::string> meta;
  auto fx = load_hf("llama4_nope_temperature", &meta);
  const Tensor x = fx.at("x").detach().set_requires_grad(true);
  const int64_t T = x.size(1), C = x.size(2), H = std::stoll(meta.at("n_head")), D = C / H;
  nn::PosEncConfig c;
  c.kind = "hybrid";
  c.n_embd = C;
  c.n_head = H;
  c.n_layer = std::stoll(meta.at("n_layer"));
  c.block_size = T;
  c.dtype = DType::Float64;
  c.set("hybrid_temp_scale", std::stod(meta.at("attn_scale")));
  c.set("hybrid_temp_floor_scale", std::stod(meta.at("floor_scale")));
  Generator g(0);
  auto pe = nn::make_position_encoding(c, g);
  const Tensor x2 = x.reshape({T, C});
  auto heads = [&](const char* w) { return matmul(x2, fx.at(w).t()).reshape({1, T, H, D}).permute({0, 2, 1, 3}); };
  const int64_t layer = std::stoll(meta.at("layer"));
  auto [q, k] = pe->rotate(layer, heads("wq"), heads("wk"), 0);
  const Tensor o = attention(q, k, heads("wv"), ScoreModifier{}, true, 1.0 / std::sqrt(double(D)));
  const Tensor out = matmul(o.permute({0, 2, 1, 3}).reshape({T, C}), fx.at("wo").t()).reshape({1, T, C});
  sum(out * fx.at("dout")).backward();
  const double d_out = diff(out, fx.at("out")).first, d_dx = diff(x.grad(), fx.at("dx")).first;
  // HF computes tau in float32 (positions.float()), posgrad in double: tau differs by up to float32's
  // rounding, 6e-8 relative, which reaches out and dx at about 1e-9 (measured 4.4e-10 and 8.7e-10).
  EXPECT_LE(d_out, 5e-9) << "out";
  EXPECT_LE(d_dx, 5e-9) << "dx";
  // The temperature matters here: without it the output differs by far more than the tolerance.
  c.set("hybrid_temperature", false);
  auto plain = nn::make_position_encoding(c, g);
  NoGradGuard ng;
  auto [q0, k0] = plain->rotate(layer, heads("wq"), heads("wk"), 0);
  const Tensor o0 = attention(q0, k0, heads("wv"), ScoreModifier{}, true, 1.0 / std::sqrt(double(D)));
  EXPECT_GT(
      diff(matmul(o0.permute({0, 2, 1, 3}).reshape({T, C}), fx.at("wo").t()).reshape({1, T, C}), fx.at("out")).first,
      1e-6);
  std::printf("[hf] llama4_nope_temp   max |d| out %.2e  dx %.2e\n", d_out, d_dx);
}

}  // namespace
