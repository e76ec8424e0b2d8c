// test_attention.cpp — the fused attention op against the naive materialising reference (forward
// and every input's gradient, double and float32) for every score modifier, causal and
// bidirectional, on odd shapes including multi-tile ones (T = 130 > the 64-row tile); query offsets
// with fully masked rows; the causal mask equal, bit for bit, to a -inf Dense bias; bit-identical
// results for 1 and 2 threads; memory that grows with T, not
// T^2; argument errors; the attention layer with every position encoding (fused == naive), the
// attention-by-distance diagnostic, and per-token positions (randomized positions: 0..T-1 equals
// the plain path bit for bit, fused == reference with gaps, bad positions named). Gradchecks
// against finite differences are in the op registry (autograd/registry_attention.cpp, swept by
// test_op_registry).
#include <gtest/gtest.h>
#include <omp.h>
#ifdef __SSE2__
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "autograd/ops.h"
#include "autograd/ops/attention.h"
#include "nn/attention.h"
#include "nn/posenc/position_encoding.h"
#include "support/posenc_config.h"
#include "support/test_util.h"
#include "tensor/storage.h"

using namespace posgrad;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector(), y = b.to_vector();
  EXPECT_EQ(x.size(), y.size());
  double m = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

double max_abs(const Tensor& a) {
  double m = 0;
  for (double v : a.to_vector()) m = std::max(m, std::fabs(v));
  return m;
}

bool all_finite(const Tensor& a) {
  for (double v : a.to_vector())
    if (!std::isfinite(v)) return false;
  return true;
}

// The modifier of a case: the three shapes the kernels know, and the encodings that produce them.
enum class Mod { None, Distance, T5, ALiBi, DeBERTa };

struct Case {
  std::string name;
  Mod kind;
  bool causal;
  int64_t B, H, T, D;
  int64_t q_offset = 0;
};

// Inputs and modifier of a case; `extra` holds the modifier's differentiable tensors.
struct Built {
  TensorList inputs;  // q, k, v, then the bias, T5's table or kr / qr
  ScoreModifier mod;
  double scale;
};

Built build(const Case& c, DType dt, uint64_t seed) {
  Generator g(seed);
  auto in = [&](const Shape& s) { return randn(s, g, dt).set_requires_grad(true); };
  Built b;
  b.inputs = {in({c.B, c.H, c.T, c.D}), in({c.B, c.H, c.T, c.D}), in({c.B, c.H, c.T, c.D})};
  b.scale = 1.0 / std::sqrt(double(c.D));
  switch (c.kind) {
    case Mod::None: break;
    case Mod::Distance:  // any (H, 2T - 1) tensor: the kernel's bias gradient is checked directly
      b.inputs.push_back(in({c.H, 2 * c.T - 1}));
      b.mod.kind = ScoreBias::Distance;
      b.mod.bias_by_distance = b.inputs[3];
      break;
    case Mod::T5:
      b.inputs.push_back(in({8, c.H}));
      b.mod = nn::t5_score_modifier(b.inputs[3], !c.causal, 8, 40, c.T, c.T, c.q_offset);
      break;
    case Mod::ALiBi:
      b.mod.kind = ScoreBias::Distance;
      b.mod.bias_by_distance =
          nn::alibi_bias_by_distance(nn::alibi_slopes(c.H), c.T, c.T, c.q_offset, dt, Device::cpu());
      break;
    case Mod::DeBERTa:
      b.inputs.push_back(in({12, c.H, c.D}));
      b.inputs.push_back(in({12, c.H, c.D}));
      b.mod.kind = ScoreBias::ContentPosition;
      b.mod.kr = b.inputs[3];
      b.mod.qr = b.inputs[4];
      b.mod.bucket = [](int64_t r) { return nn::deberta_row(-r, 6, 40); };
      b.scale = 1.0 / std::sqrt(3.0 * double(c.D));
      break;
  }
  return b;
}

// Runs fused or naive forward + backward with a fixed upstream gradient; returns {out, grads...}.
TensorList run(const Case& c, DType dt, bool naive) {
  Built b = build(c, dt, 17);
  Tensor y = naive ? attention_reference(b.inputs[0], b.inputs[1], b.inputs[2], b.mod, c.causal, b.scale, c.q_offset)
                   : attention(b.inputs[0], b.inputs[1], b.inputs[2], b.mod, c.causal, b.scale, c.q_offset);
  Generator g(99);
  y.backward(randn(y.shape(), g, dt));
  TensorList out{y.detach()};
  for (auto& t : b.inputs) out.push_back(t.grad());
  return out;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class FusedVsNaive : public ::testing::TestWithParam<Case> {};

TEST_P(FusedVsNaive, ForwardAndGradientsMatch) {
  const Case& c = GetParam();
  const char* names[] = {"out", "dq", "dk", "dv", "dbias/dtable/dkr", "dqr"};
  for (DType dt : {DType::Float64, DType::Float32}) {
    TensorList f = run(c, dt, false), n = run(c, dt, true);
    ASSERT_EQ(f.size(), n.size());
    const double tol = dt == DType::Float64 ? 1e-10 : 2e-5;
    for (size_t i = 0; i < f.size(); ++i) {
      ASSERT_TRUE(f[i].defined() && n[i].defined()) << c.name << " " << names[i];
      EXPECT_TRUE(all_finite(f[i])) << c.name << " " << names[i];
      EXPECT_LE(max_abs_diff(f[i], n[i]), tol * std::max(1.0, max_abs(n[i])))
          << c.name << " " << names[i] << " " << dtype_name(dt);
    }
  }
}

std::vector<Case> cases() {
  std::vector<Case> v;
  const std::pair<Mod, const char*> kinds[] = {{Mod::None, "none"},
                                               {Mod::Distance, "distance"},
                                               {Mod::T5, "t5"},
                                               {Mod::ALiBi, "alibi"},
                                               {Mod::DeBERTa, "deberta"}};
  const int64_t shapes[][4] = {{1, 1, 1, 3}, {2, 3, 7, 5}, {1, 3, 33, 4}, {1, 1, 33, 8}, {2, 3, 130, 7}};
  for (auto [kind, kname] : kinds)
    for (bool causal : {true, false})
      for (const auto& s : shapes) {
        Case c{std::string(kname) + (causal ? "_causal_" : "_bidir_") + std::to_string(s[0]) + "x" +
                   std::to_string(s[1]) + "x" + std::to_string(s[2]) + "x" + std::to_string(s[3]),
               kind,
               causal,
               s[0],
               s[1],
               s[2],
               s[3]};
        v.push_back(c);
      }
  // Query offsets: negative leaves the first rows without keys (output and gradients 0).
  v.push_back({"none_causal_offset_m5", Mod::None, true, 1, 2, 70, 4, -5});
  v.push_back({"distance_causal_offset_m70", Mod::Distance, true, 1, 2, 130, 4, -70});
  v.push_back({"t5_causal_offset_m70", Mod::T5, true, 1, 2, 130, 4, -70});
  v.push_back({"alibi_causal_offset_3", Mod::ALiBi, true, 1, 3, 7, 4, 3});
  v.push_back({"deberta_causal_offset_m2", Mod::DeBERTa, true, 2, 1, 7, 5, -2});
  return v;
}

INSTANTIATE_TEST_SUITE_P(All, FusedVsNaive, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// The bytes of t (contiguous copy), for comparisons that tell -0 from +0 and NaN payloads apart.
std::vector<unsigned char> bytes_of(const Tensor& t) {
  const Tensor c = t.detach().contiguous();
  const auto* p = static_cast<const unsigned char*>(c.raw_data());
  return std::vector<unsigned char>(p, p + c.numel() * static_cast<int64_t>(dtype_size(c.dtype())));
}

// On the CPU split_heads returns views of the (B, T, 3C) projection, and the fused attention reads q,
// k, v through their strides, writes its output as (B, T, H, D) memory (so merging the heads copies
// nothing) and accumulates dq, dk, dv into the thirds of one (B, T, 3C) buffer, which split_heads'
// backward passes on as x's gradient. Against the same graph on dense copies of the heads: the
// merged output and the gradients of x and of the modifier's tensors are the same bytes, for every
// modifier kind, with sinks, causal and bidirectional, one tile and several (T = 130), float and double.
TEST(Attention, SplitHeadViewsGiveTheBytesOfDenseHeads) {
  for (const DType dt : {DType::Float64, DType::Float32})
    for (const Mod kind : {Mod::None, Mod::Distance, Mod::T5, Mod::ALiBi, Mod::DeBERTa})
      for (const bool causal : {true, false})
        for (const int64_t T : {int64_t{13}, int64_t{130}}) {
          const int64_t B = 2, H = 3, D = 8, C = H * D;
          const Case c{"", kind, causal, B, H, T, D};
          const bool sinks = kind == Mod::None || kind == Mod::T5;
          auto once = [&](bool dense) {
            Built b = build(c, dt, 41);  // its q, k, v are unused: the heads come from qkv
            Generator g(43);
            Tensor qkv = randn({B, T, 3 * C}, g, dt).set_requires_grad(true);
            if (sinks) {
              b.inputs.push_back(randn({H}, g, dt).set_requires_grad(true));
              b.mod.sinks = b.inputs.back();
            }
            TensorList parts = split_heads(qkv, 3, H);
            EXPECT_TRUE(parts[1].shares_storage(qkv));
            if (dense)
              for (auto& part : parts) part = part.contiguous();
            const Tensor o = attention(parts[0], parts[1], parts[2], b.mod, causal, b.scale);
            const Tensor y = o.permute({0, 2, 1, 3}).reshape({B, T, C});  // as the attention layer merges
            Generator gy(47);
            y.backward(randn(y.shape(), gy, dt));
            std::vector<std::vector<unsigned char>> out{bytes_of(y), bytes_of(qkv.grad())};
            for (size_t i = 3; i < b.inputs.size(); ++i) out.push_back(bytes_of(b.inputs[i].grad()));
            return out;
          };
          const auto strided = once(false), dense = once(true);
          ASSERT_EQ(strided.size(), dense.size());
          for (size_t i = 0; i < strided.size(); ++i)
            EXPECT_TRUE(strided[i] == dense[i])
                << (i == 0   ? "output"
                    : i == 1 ? "d qkv"
                             : "modifier gradient")
                << " differs: kind " << static_cast<int>(kind) << (causal ? " causal" : " bidirectional") << " T=" << T
                << (dt == DType::Float32 ? " float" : " double");
        }
}

// RoPE on the CPU reads split_heads' (B, H, T, D) views of the (B, T, 3C) projection where they are
// (rope_forward_strided) and writes its gradient without a zero fill first (rope_backward_overwrite):
// the output and the projection's gradient are the bytes of the same graph on a dense copy of the head,
// rotate_half and interleaved, whole and partial rotary, float and double.
TEST(Attention, RopeOnSplitHeadViewsGivesTheBytesOfDenseHeads) {
  for (const DType dt : {DType::Float64, DType::Float32})
    for (const bool interleaved : {false, true})
      for (const int64_t dr : {int64_t{8}, int64_t{4}}) {
        const int64_t B = 2, H = 3, T = 11, D = 8, C = H * D;
        auto once = [&](bool dense) {
          Generator g(61);
          Tensor qkv = randn({B, T, 3 * C}, g, dt).set_requires_grad(true);
          const Tensor cos = randn({T, dr / 2}, g, dt), sin = randn({T, dr / 2}, g, dt);
          TensorList parts = split_heads(qkv, 3, H);
          Tensor k = parts[1];
          EXPECT_FALSE(k.is_contiguous());
          if (dense) k = k.contiguous();
          const Tensor y = rope(k, cos, sin, interleaved);
          Generator gy(67);
          y.backward(randn(y.shape(), gy, dt));
          return std::vector<std::vector<unsigned char>>{bytes_of(y), bytes_of(qkv.grad())};
        };
        const auto strided = once(false), dense = once(true);
        EXPECT_TRUE(strided[0] == dense[0])
            << "output" << (interleaved ? " interleaved" : " rotate_half") << " dr=" << dr;
        EXPECT_TRUE(strided[1] == dense[1])
            << "gradient" << (interleaved ? " interleaved" : " rotate_half") << " dr=" << dr;
      }
}

// The CPU backward with DeBERTa's terms reads the c2p / p2c products (and gathered table rows) that the
// forward left in its scratch (`prepared`) instead of computing them again: every gradient has the
// bytes of the backward that computes them itself, causal and bidirectional, one tile and several.
TEST(Attention, ContentPositionBackwardReusingTheForwardsProductsGivesTheSameBytes) {
  namespace k = kernels;
  for (const bool causal : {true, false})
    for (const int64_t T : {int64_t{13}, int64_t{130}}) {
      const int64_t B = 2, H = 3, D = 8, R = 12;
      Generator g(53);
      auto vec = [&](int64_t n) { return randn({n}, g, DType::Float32).to_float_vector(); };
      const auto q = vec(B * H * T * D), kk = vec(B * H * T * D), v = vec(B * H * T * D), dout = vec(B * H * T * D);
      const auto kr = vec(R * H * D), qr = vec(R * H * D);
      std::vector<int64_t> diag_u(2 * T - 1), rows;
      std::map<int64_t, int64_t> compact;
      for (int64_t d = 0; d < 2 * T - 1; ++d) compact[nn::deberta_row(-(d - (T - 1)), 6, 40)] = 0;
      for (auto& [row, u] : compact) u = static_cast<int64_t>(rows.size()), rows.push_back(row);
      for (int64_t d = 0; d < 2 * T - 1; ++d) diag_u[d] = compact[nn::deberta_row(-(d - (T - 1)), 6, 40)];
      const int64_t U = static_cast<int64_t>(rows.size());
      const float scale = 0.2f;
      const k::cpu::HeadStrides dense{H * T * D, T * D, D};
      const k::cpu::AttentionStrides st{dense, dense, dense, dense, dense, dense, dense, dense};
      std::vector<float> o(B * H * T * D), stats(B * H * T * 2);
      std::vector<float> fwd(
          std::max<int64_t>(1, k::cpu::attention_scratch_elems(ScoreBias::ContentPosition, 0, B, H, T, T, D, U)));
      k::cpu::attention_forward_strided<float>(o.data(), stats.data(), fwd.data(), q.data(), kk.data(), v.data(),
                                               nullptr, kr.data(), qr.data(), nullptr, diag_u.data(), rows.data(),
                                               nullptr, nullptr, B, H, T, T, D, U, 0, ScoreBias::ContentPosition,
                                               causal, scale, st);
      auto backward = [&](const float* prepared) {
        std::vector<float> bwd(k::cpu::attention_scratch_elems(ScoreBias::ContentPosition, 1, B, H, T, T, D, U));
        std::vector<std::vector<float>> gr{std::vector<float>(q.size()), std::vector<float>(q.size()),
                                           std::vector<float>(q.size()), std::vector<float>(kr.size()),
                                           std::vector<float>(qr.size())};
        k::cpu::attention_backward_strided<float>(gr[0].data(), gr[1].data(), gr[2].data(), nullptr, gr[3].data(),
                                                  gr[4].data(), nullptr, bwd.data(), dout.data(), q.data(), kk.data(),
                                                  v.data(), o.data(), stats.data(), nullptr, kr.data(), qr.data(),
                                                  nullptr, diag_u.data(), rows.data(), nullptr, nullptr, B, H, T, T, D,
                                                  U, 0, ScoreBias::ContentPosition, causal, scale, st, prepared);
        return gr;
      };
      const auto reused = backward(fwd.data()), recomputed = backward(nullptr);
      for (size_t i = 0; i < reused.size(); ++i)
        EXPECT_EQ(std::memcmp(reused[i].data(), recomputed[i].data(), reused[i].size() * sizeof(float)), 0)
            << "gradient " << i << (causal ? " causal" : " bidirectional") << " T=" << T;
    }
}

// The CPU backward with overwrite = true (what the autograd op passes) writes dq, dk, dv instead of
// accumulating into them: on buffers full of NaN it gives the bytes of the accumulating call on
// zero-filled buffers -- keys that no query sees (causal, Tq < Tk with an offset) included -- and
// leaves the memory between the rows (row stride > D, as in the thirds of a (B, T, 3C) buffer) alone.
TEST(Attention, BackwardOverwritingItsGradientsGivesTheBytesOfAccumulatingIntoZeros) {
  namespace k = kernels;
  struct Shape3 {
    int64_t Tq, Tk, q_offset;
    bool causal;
  };
  for (const Shape3 sh : {Shape3{13, 13, 0, true}, Shape3{130, 130, 0, true}, Shape3{70, 70, 0, false},
                          Shape3{9, 140, 131, true}, Shape3{9, 140, 20, true}})
    for (const ScoreBias kind : {ScoreBias::None, ScoreBias::Distance}) {
      const int64_t B = 2, H = 3, D = 8, pad = 5, row = D + pad;  // rows `pad` elements apart
      const int64_t Tq = sh.Tq, Tk = sh.Tk;
      Generator g(59);
      auto vec = [&](int64_t n) { return randn({n}, g, DType::Float32).to_float_vector(); };
      const auto q = vec(B * H * Tq * D), kk = vec(B * H * Tk * D), v = vec(B * H * Tk * D);
      const auto dout = vec(B * H * Tq * D), bias = vec(H * (Tq + Tk - 1));
      const float* bp = kind == ScoreBias::Distance ? bias.data() : nullptr;
      const float scale = 0.3f;
      const k::cpu::HeadStrides dq_s{H * Tq * D, Tq * D, D}, dk_s{H * Tk * D, Tk * D, D};
      const k::cpu::HeadStrides gq{H * Tq * row, Tq * row, row}, gk{H * Tk * row, Tk * row, row};
      const k::cpu::AttentionStrides st{dq_s, dk_s, dk_s, dq_s, dq_s, gq, gk, gk};
      std::vector<float> o(q.size()), stats(B * H * Tq * 2);
      std::vector<float> fwd(std::max<int64_t>(1, k::cpu::attention_scratch_elems(kind, 0, B, H, Tq, Tk, D, 0)));
      k::cpu::attention_forward_strided<float>(o.data(), stats.data(), fwd.data(), q.data(), kk.data(), v.data(), bp,
                                               nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, B, H, Tq,
                                               Tk, D, 0, sh.q_offset, kind, sh.causal, scale,
                                               {dq_s, dk_s, dk_s, dq_s, dq_s, dq_s, dk_s, dk_s});
      auto backward = [&](float fill, bool overwrite) {
        std::vector<float> bwd(std::max<int64_t>(1, k::cpu::attention_scratch_elems(kind, 1, B, H, Tq, Tk, D, 0)));
        std::vector<std::vector<float>> gr{
            std::vector<float>(B * H * Tq * row, fill), std::vector<float>(B * H * Tk * row, fill),
            std::vector<float>(B * H * Tk * row, fill), std::vector<float>(bias.size(), 0.0f)};
        for (auto* t : {&gr[0], &gr[1], &gr[2]})  // the gaps between rows hold a sentinel
          for (size_t i = 0; i < t->size(); ++i)
            if (static_cast<int64_t>(i) % row >= D) (*t)[i] = 7.0f;
        k::cpu::attention_backward_strided<float>(gr[0].data(), gr[1].data(), gr[2].data(), bp ? gr[3].data() : nullptr,
                                                  nullptr, nullptr, nullptr, bwd.data(), dout.data(), q.data(),
                                                  kk.data(), v.data(), o.data(), stats.data(), bp, nullptr, nullptr,
                                                  nullptr, nullptr, nullptr, nullptr, nullptr, B, H, Tq, Tk, D, 0,
                                                  sh.q_offset, kind, sh.causal, scale, st, nullptr, overwrite);
        return gr;
      };
      const auto written = backward(std::numeric_limits<float>::quiet_NaN(), true), summed = backward(0.0f, false);
      const std::string what = std::string(kind == ScoreBias::None ? "none" : "distance") +
                               " Tq=" + std::to_string(Tq) + " Tk=" + std::to_string(Tk) + " offset " +
                               std::to_string(sh.q_offset) + (sh.causal ? " causal" : " bidirectional");
      for (size_t i = 0; i < written.size(); ++i)
        EXPECT_EQ(std::memcmp(written[i].data(), summed[i].data(), written[i].size() * sizeof(float)), 0)
            << "gradient " << i << ": " << what;
      for (size_t i = 0; i < 3; ++i)
        for (size_t e = 0; e < written[i].size(); ++e)
          if (static_cast<int64_t>(e) % row >= D) ASSERT_EQ(written[i][e], 7.0f) << "gap overwritten: " << what;
      // The test must see some all-zero gradient rows where no query sees a key (offset 20: keys 29..139).
      if (sh.q_offset == 20 && sh.causal) EXPECT_EQ(written[1][(Tk - 1) * row], 0.0f) << what;
    }
}

TEST(Attention, FullyMaskedRowsAreZeroNotNaN) {
  Case c{"masked", Mod::DeBERTa, true, 1, 2, 9, 4, -4};
  TensorList f = run(c, DType::Float64, false);
  auto out = f[0].to_vector(), dq = f[1].to_vector();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 4; ++i)  // rows 0..3 see no key (i - 4 < 0)
      for (int64_t e = 0; e < 4; ++e) {
        EXPECT_EQ(out[((h * 9) + i) * 4 + e], 0.0);
        EXPECT_EQ(dq[((h * 9) + i) * 4 + e], 0.0);
      }
  for (const auto& t : f) EXPECT_TRUE(all_finite(t));
}

// ---- learnable attention sinks (SPEC-positions-2 §5, test vector §10.5) ---------------------------

// gen(shape, s) of SPEC-positions-2 §0.1 for (B, H, T, D): 0.5 sin(1 + s + 0.7 b + 1.3 h + 0.37 t + 0.91 e).
Tensor gen4(const Shape& sh, double s, double mul = 1.0) {
  std::vector<double> v;
  for (int64_t b = 0; b < sh[0]; ++b)
    for (int64_t h = 0; h < sh[1]; ++h)
      for (int64_t t = 0; t < sh[2]; ++t)
        for (int64_t e = 0; e < sh[3]; ++e)
          v.push_back(mul * 0.5 * std::sin(1.0 + s + 0.7 * b + 1.3 * h + 0.37 * t + 0.91 * e));
  return Tensor::from_vector(v, sh, DType::Float64);
}

TEST(AttentionSinks, SpecTestVector) {
  const Shape sh{1, 2, 4, 4};
  for (bool naive : {false, true}) {
    Tensor q = gen4(sh, 5.0, 2.0), k = gen4(sh, 6.0, 2.0), v = gen4(sh, 7.0);
    Tensor sinks = Tensor::from_vector({0.5, -1.0}, {2}, DType::Float64).set_requires_grad(true);
    ScoreModifier m;
    m.sinks = sinks;
    Tensor o = naive ? attention_reference(q, k, v, m, true, 0.5) : attention(q, k, v, m, true, 0.5);
    const auto ov = o.to_vector();
    const double o_h0[4][4] = {{0.2336225361, 0.1162592955, -0.0909152393, -0.2278569788},
                               {0.3180350603, 0.1150613289, -0.1767982572, -0.3320796867},
                               {0.3352761884, 0.0694246828, -0.2500579804, -0.3763687281},
                               {0.3103318494, 0.0018703764, -0.3080359783, -0.3799819211}};
    for (int i = 0; i < 4; ++i)
      for (int e = 0; e < 4; ++e)
        EXPECT_NEAR(ov[i * 4 + e], o_h0[i][e], 1e-10) << naive << " O[0," << i << "," << e << "]";
    sum(o * gen4(sh, 8.0)).backward();
    const auto g = sinks.grad().to_vector();
    EXPECT_NEAR(g[0], -0.1194318555, 1e-10) << (naive ? "reference" : "fused");
    EXPECT_NEAR(g[1], -0.0371386589, 1e-10) << (naive ? "reference" : "fused");
  }
  // The sink mass of head 0, row 0: with one visible key, P = 0.47227086, P_sink = 0.52772914;
  // o_0 = P v_0.
  Tensor q = gen4(sh, 5.0, 2.0), k = gen4(sh, 6.0, 2.0), v = gen4(sh, 7.0);
  ScoreModifier m;
  m.sinks = Tensor::from_vector({0.5, -1.0}, {2}, DType::Float64);
  const auto o = attention(q, k, v, m, true, 0.5).to_vector(), vv = v.to_vector();
  EXPECT_NEAR(o[0] / vv[0], 0.47227086, 1e-8);
}

// The sink gradient is reduced in a fixed order: one and two threads give the same bits.
TEST(AttentionSinks, BitIdenticalForOneAndTwoThreads) {
  auto run_sinks = [] {
    Generator g(9);
    Tensor q = randn({2, 3, 150, 16}, g).set_requires_grad(true), k = randn({2, 3, 150, 16}, g).set_requires_grad(true),
           v = randn({2, 3, 150, 16}, g).set_requires_grad(true);
    Tensor sinks = randn({3}, g).set_requires_grad(true);
    ScoreModifier m;
    m.sinks = sinks;
    Tensor o = attention(q, k, v, m, true, 0.25);
    o.backward(randn(o.shape(), g));
    return TensorList{o.detach(), q.grad(), k.grad(), v.grad(), sinks.grad()};
  };
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  TensorList one = run_sinks();
  omp_set_num_threads(2);
  TensorList two = run_sinks();
  omp_set_num_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(max_abs_diff(one[i], two[i]), 0.0) << "tensor " << i;
}

TEST(AttentionSinks, LayerParameterAndModel) {
  Generator g0(1), g1(1);
  nn::CausalSelfAttention plain(12, 3, true, g0), with(12, 3, true, g1, 0.02, DType::Float32, true);
  std::map<std::string, Tensor> pp, pw;
  for (auto& [n, t] : plain.named_parameters()) pp[n] = t;
  for (auto& [n, t] : with.named_parameters()) pw[n] = t;
  ASSERT_EQ(pw.size(), pp.size() + 1);
  ASSERT_TRUE(pw.count("sinks"));
  EXPECT_EQ(pw["sinks"].shape(), (Shape{3}));
  for (auto& [n, t] : pp)  // the sinks are drawn after everything else
    EXPECT_EQ(t.to_vector(), pw.at(n).to_vector()) << n;
  for (double s : pw["sinks"].to_vector()) EXPECT_LT(std::fabs(s), 0.1);  // N(0, 0.02^2)
  // Every encoding with sinks: fused and naive agree on outputs and every gradient, the sinks' included.
  for (const std::string& kind : nn::position_encoding_kinds()) {
    Generator gen(3);
    auto pe = nn::make_position_encoding(test::small_posenc_config(kind, true, 1), gen);
    nn::CausalSelfAttention l(12, 3, true, gen, 0.3, DType::Float64, true);
    nn::assign_data(l.sinks, Tensor::from_vector({1.5, -0.5, 0.25}, {3}, DType::Float64));
    Generator gx(4);
    Tensor x0 = randn({2, 9, 12}, gx, DType::Float64);
    auto go = [&](bool naive) {
      l.naive = naive;
      l.zero_grad();
      pe->zero_grad();
      Tensor y = l.forward(pe->embed(x0, 1), *pe, 0, 1);
      Generator gr(8);
      y.backward(randn(y.shape(), gr, DType::Float64));
      return std::make_pair(y.detach(), l.sinks.grad());
    };
    auto [yf, gf] = go(false);
    auto [yn, gn] = go(true);
    EXPECT_LE(max_abs_diff(yf, yn), 1e-12) << kind;
    ASSERT_TRUE(gf.defined() && gn.defined()) << kind;
    EXPECT_LE(max_abs_diff(gf, gn), 1e-12) << kind;
    EXPECT_GT(max_abs(gf), 1e-6) << kind;
  }
}

// Very peaked softmax rows (scores spanning hundreds): float32 fused (whose exp flushes arguments
// below -87.3 to 0) against the double reference.
TEST(Attention, SharpScoresFloat32) {
  for (Mod kind : {Mod::None, Mod::ALiBi, Mod::T5}) {
    Case c{"sharp", kind, true, 1, 3, 100, 8};
    Built b = build(c, DType::Float64, 9);
    const Tensor q = (b.inputs[0] * 40.0).detach(), k = b.inputs[1].detach(), v = b.inputs[2].detach();
    ScoreModifier m64 = b.mod, m32 = b.mod;
    if (kind != Mod::None) {  // T5: a table scaled by 30 (biases in the tens)
      m64.bias_by_distance = (b.mod.bias_by_distance * (kind == Mod::T5 ? 30.0 : 1.0)).detach();
      m32.bias_by_distance = m64.bias_by_distance.to(DType::Float32);
    }
    const Tensor ref = attention_reference(q, k, v, m64, true, b.scale);
    const Tensor f = attention(q.to(DType::Float32), k.to(DType::Float32), v.to(DType::Float32), m32, true, b.scale);
    EXPECT_LE(max_abs_diff(f, ref), 1e-4 * std::max(1.0, max_abs(ref))) << int(kind);
    EXPECT_TRUE(all_finite(f));
  }
}

TEST(Attention, BitIdenticalForOneAndTwoThreads) {
  for (Mod kind : {Mod::Distance, Mod::T5, Mod::DeBERTa, Mod::ALiBi}) {
    Case c{"det", kind, true, 2, 3, 150, 16};
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    TensorList one = run(c, DType::Float32, false);
    omp_set_num_threads(2);
    TensorList two = run(c, DType::Float32, false);
    omp_set_num_threads(saved);
    for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(max_abs_diff(one[i], two[i]), 0.0) << "tensor " << i;
  }
}

// The causal mask is exactly a bias of -inf on the hidden pairs: the causal kernels' output and
// gradients are the bits of the bidirectional kernels given a Dense bias of -inf there and 0 elsewhere
// (a Distance bias of the case folded into it, so each score gets one addition either way). This pins
// down that the causal path neither reads hidden keys into a visible sum nor drops a visible term,
// whatever its tiles skip. Shapes: one 64 x 64 tile, a partial tile, several tiles, and a query offset
// (Tq != Tk, keys j <= i + offset).
template <typename T>
void expect_causal_equals_masked_bidirectional(DType dt, int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D,
                                               int64_t q_offset, bool distance) {
  Generator g(17);
  auto in = [&](const Shape& sh) { return randn(sh, g, dt).set_requires_grad(true); };
  const Tensor q = in({B, H, Tq, D}), k = in({B, H, Tk, D}), v = in({B, H, Tk, D});
  const Tensor dist = randn({H, Tq + Tk - 1}, g, dt);
  const Tensor dy = randn({B, H, Tq, D}, g, dt);
  const double scale = 1.0 / std::sqrt(double(D));
  ScoreModifier causal_mod;
  if (distance) {
    causal_mod.kind = ScoreBias::Distance;
    causal_mod.bias_by_distance = dist;
  }
  std::vector<double> dense(static_cast<size_t>(H * Tq * Tk));
  const auto dv = dist.to_vector();
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t j = 0; j < Tk; ++j)
        dense[static_cast<size_t>((h * Tq + i) * Tk + j)] =
            j > i + q_offset ? -INFINITY
            : distance       ? dv[static_cast<size_t>(h * (Tq + Tk - 1) + j - i + Tq - 1)]
                             : 0.0;
  ScoreModifier masked_mod;
  masked_mod.kind = ScoreBias::Dense;
  masked_mod.bias_dense = Tensor::from_vector(dense, {H, Tq, Tk}, dt);

  auto run_once = [&](const ScoreModifier& mod, bool causal) {
    for (Tensor t : {q, k, v}) t.zero_grad();
    const Tensor o = attention(q, k, v, mod, causal, scale, q_offset);
    o.backward(dy);
    return std::vector<std::vector<double>>{o.to_vector(), q.grad().to_vector(), k.grad().to_vector(),
                                            v.grad().to_vector()};
  };
  const auto strips = run_once(causal_mod, true);
  const auto whole = run_once(masked_mod, false);
  const char* names[] = {"o", "dq", "dk", "dv"};
  for (size_t t = 0; t < 4; ++t) {
    ASSERT_EQ(strips[t].size(), whole[t].size());
    size_t bad = strips[t].size();
    for (size_t i = 0; i < strips[t].size() && bad == strips[t].size(); ++i)
      if (std::memcmp(&strips[t][i], &whole[t][i], sizeof(double)) != 0) bad = i;
    EXPECT_EQ(bad, strips[t].size()) << dtype_name(dt) << " Tq " << Tq << " Tk " << Tk << " offset " << q_offset
                                     << (distance ? " distance " : " none ") << names[t] << "[" << bad
                                     << "]: " << (bad < strips[t].size() ? strips[t][bad] : 0.0) << " vs "
                                     << (bad < strips[t].size() ? whole[t][bad] : 0.0);
  }
}

TEST(Attention, CausalEqualsBidirectionalWithAMaskingBiasBitForBit) {
  for (const bool distance : {false, true}) {
    expect_causal_equals_masked_bidirectional<float>(DType::Float32, 2, 3, 64, 64, 32, 0, distance);
    expect_causal_equals_masked_bidirectional<float>(DType::Float32, 1, 2, 37, 37, 8, 0, distance);
    expect_causal_equals_masked_bidirectional<float>(DType::Float32, 1, 2, 150, 150, 16, 0, distance);
    expect_causal_equals_masked_bidirectional<float>(DType::Float32, 1, 2, 23, 90, 16, 67, distance);
    expect_causal_equals_masked_bidirectional<double>(DType::Float64, 1, 2, 100, 100, 8, 0, distance);
  }
}

// Extra bytes (beyond the inputs) at the peak of forward + backward.
size_t attention_peak_bytes(Mod kind, int64_t T, bool naive) {
  Case c{"mem", kind, true, 1, 2, T, 16};
  Built b = build(c, DType::Float32, 3);
  Generator g(5);
  Tensor dy = randn({1, 2, T, 16}, g);
  auto& be = backend(DeviceType::CPU);
  be.reset_peak();
  const size_t base = be.current_bytes();
  {
    Tensor y = naive ? attention_reference(b.inputs[0], b.inputs[1], b.inputs[2], b.mod, true, b.scale)
                     : attention(b.inputs[0], b.inputs[1], b.inputs[2], b.mod, true, b.scale);
    y.backward(dy);
  }
  return be.peak_bytes() - base;
}

TEST(Attention, MemoryGrowsLinearlyInT) {
  for (Mod kind : {Mod::None, Mod::Distance, Mod::T5, Mod::ALiBi, Mod::DeBERTa}) {
    const size_t m1 = attention_peak_bytes(kind, 256, false), m2 = attention_peak_bytes(kind, 512, false);
    EXPECT_LE(double(m2), 2.2 * double(m1)) << "fused kind " << int(kind) << ": " << m1 << " -> " << m2 << " bytes";
    // The naive reference stores (B, H, T, T) tensors: at T = 512 that alone is 2 MiB per tensor.
    const size_t n2 = attention_peak_bytes(kind, 512, true);
    EXPECT_GT(n2, 4 * m2) << "naive kind " << int(kind);
  }
}

TEST(Attention, ArgumentErrors) {
  Generator g(1);
  Tensor q = randn({1, 2, 5, 4}, g), k = randn({1, 2, 5, 4}, g);
  EXPECT_THROW(attention(q, randn({1, 3, 5, 4}, g), k, {}, true, 0.5), ShapeError);
  EXPECT_THROW(attention(q, k, randn({1, 2, 5, 3}, g), {}, true, 0.5), ShapeError);
  EXPECT_THROW(attention(q.reshape({2, 5, 4}), k, k, {}, true, 0.5), ShapeError);
  EXPECT_THROW(attention(q, k.to(DType::Float64), k, {}, true, 0.5), DTypeError);
  ScoreModifier t5 = nn::t5_score_modifier(randn({8, 3}, g), false, 8, 20, 5, 5);  // 3 heads, q has 2
  EXPECT_THROW(attention(q, k, k, t5, true, 0.5), ShapeError);
  ScoreModifier distance;
  distance.kind = ScoreBias::Distance;
  EXPECT_THROW(attention(q, k, k, distance, true, 0.5), ShapeError);  // no bias tensor
  distance.bias_by_distance = randn({2, 8}, g);                       // Tq + Tk - 1 = 9 diagonals
  EXPECT_THROW(attention(q, k, k, distance, true, 0.5), ShapeError);
  distance.bias_by_distance = randn({2, 9}, g, DType::Float64);
  EXPECT_THROW(attention(q, k, k, distance, true, 0.5), DTypeError);
  ScoreModifier bad;
  bad.kind = ScoreBias::ContentPosition;
  bad.kr = randn({8, 2, 4}, g);
  bad.bucket = [](int64_t r) { return r + 3; };  // rows outside [0, 8) for some r
  EXPECT_THROW(attention(q, k, k, bad, true, 0.5), IndexError);
  ScoreModifier deb;
  deb.kind = ScoreBias::ContentPosition;
  deb.bucket = [](int64_t) { return 0; };
  EXPECT_THROW(attention(q, k, k, deb, true, 0.5), ValueError);
}

// ---- the attention layer with every position encoding ---------------------------------------

nn::PosEncConfig small_config(const std::string& kind, bool causal) {
  return test::small_posenc_config(kind, causal, /*n_layer=*/2);
}

TEST(AttentionLayer, FusedMatchesNaiveForEveryEncoding) {
  for (const std::string& kind : nn::position_encoding_kinds())
    for (bool causal : {true, false}) {
      if (!causal && nn::position_encoding_entry(kind).causal_only) continue;  // refused (test_posenc)
      Generator gen(3);
      auto pe = nn::make_position_encoding(small_config(kind, causal), gen);
      nn::CausalSelfAttention l0(12, 3, true, gen, 0.01, DType::Float64), l1(12, 3, true, gen, 0.01, DType::Float64);
      Generator gx(4);
      Tensor x0 = randn({2, 9, 12}, gx, DType::Float64);
      auto run_layers = [&](bool naive) {
        l0.naive = l1.naive = naive;
        pe->zero_grad();
        l0.zero_grad();
        l1.zero_grad();
        Tensor x = pe->embed(x0, 2);
        Tensor y = l1.forward(x + l0.forward(x, *pe, 0, 2), *pe, 1, 2);
        Generator gr(8);
        y.backward(randn(y.shape(), gr, DType::Float64));
        TensorList out{y.detach()};
        for (auto* m : std::initializer_list<const nn::Module*>{pe.get(), &l0, &l1})
          for (auto& [name, p] : m->named_parameters()) out.push_back(p.grad());
        return out;
      };
      TensorList f = run_layers(false), n = run_layers(true);
      ASSERT_EQ(f.size(), n.size());
      for (size_t i = 0; i < f.size(); ++i) {
        ASSERT_TRUE(f[i].defined() && n[i].defined()) << kind << " tensor " << i;
        EXPECT_LE(max_abs_diff(f[i], n[i]), 1e-10 * std::max(1.0, max_abs(n[i]))) << kind << " tensor " << i;
      }
    }
}

TEST(AttentionLayer, ParameterNamesAndShapes) {
  Generator gen(1);
  nn::CausalSelfAttention a(12, 3, true, gen, 0.005);
  auto p = a.named_parameters();
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].first, "qkv.weight");
  EXPECT_EQ(p[0].second.shape(), (Shape{36, 12}));
  EXPECT_EQ(p[1].first, "qkv.bias");
  EXPECT_EQ(p[2].first, "proj.weight");
  EXPECT_EQ(p[3].first, "proj.bias");
  EXPECT_THROW(nn::CausalSelfAttention(10, 3, true, gen), ValueError);
}

// Attention over its uniform share per distance: each (b, i) row gives its n_i keys other than its
// own (i causal, T - 1 bidirectional) n_i times their renormalised share, summing to n_i, so for each
// head sum_d a[d] * (#pairs at distance d) = B * sum_i n_i; ALiBi's recency prior reads above 1 at
// distance 1 and below it at the longest.
TEST(AttentionLayer, AttentionOverUniformByDistance) {
  for (const std::string& kind : nn::position_encoding_kinds())
    for (bool causal : {true, false}) {
      if (!causal && nn::position_encoding_entry(kind).causal_only) continue;  // refused (test_posenc)
      Generator gen(5);
      auto pe = nn::make_position_encoding(small_config(kind, causal), gen);
      nn::CausalSelfAttention layer(12, 3, true, gen, 0.02, DType::Float64);
      Generator gx(6);
      const int64_t B = 2, T = 11;
      Tensor x = randn({B, T, 12}, gx, DType::Float64);
      Tensor prof = layer.attention_over_uniform(x, *pe, 1, 0);
      ASSERT_EQ(prof.shape(), (Shape{3, T - 1}));
      auto v = prof.to_vector();
      for (int64_t h = 0; h < 3; ++h) {
        double total = 0;
        for (int64_t d = 1; d < T; ++d) total += v[h * (T - 1) + d - 1] * double(B * (T - d) * (causal ? 1 : 2));
        EXPECT_NEAR(total, double(B) * (causal ? T * (T - 1) / 2.0 : T * (T - 1.0)), 1e-9) << kind << " head " << h;
      }
      if (kind == "alibi" && causal) {
        EXPECT_GT(v[0], 1.0);      // head 0, distance 1
        EXPECT_LT(v[T - 2], 1.0);  // head 0, distance T - 1
      }
    }
}

}  // namespace

// ---- per-token positions (randomized positions, Ruoss et al. 2023 §3) ------------------------

namespace {

// Runs `f` and checks it throws E with `what` in its message.
template <typename E, typename F>
void expect_error(F&& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning \"" << what << "\"";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

// q, k, v (B, H, T, D) and a Distance bias (H, w) or DeBERTa-style kr, qr (12, H, D) with bucket
// clamp(r, -6, 5) + 6; positions set on the modifier when given. Returns {out, grads...} of fused
// (or reference) forward + backward with a fixed upstream gradient.
TensorList run_positions(bool content_position, bool causal, int64_t T, const std::vector<int64_t>& pos, DType dt,
                         bool naive) {
  const int64_t B = 2, H = 3, D = 5;
  Generator g(23);
  auto in = [&](const Shape& s) { return randn(s, g, dt).set_requires_grad(true); };
  TensorList x{in({B, H, T, D}), in({B, H, T, D}), in({B, H, T, D})};
  ScoreModifier m;
  if (content_position) {
    x.push_back(in({12, H, D}));
    x.push_back(in({12, H, D}));
    m.kind = ScoreBias::ContentPosition;
    m.kr = x[3];
    m.qr = x[4];
    m.bucket = [](int64_t r) { return std::clamp<int64_t>(r, -6, 5) + 6; };
  } else {
    const int64_t w = pos.empty() ? 2 * T - 1 : 2 * pos.back() + 1;
    x.push_back(in({H, w}));
    m.kind = ScoreBias::Distance;
    m.bias_by_distance = x[3];
  }
  m.query_positions = m.key_positions = pos;
  const double scale = 0.4;
  Tensor y =
      naive ? attention_reference(x[0], x[1], x[2], m, causal, scale) : attention(x[0], x[1], x[2], m, causal, scale);
  Generator gy(7);
  y.backward(randn(y.shape(), gy, dt));
  TensorList out{y.detach()};
  for (auto& t : x) out.push_back(t.grad());
  return out;
}

std::vector<int64_t> iota_positions(int64_t T, int64_t first = 0, int64_t step = 1) {
  std::vector<int64_t> p(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) p[t] = first + t * step + (t * t) % 3;  // gaps vary when step > 1
  if (step == 1 && first == 0)
    for (int64_t t = 0; t < T; ++t) p[t] = t;
  return p;
}

}  // namespace

// Positions 0..T-1 through the positions path give the plain path's results bit for bit (float32,
// T = 130: several tiles in both directions), forward and every gradient.
TEST(AttentionPositions, IdentityPositionsEqualPlainPathBitForBit) {
  for (bool cp : {false, true})
    for (bool causal : {true, false}) {
      TensorList plain = run_positions(cp, causal, 130, {}, DType::Float32, false);
      TensorList pos = run_positions(cp, causal, 130, iota_positions(130), DType::Float32, false);
      ASSERT_EQ(plain.size(), pos.size());
      for (size_t i = 0; i < plain.size(); ++i)
        EXPECT_EQ(max_abs_diff(plain[i], pos[i]), 0.0)
            << "content_position " << cp << " causal " << causal << " tensor " << i;
    }
}

// Fused against the materialising reference at positions with gaps (double and float32).
TEST(AttentionPositions, FusedMatchesReferenceWithGaps) {
  const std::vector<int64_t> pos = iota_positions(70, 3, 4);  // positions 3 .. ~280, gaps 3..6
  for (bool cp : {false, true})
    for (bool causal : {true, false})
      for (DType dt : {DType::Float64, DType::Float32}) {
        TensorList f = run_positions(cp, causal, 70, pos, dt, false), n = run_positions(cp, causal, 70, pos, dt, true);
        const double tol = dt == DType::Float64 ? 1e-10 : 2e-5;
        for (size_t i = 0; i < f.size(); ++i)
          EXPECT_LE(max_abs_diff(f[i], n[i]), tol * std::max(1.0, max_abs(n[i])))
              << "content_position " << cp << " causal " << causal << " tensor " << i << " " << dtype_name(dt);
        // The gaps matter: the same inputs at positions 0..T-1 give another output.
        if (dt == DType::Float64) {
          EXPECT_GT(max_abs_diff(f[0], run_positions(cp, causal, 70, iota_positions(70), dt, false)[0]), 1e-6);
        }
      }
}

TEST(AttentionPositions, ArgumentErrors) {
  Generator g(1);
  Tensor q = randn({1, 2, 4, 4}, g), k = randn({1, 2, 4, 4}, g);
  ScoreModifier m;
  m.kind = ScoreBias::Distance;
  m.bias_by_distance = randn({2, 2 * 9 + 1}, g);  // window of positions up to 9
  m.query_positions = m.key_positions = {0, 3, 7, 9};
  EXPECT_NO_THROW(attention(q, k, k, m, true, 0.5));
  ScoreModifier w = m;
  w.bias_by_distance = randn({2, 7}, g);  // the diagonal width, not the window's
  expect_error<ShapeError>([&] { attention(q, k, k, w, true, 0.5); }, "Pq + Pk - 1 = 19");
  ScoreModifier dec = m;
  dec.query_positions = dec.key_positions = {0, 3, 3, 9};
  expect_error<ValueError>([&] { attention(q, k, k, dec, true, 0.5); },
                           "query_positions must be >= 0 and strictly increasing");
  ScoreModifier neg = m;
  neg.key_positions = {-1, 3, 7, 9};
  expect_error<ValueError>([&] { attention(q, k, k, neg, true, 0.5); }, "key_positions must be >= 0");
  ScoreModifier len = m;
  len.key_positions = {0, 3, 7};
  expect_error<ValueError>([&] { attention(q, k, k, len, true, 0.5); }, "key_positions has 3 entries for 4 tokens");
  expect_error<ValueError>([&] { attention(q, k, k, m, true, 0.5, 2); }, "per-token positions take no query offset");
  expect_error<ValueError>([&] { attention_reference(q, k, k, m, true, 0.5, 2); }, "take no query offset");
  expect_error<ValueError>([&] { attention_weight_over_uniform(q, k, m, true, 0.5); }, "per-token positions");
}

// The CUDA kernels have no per-token position path: the op refuses before dispatch, naming why.
TEST(AttentionPositions, CudaRefusesPerTokenPositionsByName) {
  POSGRAD_REQUIRE_CUDA();
  Generator g(1);
  const Tensor q = randn({1, 2, 4, 4}, g).to(Device::cuda());
  ScoreModifier m;
  m.kind = ScoreBias::Distance;
  m.bias_by_distance = randn({2, 19}, g).to(Device::cuda());
  m.query_positions = m.key_positions = {0, 3, 7, 9};
  expect_error<DeviceError>([&] { attention(q, q, q, m, true, 0.5); },
                            "per-token positions (randomized positions) have no CUDA kernel");
}

// A steep distance bias (ALiBi-like, slope 0.8 over 300 keys) makes far keys' probabilities and
// their products with a small upstream gradient subnormal. The kernels flush those to zero
// (tensor/kernels/cpu/denormals.h: they cost a microcode assist each) and restore the thread's
// floating-point control afterwards; the gradients stay those of the double-precision reference.
TEST(Attention, SubnormalProductsAreFlushedAndTheThreadStateRestored) {
  Generator g(31);
  const int64_t H = 2, Tq = 1, Tk = 300, D = 8;
  auto in = [&](const Shape& s, DType dt) { return randn(s, g, dt); };
  const Tensor q64 = in({1, H, Tq, D}, DType::Float64), k64 = in({1, H, Tk, D}, DType::Float64),
               v64 = in({1, H, Tk, D}, DType::Float64);
  std::vector<double> bias(static_cast<size_t>(H * (Tq + Tk - 1)));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t d = 0; d < Tq + Tk - 1; ++d)
      bias[h * (Tq + Tk - 1) + d] = -0.8 * (h + 1) * static_cast<double>(Tk - 1 - d);
  ScoreModifier m64;
  m64.kind = ScoreBias::Distance;
  m64.bias_by_distance = Tensor::from_vector(bias, {H, Tq + Tk - 1}, DType::Float64);
  ScoreModifier m32 = m64;
  m32.bias_by_distance = m64.bias_by_distance.to(DType::Float32);
  auto grads = [&](DType dt, const ScoreModifier& m, bool fused) {
    Tensor q = q64.to(dt).detach().set_requires_grad(true), k = k64.to(dt).detach().set_requires_grad(true),
           v = v64.to(dt).detach().set_requires_grad(true);
    // The query is the last position (q_offset Tk - 1); the upstream gradient is scaled by 1e-20.
    Tensor o = fused ? attention(q, k, v, m, true, 0.35, Tk - 1) : attention_reference(q, k, v, m, true, 0.35, Tk - 1);
    sum(o * 1e-20).backward();
    return TensorList{q.grad(), k.grad(), v.grad()};
  };
#ifdef __SSE2__
  const unsigned before = _mm_getcsr();
#endif
  const TensorList f = grads(DType::Float32, m32, true);
#ifdef __SSE2__
  // The calling thread's MXCSR controls (rounding, FTZ, DAZ, masks) are as they were; the low six
  // bits are the sticky exception flags that any float operation may raise.
  EXPECT_EQ(_mm_getcsr() & ~0x3Fu, before & ~0x3Fu);
#endif
  const TensorList ref = grads(DType::Float64, m64, false);
  for (size_t i = 0; i < 3; ++i) {
    int64_t subnormal = 0;
    for (double x : f[i].to_vector()) subnormal += std::fpclassify(static_cast<float>(x)) == FP_SUBNORMAL;
    EXPECT_EQ(subnormal, 0) << "gradient " << i;
    // Absolute agreement at the scale of the largest gradient entry (the flushed ones are < 2^-126).
    EXPECT_LE(max_abs_diff(f[i].to(DType::Float64), ref[i]), 1e-5 * max_abs(ref[i])) << "gradient " << i;
  }
  // The double reference has entries in float's subnormal range: the case does produce them.
  int64_t tiny = 0;
  for (double x : ref[2].to_vector()) tiny += x != 0 && std::fabs(x) < 1.1754943508222875e-38;
  EXPECT_GT(tiny, 0);
}
