// test_encoder.cpp — the encoder track: the bidirectional attention of every position encoding
// (gradcheck in double of a layer, the mask really off, NoPE permutation-equivariant), BERT's masked-LM
// corruption (rates, labels, determinism, errors), the fine-tuning tasks (hand-built windows with
// known labels), the metrics (hand-computed accuracy, macro-F1, CoNLL span F1), and the runner at a
// tiny size (determinism, JSON round trip, report, learning on an easy corpus).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <sstream>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "compare/studies/encoder/encoder.h"
#include "compare/studies/encoder/encoder_metrics.h"
#include "data/encoder_tasks.h"
#include "data/fileio.h"
#include "data/mlm.h"
#include "data/synthetic.h"
#include "nn/attention.h"
#include "nn/encoder.h"
#include "support/posenc_config.h"
#include "support/process.h"
#include "support/test_util.h"
#include "train/safetensors.h"

using namespace posgrad;

namespace {

nn::PosEncConfig bidir_config(const std::string& kind) {
  return test::small_posenc_config(kind, /*causal=*/false, /*n_layer=*/1);
}

// ---- bidirectional attention of every encoding ---------------------------------------------------

// Finite differences in double through embed -> attention layer (bidirectional) for every
// registered encoding: the input's gradient passes through each encoding's embed / rotate / score
// modifier with the mask off.
TEST(EncoderAttention, BidirectionalLayerGradcheckForEveryEncoding) {
  for (const std::string& kind : nn::bidirectional_position_encoding_kinds()) {
    Generator gen(11);
    auto pe = nn::make_position_encoding(bidir_config(kind), gen);
    ASSERT_FALSE(pe->causal()) << kind;
    nn::CausalSelfAttention layer(12, 3, true, gen, 0.3, DType::Float64);
    Generator gx(12);
    Tensor x = randn({2, 5, 12}, gx, DType::Float64).set_requires_grad(true);
    const GradcheckResult r =
        gradcheck([&](const TensorList& in) { return layer.forward(pe->embed(in[0], 1), *pe, 0, 1); }, {x});
    EXPECT_TRUE(r.ok) << kind << ":\n" << r.summary();
  }
}

// With the mask off the first position's output depends on the last token; with it on, it does not.
TEST(EncoderAttention, BidirectionalSeesLaterTokensCausalDoesNot) {
  for (const std::string& kind : nn::position_encoding_kinds())
    for (bool causal : {false, true}) {
      if (!causal && nn::position_encoding_entry(kind).causal_only) continue;  // refused: CausalOnlyEncodingsAreRefused
      nn::PosEncConfig cfg = bidir_config(kind);
      cfg.causal = causal;
      Generator gen(5);
      auto pe = nn::make_position_encoding(cfg, gen);
      nn::CausalSelfAttention layer(12, 3, true, gen, 0.3, DType::Float64);
      Generator gx(6);
      Tensor x = randn({1, 6, 12}, gx, DType::Float64);
      std::vector<double> xv = x.to_vector();
      for (int64_t c = 0; c < 12; ++c) xv[5 * 12 + c] += 1.0;  // change the last token only
      Tensor x2 = Tensor::from_vector(xv, x.shape(), DType::Float64);
      NoGradGuard ng;
      auto y1 = layer.forward(pe->embed(x, 0), *pe, 0, 0).to_vector();
      auto y2 = layer.forward(pe->embed(x2, 0), *pe, 0, 0).to_vector();
      double d0 = 0;
      for (int64_t c = 0; c < 12; ++c) d0 = std::max(d0, std::fabs(y1[c] - y2[c]));  // position 0
      if (causal)
        EXPECT_EQ(d0, 0.0) << kind << " causal: position 0 saw a later token";
      else
        EXPECT_GT(d0, 1e-6) << kind << " bidirectional: position 0 did not see the last token";
    }
}

nn::EncoderConfig tiny_encoder(const std::string& kind, int64_t classes = 3, int64_t tags = 3) {
  nn::EncoderConfig ec;
  ec.model.vocab_size = 10;
  ec.model.block_size = 16;
  ec.model.n_layer = 2;
  ec.model.n_head = 2;
  ec.model.n_embd = 16;
  ec.model.pos.kind = kind;
  ec.num_classes = classes;
  ec.num_tags = tags;
  return ec;
}

// NoPE in a bidirectional encoder: permuting the tokens permutes the hidden states and leaves the
// mean-pooled sequence logits unchanged — exactly what makes it the order tasks' control. Every
// other encoding breaks the symmetry.
TEST(Encoder, NoPEIsPermutationEquivariantOthersAreNot) {
  const std::vector<int64_t> ids = {1, 4, 2, 8, 5, 7, 3}, perm = {6, 2, 0, 5, 1, 4, 3};
  std::vector<int64_t> pids;
  for (int64_t p : perm) pids.push_back(ids[p]);
  const Tensor a = Tensor::from_ints(ids, {1, 7}), b = Tensor::from_ints(pids, {1, 7});
  for (const std::string& kind : nn::bidirectional_position_encoding_kinds()) {
    Generator g(3), d(0);
    nn::Encoder enc(tiny_encoder(kind), g, d);
    enc.eval();
    EXPECT_FALSE(enc.backbone->position_encoding().causal()) << kind;
    NoGradGuard ng;
    const auto ha = enc.hidden(a).to_vector(), hb = enc.hidden(b).to_vector();
    double diff = 0;
    for (int64_t t = 0; t < 7; ++t)
      for (int64_t c = 0; c < 16; ++c) diff = std::max(diff, std::fabs(hb[t * 16 + c] - ha[perm[t] * 16 + c]));
    const auto la = enc.sequence_logits(a).to_vector(), lb = enc.sequence_logits(b).to_vector();
    double ldiff = 0;
    for (size_t i = 0; i < la.size(); ++i) ldiff = std::max(ldiff, std::fabs(la[i] - lb[i]));
    if (kind == "none") {
      EXPECT_LT(diff, 1e-5) << "NoPE encoder is not permutation-equivariant";
      EXPECT_LT(ldiff, 1e-5);
    } else {
      EXPECT_GT(diff, 1e-5) << kind << " encoder ignores order";
    }
  }
}

// Mirroring a window (token t to position T - 1 - t) mirrors the hidden states, and so leaves the
// mean-pooled logits unchanged, exactly for the encodings whose registry entry says their bias depends
// on |i - j| alone (PosEncEntry::symmetric_bias) and for NoPE (no position signal at all); every other
// bidirectional encoding tells a window from its mirror image. This is why those encodings read 0.5
// on the `reversed` task by construction (encoder_score_is_structural).
TEST(Encoder, MirrorEquivarianceIsTheSymmetricBiasFlag) {
  const std::vector<int64_t> ids = {1, 4, 2, 8, 5, 7, 3, 3, 9};
  const int64_t T = static_cast<int64_t>(ids.size());
  const std::vector<int64_t> mirrored(ids.rbegin(), ids.rend());
  const Tensor a = Tensor::from_ints(ids, {1, T}), b = Tensor::from_ints(mirrored, {1, T});
  int symmetric = 0;
  for (const std::string& kind : nn::bidirectional_position_encoding_kinds()) {
    Generator g(3), d(0);
    nn::Encoder enc(tiny_encoder(kind), g, d);
    enc.eval();
    NoGradGuard ng;
    const auto ha = enc.hidden(a).to_vector(), hb = enc.hidden(b).to_vector();
    double diff = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < 16; ++c) diff = std::max(diff, std::fabs(hb[t * 16 + c] - ha[(T - 1 - t) * 16 + c]));
    const auto la = enc.sequence_logits(a).to_vector(), lb = enc.sequence_logits(b).to_vector();
    double ldiff = 0;
    for (size_t i = 0; i < la.size(); ++i) ldiff = std::max(ldiff, std::fabs(la[i] - lb[i]));
    const bool flag = nn::position_encoding_entry(kind).symmetric_bias;
    symmetric += flag;
    if (flag || kind == "none") {
      EXPECT_LT(diff, 1e-5) << kind << ": a bias of |i - j| alone must mirror the hidden states";
      EXPECT_LT(ldiff, 1e-5) << kind;
      EXPECT_EQ(train::encoder_score_is_structural(kind, "reversed"), flag) << kind;
    } else {
      EXPECT_GT(diff, 1e-4) << kind << " is mirror-blind but its entry does not set symmetric_bias";
      EXPECT_FALSE(train::encoder_score_is_structural(kind, "reversed")) << kind;
    }
    EXPECT_FALSE(train::encoder_score_is_structural(kind, "marker_segment")) << kind;
    EXPECT_FALSE(train::encoder_score_is_structural(kind, "line_word")) << kind;
  }
  EXPECT_EQ(symmetric, 3) << "ALiBi, KERPLE and Sandwich";
}

// A causal-only encoding (xPos) is refused by name by the encoder model; every other one builds.
TEST(Encoder, CausalOnlyEncodingsAreRefused) {
  int refused = 0;
  for (const std::string& kind : nn::position_encoding_kinds()) {
    Generator g(3), d(0);
    if (!nn::position_encoding_entry(kind).causal_only) {
      EXPECT_NO_THROW(nn::Encoder(tiny_encoder(kind), g, d)) << kind;
      continue;
    }
    ++refused;
    try {
      nn::Encoder enc(tiny_encoder(kind), g, d);
      ADD_FAILURE() << kind << " was accepted by the encoder";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + kind + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("causal only"), std::string::npos) << e.what();
    }
  }
  EXPECT_GE(refused, 1);  // xpos
}

TEST(Encoder, HeadsShapesAndErrors) {
  Generator g(1), d(0);
  nn::Encoder enc(tiny_encoder("rope", 4, 5), g, d);
  const Tensor idx = Tensor::from_ints({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(enc.mlm_logits(idx).shape(), (Shape{2, 3, 10}));
  EXPECT_EQ(enc.sequence_logits(idx).shape(), (Shape{2, 4}));
  EXPECT_EQ(enc.token_logits(idx).shape(), (Shape{2, 3, 5}));
  // the MLM head is tied to the token embedding
  bool has_separate_head = false;
  for (const auto& [name, p] : enc.named_parameters()) has_separate_head |= name.find("lm_head") != std::string::npos;
  EXPECT_FALSE(has_separate_head);
  Generator g2(1), d2(0);
  nn::Encoder bare(tiny_encoder("rope", 0, 0), g2, d2);
  EXPECT_THROW(bare.sequence_logits(idx), ValueError);
  EXPECT_THROW(bare.token_logits(idx), ValueError);
  nn::EncoderConfig bad = tiny_encoder("rope", -1, 0);
  EXPECT_THROW(nn::Encoder(bad, g2, d2), ValueError);
}

// ---- masked-LM corruption --------------------------------------------------------------------------

TEST(Mlm, RatesLabelsAndDeterminism) {
  const int64_t B = 64, T = 200, V = 50, MASK = 50;
  std::vector<int64_t> ids(B * T);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7 + 3) % V);
  const Tensor x = Tensor::from_ints(ids, {B, T});
  Generator g(42);
  const data::MlmBatch mb = data::mask_tokens(x, V, MASK, g);
  const auto in = mb.input.to_vector(), lab = mb.labels.to_vector();
  int64_t selected = 0, masked = 0, changed_random = 0, kept = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (lab[i] == data::kIgnoreIndex) {
      EXPECT_EQ(in[i], ids[i]) << "an unselected token was changed at " << i;
      continue;
    }
    ++selected;
    EXPECT_EQ(lab[i], ids[i]) << "label is not the original token at " << i;
    if (in[i] == MASK)
      ++masked;
    else if (in[i] == ids[i])
      ++kept;
    else
      ++changed_random;
  }
  EXPECT_EQ(selected, mb.selected);
  EXPECT_EQ(masked, mb.masked);
  EXPECT_EQ(selected, mb.masked + mb.randomised + mb.kept);
  // 12800 tokens: 15% +- 1%, of which 80% / 10% / 10% +- 3% (several standard deviations).
  EXPECT_NEAR(double(selected) / (B * T), 0.15, 0.01);
  EXPECT_NEAR(double(masked) / selected, 0.8, 0.03);
  EXPECT_NEAR(double(mb.randomised) / selected, 0.1, 0.03);
  EXPECT_NEAR(double(mb.kept) / selected, 0.1, 0.03);
  // a random replacement may draw the original token: it then counts as randomised but looks kept
  EXPECT_LE(changed_random, mb.randomised);
  EXPECT_GE(kept, mb.kept);
  // same generator state -> same corruption; another seed -> another
  Generator g2(42), g3(43);
  const data::MlmBatch again = data::mask_tokens(x, V, MASK, g2), other = data::mask_tokens(x, V, MASK, g3);
  EXPECT_EQ(again.input.to_vector(), in);
  EXPECT_EQ(again.labels.to_vector(), lab);
  EXPECT_NE(other.labels.to_vector(), lab);
}

TEST(Mlm, EveryRowGetsOnePositionAndErrors) {
  const Tensor x = Tensor::from_ints({0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1}, {3, 4});
  data::MlmOptions o;
  o.select_prob = 1e-12;  // essentially never selected: the fallback picks one per row
  Generator g(1);
  const auto lab = data::mask_tokens(x, 5, 5, g, o).labels.to_vector();
  for (int64_t b = 0; b < 3; ++b) {
    int n = 0;
    for (int64_t t = 0; t < 4; ++t) n += lab[b * 4 + t] != data::kIgnoreIndex;
    EXPECT_EQ(n, 1) << "row " << b;
  }
  o.select_prob = 1.0;
  o.mask_prob = 1.0;
  o.random_prob = 0.0;
  const data::MlmBatch all = data::mask_tokens(x, 5, 5, g, o);
  for (double v : all.input.to_vector()) EXPECT_EQ(v, 5.0);
  Generator e(0);
  EXPECT_THROW(data::mask_tokens(Tensor::from_ints({0, 1}, {2}), 5, 5, e), ShapeError);
  EXPECT_THROW(data::mask_tokens(Tensor::zeros({2, 2}), 5, 5, e), ShapeError);
  EXPECT_THROW(data::mask_tokens(x, 4, 5, e), ValueError);  // id 4 outside [0, 4)
  data::MlmOptions bad;
  bad.mask_prob = 0.95;
  EXPECT_THROW(data::mask_tokens(x, 5, 5, e, bad), ValueError);
  bad = {};
  bad.select_prob = 0;
  EXPECT_THROW(data::mask_tokens(x, 5, 5, e, bad), ValueError);
}

// ---- tasks -----------------------------------------------------------------------------------------

// Corpus ids: a..z -> 0..25, ' ' -> 26, '\n' -> 27.
std::vector<int64_t> encode(const std::string& s) {
  std::vector<int64_t> out;
  for (char c : s) out.push_back(c == ' ' ? 26 : c == '\n' ? 27 : c - 'a');
  return out;
}
data::TaskVocab test_vocab() {
  data::TaskVocab v;
  v.marker_id = 28;
  v.newline_id = 27;
  v.whitespace_ids = {26, 27};
  return v;
}

TEST(EncoderTasks, LineWordTagsByHand) {
  //                      a b \n c d _ e f \n g h _ _ i
  const auto w = encode("ab\ncd ef\ngh  i");
  EXPECT_EQ(data::line_word_tags(w, test_vocab(), 1), (std::vector<int64_t>{0, 0, 0, 1, 2, 0, 0, 0, 0, 1, 2, 0, 0, 0}));
  EXPECT_EQ(data::line_word_tags(w, test_vocab(), 2), (std::vector<int64_t>{0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 1}));
  // no newline: nothing tagged (the line start is not visible); a word cut by the end stays a span
  EXPECT_EQ(data::line_word_tags(encode("ab cd"), test_vocab(), 1), (std::vector<int64_t>(5, 0)));
  EXPECT_EQ(data::line_word_tags(encode("x\nabc"), test_vocab(), 1), (std::vector<int64_t>{0, 0, 1, 2, 2}));
}

TEST(EncoderTasks, SequenceTasksHaveKnownLabels) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the quick brown fox jumps\nover a lazy dog ";
  const auto ids = encode(text);
  const std::string corpus(text);
  auto window_at = [&](const std::vector<int64_t>& w) {  // start of w in the corpus, -1 if absent
    for (size_t s = 0; s + w.size() <= ids.size(); ++s)
      if (std::equal(w.begin(), w.end(), ids.begin() + static_cast<long>(s))) return static_cast<int64_t>(s);
    return int64_t{-1};
  };
  {
    data::EncoderTaskGenerator gen(data::EncoderTask::Reversed, data::TokenSpan::from_vector(ids), test_vocab(), 7);
    EXPECT_EQ(gen.num_labels(), 2);
    const data::TaskBatch tb = gen.next(32, 12);
    ASSERT_EQ(tb.labels.shape(), (Shape{32}));
    int ones = 0;
    for (int64_t b = 0; b < 32; ++b) {
      std::vector<int64_t> w;
      for (double v : tb.input.narrow(0, b, 1).to_vector()) w.push_back(static_cast<int64_t>(v));
      const int64_t y = static_cast<int64_t>(tb.labels.to_vector()[b]);
      ones += y;
      if (y == 1) std::reverse(w.begin(), w.end());
      EXPECT_GE(window_at(w), 0) << "example " << b << " (label " << y << ") is not a corpus window as labelled";
    }
    EXPECT_GT(ones, 4);
    EXPECT_LT(ones, 28);
  }
  {
    data::EncoderTaskGenerator gen(data::EncoderTask::MarkerSegment, data::TokenSpan::from_vector(ids), test_vocab(),
                                   7);
    EXPECT_EQ(gen.num_labels(), 4);
    const data::TaskBatch tb = gen.next(32, 12);
    const auto in = tb.input.to_vector(), lab = tb.labels.to_vector();
    for (int64_t b = 0; b < 32; ++b) {
      int64_t pos = -1, count = 0;
      for (int64_t t = 0; t < 12; ++t)
        if (in[b * 12 + t] == 28) pos = t, ++count;
      ASSERT_EQ(count, 1) << "example " << b;
      EXPECT_EQ(lab[b], double(pos * 4 / 12)) << "marker at " << pos;  // segments of 3 tokens
    }
    // the same seed draws the same examples
    data::EncoderTaskGenerator again(data::EncoderTask::MarkerSegment, data::TokenSpan::from_vector(ids), test_vocab(),
                                     7);
    EXPECT_EQ(again.next(32, 12).input.to_vector(), in);
  }
  {
    data::EncoderTaskGenerator gen(data::EncoderTask::LineWord, data::TokenSpan::from_vector(ids), test_vocab(), 3);
    const data::TaskBatch tb = gen.next(4, 30);
    ASSERT_EQ(tb.labels.shape(), (Shape{4, 30}));
    const auto in = tb.input.to_vector(), lab = tb.labels.to_vector();
    for (int64_t b = 0; b < 4; ++b) {
      std::vector<int64_t> w(in.begin() + b * 30, in.begin() + (b + 1) * 30);
      std::vector<int64_t> want = data::line_word_tags(w, test_vocab(), 1), got;
      for (int64_t t = 0; t < 30; ++t) got.push_back(static_cast<int64_t>(lab[b * 30 + t]));
      EXPECT_EQ(got, want);
    }
  }
}

// Held-out groups: every class built from one window, the same multiset of tokens in every example
// of a group, labels 0 .. k-1 in order.
TEST(EncoderTasks, BalancedGroupsShareTheirMultiset) {
  std::string text;
  for (int i = 0; i < 20; ++i) text += "the quick brown fox jumps\nover a lazy dog ";
  const auto ids = encode(text);
  for (auto task : {data::EncoderTask::Reversed, data::EncoderTask::MarkerSegment}) {
    data::EncoderTaskGenerator gen(task, data::TokenSpan::from_vector(ids), test_vocab(), 5);
    const int64_t k = gen.num_labels(), T = 13, groups = 6;
    const data::TaskBatch tb = gen.next_balanced(groups, T);
    ASSERT_EQ(tb.input.shape(), (Shape{groups * k, T}));
    const auto in = tb.input.to_vector(), lab = tb.labels.to_vector();
    for (int64_t g = 0; g < groups; ++g) {
      std::vector<double> first(in.begin() + g * k * T, in.begin() + (g * k + 1) * T);
      std::sort(first.begin(), first.end());
      for (int64_t c = 0; c < k; ++c) {
        EXPECT_EQ(lab[g * k + c], double(c));
        std::vector<double> x(in.begin() + (g * k + c) * T, in.begin() + (g * k + c + 1) * T);
        if (task == data::EncoderTask::MarkerSegment) {
          const int64_t p = std::find(x.begin(), x.end(), 28.0) - x.begin();
          EXPECT_EQ(p * 4 / T, c) << "marker at " << p;
        }
        std::sort(x.begin(), x.end());
        EXPECT_EQ(x, first) << data::encoder_task_name(task) << " group " << g << " class " << c;
      }
    }
  }
}

TEST(EncoderTasks, Errors) {
  const auto ids = encode("ab cd\nef");
  auto span = data::TokenSpan::from_vector(ids);
  EXPECT_THROW(data::parse_encoder_task("swap"), ValueError);
  data::TaskVocab v = test_vocab();
  v.marker_id = 3;  // 'd' is a corpus token
  EXPECT_THROW(data::EncoderTaskGenerator(data::EncoderTask::MarkerSegment, span, v, 1), ValueError);
  v = test_vocab();
  v.newline_id = -1;
  EXPECT_THROW(data::EncoderTaskGenerator(data::EncoderTask::LineWord, span, v, 1), ValueError);
  data::EncoderTaskGenerator gen(data::EncoderTask::Reversed, span, test_vocab(), 1);
  EXPECT_THROW(gen.next(0, 4), ValueError);
  EXPECT_THROW(gen.next(2, 9), ValueError);  // longer than the corpus
  data::EncoderTaskGenerator seg(data::EncoderTask::MarkerSegment, span, test_vocab(), 1);
  EXPECT_THROW(seg.next(2, 3), ValueError);  // fewer tokens than segments
  data::TaskOptions o;
  o.segments = 1;
  EXPECT_THROW(data::EncoderTaskGenerator(data::EncoderTask::MarkerSegment, span, test_vocab(), 1, o), ValueError);
}

// ---- metrics -----------------------------------------------------------------------------------------

TEST(EncoderMetrics, AccuracyAndMacroF1ByHand) {
  const std::vector<int64_t> pred = {0, 0, 1, 1, 2}, gold = {0, 1, 1, 1, 2};
  EXPECT_DOUBLE_EQ(train::accuracy(pred, gold), 0.8);
  // class 0: TP 1 FP 1 FN 0 -> 2/3; class 1: TP 2 FP 0 FN 1 -> 4/5; class 2: 1
  EXPECT_NEAR(train::macro_f1(pred, gold), (2.0 / 3 + 0.8 + 1.0) / 3, 1e-12);
  // always predicting class 0 of two balanced classes: F1_0 = 2/3, F1_1 = 0 -> 1/3 = 2 / (k (k + 1));
  // one prediction per balanced pair, half of the pairs each way: F1 = 1/2 per class = 1/k, the
  // order-blind maximum that encoder_chance states
  EXPECT_NEAR(train::macro_f1({0, 0, 0, 0}, {0, 1, 0, 1}), 1.0 / 3, 1e-12);
  EXPECT_NEAR(train::macro_f1({0, 0, 1, 1}, {0, 1, 0, 1}), 0.5, 1e-12);
  EXPECT_NEAR(train::encoder_chance(train::EncoderTrackConfig{}, "reversed", "macro_f1"), 0.5, 1e-12);
  EXPECT_NEAR(train::encoder_chance(train::EncoderTrackConfig{}, "marker_segment", "accuracy"), 0.25, 1e-12);
  EXPECT_THROW(train::accuracy({0}, {0, 1}), ValueError);
  EXPECT_THROW(train::macro_f1({}, {}), ValueError);
}

TEST(EncoderMetrics, BioSpansConllStyle) {
  // B-0 I-0 | O | I-0 I-0 (an I after O opens a span) | B-0 | B-1 I-1 | I-0 after I-1 opens a span
  const auto s = train::bio_spans({1, 2, 0, 2, 2, 1, 3, 4, 2});
  const std::vector<train::Span> want = {{0, 2, 0}, {3, 5, 0}, {5, 6, 0}, {6, 8, 1}, {8, 9, 0}};
  EXPECT_EQ(s, want);
  EXPECT_TRUE(train::bio_spans({0, 0}).empty());
  EXPECT_THROW(train::bio_spans({0, -1}), ValueError);
}

TEST(EncoderMetrics, SpanF1ByHand) {
  // gold spans: (0,2) (4,5) | (1,3); predicted: (0,2) correct, (4,6) wrong end | (1,3) correct, (4,5) spurious
  const std::vector<std::vector<int64_t>> gold = {{1, 2, 0, 0, 1, 0}, {0, 1, 2, 0, 0, 0}};
  const std::vector<std::vector<int64_t>> pred = {{1, 2, 0, 0, 1, 2}, {0, 1, 2, 0, 1, 0}};
  const train::SpanScore sc = train::span_f1(pred, gold);
  EXPECT_EQ(sc.gold, 3);
  EXPECT_EQ(sc.predicted, 4);
  EXPECT_EQ(sc.correct, 2);
  EXPECT_DOUBLE_EQ(sc.precision, 0.5);
  EXPECT_DOUBLE_EQ(sc.recall, 2.0 / 3);
  EXPECT_NEAR(sc.f1, 2 * 0.5 * (2.0 / 3) / (0.5 + 2.0 / 3), 1e-12);  // 4/7
  EXPECT_DOUBLE_EQ(train::span_f1({{0, 0}}, {{1, 0}}).f1, 0.0);
  EXPECT_THROW(train::span_f1({{0}}, {{0, 0}}), ValueError);
  EXPECT_THROW(train::span_f1({{0}}, {}), ValueError);
}

// ---- the runner ----------------------------------------------------------------------------------------

std::string tiny_corpus() {
  std::string t;
  const char* lines[] = {"in the beginning god created the heaven and the earth\n",
                         "and the earth was without form and void\n", "and darkness was upon the face of the deep\n",
                         "and god said let there be light and there was light\n"};
  for (int i = 0; i < 30; ++i) t += lines[i % 4];
  return t;
}

TEST(EncoderTrack, TinyRunIsDeterministicAndRoundTrips) {
  const std::string text = tiny_corpus();
  auto tok = data::make_tokenizer("char", text);
  data::TokenDataset ds(text, *tok, 16);
  train::EncoderTrackConfig c = train::encoder_track_preset("tiny");
  c.methods = {"none", "rope"};
  const train::EncoderTrackResult a = train::run_encoder_track(c, ds, *tok, false);
  const train::EncoderTrackResult b = train::run_encoder_track(c, ds, *tok, false);
  ASSERT_EQ(a.units.size(), 4u);  // 2 methods x 2 seeds
  nlohmann::json ja = train::to_json(a), jb = train::to_json(b);
  for (auto* j : {&ja, &jb})
    for (auto& u : (*j)["units"]) u.erase("seconds");
  EXPECT_EQ(ja, jb) << "same seeds, same thread count: identical results";
  for (const auto& u : a.units) {
    ASSERT_EQ(u.mlm_accuracy.size(), 3u);
    ASSERT_EQ(u.tasks.size(), 9u);  // 3 tasks x 3 lengths
    for (const auto& s : u.tasks) {
      EXPECT_GE(s.accuracy, 0.0);
      EXPECT_LE(s.accuracy, 1.0);
      EXPECT_EQ(s.length, 16 * s.multiplier);
      // NoPE on the balanced held-out groups: exactly chance, at every length
      if (u.method == "none" && s.task != "line_word") {
        EXPECT_NEAR(s.accuracy, train::encoder_chance(c, s.task, "accuracy"), 1e-12) << s.task << " x" << s.multiplier;
      }
    }
  }
  const train::EncoderTrackResult back = train::encoder_track_from_json(train::to_json(a), "test");
  EXPECT_EQ(train::to_json(back), train::to_json(a));
  EXPECT_EQ(train::encoder_values(a, "rope", "reversed/accuracy", 2).size(), 2u);
  EXPECT_EQ(train::encoder_values(a, "rope", "mlm_accuracy", 4).size(), 2u);
  const std::string md = train::encoder_report_markdown(a);
  EXPECT_NE(md.find("### Task marker_segment"), std::string::npos);
  EXPECT_NE(md.find("| *chance (order-blind)* | 0.500"), std::string::npos);
  EXPECT_NE(md.find("NoPE control"), std::string::npos);
  EXPECT_NE(md.find("**not measured** | needs deberta, t5, absolute"), std::string::npos) << md;  // not run
  EXPECT_NE(train::encoder_results_csv(a).find("rope,1,line_word/span_f1,4,"), std::string::npos);
  EXPECT_THROW(train::encoder_track_from_json(nlohmann::json{{"config", ja["config"]}}, "x.json"), IoError);
}

TEST(EncoderTrack, SavedEncoderFillsMasks) {
  const std::string text = tiny_corpus();
  auto tok = data::make_tokenizer("char", text);
  data::TokenDataset ds(text, *tok, 16);
  train::EncoderTrackConfig c = train::encoder_track_preset("tiny");
  c.seeds = {1};
  c.tasks = {"reversed"};
  const std::string dir = ::testing::TempDir() + "/posgrad_encoder_save";
  std::filesystem::remove_all(dir);
  const auto unit = train::run_encoder_unit(c, "t5", 1, ds, *tok, dir);
  const auto enc = train::load_encoder(dir);
  EXPECT_EQ(enc->method, "t5");
  EXPECT_FALSE(enc->model->backbone->position_encoding().causal());
  const train::FillMaskResult r = train::fill_mask(*enc, "and god s_id", '_', 3);
  ASSERT_EQ(r.filled.size(), 12u);
  EXPECT_EQ(r.filled.substr(0, 9), "and god s");
  ASSERT_EQ(r.candidates.size(), 1u);
  ASSERT_EQ(r.candidates[0].size(), 3u);
  EXPECT_EQ(r.filled.substr(9, 1), r.candidates[0][0].first);
  EXPECT_GE(r.candidates[0][0].second, r.candidates[0][1].second);
  // the loaded weights are the saved ones: the same masked-LM logits as a second load
  const auto again = train::load_encoder(dir);
  const Tensor idx = Tensor::from_ints({1, 2, 3, 4}, {1, 4});
  NoGradGuard ng;
  EXPECT_EQ(enc->model->mlm_logits(idx).to_vector(), again->model->mlm_logits(idx).to_vector());
  EXPECT_THROW(train::fill_mask(*enc, "no mask here", '_', 3), ValueError);
  EXPECT_THROW(train::fill_mask(*enc, "Z_", '_', 3), ValueError);  // 'Z' is not in the corpus
  try {
    train::fill_mask(*enc, "an_Z", '_', 3);
    ADD_FAILURE() << "a byte outside the vocabulary was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("byte 90 at offset 3 of the text"), std::string::npos) << e.what();
  }
  EXPECT_THROW(train::fill_mask(*enc, std::string(200, '_'), '_', 3), ValueError);  // past the positions
  EXPECT_THROW(train::load_encoder(dir + "/missing"), IoError);
  // The weights' checksum is recorded in encoder.json and verified on every load: a flipped byte is
  // named with both checksums; without encoder.json the load says what is missing.
  {
    const std::string weights = dir + "/encoder.safetensors", saved = read_file(weights);
    const std::string want = hex64(fnv1a64(saved));
    std::string flipped = saved;
    flipped[flipped.size() / 2] ^= 0x10;
    write_file_atomic(weights, flipped);
    const std::string m = test::thrown_message<IoError>([&] { train::load_encoder(dir); });
    EXPECT_NE(m.find(weights), std::string::npos) << m;
    EXPECT_NE(m.find("checksum " + hex64(fnv1a64(flipped)) + ", expected " + want), std::string::npos) << m;
    write_file_atomic(weights, saved);
    const std::string sidecar = read_file(dir + "/encoder.json");
    std::filesystem::remove(dir + "/encoder.json");
    EXPECT_NE(test::thrown_message<IoError>([&] { train::load_encoder(dir); }).find("encoder.json is missing"),
              std::string::npos);
    write_file_atomic(dir + "/encoder.json", sidecar);
    EXPECT_NO_THROW(train::load_encoder(dir));
  }
  (void)unit;
  if (std::filesystem::exists(test::bin_path())) {  // the command line on the saved encoder
    test::Proc p = test::run_posgrad("fill-mask --run " + dir + " --text 'and god s_id' --top 2");
    EXPECT_EQ(p.status, 0) << p.err;
    EXPECT_EQ(p.out.substr(0, 13), r.filled + "\n") << p.out;
    EXPECT_NE(p.out.find("mask 1: "), std::string::npos) << p.out;
    p = test::run_posgrad("sample --run " + dir);
    EXPECT_EQ(p.status, 1);
    EXPECT_NE(p.err.find("holds a bidirectional encoder of the encoder track"), std::string::npos) << p.err;
    // eval scores an encoder on its pretraining text's validation split: this one was saved without
    // a record of that text (run_encoder_unit with no corpus), which eval names.
    p = test::run_posgrad("eval --run " + dir);
    EXPECT_EQ(p.status, 1);
    EXPECT_NE(p.err.find("does not record the text it was pretrained on"), std::string::npos) << p.err;
  }
  std::filesystem::remove_all(dir);
}

// The command line: bad input is refused with a message naming it, never a crash.
TEST(EncoderTrack, FillMaskCommandRefusesBadInput) {
  POSGRAD_REQUIRE_BIN();
  test::Proc p = test::run_posgrad("fill-mask --run /nonexistent/dir --text 'a_'");
  EXPECT_EQ(p.status, 1);
  EXPECT_NE(p.err.find("no encoder in '/nonexistent/dir'"), std::string::npos) << p.err;
  p = test::run_posgrad("fill-mask --run /nonexistent/dir --text 'a_' --mask-char ab");
  EXPECT_EQ(p.status, 2);
  EXPECT_NE(p.err.find("--mask-char must be a single byte"), std::string::npos) << p.err;
  // One character of two bytes in UTF-8 is still two positions for a byte vocabulary: named as such.
  p = test::run_posgrad("fill-mask --run /nonexistent/dir --text 'a_' --mask-char \u00e9");
  EXPECT_EQ(p.status, 2);
  EXPECT_NE(p.err.find("(2 bytes)"), std::string::npos) << p.err;
  p = test::run_posgrad("compare --track sideways --dry-run");
  EXPECT_EQ(p.status, 2);
  EXPECT_NE(p.err.find("--track"), std::string::npos) << p.err;
}

// SIGTERM during the encoder track stops it after the current step: exit 130, a message that says so.
TEST(EncoderTrack, CompareTrackEncoderStopsOnSigterm) {
  POSGRAD_REQUIRE_BIN();
  const std::string dir = ::testing::TempDir() + "/posgrad_encoder_sigterm";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  { std::ofstream(dir + "/corpus.txt") << tiny_corpus(); }
  test::Background b(
      "compare --preset tiny --track encoder --methods rope --seeds 1 --encoder-mlm-iters 1000000 "
      "--corpus " +
          dir + "/corpus.txt --out-dir " + dir + "/run",
      dir + "/err.txt");
  ASSERT_TRUE(b.wait_for("=== encoder track")) << test::slurp(dir + "/err.txt");
  kill(b.pid, SIGTERM);
  EXPECT_EQ(b.wait(), 130) << test::slurp(dir + "/err.txt");
  EXPECT_NE(test::slurp(dir + "/err.txt").find("encoder track interrupted by SIGTERM"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir + "/run/encoder_results.json"));
  std::filesystem::remove_all(dir);
}

TEST(EncoderTrack, ConfigErrors) {
  train::EncoderTrackConfig c = train::encoder_track_preset("tiny");
  c.methods = {"rope", "nope"};
  EXPECT_THROW(c.validate(), UsageError);
  c = train::encoder_track_preset("tiny");
  c.multipliers = {2, 4};
  EXPECT_THROW(c.validate(), UsageError);
  c = train::encoder_track_preset("tiny");
  c.tasks = {"reversed", "reversed"};
  EXPECT_THROW(c.validate(), UsageError);
  c = train::encoder_track_preset("tiny");
  c.n_embd = 15;
  EXPECT_THROW(c.validate(), UsageError);
  EXPECT_THROW(train::encoder_track_preset("huge"), ValueError);
}

// Masked-LM pretraining learns: on a corpus of one repeated line, a few dozen steps bring RoPE's
// masked-token accuracy well above the unigram level (18 symbols), and fine-tuning tells a window
// from its reversal; NoPE cannot (a window and its reversal are the same multiset: its
// pooled logits are equal, so on the balanced held-out pairs it scores exactly 1/2).
TEST(EncoderTrack, PretrainingLearnsAndNoPEIsBlindToOrder) {
  std::string text;
  for (int i = 0; i < 80; ++i) text += "abcdefgh ijklmnop\n";
  auto tok = data::make_tokenizer("char", text);
  data::TokenDataset ds(text, *tok, 16);
  train::EncoderTrackConfig c = train::encoder_track_preset("tiny");
  c.seeds = {1};
  c.multipliers = {1};
  c.tasks = {"reversed"};
  c.n_embd = 32;
  c.n_head = 4;
  c.mlm_iters = 50;
  c.task_iters = 40;
  c.batch = 16;
  c.lr = 5e-3;
  c.eval_examples = 64;
  const auto rope = train::run_encoder_unit(c, "rope", 1, ds, *tok);
  const auto none = train::run_encoder_unit(c, "none", 1, ds, *tok);
  EXPECT_GT(rope.mlm_accuracy[0], 0.2) << "unigram level 1/18";
  EXPECT_GT(rope.tasks[0].accuracy, 0.85) << "reversed with RoPE";
  EXPECT_NEAR(none.tasks[0].accuracy, 0.5, 1e-12) << "NoPE gives a window and its reversal one prediction";
}

// Finished units are kept: a second run with a method added measures only the new units and reads
// the others back bit for bit; other settings are refused, naming the option; a damaged result is
// named.
TEST(EncoderTrack, FinishedUnitsAreKeptAndOtherSettingsRefused) {
  const std::string text = tiny_corpus();
  auto tok = data::make_tokenizer("char", text);
  data::TokenDataset ds(text, *tok, 16);
  const std::string dir = ::testing::TempDir() + "/posgrad_encoder_keep";
  std::filesystem::remove_all(dir);
  train::EncoderTrackConfig c = train::encoder_track_preset("tiny");
  c.seeds = {1};
  c.tasks = {"reversed"};
  c.methods = {"none"};
  const train::EncoderTrackResult first = train::run_encoder_track(c, ds, *tok, false, dir);
  ASSERT_TRUE(std::filesystem::exists(dir + "/none/seed1/result.json"));
  const auto stamp = std::filesystem::last_write_time(dir + "/none/seed1/result.json");
  c.methods = {"none", "rope"};
  const train::EncoderTrackResult second = train::run_encoder_track(c, ds, *tok, false, dir);
  ASSERT_EQ(second.units.size(), 2u);
  EXPECT_EQ(train::encoder_unit_to_json(second.units[0]), train::encoder_unit_to_json(first.units[0]));
  EXPECT_EQ(std::filesystem::last_write_time(dir + "/none/seed1/result.json"), stamp) << "kept, not measured again";
  EXPECT_TRUE(std::filesystem::exists(dir + "/rope/seed1/result.json"));
  // the kept unit equals a fresh measurement of it (what makes keeping it honest)
  const train::EncoderUnitResult fresh = train::run_encoder_unit(c, "none", 1, ds, *tok);
  nlohmann::json a = train::encoder_unit_to_json(fresh), b = train::encoder_unit_to_json(second.units[0]);
  a.erase("seconds");
  b.erase("seconds");
  EXPECT_EQ(a, b);
  // a unit is its result and its saved encoder: with the encoder gone it is measured again
  std::filesystem::remove(dir + "/none/seed1/encoder.safetensors");
  const train::EncoderTrackResult third = train::run_encoder_track(c, ds, *tok, false, dir);
  EXPECT_TRUE(std::filesystem::exists(dir + "/none/seed1/encoder.safetensors"));
  EXPECT_NE(std::filesystem::last_write_time(dir + "/none/seed1/result.json"), stamp);
  a = train::encoder_unit_to_json(third.units[0]);
  a.erase("seconds");
  EXPECT_EQ(a, b);
  c.mlm_iters += 1;
  try {
    train::run_encoder_track(c, ds, *tok, false, dir);
    ADD_FAILURE() << "units of other settings were mixed";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--encoder-mlm-iters 4 there, 5 now"), std::string::npos) << e.what();
  }
  c.mlm_iters -= 1;
  // A kept unit's result must be its folder's: rope's result in none's folder is refused, naming both.
  const std::string none_result = read_file(dir + "/none/seed1/result.json");
  std::filesystem::copy_file(dir + "/rope/seed1/result.json", dir + "/none/seed1/result.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::string m = test::thrown_message<IoError>([&] { train::run_encoder_track(c, ds, *tok, false, dir); });
  EXPECT_NE(m.find(dir + "/none/seed1/result.json: unit.method = \"rope\": this is the folder of method \"none\""),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("delete it to measure that unit again"), std::string::npos) << m;
  nlohmann::json edited = nlohmann::json::parse(none_result);
  edited["unit"]["mlm_accuracy"][0] = 1.25;
  write_file_atomic(dir + "/none/seed1/result.json", edited.dump());
  m = test::thrown_message<IoError>([&] { train::run_encoder_track(c, ds, *tok, false, dir); });
  EXPECT_NE(m.find("unit.mlm_accuracy[0] = 1.25"), std::string::npos) << m;
  write_file_atomic(dir + "/none/seed1/result.json", none_result);
  // ... and its saved encoder intact: a flipped byte is refused with both checksums.
  const std::string weights = dir + "/none/seed1/encoder.safetensors", saved = read_file(weights);
  std::string flipped = saved;
  flipped[flipped.size() / 3] ^= 0x01;
  write_file_atomic(weights, flipped);
  m = test::thrown_message<IoError>([&] { train::run_encoder_track(c, ds, *tok, false, dir); });
  EXPECT_NE(m.find("checksum " + hex64(fnv1a64(flipped)) + ", expected " + hex64(fnv1a64(saved))), std::string::npos)
      << m;
  write_file_atomic(weights, saved);
  EXPECT_NO_THROW(train::run_encoder_track(c, ds, *tok, false, dir));
  { std::ofstream(dir + "/rope/seed1/result.json") << "{\"settings\": "; }
  EXPECT_THROW(train::run_encoder_track(c, ds, *tok, false, dir), IoError);
  { std::ofstream(dir + "/rope/seed1/result.json") << "[1, 2]"; }
  EXPECT_THROW(train::run_encoder_track(c, ds, *tok, false, dir), IoError);
  std::filesystem::remove_all(dir);
}

// The comparison's command line: encoder settings are validated with the rest (--dry-run included)
// before anything is written; an impossible size is refused by the memory estimate, naming the
// options; a second run with other --encoder-* settings is refused when encoder units exist, and the
// same command measures nothing again. eval scores a saved encoder on its text's validation split.
TEST(EncoderTrack, CompareCommandValidatesKeepsAndEvaluates) {
  POSGRAD_REQUIRE_BIN();
  const std::string dir = ::testing::TempDir() + "/posgrad_encoder_cli";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  { std::ofstream(dir + "/corpus.txt") << tiny_corpus(); }
  const std::string common = "compare --preset tiny --track encoder --methods rope --seeds 1 --corpus " + dir +
                             "/corpus.txt --out-dir " + dir + "/run";
  const std::string base = common + " --encoder-tasks reversed";
  test::Proc p = test::run_posgrad(common + " --encoder-tasks reversed,reversed --dry-run");
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_NE(p.err.find("duplicate tasks in --encoder-tasks"), std::string::npos) << p.err;
  p = test::run_posgrad(base + " --encoder-multipliers 2,4");
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_NE(p.err.find("must include 1"), std::string::npos) << p.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/run")) << "a refused configuration leaves no directory behind";
  p = test::run_posgrad(base + " --encoder-multipliers 1,1,2 --dry-run");
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_NE(p.err.find("duplicate multipliers in --encoder-multipliers"), std::string::npos) << p.err;
  p = test::run_posgrad(base + " --device cuda --dry-run");  // the encoders train on the CPU only
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_NE(p.err.find("--device cuda: the encoder track (--track encoder) trains its encoders on the CPU only"),
            std::string::npos)
      << p.err;
  // an encoding's own constraint at the encoder's sizes: RoPE needs 2 rotary channels per head
  p = test::run_posgrad(base + " --encoder-n-embd 64 --encoder-n-head 64 --dry-run");
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_NE(p.err.find("the encoder track's rope encoder (--encoder-n-embd 64, --encoder-n-head 64)"),
            std::string::npos)
      << p.err;
  // "-0" is read as 0 (no signed zero in the configuration)
  p = test::run_posgrad(base + " --passkey-depths -0,1 --dry-run");
  EXPECT_EQ(p.status, 0) << p.err;
  EXPECT_EQ(p.out.find("-0.0"), std::string::npos) << p.out;
  p = test::run_posgrad(base + " --encoder-length 4096 --encoder-batch 4096 --encoder-n-embd 4096 --encoder-n-head 64");
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_NE(p.err.find("the encoder track needs an estimated"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("--encoder-batch 4096 x --encoder-length 4096"), std::string::npos) << p.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/run"));
  p = test::run_posgrad(base);
  ASSERT_EQ(p.status, 0) << p.err;
  EXPECT_TRUE(std::filesystem::exists(dir + "/run/encoder/rope/seed1/result.json"));
  p = test::run_posgrad(base);
  ASSERT_EQ(p.status, 0) << p.err;
  EXPECT_NE(p.err.find("finished earlier — kept"), std::string::npos) << p.err;
  p = test::run_posgrad(base + " --encoder-mlm-iters 5");
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_NE(p.err.find("--encoder-mlm-iters 4 there, 5 now"), std::string::npos) << p.err;
  p = test::run_posgrad(base + " --encoder-mlm-iters 5 --dry-run");  // --dry-run says what the run would refuse
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_NE(p.err.find("--encoder-mlm-iters 4 there, 5 now"), std::string::npos) << p.err;
  // eval on the saved encoder: the masked-LM score of the same windows computed here
  const std::string enc_dir = dir + "/run/encoder/rope/seed1";
  p = test::run_posgrad("eval --run " + enc_dir + " --contexts 16,65 --windows 8");
  ASSERT_EQ(p.status, 0) << p.err;
  const auto enc = train::load_encoder(enc_dir);
  EXPECT_EQ(enc->length, 16);
  const std::string text = tiny_corpus();
  data::TokenDataset ds(text, *enc->tokenizer, 16);
  const train::MlmScore s = train::evaluate_mlm(*enc->model, ds.val(), 16, 8, 16, 0);
  char line[128];
  std::snprintf(line, sizeof line, "%8d %10.4f %12.4f %8d", 16, s.loss, s.accuracy, 8);
  EXPECT_NE(p.out.find(line), std::string::npos) << p.out << "\nexpected: " << line;
  EXPECT_NE(p.out.find("(beyond the encoder's 64 positions)"), std::string::npos) << p.out;  // 16 x 4
  std::filesystem::remove_all(dir);
}

// An experiment without decoder units writes the encoder track's files only: no decoder study's
// empty tables or plots of no data, even with those studies switched on.
TEST(EncoderTrack, EncoderAloneWritesOnlyItsFiles) {
  POSGRAD_REQUIRE_BIN();
  const std::string dir = ::testing::TempDir() + "/posgrad_encoder_alone";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  { std::ofstream(dir + "/corpus.txt") << tiny_corpus(); }
  const test::Proc p = test::run_posgrad(
      "compare --preset tiny --track encoder --methods rope --seeds 1 --encoder-tasks reversed "
      "--pi-iters 2 --suite-iters 2 --corpus " +
      dir + "/corpus.txt --out-dir " + dir + "/run");
  ASSERT_EQ(p.status, 0) << p.err;
  EXPECT_TRUE(std::filesystem::exists(dir + "/run/encoder_results.csv"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/run/report.md"));
  for (const char* f : {"results.csv", "pi.csv", "suite.csv", "suite_seeds.csv", "passkey.csv",
                        "plots/ppl_vs_length.png", "plots/train_loss.gp"})
    EXPECT_FALSE(std::filesystem::exists(dir + "/run/" + f)) << f;
  EXPECT_EQ(p.err.find("gnuplot failed"), std::string::npos) << p.err;
  // The progress line names the kinds of units it has no time for yet instead of guessing.
  EXPECT_NE(p.err.find("1 encoder unit not yet timed"), std::string::npos) << p.err;
  std::filesystem::remove_all(dir);
}

// The decoder checkpoint records its track; a checkpoint of another track is refused by name.
TEST(EncoderTrack, DecoderCheckpointRecordsItsTrack) {
  POSGRAD_REQUIRE_BIN();
  const std::string dir = ::testing::TempDir() + "/posgrad_track_ckpt";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  { std::ofstream(dir + "/corpus.txt") << tiny_corpus(); }
  test::Proc p = test::run_posgrad("train --preset tiny --max-iters 2 --eval-interval 2 --corpus " + dir +
                                   "/corpus.txt --out-dir " + dir + "/run");
  ASSERT_EQ(p.status, 0) << p.err;
  nlohmann::json st = nlohmann::json::parse(test::slurp(dir + "/run/checkpoint/state.json"));
  EXPECT_EQ(st.at("track"), "decoder");
  st["track"] = "encoder";
  { std::ofstream(dir + "/run/checkpoint/state.json") << st.dump(2); }
  p = test::run_posgrad("eval --run " + dir + "/run");
  EXPECT_EQ(p.status, 1) << p.err;
  EXPECT_NE(p.err.find("is of track \"encoder\""), std::string::npos) << p.err;
  std::filesystem::remove_all(dir);
}

// Accuracy and F1 cannot leave [0, 1]: the intervals printed for them are clipped there.
TEST(EncoderTrack, ReportClipsBoundedIntervalsAndBoundsMacroF1Chance) {
  train::EncoderTrackResult r;
  r.config = train::encoder_track_preset("tiny");
  r.config.methods = {"rope"};
  r.config.tasks = {"reversed"};
  r.config.multipliers = {1};
  for (uint64_t seed : {1, 2}) {
    train::EncoderUnitResult u;
    u.method = "rope";
    u.seed = seed;
    u.mlm_loss = {2.0};
    u.mlm_accuracy = {seed == 1 ? 1.0 : 0.6};
    train::EncoderTaskScore s;
    s.task = "reversed";
    s.accuracy = s.macro_f1 = seed == 1 ? 1.0 : 0.5;
    u.tasks.push_back(s);
    r.units.push_back(u);
  }
  const std::string md = train::encoder_report_markdown(r);
  // mean 0.75, Student-t half-width 12.706 x 0.354 = 4.49: unclipped [-3.74, 5.24]
  EXPECT_NE(md.find("0.750 [0.000, 1.000]"), std::string::npos) << md;
  EXPECT_EQ(md.find("-3.7"), std::string::npos) << md;
  EXPECT_NE(md.find("≤ 0.500"), std::string::npos) << md;  // macro-F1's chance row is a bound
}

}  // namespace

// ---- issue 22: no number from an untrained position, n/a metrics, exit statuses, provenance ---------------

namespace {

// Runs fn with spdlog's default logger writing into a string; returns what was logged.
template <typename F>
std::string logged(F&& fn) {
  std::ostringstream os;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(os);
  auto old = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  try {
    fn();
  } catch (...) {
    spdlog::set_default_logger(old);
    throw;
  }
  spdlog::set_default_logger(old);
  return os.str();
}

// Rewrites one weight of <dir>/encoder.safetensors as NaN, metadata kept (the file has no checksum).
void poison_encoder(const std::string& dir) {
  SafetensorsFile f = load_safetensors(dir + "/encoder.safetensors");
  for (auto& [name, t] : f.tensors)
    if (t.dtype() == DType::Float32 || t.dtype() == DType::Float64) {
      auto v = t.to_vector();
      v[0] = std::numeric_limits<double>::quiet_NaN();
      t = Tensor::from_vector(v, t.shape(), t.dtype());
      break;
    }
  save_safetensors(dir + "/encoder.safetensors", f.tensors, f.metadata);
  // The checksum of the poisoned weights, as save_encoder writes it: the NaN, not the checksum, is what
  // eval and fill-mask must find.
  write_file_atomic(
      dir + "/encoder.json",
      nlohmann::json{{"format", "posgrad-encoder-checksum-1"},
                     {"checksums", {{"encoder.safetensors", hex64(fnv1a64(read_file(dir + "/encoder.safetensors")))}}}}
          .dump(2));
}

}  // namespace

// A learned table covers the 4x evaluation but only its first `length` rows are ever trained: the
// encoding says so (trained_max_length), and every 2x / 4x score of `learned` is n/a — NaN in the unit,
// null in result JSON, "n/a" in the CSV and the report, absent from the means — while RoPE's are numbers.
TEST(EncoderTrack, LearnedRowsNeverTrainedAreNotScored) {
  nn::PosEncConfig pc;
  pc.kind = "learned";
  pc.n_embd = 16;
  pc.n_head = 2;
  pc.n_layer = 1;
  pc.block_size = 64;
  Generator g(0);
  EXPECT_EQ(nn::make_position_encoding(pc, g)->trained_max_length(16), 16);
  EXPECT_EQ(nn::make_position_encoding(pc, g)->trained_max_length(100), 64);
  pc.kind = "rope";
  EXPECT_EQ(nn::make_position_encoding(pc, g)->trained_max_length(16), -1);

  const std::string text = tiny_corpus();
  auto tok = data::make_tokenizer("char", text);
  data::TokenDataset ds(text, *tok, 64);
  train::EncoderTrackConfig c = train::encoder_track_preset("tiny");
  c.methods = {"learned", "rope"};
  c.seeds = {1};
  const train::EncoderTrackResult r = train::run_encoder_track(c, ds, *tok, false);
  ASSERT_EQ(r.units.size(), 2u);
  const auto& learned = r.units[0];
  ASSERT_EQ(learned.method, "learned");
  EXPECT_TRUE(std::isfinite(learned.mlm_accuracy[0]));
  EXPECT_TRUE(std::isnan(learned.mlm_accuracy[1]) && std::isnan(learned.mlm_accuracy[2]));
  EXPECT_TRUE(std::isnan(learned.mlm_loss[1]) && std::isnan(learned.mlm_loss[2]));
  for (const auto& s : learned.tasks) {
    EXPECT_EQ(std::isnan(s.accuracy), s.multiplier > 1) << s.task << " x" << s.multiplier;
    EXPECT_EQ(std::isnan(s.macro_f1), s.multiplier > 1) << s.task << " x" << s.multiplier;
  }
  for (const auto& s : r.units[1].tasks) EXPECT_TRUE(std::isfinite(s.accuracy)) << "rope " << s.task;
  // result JSON: null, read back as NaN
  const nlohmann::json j = nlohmann::json::parse(train::encoder_unit_to_json(learned).dump());  // as in result.json
  EXPECT_TRUE(j["mlm_accuracy"][1].is_null());
  EXPECT_TRUE(j["tasks"].back()["accuracy"].is_null());
  EXPECT_TRUE(std::isnan(train::encoder_unit_from_json(j, "test").tasks.back().accuracy));
  // CSV and report
  const std::string csv = train::encoder_results_csv(r);
  EXPECT_NE(csv.find("learned,1,mlm_accuracy,2,n/a\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("learned,1,reversed/accuracy,4,n/a\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("learned,1,line_word/span_f1,2,n/a\n"), std::string::npos) << csv;
  EXPECT_EQ(csv.find("rope,1,reversed/accuracy,4,n/a"), std::string::npos) << csv;
  EXPECT_EQ(csv.find("learned,1,reversed/accuracy,1,n/a"), std::string::npos) << csv;
  EXPECT_TRUE(train::encoder_values(r, "learned", "reversed/accuracy", 2).empty());
  EXPECT_TRUE(train::encoder_values(r, "learned", "mlm_accuracy", 4).empty());
  EXPECT_EQ(train::encoder_values(r, "learned", "reversed/accuracy", 1).size(), 1u);
  const std::string md = train::encoder_report_markdown(r);
  const size_t row = md.find("| learned |");
  ASSERT_NE(row, std::string::npos);
  const std::string line = md.substr(row, md.find('\n', row) - row);
  char want[64];
  std::snprintf(want, sizeof want, "| learned | %.3f | n/a | n/a |", learned.mlm_accuracy[0]);
  EXPECT_EQ(line.rfind(want, 0), 0u) << line;
}

// Span F1 without any gold span is undefined, not 0: n/a in the tables, left out of the F1 composite.
TEST(EncoderTrack, SpanF1WithoutGoldSpansIsNotAveragedIn) {
  const train::SpanScore none = train::span_f1({{1, 2, 0}}, {{0, 0, 0}});
  EXPECT_TRUE(std::isnan(none.f1));
  EXPECT_TRUE(std::isnan(none.recall));
  EXPECT_DOUBLE_EQ(none.precision, 0.0);
  train::EncoderTrackResult r;
  r.config = train::encoder_track_preset("tiny");
  r.config.methods = {"rope", "deberta", "t5", "sinusoidal"};
  r.config.seeds = {1};
  r.config.tasks = {"reversed", "line_word"};
  r.config.multipliers = {1};
  for (const auto& m : r.config.methods) {
    train::EncoderUnitResult u;
    u.method = m;
    u.seed = 1;
    u.mlm_loss = {1.0};
    u.mlm_accuracy = {0.5};
    train::EncoderTaskScore seq{"reversed", 1, 16, 8, 0.9, 0.8};
    train::EncoderTaskScore lab{"line_word", 1, 16, 8, 0.7, 0.6, none.f1, none.precision, none.recall};
    u.tasks = {seq, lab};
    r.units.push_back(u);
  }
  const auto claims = train::judge_encoder_claims(r);
  ASSERT_EQ(claims.size(), 1u);  // one family: the accuracy and the F1 orderings
  // the F1 composite is reversed's macro-F1 alone (0.8), not (0.8 + 0) / 2
  EXPECT_NE(claims[0].measured.find("F1: rope 0.800"), std::string::npos) << claims[0].measured;
  EXPECT_TRUE(train::encoder_values(r, "rope", "line_word/span_f1", 1).empty());
  EXPECT_NE(train::encoder_results_csv(r).find("rope,1,line_word/span_f1,1,n/a\n"), std::string::npos);
  const std::string md = train::encoder_report_markdown(r);
  EXPECT_NE(md.find("| rope | n/a | 0.700 |"), std::string::npos) << md;
}

// A structural score (a |i - j| bias on `reversed`, 0.5 by construction) is marked as such beside the
// NoPE control, and a claim leaves that task out for every method when one of its methods is
// structural there; a task where none is stays in.
TEST(EncoderTrack, StructuralScoresAreMarkedBesideTheControlAndNotEvidence) {
  train::EncoderTrackResult r;
  r.config = train::encoder_track_preset("tiny");
  r.config.methods = {"none", "alibi", "kerple", "rope", "deberta", "t5", "sinusoidal"};
  r.config.seeds = {1, 2};
  r.config.tasks = {"reversed", "marker_segment"};
  r.config.multipliers = {1};
  for (const auto& m : r.config.methods)
    for (uint64_t seed : {1, 2}) {
      train::EncoderUnitResult u;
      u.method = m;
      u.seed = seed;
      u.mlm_loss = {1.0};
      u.mlm_accuracy = {0.5};
      const bool blind = m == "none" || m == "alibi" || m == "kerple";
      const double rev = blind ? 0.5 : 0.9, seg = m == "none" ? 0.25 : 0.6;
      u.tasks = {train::EncoderTaskScore{"reversed", 1, 16, 8, rev, rev},
                 train::EncoderTaskScore{"marker_segment", 1, 16, 8, seg, seg}};
      r.units.push_back(u);
    }
  const std::string md = train::encoder_report_markdown(r);
  EXPECT_NE(md.find("### NoPE control and scores fixed by construction"), std::string::npos) << md;
  EXPECT_NE(md.find("- reversed: NoPE accuracy 0.500 [0.500, 0.500], chance 0.500 — at chance"), std::string::npos)
      << md;
  EXPECT_NE(md.find("- reversed: alibi accuracy 0.500 [0.500, 0.500] — structural (0.5 by construction)"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("- reversed: kerple accuracy"), std::string::npos) << md;
  EXPECT_EQ(md.find("- marker_segment: alibi"), std::string::npos) << "only reversed is structural";
  EXPECT_EQ(md.find("- reversed: rope accuracy"), std::string::npos) << "rope tells a window from its mirror";
  EXPECT_EQ(train::encoder_structural_tasks(r.config, {"rope", "alibi"}), std::vector<std::string>{"reversed"});
  EXPECT_TRUE(train::encoder_structural_tasks(r.config, {"rope", "deberta", "t5", "sinusoidal"}).empty());
  // The article's chain has no structural method: both tasks count, nothing is said to be left out.
  for (const auto& c : train::judge_encoder_claims(r)) {
    EXPECT_EQ(c.metric.find("left out"), std::string::npos) << c.metric;
    EXPECT_NE(c.measured.find("rope 0.750"), std::string::npos) << c.measured;  // (0.9 + 0.6) / 2
  }
  // A structural score that is not at 0.5 is flagged rather than passed over.
  for (auto& u : r.units)
    if (u.method == "kerple") u.tasks[0].accuracy = 0.75;
  EXPECT_NE(train::encoder_report_markdown(r).find(
                "kerple accuracy 0.750 [0.750, 0.750] — structural (0.5 by construction; NOT at 0.5"),
            std::string::npos);
}

// The unit's log line gives the 1x masked-token accuracy whatever the order of the multipliers; a
// long evaluation logs its progress with an ETA (here after every batch), a short one nothing.
TEST(EncoderTrack, LogLineIsAt1xAndEvaluationReportsProgress) {
  const std::string text = tiny_corpus();
  auto tok = data::make_tokenizer("char", text);
  data::TokenDataset ds(text, *tok, 32);
  train::EncoderTrackConfig c = train::encoder_track_preset("tiny");
  c.methods = {"rope"};
  c.seeds = {1};
  c.tasks = {"reversed"};
  c.multipliers = {2, 1};
  train::EncoderTrackResult r;
  const std::string quiet = logged([&] { r = train::run_encoder_track(c, ds, *tok, true); });
  ASSERT_EQ(r.units.size(), 1u);
  char at1[32], at2[32];
  std::snprintf(at1, sizeof at1, "mlm acc %.4f", r.units[0].mlm_accuracy[1]);
  std::snprintf(at2, sizeof at2, "mlm acc %.4f", r.units[0].mlm_accuracy[0]);
  ASSERT_STRNE(at1, at2) << "the test needs different accuracies at 1x and 2x";
  EXPECT_NE(quiet.find(at1), std::string::npos) << quiet;
  EXPECT_EQ(quiet.find("ETA"), std::string::npos) << "default interval (10 s): a short evaluation logs no progress";
  train::set_encoder_progress_interval(0);
  const std::string loud = logged([&] { (void)train::run_encoder_track(c, ds, *tok, false); });
  train::set_encoder_progress_interval(10);
  EXPECT_NE(loud.find("encoder rope seed 1 | evaluating masked LM x2:"), std::string::npos) << loud;
  EXPECT_NE(loud.find("ETA"), std::string::npos) << loud;
}

// eval and fill-mask on an encoder with a NaN weight: exit 3 (numerical failure), not nan and 0.
// eval on a directory that holds no run names both kinds; the encoder's text is read by absolute
// path from any directory, and a changed text is refused (exit 1) naming what differs.
TEST(EncoderTrack, EvalAndFillMaskExitStatusesAndCorpusProvenance) {
  POSGRAD_REQUIRE_BIN();
  test::TempDir tmp;
  { std::ofstream(tmp.str("corpus.txt")) << tiny_corpus(); }
  std::filesystem::create_directories(tmp.str("elsewhere"));
  // a relative --corpus, run from tmp
  test::Proc p = test::run_posgrad(
      "compare --preset tiny --track encoder --methods learned --seeds 1 "
      "--encoder-tasks reversed --corpus corpus.txt --out-dir run",
      tmp.str());
  ASSERT_EQ(p.status, 0) << p.err;
  const std::string enc = tmp.str("run/encoder/learned/seed1");
  const auto loaded = train::load_encoder(enc);
  EXPECT_EQ(loaded->corpus.at("path").get<std::string>(), tmp.str("corpus.txt"));
  EXPECT_EQ(loaded->corpus.at("fnv1a64").get<std::string>(), hex64(fnv1a64(tiny_corpus())));
  // from another directory: the same text is found; 2x is n/a (untrained learned rows)
  p = test::run_posgrad("eval --run " + enc + " --contexts 16,32 --windows 4", tmp.str("elsewhere"));
  ASSERT_EQ(p.status, 0) << p.err;
  EXPECT_NE(p.out.find("(positions past 16 were never trained)"), std::string::npos) << p.out;
  // the corpus changed: refused, naming recorded and current size and hash
  { std::ofstream(tmp.str("corpus.txt"), std::ios::app) << "and more text\n"; }
  p = test::run_posgrad("eval --run " + enc, tmp.str("elsewhere"));
  EXPECT_EQ(p.status, 1) << p.err;
  EXPECT_NE(p.err.find("has changed since the encoder in"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("recorded " + std::to_string(tiny_corpus().size()) + " bytes"), std::string::npos) << p.err;
  { std::ofstream(tmp.str("corpus.txt")) << tiny_corpus(); }  // restored: accepted again
  p = test::run_posgrad("eval --run " + enc + " --contexts 16 --windows 4");
  EXPECT_EQ(p.status, 0) << p.err;
  // NaN weight
  poison_encoder(enc);
  p = test::run_posgrad("eval --run " + enc + " --contexts 16 --windows 4");
  EXPECT_EQ(p.status, 3) << p.out << p.err;
  EXPECT_NE(p.err.find("non-finite masked-token loss"), std::string::npos) << p.err;
  p = test::run_posgrad("fill-mask --run " + enc + " --text 'in the _eginning'");
  EXPECT_EQ(p.status, 3) << p.out << p.err;
  EXPECT_NE(p.err.find("not finite"), std::string::npos) << p.err;
  // a missing encoder directory
  p = test::run_posgrad("eval --run " + tmp.str("run/encoder/learned/seed9"));
  EXPECT_EQ(p.status, 1) << p.err;
  EXPECT_NE(p.err.find("no run in '" + tmp.str("run/encoder/learned/seed9") + "' (no such directory)"),
            std::string::npos)
      << p.err;
  EXPECT_NE(p.err.find("encoder.safetensors"), std::string::npos) << p.err;
}

// fill-mask on a learned encoder: positions past the pretraining length are rows of the table that
// no step trained, so a text that reaches them is refused (the table itself is longer).
TEST(EncoderTrack, FillMaskRefusesUntrainedLearnedRows) {
  const std::string text = tiny_corpus();
  auto tok = data::make_tokenizer("char", text);
  data::TokenDataset ds(text, *tok, 16);
  train::EncoderTrackConfig c = train::encoder_track_preset("tiny");
  c.seeds = {1};
  c.tasks = {"reversed"};
  const std::string dir = ::testing::TempDir() + "/posgrad_encoder_learned_fill";
  std::filesystem::remove_all(dir);
  (void)train::run_encoder_unit(c, "learned", 1, ds, *tok, dir);
  const auto enc = train::load_encoder(dir);
  ASSERT_EQ(enc->length, c.length);
  const int64_t table = enc->model->config().model.block_size;
  ASSERT_GT(table, c.length) << "the table must be longer than the pretraining length for this test";
  const std::string ok = "and_" + std::string(static_cast<size_t>(c.length) - 4, 'a');
  EXPECT_EQ(train::fill_mask(*enc, ok, '_', 1).filled.size(), ok.size());
  try {
    train::fill_mask(*enc, ok + "a", '_', 1);
    ADD_FAILURE() << "a text reaching an untrained row was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("never trained"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("at most " + std::to_string(c.length)), std::string::npos) << e.what();
  }
}

// A saved encoder copied into another method's folder (with its checksum file) is refused when the
// unit would be kept, like a copied result.json.
TEST(EncoderTrack, AKeptUnitsEncoderMustBeItsFoldersMethod) {
  const std::string text = tiny_corpus();
  auto tok = data::make_tokenizer("char", text);
  data::TokenDataset ds(text, *tok, 16);
  const std::string dir = ::testing::TempDir() + "/posgrad_encoder_copied";
  std::filesystem::remove_all(dir);
  train::EncoderTrackConfig c = train::encoder_track_preset("tiny");
  c.seeds = {1};
  c.tasks = {"reversed"};
  c.methods = {"none", "rope"};
  (void)train::run_encoder_track(c, ds, *tok, false, dir);
  for (const char* f : {"encoder.safetensors", "encoder.json"})
    std::filesystem::copy_file(dir + "/none/seed1/" + f, dir + "/rope/seed1/" + f,
                               std::filesystem::copy_options::overwrite_existing);
  try {
    (void)train::run_encoder_track(c, ds, *tok, false, dir);
    ADD_FAILURE() << "a copied encoder was kept";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("an encoder of method \"none\", but this is the folder of \"rope\""),
              std::string::npos)
        << e.what();
  }
}
