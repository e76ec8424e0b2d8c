// test_train.cpp — the training stack end to end on tiny models: a GPT overfits a fixed batch;
// the LR schedule and AdamW grouping; checkpoints resume bit-identically (in process, and after
// a process killed mid-run); bad input of every kind gives a clear error and a non-zero exit
// without half-written files. CLI cases run the real `posgrad` binary ($POSGRAD_BIN).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "autograd/ops.h"
#include "support/test_util.h"
#include "train/checkpoint.h"
#include "data/fileio.h"
#include "train/presets.h"
#include "train/safetensors.h"
#include "train/trainer.h"

using namespace posgrad;
using posgrad::test::TempDir;
namespace fs = std::filesystem;

namespace {

// A small synthetic corpus (no external data needed): repeated, slightly varied lines.
std::string write_corpus(const TempDir& d, int lines = 400) {
  std::ostringstream os;
  for (int i = 0; i < lines; ++i) os << "the quick brown fox " << (i % 7) << " jumps over the lazy dog " << (i % 5) << ".\n";
  std::string p = d.str("corpus.txt");
  std::ofstream(p) << os.str();
  return p;
}

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

struct Proc {
  int status = -1;
  std::string out;
};

// Runs the posgrad binary with args; returns exit status and combined output.
Proc run_cli(const std::string& args) {
  Proc p;
  std::string cmd = test::bin_path() + " " + args + " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) p.out.append(buf, n);
  int st = pclose(f);
  p.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return p;
}

#define REQUIRE_BIN()                                                                   \
  do {                                                                                  \
    if (test::bin_path().empty() || !fs::exists(test::bin_path()))                      \
      GTEST_SKIP() << "the posgrad binary was not found (set POSGRAD_BIN)";             \
  } while (0)

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
  for (const std::string pos : {"learned", "rope", "alibi", "t5", "deberta", "sinusoidal", "none"}) {
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

TEST(Checkpoint, ResumeIsBitIdentical) {
  TempDir a, b;
  auto ca = tiny_config(a), cb = tiny_config(b);
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

TEST(Cli, KilledMidRunResumesToTheSameWeights) {
  REQUIRE_BIN();
  TempDir d;
  std::string corpus = write_corpus(d);
  std::string common = "train --preset tiny --max-iters 60 --checkpoint-interval 10 --log-interval 1 --threads 2 --corpus " + corpus;
  ASSERT_EQ(run_cli(common + " --out-dir " + d.str("full")).status, 0);
  // Start the same run, kill it (SIGKILL) once a checkpoint exists, then resume.
  pid_t pid = fork();
  if (pid == 0) {
    std::string cmd = test::bin_path() + " " + common + " --out-dir " + d.str("killed") + " >/dev/null 2>&1";
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), nullptr);
    _exit(127);
  }
  for (int i = 0; i < 600 && !fs::exists(d.str("killed/checkpoint/state.json")); ++i) usleep(20000);
  usleep(50000);
  kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  Proc r = run_cli(common + " --out-dir " + d.str("killed") + " --resume");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(read_file(d.str("full/checkpoint/model.safetensors")),
            read_file(d.str("killed/checkpoint/model.safetensors")));
}

TEST(Cli, BadInputGivesClearErrorsAndNonZeroExit) {
  REQUIRE_BIN();
  TempDir d;
  std::string corpus = write_corpus(d);
  std::string empty = d.str("empty.txt");
  std::ofstream(empty).close();
  std::string tiny_text = d.str("short.txt");
  std::ofstream(tiny_text) << "abc";
  struct Case { std::string args, expect; };
  const std::string base = "train --preset tiny --max-iters 1 --out-dir " + d.str("r") + " ";
  for (const Case& c : {Case{base + "--corpus " + d.str("missing.txt"), "missing.txt"},
                        Case{base + "--corpus " + empty, "empty"},
                        Case{base + "--corpus " + tiny_text, "short"},
                        Case{base + "--corpus " + corpus + " --pos bogus", "bogus"},
                        Case{base + "--corpus " + corpus + " --lr -1", "learning rate"},
                        Case{base + "--corpus " + corpus + " --lr 0", "learning rate"},
                        Case{base + "--corpus " + corpus + " --n-embd 30 --n-head 4", "divisible"},
                        Case{base + "--corpus " + corpus + " --batch-size 0", "batch_size"},
                        Case{base + "--corpus " + corpus + " --dropout 1.5", "dropout"},
                        Case{base + "--corpus " + corpus + " --device cuda:0", "CUDA"},
                        Case{"train --resume --out-dir " + d.str("nothing-here") + " --corpus " + corpus, "checkpoint"},
                        Case{"eval --run " + d.str("nothing-here"), "checkpoint"}}) {
    if (c.expect == "CUDA" && cuda_available()) continue;
    Proc p = run_cli(c.args);
    EXPECT_NE(p.status, 0) << c.args << "\n" << p.out;
    EXPECT_LT(p.status, 128) << "crashed: " << c.args << "\n" << p.out;
    std::string lower = p.out;
    for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    std::string want = c.expect;
    for (auto& ch : want) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    EXPECT_NE(lower.find(want), std::string::npos) << c.args << "\n" << p.out;
  }
  // No half-written checkpoint was left behind by the failed runs.
  EXPECT_FALSE(fs::exists(d.str("r/checkpoint.tmp")));
}

TEST(Cli, NonFiniteLossStopsAndKeepsLastGoodCheckpoint) {
  REQUIRE_BIN();
  TempDir d;
  std::string corpus = write_corpus(d);
  // Plain SGD with an absurd learning rate and no clipping diverges within a few steps.
  Proc p = run_cli("train --preset tiny --optimizer sgd --momentum 0 --lr 1e12 --grad-clip 0 --warmup-iters 0 "
                   "--max-iters 200 --checkpoint-interval 1 --eval-interval 1000 --corpus " + corpus + " --out-dir " +
                   d.str("r"));
  EXPECT_NE(p.status, 0) << p.out;
  EXPECT_NE(p.out.find("at step"), std::string::npos) << p.out;
  ASSERT_TRUE(fs::exists(d.str("r/checkpoint/state.json"))) << p.out;
  // The kept checkpoint loads (it is the last finite one).
  EXPECT_NO_THROW(train::read_checkpoint(d.str("r")));
}

TEST(Cli, TrainEvalSampleAndConfigFile) {
  REQUIRE_BIN();
  TempDir d;
  std::string corpus = write_corpus(d);
  std::string cfg = d.str("cfg.json");
  std::ofstream(cfg) << "{\"max-iters\": 4, \"pos\": \"rope\", \"lr\": 0.002}";
  Proc t = run_cli("train --preset tiny --config " + cfg + " --corpus " + corpus + " --out-dir " + d.str("r"));
  ASSERT_EQ(t.status, 0) << t.out;
  auto saved = nlohmann::json::parse(read_file(d.str("r/config.json")));
  EXPECT_EQ(saved["max_iters"], 4);
  EXPECT_EQ(saved["model"]["pos"]["kind"], "rope");
  EXPECT_DOUBLE_EQ(saved["lr"].get<double>(), 0.002);
  Proc e = run_cli("eval --run " + d.str("r") + " --contexts 16,32 --windows 2");
  EXPECT_EQ(e.status, 0) << e.out;
  EXPECT_NE(e.out.find("perplexity"), std::string::npos) << e.out;
  Proc s = run_cli("sample --run " + d.str("r") + " --tokens 20 --prompt the");
  EXPECT_EQ(s.status, 0) << s.out;
  Proc bad = run_cli("train --config " + d.str("missing.json"));
  EXPECT_NE(bad.status, 0);
}
