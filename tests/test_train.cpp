// test_train.cpp — the training stack end to end on tiny models: a GPT overfits a fixed batch;
// the LR schedule and AdamW grouping; checkpoints resume bit-identically in process. The
// command-line cases (the posgrad binary: options, resume, interrupts, errors) are in test_cli.cpp.
#include <gtest/gtest.h>

#include <thread>

#include <functional>

#include <omp.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "autograd/ops.h"
#include "data/fileio.h"
#include "support/test_util.h"
#include "train/checkpoint.h"
#include "train/options.h"
#include "train/presets.h"
#include "train/safetensors.h"
#include "train/threads.h"
#include "train/trainer.h"

using namespace posgrad;
using posgrad::test::TempDir;
namespace fs = std::filesystem;

namespace {

using posgrad::test::write_corpus;

train::TrainConfig tiny_config(const TempDir& d, const std::string& pos = "learned") {
  train::TrainConfig c = train::train_preset("tiny");
  c.corpus = write_corpus(d);
  c.out_dir = d.str("run");
  c.model.pos.kind = pos;
  c.threads = 2;
  return c;
}

std::vector<float> weights(const nn::Module& m) {
  std::vector<float> all;
  for (auto& [n, t] : m.named_parameters()) {
    auto v = t.to_float_vector();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

}  // namespace

TEST(Schedule, WarmupThenCosineToMin) {
  train::LRSchedule s{1e-3, 1e-4, 100, 2000, true};
  EXPECT_NEAR(s.at(0), 1e-3 / 101, 1e-12);
  EXPECT_NEAR(s.at(99), 1e-3 * 100 / 101, 1e-12);
  EXPECT_NEAR(s.at(100), 1e-3, 1e-12);
  EXPECT_NEAR(s.at(1050), 1e-4 + 0.5 * (1e-3 - 1e-4), 1e-9);
  EXPECT_NEAR(s.at(2000), 1e-4, 1e-12);
  EXPECT_NEAR(s.at(5000), 1e-4, 1e-12);
}

TEST(Optim, DecayOnlyOnMatrices) {
  Generator g(1), d(2);
  TempDir tmp;
  auto cfg = tiny_config(tmp);
  cfg.model.vocab_size = 10;
  nn::GPT model(cfg.model, g, d);
  auto groups = train::decay_groups(model.named_parameters(), 0.1);
  ASSERT_EQ(groups.size(), 2u);
  for (auto& [n, p] : groups[0].params) EXPECT_GE(p.dim(), 2) << n;
  for (auto& [n, p] : groups[1].params) EXPECT_EQ(p.dim(), 1) << n;
  EXPECT_EQ(groups[1].weight_decay, 0.0);
}

// AdamW(params, options): PyTorch's construction, the options' weight decay on every parameter —
// the same steps as one group given that decay. PyTorch's default weight decay is 1e-2.
TEST(Optim, AdamWFromParamsUsesTheOptionsWeightDecay) {
  EXPECT_EQ(train::AdamWOptions().weight_decay(), 1e-2);
  EXPECT_EQ(train::AdamWOptions(2e-3).betas(0.8, 0.9).eps(1e-6).weight_decay(0.5).beta2(), 0.9);
  auto param = [] {
    Tensor w = Tensor::from_vector(std::vector<float>{1, -2, 3, 0.5f}, {2, 2});
    w.set_requires_grad(true);
    return w;
  };
  Tensor a = param(), b = param();
  train::AdamW from_params(nn::NamedTensors{{"w", a}}, train::AdamWOptions(0.1).weight_decay(0.3));
  train::AdamW from_group({train::ParamGroup{{{"w", b}}, 0.3}}, train::AdamWOptions(0.1));
  auto step = [](Tensor& w, train::Optimizer& opt) {
    opt.zero_grad();
    (w * w).backward(Tensor::ones({2, 2}));
    opt.step();
  };
  for (int i = 0; i < 3; ++i) {
    step(a, from_params);
    step(b, from_group);
  }
  EXPECT_EQ(a.to_float_vector(), b.to_float_vector());
  EXPECT_NE(a.to_float_vector(), param().to_float_vector());
}

TEST(Optim, ATensorInTwoGroupsIsRejectedNamingBoth) {
  Tensor w = Tensor::from_vector(std::vector<float>{1, -2, 3, 0.5f}, {2, 2});
  Tensor other = Tensor::from_vector(std::vector<float>{1, 2}, {2});
  const std::vector<train::ParamGroup> groups{{{{"blocks.0.w", w}, {"bias", other}}, 0.1}, {{{"tied", w}}, 0.0}};
  try {
    train::AdamW opt(groups, train::AdamWOptions(0.1));
    FAIL() << "a tensor listed twice was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'blocks.0.w' and 'tied' are the same tensor"), std::string::npos) << e.what();
  }
  EXPECT_THROW(train::SGD({{{{"a", other}, {"b", other}}, 0.0}}, train::SGDOptions(0.1)), ValueError);
  // Distinct tensors, and empty ones (no data to share), are fine.
  Tensor e1 = Tensor::zeros({0}), e2 = Tensor::zeros({0});
  EXPECT_NO_THROW(train::AdamW({{{{"w", w}, {"bias", other}, {"e1", e1}, {"e2", e2}}, 0.1}}, train::AdamWOptions(0.1)));
}

TEST(Optim, ClipGradNormScalesToMax) {
  Tensor a = Tensor::from_vector(std::vector<float>{3, 4}, {2});
  a.set_requires_grad(true);
  (a * a).backward(Tensor::from_vector(std::vector<float>{0.5, 0.5}, {2}));  // grad = a = (3, 4), norm 5
  double n = train::clip_grad_norm({a}, 1.0);
  EXPECT_NEAR(n, 5.0, 1e-6);
  auto g = a.grad().to_vector();
  EXPECT_NEAR(std::hypot(g[0], g[1]), 1.0, 1e-5);
}

TEST(Model, TinyGptOverfitsOneBatch) {
  for (const std::string& pos : nn::position_encoding_kinds()) {
    Generator g(3), d(4);
    nn::GPTConfig mc;
    mc.vocab_size = 11;
    mc.block_size = 8;
    mc.n_layer = 1;
    mc.n_head = 2;
    mc.n_embd = 16;
    mc.pos.kind = pos;
    nn::GPT model(mc, g, d);
    std::vector<int64_t> xs, ys;
    for (int i = 0; i < 2 * 8; ++i) {
      xs.push_back((i * 7 + 3) % 11);
      ys.push_back((i * 5 + 1) % 11);
    }
    Tensor x = Tensor::from_ints(xs, {2, 8}), y = Tensor::from_ints(ys, {2, 8});
    train::AdamW opt(train::decay_groups(model.named_parameters(), 0.0), train::AdamWOptions(1e-2));
    double first = 0, last = 0;
    for (int it = 0; it < 150; ++it) {
      opt.zero_grad();
      Tensor loss = cross_entropy(model.forward(x), y);
      if (it == 0) first = loss.item();
      last = loss.item();
      loss.backward();
      opt.step();
    }
    EXPECT_LT(last, 0.1 * first) << pos << ": loss " << first << " -> " << last;
  }
}

TEST(Model, LearnedPositionsBeyondTableIsAnError) {
  Generator g(3), d(4);
  nn::GPTConfig mc;
  mc.vocab_size = 11;
  mc.block_size = 8;
  mc.n_layer = 1;
  mc.n_head = 2;
  mc.n_embd = 16;
  mc.pos.kind = "learned";
  nn::GPT model(mc, g, d);
  Tensor x = Tensor::zeros({1, 9}, DType::Int64);
  try {
    model.forward(x);
    FAIL() << "expected IndexError";
  } catch (const IndexError& e) {
    EXPECT_NE(std::string(e.what()).find("8"), std::string::npos) << e.what();
  }
}

// Interrupted at step 7 and resumed from the checkpoint of step 5: the same weights and metrics as
// the uninterrupted run, bit for bit. `setup` picks the model (encoding, options, attention sinks).
void check_resume_is_bit_identical(const std::function<void(train::TrainConfig&)>& setup, const std::string& what) {
  SCOPED_TRACE(what);
  TempDir a, b;
  auto ca = tiny_config(a), cb = tiny_config(b);
  setup(ca);
  setup(cb);
  ca.checkpoint_interval = cb.checkpoint_interval = 5;
  cb.corpus = ca.corpus;
  {
    train::Trainer t(ca, false);
    t.run();
  }
  {
    train::Trainer t(cb, false);
    t.run(/*stop_after=*/7);  // killed after step 7; last checkpoint at step 5
  }
  train::Trainer resumed(cb, true);
  EXPECT_EQ(resumed.current_step(), 5);
  resumed.run();
  train::Trainer ref(ca, true);  // loads the uninterrupted final checkpoint
  EXPECT_EQ(weights(ref.model()), weights(resumed.model()));
  // The metrics of the resumed run equal those of the uninterrupted one (timings aside).
  auto strip = [](const std::string& text) {
    std::istringstream in(text);
    std::string line, out;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      j.erase("tokens_per_s");
      out += j.dump() + "\n";
    }
    return out;
  };
  EXPECT_EQ(strip(read_file(a.str("run/metrics.jsonl"))), strip(read_file(b.str("run/metrics.jsonl"))));
}

TEST(Checkpoint, ResumeIsBitIdentical) {
  check_resume_is_bit_identical([](train::TrainConfig&) {}, "learned");
}

// The encodings of SPEC-positions-2 part 1 and the attention sinks (a parameter per layer that the
// checkpoint and AdamW state must carry).
TEST(Checkpoint, ResumeIsBitIdenticalForXposSandwichPRopeAndSinks) {
  check_resume_is_bit_identical([](train::TrainConfig& c) { c.model.pos.kind = "xpos"; }, "xpos");
  check_resume_is_bit_identical([](train::TrainConfig& c) { c.model.pos.kind = "sandwich"; }, "sandwich");
  check_resume_is_bit_identical(
      [](train::TrainConfig& c) {
        c.model.pos.kind = "rope";
        c.model.pos.set("rope_partial", std::string("prope"));
        c.model.pos.set("rope_fraction", 0.5);
      },
      "rope prope");
  check_resume_is_bit_identical(
      [](train::TrainConfig& c) {
        c.model.pos.kind = "alibi";
        c.model.attention_sinks = true;
      },
      "alibi + attention sinks");
}

// The newer encodings with parameters of their own (FIRE's MLP, FoX's gates, CoPE's tables) and the
// per-layer hybrid.
TEST(Checkpoint, ResumeIsBitIdenticalForFireHybridFoxAndCope) {
  for (const char* kind : {"fire", "hybrid", "fox", "cope"})
    check_resume_is_bit_identical([kind](train::TrainConfig& c) { c.model.pos.kind = kind; }, kind);
}

TEST(Checkpoint, CorruptTruncatedAndMismatchedAreErrors) {
  TempDir d;
  auto c = tiny_config(d);
  c.max_iters = 2;
  {
    train::Trainer t(c, false);
    t.run();
  }
  const std::string model = d.str("run/checkpoint/model.safetensors");
  std::string bytes = read_file(model);
  // flipped byte -> checksum mismatch
  std::string bad = bytes;
  bad[bad.size() - 3] ^= 0x5a;
  std::ofstream(model, std::ios::binary) << bad;
  EXPECT_THROW(train::Trainer(c, true), IoError);
  // truncated
  std::ofstream(model, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  EXPECT_THROW(train::Trainer(c, true), IoError);
  std::ofstream(model, std::ios::binary) << bytes;
  EXPECT_NO_THROW(train::Trainer(c, true));
  // a state.json that is not JSON
  std::ofstream(d.str("run/checkpoint/state.json")) << "{ not json";
  EXPECT_THROW(train::Trainer(c, true), IoError);
  // no checkpoint at all
  TempDir e;
  auto ce = tiny_config(e);
  EXPECT_THROW(train::Trainer(ce, true), IoError);
}

TEST(Checkpoint, MismatchedModelIsAnError) {
  TempDir d;
  auto c = tiny_config(d);
  c.max_iters = 1;
  {
    train::Trainer t(c, false);
    t.run();
  }
  // Weights of a wider model cannot be loaded into this one.
  train::LoadedCheckpoint ck = train::read_checkpoint(d.str("run"));
  Generator g(1), dg(2);
  nn::GPTConfig other = train::TrainConfig::from_json(ck.state.config).model;
  other.n_embd = 32;
  nn::GPT m(other, g, dg);
  EXPECT_THROW(m.load_state_dict(ck.model), IoError);
}

// ---- the thread count under load (train/threads.h) ---------------------------------------------

TEST(Threads, ProcStatSumsTheListedCpus) {
  // proc(5): cpuN user nice system idle iowait irq softirq steal guest guest_nice, in clock ticks.
  const std::string stat =
      "cpu  300 40 60 900 10 2 3 5 7 0\n"
      "cpu0 100 10 20 400 5 1 1 2 7 0\n"
      "cpu1 200 30 40 500 5 1 2 3 0 0\n"
      "intr 12345 0 0\nctxt 999\n";
  auto both = train::parse_proc_stat(stat, {}, 100.0);
  ASSERT_TRUE(both.has_value());
  // busy = user + nice + system + irq + softirq + steal; total = user..steal (guest is inside user).
  EXPECT_DOUBLE_EQ(both->busy, ((100 + 10 + 20 + 1 + 1 + 2) + (200 + 30 + 40 + 1 + 2 + 3)) / 100.0);
  EXPECT_DOUBLE_EQ(both->total,
                   ((100 + 10 + 20 + 400 + 5 + 1 + 1 + 2) + (200 + 30 + 40 + 500 + 5 + 1 + 2 + 3)) / 100.0);
  auto one = train::parse_proc_stat(stat, {1}, 100.0);
  ASSERT_TRUE(one.has_value());
  EXPECT_DOUBLE_EQ(one->busy, (200 + 30 + 40 + 1 + 2 + 3) / 100.0);
  // Older kernels print only the first four columns.
  auto old = train::parse_proc_stat("cpu0 10 0 10 80\n", {}, 100.0);
  ASSERT_TRUE(old.has_value());
  EXPECT_DOUBLE_EQ(old->busy, 0.2);
  EXPECT_DOUBLE_EQ(old->total, 1.0);
  EXPECT_FALSE(train::parse_proc_stat(stat, {5}, 100.0).has_value());         // not a listed CPU
  EXPECT_FALSE(train::parse_proc_stat("cpu0 1 2\n", {}, 100.0).has_value());  // malformed
  EXPECT_FALSE(train::parse_proc_stat("", {}, 100.0).has_value());
}

TEST(Threads, FewerThreadsForTheCoresOthersKeepBusy) {
  EXPECT_EQ(train::threads_for_load(2, 0.0), 2);
  EXPECT_EQ(train::threads_for_load(2, 0.3), 2);
  EXPECT_EQ(train::threads_for_load(2, 0.67), 1);  // a busy loop sharing two cores with our two threads
  EXPECT_EQ(train::threads_for_load(2, 1.0), 1);
  EXPECT_EQ(train::threads_for_load(2, 5.0), 1);  // never fewer than one
  EXPECT_EQ(train::threads_for_load(16, 3.4), 13);
  EXPECT_EQ(train::threads_for_load(4, -1.0), 4);
}

TEST(Threads, AnExplicitCountIsKept) {
  const int saved = omp_get_max_threads();
  {
    train::ThreadGovernor g(3);
    EXPECT_FALSE(g.adaptive());
    EXPECT_EQ(g.threads(), 3);
    EXPECT_EQ(omp_get_max_threads(), 3);
    g.between_steps();
    EXPECT_EQ(omp_get_max_threads(), 3);
  }
  omp_set_num_threads(saved);
}

// The jobs of compare --jobs share the process's threads; those still training take a finished job's.
TEST(Threads, JobsShareTheThreadsAndTakeTheFreedOnes) {
  EXPECT_EQ(train::job_share(2, 2, 0), 1);
  EXPECT_EQ(train::job_share(2, 2, 1), 1);
  EXPECT_EQ(train::job_share(2, 1, 1), 2);  // the other job ended
  EXPECT_EQ(train::job_share(5, 2, 0), 3);  // the remainder to the first jobs
  EXPECT_EQ(train::job_share(5, 2, 1), 2);
  EXPECT_EQ(train::job_share(2, 4, 3), 1);  // more jobs than threads: one each
  EXPECT_EQ(train::job_share(3, 0, 0), 3);
  // Two jobs on 4 threads, each on a thread of its own: 2 each; job 0 ends, job 1 takes 4 at its next
  // step, even after a Trainer's fixed count set fewer. A thread that is no job is left alone.
  train::begin_job_share(4, 2);
  int first = 0, alone = 0, after_governor = 0;
  std::thread a([&] {
    train::begin_job(0);
    first = omp_get_max_threads();
    train::end_job();
  });
  a.join();
  std::thread b([&] {
    train::begin_job(1);
    train::ThreadGovernor fixed(1);  // a unit's Trainer with --threads 1
    fixed.between_steps();           // follows the share: 4
    after_governor = omp_get_max_threads();
    omp_set_num_threads(1);
    train::follow_job_share();
    alone = omp_get_max_threads();
    train::end_job();
  });
  b.join();
  EXPECT_EQ(first, 2);
  EXPECT_EQ(after_governor, 4);
  EXPECT_EQ(alone, 4);
  const int saved = omp_get_max_threads();
  train::follow_job_share();  // not a job
  EXPECT_EQ(omp_get_max_threads(), saved);
  // Three jobs on 3 threads; job 0 ends: jobs 1 and 2 are now the first and second of two, so they
  // take 2 and 1 (all 3 threads), whatever their indices were.
  train::begin_job_share(3, 3);
  int second = 0, third = 0;
  std::thread j0([] {
    train::begin_job(0);
    train::end_job();
  });
  j0.join();
  std::thread j1([&] {
    train::begin_job(1);
    train::follow_job_share();
    second = omp_get_max_threads();
    train::end_job();
  });
  j1.join();
  std::thread j2([&] {
    train::begin_job(2);  // job 1 has ended too: all 3 threads
    third = omp_get_max_threads();
    train::end_job();
  });
  j2.join();
  EXPECT_EQ(second, 2);
  EXPECT_EQ(third, 3);
}

// The governor may change the thread count between any two steps; the weights must not notice.
TEST(Threads, TrainingIsBitIdenticalWhateverTheThreadCount) {
  const int saved = omp_get_max_threads();
  for (const std::string pos : {"learned", "rope", "t5", "deberta", "alibi"}) {
    std::vector<std::vector<float>> runs;
    for (int pattern = 0; pattern < 2; ++pattern) {
      TempDir d;
      auto c = tiny_config(d, pos);
      c.model.n_layer = 2, c.model.n_head = 4, c.model.n_embd = 64, c.model.block_size = 32;
      c.batch_size = 8;
      train::Trainer t(c, false);
      for (int s = 0; s < 4; ++s) {
        omp_set_num_threads(pattern == 0 ? 2 : 1 + s % 2);  // fixed 2 | 1, 2, 1, 2
        t.step();
      }
      runs.push_back(weights(t.model()));
    }
    EXPECT_EQ(runs[0], runs[1]) << pos << ": weights depend on the thread count";
  }
  omp_set_num_threads(saved);
}

// On the CPU the exact GELU keeps 1 + erf of its (B, T, 4C) input per layer for the backward: the
// estimate counts it there and not on a GPU.
TEST(MemoryEstimate, CountsTheGeluErfKeptOnTheCpu) {
  train::TrainConfig c;
  c.batch_size = 4;
  c.device = "cpu";
  const train::MemoryEstimate cpu = train::estimate_memory(c, 512);
  c.device = "cuda";
  const train::MemoryEstimate gpu = train::estimate_memory(c, 512);
  const long double B = 4, T = static_cast<long double>(c.model.block_size),
                    C = static_cast<long double>(c.model.n_embd), L = static_cast<long double>(c.model.n_layer);
  EXPECT_NEAR(static_cast<double>(cpu.activation_bytes - gpu.activation_bytes),
              static_cast<double>(B * T * L * 4 * C * 4), 1.0);
}

// The encodings whose attention path materialises O(T^2) tensors count them (PosEncEntry::
// attention_bytes): per layer with the graph in training, one layer of 8 windows in evaluation.
TEST(MemoryEstimate, MaterialisingEncodingsCountTheirQuadraticTensors) {
  train::TrainConfig c;
  c.model.block_size = 256;
  c.batch_size = 4;
  c.model.pos.kind = "rope";
  const train::MemoryEstimate rope = train::estimate_memory(c, 512);
  c.model.pos.kind = "cope";
  const train::MemoryEstimate cope = train::estimate_memory(c, 512);
  const long double H = static_cast<long double>(c.model.n_head), L = static_cast<long double>(c.model.n_layer);
  const long double train_entries = 4 * H * 256 * 256, eval_entries = 8 * H * 512 * 512;
  EXPECT_NEAR(static_cast<double>(cope.activation_bytes - rope.activation_bytes),
              static_cast<double>(L * train_entries * 32), 1.0);
  EXPECT_NEAR(static_cast<double>(cope.evaluation_bytes - rope.evaluation_bytes),
              static_cast<double>(eval_entries * 16), 1.0);
  c.model.pos.kind = "fire";
  const train::MemoryEstimate fire = train::estimate_memory(c, 512);
  EXPECT_GT(fire.activation_bytes, rope.activation_bytes);
  // A CoPE configuration no machine holds is refused before anything is built, naming the batch size.
  c.model.pos.kind = "cope";
  c.model.block_size = 16384;
  c.batch_size = 64;
  EXPECT_NE(test::thrown_message<UsageError>([&] { train::check_memory(c, 16384); }).find("--batch-size"),
            std::string::npos);
}

// --precision bf16 (kernels::MatmulPrecision): the trainer multiplies in bf16 for its lifetime and
// restores the setting after; the run is reproducible bit for bit, independent of the thread count,
// records its precision, learns like fp32 (loss within a few percent after 30 steps) without being
// fp32 (the weights differ); a resume cannot change it; CUDA refuses it.
TEST(MixedPrecision, Bf16TrainingIsReproducibleCloseToFp32AndRecorded) {
  const int saved = omp_get_max_threads();
  const auto run = [](const std::string& precision, int threads_pattern, double* loss) {
    TempDir d;
    auto c = tiny_config(d, "rope");
    c.model.n_layer = 2, c.model.n_head = 4, c.model.n_embd = 64, c.model.block_size = 32;
    c.batch_size = 8;
    c.precision = precision;
    c.max_iters = 30;
    std::vector<float> w;
    {
      train::Trainer t(c, false);
      EXPECT_EQ(kernels::matmul_precision(), kernels::parse_matmul_precision(precision));
      for (int s = 0; s < 30; ++s) {
        omp_set_num_threads(threads_pattern == 0 ? 2 : 1 + s % 2);
        const double l = t.step().loss;
        if (loss) *loss = l;
      }
      w = weights(t.model());
    }
    EXPECT_EQ(kernels::matmul_precision(), kernels::MatmulPrecision::fp32) << "not restored after the trainer";
    return w;
  };
  double loss_fp32 = 0, loss_bf16 = 0;
  const auto fp32 = run("fp32", 0, &loss_fp32);
  const auto bf16 = run("bf16", 0, &loss_bf16);
  EXPECT_EQ(run("bf16", 1, nullptr), bf16) << "bf16 weights depend on the thread count";
  EXPECT_NE(fp32, bf16) << "--precision bf16 trained in fp32";
  EXPECT_NEAR(loss_bf16, loss_fp32, 0.05 * loss_fp32);
  omp_set_num_threads(saved);

  TempDir d;
  auto c = tiny_config(d);
  c.precision = "bf16";
  c.max_iters = 2;
  c.checkpoint_interval = 1;
  {
    train::Trainer t(c, false);
    t.run();
  }
  EXPECT_EQ(nlohmann::json::parse(read_file(d.str("run/config.json"))).at("precision"), "bf16");
  c.precision = "fp32";
  EXPECT_THROW(train::Trainer(c, true), UsageError);  // fixed on resume
}
