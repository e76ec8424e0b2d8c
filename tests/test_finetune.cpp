// test_finetune.cpp — the studies' fine-tuning loop (train/finetune.h) and derived seeds
// (train/seeds.h): the learning rate each step runs at (warm-up, cosine, constant), first / final /
// tail losses, gradient accumulation, a stop signal, a non-finite loss and a bad spec named by the
// label, the decoder form taking training_step's steps bit for bit, and stream() deterministic and
// distinct per tag. Not here: the studies that call the loop (their own tests).
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "data/fileio.h"
#include "nn/module.h"
#include "support/test_util.h"
#include "tensor/random.h"
#include "train/evaluate.h"
#include "train/finetune.h"
#include "train/interrupt.h"
#include "train/seeds.h"
#include "train/trainer.h"

using namespace posgrad;
using posgrad::test::thrown_message;

namespace {

// One parameter w of n elements, all 0 (float64). With the loss sum(w) its gradient is 1 in every
// element at every step, so AdamW's bias-corrected step is lr · 1 / (sqrt(1) + eps), eps = 1e-8, in
// real numbers: w falls by the step's learning rate over 1 + 1e-8, which the closure can read back.
struct Flat : nn::Module {
  Tensor w;
  explicit Flat(int64_t n = 1) { w = register_parameter("w", Tensor::zeros({n}, DType::Float64)); }
  double value() const { return w.to_vector()[0]; }
};

train::FinetuneSpec spec_of(int64_t iterations, int64_t warmup, train::FinetuneSchedule schedule) {
  train::FinetuneSpec s;
  s.label = "test fine-tuning (flat seed 1)";
  s.iterations = iterations;
  s.lr = 1e-2;
  s.min_lr = 1e-3;
  s.warmup = warmup;
  s.schedule = schedule;
  s.grad_clip = 0;  // the unit gradient is not clipped
  return s;
}

// The learning rate of each step as the loop applied it: w before step k minus w after it.
std::vector<double> applied_rates(const train::FinetuneSpec& spec) {
  Flat m;
  std::vector<double> before;
  (void)train::finetune(m, spec, [&](int64_t) {
    before.push_back(m.value());
    return sum(m.w);
  });
  before.push_back(m.value());
  std::vector<double> lr;
  for (size_t k = 0; k + 1 < before.size(); ++k) lr.push_back(before[k] - before[k + 1]);
  return lr;
}

std::vector<float> weights(const nn::Module& m) {
  std::vector<float> all;
  for (const auto& [n, t] : m.named_parameters()) {
    const auto v = t.to_float_vector();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

}  // namespace

TEST(Finetune, WarmupThenCosineRates) {
  // 20 steps, 4 of warm-up, cosine from 1e-2 to 1e-3 at step 20 (LRSchedule, train/optim.h).
  const auto spec = spec_of(20, 4, train::FinetuneSchedule::cosine);
  const train::LRSchedule s = spec.lr_schedule();
  EXPECT_DOUBLE_EQ(s.at(0), 1e-2 / 5);
  EXPECT_DOUBLE_EQ(s.at(3), 1e-2 * 4 / 5);
  EXPECT_DOUBLE_EQ(s.at(4), 1e-2);
  EXPECT_NEAR(s.at(12), 1e-3 + 0.5 * (1e-2 - 1e-3), 1e-15);  // half way through the decay
  EXPECT_NEAR(s.at(19), 1e-3 + 0.5 * (1 + std::cos(M_PI * 15 / 16)) * (1e-2 - 1e-3), 1e-15);
  const std::vector<double> lr = applied_rates(spec);
  ASSERT_EQ(lr.size(), 20u);
  for (int64_t k = 0; k < 20; ++k) EXPECT_NEAR(lr[k], s.at(k) / (1 + 1e-8), 1e-10 * s.at(k)) << "step " << k;
}

TEST(Finetune, WarmupThenConstantRates) {
  const auto spec = spec_of(10, 2, train::FinetuneSchedule::constant);
  const train::LRSchedule s = spec.lr_schedule();
  EXPECT_DOUBLE_EQ(s.at(0), 1e-2 / 3);
  EXPECT_DOUBLE_EQ(s.at(1), 1e-2 * 2 / 3);
  for (int64_t k = 2; k < 10; ++k) EXPECT_EQ(s.at(k), 1e-2) << "step " << k;  // min_lr plays no part
  const std::vector<double> lr = applied_rates(spec);
  ASSERT_EQ(lr.size(), 10u);
  for (int64_t k = 0; k < 10; ++k) EXPECT_NEAR(lr[k], s.at(k) / (1 + 1e-8), 1e-10 * s.at(k)) << "step " << k;
  EXPECT_EQ(train::tenth_warmup(5), 1);
  EXPECT_EQ(train::tenth_warmup(200), 20);
}

TEST(Finetune, FirstFinalAndTailLosses) {
  // Loss k + 1 at step k (the closure's own number, differentiable through w · 0): first 1, final 20,
  // tail the mean of the last two (19, 20).
  Flat m;
  auto spec = spec_of(20, 1, train::FinetuneSchedule::cosine);
  const train::FinetuneResult r =
      train::finetune(m, spec, [&](int64_t step) { return sum(m.w) * 0.0 + static_cast<double>(step + 1); });
  EXPECT_EQ(r.steps, 20);
  EXPECT_EQ(r.first_loss, 1.0);
  EXPECT_EQ(r.final_loss, 20.0);
  EXPECT_DOUBLE_EQ(r.tail_loss, 19.5);
  EXPECT_FALSE(m.is_training());  // returned in eval mode
  // No steps: nothing called, zeros.
  spec.iterations = 0;
  int calls = 0;
  const auto none = train::finetune(m, spec, [&](int64_t) {
    ++calls;
    return sum(m.w);
  });
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(none.steps, 0);
  EXPECT_EQ(none.final_loss, 0.0);
  EXPECT_EQ(none.tail_loss, 0.0);
}

TEST(Finetune, GradientAccumulationCallsEachMicroBatchAndAveragesTheLoss) {
  Flat m;
  auto spec = spec_of(3, 1, train::FinetuneSchedule::constant);
  spec.grad_accum = 2;
  std::vector<int64_t> steps;
  const auto r = train::finetune(m, spec, [&](int64_t step) {
    steps.push_back(step);
    return sum(m.w) * 0.0 + static_cast<double>(steps.size());  // micro-batch losses 1, 2 | 3, 4 | 5, 6
  });
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(r.first_loss, 1.5);
  EXPECT_EQ(r.final_loss, 5.5);
}

TEST(Finetune, StopSignalThrowsInterruptedBeforeTheNextStep) {
  train::install_interrupt_handlers();
  Flat m;
  auto spec = spec_of(10, 1, train::FinetuneSchedule::cosine);
  spec.run_dir = "/tmp/some-run";
  spec.on_interrupt = "the same command runs it again";
  int64_t last = -1;
  try {
    (void)train::finetune(m, spec, [&](int64_t step) {
      last = step;
      if (step == 2) std::raise(SIGINT);  // recorded by the handler: the loop stops after this step
      return sum(m.w);
    });
    ADD_FAILURE() << "not interrupted";
  } catch (const train::Interrupted& e) {
    EXPECT_EQ(e.step, 3);  // steps done
    EXPECT_EQ(e.signal, SIGINT);
    EXPECT_EQ(e.run_dir, "/tmp/some-run");
    EXPECT_EQ(std::string(e.what()),
              "test fine-tuning (flat seed 1) interrupted by SIGINT after 3 of 10 steps "
              "(the same command runs it again)");
  }
  EXPECT_EQ(last, 2);
  EXPECT_NEAR(m.value(), -(1e-2 / 2 + 1e-2 + spec.lr_schedule().at(2)), 1e-9);  // three steps taken
  // A signal before the first step: no step, no call.
  ASSERT_TRUE(train::interrupt_requested());
  int calls = 0;
  spec.on_interrupt.clear();
  const std::string msg = thrown_message<train::Interrupted>([&] {
    (void)train::finetune(m, spec, [&](int64_t) {
      ++calls;
      return sum(m.w);
    });
  });
  EXPECT_EQ(msg, "test fine-tuning (flat seed 1) interrupted by SIGINT after 0 of 10 steps");
  EXPECT_EQ(calls, 0);
  train::clear_interrupt();
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

TEST(Finetune, NonFiniteLossNamesTheLabelAndStepBeforeAnyUpdate) {
  Flat m;
  const auto spec = spec_of(10, 1, train::FinetuneSchedule::cosine);
  double at_failure = 0;
  const std::string msg = thrown_message<train::NonFiniteLoss>([&] {
    (void)train::finetune(m, spec, [&](int64_t step) {
      if (step == 4) {
        at_failure = m.value();
        return sum(m.w) * std::numeric_limits<double>::quiet_NaN();
      }
      return sum(m.w);
    });
  });
  EXPECT_EQ(msg, "test fine-tuning (flat seed 1): loss is nan at step 5 (micro-batch 0)");
  EXPECT_EQ(m.value(), at_failure);  // the failing step changed nothing
  // An infinite gradient with a finite loss: the gradient norm is named.
  Flat g;
  const std::string inf = thrown_message<train::NonFiniteLoss>([&] {
    (void)train::finetune(g, spec, [&](int64_t) {
      return sum(g.w) * 1e308 * 1e308 + 1.0;  // 0 forward; d/dw = 1e308 · 1e308 = inf
    });
  });
  EXPECT_NE(inf.find("test fine-tuning (flat seed 1): gradient norm is"), std::string::npos) << inf;
  EXPECT_NE(inf.find("at step 1"), std::string::npos) << inf;
}

TEST(Finetune, BadSpecIsAValueErrorNamingTheLabelAndField) {
  Flat m;
  auto expect_error = [&](train::FinetuneSpec s, const std::string& field) {
    const std::string msg =
        thrown_message<ValueError>([&] { (void)train::finetune(m, s, [&](int64_t) { return sum(m.w); }); });
    EXPECT_NE(msg.find("test fine-tuning (flat seed 1)"), std::string::npos) << msg;
    EXPECT_NE(msg.find(field), std::string::npos) << msg;
  };
  auto s = spec_of(10, 1, train::FinetuneSchedule::cosine);
  auto t = s;
  t.iterations = -1;
  expect_error(t, "iterations");
  t = s;
  t.grad_accum = 0;
  expect_error(t, "grad_accum");
  t = s;
  t.lr = std::nan("");
  expect_error(t, "lr");
  t = s;
  t.beta2 = 1.0;
  expect_error(t, "betas");
  t = s;
  t.warmup = -2;
  expect_error(t, "warm-up");
}

// The decoder form is training_step (trainer.h) step for step: the same weights bit for bit, with
// grad accumulation and clipping on.
TEST(Finetune, DecoderFormTakesTrainingStepsStepsBitForBit) {
  nn::GPTConfig mc;
  mc.vocab_size = 11;
  mc.block_size = 8;
  mc.n_layer = 1;
  mc.n_head = 2;
  mc.n_embd = 16;
  mc.dropout = 0.1;
  mc.pos.kind = "rope";
  auto batch = [](Generator& g) {
    std::vector<int64_t> xs, ys;
    for (int i = 0; i < 2 * 8; ++i) {
      xs.push_back(static_cast<int64_t>(g.next_u64() % 11));
      ys.push_back(static_cast<int64_t>(g.next_u64() % 11));
    }
    return std::make_pair(Tensor::from_ints(xs, {2, 8}), Tensor::from_ints(ys, {2, 8}));
  };
  train::FinetuneSpec spec;
  spec.label = "decoder";
  spec.iterations = 6;
  spec.lr = 3e-3;
  spec.min_lr = 3e-4;
  spec.warmup = 2;
  spec.beta1 = 0.9;
  spec.beta2 = 0.98;
  spec.weight_decay = 0.1;
  spec.grad_clip = 0.5;
  spec.grad_accum = 2;

  Generator ga(3), da(4), dataa(5);
  nn::GPT a(mc, ga, da);
  train::AdamW opt(train::decay_groups(a.named_parameters(), spec.weight_decay),
                   train::AdamWOptions(spec.lr).betas(spec.beta1, spec.beta2));
  std::vector<double> losses_a;
  for (int64_t it = 0; it < spec.iterations; ++it)
    losses_a.push_back(
        train::training_step(a, opt, spec.lr_schedule(), it, spec.grad_accum, spec.grad_clip, Device::cpu(), [&] {
          return batch(dataa);
        }).loss);

  Generator gb(3), db(4), datab(5);
  nn::GPT b(mc, gb, db);
  std::vector<int64_t> seen;
  const auto r = train::finetune(b, spec, Device::cpu(), [&](int64_t step) {
    seen.push_back(step);
    return batch(datab);
  });
  EXPECT_EQ(seen.size(), 12u);
  EXPECT_EQ(r.first_loss, losses_a.front());
  EXPECT_EQ(r.final_loss, losses_a.back());
  EXPECT_EQ(weights(a), weights(b));
}

TEST(Seeds, StreamIsDeterministicAndDistinctPerTag) {
  // Pinned: the encoder track's generators are seeded by it, so a change moves its results.
  static_assert(train::stream(1, 1) == 0x2f2a45881d06c3adull);
  EXPECT_EQ(train::stream(0, 0), 0x2848d6a4a7b28bc1ull);
  EXPECT_EQ(train::stream(7, 6), 0xd384b6707b8dc720ull);
  std::set<uint64_t> seen;
  for (uint64_t seed : {0ull, 1ull, 2ull, 3ull, 1000003ull, ~0ull})
    for (uint64_t tag = 0; tag < 1000; ++tag) {
      EXPECT_EQ(train::stream(seed, tag), train::stream(seed, tag));
      seen.insert(train::stream(seed, tag));
    }
  EXPECT_EQ(seen.size(), 6u * 1000u);  // no two (seed, tag) pairs share a seed
  // Named tags: FNV-1a of the name, distinct names distinct seeds, stable across calls.
  EXPECT_EQ(train::stream(5, "passkey.depths"), train::stream(5, fnv1a64("passkey.depths")));
  EXPECT_EQ(train::stream(5, "passkey.depths"), train::stream(5, std::string("passkey.depths")));
  const std::vector<std::string> names{"", "init", "dropout", "train", "train ", "Train", "eval", "mask"};
  std::set<uint64_t> named;
  for (const auto& n : names) named.insert(train::stream(5, n));
  EXPECT_EQ(named.size(), names.size());
  EXPECT_NE(train::stream(5, "init"), train::stream(6, "init"));
}
