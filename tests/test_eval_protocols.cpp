// test_eval_protocols.cpp — the two evaluation protocols of the length measurements and the
// intervals over their windows: the sliding-window evaluation (train/evaluate.h) against a hand
// computation on a tiny model (stride = context is the non-overlapping evaluation bit for bit;
// stride 1 scores every target with the full context; window placement and token counts; errors);
// the percentile bootstrap over seeds and windows (compare/stats.h: one window per seed is the seed
// bootstrap, constant windows give zero width, the width of known cases); the lm study's results
// with both protocols (compare/studies/lm/lm.h: metrics, JSON round trip, results from before the
// protocol existed, the check rules).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "compare/claims.h"
#include "compare/compare.h"
#include "compare/options.h"
#include "compare/results.h"
#include "compare/stats.h"
#include "compare/studies/lm/lm.h"
#include "compare/study.h"
#include "compare/value_check.h"
#include "nn/gpt.h"
#include "train/evaluate.h"

using namespace posgrad;
using namespace posgrad::train;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

constexpr int64_t kVocab = 11;

std::unique_ptr<nn::GPT> tiny_model(int64_t block = 8) {
  nn::GPTConfig c;
  c.vocab_size = kVocab;
  c.block_size = block;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 16;
  c.pos.kind = "rope";
  Generator g(3), d(4);
  auto m = std::make_unique<nn::GPT>(c, g, d);
  m->eval();
  return m;
}

data::TokenSpan text(int64_t n, uint64_t seed) {
  Generator g(seed);
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<int64_t>(g.next_u64() % kVocab));
  return data::TokenSpan::from_vector(std::move(v));
}

// The next-token losses of one window by hand: tokens[s, s + C) through the model, then
// logsumexp(logits) - logit(target) in double at every position. (C)
std::vector<double> window_losses(nn::GPT& model, const data::TokenSpan& t, int64_t s, int64_t C) {
  NoGradGuard no_grad;
  std::vector<int64_t> x(t.data() + s, t.data() + s + C);
  const std::vector<float> logits = model.forward(Tensor::from_ints(x, {1, C})).contiguous().to_float_vector();
  std::vector<double> out;
  for (int64_t p = 0; p < C; ++p) {
    const float* l = logits.data() + p * kVocab;
    double mx = l[0];
    for (int64_t v = 1; v < kVocab; ++v) mx = std::max(mx, static_cast<double>(l[v]));
    double z = 0;
    for (int64_t v = 0; v < kVocab; ++v) z += std::exp(static_cast<double>(l[v]) - mx);
    out.push_back(mx + std::log(z) - static_cast<double>(l[t[s + p + 1]]));
  }
  return out;
}

// The sliding evaluation by hand: window starts s_0 = 0, s_w = min(w * stride, scored - C); window
// w scores its positions from C - (s_w - s_{w-1}). Checks every window's sum and count, and the
// total, against evaluate_sliding; returns the smallest context a target after window 0 had.
int64_t check_by_hand(nn::GPT& model, const data::TokenSpan& t, int64_t C, int64_t stride, int64_t scored) {
  const EvalResult e = evaluate_sliding(model, t, C, stride, scored, 0, Device::cpu(), 3);
  std::vector<int64_t> starts = {0};
  while (starts.back() + C < scored)
    starts.push_back(std::min(static_cast<int64_t>(starts.size()) * stride, scored - C));
  EXPECT_EQ(e.windows, static_cast<int64_t>(starts.size()));
  EXPECT_EQ(e.windows, sliding_windows(C, stride, scored));
  EXPECT_EQ(e.stride, stride);
  EXPECT_EQ(e.tokens, scored);
  EXPECT_TRUE(e.per_position_loss.empty());
  double total = 0;
  int64_t least_context = C, covered = 0;
  for (size_t w = 0; w < starts.size() && w < e.window_loss.size(); ++w) {
    const int64_t first = w == 0 ? 0 : C - (starts[w] - starts[w - 1]);
    const std::vector<double> l = window_losses(model, t, starts[w], C);
    double sum = 0;
    for (int64_t p = first; p < C; ++p) {
      sum += l[p];
      EXPECT_EQ(starts[w] + p + 1, covered + 1 + (p - first))
          << "window " << w << " scores a target twice or skips one";
      if (w > 0) least_context = std::min(least_context, p + 1);  // inputs tokens[s .. s + p]
    }
    covered += C - first;
    EXPECT_EQ(e.window_tokens[w], C - first) << "window " << w;
    EXPECT_NEAR(e.window_loss[w], sum, 1e-5 * sum) << "window " << w << " (start " << starts[w] << ")";
    total += sum;
  }
  EXPECT_EQ(covered, scored);
  EXPECT_NEAR(e.loss, total / static_cast<double>(scored), 1e-5 * e.loss);
  EXPECT_DOUBLE_EQ(e.perplexity, std::exp(e.loss));
  return least_context;
}

}  // namespace

// ---- the sliding-window evaluation --------------------------------------------------------------

// stride = context with the targets of 4 windows: the windows of evaluate_tokens, the same bits.
TEST(SlidingEvaluation, StrideEqualToTheContextIsTheNonOverlappingEvaluation) {
  auto model = tiny_model();
  const data::TokenSpan t = text(60, 1);
  for (int64_t C : {8, 5}) {
    const EvalResult plain = evaluate_tokens(*model, t, C, 4, 0, Device::cpu(), 3);
    const EvalResult slid = evaluate_sliding(*model, t, C, C, 4 * C, 0, Device::cpu(), 3);
    EXPECT_EQ(slid.windows, 4);
    EXPECT_EQ(plain.windows, 4);
    EXPECT_EQ(plain.stride, C);
    EXPECT_EQ(slid.tokens, plain.tokens);
    EXPECT_EQ(slid.loss, plain.loss) << "context " << C;
    EXPECT_EQ(slid.perplexity, plain.perplexity);
    EXPECT_EQ(slid.accuracy, plain.accuracy);
    EXPECT_EQ(slid.window_loss, plain.window_loss);
    EXPECT_EQ(slid.window_tokens, plain.window_tokens);
    EXPECT_EQ(plain.window_tokens, std::vector<int64_t>(4, C));
    // And the non-overlapping windows by hand: every target of its window, from position 0.
    check_by_hand(*model, t, C, C, 4 * C);
  }
}

// The window sums of the non-overlapping evaluation are its windows' losses (evaluate_tokens).
TEST(SlidingEvaluation, NonOverlappingWindowSumsMatchTheHandComputation) {
  auto model = tiny_model();
  const data::TokenSpan t = text(40, 2);
  const EvalResult e = evaluate_tokens(*model, t, 8, 3, 0, Device::cpu());
  ASSERT_EQ(e.window_loss.size(), 3u);
  for (int64_t w = 0; w < 3; ++w) {
    double sum = 0;
    for (double l : window_losses(*model, t, 8 * w, 8)) sum += l;
    EXPECT_NEAR(e.window_loss[w], sum, 1e-5 * sum);
  }
}

// Stride 1: after the first window, one window per target, each ending at its target, so every
// target from C + 1 on is predicted from the full C tokens (and the loss differs from the
// non-overlapping one, which gives the early tokens of each window short contexts).
TEST(SlidingEvaluation, StrideOneScoresEveryTargetWithTheFullContext) {
  auto model = tiny_model();
  const data::TokenSpan t = text(40, 3);
  const int64_t C = 8, N = 24;
  EXPECT_EQ(check_by_hand(*model, t, C, 1, N), C);
  const EvalResult e = evaluate_sliding(*model, t, C, 1, N, 0, Device::cpu());
  std::vector<int64_t> want(N - C + 1, 1);
  want[0] = C;
  EXPECT_EQ(e.window_tokens, want);
  EXPECT_NE(e.loss, evaluate_tokens(*model, t, C, N / C, 0, Device::cpu()).loss);
}

// Strides that do not divide the span: the last window is placed to end at the last target and
// scores fewer than the stride; every target after the first window has >= C - stride + 1 tokens.
TEST(SlidingEvaluation, WindowPlacementAndTokenCounts) {
  auto model = tiny_model();
  const data::TokenSpan t = text(40, 4);
  EXPECT_EQ(check_by_hand(*model, t, 8, 3, 20), 8 - 3 + 1);  // starts 0, 3, 6, 9, 12
  EXPECT_EQ(check_by_hand(*model, t, 8, 3, 21), 8 - 3 + 1);  // ..., 12, 13: the last scores 1
  EXPECT_EQ(check_by_hand(*model, t, 8, 4, 8), 8);           // one window: all of it
  check_by_hand(*model, t, 6, 4, 26);
  EXPECT_EQ(evaluate_sliding(*model, t, 8, 3, 21, 0, Device::cpu()).window_tokens,
            (std::vector<int64_t>{8, 3, 3, 3, 3, 1}));
  EXPECT_EQ(sliding_windows(2048, 1024, 8192), 7);  // the quick preset at 32x
  EXPECT_EQ(sliding_windows(64, 32, 8192), 255);    // and at 1x
  EXPECT_EQ(sliding_windows(16, 16, 16), 1);
  // The batch size changes nothing.
  EXPECT_EQ(evaluate_sliding(*model, t, 8, 3, 21, 0, Device::cpu(), 1).loss,
            evaluate_sliding(*model, t, 8, 3, 21, 0, Device::cpu(), 8).loss);
}

TEST(SlidingEvaluation, BadArgumentsAreValueErrorsNamingThem) {
  auto model = tiny_model();
  const data::TokenSpan t = text(30, 5);
  auto message = [&](int64_t C, int64_t stride, int64_t scored) -> std::string {
    try {
      (void)evaluate_sliding(*model, t, C, stride, scored, 0, Device::cpu());
    } catch (const ValueError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_TRUE(has(message(8, 0, 16), "stride 0, context 8, scored 16")) << message(8, 0, 16);
  EXPECT_TRUE(has(message(8, 9, 16), "stride 9")) << message(8, 9, 16);
  EXPECT_TRUE(has(message(8, 4, 7), "scored 7")) << message(8, 4, 7);
  EXPECT_TRUE(has(message(8, 4, 30), "30 scored targets need 31 tokens, the text has 30")) << message(8, 4, 30);
  EXPECT_EQ(message(8, 4, 29), "no error");
}

// ---- the bootstrap ------------------------------------------------------------------------------

// One window per seed: resampling the windows draws nothing, so the interval is the seed bootstrap
// of the per-seed perplexities, bit for bit.
TEST(Bootstrap, OneWindowPerSeedIsTheSeedBootstrap) {
  std::vector<WindowLosses> seeds;
  std::vector<double> ppl;
  for (int s = 0; s < 5; ++s) {
    const double loss = 40.0 + 3.0 * s + 0.25 * s * s;
    seeds.push_back(WindowLosses{{loss}, {32}});
    ppl.push_back(std::exp(loss / 32.0));
  }
  const BootstrapInterval two = perplexity_bootstrap(seeds, 2000, 7), one = bootstrap_mean(ppl, 2000, 7);
  ASSERT_TRUE(two.valid());
  EXPECT_EQ(two.low, one.low);
  EXPECT_EQ(two.high, one.high);
  EXPECT_LT(two.low, two.high);
  EXPECT_GE(two.low, *std::min_element(ppl.begin(), ppl.end()));
  EXPECT_LE(two.high, *std::max_element(ppl.begin(), ppl.end()));
}

// Every window of every seed the same mean loss: every resample gives the same perplexity.
TEST(Bootstrap, ConstantWindowsGiveZeroWidth) {
  std::vector<WindowLosses> seeds(3, WindowLosses{{2.5, 2.5, 2.5, 2.5}, {1, 1, 1, 1}});
  seeds.push_back(WindowLosses{{5.0, 2.5}, {2, 1}});  // another seed, the same loss per target
  const BootstrapInterval b = perplexity_bootstrap(seeds, 2000, 1);
  EXPECT_EQ(b.low, b.high);
  EXPECT_NEAR(b.low, std::exp(2.5), 1e-12);
  const BootstrapInterval m = bootstrap_mean({3.0, 3.0, 3.0}, 500, 1);
  EXPECT_EQ(m.low, 3.0);
  EXPECT_EQ(m.high, 3.0);
}

// The widths of cases with a known answer: the bootstrap of a mean of n values spreads as
// sigma / sqrt(n) (sigma with n in the denominator), so the 95% interval is about mean +- 1.96
// sigma / sqrt(n); one seed's windows: exp(mean loss +- 1.96 sd / sqrt(W)) (delta method), and the
// seeds' noise adds to the windows'.
TEST(Bootstrap, WidthsOfKnownCases) {
  std::vector<double> v;
  for (int i = 0; i < 50; ++i) v.push_back(10.0 + (i % 10));  // mean 14.5, sigma^2 = 8.25
  const BootstrapInterval m = bootstrap_mean(v, 4000, 3);
  const double half = 1.96 * std::sqrt(8.25 / 50.0);
  EXPECT_NEAR(m.low, 14.5 - half, 0.12 * half);
  EXPECT_NEAR(m.high, 14.5 + half, 0.12 * half);

  WindowLosses one;
  for (int w = 0; w < 64; ++w) {
    one.loss.push_back(10.0 * (2.0 + 0.05 * ((w * 7) % 9 - 4)));  // per-target loss 2 +- 0.2, 10 targets
    one.tokens.push_back(10);
  }
  double sd = 0;
  for (double l : one.loss) sd += (l / 10 - 2.0) * (l / 10 - 2.0);
  sd = std::sqrt(sd / 64);
  const BootstrapInterval w = perplexity_bootstrap({one}, 4000, 5);
  EXPECT_NEAR(std::log(w.low), 2.0 - 1.96 * sd / 8, 0.15 * 1.96 * sd / 8);
  EXPECT_NEAR(std::log(w.high), 2.0 + 1.96 * sd / 8, 0.15 * 1.96 * sd / 8);

  // Seeds that differ as well: wider than the windows alone, and than the seeds alone.
  std::vector<WindowLosses> seeds;
  std::vector<double> per_seed;
  for (int s = 0; s < 4; ++s) {
    WindowLosses x = one;
    for (auto& l : x.loss) l += 10.0 * 0.1 * s;
    seeds.push_back(x);
    double sum = 0;
    for (double l : x.loss) sum += l;
    per_seed.push_back(std::exp(sum / 640.0));
  }
  const BootstrapInterval both = perplexity_bootstrap(seeds, 2000, 5), seeds_only = bootstrap_mean(per_seed, 2000, 5);
  EXPECT_GT(both.high - both.low, w.high - w.low);
  EXPECT_GT(both.high - both.low, seeds_only.high - seeds_only.low);
  // The same inputs and seed: the same bits; another seed: other draws.
  EXPECT_EQ(perplexity_bootstrap(seeds, 2000, 5).low, both.low);
  EXPECT_NE(perplexity_bootstrap(seeds, 2000, 6).low, both.low);
}

TEST(Bootstrap, NonFiniteSeedsAreLeftOutAndBadInputIsAValueError) {
  std::vector<WindowLosses> seeds = {{{1.0, 2.0}, {1, 1}}, {{INFINITY, 2.0}, {1, 1}}};
  const BootstrapInterval b = perplexity_bootstrap(seeds, 100, 1);
  EXPECT_EQ(b.non_finite, 1);
  EXPECT_TRUE(b.valid());
  EXPECT_FALSE(perplexity_bootstrap({{{NAN}, {1}}}, 100, 1).valid());
  EXPECT_THROW((void)perplexity_bootstrap({{{1.0}, {1, 2}}}, 100, 1), ValueError);
  EXPECT_THROW((void)perplexity_bootstrap({{{1.0}, {0}}}, 100, 1), ValueError);
  EXPECT_THROW((void)perplexity_bootstrap({{{}, {}}}, 100, 1), ValueError);
  EXPECT_THROW((void)perplexity_bootstrap({{{1.0}, {1}}}, 1, 1), ValueError);
  EXPECT_THROW((void)bootstrap_mean({1.0, 2.0}, 0, 1), ValueError);
}

// ---- the lm study's results with both protocols --------------------------------------------------

namespace {

// A result of the tiny preset's configuration with both protocols: `seeds` rope units whose
// per-window losses are `per_target` per target (seed s adds 0.1 s), consistent with their means.
ComparisonResult two_protocols(int seeds = 2) {
  ComparisonResult r;
  r.config = compare_preset("tiny");
  r.config.methods = {"rope"};
  r.config.seeds.clear();
  const int64_t block = r.config.base.model.block_size;
  for (int s = 1; s <= seeds; ++s) {
    r.config.seeds.push_back(static_cast<uint64_t>(s));
    UnitResult u;
    u.method = "rope";
    u.seed = static_cast<uint64_t>(s);
    LmResult& l = u.parts.get<LmResult>();
    for (int64_t k : r.config.eval_multipliers) {
      const int64_t C = k * block, W = std::max<int64_t>(1, r.config.eval_tokens / C), S = eval_stride(r.config, C);
      auto make = [&](const std::vector<int64_t>& tokens, double base) {
        LengthResult x{C, static_cast<int64_t>(tokens.size()), 0, 0, 0.25};
        double sum = 0;
        int64_t n = 0;
        for (size_t w = 0; w < tokens.size(); ++w) {
          x.window_loss.push_back((base + 0.1 * s + 0.01 * static_cast<double>(w % 3)) *
                                  static_cast<double>(tokens[w]));
          x.window_tokens.push_back(tokens[w]);
          sum += x.window_loss.back();
          n += tokens[w];
        }
        x.loss = sum / static_cast<double>(n);
        x.perplexity = std::exp(x.loss);
        return x;
      };
      l.lengths.push_back(make(std::vector<int64_t>(static_cast<size_t>(W), C), 2.0 + 0.1 * static_cast<double>(k)));
      std::vector<int64_t> slid = {C};
      for (int64_t left = W * C - C; left > 0; left -= S) slid.push_back(std::min(S, left));
      l.sliding.push_back(make(slid, 1.9 + 0.05 * static_cast<double>(k)));
    }
    for (const auto& row : variant_rows("rope")) l.variants[row] = l.lengths;
    l.per_position_loss.assign(static_cast<size_t>(r.config.per_position_multiplier * block), 2.0);
    r.units.push_back(std::move(u));
  }
  return r;
}

// The lm study's checks of a unit (the other studies' parts are not in these results).
void check(const UnitResult& u, const CompareConfig& c) {
  study_entry("lm").check_unit(u, c, ValueCheck("result.json", ""), "");
}

std::string refusal(const UnitResult& u, const CompareConfig& c) {
  try {
    check(u, c);
  } catch (const IoError& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST(LmProtocols, OptionDefaultRangeAndTheSlidingMetrics) {
  CompareConfig c = compare_preset("quick");
  EXPECT_EQ(c.of<LmSettings>().eval_stride_fraction, 0.5);
  EXPECT_EQ(eval_stride(c, 2048), 1024);
  c.of<LmSettings>().eval_stride_fraction = 0.3;
  EXPECT_EQ(eval_stride(c, 10), 3);
  c.of<LmSettings>().eval_stride_fraction = 1e-9;
  EXPECT_EQ(eval_stride(c, 64), 1);
  c.of<LmSettings>().eval_stride_fraction = 0;
  EXPECT_EQ(eval_stride(c, 64), 0);
  c.of<LmSettings>().eval_stride_fraction = 1.5;
  try {
    c.validate();
    ADD_FAILURE() << "a fraction of 1.5 accepted";
  } catch (const UsageError& e) {
    EXPECT_TRUE(has(e.what(), "--eval-stride-fraction")) << e.what();
    EXPECT_TRUE(has(e.what(), "1.5")) << e.what();
  }
  EXPECT_EQ(lm_metric(Quantity::Perplexity, 4, Protocol::Sliding).name(), "perplexity_sliding_x4");
  EXPECT_EQ(lm_metric(Quantity::Perplexity, 1, Protocol::Sliding).name(), "perplexity_sliding_x1");
  EXPECT_EQ(lm_metric(Quantity::PerplexityRatio, 4, Protocol::Sliding).name(), "ppl_ratio_sliding_x4");
  EXPECT_EQ(lm_metric(Quantity::Perplexity, 4).name(), "perplexity_x4");
  EXPECT_THROW((void)lm_metric(Quantity::Accuracy, 4, Protocol::Sliding), std::invalid_argument);
  // results.csv: the sliding metrics after every other, none with the protocol off.
  c = compare_preset("tiny");
  std::vector<std::string> on;
  for (const Metric& m : csv_metrics(c)) on.push_back(m.name());
  c.of<LmSettings>().eval_stride_fraction = 0;
  std::vector<std::string> off;
  for (const Metric& m : csv_metrics(c)) off.push_back(m.name());
  EXPECT_EQ(on.size(), off.size() + 5);  // 1x, 2x, 4x and the two ratios
  EXPECT_NE(std::find(on.begin(), on.end(), "ppl_ratio_sliding_x4"), on.end());
  EXPECT_EQ(std::find(off.begin(), off.end(), "perplexity_sliding_x1"), off.end());
}

// An option added later (opt::added_later): a file without it reads as the value it stands for;
// any other missing key is still refused.
TEST(LmProtocols, AFileWithoutTheOptionReadsAsOff) {
  CompareConfig c = compare_preset("tiny");
  nlohmann::json j = c.to_json();
  j.erase("eval_stride_fraction");
  CompareConfig back;
  opt::from_json(compare_options(), back, j, "config.json", /*require_all=*/true);
  EXPECT_EQ(back.of<LmSettings>().eval_stride_fraction, 0.0);
  j.erase("eval_tokens");
  try {
    opt::from_json(compare_options(), back, j, "config.json", true);
    ADD_FAILURE() << "a missing eval_tokens accepted";
  } catch (const UsageError& e) {
    EXPECT_TRUE(has(e.what(), "missing key 'eval_tokens'")) << e.what();
  }
}

TEST(LmProtocols, ValuesOfBothProtocolsAndTheBootstrap) {
  const ComparisonResult r = two_protocols();
  for (const auto& u : r.units) EXPECT_NO_THROW(check(u, r.config));
  const auto slid = values(r, "rope", lm_metric(Quantity::Perplexity, 4, Protocol::Sliding));
  ASSERT_EQ(slid.size(), 2u);
  EXPECT_EQ(slid[0], r.units[0].parts.value<LmResult>().sliding[2]->perplexity);
  const auto ratio = values(r, "rope", lm_metric(Quantity::PerplexityRatio, 4, Protocol::Sliding));
  EXPECT_DOUBLE_EQ(ratio[0], slid[0] / r.units[0].parts.value<LmResult>().sliding[0]->perplexity);
  // The derived rows have no sliding values; they do have windows for the bootstrap.
  EXPECT_TRUE(values(r, "rope+yarn", lm_metric(Quantity::Perplexity, 4, Protocol::Sliding)).empty());
  EXPECT_FALSE(length_bootstrap(r, "rope+yarn", 4, Protocol::Sliding).valid());
  EXPECT_TRUE(length_bootstrap(r, "rope+yarn", 4, Protocol::NonOverlapping).valid());
  // The bootstrap brackets the mean over seeds and sees the windows' spread.
  for (Protocol p : {Protocol::NonOverlapping, Protocol::Sliding})
    for (int64_t k : r.config.eval_multipliers) {
      const BootstrapInterval b = length_bootstrap(r, "rope", k, p);
      const Summary s = summary(r, "rope", lm_metric(Quantity::Perplexity, k, p));
      ASSERT_TRUE(b.valid());
      EXPECT_LE(b.low, s.mean);
      EXPECT_GE(b.high, s.mean);
      EXPECT_LT(b.low, b.high);
    }
  // One seed: the t interval is n/a, the bootstrap over its windows is not.
  const ComparisonResult one = two_protocols(1);
  EXPECT_FALSE(summary(one, "rope", lm_metric(Quantity::Perplexity, 1)).has_interval());
  const BootstrapInterval w = length_bootstrap(one, "rope", 1, Protocol::NonOverlapping);
  ASSERT_TRUE(w.valid());
  EXPECT_LT(w.low, w.high);
}

TEST(LmProtocols, JsonRoundTripIsExact) {
  const ComparisonResult r = two_protocols();
  const ComparisonResult back = comparison_from_json(nlohmann::json::parse(to_json(r).dump()), "results.json");
  EXPECT_EQ(back.config.of<LmSettings>().eval_stride_fraction, 0.5);
  ASSERT_EQ(back.units.size(), r.units.size());
  for (size_t i = 0; i < r.units.size(); ++i) {
    const LmResult &a = r.units[i].parts.value<LmResult>(), &b = back.units[i].parts.value<LmResult>();
    ASSERT_EQ(a.sliding.size(), b.sliding.size());
    for (size_t k = 0; k < a.lengths.size(); ++k)
      for (const auto& [x, y] : {std::pair{&a.lengths[k], &b.lengths[k]}, std::pair{&a.sliding[k], &b.sliding[k]}}) {
        ASSERT_TRUE(y->has_value());
        EXPECT_EQ((*x)->window_loss, (*y)->window_loss);
        EXPECT_EQ((*x)->window_tokens, (*y)->window_tokens);
        EXPECT_EQ((*x)->loss, (*y)->loss);
        EXPECT_EQ((*x)->windows, (*y)->windows);
      }
    EXPECT_EQ(a.variants.at("rope+yarn")[1]->window_loss, b.variants.at("rope+yarn")[1]->window_loss);
  }
  EXPECT_EQ(length_bootstrap(back, "rope", 2, Protocol::Sliding).low,
            length_bootstrap(r, "rope", 2, Protocol::Sliding).low);
}

// A results.json from before: no "sliding", no per-window losses, no eval_stride_fraction in its
// configuration. It reads, passes its checks, and the new measurements read "not measured" (a real
// run's file, with every study's part: test_compare.cpp, TinyPresetWritesTheReportAndIsReproducible).
TEST(LmProtocols, ResultsFromBeforeTheProtocolReadAsNotMeasured) {
  nlohmann::json j = to_json(two_protocols());
  j["config"].erase("eval_stride_fraction");
  for (auto& u : j["units"]) {
    u.erase("study_keys");  // a file that old has no list of its studies' keys either
    u.erase("sliding");
    for (auto& l : u["lengths"]) {
      l.erase("window_loss");
      l.erase("window_tokens");
    }
    for (auto& [name, v] : u["variants"].items())
      for (auto& l : v) {
        l.erase("window_loss");
        l.erase("window_tokens");
      }
  }
  const ComparisonResult old = comparison_from_json(nlohmann::json::parse(j.dump()), "old/results.json");
  for (const auto& u : old.units) EXPECT_NO_THROW(check(u, old.config));
  EXPECT_EQ(old.config.of<LmSettings>().eval_stride_fraction, 0.0) << "made before sliding windows: off";
  EXPECT_TRUE(old.units[0].parts.value<LmResult>().sliding.empty());
  EXPECT_TRUE(values(old, "rope", lm_metric(Quantity::Perplexity, 2, Protocol::Sliding)).empty());
  EXPECT_EQ(values(old, "rope", lm_metric(Quantity::Perplexity, 2)).size(), 2u);
  EXPECT_FALSE(length_bootstrap(old, "rope", 2, Protocol::NonOverlapping).valid());
  for (const auto& v : judge_claims(old)) {
    if (v.id != "f") continue;
    EXPECT_TRUE(has(v.protocol, "sliding windows: off")) << v.protocol;
  }
  // A unit's result.json of the new kind without the sliding key: not measured, accepted.
  ComparisonResult r = two_protocols();
  r.units[0].parts.get<LmResult>().sliding.clear();
  EXPECT_NO_THROW(check(r.units[0], r.config));
}

TEST(LmProtocols, ChecksOfTheNewFieldsNameTheValue) {
  const ComparisonResult r = two_protocols();
  auto edited = [&](auto edit) {
    UnitResult u = r.units[0];
    edit(u.parts.get<LmResult>());
    return refusal(u, r.config);
  };
  std::string m = edited([](LmResult& l) { l.lengths[1]->window_loss[0] += 1.0; });
  EXPECT_TRUE(has(m, "lengths[1].window_loss: sums to a mean loss of")) << m;
  m = edited([](LmResult& l) { l.lengths[0]->window_tokens.pop_back(); });
  EXPECT_TRUE(has(m, "lengths[0].window_tokens: holds 7 entries, expected 8")) << m;
  m = edited([](LmResult& l) { l.lengths[0]->window_tokens[0] = 15; });
  EXPECT_TRUE(has(m, "lengths[0].window_tokens[0] = 15: a window scores 16 targets")) << m;
  m = edited([](LmResult& l) { l.sliding[2]->windows = 2; });
  EXPECT_TRUE(has(m, "sliding[2].windows = 2: expected 3 (the windows of stride 32 over the 128 targets")) << m;
  m = edited([](LmResult& l) { l.sliding[1] = std::nullopt; });
  EXPECT_TRUE(has(m, "sliding[1] = null: measured wherever the non-overlapping windows were")) << m;
  m = edited([](LmResult& l) { l.sliding.pop_back(); });
  EXPECT_TRUE(has(m, "sliding: holds 2 entries, expected 3")) << m;
  m = edited([](LmResult& l) {
    l.sliding[0]->window_loss.clear();
    l.sliding[0]->window_tokens.clear();
  });
  EXPECT_TRUE(has(m, "sliding[0]: has no window_loss and window_tokens")) << m;
  m = edited([](LmResult& l) { l.sliding[1]->window_tokens[1] = 17; });
  EXPECT_TRUE(has(m, "sliding[1].window_tokens[1] = 17: a window scores 1 to 16 targets")) << m;
  CompareConfig off = r.config;
  off.of<LmSettings>().eval_stride_fraction = 0;
  m = refusal(r.units[0], off);
  EXPECT_TRUE(has(m, "sliding: sliding-window lengths in an experiment with --eval-stride-fraction 0")) << m;
}
